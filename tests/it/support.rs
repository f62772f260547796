//! Test helpers: a store on real files in a temporary folder, and a runner for the
//! real binary with its environment cleared of the user's settings.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sessionstore::attachments::Roots;
use sessionstore::{Config, Store};
use tempfile::TempDir;

pub struct TestStore {
    pub dir: TempDir,
    pub store: Store,
}

impl TestStore {
    pub async fn new() -> TestStore {
        let dir = tempfile::tempdir().expect("a temp dir");
        let store = Store::open(config_in(dir.path()))
            .await
            .expect("a fresh store opens");
        TestStore { dir, store }
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("sessions.db")
    }

    /// A plain connection to the same file, for poking at it behind the store's back.
    pub fn raw(&self) -> rusqlite::Connection {
        rusqlite::Connection::open(self.db_path()).expect("the test database opens")
    }
}

pub fn config_in(dir: &Path) -> Config {
    Config {
        db_path: dir.join("sessions.db"),
        roots: Roots {
            configured: dir.join("attachments"),
            legacy: vec![],
        },
        host: "test-host".to_owned(),
    }
}

/// The real binary, with no inherited SESSIONSTORE_* settings and HOME pointed into
/// `home` so a default path can never reach the developer's own data.
pub fn bin(home: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessionstore"));
    cmd.env_remove("SESSIONSTORE_DB")
        .env_remove("SESSIONSTORE_ATTACHMENTS_ROOT")
        .env_remove("SESSIONSTORE_LEGACY_ROOTS")
        .env("HOME", home)
        .env("XDG_DATA_HOME", home.join(".local/share"));
    cmd
}

/// Runs the binary with `args` on the database and roots under `dir`.
pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    let db = dir.join("sessions.db");
    let root = dir.join("attachments");
    bin(dir)
        .args(args)
        .arg("--db")
        .arg(&db)
        .arg("--attachments-root")
        .arg(&root)
        .output()
        .expect("the binary runs")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("stderr is UTF-8")
}

/// Asserts a run failed the way the contract says a refusal fails: non-zero exit,
/// exactly one line on stderr, nothing on stdout.
pub fn assert_one_line_error(out: &Output) -> String {
    assert!(!out.status.success(), "expected failure, got {out:?}");
    let err = stderr(out);
    assert_eq!(err.trim_end().lines().count(), 1, "one error line: {err:?}");
    assert!(err.starts_with("error: "), "{err:?}");
    assert!(!err.contains("panicked"), "{err:?}");
    err
}

pub fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "command failed: {}", stderr(out));
    serde_json::from_str(stdout(out).trim()).expect("stdout is one JSON value")
}
