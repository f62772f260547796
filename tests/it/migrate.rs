//! Migrations: fresh, idempotent, atomic, concurrent, and refusals that leave the
//! file byte-for-byte as it was.

use std::path::Path;

use crate::support::{TestStore, assert_one_line_error, json};

fn history_rows(db: &Path) -> Vec<(i64, String)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT version, name FROM refinery_schema_history ORDER BY version")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn tables(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn fresh_database_is_migrated_to_latest() {
    let t = TestStore::empty();
    let report = json(&t.run(&["migrate", "--json"]));
    assert_eq!(
        report["applied"],
        serde_json::json!(crate::support::migration_names())
    );
    assert_eq!(report["current"], crate::support::latest_version());
    let names = tables(&t.dir.path().join("sessions.db"));
    for t in [
        "sessions",
        "messages",
        "items",
        "message_refs",
        "events",
        "refinery_schema_history",
    ] {
        assert!(names.iter().any(|n| n == t), "{t} missing from {names:?}");
    }
}

#[test]
fn migrating_twice_applies_nothing_the_second_time() {
    let t = TestStore::empty();
    json(&t.run(&["migrate", "--json"]));
    let again = json(&t.run(&["migrate", "--json"]));
    assert_eq!(again["applied"], serde_json::json!([]));
    assert_eq!(again["current"], crate::support::latest_version());
    assert_eq!(
        history_rows(&t.dir.path().join("sessions.db")).len(),
        crate::support::migration_names().len()
    );
}

#[test]
fn dry_run_reports_pending_and_creates_nothing() {
    let t = TestStore::empty();
    let report = json(&t.run(&["migrate", "--dry-run", "--json"]));
    assert_eq!(report["applied"], serde_json::json!([]));
    assert_eq!(
        report["pending"],
        serde_json::json!(crate::support::migration_names())
    );
    assert_eq!(report["current"], 0);
    assert!(!t.dir.path().join("sessions.db").exists());
}

/// Closes every connection so the WAL is checkpointed away and the main file is the
/// whole database, then returns its bytes.
fn settled_bytes(db: &Path) -> Vec<u8> {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
        .unwrap();
    drop(conn);
    std::fs::read(db).unwrap()
}

#[test]
fn newer_schema_is_refused_and_left_unchanged() {
    let t = TestStore::empty();
    let db = t.dir.path().join("sessions.db");
    json(&t.run(&["migrate", "--json"]));
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute(
            "INSERT INTO refinery_schema_history (version, name, applied_on, checksum)
             VALUES (99, 'from_the_future', '2030-01-01T00:00:00Z', '1')",
            [],
        )
        .unwrap();
    }
    let before = settled_bytes(&db);
    for args in [
        &["migrate"][..],
        &["migrate", "--dry-run"],
        &["session", "list"],
    ] {
        let err = assert_one_line_error(&t.run(args));
        assert!(err.contains("newer"), "{err}");
        assert!(err.contains("V99__from_the_future"), "{err}");
        assert_eq!(
            std::fs::read(&db).unwrap(),
            before,
            "{args:?} changed the file"
        );
    }
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_and_left_unchanged() {
    let t = TestStore::empty();
    let db = t.dir.path().join("sessions.db");
    let junk = b"these are not the pages you are looking for\n".repeat(100);
    std::fs::write(&db, &junk).unwrap();
    for args in [&["migrate"][..], &["session", "new"], &["verify"]] {
        let err = assert_one_line_error(&t.run(args));
        assert!(err.contains("not a usable sqlite database"), "{err}");
        assert_eq!(std::fs::read(&db).unwrap(), junk);
    }
    let names: Vec<_> = std::fs::read_dir(t.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("sessions.db")]);
}

#[test]
fn a_failed_upgrade_leaves_the_previous_schema() {
    let t = TestStore::empty();
    let db = t.dir.path().join("sessions.db");
    {
        // A sessionstore history with nothing applied, beside a `messages` table that
        // makes V1 fail halfway through (its `sessions` table is already made by then).
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "CREATE TABLE refinery_schema_history (version int4 PRIMARY KEY, name VARCHAR(255),
                                                   applied_on VARCHAR(255), checksum VARCHAR(255));
             CREATE TABLE messages (whatever TEXT);",
        )
        .unwrap();
    }
    let err = assert_one_line_error(&t.run(&["migrate"]));
    assert!(err.contains("migration failed"), "{err}");
    assert_eq!(tables(&db), ["messages", "refinery_schema_history"]);
    assert!(history_rows(&db).is_empty());
}

#[test]
fn another_programs_sqlite_database_is_refused_and_left_unchanged() {
    let t = TestStore::empty();
    let db = t.dir.path().join("sessions.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("CREATE TABLE bookmarks (url TEXT);")
            .unwrap();
    }
    let before = std::fs::read(&db).unwrap();
    for args in [
        &["migrate"][..],
        &["migrate", "--dry-run"],
        &["session", "new"],
    ] {
        let err = assert_one_line_error(&t.run(args));
        assert!(err.contains("sqlite database of something else"), "{err}");
    }
    assert_eq!(std::fs::read(&db).unwrap(), before);
    assert_eq!(tables(&db), ["bookmarks"]);
}

#[test]
fn a_refused_wal_database_gets_no_side_files() {
    let t = TestStore::empty();
    let db = t.dir.path().join("sessions.db");
    json(&t.run(&["migrate", "--json"]));
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute(
            "INSERT INTO refinery_schema_history (version, name, applied_on, checksum)
             VALUES (99, 'later', '2030-01-01T00:00:00Z', '1')",
            [],
        )
        .unwrap();
    }
    let before = settled_bytes(&db);
    let listing = || {
        let mut names: Vec<_> = std::fs::read_dir(t.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let files = listing();
    assert_one_line_error(&t.run(&["migrate"]));
    assert_eq!(listing(), files, "no -wal or -shm file appeared");
    assert_eq!(std::fs::read(&db).unwrap(), before);
}

#[test]
fn concurrent_migrate_processes_both_succeed_and_apply_once() {
    for _ in 0..5 {
        let t = TestStore::empty();
        let db = t.db_path();
        let spawn = || t.bin().args(["migrate", "--json"]).spawn();
        let (a, b) = (spawn(), spawn());
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let mut applied = 0;
        for out in &outs {
            let report = json(out);
            applied += report["applied"].as_array().unwrap().len();
            assert_eq!(report["current"], crate::support::latest_version());
        }
        assert_eq!(
            applied,
            crate::support::migration_names().len(),
            "exactly one process applied every migration"
        );
        let want: Vec<(i64, String)> = crate::support::migration_names()
            .iter()
            .map(|n| {
                let (version, name) = n[1..].split_once("__").unwrap();
                (version.parse().unwrap(), name.to_owned())
            })
            .collect();
        assert_eq!(history_rows(&db), want);
    }
}

#[test]
fn no_column_holds_a_path_root_or_directory() {
    let t = TestStore::empty();
    json(&t.run(&["migrate", "--json"]));
    // The probe's audit, with at least the words this test has always looked for.
    for word in ["path", "root", "dir", "folder", "location", "file"] {
        assert!(sessionstore::oracle::PATH_WORDS.contains(&word), "{word}");
    }
    let audit = sessionstore::oracle::audit_database(&crate::support::config_in(t.dir.path()), &[])
        .unwrap();
    assert!(
        audit.columns.len() > 20,
        "the schema was read: {:?}",
        audit.columns
    );
    assert!(
        audit.path_columns.is_empty(),
        "{:?} look like they store a path",
        audit.path_columns
    );
    // The one documented exception: the working directory an ACP client gave for a
    // session, its own words kept as given. It is there, it is the only one, and the
    // audit's words find it (so the exception, not a gap in the words, lets it by).
    assert_eq!(
        sessionstore::oracle::CLIENT_CONTENT_COLUMNS,
        ["sessions.cwd"]
    );
    assert!(audit.columns.contains(&"sessions.cwd".to_owned()));
    assert!(
        sessionstore::oracle::PATH_WORDS
            .iter()
            .any(|w| "cwd".contains(w))
    );
}

#[test]
fn a_directory_given_as_the_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = crate::support::Bin::new(dir.path())
        .args(["migrate", "--db"])
        .arg(dir.path())
        .output();
    let err = assert_one_line_error(&out);
    assert!(err.contains("is a directory"), "{err}");
}

#[test]
fn processes_that_create_a_database_at_once_all_succeed() {
    for _ in 0..3 {
        let t = TestStore::empty();
        let children: Vec<_> = (0..4)
            .map(|_| t.bin().args(["session", "new", "--json"]).spawn())
            .collect();
        for child in children {
            json(&child.wait_with_output().unwrap());
        }
        let db = t.db_path();
        assert_eq!(
            history_rows(&db).len(),
            crate::support::migration_names().len()
        );
        let conn = rusqlite::Connection::open(&db).unwrap();
        let sessions: i64 = conn
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .unwrap();
        assert_eq!(sessions, 4);
    }
}
