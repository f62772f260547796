//! The library's error type: each variant names the thing that failed (a path, a
//! session, a reference), and every message is one lowercase line. A message already
//! ends with its cause, so no variant also reports that cause as `source()`: printing
//! an error's chain never repeats it. (The cause stays reachable as a field.)

use std::path::PathBuf;

use crate::attachments::AttachmentError;
use crate::ids::{IdError, MessageId, SessionId};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot use database {path}: {cause}")]
    DatabaseIo {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("no database at {0}: run `sessionstore migrate` (or `session new`) to create it")]
    NoDatabase(PathBuf),
    #[error("{path} is not a usable sqlite database: {detail}")]
    NotDatabase { path: PathBuf, detail: String },
    #[error(
        "database {path} is at schema version {found}, newer than this binary knows ({known}); \
         unknown migrations: {}; upgrade sessionstore",
        unknown.join(", ")
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
        unknown: Vec<String>,
    },
    #[error(
        "database {path} is at schema version {found} and this sessionstore needs {latest}: \
         run `sessionstore migrate` to upgrade it (reading commands never do)"
    )]
    NeedsMigration {
        path: PathBuf,
        found: i64,
        latest: i64,
    },
    #[error("database {0} was opened for reading only, so it cannot be changed")]
    ReadOnly(PathBuf),
    #[error("migration failed, schema left as it was: {0}")]
    Migration(String),
    #[error("database error while trying to {action}: {cause}")]
    Sqlite {
        action: &'static str,
        cause: rusqlite::Error,
    },
    #[error("cannot get a database connection: {0}")]
    Pool(r2d2::Error),
    #[error(transparent)]
    Attachment(#[from] AttachmentError),
    #[error(transparent)]
    Id(#[from] IdError),
    #[error(transparent)]
    Dispatch(#[from] crate::dispatch::DispatchError),
    #[error("no session {0}")]
    SessionNotFound(SessionId),
    #[error("no message {0}")]
    MessageNotFound(MessageId),
    #[error("{0}")]
    Invalid(String),
    #[error("background task failed: {0}")]
    Task(String),
}

impl From<r2d2::Error> for Error {
    fn from(e: r2d2::Error) -> Self {
        Error::Pool(e)
    }
}

impl Error {
    pub(crate) fn sqlite(action: &'static str, source: rusqlite::Error) -> Self {
        Error::Sqlite {
            action,
            cause: source,
        }
    }

    pub(crate) fn not_database(path: &std::path::Path, e: rusqlite::Error) -> Self {
        Error::NotDatabase {
            path: path.to_owned(),
            detail: e.to_string(),
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }
}
