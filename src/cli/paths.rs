//! Where things live: the global flags, their environment variables and defaults,
//! resolved into a `Config` that remembers where each setting came from, and the
//! `paths` command that prints it. Never creates or opens anything.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use serde::Serialize;

use sessionstore::Config;

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

/// The configuration and where each of its settings came from.
pub struct Located {
    pub config: Config,
    pub db: Source,
    pub root: Source,
    pub legacy: Source,
}

/// A variable's value, or `None` when it is unset or empty.
fn env_var(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// A flag's value, else the variable's, with where it came from. The variable's
/// text is parsed here, where it comes in, as clap parses the flag's.
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
        })
    }

    pub fn config(&self) -> Result<Config> {
        Ok(self.locate()?.config)
    }
}

/// A path as the commands will use it: relative paths are taken against the current
/// directory, as the store takes them.
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

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Paths {
    database: Database,
    attachments_root: Place,
    legacy_roots: Vec<PathBuf>,
    legacy_roots_source: Source,
}

/// `sessionstore paths`: the database, the configured root and each legacy root, and
/// where each setting came from.
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
    let report = Paths {
        database: match &located.config.database {
            sessionstore::config::Database::Postgres(url) => Database::Server(Server {
                url: url.to_string(),
                source: located.db,
            }),
            sessionstore::config::Database::Sqlite(path) => Database::File(place(path, located.db)),
        },
        attachments_root: place(&located.config.roots.configured, located.root),
        legacy_roots: located
            .config
            .roots
            .legacy
            .iter()
            .map(|p| absolute(p))
            .collect(),
        legacy_roots_source: located.legacy,
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
    let mut lines = vec![
        database,
        format!(
            "attachments root  {}  ({}{})",
            terminal_line(&report.attachments_root.path.display().to_string()),
            report
                .attachments_root
                .source
                .describe("--attachments-root", "SESSIONSTORE_ATTACHMENTS_ROOT"),
            state(&report.attachments_root)
        ),
    ];
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
    emit(&lines.join("\n"))
}
