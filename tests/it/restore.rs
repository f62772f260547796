//! Restore in a fresh store: stored references are replayed through the resolver, so
//! every path comes from a live read under whatever roots the new store was given; the
//! database itself never holds a path, a root or a directory.

use sessionstore::store::Drain;
use sessionstore::store::Verify;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sessionstore::attachments::Roots;
use sessionstore::dispatch::{Memo, Mode};
use sessionstore::model::{Delivery, NewSession, Role, ToolsHost};
use sessionstore::store::{Dispatched, Outgoing};
use sessionstore::{Config, SessionId, Store};

use sessionstore::oracle::ReadCounter;

use crate::restored::CollectRestore;
use crate::support::Whole;
use crate::support::{
    Bin, Expect, PNG, TestStore, block_json, blocks, check_attachment, config_in, context_of, json,
    new_session, parse_uri, stdout,
};

const TEXT: &[u8] = "a text file\nwith two lines, naïve\n".as_bytes();
const BIN: &[u8] = b"\x7fELF\x00\x00\xff\xfe raw";

async fn upload(store: &Store, s: SessionId, name: &str, bytes: &[u8]) -> Expect {
    let stored = store
        .attach_one(s, name.to_owned(), bytes.to_vec())
        .await
        .unwrap();
    Expect {
        name: stored.name,
        uri: stored.uri.to_string(),
        bytes: bytes.to_vec(),
        host: store.config().host.clone(),
    }
}

async fn send(store: &Store, s: SessionId, text: &str, files: &[&Expect]) {
    let mut out = Outgoing::user(text);
    out.attach = files
        .iter()
        .map(|f| crate::support::parse_uri(&f.uri))
        .collect();
    store.send(s, out).await.unwrap();
}

/// A session in a store whose only root is `root`: an image, a text file and a binary
/// file, in two delivered user messages.
async fn session_under(config: Config) -> (SessionId, [Expect; 3]) {
    let store = Store::open(config).await.unwrap();
    let s = store
        .create_session(NewSession::default())
        .await
        .unwrap()
        .id;
    let img = upload(&store, s, "photo one.png", PNG).await;
    let txt = upload(&store, s, "notes.txt", TEXT).await;
    let bin = upload(&store, s, "blob.bin", BIN).await;
    send(&store, s, "before the move", &[&img, &txt, &bin]).await;
    send(&store, s, "and again", &[&txt]).await;
    (s, [img, txt, bin])
}

/// Checks a restored session made by `session_under`: every block's path is in
/// `folder` and reads back the original bytes.
fn check_restored(messages: &[Dispatched], files: &[Expect; 3], folder: &Path) {
    assert_eq!(messages.len(), 2);
    let first = blocks(&messages[0]);
    assert_eq!(first.len(), 4, "{first:?}");
    assert_eq!(first[0]["text"], "before the move");
    for (block, (file, kind)) in first[1..]
        .iter()
        .zip(files.iter().zip(["image", "text", "blob"]))
    {
        let (got, path) = check_attachment(block, file);
        assert_eq!(got, kind);
        assert_eq!(path, folder.join(&file.name));
    }
    let second = blocks(&messages[1]);
    assert_eq!(second.len(), 2, "{second:?}");
    assert_eq!(
        check_attachment(&second[1], &files[1]).1,
        folder.join("notes.txt")
    );
}

#[tokio::test]
async fn restore_after_moving_the_attachment_root_reads_from_the_new_root() {
    let t = TestStore::empty();
    let mut config = t.config.clone();
    config.roots.configured = t.dir.path().join("r1");
    let (s, files) = session_under(config.clone()).await;

    let r2 = t.dir.path().join("moved").join("r2");
    std::fs::create_dir_all(r2.parent().unwrap()).unwrap();
    std::fs::rename(t.dir.path().join("r1"), &r2).unwrap();
    let mut moved = config.clone();
    moved.roots.configured = r2.clone();
    let (store, reads) = ReadCounter::open(moved).await.unwrap();

    let restored = store.collect_restore(s).await.unwrap();
    assert_eq!(restored.session.id, s);
    check_restored(&restored.messages, &files, &r2.join(s.to_string()));
    assert_eq!(reads.total(), 3, "one read per distinct file");
    assert!(!t.dir.path().join("r1").exists());
}

#[tokio::test]
async fn restore_finds_moved_files_in_a_legacy_root() {
    let t = TestStore::empty();
    let mut config = t.config.clone();
    config.roots.configured = t.dir.path().join("r1");
    let (s, files) = session_under(config.clone()).await;

    let r2 = t.dir.path().join("old-root");
    std::fs::rename(t.dir.path().join("r1"), &r2).unwrap();
    let mut moved = config.clone();
    moved.roots = Roots {
        configured: t.dir.path().join("fresh-root"),
        legacy: vec![t.dir.path().join("missing-legacy"), r2.clone()],
    };
    let store = Store::open(moved).await.unwrap();
    let restored = store.collect_restore(s).await.unwrap();
    check_restored(&restored.messages, &files, &r2.join(s.to_string()));
}

#[tokio::test]
async fn restore_after_moving_the_whole_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("data");
    std::fs::create_dir_all(&old).unwrap();
    let (s, files) = session_under(config_in(&old)).await;

    let new = dir.path().join("elsewhere").join("data");
    std::fs::create_dir_all(new.parent().unwrap()).unwrap();
    std::fs::rename(&old, &new).unwrap();
    let store = Store::open(config_in(&new)).await.unwrap();
    let restored = store.collect_restore(s).await.unwrap();
    check_restored(
        &restored.messages,
        &files,
        &new.join("attachments").join(s.to_string()),
    );
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());
}

#[tokio::test]
async fn the_database_never_holds_a_path_or_a_root() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Ssh).await;
    let img = h.attach(s, "photo.png", PNG).await;
    let txt = h.attach(s, "dir\\like/notes.txt", TEXT).await;
    assert_eq!(txt.name, "notes.txt");
    let legacy_folder = h.folder_in(h.legacy(), s);
    std::fs::create_dir_all(&legacy_folder).unwrap();
    std::fs::write(legacy_folder.join("old.bin"), BIN).unwrap();
    let old = Expect {
        name: "old.bin".into(),
        uri: sessionstore::attachments::AttachmentUri::new(s, "old.bin").to_string(),
        bytes: BIN.to_vec(),
        host: h.config.host.clone(),
    };
    h.send_files(s, "everything", &[&img, &txt, &old]).await;
    h.store()
        .send(
            s,
            Outgoing {
                attach: vec![parse_uri(&img.uri)],
                mid_turn: true,
                ..Outgoing::user("queued")
            },
        )
        .await
        .unwrap();
    h.store()
        .dispatch(s, None, Mode::Strict, Memo::new())
        .await
        .map(Dispatched::from)
        .unwrap();
    h.store()
        .drain(s, Mode::Degrade, Memo::new(), Drain::Commit)
        .await
        .unwrap();
    let restored = h.store().collect_restore(s).await.unwrap();
    // The model did get paths, so their absence below is not for want of any.
    let paths: Vec<PathBuf> = blocks(&restored.messages[0])[1..]
        .iter()
        .zip([&img, &txt, &old])
        .map(|(b, f)| check_attachment(b, f).1)
        .collect();
    assert!(paths[2].starts_with(h.legacy()));

    let dir = h.dir.path();
    // The temporary folder's own name is random, so it cannot appear by chance.
    let marker = dir.file_name().unwrap().to_str().unwrap().to_owned();
    let mut needles = vec![marker.clone(), dir.display().to_string()];
    if let Ok(canonical) = dir.canonicalize() {
        needles.push(canonical.display().to_string());
    }
    // Every table's text and the raw files, whatever has or has not been
    // checkpointed yet, through the audit the probe runs.
    let audit = sessionstore::oracle::audit_database(&h.config, &needles).unwrap();
    assert!(
        audit.tables.iter().any(|t| t == "message_refs"),
        "{:?}",
        audit.tables
    );
    assert!(audit.values > 0, "the tables were read");
    assert!(audit.value_hits.is_empty(), "{:?}", audit.value_hits);
    assert!(!audit.files.is_empty());
    assert!(audit.file_hits.is_empty(), "{:?}", audit.file_hits);
}

#[tokio::test]
async fn restoring_a_long_history_reads_each_file_once() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let p = h.attach(s, "p.png", PNG).await;
    let q = h.attach(s, "q.txt", TEXT).await;
    for i in 0..20 {
        let refs: &[&Expect] = if i % 2 == 0 { &[&p, &q] } else { &[&q, &p, &q] };
        h.send_files(s, &format!("message {i}"), refs).await;
    }
    // A fresh store on the same files, as after a daemon restart.
    let (fresh, reads) = h.open_counting().await;
    let restored = fresh.collect_restore(s).await.unwrap();
    assert_eq!(reads.total(), 2, "20 messages over 2 files cost 2 reads");
    assert_eq!(restored.messages.len(), 20);
    let folder = h.folder_in(h.configured(), s);
    for (i, d) in restored.messages.iter().enumerate() {
        let out = blocks(d);
        assert_eq!(out[0]["text"], format!("message {i}"));
        let expected: &[&Expect] = if i % 2 == 0 { &[&p, &q] } else { &[&q, &p, &q] };
        assert_eq!(out.len(), expected.len() + 1);
        for (block, file) in out[1..].iter().zip(expected) {
            assert_eq!(check_attachment(block, file).1, folder.join(&file.name));
        }
    }
}

#[tokio::test]
async fn restore_replays_user_and_assistant_history_and_leaves_queued_messages_queued() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Managed).await;
    let img = h.attach(s, "chart.png", PNG).await;
    let first = h.send_files(s, "What does this chart show?", &[&img]).await;
    let reply = h
        .store()
        .send(
            s,
            Outgoing {
                role: Role::Assistant,
                ..Outgoing::user("It shows growth.")
            },
        )
        .await
        .unwrap();
    let custom = h
        .store()
        .send(
            s,
            Outgoing {
                expanded: Some("Explain the chart step by step.".into()),
                ..Outgoing::user("/explain")
            },
        )
        .await
        .unwrap();
    let queued = h
        .store()
        .send(
            s,
            Outgoing {
                attach: vec![parse_uri(&img.uri)],
                mid_turn: true,
                ..Outgoing::user("wait for me")
            },
        )
        .await
        .unwrap();

    let fresh = Store::open(h.config.clone()).await.unwrap();
    let restored = fresh.collect_restore(s).await.unwrap();
    let ids: Vec<_> = restored.messages.iter().map(|d| d.message.id).collect();
    assert_eq!(ids, [first.id, reply.id, custom.id]);
    let roles: Vec<Role> = restored.messages.iter().map(|d| d.message.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);

    let user = blocks(&restored.messages[0]);
    assert_eq!(user.len(), 2);
    assert_eq!(
        user[0],
        serde_json::json!({"type": "text", "text": "What does this chart show?"})
    );
    check_attachment(&user[1], &img);
    let context = context_of(&user[1]).unwrap();
    assert!(
        context.contains("may not"),
        "managed tools are told: {context}"
    );
    assert_eq!(
        blocks(&restored.messages[1]),
        [serde_json::json!({"type": "text", "text": "It shows growth."})],
        "assistant messages are text only"
    );
    assert_eq!(
        blocks(&restored.messages[2]),
        [serde_json::json!({"type": "text", "text": "Explain the chart step by step."})]
    );

    let still: Vec<_> = fresh
        .queued_messages(s)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(
        still,
        [queued.id],
        "restore leaves the queue for the next drain"
    );
    assert_eq!(
        fresh.message(queued.id).await.unwrap().state,
        Delivery::Queued
    );
}

#[tokio::test]
async fn restore_degrades_a_missing_file_and_keeps_the_rest() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let keep = h.attach(s, "keep.bin", BIN).await;
    let lose = h.attach(s, "lose.png", PNG).await;
    h.send_files(s, "one", &[&keep, &lose]).await;
    h.send_files(s, "two", &[&keep]).await;
    std::fs::remove_file(h.folder_in(h.configured(), s).join("lose.png")).unwrap();

    let restored = Store::open(h.config.clone())
        .await
        .unwrap()
        .collect_restore(s)
        .await
        .unwrap();
    let one = blocks(&restored.messages[0]);
    assert_eq!(one.len(), 3, "{one:?}");
    check_attachment(&one[1], &keep);
    assert_eq!(one[2]["type"], "text");
    assert!(one[2].get("_meta").is_none());
    let notice = one[2]["text"].as_str().unwrap();
    assert!(
        notice.contains("lose.png") && !notice.contains('/'),
        "{notice}"
    );
    let two = blocks(&restored.messages[1]);
    assert_eq!(two.len(), 2);
    check_attachment(&two[1], &keep);
}

#[tokio::test]
async fn restore_leaves_display_text_title_and_references_path_free() {
    let h = TestStore::counting().await;
    let s = h.session_with(ToolsHost::Local).await;
    let img = h.attach(s, "photo.png", PNG).await;
    h.send_files(
        s,
        "  \nFirst question about photo.png\nsecond line",
        &[&img],
    )
    .await;
    h.send_files(s, "follow-up", &[&img]).await;
    let before = h.store().all_messages(s).await.unwrap();

    let restored = h.store().collect_restore(s).await.unwrap();
    assert_eq!(
        restored.session.title.as_deref(),
        Some("First question about photo.png")
    );
    let session = h.store().session(s).await.unwrap();
    assert_eq!(session, restored.session);
    let after = h.store().all_messages(s).await.unwrap();
    assert_eq!(after, before, "restore changes nothing");
    let restored_messages: Vec<_> = restored
        .messages
        .iter()
        .map(|d| d.message.clone())
        .collect();
    assert_eq!(restored_messages, before);
    let dir = h.dir.path().display().to_string();
    let persisted = serde_json::to_string(&(&session, &after)).unwrap();
    assert!(!persisted.contains(&dir), "{persisted}");
    // Only the attachment blocks' context carries the path.
    for d in &restored.messages {
        for block in blocks(d) {
            let without_meta = {
                let mut b = block.clone();
                b.as_object_mut().unwrap().remove("_meta");
                b.to_string()
            };
            assert!(!without_meta.contains(&dir), "{without_meta}");
            if block["type"] == "image" {
                assert!(context_of(&block).unwrap().contains(&dir));
            }
        }
    }
}

// The command line.

fn attach(t: &TestStore, sid: &str, name: &str, bytes: &[u8]) -> String {
    let file = t.dir.path().join("uploads").join(name);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, bytes).unwrap();
    let out = json(&t.run(&["attach", "--session", sid, "--json", file.to_str().unwrap()]));
    out[0]["uri"].as_str().unwrap().to_owned()
}

fn sorted_keys(v: &Value) -> Vec<String> {
    let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    keys.sort_unstable();
    keys
}

#[test]
fn cli_restore_prints_the_history_in_acp_shape() {
    let t = TestStore::empty();
    let d = t.dir.path();
    let sid = new_session(&t);
    let uri = attach(&t, &sid, "photo.png", PNG);
    let sent = |args: &[&str]| -> String {
        let mut all = vec!["send", "--session", sid.as_str(), "--json"];
        all.extend_from_slice(args);
        json(&t.run(&all))["id"].as_str().unwrap().to_owned()
    };
    let user = sent(&["--text", "look", "--attach", &uri]);
    let reply = sent(&["--text", "a reply", "--role", "assistant"]);
    sent(&["--text", "queued", "--mid-turn"]);

    let out = json(&t.run(&["restore", "--session", &sid, "--format", "acp"]));
    assert_eq!(sorted_keys(&out), ["messages", "sessionId"]);
    assert_eq!(out["sessionId"], sid.as_str());
    let messages = out["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "the queued message is not history yet");
    for m in messages {
        assert_eq!(sorted_keys(m), ["content", "id", "role"]);
    }
    assert_eq!(messages[0]["id"], user.as_str());
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[1]["id"], reply.as_str());
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(
        messages[1]["content"],
        serde_json::json!([{"type": "text", "text": "a reply"}])
    );
    let content: Vec<Value> = messages[0]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| block_json(&serde_json::from_value(b.clone()).unwrap()))
        .collect();
    assert_eq!(content.len(), 2);
    assert_eq!(
        content[0],
        serde_json::json!({"type": "text", "text": "look"})
    );
    let expect = Expect {
        name: "photo.png".into(),
        uri,
        bytes: PNG.to_vec(),
        host: sessionstore::config::host_name(),
    };
    let (kind, path) = check_attachment(&content[1], &expect);
    assert_eq!(kind, "image");
    assert_eq!(path, d.join("attachments").join(&sid).join("photo.png"));

    // Restore changed nothing: the queued message is still there for the drain.
    let drained = json(&t.run(&["drain", "--session", &sid]));
    assert_eq!(
        drained,
        serde_json::json!([{"type": "text", "text": "queued"}])
    );
}

#[test]
fn cli_restore_reads_from_a_legacy_root_after_the_files_moved() {
    let t = TestStore::empty();
    let d = t.dir.path();
    let sid = new_session(&t);
    let uri = attach(&t, &sid, "report.txt", TEXT);
    assert!(
        t.run(&[
            "send",
            "--session",
            &sid,
            "--text",
            "read",
            "--attach",
            &uri
        ])
        .status
        .success()
    );
    let moved = d.join("archive");
    std::fs::rename(d.join("attachments"), &moved).unwrap();

    let out = Bin::new(d)
        .args(["restore", "--session", &sid])
        .arg("--db")
        .arg(d.join("sessions.db"))
        .arg("--attachments-root")
        .arg(d.join("new-root"))
        .env("SESSIONSTORE_LEGACY_ROOTS", &moved)
        .output();
    let out = json(&out);
    let content = &out["messages"][0]["content"];
    let expect = Expect {
        name: "report.txt".into(),
        uri,
        bytes: TEXT.to_vec(),
        host: sessionstore::config::host_name(),
    };
    let (kind, path) = check_attachment(&content[1], &expect);
    assert_eq!(kind, "text");
    assert_eq!(path, moved.join(&sid).join("report.txt"));
    let show = stdout(&t.run(&["session", "show", &sid, "--json"]));
    assert!(!show.contains(&d.display().to_string()), "{show}");
}

#[test]
fn restore_takes_a_memo_budget_and_refuses_a_bad_one() {
    let t = TestStore::empty();
    let run = |args: &[&str]| t.run(args);
    json(&run(&["migrate", "--json"]));
    let s = json(&run(&["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let file = t.dir.path().join("a.txt");
    std::fs::write(&file, "hello").unwrap();
    let uri = json(&run(&[
        "attach",
        "--session",
        &s,
        "--json",
        file.to_str().unwrap(),
    ]))[0]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    json(&run(&[
        "send",
        "--session",
        &s,
        "--text",
        "hi",
        "--attach",
        &uri,
        "--json",
    ]));
    for size in ["0", "512KiB", "64MiB", "1GiB", "4096"] {
        let out = json(&run(&["restore", "--session", &s, "--memo-budget", size]));
        assert_eq!(
            out["messages"][0]["content"][1]["resource"]["text"],
            "hello"
        );
    }
    for garbage in ["lots", "12MB", "-5", "1.5GiB", ""] {
        let flag = format!("--memo-budget={garbage}");
        let out = run(&["restore", "--session", &s, &flag]);
        crate::support::assert_usage_error(&out);
        assert_eq!(out.status.code(), Some(2), "{garbage:?}");
        assert!(stderr_of(&out).contains("--memo-budget"), "{garbage:?}");
    }
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
