//! Reading a database file without writing a byte to it or beside it: the connections
//! that inspect a file before anything trusts it, and those of commands that only read.
//! It never opens a file for writing and never runs a statement that writes; the one
//! copy it makes (of a `-wal` left without its `-shm`) goes to a private temporary
//! folder, never beside the database.

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

const SIDE_FILES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// Refuses a database whose `-wal`, `-shm` or `-journal` is there and is not a regular
/// file (SQLite reads them with blocking calls: a FIFO would hang any command), looked
/// for beside the path given and, for a symbolic link, beside its target, where SQLite
/// looks. A side file that is a link is refused wherever it leads: a dangling one would
/// have a writer create a file elsewhere, one to another database's WAL would mix the
/// two. Only `lstat` is called.
pub(crate) fn check_side_files(path: &Path) -> Result<()> {
    let mut bases = vec![path.to_owned()];
    if std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink())
        && let Ok(target) = std::fs::canonicalize(path)
        && target != path
    {
        bases.push(target);
    }
    for base in &bases {
        for suffix in SIDE_FILES {
            let side = side_file(base, suffix);
            let meta = match std::fs::symlink_metadata(&side) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(cause) => return Err(Error::DatabaseIo { path: side, cause }),
            };
            if let Some(what) = not_regular(&meta.file_type()) {
                return Err(not_regular_side(path, &side, what));
            }
        }
    }
    Ok(())
}

/// What a file that is not a regular one is, in words; `None` for a regular file.
fn not_regular(kind: &std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    let what = if kind.is_file() {
        return None;
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_fifo() {
        "a named pipe (fifo)"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "a special file"
    };
    Some(what)
}

/// Whether another connection may be writing (or crashed while writing): SQLite keeps
/// a `-wal` while a WAL database is open, a `-journal` during a rollback-mode write.
pub(crate) fn writer_present(path: &Path) -> bool {
    side_file(path, "-wal").exists() || side_file(path, "-journal").exists()
}

/// One version of the main file: a checkpoint moves its times, a replacement its inode.
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
/// beside it. So when no writer is present, the main file is the whole database and is
/// read through an `immutable` URI, which takes no lock and creates nothing; SQLite
/// then trusts the file not to change, so if a writer appeared or the main file changed
/// during the read, what was read may mix two versions and the read is done again.
/// With a writer present, its `-wal` holds committed data, so the connection is an
/// ordinary read-only one. A `-wal` with no `-shm` has no live writer (a crash, or a
/// copy of the two files): a read-only connection would build a `-shm` beside it, so
/// the two are read from a private copy instead (`copy_of`).
pub(crate) fn read<T>(db: &SqliteFile, f: impl Fn(&Transaction<'_>) -> Result<T>) -> Result<T> {
    read_in(db, false, f)
}

/// [`read`] for a reader that hands on what it reads before the read ends (a streamed
/// restore), so it runs once: if the main file changed under an immutable read, the
/// read ends with an error saying so, since what it handed on cannot be taken back.
pub(crate) fn read_once<T>(
    db: &SqliteFile,
    f: impl FnOnce(&Transaction<'_>) -> Result<T>,
) -> Result<T> {
    let mut f = Some(f);
    read_in(db, true, |tx| {
        f.take().expect("each try that reads returns")(tx)
    })
}

fn read_in<T>(
    db: &SqliteFile,
    once: bool,
    mut f: impl FnMut(&Transaction<'_>) -> Result<T>,
) -> Result<T> {
    let path = db.path.as_path();
    for _ in 0..MAX_TRIES {
        if side_file(path, "-wal").exists() && !side_file(path, "-shm").exists() {
            match copy_of(db)? {
                Some(copy) => return super::read(&mut open(db, &copy.db(), false)?, f),
                None => continue,
            }
        }
        if writer_present(path) {
            return super::read(&mut open(db, path, false)?, f);
        }
        let before = Stamp::of(path)?;
        let result = super::read(&mut open(db, path, true)?, &mut f);
        let unchanged = Stamp::of(path)? == before;
        if once && !unchanged {
            break;
        }
        if once || (unchanged && !writer_present(path)) {
            return result;
        }
    }
    let cause = match once {
        true => "it changed while being read; try again",
        false => "it kept changing while being read; try again",
    };
    Err(Error::DatabaseIo {
        path: path.to_owned(),
        cause: std::io::Error::other(cause),
    })
}

/// A copy of a database whose `-wal` has no `-shm`, and of that `-wal`, in a private
/// `0700` temporary folder where SQLite may build the `-shm` it needs, removed when
/// dropped. `None` when the files changed while copied (a writer came) or the `-wal`
/// went (a writer's last connection removes `-shm`, then `-wal`, as it closes): the
/// caller looks again. A copy of files that did not change is one state of the database.
fn copy_of(db: &SqliteFile) -> Result<Option<Scratch>> {
    let path = db.path.as_path();
    let wal = side_file(path, "-wal");
    let Some(wal_before) = unless_gone(Stamp::of(&wal))? else {
        return Ok(None);
    };
    let before = (Stamp::of(path)?, wal_before);
    let scratch = Scratch::new(path)?;
    let copy = scratch.db();
    for (from, to, follow) in [
        (path.to_owned(), copy.clone(), true),
        (wal.clone(), side_file(&copy, "-wal"), false),
    ] {
        if unless_gone(copy_regular(path, &from, &to, follow))?.is_none() {
            return Ok(None);
        }
    }
    if side_file(path, "-shm").exists() {
        return Ok(None); // a writer came
    }
    let Some(wal_after) = unless_gone(Stamp::of(&wal))? else {
        return Ok(None);
    };
    let unchanged = (Stamp::of(path)?, wal_after) == before;
    Ok(unchanged.then_some(scratch))
}

/// Copies the regular file `from` (through a link only when `follow`) to the new file
/// `to` with its mode. Opened without blocking and checked on the descriptor, so a side
/// file that became a FIFO or a link after `check_side_files` is refused, never waited on.
fn copy_regular(db: &Path, from: &Path, to: &Path, follow: bool) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |cause| Error::DatabaseIo {
        path: from.to_owned(),
        cause,
    };
    let mut flags = libc::O_NONBLOCK;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let mut source = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(from)
    {
        Ok(file) => file,
        // O_NOFOLLOW's answer for a symbolic link.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(not_regular_side(db, from, "a symbolic link"));
        }
        Err(e) => return Err(io(e)),
    };
    let meta = source.metadata().map_err(io)?;
    if let Some(what) = not_regular(&meta.file_type()) {
        return Err(not_regular_side(db, from, what));
    }
    let mut target = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)
        .map_err(io)?;
    // Created with the mode less the umask; given the source's whole mode after.
    target.set_permissions(meta.permissions()).map_err(io)?;
    std::io::copy(&mut source, &mut target).map_err(io)?;
    Ok(())
}

/// The refusal of the database `db` for its file `file`, which is `what`.
fn not_regular_side(db: &Path, file: &Path, what: &str) -> Error {
    let detail = if file == db {
        format!("it is {what}, not a regular file")
    } else {
        format!(
            "its side file {} is {what}, not a regular file, so sessionstore leaves it alone",
            file.display()
        )
    };
    Error::NotDatabase {
        path: db.to_owned(),
        detail,
    }
}

/// `None` for a file that is not there (any more); the value, or any other error.
fn unless_gone<T>(result: Result<T>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(Error::DatabaseIo { cause, .. }) if cause.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// A private (`0700`) temporary folder, removed with what is in it when dropped (a
/// failure leaves a stray folder, never a wrong answer).
struct Scratch(tempfile::TempDir);

impl Scratch {
    /// Where the copy of the database goes.
    fn db(&self) -> PathBuf {
        self.0.path().join("db")
    }

    fn new(for_db: &Path) -> Result<Scratch> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("sessionstore-read-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|cause| Error::DatabaseIo {
                path: for_db.to_owned(),
                cause: std::io::Error::new(
                    cause.kind(),
                    format!("cannot make a folder to read a copy in: {cause}"),
                ),
            })?;
        Ok(Scratch(dir))
    }
}

/// A read-only connection to `path` (`db`'s file or a copy of it), keyed with `db`'s key.
fn open(db: &SqliteFile, path: &Path, immutable: bool) -> Result<Connection> {
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

/// `file:<absolute path>?immutable=1`, the path percent-encoded for SQLite's URI parser.
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Side files are looked at beside the path given and, for a database reached
    /// through a symbolic link, beside the file it leads to, where SQLite looks; a
    /// side file that is a link is refused even when it leads to a regular file.
    #[test]
    fn side_files_are_checked_beside_the_path_and_beside_a_links_target() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.db");
        std::fs::write(&real, b"").unwrap();
        let link = dir.path().join("link.db");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(check_side_files(&link).is_ok());
        std::fs::write(side_file(&real, "-wal"), b"").unwrap();
        assert!(check_side_files(&link).is_ok(), "a regular -wal is fine");
        std::fs::create_dir(side_file(&real, "-journal")).unwrap();
        let refused = check_side_files(&link).unwrap_err().to_string();
        assert!(
            refused.contains("real.db-journal is a directory"),
            "{refused}"
        );
        std::fs::remove_dir(side_file(&real, "-journal")).unwrap();
        std::os::unix::fs::symlink(side_file(&real, "-wal"), side_file(&link, "-shm")).unwrap();
        let refused = check_side_files(&link).unwrap_err().to_string();
        assert!(
            refused.contains("link.db-shm is a symbolic link"),
            "{refused}"
        );
    }

    /// A `-wal` that is gone by the time it would be copied (a writer's last
    /// connection removes its `-shm`, then its `-wal`, as it closes) makes no copy and
    /// no error: the caller looks again, and finds the main file whole.
    #[test]
    fn a_wal_gone_before_it_is_copied_is_a_closing_writer_not_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let db = SqliteFile::plain(&path);
        assert!(!side_file(&path, "-wal").exists());
        assert!(copy_of(&db).unwrap().is_none());
        // And with one there to copy, the copy is made.
        std::fs::write(side_file(&path, "-wal"), b"").unwrap();
        assert!(copy_of(&db).unwrap().is_some());
        // The read itself goes on to the main file once the `-wal` is gone.
        std::fs::remove_file(side_file(&path, "-wal")).unwrap();
        let n: i64 = read(&db, |tx| {
            tx.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .map_err(|e| crate::db::error::sqlite("count", e))
        })
        .unwrap();
        assert_eq!(n, 0);
    }
}
