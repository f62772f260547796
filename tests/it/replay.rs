//! Recorded turns replayed by `restore`, from outside: the whole history (user
//! messages, agent messages and thoughts, tool calls in their merged state, plans,
//! session-level updates) in one order, in every format, with every attachment path
//! from a live read after the roots moved, and every `acp-updates` line a
//! `SessionNotification` the schema crate accepts.

use sessionstore::store::Access;
use std::path::Path;

use agent_client_protocol_schema::rpc::{JsonRpcMessage, Notification};
use agent_client_protocol_schema::v1::{
    ContentBlock, ContentChunk, MessageId as AcpMessageId, SessionNotification, SessionUpdate,
    ToolCall, ToolCallStatus,
};
use sessionstore::model::Role;
use sessionstore::openai::{chat_request, responses_request};
use sessionstore::{Config, Store, turns};

use crate::restored::{CollectRestore, HistoryEntry, Restored};
use crate::support::{
    Bin, PNG, RECORDED_TURN, TestStore, check_attachment, copy_tree, fixture, json, roles, stderr,
    stdout,
};

type Line = JsonRpcMessage<Notification<SessionNotification>>;

/// The updates a client loading the session gets, built with the schema types from a
/// collected restore: one chunk per message block under the message's id, and each
/// recorded item as `turns::replay_updates` says.
fn expected_lines(restored: &Restored) -> Vec<Line> {
    let session = restored.session.id.to_string();
    let mut updates = Vec::new();
    for entry in restored.history() {
        match entry {
            HistoryEntry::Message(d) => {
                for block in &d.blocks {
                    let chunk = ContentChunk::new(block.clone())
                        .message_id(AcpMessageId::from(d.message.id.to_string()));
                    updates.push(match d.message.role {
                        Role::User => SessionUpdate::UserMessageChunk(chunk),
                        _ => SessionUpdate::AgentMessageChunk(chunk),
                    });
                }
            }
            HistoryEntry::Recorded(item) => updates.extend(
                turns::replay_updates(&item.body)
                    .into_iter()
                    .map(|u| match u {
                        turns::Update::Known(u) => u,
                        turns::Update::Opaque(v) => {
                            panic!("these histories hold no opaque update: {v}")
                        }
                    }),
            ),
        }
    }
    updates
        .into_iter()
        .map(|update| {
            JsonRpcMessage::wrap(Notification {
                method: "session/update".into(),
                params: Some(SessionNotification::new(session.clone(), update)),
            })
        })
        .collect()
}

/// Runs `restore` in a fresh process on `db` with the given roots.
fn restore(home: &Path, db: &Path, session: &str, format: &str, roots: &[&str]) -> String {
    let out = Bin::new(home)
        .args(["restore", "--session", session, "--format", format, "--db"])
        .arg(db)
        .args(roots)
        .output();
    assert!(out.status.success(), "{format}: {}", stderr(&out));
    stdout(&out)
}

/// Every format the binary restores the V2 fixture's recorded turn in is what the
/// collected restore serializes to, and its shapes are the ones README describes.
#[tokio::test]
async fn the_v2_fixture_restores_its_turn_in_every_format() {
    let t = TestStore::empty();
    copy_tree(&fixture("v2"), t.dir.path());
    // Reading commands never upgrade: the V2 database is migrated first, as a user would.
    crate::support::json(&t.run(&["migrate", "--json"]));
    let sid = std::fs::read_to_string(t.dir.path().join("session-id")).unwrap();
    let sid = sid.trim();
    let db = t.dir.path().join("sessions.db");
    let attachments = t.dir.path().join("attachments");
    let legacy = t.dir.path().join("legacy");
    let roots = [
        "--attachments-root",
        attachments.to_str().unwrap(),
        "--legacy-root",
        legacy.to_str().unwrap(),
    ];
    // Reading never upgrades: the fixture is brought to this build's schema first,
    // as a user would, when a later migration exists.
    sessionstore::maintenance::migrate(
        &crate::support::config_in(t.dir.path()),
        sessionstore::maintenance::Migration {
            backup: sessionstore::Backup::Skip,
            dry_run: false,
        },
    )
    .await
    .unwrap();
    let store = Store::open_as(
        Config {
            database: db.clone().into(),
            roots: sessionstore::attachments::Roots {
                configured: attachments.clone(),
                legacy: vec![legacy.clone()],
            },
            host: sessionstore::config::host_name(),
            sharing: Default::default(),
            key: None,
            redaction: Default::default(),
        },
        Access::ReadOnly,
    )
    .await
    .unwrap();
    let restored = store.collect_restore(sid.parse().unwrap()).await.unwrap();
    assert_eq!(
        restored.messages.len(),
        2,
        "the queued message stays queued"
    );
    assert_eq!(restored.items.len(), 9);

    let acp = restore(t.dir.path(), &db, sid, "acp", &roots);
    assert_eq!(acp, serde_json::to_string(&restored).unwrap() + "\n");
    let acp: serde_json::Value = serde_json::from_str(&acp).unwrap();
    let entries = acp["messages"].as_array().unwrap();
    assert_eq!(
        roles(&acp["messages"]),
        [
            "user",
            "thought",
            "plan",
            "tool",
            "tool",
            "assistant",
            "session",
            "session",
            "session",
            "session",
            "user"
        ]
    );
    let ids: Vec<String> = restored.items.iter().map(|i| i.id.to_string()).collect();
    for (entry, id) in entries[1..10].iter().zip(&ids) {
        assert_eq!(entry["id"], id.as_str(), "an item prints its own id");
    }
    let read: ToolCall = serde_json::from_value(entries[3]["toolCall"].clone()).unwrap();
    assert_eq!(read.tool_call_id.to_string(), "call-read");
    assert_eq!(read.status, ToolCallStatus::Completed);
    assert_eq!(read.title, "Read notes 日本.txt (2 lines)");
    assert_eq!(
        read.content.len(),
        1,
        "the completed call keeps its content"
    );
    let answer: Vec<ContentBlock> = serde_json::from_value(entries[5]["content"].clone()).unwrap();
    assert_eq!(answer.len(), 3, "text, image, text");
    assert!(
        matches!(&answer[0], ContentBlock::Text(t)
            if t.text == "The chart shows the budget: 42, as in /home/agent/work/notes 日本.txt."),
        "agent text is kept verbatim, the path it mentions included"
    );
    assert_eq!(entries[2]["plan"]["entries"].as_array().unwrap().len(), 2);
    assert_eq!(entries[6]["update"]["sessionUpdate"], "current_mode_update");
    assert_eq!(entries[6]["update"]["currentModeId"], "architect");

    // Model requests: the agent's answer as assistant text between the two user
    // messages; the thought, tool calls, plan and session updates stay out.
    let conversation = restored.conversation();
    let chat = restore(t.dir.path(), &db, sid, "openai", &roots);
    assert_eq!(
        chat,
        serde_json::to_string(&chat_request("gpt-4o", &conversation)).unwrap() + "\n"
    );
    let chat: serde_json::Value = serde_json::from_str(&chat).unwrap();
    assert_eq!(roles(&chat["messages"]), ["user", "assistant", "user"]);
    assert_eq!(
        chat["messages"][1]["content"],
        "The chart shows the budget: 42, as in /home/agent/work/notes 日本.txt.That is all."
    );
    for leftout in [
        "explained; read the notes",
        "Read the notes",
        "no matches",
        "architect",
    ] {
        assert!(
            !chat.to_string().contains(leftout),
            "{leftout} reached the model"
        );
    }
    let _: async_openai::types::chat::CreateChatCompletionRequest =
        serde_json::from_value(chat).expect("the official client types accept it");
    let responses = restore(t.dir.path(), &db, sid, "openai-responses", &roots);
    assert_eq!(
        responses,
        serde_json::to_string(&responses_request("gpt-4o", &conversation)).unwrap() + "\n"
    );
    let _: async_openai::types::responses::CreateResponse =
        serde_json::from_str(&responses).expect("the official client types accept it");

    let updates = restore(t.dir.path(), &db, sid, "acp-updates", &roots);
    let want = expected_lines(&restored);
    let lines: Vec<&str> = updates.lines().collect();
    assert_eq!(lines.len(), want.len());
    for (line, want) in lines.iter().zip(&want) {
        let got: Line = serde_json::from_str(line).unwrap();
        assert_eq!(&got, want);
        assert_eq!(*line, serde_json::to_string(want).unwrap());
    }
}

/// `(sessionUpdate, messageId or toolCallId)` of a line.
fn tag_of(line: &Line) -> (String, String) {
    let value = serde_json::to_value(line).unwrap();
    let update = &value["params"]["update"];
    let tag = update["sessionUpdate"].as_str().unwrap().to_owned();
    let id = update["messageId"]
        .as_str()
        .or(update["toolCallId"].as_str())
        .unwrap_or("")
        .to_owned();
    (tag, id)
}

/// The issue's "done when": a turn recorded through `record` from a JSON-lines file,
/// then restored by a fresh process after the attachment folder moved (to a new
/// configured root, then to a legacy root), replays in order, every attachment path
/// reads back to its block's bytes, and every line is a `SessionNotification`.
#[test]
fn a_recorded_turn_replays_in_order_from_moved_roots() {
    let t = TestStore::empty();
    let home = t.dir.path();
    let db = t.db_path();
    let old_root = t.configured().to_path_buf();
    let cmd = |args: &[&str]| {
        let mut cmd = t.bin();
        cmd.args(args);
        cmd
    };
    let ss = |args: &[&str]| cmd(args).output();
    let sid = json(&ss(&["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let uploads = home.join("uploads");
    std::fs::create_dir(&uploads).unwrap();
    std::fs::write(uploads.join("chart.png"), PNG).unwrap();
    std::fs::write(uploads.join("notes.txt"), "budget: 42\n").unwrap();
    let attached = json(&ss(&[
        "attach",
        "--json",
        "--session",
        &sid,
        uploads.join("chart.png").to_str().unwrap(),
        uploads.join("notes.txt").to_str().unwrap(),
    ]));
    // Sends a user message with the given attachments; its id.
    let send = |text: &str, attach: &[usize]| {
        let mut args = vec!["send", "--json", "--session", &sid, "--text", text];
        for i in attach {
            args.extend(["--attach", attached[*i]["uri"].as_str().unwrap()]);
        }
        json(&ss(&args))["id"].as_str().unwrap().to_owned()
    };
    let first = send("What is the budget?", &[0, 1]);
    let turn = home.join("turn.jsonl");
    // The shared turn, then a mode change.
    let mode = r#"{"sessionUpdate":"current_mode_update","currentModeId":"code"}"#;
    std::fs::write(&turn, format!("{RECORDED_TURN}{mode}\n")).unwrap();
    let recorded = cmd(&["record", "--json", "--session", &sid])
        .stdin(std::fs::read(&turn).unwrap())
        .output();
    assert_eq!(json(&recorded)["recorded"], 11);
    let second = send("and the notes?", &[1]);

    let want: Vec<(String, String)> = [
        ("user_message_chunk", first.as_str()),
        ("user_message_chunk", &first),
        ("user_message_chunk", &first),
        ("agent_thought_chunk", "think"),
        ("plan", ""),
        ("tool_call", "read"),
        ("tool_call", "grep"),
        ("agent_message_chunk", "answer"),
        ("current_mode_update", ""),
        ("user_message_chunk", &second),
        ("user_message_chunk", &second),
    ]
    .iter()
    .map(|(t, id)| (t.to_string(), id.to_string()))
    .collect();

    let moved = home.join("moved");
    std::fs::create_dir(&moved).unwrap();
    let new_root = moved.join("new root");
    std::fs::rename(&old_root, &new_root).unwrap();
    let empty = home.join("empty configured root");
    for (label, roots) in [
        (
            "a new configured root",
            vec!["--attachments-root", new_root.to_str().unwrap()],
        ),
        (
            "a legacy root",
            vec![
                "--attachments-root",
                empty.to_str().unwrap(),
                "--legacy-root",
                new_root.to_str().unwrap(),
            ],
        ),
    ] {
        let text = restore(home, &db, &sid, "acp-updates", &roots);
        let lines: Vec<Line> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{label}: {e}: {l}")))
            .collect();
        let tags: Vec<(String, String)> = lines.iter().map(tag_of).collect();
        assert_eq!(tags, want, "{label}");
        let mut paths = 0;
        for line in &lines {
            let params = line.inner().params.as_ref().unwrap();
            assert_eq!(*params.session_id.0, *sid, "{label}");
            match &params.update {
                SessionUpdate::UserMessageChunk(chunk) => {
                    let block = serde_json::to_value(&chunk.content).unwrap();
                    if block["type"] == "text" {
                        continue;
                    }
                    let (name, bytes) = if block["type"] == "image" {
                        ("chart.png", PNG.to_vec())
                    } else {
                        ("notes.txt", b"budget: 42\n".to_vec())
                    };
                    let expect = crate::support::Expect {
                        name: name.into(),
                        uri: format!("attachment:///{sid}/{name}"),
                        bytes,
                        host: sessionstore::config::host_name(),
                    };
                    let (_, path) = check_attachment(&block, &expect);
                    assert!(path.starts_with(&new_root), "{label}: {path:?}");
                    paths += 1;
                }
                SessionUpdate::ToolCall(call) if call.tool_call_id.to_string() == "read" => {
                    assert_eq!(call.status, ToolCallStatus::Completed, "{label}");
                    assert_eq!(call.title, "Read notes (2 lines)");
                    assert_eq!(
                        call.raw_input,
                        Some(serde_json::json!({"file": "notes.txt"}))
                    );
                    assert_eq!(
                        serde_json::to_value(&call.content).unwrap(),
                        serde_json::json!([{"type": "content",
                            "content": {"type": "text", "text": "budget: 42"}}])
                    );
                }
                SessionUpdate::AgentMessageChunk(chunk) => {
                    assert_eq!(chunk.content, ContentBlock::from("The budget is 42."));
                }
                SessionUpdate::AgentThoughtChunk(chunk) => {
                    assert_eq!(
                        chunk.content,
                        ContentBlock::from("Look at the chart and the notes.")
                    );
                }
                _ => {}
            }
        }
        assert_eq!(
            paths, 3,
            "{label}: every reference replayed from a live read"
        );
    }
}
