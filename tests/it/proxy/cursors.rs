//! Issue 47, items 4 and 8: session cursors, which only ACP schema 1.20 has, as raw
//! JSON-RPC in 1.20's shapes (`clientCapabilities.session.cursors`, the
//! `cursor_update` session update, `session/fork`'s `cursorId`) through
//! `sessionstore proxy -- sessionstore-test-agent` and `sessionstore acp`.

use serde_json::{Value, json};

use super::Setup;
use crate::acp::Wire;

/// `initialize` as a 1.20 client that announces cursors sends it (or, without
/// `cursors`, as any client does).
fn initialize(cursors: bool) -> Value {
    let mut caps = json!({"fs": {"readTextFile": false, "writeTextFile": false},
        "terminal": false});
    if cursors {
        caps["session"] = json!({"cursors": {}});
    }
    json!({"protocolVersion": 1, "clientCapabilities": caps})
}

/// The `update`s of the `session/update` notifications among `lines`.
fn updates(lines: &[Value]) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["method"] == "session/update")
        .map(|l| l["params"]["update"].clone())
        .collect()
}

fn kind(update: &Value) -> &str {
    update["sessionUpdate"].as_str().unwrap_or_default()
}

fn cursors_in(updates: &[Value]) -> Vec<Value> {
    updates
        .iter()
        .filter(|u| kind(u) == "cursor_update")
        .cloned()
        .collect()
}

/// The cursor 1.20 has the store announce `after` an entry, with `{"fork":{}}`.
fn cursor(anchor_type: &str, key: &str, id: &str) -> Value {
    json!({"sessionUpdate": "cursor_update", "cursorId": format!("{anchor_type}:{id}"),
        "capabilities": {"fork": {}},
        "anchor": {"type": anchor_type, key: id, "position": "after"}})
}

fn session_id(answer: &Value) -> String {
    answer["result"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("a session id: {answer}"))
        .to_owned()
}

fn error_code(answer: &Value) -> i64 {
    answer["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("an error: {answer}"))
}

/// Live: one cursor right after the first update of each thought, message and tool
/// call; a message the agent sent without a `messageId` relayed with the one the store
/// keeps it under; the agent's own `cursor_update` not relayed, and the capability not
/// passed on to it. A client without cursors sees the agent's updates exactly as the
/// agent sent them. After a restart a load replays the same cursors (and one for the
/// user message); a fork at a cursor ends at its entry; an unknown cursor is invalid
/// params.
#[test]
fn cursors_anchor_every_entry_live_and_on_replay_and_fork_there() {
    let setup = Setup::new();
    let cwd = setup.cwd.to_string_lossy().into_owned();
    let mut proxy = setup.proxy(&[]);
    let mut wire = Wire::over(&mut proxy.child);
    let (_, init) = wire.call(1, "initialize", initialize(true));
    assert!(init.get("result").is_some(), "{init}");
    let given = setup.report.requests("initialize");
    assert_eq!(given.len(), 1);
    assert_eq!(
        given[0]["clientCapabilities"].get("session"),
        None,
        "the capability stays with the store: {}",
        given[0]
    );
    let (_, new) = wire.call(2, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let session = session_id(&new);
    let (lines, answer) = wire.call(
        3,
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "cursors please"}]}),
    );
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let live = updates(&lines);
    let kinds: Vec<&str> = live.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "agent_thought_chunk",
            "cursor_update",
            "agent_message_chunk",
            "cursor_update",
            "agent_message_chunk",
            "tool_call",
            "cursor_update",
            "agent_message_chunk",
            "cursor_update",
            "agent_message_chunk",
            "tool_call_update",
            "agent_message_chunk",
            "cursor_update",
        ],
        "{live:#?}"
    );
    let thought = live[0]["messageId"]
        .as_str()
        .expect("a thought id")
        .to_owned();
    let hello = live[2]["messageId"]
        .as_str()
        .expect("a message id")
        .to_owned();
    assert_ne!(thought, hello);
    assert_eq!(live[4]["messageId"], hello.as_str(), "one message, one id");
    assert_eq!(
        live[7]["messageId"], "agent-msg-2",
        "the agent's own id kept"
    );
    assert_eq!(live[9]["messageId"], "agent-msg-2");
    assert_eq!(live[11]["messageId"], "agent-msg-3");
    let expected = vec![
        cursor("agent_thought", "messageId", &thought),
        cursor("agent_message", "messageId", &hello),
        cursor("tool_call", "toolCallId", "call-cursors"),
        cursor("agent_message", "messageId", "agent-msg-2"),
        cursor("agent_message", "messageId", "agent-msg-3"),
    ];
    assert_eq!(cursors_in(&live), expected);
    let text = lines.iter().map(Value::to_string).collect::<String>();
    assert!(
        !text.contains("agent-own"),
        "the agent's cursor was relayed"
    );

    // A client that did not announce cursors: the agent's updates as the agent sent
    // them (no messageId added, no cursor), on the same store.
    let mut plain_proxy = setup.proxy(&[]);
    let mut plain = Wire::over(&mut plain_proxy.child);
    plain.call(1, "initialize", initialize(false));
    let (_, new) = plain.call(2, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    let other = session_id(&new);
    let (plain_lines, _) = plain.call(
        3,
        "session/prompt",
        json!({"sessionId": other, "prompt": [{"type": "text", "text": "cursors please"}]}),
    );
    let mut without: Vec<Value> = live
        .iter()
        .filter(|u| kind(u) != "cursor_update")
        .cloned()
        .collect();
    for u in &mut without[..3] {
        if kind(u).ends_with("_chunk") {
            u.as_object_mut().unwrap().remove("messageId");
        }
    }
    assert_eq!(updates(&plain_lines), without);
    drop(plain);
    drop(plain_proxy);

    // Forks at a cursor end at its entry: the first message (with the thought before
    // it), the tool call (in its final state), the last message.
    let load = |wire: &mut Wire, id: u64, session: &str| {
        let (lines, answer) = wire.call(
            id,
            "session/load",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
        );
        assert!(answer.get("result").is_some(), "{answer}");
        updates(&lines)
    };
    let fork = |wire: &mut Wire, id: u64, cursor: Value| {
        wire.call(
            id,
            "session/fork",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": [], "cursorId": cursor}),
        )
        .1
    };
    let at_hello = session_id(&fork(&mut wire, 4, json!(format!("agent_message:{hello}"))));
    let replay = load(&mut wire, 5, &at_hello);
    let shown: Vec<&str> = replay
        .iter()
        .filter(|u| kind(u) != "cursor_update")
        .map(kind)
        .collect();
    assert_eq!(
        shown,
        [
            "user_message_chunk",
            "agent_thought_chunk",
            "agent_message_chunk"
        ],
        "{replay:#?}"
    );
    assert_eq!(
        replay.last().unwrap(),
        &cursor("agent_message", "messageId", &hello)
    );
    let message = replay
        .iter()
        .find(|u| kind(u) == "agent_message_chunk")
        .unwrap();
    assert_eq!(message["content"]["text"], "Hello there.");
    assert_eq!(message["messageId"], hello.as_str());
    let at_call = session_id(&fork(&mut wire, 6, json!("tool_call:call-cursors")));
    let replay = load(&mut wire, 7, &at_call);
    let last_entry = replay
        .iter()
        .rev()
        .find(|u| kind(u) != "cursor_update")
        .unwrap();
    assert_eq!(kind(last_entry), "tool_call");
    assert_eq!(last_entry["status"], "completed", "{last_entry}");

    // Unknown cursors, the agent's own among them, and a cursor that is not a string.
    for (id, bad) in [
        (8, json!("agent_message:no-such-message")),
        (9, json!("agent-own")),
        (10, json!("plan:p")),
        (11, json!(7)),
        (12, json!(format!("user_message:{hello}"))),
        (13, json!(format!("agent_thought:{hello}"))),
    ] {
        let answer = fork(&mut wire, id, bad.clone());
        assert_eq!(error_code(&answer), -32602, "{bad}: {answer}");
    }
    let (_, gone) = wire.call(
        14,
        "session/fork",
        json!({"sessionId": sessionstore::SessionId::new().to_string(), "cwd": cwd,
            "mcpServers": [], "cursorId": format!("agent_message:{hello}")}),
    );
    assert_eq!(error_code(&gone), -32002, "{gone}");
    drop(wire);
    drop(proxy);

    // Another proxy (a restart): a load replays the same cursors, and one for the user
    // message, whose replayed chunks carry its id; cursors from the first run still fork.
    let mut proxy = setup.proxy(&[]);
    let mut wire = Wire::over(&mut proxy.child);
    wire.call(1, "initialize", initialize(true));
    let replay = load(&mut wire, 2, &session);
    let user = replay[0]["messageId"]
        .as_str()
        .expect("a replayed user message carries its id")
        .to_owned();
    assert_eq!(kind(&replay[0]), "user_message_chunk");
    let mut again = vec![cursor("user_message", "messageId", &user)];
    again.extend(expected.iter().cloned());
    assert_eq!(cursors_in(&replay), again, "{replay:#?}");
    let at_user = session_id(&fork(&mut wire, 3, json!(format!("user_message:{user}"))));
    let replay = load(&mut wire, 4, &at_user);
    let kinds: Vec<&str> = replay.iter().map(kind).collect();
    assert_eq!(
        kinds,
        ["user_message_chunk", "cursor_update"],
        "{replay:#?}"
    );
    let at_last = session_id(&fork(&mut wire, 5, json!("agent_message:agent-msg-3")));
    let replay = load(&mut wire, 6, &at_last);
    assert_eq!(
        cursors_in(&replay).len(),
        6,
        "the whole history, up to the last message: {replay:#?}"
    );
    // A client without cursors loads the same session as before: no cursor.
    drop(wire);
    drop(proxy);
    let mut proxy = setup.proxy(&[]);
    let mut wire = Wire::over(&mut proxy.child);
    wire.call(1, "initialize", initialize(false));
    let replay = load(&mut wire, 2, &session);
    assert!(cursors_in(&replay).is_empty(), "{replay:#?}");
    // The user message, the thought, the two messages coalesced, the call, and the
    // two messages of the agent's ids.
    assert_eq!(replay.len(), 6, "{replay:#?}");
}

/// `sessionstore acp` (nothing behind) serves the same: a replayed prompt's cursor, a
/// fork there, an unknown cursor refused.
#[test]
fn the_store_alone_serves_cursors_too() {
    let t = crate::support::TestStore::empty();
    let dir = t.dir.path().to_owned();
    let mut child = crate::support::Bin::new(&dir)
        .current_dir(&dir)
        .arg("acp")
        .arg("--db")
        .arg(t.db_path())
        .arg("--attachments-root")
        .arg(t.configured())
        .arg("--cwd")
        .arg(&dir)
        .spawn();
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut wire = Wire::over(&mut child);
    let _child = Killed(child);
    wire.call(1, "initialize", initialize(true));
    let (_, new) = wire.call(2, "session/new", json!({"cwd": dir, "mcpServers": []}));
    let session = session_id(&new);
    for (id, text) in [(3, "first"), (4, "second")] {
        let (_, answer) = wire.call(
            id,
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        );
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    }
    let (lines, _) = wire.call(
        5,
        "session/load",
        json!({"sessionId": session, "cwd": dir, "mcpServers": []}),
    );
    let replay = updates(&lines);
    let cursors = cursors_in(&replay);
    assert_eq!(cursors.len(), 2, "{replay:#?}");
    let first = replay[0]["messageId"].as_str().unwrap();
    assert_eq!(cursors[0], cursor("user_message", "messageId", first));
    // A resume replays only from a point it is asked for, with the same cursors.
    let (lines, _) = wire.call(
        50,
        "session/resume",
        json!({"sessionId": session, "cwd": dir, "mcpServers": [],
            "_meta": {"replayFrom": {"type": "start"}}}),
    );
    assert_eq!(cursors_in(&updates(&lines)), cursors);
    let (_, forked) = wire.call(
        6,
        "session/fork",
        json!({"sessionId": session, "cwd": dir, "mcpServers": [],
            "cursorId": cursors[0]["cursorId"]}),
    );
    let fork = session_id(&forked);
    let (lines, _) = wire.call(
        7,
        "session/load",
        json!({"sessionId": fork, "cwd": dir, "mcpServers": []}),
    );
    let replay = updates(&lines);
    assert_eq!(replay.len(), 2, "{replay:#?}");
    assert_eq!(replay[0]["content"]["text"], "first");
    let (_, unknown) = wire.call(
        8,
        "session/fork",
        json!({"sessionId": session, "cwd": dir, "mcpServers": [],
            "cursorId": "user_message:not-an-id"}),
    );
    assert_eq!(error_code(&unknown), -32602, "{unknown}");
}
