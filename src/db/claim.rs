//! One owner per session on SQLite: a claim is an open-file-description byte-range lock
//! (`F_OFD_SETLK`) on the database file, at a byte derived from the session id, far
//! beyond the bytes SQLite locks. The kernel drops it when its holder's process ends,
//! however it ends. It writes no row, no byte of the file and no side file.
//!
//! Why OFD locks on one descriptor kept for the process's lifetime: closing any
//! descriptor of a file drops every POSIX record lock the process has on it, SQLite's
//! own included (they guard its WAL and its last-connection cleanup). So the descriptor
//! claims lock through is opened once per database file and never closed, and claims
//! of one process (which share it, so the kernel sees no conflict) are told apart by
//! the registry here.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::ids::SessionId;

/// The first byte a claim may lock: 2^62. SQLite locks the bytes from 2^30 on (its
/// pending byte, reserved byte and shared range, 512 bytes in all); a database never
/// reaches 2^62 bytes.
const BASE: i64 = 1 << 62;

/// How many bytes claims spread over: the low 60 bits of the id's random part, so two
/// sessions meet on one byte with a chance of about one in 10^18.
const SPAN: u64 = 1 << 60;

/// The database files this process claims sessions of, by device and inode: the
/// descriptor the locks are taken through, and which byte each claim of this process
/// holds.
struct Claimed {
    file: File,
    held: HashMap<i64, SessionId>,
}

fn registry() -> std::sync::MutexGuard<'static, HashMap<(u64, u64), Claimed>> {
    static REGISTRY: OnceLock<Mutex<HashMap<(u64, u64), Claimed>>> = OnceLock::new();
    // Every change under the lock is one map operation and a lock call; a panic
    // elsewhere leaves it consistent.
    REGISTRY
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// A session claimed on a SQLite database; dropping it releases the claim.
#[derive(Debug)]
pub(crate) struct SqliteClaim {
    key: (u64, u64),
    byte: i64,
    path: PathBuf,
}

/// The byte that stands for `session`: uuid v7 ids end in random bits.
fn byte_of(session: SessionId) -> i64 {
    let uuid = session.as_uuid();
    let bytes = uuid.as_bytes();
    let low = u64::from_be_bytes(bytes[8..16].try_into().expect("a uuid has 16 bytes"));
    BASE + (low % SPAN) as i64
}

/// The registry's key of the database at `path`, with the descriptor claims lock
/// through opened and registered if it was not (and then never closed).
fn descriptor(registry: &mut HashMap<(u64, u64), Claimed>, path: &Path) -> Result<(u64, u64)> {
    let io = |cause: std::io::Error| Error::DatabaseIo {
        path: path.to_owned(),
        cause,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    let key = (meta.dev(), meta.ino());
    if registry.contains_key(&key) {
        return Ok(key);
    }
    // A write lock needs a descriptor open for writing; nothing is written.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io)?;
    let opened = file.metadata().map_err(io)?;
    let key = (opened.dev(), opened.ino());
    match registry.entry(key) {
        // The path was replaced by a file already claimed through between the two
        // looks. This descriptor must not be closed either (see the header).
        std::collections::hash_map::Entry::Occupied(_) => std::mem::forget(file),
        std::collections::hash_map::Entry::Vacant(place) => {
            place.insert(Claimed {
                file,
                held: HashMap::new(),
            });
        }
    }
    Ok(key)
}

/// Claims `session` on the database at `path`, which the caller opened for writing.
pub(crate) fn claim(path: &Path, session: SessionId) -> Result<SqliteClaim> {
    let io = |cause: std::io::Error| Error::DatabaseIo {
        path: path.to_owned(),
        cause,
    };
    let byte = byte_of(session);
    let mut registry = registry();
    let key = descriptor(&mut registry, path)?;
    let claimed = registry.get_mut(&key).expect("registered by `descriptor`");
    if claimed.held.contains_key(&byte) {
        return Err(Error::SessionOpenElsewhere { session });
    }
    match lock(&claimed.file, byte, libc::F_WRLCK) {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
            return Err(Error::SessionOpenElsewhere { session });
        }
        Err(e) => return Err(io(e)),
    }
    claimed.held.insert(byte, session);
    Ok(SqliteClaim {
        key,
        byte,
        path: path.to_owned(),
    })
}

/// Whether `session` is claimed on the database at `path`, by this process or another,
/// found without taking the claim (`F_OFD_GETLK`) through the claims' descriptor.
pub(crate) fn is_claimed(path: &Path, session: SessionId) -> Result<bool> {
    let byte = byte_of(session);
    let mut registry = registry();
    let key = descriptor(&mut registry, path)?;
    let claimed = registry.get(&key).expect("registered by `descriptor`");
    if claimed.held.contains_key(&byte) {
        return Ok(true);
    }
    held_elsewhere(&claimed.file, byte).map_err(|cause| Error::DatabaseIo {
        path: path.to_owned(),
        cause,
    })
}

/// `F_OFD_GETLK` of one byte: whether another open file description holds it.
fn held_elsewhere(file: &File, byte: i64) -> std::io::Result<bool> {
    let range = fcntl(file, libc::F_OFD_GETLK, byte, libc::F_WRLCK)?;
    Ok(range.l_type != libc::F_UNLCK as libc::c_short)
}

impl Drop for SqliteClaim {
    fn drop(&mut self) {
        let mut registry = registry();
        if let Some(claimed) = registry.get_mut(&self.key) {
            claimed.held.remove(&self.byte);
            if let Err(e) = lock(&claimed.file, self.byte, libc::F_UNLCK) {
                // The lock then ends with the process; nothing else can be done here.
                tracing::warn!(
                    "cannot release a session claim on {}: {e}",
                    self.path.display()
                );
            }
        }
    }
}

/// `F_OFD_SETLK` of one byte: taken at once or refused, never waited for.
fn lock(file: &File, byte: i64, kind: libc::c_int) -> std::io::Result<()> {
    fcntl(file, libc::F_OFD_SETLK, byte, kind).map(drop)
}

/// The OFD lock command `command` on the one byte `byte`, of lock type `kind`; the
/// range as the call left it.
fn fcntl(
    file: &File,
    command: libc::c_int,
    byte: i64,
    kind: libc::c_int,
) -> std::io::Result<libc::flock> {
    // SAFETY: `flock` is plain data; all-zero is a valid value (OFD locks require
    // `l_pid` to be 0), filled in below.
    let mut range: libc::flock = unsafe { std::mem::zeroed() };
    range.l_type = kind as libc::c_short;
    range.l_whence = libc::SEEK_SET as libc::c_short;
    range.l_start = byte;
    range.l_len = 1;
    // SAFETY: the descriptor is open for as long as `file` lives, and `range` is a
    // valid `flock` the call may write to.
    if unsafe { libc::fcntl(file.as_raw_fd(), command, &mut range) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(range)
}
