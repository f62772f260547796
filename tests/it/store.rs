//! The store's records and the event log: every change writes its rows and its event
//! in one transaction, and the log refuses to be rewritten.

use sessionstore::model::{Delivery, NewMessage, Role, ToolsHost};

use crate::support::TestStore;

fn text(t: &str) -> NewMessage {
    NewMessage {
        role: Role::User,
        display_text: t.to_owned(),
        model_text: None,
        transcript: None,
        refs: vec![],
    }
}

fn count(conn: &rusqlite::Connection, table: &str) -> i64 {
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn every_change_writes_its_event() {
    let t = TestStore::new().await;
    let s = t.store.create_session(None, ToolsHost::Ssh).await.unwrap();
    let m = t
        .store
        .append_message(s.id, text("first question\nmore"))
        .await
        .unwrap();
    let q = t.store.queue_message(s.id, text("mid-turn")).await.unwrap();
    assert_eq!(q.state, Delivery::Queued);
    t.store.mark_delivered(s.id, vec![q.id]).await.unwrap();
    let kinds: Vec<String> = t
        .store
        .events(s.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [
            "session_created",
            "message_appended",
            "session_renamed",
            "message_appended",
            "message_delivered"
        ]
    );
    let session = t.store.session(s.id).await.unwrap();
    assert_eq!(session.title.as_deref(), Some("first question"));
    assert_eq!(session.tools_host, ToolsHost::Ssh);
    let messages = t.store.messages(s.id).await.unwrap();
    assert_eq!(messages.iter().map(|m| m.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(messages[0].id, m.id);
    assert!(messages.iter().all(|m| m.state == Delivery::Delivered));
    assert!(t.store.verify().await.unwrap().ok());
}

#[tokio::test]
async fn a_given_title_is_not_replaced_by_the_first_message() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(Some("mine".into()), ToolsHost::Local)
        .await
        .unwrap();
    t.store.append_message(s.id, text("hello")).await.unwrap();
    assert_eq!(
        t.store.session(s.id).await.unwrap().title.as_deref(),
        Some("mine")
    );
}

#[tokio::test]
async fn a_failure_mid_transaction_keeps_neither_row_nor_event() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(Some("x".into()), ToolsHost::Local)
        .await
        .unwrap();
    // The message row is inserted first; this makes the event insert after it fail.
    t.raw()
        .execute_batch(
            "CREATE TRIGGER fail_appends BEFORE INSERT ON events
             WHEN NEW.kind = 'message_appended'
             BEGIN SELECT RAISE(ABORT, 'forced failure'); END;",
        )
        .unwrap();
    let err = t
        .store
        .append_message(s.id, text("lost"))
        .await
        .unwrap_err();
    assert!(matches!(err, sessionstore::Error::Sqlite { .. }), "{err:?}");
    let cause = std::error::Error::source(&err).expect("the sqlite error is kept as the cause");
    assert!(cause.to_string().contains("forced failure"), "{cause}");
    let conn = t.raw();
    assert_eq!(count(&conn, "messages"), 0);
    assert_eq!(count(&conn, "events"), 1);
    let updated: String = conn
        .query_row("SELECT updated_at FROM sessions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(updated, s.updated_at);
}

#[tokio::test]
async fn the_event_log_refuses_update_and_delete() {
    let t = TestStore::new().await;
    t.store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    let conn = t.raw();
    let err = conn
        .execute("UPDATE events SET kind = 'edited'", [])
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    let err = conn.execute("DELETE FROM events", []).unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    assert_eq!(count(&conn, "events"), 1);
}

#[tokio::test]
async fn concurrent_writers_wait_instead_of_failing() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let store = t.store.clone();
        tasks.push(tokio::spawn(async move {
            store.append_message(s.id, text(&format!("m{i}"))).await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let seqs: Vec<i64> = t
        .store
        .messages(s.id)
        .await
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
    assert!(t.store.verify().await.unwrap().ok());
}

#[tokio::test]
async fn unknown_sessions_and_messages_are_named_in_errors() {
    let t = TestStore::new().await;
    let ghost = sessionstore::SessionId::new();
    let err = t.store.append_message(ghost, text("x")).await.unwrap_err();
    assert!(matches!(err, sessionstore::Error::SessionNotFound(id) if id == ghost));
    assert_eq!(err.to_string(), format!("no session {ghost}"));
    let err = t.store.events(ghost).await.unwrap_err();
    assert_eq!(err.to_string(), format!("no session {ghost}"));
}

#[tokio::test]
async fn renaming_a_session_records_its_event_and_names_an_unknown_one() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(Some("before".into()), ToolsHost::Local)
        .await
        .unwrap();
    t.store.rename_session(s.id, "after".into()).await.unwrap();
    assert_eq!(
        t.store.session(s.id).await.unwrap().title.as_deref(),
        Some("after")
    );
    let events = t.store.events(s.id).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.kind, "session_renamed");
    assert_eq!(last.payload["title"], "after");
    assert!(t.store.verify().await.unwrap().ok());
    let ghost = sessionstore::SessionId::new();
    let err = t.store.rename_session(ghost, "x".into()).await.unwrap_err();
    assert!(
        matches!(err, sessionstore::Error::SessionNotFound(id) if id == ghost),
        "{err:?}"
    );
}

/// `send` opens each reference the way a read does but never reads it through the
/// resolver, and what it records (name, type, size) is what a full read gives, in the
/// configured root and in a legacy one alike.
#[tokio::test]
async fn send_records_what_a_read_gives_without_reading_the_files() {
    use sessionstore::attachments::SNIFF_BYTES;
    use sessionstore::dispatch::{Memo, Mode};

    let h = crate::support::Harness::new().await;
    let s = h.session(sessionstore::model::ToolsHost::Local).await;
    let image = h.attach(s, "photo.jpg", crate::support::PNG).await;
    // Text whose sniffed part ends inside a character, with a NUL after it.
    let mut long = vec![b'x'; SNIFF_BYTES - 1];
    long.extend_from_slice("é and a \0 later".as_bytes());
    let readme = h.attach(s, "README", &long).await;
    let legacy_folder = h.folder(h.legacy(), s);
    std::fs::create_dir_all(&legacy_folder).unwrap();
    std::fs::write(legacy_folder.join("old.bin"), b"\x00\x01 legacy bytes").unwrap();
    let old = crate::support::Expect {
        name: "old.bin".into(),
        uri: sessionstore::attachments::AttachmentUri::new(s, "old.bin").to_string(),
        bytes: b"\x00\x01 legacy bytes".to_vec(),
        host: h.config.host.clone(),
    };

    let before = h.reads.total();
    let sent = h.send(s, "three files", &[&image, &readme, &old]).await;
    assert_eq!(
        h.reads.total(),
        before,
        "send reads nothing through the resolver"
    );

    let dispatched = h
        .store
        .dispatch(s, None, Mode::Strict, Memo::new())
        .await
        .unwrap();
    assert_eq!(h.reads.total(), before + 3);
    let blocks: Vec<_> = dispatched
        .blocks
        .iter()
        .map(crate::support::block_json)
        .collect();
    let files = [&image, &readme, &old];
    for ((r, block), file) in sent.refs.iter().zip(&blocks[1..]).zip(files) {
        let (_, path) = crate::support::check_attachment(block, file);
        let line = crate::support::context_line(crate::support::context_of(block).unwrap());
        assert_eq!(line.mime_type, r.mime_type, "{}", r.uri);
        assert_eq!(r.stored_name, file.name);
        assert_eq!(r.size, file.bytes.len() as u64);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), r.size);
    }
    let types: Vec<&str> = sent.refs.iter().map(|r| r.mime_type.as_str()).collect();
    assert_eq!(
        types,
        ["image/png", "text/plain", "application/octet-stream"]
    );
}

#[tokio::test]
async fn send_names_an_unknown_session_before_its_references() {
    let t = TestStore::new().await;
    let ghost = sessionstore::SessionId::new();
    let mut out = sessionstore::store::Outgoing::user("x");
    out.attach = vec![sessionstore::attachments::AttachmentUri::new(
        ghost, "gone.txt",
    )];
    let err = t.store.send(ghost, out).await.unwrap_err();
    assert_eq!(err.to_string(), format!("no session {ghost}"));
}
