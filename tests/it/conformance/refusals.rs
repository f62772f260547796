//! What the store refuses on both engines, and that a refusal changes nothing: a
//! schema behind this binary (reading commands point at `migrate`), a schema with a
//! migration this binary does not know (every command, writing or not), and a
//! database it cannot use at all (a bad connection string, a server that does not
//! answer; on SQLite a file that is not a database), each said in one line that never
//! shows a password.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use super::common::export;
use crate::support::{Bin, TestStore, conformance, json, stderr, stdout};

conformance!(
    a_schema_behind_this_binary_is_refused_by_readers_and_left_as_it_was,
    a_schema_newer_than_this_binary_is_refused_by_every_command,
    a_database_that_cannot_be_used_is_one_line_without_its_password,
);

/// What `b` holds, read behind the store's back: its tables, each table's rows, and
/// the migration history.
fn state(b: &TestStore) -> Vec<String> {
    let catalog = if b.is_postgres() {
        "SELECT table_name FROM information_schema.tables \
         WHERE table_schema = current_schema() ORDER BY 1"
    } else {
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1"
    };
    let tables: Vec<String> = b
        .raw_query(catalog)
        .unwrap()
        .into_iter()
        .map(|row| row[0].clone().unwrap())
        .collect();
    let mut out = vec![];
    for table in &tables {
        // Every column as text, so that the two engines are read alike.
        let rows = b
            .raw_query(&format!("SELECT * FROM {table}"))
            .unwrap_or_else(|e| panic!("{table}: {e}"));
        let mut rows: Vec<String> = rows.iter().map(|r| format!("{table}: {r:?}")).collect();
        rows.sort();
        out.push(format!("table {table}: {} rows", rows.len()));
        out.extend(rows);
    }
    out
}

/// On SQLite, every file in the store's folder with its bytes: a refusal writes no
/// byte and leaves no `-wal`, `-shm` or backup beside the database. PostgreSQL keeps
/// no file of the store's; `state` is what it holds.
fn files(b: &TestStore) -> BTreeMap<PathBuf, Vec<u8>> {
    if b.is_postgres() {
        return BTreeMap::new();
    }
    crate::support::snapshot(b.dir.path())
}

/// Runs `args` with `--json` and checks the refusal: exit `code`, nothing on stdout,
/// one line on stderr holding a JSON error of `kind`. Returns its message.
fn refused(b: &TestStore, args: &[&str], kind: &str, code: i32) -> String {
    let mut all = args.to_vec();
    all.push("--json");
    let out = b.run(&all);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
    assert!(out.stdout.is_empty(), "{args:?}: {}", stdout(&out));
    let text = stderr(&out);
    assert_eq!(text.trim_end().lines().count(), 1, "{args:?}: {text}");
    let error: serde_json::Value = serde_json::from_str(&text).expect("a JSON error");
    assert_eq!(error["error"]["kind"], kind, "{args:?}: {text}");
    error["error"]["message"].as_str().unwrap().to_owned()
}

/// The migration files of `b`'s engine, by version.
fn migration_sql(b: &TestStore, version: u32) -> String {
    let folder = if b.is_postgres() {
        "migrations-postgres"
    } else {
        "migrations"
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(folder);
    let prefix = format!("V{version}__");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".sql"))
        })
        .unwrap_or_else(|| panic!("no {prefix} in {dir:?}"));
    std::fs::read_to_string(file).unwrap()
}

/// What a reading command is given: a session id and a URI that may not exist (the
/// refusal comes before any row is looked at), and an output path.
const SESSION: &str = "01a22b1d-b6fa-778b-a534-d674f3630de8";

fn reading_commands(out: &str) -> Vec<Vec<String>> {
    let uri = format!("attachment:///{SESSION}/notes.txt");
    [
        &["session", "list"][..],
        &["session", "show", SESSION],
        &["attachment", "list", "--session", SESSION],
        &["attachment", "get", &uri],
        &["events", "--session", SESSION],
        &["verify"],
        &["dispatch", "--session", SESSION, "--format", "acp"],
        &["restore", "--session", SESSION, "--format", "acp"],
        &["search", "anything"],
        &["export", "--session", SESSION, "--out", out],
        &["session", "delete", SESSION, "--dry-run"],
        &["gc", "--dry-run"],
    ]
    .iter()
    .map(|args| args.iter().map(|a| a.to_string()).collect())
    .collect()
}

async fn a_schema_behind_this_binary_is_refused_by_readers_and_left_as_it_was(b: TestStore) {
    // refinery's history of a store that applied everything, for the rows of the two
    // migrations applied here by hand (their checksums included, so that `migrate`
    // later takes this schema for its own).
    let reference = b.another();
    json(&reference.run(&["migrate", "--json"]));
    let history = reference
        .raw_query(
            "SELECT version, name, applied_on, checksum FROM refinery_schema_history \
             WHERE version <= 2 ORDER BY version",
        )
        .unwrap();
    assert_eq!(history.len(), 2);
    // The history table as refinery makes it: on SQLite its text is part of the
    // schema a writer compares, so it is copied from the reference store.
    let history_table = if b.is_postgres() {
        "CREATE TABLE refinery_schema_history (version int4 PRIMARY KEY, \
         name VARCHAR(255), applied_on VARCHAR(255), checksum VARCHAR(255))"
            .to_owned()
    } else {
        reference
            .raw_query("SELECT sql FROM sqlite_master WHERE name = 'refinery_schema_history'")
            .unwrap()[0][0]
            .clone()
            .unwrap()
    };
    let mut setup = format!("{history_table};\n");
    for version in [1, 2] {
        setup.push_str(&migration_sql(&b, version));
        setup.push_str(";\n");
    }
    for row in &history {
        let v: Vec<&str> = row.iter().map(|c| c.as_deref().unwrap()).collect();
        setup.push_str(&format!(
            "INSERT INTO refinery_schema_history VALUES ({}, '{}', '{}', '{}');\n",
            v[0], v[1], v[2], v[3]
        ));
    }
    setup.push_str(&format!(
        "INSERT INTO sessions (id, tools_host, created_at, updated_at) VALUES \
         ('{SESSION}', 'local', '2026-01-01T00:00:00.000000000Z', '2026-01-01T00:00:00.000000000Z');"
    ));
    b.raw_execute(&setup).unwrap();

    let (before, on_disk) = (files(&b), state(&b));
    assert!(
        on_disk.contains(&"table sessions: 1 rows".to_owned()),
        "{on_disk:?}"
    );
    let export = b.dir.path().join("out.tar");
    for args in reading_commands(export.to_str().unwrap()) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let message = refused(&b, &args, "needs_migration", 1);
        assert!(
            message.contains("sessionstore migrate"),
            "{args:?}: {message}"
        );
        assert!(message.contains("version 2"), "{args:?}: {message}");
    }
    // A plan reads too: it names what is pending and applies none of it.
    let plan = json(&b.run(&["migrate", "--dry-run", "--json"]));
    assert_eq!(
        plan["pending"],
        serde_json::json!(crate::support::migration_names()[2..])
    );
    assert_eq!(plan["current"], 2);
    assert!(!export.exists(), "a refused export writes nothing");
    assert_eq!(files(&b), before, "a refused reader changed a file");
    assert_eq!(state(&b), on_disk, "a refused reader changed the database");

    // `migrate` takes the hand-made schema as its own and brings it up; then the
    // readers work, and the hand-made row is still there.
    let report = json(&b.run(&["migrate", "--json"]));
    assert_eq!(
        report["applied"],
        serde_json::json!(crate::support::migration_names()[2..])
    );
    if b.is_postgres() {
        // The migrations run in one transaction; no copy is taken on a server.
        assert!(report.get("backup").is_none(), "{report}");
    } else {
        // SQLite's own promise: the file as it was is kept beside it first.
        let backup = PathBuf::from(report["backup"].as_str().unwrap());
        assert_eq!(backup, PathBuf::from(format!("{}.v2.bak", b.db())));
        assert!(backup.is_file());
    }
    let listed = json(&b.run(&["session", "list", "--json"]));
    assert_eq!(listed["sessions"][0]["id"], SESSION, "{listed}");
}

async fn a_schema_newer_than_this_binary_is_refused_by_every_command(b: TestStore) {
    json(&b.run(&["migrate", "--json"]));
    let sid = json(&b.run(&["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let upload = b.dir.path().join("notes.txt");
    std::fs::write(&upload, b"notes").unwrap();
    let attached = json(&b.run(&[
        "attach",
        "--session",
        &sid,
        upload.to_str().unwrap(),
        "--json",
    ]));
    let uri = attached[0]["uri"].as_str().unwrap().to_owned();
    json(&b.run(&[
        "send",
        "--session",
        &sid,
        "--text",
        "hello",
        "--attach",
        &uri,
        "--json",
    ]));
    let archive = b.dir.path().join("s.tar");
    export(|args| b.run(args), &sid, &archive);
    b.raw_execute(
        "INSERT INTO refinery_schema_history VALUES \
         (99, 'from_the_future', '2030-01-01T00:00:00Z', '1')",
    )
    .unwrap();

    let (before, on_disk) = (files(&b), state(&b));
    let export = b.dir.path().join("again.tar");
    let upload = upload.to_str().unwrap();
    let mut commands: Vec<Vec<String>> = reading_commands(export.to_str().unwrap())
        .into_iter()
        .map(|args| args.into_iter().map(|a| a.replace(SESSION, &sid)).collect())
        .collect();
    for args in [
        &["migrate"][..],
        &["migrate", "--dry-run"],
        &["session", "new"],
        &["session", "rename", &sid, "renamed"],
        &["session", "delete", &sid],
        &["session", "fork", &sid],
        &["attach", "--session", &sid, upload],
        &["send", "--session", &sid, "--text", "more"],
        &["record", "--session", &sid],
        &["drain", "--session", &sid, "--format", "acp"],
        &["import", archive.to_str().unwrap()],
        &["gc"],
    ] {
        commands.push(args.iter().map(|a| a.to_string()).collect());
    }
    for args in &commands {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let message = refused(&b, &args, "newer_schema", 3);
        assert!(
            message.contains("V99__from_the_future"),
            "{args:?}: {message}"
        );
    }
    assert!(!export.exists(), "a refused export writes nothing");
    assert!(
        !b.configured().join(&sid).join("notes (1).txt").exists(),
        "a refused attach stores nothing"
    );
    assert_eq!(files(&b), before, "a refused command changed a file");
    assert_eq!(state(&b), on_disk, "a refused command changed the database");
}

/// The binary with `--db db`, `args` and `--json` or not: its one error line.
fn fails(home: &Path, db: &str, args: &[&str], json: bool) -> (Output, String) {
    let mut cmd = Bin::new(home);
    cmd.args(args).arg("--db").arg(db);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output();
    assert!(!out.status.success(), "{db} {args:?}");
    assert!(out.stdout.is_empty(), "{db} {args:?}: {}", stdout(&out));
    let text = stderr(&out);
    assert_eq!(text.trim_end().lines().count(), 1, "{db} {args:?}: {text}");
    assert!(!text.contains("panicked"), "{text}");
    (out, text)
}

async fn a_database_that_cannot_be_used_is_one_line_without_its_password(b: TestStore) {
    let home = b.dir.path();
    let secret = "hunter2";
    if b.is_postgres() {
        let server = crate::support::postgres_url().unwrap();
        let (_, host_port) = server
            .split_once('@')
            .expect("the test server's URL names its host");
        let host_port = host_port.split('/').next().unwrap();
        // A connection string that does not parse is refused at once (exit 3) and
        // names what is wrong with it.
        for (db, what) in [
            (
                format!("postgres://alice:{secret}@127.0.0.1:notaport/db"),
                "invalid value for option `port`",
            ),
            (
                format!("postgres://alice:{secret}@{host_port}/db?sslmode=bogus"),
                "invalid value for option `sslmode`",
            ),
            (
                format!("postgresql://alice@{host_port}/db?password={secret}&nonsense=1"),
                "unknown option `nonsense`",
            ),
        ] {
            for (args, json) in [(&["session", "list"][..], false), (&["migrate"], true)] {
                let (out, text) = fails(home, &db, args, json);
                assert_eq!(out.status.code(), Some(3), "{db}: {text}");
                assert!(!text.contains(secret), "{text}");
                assert!(
                    text.contains("not a valid PostgreSQL connection string"),
                    "{text}"
                );
                assert!(text.contains(what), "{text}");
                assert!(!text.contains("sqlite"), "{text}");
            }
        }
        // A server that does not answer, or has no such database, is a failure
        // (exit 1: running again may work) that says why, after the pool's wait
        // (ten seconds each; the password once in each of its two places).
        for (db, why) in [
            (
                format!("postgres://alice:{secret}@127.0.0.1:1/db"),
                "Connection refused",
            ),
            (
                format!("postgresql://postgres@{host_port}/no_such_database?password={secret}"),
                "\"no_such_database\" does not exist",
            ),
        ] {
            let (out, text) = fails(home, &db, &["verify"], true);
            assert_eq!(out.status.code(), Some(1), "{db}: {text}");
            assert!(!text.contains(secret), "{text}");
            let error: serde_json::Value = serde_json::from_str(&text).expect("a JSON error");
            assert_eq!(error["error"]["kind"], "unreachable", "{text}");
            let message = error["error"]["message"].as_str().unwrap();
            assert!(
                message.starts_with("cannot connect to postgres"),
                "{message}"
            );
            assert!(message.contains(why), "{db}: {message}");
        }
    } else {
        // SQLite's counterpart: a path that is not a database is refused (exit 3) in
        // one line and left byte for byte as it was, with nothing beside it.
        let folder = home.join("a folder");
        std::fs::create_dir_all(&folder).unwrap();
        let text_file = home.join("notes.db");
        std::fs::write(&text_file, format!("password={secret}\n").repeat(300)).unwrap();
        let before = crate::support::snapshot(home);
        for db in [&folder, &text_file] {
            for (args, json) in [(&["session", "list"][..], false), (&["migrate"], true)] {
                let (out, text) = fails(home, db.to_str().unwrap(), args, json);
                assert_eq!(out.status.code(), Some(3), "{db:?}: {text}");
                assert!(!text.contains(secret), "{text}");
            }
        }
        assert_eq!(crate::support::snapshot(home), before);
    }
}
