//! The global flags, their environment variables and defaults, resolved into a
//! `Config` with where each setting came from, and the `paths` command that prints it.
//! `paths` opens nothing: it reads only the database file's first bytes (whether it
//! is encrypted) and the files' modes.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use sessionstore::Config;
use sessionstore::config::{Redaction, Sharing};
use sessionstore::privacy::{self, Encryption, Exposure};

use super::errors::Usage;
use super::output::{emit, print_json, terminal_line};

/// Flags every command takes. Their environment variables are read by
/// `Global::locate` rather than by clap, so that an empty variable counts as unset.
#[derive(Args)]
pub struct Global {
    /// The SQLite database file, or a postgres:// connection string [env: SESSIONSTORE_DB]
    /// [default: <data dir>/sessions.db]
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<sessionstore::config::Database>,
    /// Where new uploads are written [env: SESSIONSTORE_ATTACHMENTS_ROOT]
    /// [default: <data dir>/attachments, even when --db is given]
    #[arg(long, global = true, value_name = "DIR")]
    pub attachments_root: Option<PathBuf>,
    /// An older, read-only attachment root, tried after the configured one (repeatable)
    /// [env: SESSIONSTORE_LEGACY_ROOTS, colon-separated]
    #[arg(long = "legacy-root", global = true, value_name = "DIR")]
    pub legacy_roots: Vec<PathBuf>,
    /// The file holding the key of an encrypted SQLite database: 64 hexadecimal digits
    /// (feature `encryption`) [env: SESSIONSTORE_KEY_FILE]
    #[arg(long, global = true, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// Create files 0660 and folders 2770 (the owner and the group) instead of 0600 and
    /// 0700, for a mount shared by daemons of one group [env: SESSIONSTORE_SHARED_GROUP=1]
    #[arg(long, global = true)]
    pub shared_group: bool,
    /// Replace the secrets in what the store keeps (messages, the agent's updates,
    /// titles, settings) by [REDACTED:<kind>] before anything is written; uploaded
    /// files are never rewritten [env: SESSIONSTORE_REDACT] [default: on]
    #[arg(long, global = true, value_name = "on|off", value_parser = parse_redaction)]
    pub redact: Option<Redaction>,
    /// Print machine-readable JSON, and errors as {"error":{"kind","message"}} on stderr
    #[arg(long, global = true)]
    pub json: bool,
    /// Log more on stderr: -v for info (such as reads from a legacy root), -vv for debug
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Log errors only; RUST_LOG, when set, overrides -v and -q
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

/// `on` or `off`, as `--redact` and `SESSIONSTORE_REDACT` take it.
fn parse_redaction(text: &str) -> std::result::Result<Redaction, String> {
    match text {
        "on" => Ok(Redaction::On),
        "off" => Ok(Redaction::Off),
        _ => Err(format!("{text:?} is neither on nor off")),
    }
}

/// Where a setting came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Flag,
    Environment,
    Default,
}

impl Source {
    fn describe(self, flag: &str, var: &str) -> String {
        match self {
            Source::Flag => format!("from {flag}"),
            Source::Environment => format!("from {var}"),
            Source::Default => "default".to_owned(),
        }
    }
}

/// The configuration and where each setting came from; the key is not read yet.
pub struct Located {
    pub config: Config,
    pub db: Source,
    pub root: Source,
    pub legacy: Source,
    pub key_file: Option<PathBuf>,
    pub key_source: Source,
    pub sharing: Source,
    pub redaction: Source,
}

/// A variable's value, or `None` when it is unset or empty.
fn env_var(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// A flag's value, else the variable's, with where it came from.
fn pick<T: Clone + From<std::ffi::OsString>>(flag: &Option<T>, var: &str) -> (Option<T>, Source) {
    match (flag, env_var(var)) {
        (Some(p), _) => (Some(p.clone()), Source::Flag),
        (None, Some(v)) => (Some(T::from(v)), Source::Environment),
        (None, None) => (None, Source::Default),
    }
}

impl Global {
    /// Whether any of the location flags was given on the command line.
    #[cfg(feature = "probe")]
    pub fn names_a_location(&self) -> bool {
        self.db.is_some() || self.names_a_root()
    }

    /// Whether an attachment root was given on the command line.
    #[cfg(feature = "probe")]
    pub fn names_a_root(&self) -> bool {
        self.attachments_root.is_some() || !self.legacy_roots.is_empty()
    }

    pub fn locate(&self) -> Result<Located> {
        let (db, db_source) = pick(&self.db, "SESSIONSTORE_DB");
        let (root, root_source) = pick(&self.attachments_root, "SESSIONSTORE_ATTACHMENTS_ROOT");
        // The data directory is looked up only when something still needs it, so
        // explicit paths work where no home directory exists.
        let mut config = match (&db, &root) {
            (Some(_), Some(_)) => Config::in_dir(Path::new("")),
            _ => Config::default_paths()?,
        };
        if let Some(db) = db {
            config.database = db;
        }
        if let Some(root) = root {
            config.roots.configured = root;
        }
        let legacy_source;
        config.roots.legacy = if !self.legacy_roots.is_empty() {
            legacy_source = Source::Flag;
            self.legacy_roots.clone()
        } else if let Some(v) = env_var("SESSIONSTORE_LEGACY_ROOTS") {
            legacy_source = Source::Environment;
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        } else {
            legacy_source = Source::Default;
            vec![]
        };
        let (key_file, key_source) = pick(&self.key_file, "SESSIONSTORE_KEY_FILE");
        let (sharing, sharing_source) = if self.shared_group {
            (Sharing::Group, Source::Flag)
        } else {
            match env_var("SESSIONSTORE_SHARED_GROUP") {
                None => (Sharing::Owner, Source::Default),
                Some(v) => match v.to_str() {
                    Some("1" | "true" | "yes") => (Sharing::Group, Source::Environment),
                    Some("0" | "false" | "no") => (Sharing::Owner, Source::Environment),
                    _ => {
                        return Err(Usage(format!(
                            "SESSIONSTORE_SHARED_GROUP is {v:?}: set it to 1 for group \
                             access, or 0 (or leave it unset) for the owner only"
                        ))
                        .into());
                    }
                },
            }
        };
        config.sharing = sharing;
        let redaction_source;
        (config.redaction, redaction_source) = match (self.redact, env_var("SESSIONSTORE_REDACT")) {
            (Some(r), _) => (r, Source::Flag),
            (None, Some(v)) => match v.to_str().map(parse_redaction) {
                Some(Ok(r)) => (r, Source::Environment),
                _ => {
                    return Err(Usage(format!(
                        "SESSIONSTORE_REDACT is {v:?}: set it to on or off (or leave it unset \
                         for on)"
                    ))
                    .into());
                }
            },
            (None, None) => (Redaction::On, Source::Default),
        };
        tracing::debug!(
            "database {:?} ({:?}), attachment root {:?} ({:?})",
            config.database.to_string(),
            db_source,
            config.roots.configured,
            root_source
        );
        Ok(Located {
            config,
            db: db_source,
            root: root_source,
            legacy: legacy_source,
            key_file,
            key_source,
            sharing: sharing_source,
            redaction: redaction_source,
        })
    }

    /// The key file named by `--key-file` or `SESSIONSTORE_KEY_FILE`, not read.
    pub fn key_path(&self) -> Option<PathBuf> {
        pick(&self.key_file, "SESSIONSTORE_KEY_FILE").0
    }

    /// The configuration a command opens the database with, its key read.
    pub fn config(&self) -> Result<Config> {
        let located = self.locate()?;
        let mut config = located.config;
        if let Some(path) = &located.key_file {
            if !cfg!(feature = "encryption") {
                return Err(Usage(format!(
                    "{} names a key file, but this sessionstore was built without the \
                     `encryption` feature (cargo build --features encryption)",
                    located
                        .key_source
                        .describe("--key-file", "SESSIONSTORE_KEY_FILE")
                        .trim_start_matches("from ")
                ))
                .into());
            }
            config.key = Some(sessionstore::config::DatabaseKey::read_file(path)?);
        }
        Ok(config)
    }
}

/// A path as the store will use it: a relative one against the current directory.
fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_owned())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Place {
    path: PathBuf,
    source: Source,
    exists: bool,
}

/// A database on a PostgreSQL server: its connection string, password replaced. No
/// `exists`: telling would mean connecting, and `paths` opens nothing.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Server {
    url: String,
    source: Source,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Database {
    File(Place),
    Server(Server),
}

/// Whether an SQLite database is encrypted, from its first bytes, and where its key is.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EncryptionReport {
    state: Encryption,
    key_file: Option<PathBuf>,
    key_source: Source,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RedactionReport {
    mode: &'static str,
    source: Source,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SharingReport {
    mode: &'static str,
    file_mode: String,
    dir_mode: String,
    source: Source,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Paths {
    database: Database,
    /// For an SQLite database.
    #[serde(skip_serializing_if = "Option::is_none")]
    encryption: Option<EncryptionReport>,
    /// For a PostgreSQL database: the mode its connection string asks for (null when
    /// the string does not parse).
    #[cfg(feature = "postgres")]
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<Option<sessionstore::config::Tls>>,
    attachments_root: Place,
    legacy_roots: Vec<PathBuf>,
    legacy_roots_source: Source,
    sharing: SharingReport,
    redaction: RedactionReport,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<Exposure>,
}

/// `sessionstore paths`: each location and setting, where it came from, and warnings
/// about database files more exposed than the sharing allows.
pub fn paths(global: &Global) -> Result<()> {
    let located = global.locate()?;
    let place = |p: &Path, source| {
        let path = absolute(p);
        Place {
            exists: path.exists(),
            path,
            source,
        }
    };
    let config = &located.config;
    let sharing = config.sharing;
    let mut warnings = privacy::exposures(config);
    if let Some(key) = &located.key_file {
        warnings.extend(privacy::key_file_exposure(key, sharing));
    }
    #[cfg(feature = "postgres")]
    let mut tls_error = None;
    let report = Paths {
        database: match &config.database {
            sessionstore::config::Database::Postgres(url) => Database::Server(Server {
                url: url.to_string(),
                source: located.db,
            }),
            sessionstore::config::Database::Sqlite(path) => Database::File(place(path, located.db)),
        },
        encryption: match &config.database {
            sessionstore::config::Database::Sqlite(path) => Some(EncryptionReport {
                state: privacy::encryption_of(path),
                key_file: located.key_file.as_deref().map(absolute),
                key_source: located.key_source,
            }),
            sessionstore::config::Database::Postgres(_) => None,
        },
        #[cfg(feature = "postgres")]
        tls: match &config.database {
            sessionstore::config::Database::Postgres(url) => {
                Some(url.tls().map_err(|e| tls_error = Some(e.to_string())).ok())
            }
            sessionstore::config::Database::Sqlite(_) => None,
        },
        attachments_root: place(&config.roots.configured, located.root),
        legacy_roots: config.roots.legacy.iter().map(|p| absolute(p)).collect(),
        legacy_roots_source: located.legacy,
        sharing: SharingReport {
            mode: match sharing {
                Sharing::Owner => "owner",
                Sharing::Group => "group",
            },
            file_mode: format!("{:04o}", sharing.file_mode()),
            dir_mode: format!("{:04o}", sharing.dir_mode()),
            source: located.sharing,
        },
        redaction: RedactionReport {
            mode: match config.redaction {
                Redaction::On => "on",
                Redaction::Off => "off",
            },
            source: located.redaction,
        },
        warnings,
    };
    if global.json {
        return print_json(&report);
    }
    let state = |p: &Place| if p.exists { "" } else { ", not created yet" };
    let database = match &report.database {
        Database::File(file) => format!(
            "database          {}  ({}{})",
            terminal_line(&file.path.display().to_string()),
            file.source.describe("--db", "SESSIONSTORE_DB"),
            state(file)
        ),
        Database::Server(server) => format!(
            "database          {}  ({}, a PostgreSQL server)",
            terminal_line(&server.url),
            server.source.describe("--db", "SESSIONSTORE_DB"),
        ),
    };
    let mut lines = vec![database];
    if let Some(encryption) = &report.encryption {
        lines.push(encryption_line(encryption));
    }
    #[cfg(feature = "postgres")]
    if let Some(tls) = &report.tls {
        lines.push(match (tls, &tls_error) {
            (Some(tls), _) => format!("tls               {}", terminal_line(&tls.describe())),
            (None, error) => format!(
                "tls               unknown: {}",
                terminal_line(
                    error
                        .as_deref()
                        .unwrap_or("the connection string does not parse")
                )
            ),
        });
    }
    lines.push(format!(
        "attachments root  {}  ({}{})",
        terminal_line(&report.attachments_root.path.display().to_string()),
        report
            .attachments_root
            .source
            .describe("--attachments-root", "SESSIONSTORE_ATTACHMENTS_ROOT"),
        state(&report.attachments_root)
    ));
    let legacy_from = report
        .legacy_roots_source
        .describe("--legacy-root", "SESSIONSTORE_LEGACY_ROOTS");
    if report.legacy_roots.is_empty() {
        lines.push(format!("legacy roots      none  ({legacy_from})"));
    }
    for (i, root) in report.legacy_roots.iter().enumerate() {
        lines.push(format!(
            "legacy root {:<5} {}  ({legacy_from})",
            i + 1,
            terminal_line(&root.display().to_string())
        ));
    }
    lines.push(format!(
        "new files         {} (files {}, folders {})  ({})",
        match sharing {
            Sharing::Owner => "owner only",
            Sharing::Group => "owner and group",
        },
        report.sharing.file_mode,
        report.sharing.dir_mode,
        report
            .sharing
            .source
            .describe("--shared-group", "SESSIONSTORE_SHARED_GROUP"),
    ));
    lines.push(format!(
        "redaction         {}  ({})",
        match report.redaction.mode {
            "on" => "on: secrets in stored text become [REDACTED:<kind>]",
            _ => "off: text is stored as given",
        },
        report
            .redaction
            .source
            .describe("--redact", "SESSIONSTORE_REDACT"),
    ));
    lines.extend(
        report
            .warnings
            .iter()
            .map(|w| format!("warning: {}", terminal_line(&w.to_string()))),
    );
    emit(&lines.join("\n"))
}

/// The `encryption` line of `paths`: what the file is, and where its key comes from.
fn encryption_line(e: &EncryptionReport) -> String {
    let state = match e.state {
        Encryption::Encrypted => "encrypted",
        Encryption::Plain => "not encrypted",
        Encryption::None => "no database yet",
        Encryption::Other => "not a database",
    };
    let key = match &e.key_file {
        Some(path) => format!(
            "key {}: {}",
            e.key_source.describe("--key-file", "SESSIONSTORE_KEY_FILE"),
            terminal_line(&path.display().to_string())
        ),
        None => "no key given".to_owned(),
    };
    format!("encryption        {state}  ({key})")
}
