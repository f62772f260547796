//! `verify`: the tables are a projection of the event log, and edits made behind the
//! store's back are caught and named.

use crate::support::{TestStore, stdout, user_text};
use sessionstore::model::ToolsHost;

async fn seeded(t: &TestStore) -> sessionstore::Store {
    let store = t.open().await;
    let s = store.create_session(None, ToolsHost::Local).await.unwrap();
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
    let s = store.create_session(None, ToolsHost::Local).await.unwrap();
    let stored = store
        .attach(s.id, "kept.txt".into(), b"contents".to_vec())
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
        .create_session(None, ToolsHost::Local)
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
    store.record_from(s, first).await.unwrap();
    let waiting = store.send(s, queued).await.unwrap();
    store
        .record_from(
            s,
            vec![update(
                serde_json::json!({"sessionUpdate": "tool_call_update",
                "toolCallId": "long", "status": "completed"}),
            )],
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
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap()
        .id;
    let gone = store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap()
        .id;
    for s in [live, gone] {
        for text in ["still ", "streaming ", "here"] {
            store.record(s, vec![chunk(text)]).await.unwrap();
        }
    }
    store.delete_sessions(vec![gone]).await.unwrap();
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
    let s = store.list_sessions().await.unwrap()[0].id;
    store
        .record_values(
            s,
            vec![
                serde_json::json!({"sessionUpdate": "agent_message_chunk", "messageId": "a",
                "content": {"type": "text", "text": "the answer"}}),
            ],
        )
        .await
        .unwrap();
    store.rename_session(s, "named".into()).await.unwrap();
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
