//! Databases of every released schema version (`tests/fixtures/v<N>`, made by the
//! script beside them): each upgrades to the same schema a fresh database gets, and
//! still verifies and restores from wherever its attachment trees are moved to.

use std::path::{Path, PathBuf};

use crate::support::{Bin, TestStore, config_in, copy_tree, fixture, json, snapshot};

/// Every fixture version; a new released schema adds its folder here.
const FIXTURES: &[&str] = &[
    "v1", "v2", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16",
];

/// `(type, name, sql)` of every schema object, and `(version, name, checksum)` of
/// every applied migration.
type Schema = (
    Vec<(String, String, Option<String>)>,
    Vec<(i64, String, String)>,
);

/// The schema as SQLite records it, and the migration history without its times.
fn schema(db: &Path) -> Schema {
    let conn = rusqlite::Connection::open(db).unwrap();
    let objects = conn
        .prepare("SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let history = conn
        .prepare("SELECT version, name, checksum FROM refinery_schema_history ORDER BY version")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    (objects, history)
}

#[test]
fn every_fixture_upgrades_to_the_schema_of_a_fresh_database() {
    let fresh = TestStore::empty();
    json(&fresh.run(&["migrate", "--json"]));
    let want = schema(&fresh.db_path());
    for version in FIXTURES {
        let t = TestStore::empty();
        copy_tree(&fixture(version), t.dir.path());
        let report = json(&t.run(&["migrate", "--json"]));
        assert_eq!(report["current"], want.1.last().unwrap().0, "{version}");
        assert_eq!(schema(&t.db_path()), want, "{version}");
        let out = t.run(&["verify"]);
        assert!(out.status.success(), "{version}: {out:?}");
    }
}

#[test]
fn the_v1_fixture_restores_from_moved_roots() {
    let dir = tempfile::tempdir().unwrap();
    let moved = dir.path().join("somewhere else");
    copy_tree(&fixture("v1"), &moved);
    let sid = std::fs::read_to_string(moved.join("session-id")).unwrap();
    // Reading commands never upgrade: the V1 database is migrated first, as a user would.
    let migrated = Bin::new(dir.path())
        .args(["migrate", "--json", "--db"])
        .arg(moved.join("sessions.db"))
        .output();
    assert_eq!(
        json(&migrated)["applied"],
        serde_json::json!(crate::support::migration_names()[1..])
    );
    let out = Bin::new(dir.path())
        .args(["restore", "--format", "acp", "--session", sid.trim()])
        .on(&moved_store(&moved))
        .output();
    let restored = json(&out);
    let messages = restored["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "user", "user"],
        "the queued one stays queued"
    );
    assert_eq!(messages[1]["content"].as_array().unwrap().len(), 1);
    let paths = attachment_paths(&restored, &moved);
    for (name, path) in &paths {
        let expected_root = if name == "old.txt" {
            "legacy"
        } else {
            "attachments"
        };
        assert!(path.starts_with(moved.join(expected_root)), "{path:?}");
    }
    // 6 references, 1 image-only, 1 custom command.
    assert_eq!(paths.len(), 8);
}

/// The store of a fixture tree copied to `moved`: its database, its configured root
/// and its legacy root.
fn moved_store(moved: &Path) -> sessionstore::Config {
    let mut config = config_in(moved);
    config.roots.legacy = vec![moved.join("legacy")];
    config
}

/// A copy of fixture `version` moved into a temporary folder's "somewhere else": the
/// folder, the copy and the fixture's session id.
fn moved_fixture(version: &str) -> (tempfile::TempDir, std::path::PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let moved = dir.path().join("somewhere else");
    copy_tree(&fixture(version), &moved);
    let sid = id_in(&moved, "session-id");
    (dir, moved, sid)
}

/// The id a fixture's script wrote to `file` (`session-id`, `second-session-id`, …).
fn id_in(moved: &Path, file: &str) -> String {
    std::fs::read_to_string(moved.join(file))
        .unwrap()
        .trim()
        .to_string()
}

/// The binary run with `args` on the store of a fixture moved to `moved`, with its
/// home in `home`.
fn run_moved(home: &Path, moved: &Path, args: &[&str]) -> std::process::Output {
    Bin::new(home).args(args).on(&moved_store(moved)).output()
}

/// Every attachment name a restored ACP history hands the model, with whether its
/// path lies under the moved legacy root (rather than the configured one).
fn roots_of(restored: &serde_json::Value, moved: &Path) -> Vec<(String, bool)> {
    attachment_paths(restored, moved)
        .into_iter()
        .map(|(name, path)| (name, path.starts_with(moved.join("legacy"))))
        .collect()
}

/// Every `(name, path)` a restored ACP history hands the model, each checked to lie
/// under `moved` and to hold exactly the bytes of the block that names it.
fn attachment_paths(restored: &serde_json::Value, moved: &Path) -> Vec<(String, PathBuf)> {
    let mut paths = vec![];
    for block in crate::support::history_blocks(restored) {
        let Some(context) = block["_meta"]["daemon/attachmentContext"].as_str() else {
            continue;
        };
        let line = context.lines().find(|l| l.starts_with('{')).unwrap();
        let meta: serde_json::Value = serde_json::from_str(line).unwrap();
        let path = PathBuf::from(meta["path"].as_str().unwrap());
        assert!(path.starts_with(moved), "{path:?} is under the moved roots");
        let name = meta["name"].as_str().unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        let b64 = |v: &serde_json::Value| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap())
                .unwrap()
        };
        let in_block = match block["type"].as_str().unwrap() {
            "image" => b64(&block["data"]),
            _ if block["resource"]["text"].is_string() => block["resource"]["text"]
                .as_str()
                .unwrap()
                .as_bytes()
                .to_vec(),
            _ => b64(&block["resource"]["blob"]),
        };
        assert_eq!(
            on_disk, in_block,
            "{name}: the path holds the block's bytes"
        );
        paths.push((name.to_string(), path));
    }
    paths
}

#[test]
fn the_frozen_fixtures_are_only_ever_copied() {
    for version in FIXTURES {
        let before = snapshot(&fixture(version));
        let t = TestStore::empty();
        copy_tree(&fixture(version), t.dir.path());
        json(&t.run(&["migrate", "--json"]));
        assert_eq!(snapshot(&fixture(version)), before, "{version} was changed");
        // (v13 landed with an empty `-wal` and its `-shm` beside it, and is frozen as
        // it landed.)
        if *version != "v13" {
            assert!(
                before
                    .keys()
                    .all(|p| !p.to_string_lossy().ends_with("-wal")),
                "{version}"
            );
        }
    }
}

/// Every row of the tables a V1 database has, as text, table by table.
fn v1_rows(db: &Path) -> Vec<(String, Vec<String>)> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    // V1's own columns: later versions add some, which an upgraded V1 row has empty.
    [
        ("sessions", "id, title, tools_host, created_at, updated_at"),
        (
            "messages",
            "id, session_id, seq, role, display_text, model_text, transcript, state, created_at",
        ),
        ("message_refs", "*"),
        ("events", "*"),
    ]
    .iter()
    .map(|(table, columns)| {
        let rows = sorted_rows(&conn, &format!("SELECT {columns} FROM {table}"));
        (table.to_string(), rows)
    })
    .collect()
}

#[test]
fn upgrading_the_v1_fixture_keeps_a_backup_that_opens_as_the_v1_database_it_was() {
    let t = TestStore::empty();
    copy_tree(&fixture("v1"), t.dir.path());
    let db = t.dir.path().join("sessions.db");
    let before = (schema(&db), v1_rows(&db));
    // A reading command refuses the V1 database and leaves it alone.
    let out = t.run(&["verify"]);
    assert!(!out.status.success());
    assert!(crate::support::stderr(&out).contains("sessionstore migrate"));
    let report = json(&t.run(&["migrate", "--json"]));
    assert_eq!(
        report["applied"],
        serde_json::json!(crate::support::migration_names()[1..])
    );
    let backup = PathBuf::from(report["backup"].as_str().unwrap());
    assert_eq!(backup, t.dir.path().join("sessions.db.v1.bak"));
    assert_eq!((schema(&backup), v1_rows(&backup)), before);
    // And every V1 row and event is still in the upgraded database.
    assert_eq!(v1_rows(&db), before.1);
}

/// The V2 fixture holds a recorded turn with every kind of item the store keeps, in
/// one history with its messages, and verifies as its generator left it.
#[test]
fn the_v2_fixture_holds_a_whole_turn_in_history_order() {
    let t = TestStore::empty();
    copy_tree(&fixture("v2"), t.dir.path());
    // Reading commands never upgrade, so the fixture is brought to this build's
    // schema first, as a user would.
    json(&t.run(&["migrate", "--json"]));
    let report = json(&t.run(&["verify", "--json"]));
    assert_eq!(report["items"], 9, "{report}");
    let conn = rusqlite::Connection::open(t.dir.path().join("sessions.db")).unwrap();
    let history: Vec<String> = conn
        .prepare(
            "SELECT kind FROM (SELECT seq, 'message:' || role || ':' || state AS kind FROM messages
             UNION ALL SELECT seq, kind FROM items) ORDER BY seq",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        history,
        [
            "message:user:delivered",
            "agent_thought",
            "plan",
            "tool_call",
            "tool_call",
            "agent_message",
            "current_mode_update",
            "available_commands_update",
            "session_info_update",
            "config_option_update",
            "message:user:delivered",
            "message:user:queued",
        ]
    );
}

/// The V4 fixture, moved elsewhere: its origin and fork restore from the moved roots,
/// search finds their words and none of the deleted session's, the list skips the
/// deleted session, and verify understands its tombstone.
#[test]
fn the_v4_fixture_restores_searches_and_lists_from_moved_roots() {
    let dir = tempfile::tempdir().unwrap();
    let moved = dir.path().join("somewhere else");
    copy_tree(&fixture("v4"), &moved);
    let id = |file: &str| {
        std::fs::read_to_string(moved.join(file))
            .unwrap()
            .trim()
            .to_string()
    };
    let (origin, fork, deleted) = (id("session-id"), id("fork-id"), id("deleted-id"));
    let run = |args: &[&str]| {
        json(
            &Bin::new(dir.path())
                .args(args)
                .arg("--json")
                .on(&moved_store(&moved))
                .output(),
        )
    };
    // Reading commands never upgrade: a later schema is migrated to first, as a user would.
    run(&["migrate"]);

    let restored = run(&["restore", "--format", "acp", "--session", &origin]);
    let roots = roots_of(&restored, &moved);
    assert_eq!(
        roots,
        [
            ("café chart.png".to_string(), false),
            ("notes 日本.txt".to_string(), false),
            ("old.txt".to_string(), true),
        ]
    );
    // The fork holds its own copies, the legacy file included, in its own folder.
    let restored = run(&["restore", "--format", "acp", "--session", &fork]);
    let paths = attachment_paths(&restored, &moved);
    assert_eq!(paths.len(), 3, "{paths:?}");
    for (_, path) in &paths {
        assert!(
            path.starts_with(moved.join("attachments").join(&fork)),
            "{path:?}"
        );
    }

    let sessions_of = |hits: serde_json::Value| -> Vec<String> {
        let mut ids: Vec<String> = hits
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["sessionId"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    };
    let mut both = vec![origin.clone(), fork.clone()];
    both.sort();
    let hits = run(&["search", "zeppelin"]);
    assert_eq!(sessions_of(hits.clone()), both, "{hits}");
    assert!(
        hits.as_array().unwrap().iter().all(
            |h| h["source"] == "message" && h["snippet"].as_str().unwrap().contains("zeppelin")
        ),
        "{hits}"
    );
    assert_eq!(sessions_of(run(&["search", "marmalade"])), [fork.as_str()]);
    // Titles are indexed too: only the origin's names the quarter.
    let hits = run(&["search", "quarterly"]);
    assert_eq!(sessions_of(hits.clone()), [origin.as_str()], "{hits}");
    assert_eq!(hits[0]["source"], "title", "{hits}");
    for word in ["walrus", "scratch", "draft"] {
        assert_eq!(run(&["search", word]), serde_json::json!([]), "{word}");
    }

    let listed: Vec<String> = run(&["session", "list"])["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(listed, [fork.clone(), origin.clone()], "newest first");
    assert!(!listed.contains(&deleted));
    assert!(!moved.join("attachments").join(&deleted).exists());

    let report = run(&["verify"]);
    assert_eq!(report["tombstones"], 1, "{report}");
    assert_eq!(report["sessions"], 2, "{report}");
    assert_eq!(report["problems"], serde_json::json!([]), "{report}");
}

/// The V5 fixture, a session an ACP client opened through the proxy, moved elsewhere:
/// its prompt replays in the order its blocks were sent (the attachments with paths
/// under the moved root that hold their bytes, the client's own link and the text's
/// `_meta` as they came), the agent's turn replays whole (the unknown update kind
/// verbatim), the cancelled and the interrupted turns are marked in their lines'
/// `_meta`, and `session show` has the working directory, the agent and the turns.
#[test]
fn the_v5_fixture_replays_a_proxied_session_in_order_from_moved_roots() {
    let dir = tempfile::tempdir().unwrap();
    let moved = dir.path().join("somewhere else");
    copy_tree(&fixture("v5"), &moved);
    let id = |file: &str| {
        std::fs::read_to_string(moved.join(file))
            .unwrap()
            .trim()
            .to_string()
    };
    let (sid, plain) = (id("session-id"), id("plain-id"));
    let run = |args: &[&str]| {
        Bin::new(dir.path())
            .args(args)
            .on(&moved_store(&moved))
            .output()
    };
    json(&run(&["migrate", "--json"]));

    let restored = json(&run(&["restore", "--format", "acp", "--session", &sid]));
    let names: Vec<String> = attachment_paths(&restored, &moved)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, ["chart.png", "notes q3.txt", "data.bin"]);
    let first = &restored["messages"][0]["content"];
    let kinds: Vec<&str> = first
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "text",
            "image",
            "text",
            "resource",
            "resource",
            "resource_link"
        ]
    );
    assert_eq!(
        first[2]["_meta"]["editor/selection"],
        serde_json::json!([3, 9])
    );
    assert_eq!(
        first[5]["uri"], "file:///home/ada/projects/ledger/ledger.rs",
        "the client's own link, as it sent it"
    );

    let lines = crate::support::stdout(&run(&[
        "restore",
        "--format",
        "acp-updates",
        "--session",
        &sid,
    ]));
    let updates: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = updates
        .iter()
        .map(|u| u["params"]["update"]["sessionUpdate"].as_str().unwrap())
        .collect();
    for kind in [
        "agent_thought_chunk",
        "agent_message_chunk",
        "tool_call",
        "plan",
        "sessionstore_test_future",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    let future = updates
        .iter()
        .find(|u| u["params"]["update"]["sessionUpdate"] == "sessionstore_test_future")
        .unwrap();
    assert_eq!(
        future["params"]["update"]["detail"],
        serde_json::json!({"n": 1})
    );
    let marks: Vec<&str> = updates
        .iter()
        .filter_map(|u| u["params"]["_meta"]["sessionstore/turn"]["state"].as_str())
        .collect();
    assert_eq!(marks, ["cancelled", "interrupted"], "{lines}");

    let shown = json(&run(&["session", "show", &sid, "--json"]));
    assert_eq!(shown["session"]["cwd"], "/home/ada/projects/ledger");
    assert_eq!(
        shown["session"]["agent"]["agent"],
        "sessionstore-test-agent"
    );
    let states: Vec<serde_json::Value> = shown["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["end"].clone())
        .collect();
    assert_eq!(
        states,
        [
            serde_json::json!({"outcome": "stopped", "stopReason": "end_turn"}),
            serde_json::json!({"outcome": "stopped", "stopReason": "cancelled"}),
            serde_json::Value::Null,
        ]
    );

    // The session made on the command line restores as any other, its legacy file
    // from the moved legacy root.
    let restored = json(&run(&["restore", "--format", "acp", "--session", &plain]));
    let roots = roots_of(&restored, &moved);
    assert_eq!(
        roots,
        [
            ("plain.txt".to_string(), false),
            ("old.txt".to_string(), true)
        ]
    );
    let verified = run(&["verify"]);
    assert!(
        verified.status.success(),
        "{}",
        crate::support::stdout(&verified)
    );
}

/// The V6 fixture, moved elsewhere, holds an answer still streaming (two appended
/// parts in `item_parts`): it restores whole, in every format and from a point, with
/// its attachments under the moved roots; search finds the folded answer; and the next
/// write seals the parts without changing a byte of what restores.
#[test]
fn the_v6_fixture_restores_a_streaming_answer_whole_and_the_next_write_seals_it() {
    let (dir, moved, sid) = moved_fixture("v6");
    let run = |args: &[&str]| {
        Bin::new(dir.path())
            .args(args)
            .on(&moved_store(&moved))
            .output()
    };
    let parts = || waiting_parts(&moved.join("sessions.db"), &sid);
    assert_eq!(parts(), 2, "the fixture holds an answer still streaming");
    // (Reading commands need the latest schema; V9 moves the parts, sealing none.)
    json(&run(&["migrate", "--json"]));
    assert_eq!(parts(), 2, "migrate does not seal");

    let restored = json(&run(&["restore", "--format", "acp", "--session", &sid]));
    let texts: Vec<&str> = restored["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"][0]["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        texts,
        [
            "High water is at 06:12, and the log mentions a lighthouse.",
            "The pelicans nest on the north mole"
        ]
    );
    let roots = roots_of(&restored, &moved);
    assert_eq!(
        roots,
        [
            ("tides.txt".to_string(), false),
            ("log.txt".to_string(), true)
        ]
    );
    let tail = json(&run(&[
        "restore",
        "--format",
        "acp",
        "--tail",
        "1",
        "--session",
        &sid,
    ]));
    assert_eq!(tail["messages"][0]["content"][0]["text"], texts[1]);
    let hits = json(&run(&["search", "lighthouse", "--json"]));
    assert_eq!(hits.as_array().unwrap().len(), 1, "{hits}");

    let formats = ["acp", "acp-updates", "openai", "openai-responses"];
    let before: Vec<Vec<u8>> = formats
        .iter()
        .map(|f| run(&["restore", "--format", f, "--session", &sid]).stdout)
        .collect();
    let out = run(&["record", "--session", &sid]);
    assert!(out.status.success(), "{out:?}");
    let out = run(&["send", "--session", &sid, "--text", "thanks", "--mid-turn"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(parts(), 0, "the next entry seals the streamed answer");
    for (format, before) in formats.iter().zip(&before) {
        let after = run(&["restore", "--format", format, "--session", &sid]).stdout;
        assert_eq!(
            &after, before,
            "{format}: the queued message does not restore"
        );
    }
    let verified = run(&["verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

/// The V7, V8, V9 and V10 fixtures (the same session, made by the store of each schema),
/// moved elsewhere: a sealed answer, a thought, and a long answer sealed in part while
/// it streamed, all indexed by the store itself (neither has an insert trigger for
/// search). Each restores whole, in every format and from a point, with its
/// attachments under the moved roots; search finds the message, each sealed segment
/// and the thought; `migrate` applies what is newer (V8 drops V6's index of the parts
/// still streaming, V9 moves those parts to `streaming_parts`, V10 makes the search
/// index read its text from the rows); and the next write
/// finds them from the item and seals them without changing a byte of what restores,
/// and search finds them.
#[test]
fn the_v7_fixture_restores_and_finds_what_the_store_indexed() {
    store_indexed_fixture("v7", 7);
}

#[test]
fn the_v8_fixture_restores_and_finds_what_the_store_indexed() {
    store_indexed_fixture("v8", 8);
}

#[test]
fn the_v9_fixture_restores_and_finds_what_the_store_indexed() {
    store_indexed_fixture("v9", 9);
}

#[test]
fn the_v10_fixture_restores_and_finds_what_the_store_indexed() {
    store_indexed_fixture("v10", 10);
}

#[test]
fn the_v11_fixture_restores_and_finds_what_the_store_indexed() {
    store_indexed_fixture("v11", 11);
}

#[test]
fn the_v12_fixture_restores_and_finds_what_the_store_indexed() {
    store_indexed_fixture("v12", 12);
}

/// The V12 fixture's second session holds the rows V12 writes (a tool call and a plan
/// that name their updates, a tool call given a body by its later update, an answer
/// that names its first chunk while its second streams): moved and opened by this
/// binary, it restores in every format, whole and from a tail, byte for byte as the
/// binary that made it printed.
#[test]
fn the_v12_fixture_restores_rows_that_name_their_updates_as_it_was_made() {
    let (dir, moved, _) = moved_fixture("v12");
    let two = std::fs::read_to_string(moved.join("second-session-id"))
        .unwrap()
        .trim()
        .to_string();
    let run = |args: &[&str]| {
        Bin::new(dir.path())
            .args(args)
            .on(&moved_store(&moved))
            .output()
    };
    json(&run(&["migrate", "--json"]));
    let conn = rusqlite::Connection::open(moved.join("sessions.db")).unwrap();
    let named: Vec<(String, bool)> = conn
        .prepare("SELECT kind, streaming_from IS NOT NULL FROM items WHERE body IS NULL AND session_id = ?1 ORDER BY seq")
        .unwrap()
        .query_map([&two], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    assert_eq!(
        named,
        [
            ("tool_call".to_owned(), false),
            ("plan".to_owned(), false),
            ("agent_message".to_owned(), true)
        ]
    );
    restores_as_made(&moved, &run, &two, "");
    let verified = run(&["verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

#[test]
fn the_v13_fixture_restores_and_finds_what_the_store_indexed() {
    store_indexed_fixture("v13", 13);
}

/// The V13 fixture's log is keyed part-way through its third session (the keys end at
/// the log's 1,024th event, about 970 events into it; the rest are past them): moved and opened
/// by this binary, its second and third sessions restore in every format, whole and
/// from a tail, byte for byte as the binary that made it printed, and `verify` is ok.
#[test]
fn the_v13_fixture_restores_a_log_keyed_part_way_as_it_was_made() {
    let (dir, moved, _) = moved_fixture("v13");
    let (two, three) = (
        id_in(&moved, "second-session-id"),
        id_in(&moved, "third-session-id"),
    );
    let run = |args: &[&str]| run_moved(dir.path(), &moved, args);
    json(&run(&["migrate", "--json"]));
    let conn = rusqlite::Connection::open(moved.join("sessions.db")).unwrap();
    let count = |sql: &str| -> i64 { conn.query_row(sql, [&three], |r| r.get(0)).unwrap() };
    let keyed = count(
        "SELECT count(*) FROM events WHERE session_id = ?1
           AND seq <= (SELECT upto FROM event_keys_upto)",
    );
    let unkeyed = count(
        "SELECT count(*) FROM events WHERE session_id = ?1
           AND seq > (SELECT upto FROM event_keys_upto)",
    );
    assert!(keyed > 0 && unkeyed > 0, "{keyed} keyed, {unkeyed} not");
    restores_as_made(&moved, &run, &two, "");
    restores_as_made(&moved, &run, &three, "third.");
    let verified = run(&["verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

#[test]
fn the_v14_fixture_restores_and_finds_what_the_store_indexed() {
    store_indexed_fixture("v14", 14);
}

#[test]
fn the_v15_fixture_restores_and_finds_what_the_store_indexed() {
    store_indexed_fixture("v15", 15);
}

/// Issue 47, item 9: V16 adds the archive flag and the title's source. The V15
/// fixture, upgraded: nothing is archived, every title stays, of no known source
/// (NULL: its events name none); an archived session restores as the binary that made
/// it printed, and `verify` agrees with the rows after an archive, a rename and an
/// unarchive.
#[test]
fn the_v15_fixture_upgraded_lists_nothing_archived_and_keeps_its_titles() {
    let (dir, moved, first) = moved_fixture("v15");
    let run = |args: &[&str]| {
        Bin::new(dir.path())
            .args(args)
            .on(&moved_store(&moved))
            .output()
    };
    let second = id_in(&moved, "second-session-id");
    let third = id_in(&moved, "third-session-id");
    json(&run(&["migrate", "--json"]));
    let db = moved.join("sessions.db");
    let rows = || -> Vec<(String, Option<String>, Option<String>, i64)> {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let mut stmt = conn
            .prepare("SELECT id, title, title_source, archived FROM sessions ORDER BY id")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let mut want = vec![
        (
            first.clone(),
            Some("Charting the estuary".to_owned()),
            None,
            0,
        ),
        (
            second.clone(),
            Some("Tide tables, renamed".to_owned()),
            None,
            0,
        ),
        (third.clone(), Some("heron on the quay".to_owned()), None, 0),
    ];
    want.sort();
    assert_eq!(rows(), want);
    let listed = json(&run(&["session", "list", "--json"]));
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 3, "{listed}");
    assert!(
        listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["archived"] == false)
    );
    let only = json(&run(&["session", "list", "--archived", "only", "--json"]));
    assert_eq!(only["sessions"], serde_json::json!([]));

    let archived = run(&["session", "archive", &second]);
    assert!(archived.status.success(), "{archived:?}");
    let listed = json(&run(&["session", "list", "--json"]));
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 2, "{listed}");
    let only = json(&run(&["session", "list", "--archived", "only", "--json"]));
    assert_eq!(only["sessions"][0]["id"], second.as_str());
    // Archived, it still restores as the binary that made it printed.
    restores_as_made(&moved, &run, &second, "");
    let renamed = json(&run(&[
        "session",
        "rename",
        &third,
        "Harbour notes",
        "--json",
    ]));
    assert_eq!(renamed["title"], "Harbour notes");
    let verified = run(&["verify"]);
    assert!(verified.status.success(), "{verified:?}");
    let unarchived = run(&["session", "unarchive", &second]);
    assert!(unarchived.status.success(), "{unarchived:?}");
    let verified = run(&["verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

/// Issue 45, item 5: V15 makes the search view and the message and item delete
/// triggers again without `concat_ws`, `->` and `->>`. The V14 fixture, upgraded: its
/// second session restores as the binary that made it printed; the view gives, row for
/// row and byte for byte, what V13's view (still in its migration) gives on the same
/// rows, the text of messages whose texts begin or end with newlines included; and
/// deleting the sessions (a message's texts and an item that names its update, each
/// taken out of the index by a V15 trigger) leaves FTS5's index agreeing with its
/// rows, which a delete handed other bytes than were indexed would break.
#[test]
fn the_v14_fixture_upgraded_indexes_and_deletes_as_concat_ws_and_the_arrows_did() {
    let (dir, moved, first) = moved_fixture("v14");
    let (two, three) = (
        id_in(&moved, "second-session-id"),
        id_in(&moved, "third-session-id"),
    );
    let run = |args: &[&str]| run_moved(dir.path(), &moved, args);
    json(&run(&["migrate", "--json"]));
    restores_as_made(&moved, &run, &two, "");

    let v13 = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations/V13__event_keys_written_a_batch_at_a_time.sql"),
    )
    .unwrap();
    let start = v13.find("CREATE VIEW search_text").unwrap();
    let end = start + v13[start..].find("FROM search_entries e);").unwrap();
    let old_view = v13[start..end + "FROM search_entries e)".len()].replace(
        "CREATE VIEW search_text",
        "CREATE TEMP VIEW search_text_v13",
    );
    let conn = rusqlite::Connection::open(moved.join("sessions.db")).unwrap();
    conn.execute_batch(&old_view).unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    let rows = count("SELECT count(*) FROM search_text");
    assert_eq!(rows, count("SELECT count(*) FROM temp.search_text_v13"));
    assert_eq!(
        count(
            "SELECT count(*) FROM search_text n JOIN temp.search_text_v13 o ON o.id = n.id
              WHERE n.body IS o.body AND typeof(n.body) = typeof(o.body)"
        ),
        rows
    );
    // The rows the delete triggers take apart are among them: messages whose texts
    // begin or end with a newline, and item rows that name their update.
    assert!(
        count(
            "SELECT count(*) FROM messages
              WHERE model_text LIKE char(10) || '%' OR display_text LIKE '%' || char(10)"
        ) >= 2
    );
    assert!(count("SELECT count(*) FROM items WHERE body IS NULL AND kind = 'agent_thought'") >= 1);
    assert_eq!(
        json(&run(&["search", "kelp", "--json"]))
            .as_array()
            .unwrap()
            .len(),
        1
    );
    drop(conn);

    let deleted = run(&["session", "delete", &three, &first]);
    assert!(deleted.status.success(), "{deleted:?}");
    let conn = rusqlite::Connection::open(moved.join("sessions.db")).unwrap();
    conn.execute(
        "INSERT INTO search (search, rank) VALUES ('integrity-check', 1)",
        [],
    )
    .unwrap();
    drop(conn);
    for gone in ["kelp", "heron", "gulls", "fathoms"] {
        let hits = json(&run(&["search", gone, "--json"]));
        assert_eq!(hits.as_array().unwrap().len(), 0, "{gone}: {hits}");
    }
    let verified = run(&["verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

/// Every row of the store's data tables, as text, table by table (sorted), with where
/// the log's AUTOINCREMENT counter stands.
fn data_rows(db: &Path) -> Vec<(String, Vec<String>)> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    [
        "sessions",
        "messages",
        "message_refs",
        "events",
        "event_keys",
        "event_keys_upto",
        "items",
        "item_parts",
        "streaming_parts",
        "turns",
        "settings",
        "tombstones",
    ]
    .iter()
    .map(|table| format!("SELECT * FROM {table}"))
    .chain(["SELECT name, seq FROM sqlite_sequence WHERE name = 'events'".to_owned()])
    .map(|sql| {
        let rows = sorted_rows(&conn, &sql);
        (sql, rows)
    })
    .collect()
}

/// Issue 46: V17 makes both engines' schemas alike, and V18 undoes V14 (sealed text
/// indexed when the writer is idle); neither changes a row of the store's data. The
/// V16 and V17 fixtures (the log keyed part-way through the fourth session, a sealed
/// segment left waiting to be indexed as a killed writer leaves it), upgraded: every
/// row of every data table, the log's keys and counter included, is byte for byte what
/// it was, and so is the backup, which opens as the database it was; the second and
/// fourth sessions restore as the binary that made them printed; the segment that
/// waited is indexed, and found by a read-only search; FTS5's index agrees with its
/// rows, and `verify` is ok.
#[test]
fn the_v16_fixture_upgraded_keeps_every_row_and_indexes_what_waited() {
    upgraded_keeps_every_row_and_indexes_what_waited(16);
}

#[test]
fn the_v17_fixture_upgraded_keeps_every_row_and_indexes_what_waited() {
    upgraded_keeps_every_row_and_indexes_what_waited(17);
}

fn upgraded_keeps_every_row_and_indexes_what_waited(version: usize) {
    let (dir, moved, _) = moved_fixture(&format!("v{version}"));
    let (two, four) = (
        id_in(&moved, "second-session-id"),
        id_in(&moved, "fourth-session-id"),
    );
    let run = |args: &[&str]| run_moved(dir.path(), &moved, args);
    let db = moved.join("sessions.db");
    let before = (schema(&db), data_rows(&db));
    let waiting: Vec<String> = rusqlite::Connection::open(&db)
        .unwrap()
        .prepare("SELECT item_id || '/' || part FROM search_waiting")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(waiting.len(), 1);
    let report = json(&run(&["migrate", "--json"]));
    assert_eq!(
        report["applied"],
        serde_json::json!(crate::support::migration_names()[version..]),
        "{report}"
    );
    let backup = PathBuf::from(report["backup"].as_str().unwrap());
    assert_eq!(backup, moved.join(format!("sessions.db.v{version}.bak")));
    assert_eq!((schema(&backup), data_rows(&backup)), before);
    assert_eq!(data_rows(&db), before.1);

    restores_as_made(&moved, &run, &two, "");
    restores_as_made(&moved, &run, &four, "fourth.");
    // V18 indexed the segment that waited (V14 undone): a read-only search finds it.
    let hits = json(&run(&["search", "cormorant", "--json"]));
    assert!(
        hits.as_array()
            .unwrap()
            .iter()
            .any(|h| h["source"] == "agent_message"),
        "{hits}"
    );
    let conn = rusqlite::Connection::open(&db).unwrap();
    let indexed: i64 = conn
        .query_row(
            "SELECT count(*) FROM search_entries WHERE entry_id = ?1",
            [&waiting[0]],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(indexed, 1, "the segment that waited is in the index");
    conn.execute(
        "INSERT INTO search (search, rank) VALUES ('integrity-check', 1)",
        [],
    )
    .unwrap();
    drop(conn);
    let verified = run(&["verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

/// `session` of a moved fixture restores in every format, whole and with `--tail 2`,
/// byte for byte as `expected/<prefix><format>[.tail-2]` holds what the binary that
/// made it printed.
fn restores_as_made(
    moved: &Path,
    run: &dyn Fn(&[&str]) -> std::process::Output,
    session: &str,
    prefix: &str,
) {
    for format in ["acp", "acp-updates", "openai", "openai-responses"] {
        for (tail, file) in [
            (None, format!("{prefix}{format}")),
            (Some("2"), format!("{prefix}{format}.tail-2")),
        ] {
            let mut args = vec!["restore", "--session", session, "--format", format];
            if let Some(n) = tail {
                args.extend(["--tail", n]);
            }
            let out = run(&args);
            assert!(out.status.success(), "{file}: {out:?}");
            let want = std::fs::read(moved.join("expected").join(&file)).unwrap();
            assert_eq!(
                String::from_utf8(out.stdout).unwrap(),
                String::from_utf8(want).unwrap(),
                "{file}"
            );
        }
    }
}

/// How many streamed parts of a session wait to be sealed: in `item_parts` before
/// V9, in `streaming_parts` since (V9 moves them there and leaves none behind).
fn waiting_parts(db: &Path, session: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    let count = |sql: &str| -> i64 { conn.query_row(sql, [session], |r| r.get(0)).unwrap() };
    let legacy = count("SELECT count(*) FROM item_parts WHERE sealed = 0 AND session_id = ?1");
    let streaming: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'streaming_parts'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    if streaming == 0 {
        return legacy;
    }
    assert_eq!(legacy, 0, "V9 moved every waiting part");
    count("SELECT count(*) FROM streaming_parts WHERE session_id = ?1")
}

/// The checks of the V7 to V11 fixtures: `version` is the fixture's schema.
fn store_indexed_fixture(name: &str, version: usize) {
    let (dir, moved, sid) = moved_fixture(name);
    let run = |args: &[&str]| {
        Bin::new(dir.path())
            .args(args)
            .on(&moved_store(&moved))
            .output()
    };
    let found = |query: &str| -> Vec<String> {
        let hits = json(&run(&["search", query, "--json"]));
        hits.as_array()
            .unwrap()
            .iter()
            .map(|h| h["source"].as_str().unwrap().to_owned())
            .collect()
    };
    let report = json(&run(&["migrate", "--json"]));
    assert_eq!(
        report["applied"],
        serde_json::json!(crate::support::migration_names()[version..]),
        "{report}"
    );
    let db = rusqlite::Connection::open(moved.join("sessions.db")).unwrap();
    let streaming_index: i64 = db
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'item_parts_streaming'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(streaming_index, 0, "V8 dropped it");
    let unsealed = || waiting_parts(&moved.join("sessions.db"), &sid);
    assert_eq!(unsealed(), 6, "the long answer's end is still streaming");

    let restored = json(&run(&["restore", "--format", "acp", "--session", &sid]));
    let texts: Vec<&str> = restored["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .flat_map(|m| m["content"].as_array().unwrap())
        .filter_map(|c| c["text"].as_str())
        .collect();
    assert!(
        texts.contains(&"Six fathoms at the bar, and the pilot book warns of a sandbank."),
        "{texts:?}"
    );
    let long = texts.iter().find(|t| t.starts_with("Albatross")).unwrap();
    assert_eq!(long.matches("cormorant").count(), 39 * 200);
    assert_eq!(
        roots_of(&restored, &moved),
        [
            ("soundings.txt".to_string(), false),
            ("pilot.txt".to_string(), true)
        ]
    );
    let tail = json(&run(&[
        "restore",
        "--format",
        "acp",
        "--tail",
        "1",
        "--session",
        &sid,
    ]));
    assert!(
        tail["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Albatross")
    );
    assert_eq!(found("fathoms"), ["agent_message"]);
    assert_eq!(found("soundings"), ["message"]);
    assert_eq!(found("sandbank"), ["agent_message"]);
    assert_eq!(found("albatross"), ["agent_message"]);
    assert_eq!(found("cormorant"), ["agent_message"], "one hit an item");
    let mut bar = found("bar");
    bar.sort();
    assert_eq!(bar, ["agent_message", "agent_thought"]);

    let formats = ["acp", "acp-updates", "openai", "openai-responses"];
    let before: Vec<Vec<u8>> = formats
        .iter()
        .map(|f| run(&["restore", "--format", f, "--session", &sid]).stdout)
        .collect();
    let out = run(&["send", "--session", &sid, "--text", "thanks", "--mid-turn"]);
    assert!(out.status.success(), "{out:?}");
    for (format, before) in formats.iter().zip(&before) {
        let after = run(&["restore", "--format", format, "--session", &sid]).stdout;
        assert_eq!(
            &after, before,
            "{format}: the queued message does not restore"
        );
    }
    assert_eq!(unsealed(), 0, "the send sealed the long answer's end");
    // The rest of the long answer, sealed by the send, is indexed too: still one hit.
    assert_eq!(found("cormorant"), ["agent_message"]);
    let segments = rusqlite::Connection::open(moved.join("sessions.db"))
        .unwrap()
        .query_row(
            "SELECT count(*) FROM search_entries WHERE entry_id LIKE '%/%'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .unwrap();
    assert_eq!(segments, 3, "each sealed segment has its entry");
    // Every entry holds what V4's and V6's triggers would have made of its row (since
    // V10, the text `search_text` reads from the row: its walk of the content blocks
    // gives what `json_each` gives), and every row they indexed has its entry: since
    // V11 an item is its own entry, under its row id, and `search_entries` names the
    // rest, under ids below zero.
    let conn = rusqlite::Connection::open(moved.join("sessions.db")).unwrap();
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap();
    let blocks = |json: &str, path: &str| {
        format!(
            "(SELECT group_concat(json_extract(value, '$.text'), char(10)) \
             FROM json_each({json}{path}) WHERE json_extract(value, '$.type') = 'text')"
        )
    };
    let differing = count(&format!(
        "SELECT count(*) FROM search_entries e JOIN search s ON s.rowid = e.id
         WHERE s.body IS NOT (CASE
           WHEN e.source = 'title' THEN (SELECT title FROM sessions WHERE id = e.entry_id)
           WHEN e.source = 'message' THEN (SELECT concat_ws(char(10), display_text,
               model_text, transcript) FROM messages WHERE id = e.entry_id)
           ELSE (SELECT {} FROM item_parts p JOIN items i ON i.id = p.item_id
               WHERE i.kind = e.source AND p.sealed = 1
               AND p.item_id || '/' || p.part = e.entry_id)
         END)",
        blocks("p.content", "")
    ));
    assert_eq!(differing, 0);
    let indexed = "('agent_message', 'agent_thought')";
    // (An item row with no body, V12, was indexed with the text of the one block of
    // the update it names.)
    let items_differing = count(&format!(
        "SELECT count(*) FROM items i JOIN search s ON s.rowid = i.rowid
         WHERE i.kind IN {indexed} AND s.body IS NOT coalesce({}, (
             SELECT json_extract(CAST(substr(CAST(ev.payload AS BLOB), i.made_by_start + 1,
                                             i.made_by_length) AS TEXT), '$.content.text')
             FROM events ev WHERE ev.seq = i.made_by_event))",
        blocks("i.body", ", '$.content'")
    ));
    assert_eq!(items_differing, 0);
    assert_eq!(
        count("SELECT count(*) FROM search_entries WHERE id >= 0"),
        0
    );
    assert_eq!(
        count("SELECT count(*) FROM search_entries"),
        count(&format!(
            "SELECT (SELECT count(*) FROM sessions WHERE title IS NOT NULL)
               + (SELECT count(*) FROM messages)
               + (SELECT count(*) FROM item_parts p JOIN items i ON i.id = p.item_id
                  WHERE p.sealed = 1 AND i.kind IN {indexed})"
        ))
    );
    assert_eq!(
        count("SELECT count(*) FROM search_docsize"),
        count(&format!(
            "SELECT (SELECT count(*) FROM search_entries)
               + (SELECT count(*) FROM items WHERE kind IN {indexed})"
        ))
    );
    // FTS5's own check: the terms it holds are those of the text each entry gives now.
    conn.execute(
        "INSERT INTO search (search, rank) VALUES ('integrity-check', 1)",
        [],
    )
    .unwrap();
    let verified = run(&["verify"]);
    assert!(verified.status.success(), "{verified:?}");
}

/// Every row a query returns, each as its values joined by `|`, sorted.
fn sorted_rows(conn: &rusqlite::Connection, sql: &str) -> Vec<String> {
    let mut stmt = conn.prepare(sql).unwrap();
    let columns = stmt.column_count();
    let mut rows: Vec<String> = stmt
        .query_map([], |r| {
            (0..columns)
                .map(|i| {
                    r.get::<_, rusqlite::types::Value>(i)
                        .map(|v| format!("{v:?}"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(|v| v.join("|"))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    rows.sort();
    rows
}
