//! SQLCipher (cargo feature `encryption`): keying a connection before anything reads
//! the file, a wrong key told from a plain or foreign file, and the changes of a
//! database's encryption (`change`). Without the feature a key is refused. Nothing here
//! writes a plaintext copy of an encrypted database: no `ATTACH` with an empty key is
//! issued, and SQLite's online backup cannot copy between an encrypted and a plain file.

use std::io::Read;
use std::path::Path;

use rusqlite::Connection;

use super::SqliteFile;
use crate::config::DatabaseKey;
use crate::error::Error;

/// Whether an SQLite file is encrypted, from its first bytes (no key needed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Encryption {
    /// No file there (yet), or an empty one.
    None,
    /// A plain SQLite database: its first 16 bytes are SQLite's header.
    Plain,
    /// Not SQLite's header, and a whole number of pages long: an encrypted database
    /// (or random bytes, which look the same without the key).
    Encrypted,
    /// Neither: not a database of either kind.
    Other,
}

/// The first 16 bytes of every plain SQLite database file.
pub(crate) const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The smallest page SQLCipher writes; every encrypted file is a whole number of them.
const MIN_PAGE: u64 = 512;

/// What the file at `path` looks like (`Encryption::None` when it cannot be read).
pub fn encryption_of(path: &Path) -> Encryption {
    let mut head = [0u8; 16];
    let Ok(mut file) = std::fs::File::open(path) else {
        return Encryption::None;
    };
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return Encryption::None;
    };
    if len == 0 {
        return Encryption::None;
    }
    if file.read_exact(&mut head).is_ok() && &head == MAGIC {
        return Encryption::Plain;
    }
    if len >= MIN_PAGE && len.is_multiple_of(MIN_PAGE) {
        Encryption::Encrypted
    } else {
        Encryption::Other
    }
}

/// Keys `conn`, just opened, with `key` (`None`: a plain file). A wrong key shows at
/// the first statement that reads ([`opening`]).
pub(crate) fn key(conn: &Connection, key: Option<&DatabaseKey>) -> rusqlite::Result<()> {
    let Some(key) = key else {
        return Ok(());
    };
    // The raw-key form (`x'…'`): no passphrase derivation, which would cost hundreds
    // of milliseconds per connection.
    #[cfg(feature = "encryption")]
    {
        quiet();
        conn.pragma_update(None, "key", key.sqlcipher_literal().expose())
    }
    // Never reached: `SqliteFile::of` refuses a key this build cannot use.
    #[cfg(not(feature = "encryption"))]
    {
        let _ = (conn, key);
        Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISUSE),
            Some("this sessionstore was built without the `encryption` feature".to_owned()),
        ))
    }
}

/// Turns SQLCipher's process-wide log off: it writes lines to stderr for every page
/// that does not decrypt, which would break the one-line error a wrong key gets.
#[cfg(feature = "encryption")]
fn quiet() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Ok(conn) = Connection::open_in_memory() {
            let _ = conn.query_row("PRAGMA cipher_log_level = NONE", [], |_| Ok(()));
            let _ = conn.query_row("PRAGMA cipher_log = off", [], |_| Ok(()));
        }
    });
}

/// The error for a file that SQLite would not read: with a key, SQLCipher's "file is
/// not a database" (or the "out of memory" after it) means a wrong key or a foreign
/// file, which it cannot tell apart.
pub(crate) fn opening(db: &SqliteFile, e: rusqlite::Error) -> Error {
    let undecryptable = matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::OutOfMemory)
    );
    if db.key.is_some() && undecryptable {
        Error::WrongKey {
            path: db.path.clone(),
        }
    } else {
        super::error::not_database(&db.path, e)
    }
}

/// The refusal for a file without SQLite's header, or `None` to go on (given a key,
/// SQLCipher decides at the first read).
pub(crate) fn without_header(db: &SqliteFile, len: u64) -> Option<Error> {
    if db.key.is_some() {
        return None;
    }
    if len >= MIN_PAGE && len.is_multiple_of(MIN_PAGE) {
        return Some(Error::NeedsKey {
            path: db.path.clone(),
        });
    }
    Some(Error::NotDatabase {
        path: db.path.clone(),
        detail: "it does not begin with a sqlite database header".to_owned(),
    })
}

/// The refusal for a file with SQLite's header when a key was given.
pub(crate) fn with_header(db: &SqliteFile) -> Option<Error> {
    db.key.as_ref().map(|_| Error::NotEncrypted {
        path: db.path.clone(),
    })
}

#[cfg(feature = "encryption")]
pub(crate) use self::change::{encrypt, rekey};

#[cfg(feature = "encryption")]
mod change;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_first_bytes_and_length_tell_plain_from_encrypted() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            encryption_of(&path)
        };
        let mut plain = MAGIC.to_vec();
        plain.resize(4096, 0);
        assert_eq!(at("plain", &plain), Encryption::Plain);
        assert_eq!(at("encrypted", &[0xa7; 8192]), Encryption::Encrypted);
        assert_eq!(at("short", &[0xa7; 100]), Encryption::Other);
        assert_eq!(at("odd", &[0xa7; 4097]), Encryption::Other);
        assert_eq!(at("empty", b""), Encryption::None);
        assert_eq!(encryption_of(&dir.path().join("missing")), Encryption::None);
    }
}
