//! Regression tests, each named for what it guards, from review findings.

use sessionstore::store::Dispatched;
use std::process::{Output, Stdio};

use sessionstore::attachments::AttachmentError;
use sessionstore::dispatch::{Memo, Mode};
use sessionstore::model::{Delivery, NewSession, Role};
use sessionstore::store::{Outgoing, Upload};
use sessionstore::{Error, SessionId};

use crate::support::Whole;
use crate::support::{Bin, PNG, TestStore, assert_one_line_error, json, stderr, stdout};

/// A user message with `text` and references to `uris`.
fn with_files(text: &str, uris: &[&sessionstore::attachments::StoredAttachment]) -> Outgoing {
    Outgoing {
        attach: uris.iter().map(|s| s.uri.clone()).collect(),
        ..Outgoing::user(text)
    }
}

fn assistant(text: &str) -> Outgoing {
    Outgoing {
        role: Role::Assistant,
        ..Outgoing::user(text)
    }
}

fn mid_turn(text: &str) -> Outgoing {
    Outgoing {
        mid_turn: true,
        ..Outgoing::user(text)
    }
}

/// `drain` on the store of `t`, its standard output sent to `out`.
fn drain_into(t: &TestStore, session: SessionId, out: impl Into<Stdio>) -> Output {
    t.bin()
        .args(["drain", "--session", &session.to_string()])
        .stdout(out)
        .output()
}

#[tokio::test]
async fn a_drain_whose_output_cannot_be_written_delivers_nothing() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let q = t.send(s, mid_turn("wait for me")).await;
    // A pipe whose reading end is closed before the child starts: every write the
    // child tries fails, however the two processes are scheduled.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = drain_into(&t, s, writer);
    let err = assert_one_line_error(&out);
    assert!(err.contains("cannot write the output"), "{err}");
    let m = t.store().message(q.id).await.unwrap();
    assert_eq!(m.state, Delivery::Queued, "the message is still queued");
    let out = t.run(&["drain", "--session", &s.to_string()]);
    let blocks = json(&out);
    assert_eq!(blocks[0]["text"], "wait for me");
}

#[tokio::test]
async fn a_drain_onto_a_full_disk_delivers_nothing() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let q = t.send(s, mid_turn("still here")).await;
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = drain_into(&t, s, full);
    let err = assert_one_line_error(&out);
    assert!(err.contains("cannot write the output"), "{err}");
    assert_eq!(
        t.store().message(q.id).await.unwrap().state,
        Delivery::Queued
    );
}

#[tokio::test]
async fn attach_reads_every_file_before_storing_any() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let good = t.dir.path().join("good.txt");
    std::fs::write(&good, "fine").unwrap();
    let out = t.run(&[
        "attach",
        "--session",
        &s.to_string(),
        good.to_str().unwrap(),
        "/nonexistent/missing.txt",
    ]);
    let err = assert_one_line_error(&out);
    assert!(err.contains("missing.txt"), "{err}");
    let left: Vec<_> = std::fs::read_dir(t.folder(s))
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "nothing was stored: {left:?}");
}

#[tokio::test]
async fn dispatch_is_for_user_messages_only() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let reply = t.send(s, assistant("an answer")).await;
    let err = t
        .store()
        .dispatch(s, Some(reply.id), Mode::Strict, Memo::new())
        .await
        .map(Dispatched::from)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotUserMessage { message, role: Role::Assistant } if message == reply.id
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_focus_hint_reads_no_attachment() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let stored = t.upload(s, "gone.png", PNG).await;
    let sent = t.send(s, with_files("what is this?", &[&stored])).await;
    std::fs::remove_file(t.folder(s).join("gone.png")).unwrap();
    let printed = serde_json::json!({ "id": sent.id }).to_string();
    let out = t.run(&[
        "dispatch",
        "--session",
        &s.to_string(),
        "--message",
        &printed,
        "--strict",
        "--format",
        "focus-hint",
    ]);
    assert_eq!(json(&out), serde_json::json!({ "hint": "what is this?" }));
}

#[tokio::test]
async fn blank_titles_and_expansions_count_as_none() {
    let t = TestStore::new().await;
    let s = t
        .store()
        .create_session(NewSession {
            title: Some(" ".into()),
            ..NewSession::default()
        })
        .await
        .unwrap();
    assert_eq!(s.title, None);
    let sent = t
        .send(
            s.id,
            Outgoing {
                expanded: Some(" ".into()),
                ..Outgoing::user("the real question")
            },
        )
        .await;
    assert_eq!(sent.model_text, None);
    assert_eq!(
        t.store().session(s.id).await.unwrap().title.as_deref(),
        Some("the real question")
    );
    let d = t.dispatch(s.id, Mode::Strict).await.unwrap();
    assert_eq!(
        serde_json::to_value(&d.blocks).unwrap()[0]["text"],
        "the real question"
    );
}

#[tokio::test]
async fn an_audio_only_message_reaches_the_main_model() {
    let t = TestStore::new().await;
    let s = t.session().await;
    t.send(
        s,
        Outgoing {
            transcript: Some("turn the lights off".into()),
            ..Outgoing::user("")
        },
    )
    .await;
    let d = t.dispatch(s, Mode::Strict).await.unwrap();
    let blocks = serde_json::to_value(&d.blocks).unwrap();
    assert_eq!(blocks.as_array().unwrap().len(), 1);
    assert_eq!(blocks[0]["text"], "Audio transcript:\nturn the lights off");
    assert!(blocks[0].get("_meta").is_none());
}

#[tokio::test]
async fn a_bmp_goes_to_the_model_as_a_file_not_an_image() {
    let t = TestStore::new().await;
    let s = t.session().await;
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
    let stored = t.upload(s, "dot.bmp", &bmp).await;
    assert_eq!(stored.mime, "image/bmp");
    t.send(s, with_files("", &[&stored])).await;
    let d = t.dispatch(s, Mode::Strict).await.unwrap();
    let block = serde_json::to_value(&d.blocks[0]).unwrap();
    assert_eq!(block["type"], "resource");
    assert!(block["resource"]["blob"].is_string());
}

#[tokio::test]
async fn timestamps_have_one_width_so_they_sort_as_text() {
    let t = TestStore::new().await;
    let s = t.session().await;
    for i in 0..20 {
        t.send(s, Outgoing::user(format!("m{i}"))).await;
    }
    let events = t.store().all_events(s).await.unwrap();
    for e in &events {
        // 2026-11-30T06:42:28.123456789Z: nine fraction digits, always.
        assert_eq!(e.created_at.len(), 30, "{}", e.created_at);
        assert_eq!(e.created_at.as_bytes()[19], b'.', "{}", e.created_at);
        assert!(e.created_at.ends_with('Z'), "{}", e.created_at);
    }
}

/// Once sessions listed in creation order (ids, since early timestamps did not sort as
/// text); the contract is now most recently updated first, and a send moves a session
/// to the front.
#[test]
fn the_listing_shows_the_most_recently_updated_first() {
    let t = TestStore::empty();
    let ids: Vec<String> = (0..5)
        .map(|i| {
            let out = t.run(&["session", "new", "--title", &format!("s{i}"), "--json"]);
            json(&out)["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let listed = || -> Vec<String> {
        let out = t.run(&["session", "list"]);
        stdout(&out)
            .lines()
            .map(|l| l.split_whitespace().next().unwrap().to_owned())
            .collect()
    };
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(listed(), newest_first);
    json(&t.run(&["send", "--session", &ids[0], "--text", "news", "--json"]));
    let mut moved = vec![ids[0].clone()];
    moved.extend(newest_first[..4].iter().cloned());
    assert_eq!(listed(), moved);
}

#[tokio::test]
async fn a_multi_file_upload_that_fails_partway_keeps_nothing() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let too_big = vec![0u8; sessionstore::attachments::MAX_ATTACHMENT_BYTES as usize + 1];
    let err = t
        .store()
        .attach(
            s,
            vec![
                Upload {
                    name: "first.txt".into(),
                    bytes: b"fine".to_vec(),
                },
                Upload {
                    name: "huge.bin".into(),
                    bytes: too_big,
                },
            ],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Attachment(AttachmentError::UploadTooLarge { name, .. }) if name == "huge.bin"
        ),
        "{err:?}"
    );
    let left: Vec<_> = std::fs::read_dir(t.folder(s))
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
    let t = TestStore::empty();
    json(&t.run(&["migrate", "--json"]));
    let s = json(&t.run(&["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let err =
        assert_one_line_error(&t.run(&["attach", "--session", &s, t.dir.path().to_str().unwrap()]));
    assert!(err.contains("not a regular file"), "{err}");
}

#[tokio::test]
async fn dispatch_by_default_takes_the_latest_user_message_not_a_reply() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let question = t.send(s, Outgoing::user("question")).await;
    t.send(s, assistant("the model's answer")).await;
    let out = t.run(&["dispatch", "--session", &s.to_string()]);
    assert_eq!(
        json(&out),
        serde_json::json!([{ "type": "text", "text": "question" }])
    );
    let d = t.dispatch(s, Mode::Strict).await.unwrap();
    assert_eq!(d.message.id, question.id);
}

#[tokio::test]
async fn a_missing_file_is_never_replaced_by_a_similar_name() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let first = t.upload(s, "a.txt", b"one").await;
    let second = t.upload(s, "a.txt", b"two").await;
    assert_eq!(second.name, "a (1).txt");
    t.send(s, with_files("read a.txt", &[&first])).await;
    std::fs::remove_file(t.folder(s).join("a.txt")).unwrap();
    let err = t.dispatch(s, Mode::Strict).await.unwrap_err();
    let Error::Dispatch(refused) = &err else {
        panic!("expected an unreadable-attachment error, got {err:?}");
    };
    let names: Vec<&str> = refused.unreadable.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["a.txt"]);
    let d = t.dispatch(s, Mode::Degrade).await.unwrap();
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
    let s = t.session().await;
    let stored = t.upload(s, "dot.png", PNG).await;
    t.send(s, with_files("look", &[&stored])).await;
    t.send(
        s,
        Outgoing {
            mid_turn: true,
            ..with_files("later", &[&stored])
        },
    )
    .await;
    let sid = s.to_string();
    let chat = |args: &[&str]| -> CreateChatCompletionRequest {
        serde_json::from_value(json(&t.run(args))).expect("a Chat Completions request")
    };
    let responses = |args: &[&str]| -> CreateResponse {
        serde_json::from_value(json(&t.run(args))).expect("a Responses request")
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
    let request = responses(&[
        "dispatch",
        "--session",
        &sid,
        "--format",
        "openai-responses",
    ]);
    assert_eq!(request.model.as_deref(), Some("gpt-4o"));
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
    responses(&["restore", "--session", &sid, "--format", "openai-responses"]);
}

/// Issue 12, hole 3: a crafted database or a path the user passes could carry escape
/// sequences (ESC, VT, FF, BS, DEL, NEL, a bidi override) into an error message and on
/// to the terminal. Every message the binary prints shows them as `\uXXXX`.
#[test]
fn control_characters_in_error_messages_never_reach_the_terminal() {
    const HIDDEN: &str = "\u{1b}[31m\u{0b}\u{0c}\u{08}\u{7f}\u{85}\u{202e}";
    const SHOWN: &str = "\\u001b[31m\\u000b\\u000c\\u0008\\u007f\\u0085\\u202e";
    let dir = tempfile::tempdir().unwrap();
    let check = |out: &Output| {
        let err = assert_one_line_error(out);
        for c in HIDDEN.chars().filter(|c| !c.is_ascii_graphic()) {
            assert!(!err.contains(c), "raw {c:?} reached stderr: {err:?}");
        }
        assert!(err.contains(SHOWN), "{err:?}");
    };

    // A --db path that names nothing.
    let db = dir.path().join(format!("db{HIDDEN}.sqlite"));
    let session = SessionId::new().to_string();
    let out = Bin::new(dir.path())
        .args([
            "session",
            "show",
            &session,
            "--attachments-root",
            "a",
            "--db",
        ])
        .arg(&db)
        .output();
    check(&out);

    // A file given to `attach` that is not a regular file (checked before any
    // database is opened).
    let folder = dir.path().join(format!("upload{HIDDEN}"));
    std::fs::create_dir(&folder).unwrap();
    let out = Bin::new(dir.path())
        .args(["attach", "--session", &session, "--db", "x.db"])
        .args(["--attachments-root", "a"])
        .arg(&folder)
        .output();
    check(&out);

    // A database whose schema names a table with the sequences in it.
    let crafted = dir.path().join("crafted.db");
    {
        let conn = rusqlite::Connection::open(&crafted).unwrap();
        conn.execute_batch("CREATE TABLE t (a)").unwrap();
        conn.pragma_update(None, "writable_schema", true).unwrap();
        conn.execute(
            "UPDATE sqlite_master SET name = ?1, sql = 'CREATE TABLE broken (' WHERE name = 't'",
            [format!("refinery_s{HIDDEN}chema_history")],
        )
        .unwrap();
    }
    let out = Bin::new(dir.path())
        .args(["session", "list", "--attachments-root", "a", "--db"])
        .arg(&crafted)
        .output();
    check(&out);
    assert!(stderr(&out).contains("malformed database schema"));
    assert_eq!(
        out.status.code(),
        Some(3),
        "a foreign database is refused input"
    );
}

/// Hole 4 of the reliability issue: uploads killed mid-write left their hidden
/// temporary files behind forever. The next upload into the folder sweeps the ones
/// older than the grace period, and nothing else.
#[tokio::test]
async fn crash_leftover_uploads_are_swept_by_the_next_upload_into_the_folder() {
    use std::time::{Duration, SystemTime};
    let t = TestStore::new().await;
    let s = t.session().await;
    t.upload(s, "first.txt", b"one").await;
    let folder = t.folder(s);
    let old = SystemTime::now() - sessionstore::attachments::UPLOAD_GRACE - Duration::from_secs(60);
    let plant = |name: &str, when: SystemTime| {
        let f = std::fs::File::create(folder.join(name)).unwrap();
        f.set_len(4096).unwrap();
        f.set_modified(when).unwrap();
    };
    let stale = ".upload-0123456789abcdef0123456789abcdef.partial.";
    let fresh = ".upload-fedcba9876543210fedcba9876543210.partial.";
    // Near misses of the pattern, and a user's own file, stay whatever their age.
    let lookalikes = [
        ".upload-0123456789abcdef0123456789abcde.partial.",
        ".upload-0123456789ABCDEF0123456789ABCDEF.partial.",
        ".upload-0123456789abcdef0123456789abcdef.partial",
        "upload-0123456789abcdef0123456789abcdef.partial.",
    ];
    plant(stale, old);
    plant(fresh, SystemTime::now());
    for name in lookalikes {
        plant(name, old);
    }
    // A symlink with a temporary's name is never followed: its old target stays.
    let outside = t.dir.path().join("sentinel");
    std::fs::write(&outside, b"outside").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&outside)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let linked = ".upload-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.partial.";
    std::os::unix::fs::symlink(&outside, folder.join(linked)).unwrap();

    t.upload(s, "second.txt", b"two").await;

    let mut left: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    let mut expected: Vec<String> = ["first.txt", "second.txt", fresh, linked]
        .into_iter()
        .chain(lookalikes)
        .map(str::to_owned)
        .collect();
    expected.sort();
    assert_eq!(left, expected, "only the stale temporary went");
    assert_eq!(std::fs::read(&outside).unwrap(), b"outside");

    // The same sweep, called directly (as `gc` will), takes any age given to it.
    let swept = t
        .store()
        .attachments()
        .sweep_leftovers(&s, Duration::ZERO)
        .unwrap();
    assert_eq!(swept.files, 1, "the fresh temporary, not the symlink");
    assert!(!folder.join(fresh).exists());
    assert!(folder.join(linked).symlink_metadata().is_ok());
}

/// An agent that resumes its own session behind the proxy keeps, in its own history,
/// the attachment paths of the reads made back then, which a moved root leaves
/// pointing at nothing (found by `tests/real-agent/`, with Codex). Its next prompt must
/// carry each earlier attachment's path from a read made now.
#[cfg(feature = "acp")]
#[tokio::test]
async fn an_agent_that_resumed_its_own_session_gets_the_current_paths() {
    use serde_json::{Value, json};
    use sessionstore::acp::proxy::{AgentCommand, ProxyOptions, run};
    use std::time::Duration;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let t = TestStore::new().await;
    let report = t.dir.path().join("agent-report.jsonl");
    let agent = AgentCommand {
        program: env!("CARGO_BIN_EXE_sessionstore-test-agent").into(),
        args: vec!["--resume".into(), "--report".into(), report.clone().into()],
    };
    let cwd = t.dir.path().to_path_buf();
    let (client, proxy_end) = tokio::io::duplex(1 << 20);
    let (proxy_in, proxy_out) = tokio::io::split(proxy_end);
    let proxy = tokio::spawn(run(
        t.store().clone(),
        ProxyOptions::new(agent, cwd.clone()),
        proxy_in,
        proxy_out,
    ));
    let (from_proxy, mut to_proxy) = tokio::io::split(client);
    let mut lines = BufReader::new(from_proxy).lines();
    let mut next_id = 0;
    let mut request = async |method: &str, params: Value| -> Value {
        next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params});
        to_proxy
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let line = lines.next_line().await.unwrap().expect("the proxy answers");
                let message: Value = serde_json::from_str(&line).unwrap();
                if message["id"] == json!(next_id) && message.get("method").is_none() {
                    return message;
                }
                // The test agent's usual turn asks permission for its tool call, and
                // waits for the answer.
                if message["method"] == "session/request_permission" {
                    let allow = json!({"jsonrpc": "2.0", "id": message["id"],
                        "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}});
                    to_proxy
                        .write_all(format!("{allow}\n").as_bytes())
                        .await
                        .unwrap();
                }
            }
        })
        .await
        .expect("an answer within 30 s");
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    };

    request("initialize", json!({"protocolVersion": 1})).await;
    let created = request("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
    let session = created["sessionId"].clone();
    use base64::Engine;
    let image = base64::engine::general_purpose::STANDARD.encode(PNG);
    let first = json!([{"type": "text", "text": "look"}, {"type": "image", "mimeType": "image/png", "data": image}]);
    request(
        "session/prompt",
        json!({"sessionId": session, "prompt": first}),
    )
    .await;
    // A load on the same connection: the agent still knows the session, and resumes it.
    request(
        "session/load",
        json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
    )
    .await;
    request(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "again"}]}),
    )
    .await;
    // The client goes: the proxy ends, and stops the agent.
    to_proxy.shutdown().await.unwrap();
    tokio::time::timeout(Duration::from_secs(30), proxy)
        .await
        .expect("the proxy ends when its client goes")
        .unwrap()
        .unwrap();

    let received: Vec<Value> = std::fs::read_to_string(&report)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        received.iter().any(|r| r["method"] == "session/resume"),
        "the agent resumed its own session: {received:?}"
    );
    let prompts: Vec<&Value> = received
        .iter()
        .filter(|r| r["method"] == "session/prompt")
        .collect();
    assert_eq!(prompts.len(), 2);
    let blocks = prompts[1]["params"]["prompt"].as_array().unwrap();
    let texts: Vec<&str> = blocks.iter().map(|b| b["text"].as_str().unwrap()).collect();
    assert_eq!(
        texts.len(),
        3,
        "why, the image's path, the prompt: {texts:?}"
    );
    assert!(texts[0].starts_with("[sessionstore] The files attached earlier"));
    let context = crate::support::context_line(texts[1]);
    assert_eq!(std::fs::read(&context.path).unwrap(), PNG, "a live read");
    assert!(std::path::Path::new(&context.path).starts_with(t.configured()));
    assert_eq!(texts[2], "again");
}
