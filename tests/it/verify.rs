//! `verify`: the tables are a projection of the event log, and edits made behind the
//! store's back are caught and named.

use crate::history::{FORMATS, lines, recorded, restore_of, sent};
use crate::restored::CollectRestore;
use crate::support::Whole;
use crate::support::{TestStore, all_sessions, stderr, stdout, user_text};
use sessionstore::lifecycle::DeleteOptions;
use sessionstore::model::{NewSession, TitleSource};

async fn seeded(t: &TestStore) -> sessionstore::Store {
    let store = t.open().await;
    let s = store.create_session(NewSession::default()).await.unwrap();
    for t in ["one", "two"] {
        store.send(s.id, user_text(t)).await.unwrap();
    }
    store
}

fn verify_cli(t: &TestStore) -> (bool, String) {
    let out = t.run(&["verify"]);
    (out.status.success(), stdout(&out))
}

#[tokio::test]
async fn a_clean_database_verifies() {
    let t = TestStore::empty();
    seeded(&t).await;
    let (ok, out) = verify_cli(&t);
    assert!(ok, "{out}");
    assert!(out.contains("1 session, 2 messages, 4 events: ok"), "{out}");
}

#[tokio::test]
async fn an_event_removed_behind_its_back_is_caught() {
    let t = TestStore::empty();
    seeded(&t).await;
    let conn = rusqlite::Connection::open(t.db_path()).unwrap();
    conn.execute_batch(
        "DROP TRIGGER events_no_delete;
         DELETE FROM events WHERE seq = (SELECT min(seq) FROM events WHERE kind = 'message_appended');",
    )
    .unwrap();
    let (ok, out) = verify_cli(&t);
    assert!(!ok, "{out}");
    assert!(out.contains("sequence jumps"), "{out}");
    assert!(
        out.contains("in the table but no event records it"),
        "{out}"
    );
}

#[tokio::test]
async fn a_message_text_edited_behind_its_back_is_caught() {
    let t = TestStore::empty();
    seeded(&t).await;
    let conn = rusqlite::Connection::open(t.db_path()).unwrap();
    conn.execute(
        "UPDATE messages SET display_text = 'forged' WHERE seq = 2",
        [],
    )
    .unwrap();
    let (ok, out) = verify_cli(&t);
    assert!(!ok, "{out}");
    assert!(
        out.contains("differs from its event log (display text)"),
        "{out}"
    );
}

#[tokio::test]
async fn an_event_for_a_missing_session_is_caught() {
    let t = TestStore::empty();
    let store = seeded(&t).await;
    drop(store);
    let conn = rusqlite::Connection::open(t.db_path()).unwrap();
    conn.execute_batch(
        "PRAGMA foreign_keys = OFF;
         INSERT INTO events (session_id, session_seq, kind, payload, created_at)
         VALUES ('00000000-0000-7000-8000-000000000000', 1, 'session_created',
                 '{\"kind\":\"session_created\",\"title\":null,\"toolsHost\":\"local\"}', 'now');",
    )
    .unwrap();
    let (ok, out) = verify_cli(&t);
    assert!(!ok, "{out}");
    assert!(out.contains("not in the sessions table"), "{out}");
}

#[tokio::test]
async fn a_reference_deleted_behind_its_back_is_caught() {
    let t = TestStore::empty();
    let store = sessionstore::Store::open(t.config.clone()).await.unwrap();
    let s = store.create_session(NewSession::default()).await.unwrap();
    let stored = store
        .attach_one(s.id, "kept.txt".into(), b"contents".to_vec())
        .await
        .unwrap();
    store
        .send(
            s.id,
            sessionstore::store::Outgoing {
                attach: vec![stored.uri.clone()],
                ..sessionstore::store::Outgoing::user("with a file")
            },
        )
        .await
        .unwrap();
    drop(store);
    assert!(verify_cli(&t).0);
    let conn = rusqlite::Connection::open(t.db_path()).unwrap();
    conn.execute("DELETE FROM message_refs", []).unwrap();
    let (ok, out) = verify_cli(&t);
    assert!(!ok, "{out}");
    assert!(
        out.contains("differs from its event log (references)"),
        "{out}"
    );
}

/// Issue 12, hole 5: `verify` passed with the append-only triggers dropped, because it
/// compared only rows. It now compares the schema with what the migrations make.
#[tokio::test]
async fn hole_5_verify_names_each_way_the_schema_differs_from_the_migrations() {
    let t = TestStore::empty();
    drop(seeded(&t).await);
    let conn = rusqlite::Connection::open(t.db_path()).unwrap();
    conn.execute_batch(
        "DROP TRIGGER events_no_update;
         DROP TRIGGER events_no_delete;
         DROP INDEX messages_queued;
         CREATE INDEX sessions_by_title ON sessions (title);
         CREATE TRIGGER events_no_update BEFORE UPDATE ON events BEGIN SELECT 1; END;",
    )
    .unwrap();
    drop(conn);
    let (ok, out) = verify_cli(&t);
    assert!(!ok, "{out}");
    let latest = crate::support::latest_version();
    for expected in [
        "schema: trigger events_no_delete (on events) is missing".to_owned(),
        format!("schema: trigger events_no_update differs from the version-{latest} schema"),
        "schema: index messages_queued (on messages) is missing".to_owned(),
        format!("schema: index sessions_by_title is not in the version-{latest} schema"),
        "4 problems".to_owned(),
    ] {
        assert!(out.contains(&expected), "{expected:?} not in {out}");
    }
}

#[tokio::test]
async fn a_changed_table_is_a_schema_problem_and_layout_is_not() {
    let t = TestStore::empty();
    drop(seeded(&t).await);
    let conn = rusqlite::Connection::open(t.db_path()).unwrap();
    conn.execute_batch("ALTER TABLE sessions ADD COLUMN note TEXT;")
        .unwrap();
    drop(conn);
    let (ok, out) = verify_cli(&t);
    assert!(!ok, "{out}");
    let latest = crate::support::latest_version();
    assert!(
        out.contains(&format!(
            "schema: table sessions differs from the version-{latest} schema"
        )),
        "{out}"
    );

    // The same trigger written over more lines is the same schema.
    let t = TestStore::empty();
    drop(seeded(&t).await);
    let conn = rusqlite::Connection::open(t.db_path()).unwrap();
    conn.execute_batch(
        "DROP TRIGGER events_no_update;
         CREATE TRIGGER events_no_update BEFORE UPDATE ON events
         BEGIN
                SELECT   RAISE(ABORT, 'events are append-only: update refused');
         END;",
    )
    .unwrap();
    drop(conn);
    let (ok, out) = verify_cli(&t);
    assert!(ok, "{out}");
}

/// A history longer than a page of rows, with a tool call whose update comes many
/// pages later and a message delivered after later entries, verifies; an item edited
/// deep in it, and the tool call edited, are each caught and named.
#[tokio::test]
async fn a_long_history_is_checked_across_pages_and_an_edit_deep_in_it_is_named() {
    let t = TestStore::empty();
    let store = t.open().await;
    let s = store
        .create_session(NewSession::default())
        .await
        .unwrap()
        .id;
    let update = |value: serde_json::Value| -> sessionstore::turns::Update {
        sessionstore::turns::Update::Known(serde_json::from_value(value).unwrap())
    };
    store.send(s, user_text("go")).await.unwrap();
    let mut queued = user_text("meanwhile");
    queued.mid_turn = true;
    let mut first = vec![update(serde_json::json!({"sessionUpdate": "tool_call",
        "toolCallId": "long", "title": "Build", "status": "pending"}))];
    first.extend((0..700).map(|i| {
        update(serde_json::json!({"sessionUpdate": "agent_message_chunk",
            "messageId": format!("a{i}"), "content": {"type": "text", "text": format!("answer {i}")}}))
    }));
    store
        .record(s, sessionstore::record::Batches(first))
        .await
        .unwrap();
    let waiting = store.send(s, queued).await.unwrap();
    store
        .record(
            s,
            sessionstore::record::Batches(vec![update(
                serde_json::json!({"sessionUpdate": "tool_call_update",
                "toolCallId": "long", "status": "completed"}),
            )]),
        )
        .await
        .unwrap();
    store.mark_delivered(s, vec![waiting.id]).await.unwrap();
    drop(store);
    let (ok, out) = verify_cli(&t);
    assert!(ok, "{out}");

    let conn = rusqlite::Connection::open(t.db_path()).unwrap();
    // The row names the bytes of the update that made it (V12): now the next one's.
    let named: (i64, i64) = conn
        .query_row(
            "SELECT made_by_start, made_by_length FROM items WHERE seq = 653",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    conn.execute(
        "UPDATE items SET (made_by_start, made_by_length) =
             (SELECT made_by_start, made_by_length FROM items WHERE seq = 654)
         WHERE seq = 653",
        [],
    )
    .unwrap();
    let (ok, out) = verify_cli(&t);
    assert!(!ok);
    assert!(
        out.contains("agent_message item") && out.contains("differs from its event log (content)"),
        "{out}"
    );
    conn.execute(
        "UPDATE items SET made_by_start = ?1, made_by_length = ?2 WHERE seq = 653",
        [named.0, named.1],
    )
    .unwrap();
    conn.execute(
        "UPDATE items SET body = replace(body, '\"completed\"', '\"failed\"') WHERE kind = 'tool_call'",
        [],
    )
    .unwrap();
    let (ok, out) = verify_cli(&t);
    assert!(!ok);
    assert!(
        out.contains("tool_call item") && out.contains("(content)"),
        "{out}"
    );
    assert_eq!(out.matches("problem:").count(), 1, "{out}");
}

/// Parts still streaming have no foreign keys (V9): `verify` finds one that no item
/// holds, such as a part an erasure left behind, and names its session; the parts a
/// live answer has waiting are not named.
#[tokio::test]
async fn a_streamed_part_no_item_holds_is_caught() {
    let t = TestStore::empty();
    let store = t.open().await;
    let chunk = |text: &str| -> agent_client_protocol_schema::v1::SessionUpdate {
        serde_json::from_value(serde_json::json!({
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": text}
        }))
        .unwrap()
    };
    let live = store
        .create_session(NewSession::default())
        .await
        .unwrap()
        .id;
    let gone = store
        .create_session(NewSession::default())
        .await
        .unwrap()
        .id;
    for s in [live, gone] {
        for text in ["still ", "streaming ", "here"] {
            store.record(s, vec![chunk(text)]).await.unwrap();
        }
    }
    store
        .delete_sessions(vec![gone], DeleteOptions::default())
        .await
        .unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(t.db_path()).unwrap();
    let waiting: i64 = conn
        .query_row("SELECT count(*) FROM streaming_parts", [], |r| r.get(0))
        .unwrap();
    assert!(waiting > 0, "the live answer has parts waiting");
    let (ok, out) = verify_cli(&t);
    assert!(ok, "{out}");
    conn.execute(
        "INSERT INTO streaming_parts (session_id, item_id, part, content, created_at, streamed)
         VALUES (?1, '00000000-0000-7000-8000-000000000001', 2,
                 '[{\"type\":\"text\",\"text\":\"left behind\"}]', 'now', 11)",
        [gone.to_string()],
    )
    .unwrap();
    let (ok, out) = verify_cli(&t);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!(
            "1 streamed parts of session {gone} belong to no item still streaming"
        )),
        "{out}"
    );
    assert!(!out.contains(&live.to_string()), "{out}");
}

/// The full-text index against the rows it indexes (V11): SQLite's integrity check
/// passes a `search_docsize` row deleted or added behind the store, or an entry that
/// names a row that is gone, and a search would then fail, miss a text, or match one
/// for the wrong row.
#[tokio::test]
async fn a_search_index_that_disagrees_with_its_rows_is_caught() {
    let t = TestStore::empty();
    let store = seeded(&t).await;
    let s = all_sessions(&store).await.unwrap()[0].id;
    store
        .record(
            s,
            sessionstore::record::Values(vec![
                serde_json::json!({"sessionUpdate": "agent_message_chunk", "messageId": "a",
                "content": {"type": "text", "text": "the answer"}}),
            ]),
        )
        .await
        .unwrap();
    store
        .set_title(s, "named".into(), TitleSource::Explicit)
        .await
        .unwrap();
    drop(store);
    let (ok, out) = verify_cli(&t);
    assert!(ok, "{out}");
    let conn = rusqlite::Connection::open(t.db_path()).unwrap();
    // The agent message's document and the first message's (an entry, below zero)
    // deleted, two documents of no row added, and the second message's entry pointed
    // at a message that never was.
    conn.execute_batch(
        "DELETE FROM search_docsize WHERE id = (SELECT rowid FROM items);
         DELETE FROM search_docsize WHERE id = (SELECT max(id) FROM search_entries
                                                WHERE source = 'message');
         INSERT INTO search_docsize (id, sz) VALUES (4242, x'00'), (4243, x'00');
         UPDATE search_entries SET entry_id = '00000000-0000-4000-8000-000000000000'
             WHERE id = (SELECT min(id) FROM search_entries WHERE source = 'message');",
    )
    .unwrap();
    let (ok, out) = verify_cli(&t);
    assert!(!ok, "{out}");
    for line in [
        "problem: search index: 1 agent message or thought has no document in it (a search \
         that matches it may fail, or miss it)",
        "problem: search index: 1 title, message or sealed segment has no document in it (a \
         search that matches it may fail, or miss it)",
        "problem: search index: 2 documents name no row (their words would match whatever \
         rows take their ids)",
        "problem: search index: 1 entry names a title, message or sealed segment that is gone",
    ] {
        assert!(out.lines().any(|l| l == line), "{line}\n{out}");
    }
}

/// A restore reads the tables forward and does not replay the log: an event that
/// delivers a message never appended (damage at the log's end) leaves every format
/// printing what the rows hold, as before the damage, from the command line and the
/// library; `verify` replays the log and names it. (Restore refused this before.)
#[tokio::test]
async fn damage_in_the_log_is_named_by_verify_and_restore_prints_the_rows() {
    let t = TestStore::new().await;
    let s = sent(&t, 40).await;
    let clean: Vec<String> = FORMATS
        .iter()
        .map(|f| stdout(&restore_of(&t, s, f, None)))
        .collect();
    t.deliver_a_stranger(s);
    for (format, want) in FORMATS.iter().zip(&clean) {
        let out = restore_of(&t, s, format, None);
        assert!(out.status.success(), "{format}: {}", stderr(&out));
        assert_eq!(&stdout(&out), want, "{format}");
    }
    assert_eq!(lines(&clean[1]).len(), 40);
    let restored = t.store().collect_restore(s).await.unwrap();
    assert_eq!(restored.messages.len(), 40);
    let out = t.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("never appended"), "{}", stdout(&out));
}

/// A restore reads each item row as it holds it: rows that hold the same items in
/// other words (here, with spaces around them), of every kind, restore the same, in
/// every format and from a tail, and `verify` finds nothing; a row whose kind or times
/// were edited, its body left as it was, restores as the row now says and is named by
/// `verify`. (Restore refused such an edit before.)
#[tokio::test]
async fn an_item_row_in_other_words_restores_the_same_and_verify_names_an_edited_kind_or_time() {
    let t = TestStore::new().await;
    let s = recorded(&t, 40).await;
    let other_kinds: Vec<sessionstore::turns::Update> = [
        serde_json::json!({"sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": "thinking", "annotations": {"priority": 0.25}}}),
        serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read",
            "kind": "read", "status": "completed", "rawInput": {"path": "a", "n": [1.5, true]}}),
        serde_json::json!({"sessionUpdate": "plan",
            "entries": [{"content": "step", "priority": "high", "status": "pending"}]}),
        serde_json::json!({"sessionUpdate": "current_mode_update", "currentModeId": "code"}),
        serde_json::json!({"sessionUpdate": "a_kind_from_a_newer_agent", "z": {"y": 1}}),
        serde_json::json!({"sessionUpdate": "agent_message_chunk", "messageId": "last",
            "content": {"type": "text", "text": "done"}}),
    ]
    .into_iter()
    .map(|v| sessionstore::turns::Update::from_value(&v).unwrap())
    .collect();
    t.store()
        .record(s, sessionstore::record::Batches(other_kinds))
        .await
        .unwrap();
    let items = 46;
    // Rows as they were before V12, each with its body: those are what is edited here
    // (`a_row_that_names_its_update_is_read_from_it_and_verify_names_an_edited_name`
    // edits the rows V12 writes).
    assert_eq!(t.write_out_bodies(s).await, items);
    let restore = |format: &str, tail: Option<&str>| restore_of(&t, s, format, tail);
    let formats = FORMATS;
    let clean: Vec<(String, String)> = formats
        .iter()
        .flat_map(|f| [(f, None), (f, Some("10"))])
        .map(|(f, tail)| (f.to_string(), stdout(&restore(f, tail))))
        .collect();
    let sql = |statement: &str| t.raw().execute(statement, []).unwrap();

    assert_eq!(
        sql("UPDATE items SET body = ' ' || body || char(10)"),
        items
    );
    for (i, (format, want)) in clean.iter().enumerate() {
        let tail = (i % 2 == 1).then_some("10");
        let out = restore(format, tail);
        assert!(out.status.success(), "{format} {tail:?}: {}", stderr(&out));
        assert_eq!(&stdout(&out), want, "{format} {tail:?}");
    }
    assert!(t.run(&["verify"]).status.success(), "the same items");
    // The words back as the store wrote them, so the edit below is all that differs.
    assert_eq!(
        sql("UPDATE items SET body = trim(body, ' ' || char(10))"),
        items
    );

    let last = "(SELECT max(seq) FROM items)";
    for (edit, undo, named) in [
        (
            format!(
                "UPDATE items SET updated_at = '2020-01-01T00:00:00.000000000Z' WHERE seq = {last}"
            ),
            None,
            "(updated time)",
        ),
        (
            format!(
                "UPDATE items SET created_at = '2020-01-01T00:00:00.000000000Z' WHERE seq = {last}"
            ),
            None,
            "(created time)",
        ),
        (
            format!("UPDATE items SET kind = 'agent_thought' WHERE seq = {last}"),
            Some(format!(
                "UPDATE items SET kind = 'agent_message' WHERE seq = {last}"
            )),
            "agent_message item",
        ),
    ] {
        let before: String = t
            .raw()
            .query_row(
                &format!("SELECT created_at || updated_at FROM items WHERE seq = {last}"),
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(sql(&edit), 1, "{edit}");
        for format in formats {
            for tail in [None, Some("10")] {
                let out = restore(format, tail);
                assert!(
                    out.status.success(),
                    "{edit}: {format} {tail:?}: {}",
                    stderr(&out)
                );
            }
        }
        let out = t.run(&["verify"]);
        assert_eq!(out.status.code(), Some(1), "{edit}");
        assert!(stdout(&out).contains(named), "{edit}: {}", stdout(&out));
        match undo {
            Some(undo) => assert_eq!(sql(&undo), 1),
            None => {
                let (created, updated) = before.split_at(before.len() / 2);
                t.raw()
                    .execute(
                        &format!(
                            "UPDATE items SET created_at = ?1, updated_at = ?2 WHERE seq = {last}"
                        ),
                        [created, updated],
                    )
                    .unwrap();
            }
        }
        let out = restore("acp-updates", None);
        assert_eq!(stdout(&out), clean[2].1, "after undoing {edit}");
    }
}

/// An item that one update made, and that nothing changed since, names that update in
/// its row (V12) in place of a body and times: such rows restore in every format, whole
/// and from a tail, exactly as the same items held whole (as before V12) do, are found
/// by search, and their terms leave the index with them. A row whose name of its
/// update was edited restores as the update it now names (a restore trusts the rows)
/// and is named by `verify`; one that does not read (its kind not the update's, or an
/// update that is not there) is refused with one line.
#[tokio::test]
async fn a_row_that_names_its_update_is_read_from_it_and_verify_names_an_edited_name() {
    let t = TestStore::new().await;
    let s = recorded(&t, 40).await;
    let update = |v: serde_json::Value| sessionstore::turns::Update::from_value(&v).unwrap();
    // A tool call changed by a later batch, and a message of two chunks, hold bodies;
    // a message continued by the next batch names its first chunk and streams the rest.
    for batch in [
        vec![
            serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "c1",
                "title": "Read", "status": "pending"}),
            serde_json::json!({"sessionUpdate": "agent_message_chunk",
                "messageId": "two", "content": {"type": "text", "text": "first half "}}),
            serde_json::json!({"sessionUpdate": "agent_message_chunk",
                "messageId": "two", "content": {"type": "text", "text": "second half"}}),
            serde_json::json!({"sessionUpdate": "plan",
                "entries": [{"content": "step", "priority": "high", "status": "pending"}]}),
            serde_json::json!({"sessionUpdate": "agent_thought_chunk",
                "content": {"type": "text", "text": "pondering"}}),
        ],
        vec![
            serde_json::json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1",
                "status": "completed"}),
            serde_json::json!({"sessionUpdate": "agent_message_chunk",
                "messageId": "streamed", "content": {"type": "text", "text": "begun "}}),
        ],
        vec![serde_json::json!({"sessionUpdate": "agent_message_chunk",
            "messageId": "streamed", "content": {"type": "text", "text": "and ended"}})],
    ] {
        t.store()
            .record(
                s,
                sessionstore::record::Batches(batch.into_iter().map(update).collect::<Vec<_>>()),
            )
            .await
            .unwrap();
    }
    let rows = |sql: &str| t.raw_query(sql).unwrap();
    let kinds = |bodies: &str| -> Vec<String> {
        rows(&format!(
            "SELECT kind FROM items WHERE body IS {bodies} NULL ORDER BY seq"
        ))
        .into_iter()
        .map(|r| r[0].clone().unwrap())
        .collect()
    };
    let named = kinds("");
    assert_eq!(named.len(), 43, "{named:?}");
    assert_eq!(named.iter().filter(|k| *k == "agent_message").count(), 41);
    assert_eq!(kinds("NOT"), ["tool_call", "agent_message"]);
    assert_eq!(
        rows(
            "SELECT count(*) FROM items WHERE body IS NULL
              AND (created_at IS NOT NULL OR updated_at IS NOT NULL
                   OR made_by_start IS NULL OR made_by_length IS NULL)"
        ),
        [[Some("0".to_owned())]]
    );

    let restore = |format: &str, tail: Option<&str>| restore_of(&t, s, format, tail);
    let formats = FORMATS;
    let outputs = || -> Vec<String> {
        formats
            .iter()
            .flat_map(|f| [(f, None), (f, Some("10"))])
            .map(|(f, tail)| {
                let out = restore(f, tail);
                assert!(out.status.success(), "{f} {tail:?}: {}", stderr(&out));
                stdout(&out)
            })
            .collect()
    };
    let clean = outputs();
    assert!(clean[2].contains("and ended") && clean[2].contains("pondering"));
    let hits = t.store().search("m17".into(), Some(s), 10).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].source, "agent_message");

    // The 40th message, within the last ten entries, now names the bytes of the update
    // before its own.
    let named = rows(
        "SELECT seq, made_by_start, made_by_length FROM items
         WHERE body IS NULL AND kind = 'agent_message' ORDER BY seq LIMIT 2 OFFSET 38",
    );
    let [m38, m39] = [&named[0], &named[1]].map(|r| r[0].clone().unwrap());
    let (start, length) = (named[1][1].clone().unwrap(), named[1][2].clone().unwrap());
    let edit = |statement: &str| t.raw_execute(statement).unwrap();
    edit(&format!(
        "UPDATE items SET (made_by_start, made_by_length) =
             (SELECT made_by_start, made_by_length FROM items WHERE seq = {m38})
         WHERE seq = {m39}"
    ));
    for (i, format) in formats.iter().enumerate() {
        for (j, tail) in [None, Some("10")].into_iter().enumerate() {
            let out = restore(format, tail);
            assert!(out.status.success(), "{format} {tail:?}: {}", stderr(&out));
            // The row's word: the update before its own, printed twice.
            let printed = stdout(&out);
            assert_ne!(printed, clean[2 * i + j], "{format} {tail:?}");
            assert_eq!(
                printed.matches("m38").count(),
                2,
                "{format} {tail:?}: {printed}"
            );
        }
    }
    let verified = t.run(&["verify"]);
    assert_eq!(verified.status.code(), Some(1));
    assert!(
        stdout(&verified).contains("differs from its event log (content)"),
        "{}",
        stdout(&verified)
    );
    let undo = format!(
        "UPDATE items SET made_by_start = {start}, made_by_length = {length} WHERE seq = {m39}"
    );
    edit(&undo);
    assert_eq!(outputs(), clean);

    // The right update, but the row's kind edited: refused, in the whole restore and
    // in a tail.
    edit(&format!(
        "UPDATE items SET kind = 'agent_thought' WHERE seq = {m39}"
    ));
    for tail in [None, Some("10")] {
        let out = restore("acp-updates", tail);
        assert_eq!(out.status.code(), Some(1), "{tail:?}");
        assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
        assert!(
            stderr(&out).contains(
                "of kind agent_thought names an update that makes an item of kind agent_message"
            ),
            "{}",
            stderr(&out)
        );
    }
    edit(&format!(
        "UPDATE items SET kind = 'agent_message' WHERE seq = {m39}"
    ));
    assert_eq!(outputs(), clean);

    // An update that is not there.
    edit(&format!(
        "UPDATE items SET made_by_start = 1000000 WHERE seq = {m39}"
    ));
    let out = restore("acp-updates", None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("no such update"), "{}", stderr(&out));
    edit(&undo);
    assert_eq!(outputs(), clean);

    // A second session's named rows deleted with it take their terms out of the index.
    let gone = recorded(&t, 5).await;
    let deleted = t.run(&["session", "delete", &gone.to_string()]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    edit("INSERT INTO search (search, rank) VALUES ('integrity-check', 1)");
    assert_eq!(
        t.store().search("m3".into(), None, 10).await.unwrap().len(),
        1
    );

    // The same items held whole restore the same.
    // (All but the one still streaming.)
    assert_eq!(t.write_out_bodies(s).await, 42);
    assert_eq!(outputs(), clean);
}

/// A tail prints its rows as they are: an item row edited within it is printed as
/// edited, one before it is not the tail's, and `verify` names either. (A tail refused
/// an edit within it before.)
#[tokio::test]
async fn verify_names_an_edit_within_a_tail_or_before_it_and_the_tail_prints_its_rows() {
    let t = TestStore::new().await;
    let s = recorded(&t, 40).await;
    let sid = s.to_string();
    let tail = |format: &str| {
        t.run(&[
            "restore",
            "--session",
            &sid,
            "--format",
            format,
            "--tail",
            "10",
        ])
    };
    // Each row with its body, to be edited as text.
    t.write_out_bodies(s).await;
    let clean = stdout(&tail("acp-updates"));
    // The notice of where the replay starts, then the ten.
    assert_eq!(lines(&clean).len(), 11);
    let edit = |from: &str, to: &str| {
        t.raw()
            .execute(
                "UPDATE items SET body = replace(body, ?1, ?2) WHERE body LIKE ?3",
                [
                    format!("\"{from}\""),
                    format!("\"{to}\""),
                    format!("%\"{from}\"%"),
                ],
            )
            .unwrap()
    };

    assert_eq!(edit("m35", "edited"), 1);
    for format in ["acp", "acp-updates", "openai"] {
        let out = tail(format);
        assert!(out.status.success(), "{format}: {}", stderr(&out));
        assert!(
            stdout(&out).contains("edited"),
            "{format}: {}",
            stdout(&out)
        );
    }
    let out = t.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("agent_message item") && stdout(&out).contains("(content)"),
        "{}",
        stdout(&out)
    );

    assert_eq!(edit("edited", "m35"), 1);
    assert_eq!(edit("m3", "edited"), 1);
    for format in ["acp", "acp-updates", "openai", "openai-responses"] {
        let out = tail(format);
        assert!(out.status.success(), "{format}: {}", stderr(&out));
    }
    assert_eq!(stdout(&tail("acp-updates")), clean);
    let out = t.run(&["restore", "--session", &sid, "--format", "acp"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("edited"), "{}", stdout(&out));
    let out = t.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("(content)"), "{}", stdout(&out));
}

/// The `.bak` files beside the test store's database.
fn backups(t: &TestStore) -> Vec<std::path::PathBuf> {
    let mut found: Vec<_> = std::fs::read_dir(t.dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".bak"))
        .collect();
    found.sort();
    found
}

/// `verify --repair` on a real SQLite file whose rows were edited behind the store's
/// back (a message's text, an item's words, an item row removed): `verify` names each
/// edit and writes nothing; the repair backs the database up first, rebuilds the
/// session's rows and the search index from the log, and exits 0; `verify` is clean
/// again, a restore prints the log's version byte for byte, search finds the log's
/// words and not the edit's; a second repair finds nothing to do and makes no backup.
#[tokio::test]
async fn verify_repair_rebuilds_edited_rows_from_the_log_after_a_backup() {
    let t = TestStore::new().await;
    let s = recorded(&t, 40).await;
    let clean: Vec<String> = FORMATS
        .iter()
        .map(|f| stdout(&restore_of(&t, s, f, None)))
        .collect();
    let go = t.store().search("go".into(), Some(s), 10).await.unwrap();
    // Each item holds its body (rather than naming its update, V12), to be edited.
    t.write_out_bodies(s).await;
    let sql = |statement: &str| t.raw().execute(statement, []).unwrap();
    assert_eq!(
        sql("UPDATE messages SET display_text = 'edited later' WHERE display_text = 'go'"),
        1
    );
    assert_eq!(
        sql(
            "UPDATE items SET body = replace(body, '\"m17\"', '\"tampered\"')
             WHERE body LIKE '%\"m17\"%'"
        ),
        1
    );
    assert_eq!(
        sql("DELETE FROM items WHERE seq = (SELECT max(seq) FROM items)"),
        1
    );

    let out = t.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    let said = stdout(&out);
    for named in [
        "differs from its event log (display text)",
        "agent_message item",
        "(content)",
    ] {
        assert!(said.contains(named), "{named}: {said}");
    }
    assert!(backups(&t).is_empty(), "verify alone writes nothing");
    let out = restore_of(&t, s, "acp-updates", None);
    assert!(stdout(&out).contains("edited later") && stdout(&out).contains("tampered"));

    let out = t.run(&["verify", "--repair"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let said = stdout(&out);
    assert!(said.contains(&format!("rebuilt: session {s}")), "{said}");
    assert!(said.contains("rebuilt: the search index"), "{said}");
    assert!(said.lines().last().unwrap().ends_with(": ok"), "{said}");
    let made = backups(&t);
    assert_eq!(made.len(), 1, "{made:?}");
    assert!(said.contains(&made[0].display().to_string()), "{said}");
    // The backup is the database as the repair found it: the edit is in it.
    let copy = rusqlite::Connection::open(&made[0]).unwrap();
    let text: String = copy
        .query_row("SELECT display_text FROM messages WHERE seq = 1", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(text, "edited later");

    let out = t.run(&["verify"]);
    assert!(out.status.success(), "{}", stdout(&out));
    for (format, want) in FORMATS.iter().zip(&clean) {
        let out = restore_of(&t, s, format, None);
        assert!(out.status.success(), "{format}: {}", stderr(&out));
        assert_eq!(&stdout(&out), want, "{format}");
    }
    let hits = t.store().search("m17".into(), Some(s), 10).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert!(
        t.store()
            .search("tampered".into(), Some(s), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        t.store().search("go".into(), Some(s), 10).await.unwrap(),
        go
    );

    let out = t.run(&["verify", "--repair", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["backup"], serde_json::Value::Null, "{report}");
    assert_eq!(report["rebuilt"], serde_json::json!([]));
    assert_eq!(backups(&t).len(), 1, "nothing to repair: no backup");
}

/// What the log cannot answer is not rebuilt: with a log that does not replay (an
/// event delivering a message never appended), `verify --repair` leaves the log and
/// that session's rows as they are, names the problem as not rebuilt, and exits 1;
/// another session's edited row is rebuilt all the same.
#[tokio::test]
async fn verify_repair_names_what_the_log_cannot_rebuild_and_exits_1() {
    let t = TestStore::new().await;
    let damaged = sent(&t, 3).await;
    let edited = sent(&t, 3).await;
    t.deliver_a_stranger(damaged);
    t.raw()
        .execute(
            "UPDATE messages SET display_text = 'edited later' WHERE session_id = ?1",
            [edited.to_string()],
        )
        .unwrap();
    t.raw()
        .execute(
            "UPDATE messages SET display_text = 'edited too' WHERE session_id = ?1",
            [damaged.to_string()],
        )
        .unwrap();
    let out = t.run(&["verify", "--repair"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let said = stdout(&out);
    assert!(
        said.lines()
            .any(|l| l.starts_with("not rebuilt:") && l.contains("never appended")),
        "{said}"
    );
    let rebuilt: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("rebuilt: session"))
        .collect();
    assert_eq!(
        rebuilt,
        [format!("rebuilt: session {edited}, from its event log")],
        "{said}"
    );
    assert_eq!(backups(&t).len(), 1);
    let out = restore_of(&t, edited, "acp-updates", None);
    assert!(!stdout(&out).contains("edited later"), "{}", stdout(&out));
}

/// A database newer than the binary is refused by the repair with exit 3, and left
/// as it was, with no backup.
#[tokio::test]
async fn verify_repair_refuses_a_newer_database_with_exit_3() {
    let t = TestStore::new().await;
    sent(&t, 1).await;
    t.raw()
        .execute(
            "INSERT INTO refinery_schema_history (version, name, applied_on, checksum)
             VALUES (99, 'from_the_future', '2030-01-01T00:00:00Z', '1')",
            [],
        )
        .unwrap();
    let out = t.run(&["verify", "--repair"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(backups(&t).is_empty());
}

/// A session's archived mark and its title's source are the log's too: edited behind
/// its back, `verify` names them and `verify --repair` writes the log's back.
#[tokio::test]
async fn verify_repair_brings_back_the_archived_mark_and_the_titles_source() {
    let t = TestStore::new().await;
    let s = recorded(&t, 2).await;
    let out = t.run(&["session", "rename", &s.to_string(), "kept"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = t.run(&["session", "archive", &s.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let sql = |statement: &str| t.raw().execute(statement, []).unwrap();
    assert_eq!(
        sql("UPDATE sessions SET archived = 0, title_source = NULL"),
        1
    );
    let out = t.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let out = t.run(&["verify", "--repair"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let (archived, source): (i64, Option<String>) = t
        .raw()
        .query_row("SELECT archived, title_source FROM sessions", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!((archived, source.as_deref()), (1, Some("explicit")));
}
