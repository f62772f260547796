//! Streamed restore and the streaming writers, from outside: the binary's output in
//! every format against the collected restore serialized through the schema types,
//! `acp-updates` lines parsed back into `SessionNotification`s, a refusal that writes
//! nothing, and a replay that runs only a little ahead of its reader.

use sessionstore::store::Access;
use sessionstore::store::Drain;
use std::time::Duration;

use crate::support::Whole;
use agent_client_protocol_schema::rpc::{JsonRpcMessage, Notification};
use agent_client_protocol_schema::v1::{
    ContentBlock, ContentChunk, MessageId as AcpMessageId, SessionNotification, SessionUpdate,
};
use sessionstore::dispatch::{DEFAULT_MEMO_BUDGET, Memo, Mode};
use sessionstore::model::{NewSession, Role, ToolsHost};
use sessionstore::openai::{chat_request, responses_request};
use sessionstore::restore::ReplayItem;
use sessionstore::store::{Dispatched, Outgoing};
use sessionstore::{SessionId, Store};

use crate::restored::CollectRestore;
use crate::support::{PNG, TestStore, stdout};

/// A session with every kind of block: an expansion and a transcript, an image, a
/// text file, a binary file, a name that needs escaping, a repeated reference, a file
/// gone since (a degradation notice), assistant replies, and a queued message.
async fn varied_session(t: &TestStore) -> SessionId {
    let s = t
        .store()
        .create_session(NewSession {
            title: Some("t".into()),
            tools_host: ToolsHost::Ssh,
            ..NewSession::default()
        })
        .await
        .unwrap()
        .id;
    let img = t.upload(s, "café \"chart\".png", PNG).await.uri;
    let txt = t
        .upload(
            s,
            "notes 日本.txt",
            "line \"one\"\n\ttab \u{7} bell\n".as_bytes(),
        )
        .await
        .uri;
    let blob = t
        .upload(s, "blob\u{200B}.bin", b"\x00\x01\xfe\xff")
        .await
        .uri;
    let gone = t.upload(s, "gone.txt", b"soon gone").await.uri;
    t.send(
        s,
        Outgoing {
            expanded: Some("expanded \"command\" text".into()),
            transcript: Some("spoken words".into()),
            attach: vec![img.clone(), txt.clone(), blob.clone(), img.clone(), gone],
            ..Outgoing::user("/cmd")
        },
    )
    .await;
    t.send(
        s,
        Outgoing {
            role: Role::Assistant,
            ..Outgoing::user("a reply with \"quotes\"\nand lines")
        },
    )
    .await;
    t.send(
        s,
        Outgoing {
            attach: vec![blob],
            ..Outgoing::user("   ")
        },
    )
    .await;
    t.send(
        s,
        Outgoing {
            mid_turn: true,
            attach: vec![txt],
            ..Outgoing::user("queued, not replayed")
        },
    )
    .await;
    std::fs::remove_file(t.folder(s).join("gone.txt")).unwrap();
    s
}

/// The store the binary opens: same files, the binary's own host name.
async fn reader(t: &TestStore) -> Store {
    let mut config = t.config.clone();
    config.host = sessionstore::config::host_name();
    Store::open_as(config, Access::ReadOnly).await.unwrap()
}

fn update_lines(session: SessionId, history: &[Dispatched]) -> Vec<SessionNotification> {
    let mut out = Vec::new();
    for d in history {
        for block in &d.blocks {
            let chunk = ContentChunk::new(block.clone())
                .message_id(AcpMessageId::from(d.message.id.to_string()));
            let update = match d.message.role {
                Role::User => SessionUpdate::UserMessageChunk(chunk),
                _ => SessionUpdate::AgentMessageChunk(chunk),
            };
            out.push(SessionNotification::new(session.to_string(), update));
        }
    }
    out
}

#[tokio::test]
async fn restore_streams_the_bytes_the_collected_restore_serializes_to_in_every_format() {
    let t = TestStore::new().await;
    let s = varied_session(&t).await;
    let restored = reader(&t).await.collect_restore(s).await.unwrap();
    assert_eq!(
        restored.messages.len(),
        3,
        "the queued message stays queued"
    );
    let restore = |format: &str| {
        let out = t.run(&["restore", "--session", &s.to_string(), "--format", format]);
        assert!(out.status.success(), "{format}: {:?}", out);
        stdout(&out)
    };
    assert_eq!(
        restore("acp"),
        serde_json::to_string(&restored).unwrap() + "\n"
    );
    assert_eq!(
        restore("openai"),
        serde_json::to_string(&chat_request("gpt-4o", &restored.messages)).unwrap() + "\n"
    );
    assert_eq!(
        restore("openai-responses"),
        serde_json::to_string(&responses_request("gpt-4o", &restored.messages)).unwrap() + "\n"
    );

    let updates = restore("acp-updates");
    let want = update_lines(s, &restored.messages);
    let lines: Vec<&str> = updates.lines().collect();
    // Text, transcript, four attachment blocks and the notice; the reply; one blob.
    assert_eq!(lines.len(), 9);
    assert_eq!(lines.len(), want.len());
    for (line, want) in lines.iter().zip(want) {
        let got: JsonRpcMessage<Notification<SessionNotification>> =
            serde_json::from_str(line).unwrap();
        assert_eq!(&*got.inner().method, "session/update");
        assert_eq!(got.inner().params.as_ref(), Some(&want));
        let wrapped = JsonRpcMessage::wrap(Notification {
            method: "session/update".into(),
            params: Some(want),
        });
        assert_eq!(*line, serde_json::to_string(&wrapped).unwrap());
    }
    let first: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
    let block: ContentBlock =
        serde_json::from_value(first["params"]["update"]["content"].clone()).unwrap();
    assert!(
        matches!(&block, ContentBlock::Image(i) if i.meta.as_ref().is_some_and(|m| m.contains_key(sessionstore::DAEMON_ATTACHMENT_CONTEXT_META_KEY))),
        "an attachment chunk carries its path context in _meta"
    );
}

#[tokio::test]
async fn dispatch_and_drain_write_the_bytes_their_blocks_serialize_to() {
    let t = TestStore::new().await;
    let s = varied_session(&t).await;
    let store = reader(&t).await;
    let d = store
        .dispatch(s, None, Mode::Degrade, Memo::new())
        .await
        .map(Dispatched::from)
        .unwrap();
    let out = t.run(&["dispatch", "--session", &s.to_string(), "--format", "acp"]);
    assert_eq!(
        stdout(&out),
        serde_json::to_string(&d.blocks).unwrap() + "\n"
    );
    let out = t.run(&[
        "dispatch",
        "--session",
        &s.to_string(),
        "--format",
        "openai",
    ]);
    assert_eq!(
        stdout(&out),
        serde_json::to_string(&chat_request("gpt-4o", std::slice::from_ref(&d))).unwrap() + "\n"
    );

    let drained = store
        .drain(s, Mode::Degrade, Memo::new(), Drain::Prepare)
        .await
        .unwrap()
        .into_iter()
        .map(Dispatched::from)
        .collect::<Vec<_>>();
    assert_eq!(drained.len(), 1);
    let out = t.run(&[
        "drain",
        "--session",
        &s.to_string(),
        "--format",
        "openai-responses",
    ]);
    assert_eq!(
        stdout(&out),
        serde_json::to_string(&responses_request("gpt-4o", &drained)).unwrap() + "\n"
    );
}

/// A restore reads the rows and does not replay the log: a log that no longer
/// replays leaves every format printing what it printed before, and `verify` names
/// it. (Restore refused such a session before any output, before issue 45.)
#[tokio::test]
async fn a_session_whose_log_does_not_replay_restores_its_rows_and_verify_names_it() {
    let t = TestStore::new().await;
    let s = varied_session(&t).await;
    let formats = ["acp", "acp-updates", "openai", "openai-responses"];
    let restore =
        |format: &str| t.run(&["restore", "--session", &s.to_string(), "--format", format]);
    let clean: Vec<String> = formats.iter().map(|f| stdout(&restore(f))).collect();
    // An event appended by something other than the store, delivering a message
    // that was never appended: the log no longer replays.
    t.deliver_a_stranger(s);
    for (format, want) in formats.iter().zip(&clean) {
        let out = restore(format);
        assert!(out.status.success(), "{format}");
        assert_eq!(&stdout(&out), want, "{format}");
    }
    let out = t.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("never appended"), "{}", stdout(&out));
}

/// The replay runs at most a batch or two ahead of its reader: with the reader
/// stopped after one item, most of a long history has not been read at all.
#[tokio::test]
async fn the_replay_waits_for_its_reader() {
    let t = TestStore::empty();
    let (store, reads) = t.open_counting().await;
    let s = store
        .create_session(NewSession::default())
        .await
        .unwrap()
        .id;
    let turns = 40;
    for i in 0..turns {
        let mut bytes = PNG.to_vec();
        bytes.extend(std::iter::repeat_n(i as u8, 1024 * 1024));
        let uri = store
            .attach_one(s, format!("{i}.png"), bytes)
            .await
            .unwrap()
            .uri;
        let out = Outgoing {
            attach: vec![uri],
            ..Outgoing::user(format!("turn {i}"))
        };
        store.send(s, out).await.unwrap();
    }
    let mut stream = store
        .restore(s, DEFAULT_MEMO_BUDGET, sessionstore::restore::Replay::Whole)
        .await
        .unwrap();
    let Some(Ok(ReplayItem::Message(first))) = stream.next().await else {
        panic!("a first item");
    };
    assert_eq!(first.message.display_text, "turn 0");
    // The producer runs on its own blocking thread; give it time to run ahead.
    std::thread::sleep(Duration::from_millis(300));
    let ahead = reads.total();
    assert!(
        ahead < turns / 2,
        "{ahead} of {turns} files were read while the reader held one item"
    );
    let mut rest = 0;
    while let Some(item) = stream.next().await {
        item.unwrap();
        rest += 1;
    }
    assert_eq!(rest, turns - 1);
    assert_eq!(reads.total(), turns, "each distinct file read once");
}
