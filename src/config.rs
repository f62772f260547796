//! Where things live (the database, the attachment roots, the host name) and what
//! protects them (`privacy`, `tls`). A value handed to the store, never written to the
//! database; nothing here ever shows a password or a key.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::attachments::Roots;
use crate::error::{Error, Result};

mod privacy;
#[cfg(feature = "postgres")]
mod tls;

pub use privacy::{DatabaseKey, Secret, Sharing};
#[cfg(feature = "postgres")]
pub use tls::{SslMode, Tls, TlsChoice};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub database: Database,
    pub roots: Roots,
    /// The host the daemon, and therefore every attachment path, lives on.
    pub host: String,
    /// Who may read what the store creates: the owner only unless told otherwise.
    pub sharing: Sharing,
    /// The key of an encrypted SQLite database (feature `encryption`); `None`: plain.
    pub key: Option<DatabaseKey>,
    /// Whether secrets in stored text become `[REDACTED:<kind>]` before anything is
    /// written (default on); attachment files are never rewritten.
    pub redaction: Redaction,
}

/// Whether the store redacts the text it keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Redaction {
    #[default]
    On,
    /// Text is stored as given.
    Off,
}

impl Redaction {
    pub fn is_on(self) -> bool {
        self == Redaction::On
    }

    /// `text` as this setting keeps it: its secrets replaced when on.
    pub fn apply(self, text: String) -> String {
        match self {
            Redaction::On => crate::redact::owned(text),
            Redaction::Off => text,
        }
    }
}

impl Config {
    /// Everything under one data directory: `<dir>/sessions.db` and `<dir>/attachments`.
    pub fn in_dir(dir: &Path) -> Config {
        Config {
            database: Database::Sqlite(dir.join("sessions.db")),
            roots: Roots {
                configured: dir.join("attachments"),
                legacy: vec![],
            },
            host: host_name(),
            sharing: Sharing::Owner,
            key: None,
            redaction: Redaction::On,
        }
    }

    /// The defaults of a fresh machine: the user's data directory.
    pub fn default_paths() -> Result<Config> {
        Ok(Config::in_dir(&default_data_dir()?))
    }
}

/// The database a store works on, told apart once where its name comes in: a
/// `postgres://` or `postgresql://` string names a PostgreSQL database, anything else an
/// SQLite file. Shown with any password replaced by `***`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// An SQLite database file (created by the commands that create one).
    Sqlite(PathBuf),
    /// A database on a PostgreSQL server (cargo feature `postgres`).
    Postgres(PostgresUrl),
}

impl Database {
    /// What `--db` names (a file named `postgres://…` is a `Database::Sqlite` by hand).
    pub fn parse(name: impl Into<OsString>) -> Database {
        let name = name.into();
        match name.to_str().and_then(PostgresUrl::new) {
            Some(url) => Database::Postgres(url),
            None => Database::Sqlite(PathBuf::from(name)),
        }
    }
}

impl fmt::Display for Database {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Database::Sqlite(path) => path.display().fmt(f),
            Database::Postgres(url) => url.fmt(f),
        }
    }
}

impl<T: Into<OsString>> From<T> for Database {
    fn from(name: T) -> Database {
        Database::parse(name)
    }
}

/// A PostgreSQL connection string, shown (`Display`, `Debug`) with every password
/// replaced by `***`; only [`PostgresUrl::as_str`] gives it whole. Checked when a store
/// connects, not here.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PostgresUrl(String);

impl PostgresUrl {
    /// `url` when it is a `postgres://` or `postgresql://` URL.
    pub fn new(url: impl Into<String>) -> Option<PostgresUrl> {
        let url = url.into();
        (url.starts_with("postgres://") || url.starts_with("postgresql://"))
            .then_some(PostgresUrl(url))
    }

    /// The whole string, password included: for connecting, never for showing.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A driver's message with every password this string carries replaced.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn scrub(&self, text: &str) -> String {
        scrub_secrets(&self.0, text)
    }
}

impl fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.0))
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PostgresUrl")
            .field(&redact(&self.0))
            .finish()
    }
}

/// A connection string as it may be printed: the password, if any, replaced.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (creds, after) = credentials(rest);
    let creds = match creds {
        Some(creds) => match creds.split_once(':') {
            Some((name, _password)) => format!("{name}:***@"),
            None => format!("{creds}@"),
        },
        None => String::new(),
    };
    // A password can also come as a query parameter.
    let after = match after.split_once('?') {
        Some((host, query)) => {
            let query = query
                .split('&')
                .map(|part| match part.split_once('=') {
                    Some(("password", _)) => "password=***".to_owned(),
                    _ => part.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("&");
            format!("{host}?{query}")
        }
        None => after.to_owned(),
    };
    format!("{scheme}://{creds}{after}")
}

/// A URL's `user[:password]` part and the rest, split at the first `@`, as the driver
/// does (a password may hold `/`, `?` or `:`).
fn credentials(rest: &str) -> (Option<&str>, &str) {
    match rest.split_once('@') {
        Some((creds, after)) => (Some(creds), after),
        None => (None, rest),
    }
}

/// The passwords a connection string carries, as written.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn secrets(url: &str) -> Vec<String> {
    let Some((_, rest)) = url.split_once("://") else {
        return vec![];
    };
    let (creds, after) = credentials(rest);
    let mut out = vec![];
    if let Some((_, password)) = creds.and_then(|c| c.split_once(':')) {
        out.push(password.to_owned());
        // The driver decodes it, and could repeat either form.
        if let Ok(decoded) = percent_encoding::percent_decode_str(password).decode_utf8() {
            out.push(decoded.into_owned());
        }
    }
    if let Some((_, query)) = after.split_once('?') {
        for part in query.split('&') {
            if let Some(password) = part.strip_prefix("password=") {
                out.push(password.to_owned());
            }
        }
    }
    out.retain(|p| !p.is_empty());
    // Longest first, so that a secret inside another is not replaced piecemeal.
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

/// `text` with every password the connection string `url` carries replaced.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn scrub_secrets(url: &str, text: &str) -> String {
    scrub(text, &secrets(url))
}

/// `text` with every one of `secrets` replaced.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn scrub(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_owned(), |text, secret| {
        text.replace(secret.as_str(), "***")
    })
}

/// The user's data directory for sessionstore, e.g. `~/.local/share/sessionstore`.
pub fn default_data_dir() -> Result<PathBuf> {
    directories::ProjectDirs::from("", "", "sessionstore")
        .map(|dirs| dirs.data_dir().to_owned())
        .ok_or(Error::NoDataDir)
}

/// The kernel's name for this host, else `HOSTNAME`, else `localhost`.
pub fn host_name() -> String {
    let uname = rustix::system::uname();
    uname
        .nodename()
        .to_str()
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_is_told_apart_once_by_its_name() {
        assert_eq!(
            Database::parse("data/sessions.db"),
            Database::Sqlite("data/sessions.db".into())
        );
        assert_eq!(
            Database::from(PathBuf::from("postgres:/not-a-url")),
            Database::Sqlite("postgres:/not-a-url".into())
        );
        for url in [
            "postgres://h/db",
            "postgresql://u@h:5432/db?sslmode=disable",
        ] {
            let Database::Postgres(parsed) = Database::from(url) else {
                panic!("{url} is PostgreSQL");
            };
            assert_eq!(parsed.as_str(), url);
        }
        // Not UTF-8, so not a URL: a file, whatever it looks like.
        use std::os::unix::ffi::OsStringExt;
        let odd = OsString::from_vec(b"postgres://h/\xff".to_vec());
        assert!(matches!(Database::parse(odd), Database::Sqlite(_)));
    }

    #[test]
    fn a_database_is_shown_without_its_password() {
        let db = Database::parse("postgres://alice:s3cret@host/db?password=other");
        for shown in [db.to_string(), format!("{db:?}"), format!("{db:#?}")] {
            assert!(
                !shown.contains("s3cret") && !shown.contains("other"),
                "{shown}"
            );
        }
        assert_eq!(db.to_string(), "postgres://alice:***@host/db?password=***");
        assert_eq!(Database::parse("a b/c.db").to_string(), "a b/c.db");
    }

    #[test]
    fn a_password_with_a_slash_or_a_question_mark_is_still_redacted() {
        // The driver ends the password at the first `@`, whatever it holds.
        let url = "postgres://u:Xy/9+kq?Z@host:5432/db?application_name=x";
        #[cfg(feature = "postgres")]
        {
            let config: postgres::Config = url.parse().unwrap();
            assert_eq!(config.get_password(), Some(&b"Xy/9+kq?Z"[..]));
        }
        let shown = redact(url);
        assert_eq!(shown, "postgres://u:***@host:5432/db?application_name=x");
        assert!(secrets(url).contains(&"Xy/9+kq?Z".to_owned()));
        let url = PostgresUrl::new(url).unwrap();
        assert!(
            !url.scrub(&format!("failed for {}", url.as_str()))
                .contains("Xy/9")
        );
    }

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            redact("postgres://alice:s3cret@db.example:5432/sessions?sslmode=disable"),
            "postgres://alice:***@db.example:5432/sessions?sslmode=disable"
        );
        assert_eq!(
            redact("postgresql://bob@host/db?password=hunter2&application_name=x"),
            "postgresql://bob@host/db?password=***&application_name=x"
        );
        assert_eq!(redact("postgres://host/db"), "postgres://host/db");
    }

    #[test]
    fn a_drivers_words_lose_any_password_the_string_carried() {
        let url = "postgres://alice:s3cret@host/db?password=other&sslmode=disable";
        assert_eq!(secrets(url), ["s3cret", "other"]);
        assert_eq!(
            scrub("got `s3cret` and other things", &secrets(url)),
            "got `***` and *** things"
        );
        assert!(secrets("postgres://alice@host/db").is_empty());
        assert!(secrets("postgres://alice:@host/db?password=").is_empty());
    }
}
