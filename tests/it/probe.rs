//! The probe: the real binary and the library function both run every check green, in
//! a temporary directory of their own that never reaches the user's data directory.

use sessionstore::run_probe;

use crate::support::{Bin, stderr, stdout};

/// The least number of checks a full run reports; a run that stops early has fewer.
const AT_LEAST: usize = 15;

#[test]
fn the_probe_binary_passes_every_check() {
    let home = tempfile::tempdir().unwrap();
    let out = Bin::new(home.path()).arg("probe").output();
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "probe failed:\n{text}{}",
        stderr(&out)
    );
    let lines: Vec<&str> = text.lines().collect();
    let (last, checks) = lines.split_last().expect("the probe prints lines");
    assert!(checks.len() >= AT_LEAST, "{text}");
    for line in checks {
        assert!(line.starts_with("ok   "), "not ok: {line}");
    }
    let passed: usize = last
        .strip_prefix("probe: ")
        .and_then(|rest| rest.strip_suffix(" passed, 0 failed"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected count line {last:?}"));
    assert_eq!(passed, checks.len(), "{text}");
    assert!(passed >= AT_LEAST, "{text}");
}

/// With the `encryption` feature the probe runs on an encrypted database of its own,
/// with a key of its own, and checks that the texts it sent are nowhere in the files'
/// bytes while its decrypting read finds them.
#[cfg(feature = "encryption")]
#[test]
fn the_probe_runs_on_an_encrypted_database_of_its_own() {
    let home = tempfile::tempdir().unwrap();
    let out = Bin::new(home.path()).arg("probe").output();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l == "ok   db-file-is-encrypted"),
        "{}",
        stdout(&out)
    );
}

/// The faults the probe provokes on purpose are not reported to the user as warnings.
#[test]
fn a_passing_probe_is_quiet_on_stderr() {
    let home = tempfile::tempdir().unwrap();
    let out = Bin::new(home.path()).arg("probe").output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "");
}

#[test]
fn the_probe_prints_json_with_counts() {
    let home = tempfile::tempdir().unwrap();
    let out = Bin::new(home.path()).args(["probe", "--json"]).output();
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    let checks = report["checks"].as_array().expect("a list of checks");
    assert!(checks.len() >= AT_LEAST);
    for check in checks {
        assert!(
            check["name"].is_string() && check["detail"].is_string(),
            "{check}"
        );
        assert_eq!(check["ok"], true, "{check}");
    }
    assert_eq!(report["passed"], checks.len());
    assert_eq!(report["failed"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_probe_function_passes_every_check() {
    let report = run_probe().await.expect("the probe runs");
    let failed: Vec<_> = report.checks().iter().filter(|c| !c.ok).collect();
    assert!(failed.is_empty(), "failed checks: {failed:#?}");
    assert!(report.ok());
    assert!(report.passed() >= AT_LEAST, "{report}");
    let mut names: Vec<&str> = report.checks().iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), report.checks().len(), "check names are unique");
}

#[test]
fn the_probe_never_touches_the_data_directory() {
    let home = tempfile::tempdir().unwrap();
    let out = Bin::new(home.path())
        .arg("probe")
        // The probe ignores the usual settings rather than writing where they point.
        .env("SESSIONSTORE_DB", home.path().join("elsewhere/sessions.db"))
        .env(
            "SESSIONSTORE_ATTACHMENTS_ROOT",
            home.path().join("elsewhere/files"),
        )
        .output();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(!home.path().join(".local/share/sessionstore").exists());
    assert!(!home.path().join("elsewhere").exists());
    let left: Vec<_> = std::fs::read_dir(home.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "the probe left {left:?} in HOME");
}

/// The probe's schemas on the test server (`sessionstore_probe_…`).
#[cfg(feature = "postgres")]
fn probe_schemas(server: &str) -> Vec<String> {
    let server = server.to_owned();
    std::thread::spawn(move || {
        let mut client = postgres::Client::connect(&server, postgres::NoTls).unwrap();
        client
            .query(
                "SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'sessionstore_probe_%'",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    })
    .join()
    .unwrap()
}

/// `probe --db postgres://…` runs every check in a schema of its own, the audit
/// reading the tables of that schema (there are no database files of its own to
/// read), and drops the schema; so does the library function. Only this test makes
/// probe schemas, so none may be left when it ends.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread")]
async fn the_probe_runs_in_a_schema_of_its_own_on_postgres() {
    let Some(server) = crate::support::postgres_url() else {
        return;
    };
    let before = probe_schemas(&server);
    let home = tempfile::tempdir().unwrap();
    let out = Bin::new(home.path())
        .args(["probe", "--db", &server])
        .output();
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "probe failed:\n{text}{}",
        stderr(&out)
    );
    assert_eq!(stderr(&out), "");
    let lines: Vec<&str> = text.lines().collect();
    let (last, checks) = lines.split_last().expect("the probe prints lines");
    assert!(checks.len() >= AT_LEAST, "{text}");
    for line in checks {
        assert!(line.starts_with("ok   "), "not ok: {line}");
    }
    assert_eq!(*last, format!("probe: {} passed, 0 failed", checks.len()));
    for name in ["schema-has-no-path-column", "db-text-has-no-path"] {
        assert!(checks.contains(&format!("ok   {name}").as_str()), "{text}");
    }
    assert!(!text.contains("db-file-has-no-path"), "{text}");

    let report = sessionstore::run_probe_on_postgres(&server)
        .await
        .expect("the probe runs");
    let failed: Vec<_> = report.checks().iter().filter(|c| !c.ok).collect();
    assert!(failed.is_empty(), "failed checks: {failed:#?}");
    let audited = report
        .checks()
        .iter()
        .find(|c| c.name == "db-text-has-no-path")
        .expect("the audit ran");
    assert!(audited.detail.contains(" text values in "), "{audited:?}");
    assert_eq!(probe_schemas(&server), before, "a probe schema was left");
}

/// A server the probe cannot reach is one line on stderr, without the password, and
/// no report; `--db` with a root, or a file, is still refused.
#[test]
fn a_probe_on_an_unreachable_server_fails_in_one_line() {
    let home = tempfile::tempdir().unwrap();
    // Port 1 on the loopback address: nothing listens there.
    let out = Bin::new(home.path())
        .args([
            "probe",
            "--db",
            "postgres://alice:s3cret@127.0.0.1:1/sessions",
        ])
        .output();
    let err = crate::support::assert_one_line_error(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("postgres://alice:***@127.0.0.1:1/sessions"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
    assert!(stdout(&out).is_empty());
    let root = home.path().join("files");
    let out = Bin::new(home.path())
        .args(["probe", "--db", "postgres://127.0.0.1:1/sessions"])
        .arg("--attachments-root")
        .arg(&root)
        .output();
    crate::support::assert_usage_error(&out);
    assert!(!root.exists());
}
