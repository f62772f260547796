//! Regression tests, each named for what it guards, from review findings.

use std::process::Stdio;
use std::sync::Arc;

use sessionstore::dispatch::{Memo, Mode};
use sessionstore::model::{Delivery, ToolsHost};
use sessionstore::store::Outgoing;

use crate::support::{PNG, TestStore, assert_one_line_error, bin, json, run_in, stdout};

/// Runs the binary on the store of `t` (its database and configured root).
fn cli(t: &TestStore, args: &[&str]) -> std::process::Output {
    run_in(t.dir.path(), args)
}

#[tokio::test]
async fn a_drain_whose_output_cannot_be_written_delivers_nothing() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    let q = t
        .store
        .send(
            s.id,
            Outgoing {
                mid_turn: true,
                ..Outgoing::user("wait for me")
            },
        )
        .await
        .unwrap();
    // A pipe whose reading end is closed before the child starts: every write the
    // child tries fails, however the two processes are scheduled.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = bin(t.dir.path())
        .args(["drain", "--session", &s.id.to_string(), "--db"])
        .arg(t.db_path())
        .arg("--attachments-root")
        .arg(t.dir.path().join("attachments"))
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = assert_one_line_error(&out);
    assert!(err.contains("cannot write the output"), "{err}");
    let m = t.store.message(q.id).await.unwrap();
    assert_eq!(m.state, Delivery::Queued, "the message is still queued");
    let out = cli(&t, &["drain", "--session", &s.id.to_string()]);
    let blocks = json(&out);
    assert_eq!(blocks[0]["text"], "wait for me");
}

#[tokio::test]
async fn a_drain_onto_a_full_disk_delivers_nothing() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    let q = t
        .store
        .send(
            s.id,
            Outgoing {
                mid_turn: true,
                ..Outgoing::user("still here")
            },
        )
        .await
        .unwrap();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = bin(t.dir.path())
        .args(["drain", "--session", &s.id.to_string(), "--db"])
        .arg(t.db_path())
        .arg("--attachments-root")
        .arg(t.dir.path().join("attachments"))
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = assert_one_line_error(&out);
    assert!(err.contains("cannot write the output"), "{err}");
    assert_eq!(t.store.message(q.id).await.unwrap().state, Delivery::Queued);
}

#[tokio::test]
async fn attach_reads_every_file_before_storing_any() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    let good = t.dir.path().join("good.txt");
    std::fs::write(&good, "fine").unwrap();
    let out = cli(
        &t,
        &[
            "attach",
            "--session",
            &s.id.to_string(),
            good.to_str().unwrap(),
            "/nonexistent/missing.txt",
        ],
    );
    let err = assert_one_line_error(&out);
    assert!(err.contains("missing.txt"), "{err}");
    let folder = t.dir.path().join("attachments").join(s.id.to_string());
    let left: Vec<_> = std::fs::read_dir(&folder)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "nothing was stored: {left:?}");
}

#[tokio::test]
async fn dispatch_is_for_user_messages_only() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    let reply = t
        .store
        .send(
            s.id,
            Outgoing {
                role: sessionstore::model::Role::Assistant,
                ..Outgoing::user("an answer")
            },
        )
        .await
        .unwrap();
    let err = t
        .store
        .dispatch(s.id, Some(reply.id), Mode::Strict, Arc::new(Memo::new()))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("dispatch is for user messages"),
        "{err}"
    );
}

#[tokio::test]
async fn the_focus_hint_reads_no_attachment() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    let stored = t
        .store
        .attach(s.id, "gone.png".into(), PNG.to_vec())
        .await
        .unwrap();
    let sent = t
        .store
        .send(
            s.id,
            Outgoing {
                attach: vec![stored.uri.to_string()],
                ..Outgoing::user("what is this?")
            },
        )
        .await
        .unwrap();
    std::fs::remove_file(
        t.dir
            .path()
            .join("attachments")
            .join(s.id.to_string())
            .join("gone.png"),
    )
    .unwrap();
    let printed = serde_json::json!({ "id": sent.id }).to_string();
    let out = cli(
        &t,
        &[
            "dispatch",
            "--session",
            &s.id.to_string(),
            "--message",
            &printed,
            "--strict",
            "--format",
            "focus-hint",
        ],
    );
    assert_eq!(json(&out), serde_json::json!({ "hint": "what is this?" }));
}

#[tokio::test]
async fn blank_titles_and_expansions_count_as_none() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(Some("   ".into()), ToolsHost::Local)
        .await
        .unwrap();
    assert_eq!(s.title, None);
    let sent = t
        .store
        .send(
            s.id,
            Outgoing {
                expanded: Some(" ".into()),
                ..Outgoing::user("the real question")
            },
        )
        .await
        .unwrap();
    assert_eq!(sent.model_text, None);
    assert_eq!(
        t.store.session(s.id).await.unwrap().title.as_deref(),
        Some("the real question")
    );
    let d = t
        .store
        .dispatch(s.id, None, Mode::Strict, Arc::new(Memo::new()))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&d.blocks).unwrap()[0]["text"],
        "the real question"
    );
}

#[tokio::test]
async fn an_audio_only_message_reaches_the_main_model() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    t.store
        .send(
            s.id,
            Outgoing {
                transcript: Some("turn the lights off".into()),
                ..Outgoing::user("")
            },
        )
        .await
        .unwrap();
    let d = t
        .store
        .dispatch(s.id, None, Mode::Strict, Arc::new(Memo::new()))
        .await
        .unwrap();
    let blocks = serde_json::to_value(&d.blocks).unwrap();
    assert_eq!(blocks.as_array().unwrap().len(), 1);
    assert_eq!(blocks[0]["text"], "Audio transcript:\nturn the lights off");
    assert!(blocks[0].get("_meta").is_none());
}

#[tokio::test]
async fn a_bmp_goes_to_the_model_as_a_file_not_an_image() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    // A 1x1 24-bit BMP: a 14-byte file header and a 40-byte info header.
    let mut bmp = b"BM".to_vec();
    bmp.extend_from_slice(&58u32.to_le_bytes());
    bmp.extend_from_slice(&[0, 0, 0, 0]);
    bmp.extend_from_slice(&54u32.to_le_bytes());
    bmp.extend_from_slice(&40u32.to_le_bytes());
    bmp.extend_from_slice(&1i32.to_le_bytes());
    bmp.extend_from_slice(&1i32.to_le_bytes());
    bmp.extend_from_slice(&1u16.to_le_bytes());
    bmp.extend_from_slice(&24u16.to_le_bytes());
    bmp.extend_from_slice(&[0; 24]);
    bmp.extend_from_slice(&[0, 0, 255, 0]);
    let stored = t.store.attach(s.id, "dot.bmp".into(), bmp).await.unwrap();
    assert_eq!(stored.mime, "image/bmp");
    t.store
        .send(
            s.id,
            Outgoing {
                attach: vec![stored.uri.to_string()],
                ..Outgoing::user("")
            },
        )
        .await
        .unwrap();
    let d = t
        .store
        .dispatch(s.id, None, Mode::Strict, Arc::new(Memo::new()))
        .await
        .unwrap();
    let block = serde_json::to_value(&d.blocks[0]).unwrap();
    assert_eq!(block["type"], "resource");
    assert!(block["resource"]["blob"].is_string());
}

#[tokio::test]
async fn timestamps_have_one_width_so_they_sort_as_text() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    for i in 0..20 {
        t.store
            .send(s.id, Outgoing::user(format!("m{i}")))
            .await
            .unwrap();
    }
    let events = t.store.events(s.id).await.unwrap();
    for e in &events {
        // 2026-11-30T06:42:28.123456789Z: nine fraction digits, always.
        assert_eq!(e.created_at.len(), 30, "{}", e.created_at);
        assert_eq!(e.created_at.as_bytes()[19], b'.', "{}", e.created_at);
        assert!(e.created_at.ends_with('Z'), "{}", e.created_at);
    }
}

#[test]
fn the_listing_keeps_creation_order() {
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..5)
        .map(|i| {
            let out = run_in(
                dir.path(),
                &["session", "new", "--title", &format!("s{i}"), "--json"],
            );
            json(&out)["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let out = run_in(dir.path(), &["session", "list"]);
    let listed: Vec<String> = stdout(&out)
        .lines()
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .collect();
    assert_eq!(listed, ids);
}

#[tokio::test]
async fn a_multi_file_upload_that_fails_partway_keeps_nothing() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    let too_big = vec![0u8; sessionstore::attachments::MAX_ATTACHMENT_BYTES as usize + 1];
    let err = t
        .store
        .attach_all(
            s.id,
            vec![
                ("first.txt".into(), b"fine".to_vec()),
                ("huge.bin".into(), too_big),
            ],
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("huge.bin"), "{err}");
    let folder = t.dir.path().join("attachments").join(s.id.to_string());
    let left: Vec<_> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "the first upload was removed again: {left:?}"
    );
}

#[test]
fn attach_refuses_what_is_not_a_regular_file() {
    let dir = tempfile::tempdir().unwrap();
    json(&run_in(dir.path(), &["migrate", "--json"]));
    let s = json(&run_in(dir.path(), &["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let err = assert_one_line_error(&run_in(
        dir.path(),
        &["attach", "--session", &s, dir.path().to_str().unwrap()],
    ));
    assert!(err.contains("not a regular file"), "{err}");
}

#[tokio::test]
async fn dispatch_by_default_takes_the_latest_user_message_not_a_reply() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    let question = t
        .store
        .send(s.id, Outgoing::user("question"))
        .await
        .unwrap();
    t.store
        .send(
            s.id,
            Outgoing {
                role: sessionstore::model::Role::Assistant,
                ..Outgoing::user("the model's answer")
            },
        )
        .await
        .unwrap();
    let out = cli(&t, &["dispatch", "--session", &s.id.to_string()]);
    assert_eq!(
        json(&out),
        serde_json::json!([{ "type": "text", "text": "question" }])
    );
    let d = t
        .store
        .dispatch(s.id, None, Mode::Strict, Arc::new(Memo::new()))
        .await
        .unwrap();
    assert_eq!(d.message.id, question.id);
}

#[tokio::test]
async fn a_missing_file_is_never_replaced_by_a_similar_name() {
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    let first = t
        .store
        .attach(s.id, "a.txt".into(), b"one".to_vec())
        .await
        .unwrap();
    let second = t
        .store
        .attach(s.id, "a.txt".into(), b"two".to_vec())
        .await
        .unwrap();
    assert_eq!(second.name, "a (1).txt");
    t.store
        .send(
            s.id,
            Outgoing {
                attach: vec![first.uri.to_string()],
                ..Outgoing::user("read a.txt")
            },
        )
        .await
        .unwrap();
    std::fs::remove_file(
        t.dir
            .path()
            .join("attachments")
            .join(s.id.to_string())
            .join("a.txt"),
    )
    .unwrap();
    let err = t
        .store
        .dispatch(s.id, None, Mode::Strict, Arc::new(Memo::new()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("a.txt"), "{err}");
    let d = t
        .store
        .dispatch(s.id, None, Mode::Degrade, Arc::new(Memo::new()))
        .await
        .unwrap();
    let text = serde_json::to_string(&d.blocks).unwrap();
    assert!(!text.contains("two"), "the other file's bytes never appear");
    assert!(!text.contains("a (1).txt"), "nor its name");
    assert!(text.contains("could not be read"), "{text}");
}

/// The OpenAI formats on the command line, read back through the official client's
/// request types, with the default and a chosen model.
#[tokio::test]
async fn dispatch_drain_and_restore_print_requests_the_openai_types_accept() {
    use async_openai::types::chat::CreateChatCompletionRequest;
    use async_openai::types::responses::CreateResponse;
    let t = TestStore::new().await;
    let s = t
        .store
        .create_session(None, ToolsHost::Local)
        .await
        .unwrap();
    let stored = t
        .store
        .attach(s.id, "dot.png".into(), PNG.to_vec())
        .await
        .unwrap();
    let uri = stored.uri.to_string();
    let sid = s.id.to_string();
    cli(
        &t,
        &[
            "send",
            "--session",
            &sid,
            "--text",
            "look",
            "--attach",
            &uri,
        ],
    );
    cli(
        &t,
        &[
            "send",
            "--session",
            &sid,
            "--text",
            "later",
            "--mid-turn",
            "--attach",
            &uri,
        ],
    );
    let chat = |args: &[&str]| -> CreateChatCompletionRequest {
        serde_json::from_value(json(&cli(&t, args))).expect("a Chat Completions request")
    };
    let request = chat(&["dispatch", "--session", &sid, "--format", "openai"]);
    assert_eq!(request.model, "gpt-4o");
    assert_eq!(request.messages.len(), 1);
    let request = chat(&[
        "dispatch",
        "--session",
        &sid,
        "--format",
        "openai",
        "--model",
        "o3",
    ]);
    assert_eq!(request.model, "o3");
    let out = cli(
        &t,
        &[
            "dispatch",
            "--session",
            &sid,
            "--format",
            "openai-responses",
        ],
    );
    let responses: CreateResponse =
        serde_json::from_value(json(&out)).expect("a Responses request");
    assert_eq!(responses.model.as_deref(), Some("gpt-4o"));
    let request = chat(&[
        "drain",
        "--session",
        &sid,
        "--format",
        "openai",
        "--model",
        "m",
    ]);
    assert_eq!((request.model.as_str(), request.messages.len()), ("m", 1));
    let request = chat(&["restore", "--session", &sid, "--format", "openai"]);
    assert_eq!(request.messages.len(), 2, "both delivered user messages");
    let text = serde_json::to_string(&request).unwrap();
    assert!(text.contains("data:image/png;base64,"), "{text}");
    assert!(
        text.contains(t.dir.path().to_str().unwrap()),
        "the paths reach the model"
    );
    let out = cli(
        &t,
        &["restore", "--session", &sid, "--format", "openai-responses"],
    );
    let _: CreateResponse = serde_json::from_value(json(&out)).expect("a Responses request");
}
