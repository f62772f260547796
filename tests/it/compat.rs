//! The database as other programs see it: the system's own SQLite (Python's `sqlite3`
//! module, else the `sqlite3` command), often older than the one the store is built
//! with, opens a store the binary wrote, reads every table and view, and deletes a
//! message. Skipped, with a notice, where neither is installed; only ever run on a
//! plain database (the test writes its own, and never with a key).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{PNG, TestStore, json, stderr, stdout};

/// What runs the system's SQLite here.
enum SystemSqlite {
    /// `python3`, whose `sqlite3` module links the system's library.
    Python,
    /// The `sqlite3` command.
    Shell,
}

impl SystemSqlite {
    /// The first that answers with its version, which is printed.
    fn find() -> Option<SystemSqlite> {
        let python = Command::new("python3")
            .args(["-c", "import sqlite3; print(sqlite3.sqlite_version)"])
            .output();
        if let Ok(out) = python
            && out.status.success()
        {
            eprintln!(
                "the system's sqlite through python3: {}",
                String::from_utf8_lossy(&out.stdout).trim()
            );
            return Some(SystemSqlite::Python);
        }
        let shell = Command::new("sqlite3").arg("--version").output();
        if let Ok(out) = shell
            && out.status.success()
        {
            eprintln!(
                "the system's sqlite command: {}",
                String::from_utf8_lossy(&out.stdout).trim()
            );
            return Some(SystemSqlite::Shell);
        }
        None
    }

    /// Reads every row of every table and view of `db`, then deletes message
    /// `message` and runs FTS5's integrity check of the search index against its
    /// rows, in one transaction that commits; prints `<type> <name> <rows>` a line.
    fn read_all_and_delete(&self, db: &Path, message: &str) -> std::process::Output {
        match self {
            SystemSqlite::Python => Command::new("python3")
                .args(["-c", PYTHON])
                .arg(db)
                .arg(message)
                .output()
                .expect("python3 runs"),
            SystemSqlite::Shell => {
                let listed = Command::new("sqlite3")
                    .arg(db)
                    .arg(LIST)
                    .output()
                    .expect("sqlite3 runs");
                assert!(listed.status.success(), "{}", stderr(&listed));
                let mut script = String::from("BEGIN;\n");
                for line in stdout(&listed).lines() {
                    let (kind, name) = line.split_once('|').expect("type|name");
                    let quoted = name.replace('"', "\"\"");
                    script.push_str(&format!(
                        "SELECT '{kind} {name} ' || count(*) FROM (SELECT * FROM \"{quoted}\");\n"
                    ));
                }
                script.push_str(&format!(
                    "DELETE FROM messages WHERE id = '{message}';\n\
                     SELECT 'deleted ' || changes();\n\
                     INSERT INTO search (search, rank) VALUES ('integrity-check', 1);\n\
                     COMMIT;\n"
                ));
                // Read from standard input, the script stops at its first error.
                let mut shell = Command::new("sqlite3")
                    .arg("-bail")
                    .arg(db)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("sqlite3 runs");
                shell
                    .stdin
                    .take()
                    .expect("its stdin")
                    .write_all(script.as_bytes())
                    .expect("sqlite3 reads its script");
                shell.wait_with_output().expect("sqlite3 ends")
            }
        }
    }
}

/// Every table and view, virtual tables and FTS5's own tables included.
const LIST: &str =
    "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name";

/// `read_all_and_delete` in Python: argv[1] the database, argv[2] the message.
const PYTHON: &str = r#"
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
for kind, name in conn.execute(
        "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name"
        ).fetchall():
    rows = conn.execute('SELECT * FROM "%s"' % name.replace('"', '""')).fetchall()
    print(kind, name, len(rows))
deleted = conn.execute("DELETE FROM messages WHERE id = ?", (sys.argv[2],)).rowcount
print("deleted", deleted)
conn.execute("INSERT INTO search (search, rank) VALUES ('integrity-check', 1)")
conn.execute("COMMIT")
"#;

/// Issue 45, item 5: Debian 12's and Python 3.11's SQLite (3.40) could neither read
/// the search view nor delete a message of a store (V4 to V14 used `concat_ws` and
/// `->`/`->>`), and Ubuntu 22.04's (3.37) not even read the view. A store written by
/// the binary (a titled session, an attachment, messages with an expansion and a
/// transcript, a recorded thought, answer and tool call, and an answer long enough to
/// be sealed in a segment) is read whole by the system's SQLite, and a message row is
/// deleted there, its search entry with it, leaving FTS5's index agreeing with its rows.
#[test]
fn the_systems_sqlite_reads_every_table_and_view_and_deletes_a_message() {
    let Some(sqlite) = SystemSqlite::find() else {
        eprintln!(
            "skipped: neither python3 with its sqlite3 module nor the sqlite3 command is \
             installed, so the system's SQLite cannot be tried"
        );
        return;
    };
    let t = TestStore::empty();
    assert!(t.config.key.is_none(), "never on an encrypted database");
    let sid = json(&t.run(&["session", "new", "--title", "Harbour notes", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let file = t.dir.path().join("chart.png");
    std::fs::write(&file, PNG).unwrap();
    let stored = json(&t.run(&[
        "attach",
        "--session",
        &sid,
        file.to_str().unwrap(),
        "--json",
    ]));
    let uri = stored[0]["uri"].as_str().unwrap().to_owned();
    json(&t.run(&[
        "send",
        "--session",
        &sid,
        "--text",
        "what is this?",
        "--attach",
        &uri,
        "--json",
    ]));
    let chunk = |kind: &str, text: &str| {
        serde_json::json!({"sessionUpdate": kind, "content": {"type": "text", "text": text}})
            .to_string()
            + "\n"
    };
    let record = |lines: String| {
        let out = t
            .bin()
            .args(["record", "--session", &sid, "--json"])
            .stdin(lines)
            .output();
        assert!(out.status.success(), "{}", stderr(&out));
    };
    record(
        chunk("agent_thought_chunk", "Looking at the chart.")
            + &chunk("agent_message_chunk", "A heron ")
            + &chunk("agent_message_chunk", "on the quay.")
            + &serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "tide",
                "title": "Read the tide table", "kind": "read", "status": "pending"})
            .to_string()
            + "\n",
    );
    let message = json(&t.run(&[
        "send",
        "--session",
        &sid,
        "--text",
        "and the tide?\n",
        "--expanded",
        "\nwhen is high water?\n",
        "--transcript",
        "tide",
        "--json",
    ]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let line = "cormorant ".repeat(2_000);
    for _ in 0..4 {
        record(chunk("agent_message_chunk", &line));
    }
    json(&t.run(&["send", "--session", &sid, "--text", "thanks", "--json"]));
    assert!(
        !t.dir.path().join("sessions.db-wal").exists(),
        "every writer closed"
    );

    let out = sqlite.read_all_and_delete(&t.db_path(), &message);
    assert!(
        out.status.success(),
        "the system's SQLite failed: {}{}",
        stdout(&out),
        stderr(&out)
    );
    let printed = stdout(&out);
    let counts: std::collections::BTreeMap<&str, i64> = printed
        .lines()
        .filter_map(|l| {
            let mut words = l.split(' ');
            let (kind, name, n) = (words.next()?, words.next()?, words.next()?);
            (kind != "deleted").then(|| (name, n.parse().expect("a count")))
        })
        .collect();
    for (name, at_least) in [
        ("sessions", 1),
        ("messages", 2),
        ("items", 3),
        ("item_parts", 1),
        ("events", 1),
        ("session_events", 1),
        ("search_text", 5),
        ("search", 5),
    ] {
        let n = counts.get(name).copied();
        assert!(n >= Some(at_least), "{name}: {n:?} in {printed}");
    }
    assert!(printed.contains("deleted 1"), "{printed}");
    let rows = t
        .raw_query(&format!(
            "SELECT count(*) FROM messages WHERE id = '{message}'"
        ))
        .unwrap();
    assert_eq!(rows, [[Some("0".to_owned())]]);
}
