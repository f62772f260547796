//! Where things live: the database file, the configured and legacy attachment roots,
//! and the daemon's host name. A value, handed to the store, so a store opened later
//! can be given other roots; nothing here is ever written to the database.

use std::path::{Path, PathBuf};

use crate::attachments::Roots;
use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub db_path: PathBuf,
    pub roots: Roots,
    /// The host the daemon, and therefore every attachment path, lives on.
    pub host: String,
}

impl Config {
    /// Everything under one data directory: `<dir>/sessions.db` and `<dir>/attachments`.
    pub fn in_dir(dir: &Path) -> Config {
        Config {
            db_path: dir.join("sessions.db"),
            roots: Roots {
                configured: dir.join("attachments"),
                legacy: vec![],
            },
            host: host_name(),
        }
    }

    /// The database as it may be printed or logged: the file's path, or the
    /// PostgreSQL connection string with any password replaced by `***`.
    pub fn database_shown(&self) -> String {
        crate::db::shown(&self.db_path)
    }

    /// The defaults of a fresh machine: the user's data directory.
    pub fn default_paths() -> Result<Config> {
        Ok(Config::in_dir(&default_data_dir()?))
    }
}

/// The database named by `db` as a person may see it, when it is a PostgreSQL
/// connection string: with its password replaced, so that it can be printed or
/// logged. `None` for a file, which is shown as its path.
pub fn server_url(db: &Path) -> Option<String> {
    match crate::db::Location::of(db) {
        crate::db::Location::Postgres(_) => Some(crate::db::shown(db)),
        crate::db::Location::File(_) => None,
    }
}

/// The user's data directory for sessionstore, e.g. `~/.local/share/sessionstore`.
pub fn default_data_dir() -> Result<PathBuf> {
    directories::ProjectDirs::from("", "", "sessionstore")
        .map(|dirs| dirs.data_dir().to_owned())
        .ok_or(Error::NoDataDir)
}

/// The kernel's name for this host; the `HOSTNAME` variable, then `localhost`, when
/// it cannot be read.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".to_owned())
}
