//! The crate's `Error` from what a database driver said, named by the action it was
//! part of; the driver's error goes behind `source()` as an opaque `DatabaseCause`. It
//! runs no statement and decides no retry.

use std::path::Path;

use super::sql::DbError;
use crate::error::{DatabaseCause, Error};

/// A failure of one statement on either engine, named by what was being done.
pub fn failed(action: &'static str, cause: DbError) -> Error {
    match cause {
        DbError::Sqlite(cause) => sqlite(action, cause),
        #[cfg(feature = "postgres")]
        DbError::Postgres(cause) => Error::Database {
            action,
            cause: DatabaseCause::new(cause),
        },
        DbError::Column { index, reason } => Error::DamagedRow {
            action,
            detail: format!("column {index}: {reason}"),
        },
    }
}

/// `failed` for `map_err`: `tx.execute(…).map_err(sql("append an event"))`.
pub fn sql(action: &'static str) -> impl FnOnce(DbError) -> Error {
    move |e| failed(action, e)
}

/// An SQLite failure, as `Busy` when another writer held the lock past the timeout.
pub fn sqlite(action: &'static str, cause: rusqlite::Error) -> Error {
    let busy = matches!(
        cause.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    let cause = DatabaseCause::new(cause);
    if busy {
        Error::Busy { action, cause }
    } else {
        Error::Database { action, cause }
    }
}

/// `failed` for a PostgreSQL error met outside a `Tx`.
#[cfg(feature = "postgres")]
pub fn postgres(action: &'static str) -> impl FnOnce(postgres::Error) -> Error {
    move |e| failed(action, DbError::Postgres(e))
}

/// A file SQLite will not open or read as a database, in SQLite's words.
pub fn not_database(path: &Path, e: rusqlite::Error) -> Error {
    Error::NotDatabase {
        path: path.to_owned(),
        detail: e.to_string(),
    }
}

/// No connection from a pool within its wait.
pub fn pool(e: r2d2::Error) -> Error {
    Error::Pool(DatabaseCause::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The driver's error goes behind `source()` with its words and causes; a busy
    /// database is told apart.
    #[test]
    fn a_drivers_error_keeps_its_words_behind_an_opaque_cause() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let driver = conn.execute("SELECT * FROM nowhere", []).unwrap_err();
        let words = driver.to_string();
        let below = std::error::Error::source(&driver).map(ToString::to_string);
        let err = sqlite("read nowhere", driver);
        assert!(matches!(err, Error::Database { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "database error while trying to read nowhere"
        );
        let cause = std::error::Error::source(&err).expect("the driver's error is the cause");
        assert_eq!(cause.to_string(), words);
        assert_eq!(cause.source().map(ToString::to_string), below);
        assert_eq!(err.kind(), "database");

        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        let err = sqlite("take the write lock", busy);
        assert!(matches!(err, Error::Busy { .. }), "{err:?}");
        assert_eq!(err.kind(), "busy");
    }
}
