//! Reading a database file without writing a byte to it or beside it: the connections
//! that inspect a file before anything trusts it, and those of commands that only read.
//! It never opens a file for writing and never runs a statement that writes.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, Transaction};

use super::{SqliteFile, cipher};
use crate::error::{Error, Result};

/// How often a read is retried when writers keep coming and going underneath it.
const MAX_TRIES: usize = 8;

/// `<db><suffix>`: SQLite's side files sit beside the database, named after it.
pub(crate) fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Whether another connection may be writing (or crashed while writing): SQLite keeps
/// a `-wal` file for as long as a WAL database is open, and a `-journal` while a
/// rollback-mode write (such as the switch of a new file to WAL) is under way.
pub(crate) fn writer_present(path: &Path) -> bool {
    side_file(path, "-wal").exists() || side_file(path, "-journal").exists()
}

/// What identifies one version of the main file: a write to it (a checkpoint) moves
/// its modification time, and a replacement changes its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(path: &Path) -> Result<Stamp> {
        let meta = std::fs::metadata(path).map_err(|cause| Error::DatabaseIo {
            path: path.to_owned(),
            cause,
        })?;
        Ok(Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

/// Runs `f` in one read transaction on a read-only connection that leaves no trace.
///
/// A WAL database opened read-only the ordinary way gets `-wal` and `-shm` files
/// beside it (and cannot be opened at all in a folder the user cannot write to). So
/// when no writer is present, the main file is the whole database and is read through
/// an `immutable` URI, which takes no lock and creates nothing. Immutable means SQLite
/// trusts the file not to change: if a writer appeared during the read, or the main
/// file changed under it, what was read may mix two versions, and the read is done
/// again. With a writer present, its `-wal` holds committed data that must be read, so
/// the connection is an ordinary read-only one, which uses the side files it found. An
/// encrypted database is keyed before anything reads it, both ways.
pub(crate) fn read<T>(db: &SqliteFile, f: impl Fn(&Transaction<'_>) -> Result<T>) -> Result<T> {
    let path = db.path.as_path();
    for _ in 0..MAX_TRIES {
        if writer_present(path) {
            let mut conn = open(db, false)?;
            return super::read(&mut conn, &f);
        }
        let before = Stamp::of(path)?;
        let mut conn = open(db, true)?;
        let result = super::read(&mut conn, &f);
        drop(conn);
        if !writer_present(path) && Stamp::of(path)? == before {
            return result;
        }
    }
    Err(Error::DatabaseIo {
        path: path.to_owned(),
        cause: std::io::Error::other("it kept changing while being read; try again"),
    })
}

fn open(db: &SqliteFile, immutable: bool) -> Result<Connection> {
    let path = db.path.as_path();
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = if immutable {
        Connection::open_with_flags(immutable_uri(path)?, flags)
    } else {
        Connection::open_with_flags(path, flags)
    }
    .map_err(|e| cipher::opening(db, e))?;
    cipher::key(&conn, db.key.as_ref()).map_err(|e| cipher::opening(db, e))?;
    conn.busy_timeout(super::BUSY_TIMEOUT)
        .map_err(|e| cipher::opening(db, e))?;
    Ok(conn)
}

/// `file:<absolute path>?immutable=1`, the path percent-encoded as SQLite's URI
/// parser expects.
fn immutable_uri(path: &Path) -> Result<String> {
    const PATH: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'/')
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    let absolute = std::path::absolute(path).map_err(|source| Error::DatabaseIo {
        path: path.to_owned(),
        cause: source,
    })?;
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(absolute.as_os_str());
    Ok(format!(
        "file:{}?immutable=1",
        percent_encoding::percent_encode(bytes, PATH)
    ))
}
