//! The store's records and the event log on SQLite alone: a failed transaction keeps
//! neither row nor event, concurrent writers wait, and `send` records what a read
//! gives. What both engines promise (every change's event, renames, unknown sessions,
//! the log refusing rewrites) is in `conformance`.

use sessionstore::model::NewSession;
use sessionstore::store::Dispatched;
use sessionstore::store::Verify;

use crate::support::Whole;
use crate::support::{TestStore, user_text};

fn count(conn: &rusqlite::Connection, table: &str) -> i64 {
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn a_failure_mid_transaction_keeps_neither_row_nor_event() {
    let t = TestStore::new().await;
    let s = t
        .store()
        .create_session(NewSession {
            title: Some("x".into()),
            ..NewSession::default()
        })
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
    let err = t.store().send(s.id, user_text("lost")).await.unwrap_err();
    assert!(
        matches!(err, sessionstore::Error::Database { .. }),
        "{err:?}"
    );
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
async fn concurrent_writers_wait_instead_of_failing() {
    let t = TestStore::new().await;
    let s = t
        .store()
        .create_session(NewSession::default())
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let store = t.store().clone();
        tasks.push(tokio::spawn(async move {
            store.send(s.id, user_text(&format!("m{i}"))).await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let seqs: Vec<i64> = t
        .store()
        .all_messages(s.id)
        .await
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
    assert!(t.store().verify(Verify::Check).await.unwrap().after.ok());
}

/// `send` opens each reference the way a read does but never reads it through the
/// resolver, and what it records (name, type, size) is what a full read gives, in the
/// configured root and in a legacy one alike.
#[tokio::test]
async fn send_records_what_a_read_gives_without_reading_the_files() {
    use sessionstore::attachments::SNIFF_BYTES;
    use sessionstore::dispatch::{Memo, Mode};

    let h = crate::support::TestStore::counting().await;
    let s = h.session_with(sessionstore::model::ToolsHost::Local).await;
    let image = h.attach(s, "photo.jpg", crate::support::PNG).await;
    // Text whose sniffed part ends inside a character, with a NUL after it.
    let mut long = vec![b'x'; SNIFF_BYTES - 1];
    long.extend_from_slice("é and a \0 later".as_bytes());
    let readme = h.attach(s, "README", &long).await;
    let legacy_folder = h.folder_in(h.legacy(), s);
    std::fs::create_dir_all(&legacy_folder).unwrap();
    std::fs::write(legacy_folder.join("old.bin"), b"\x00\x01 legacy bytes").unwrap();
    let old = crate::support::Expect {
        name: "old.bin".into(),
        uri: sessionstore::attachments::AttachmentUri::new(s, "old.bin").to_string(),
        bytes: b"\x00\x01 legacy bytes".to_vec(),
        host: h.config.host.clone(),
    };

    let before = h.reads().total();
    let sent = h
        .send_files(s, "three files", &[&image, &readme, &old])
        .await;
    assert_eq!(
        h.reads().total(),
        before,
        "send reads nothing through the resolver"
    );

    let dispatched = h
        .store()
        .dispatch(s, None, Mode::Strict, Memo::new())
        .await
        .map(Dispatched::from)
        .unwrap();
    assert_eq!(h.reads().total(), before + 3);
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
    let err = t.store().send(ghost, out).await.unwrap_err();
    assert_eq!(err.to_string(), format!("no session {ghost}"));
}
