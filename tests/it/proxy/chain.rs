//! Issue 47 item 6: `sessionstore proxy` with no agent is a component of a conductor's
//! proxy chain. First as raw JSON-RPC, the test playing the conductor (it sends
//! `proxy/initialize`, and answers the proxy's `proxy/successor` requests by hand, as
//! the successor would); then in a real chain, `agent-client-protocol-conductor` 5.0
//! from crates.io running `sessionstore proxy` in front of the test agent, through the
//! proxy's own story: a prompt with attachments, a new chain on the same store, a load
//! that replays with live paths, a fork at a cursor, an archive.

use sessionstore::store::{Access, Verify};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use agent_client_protocol::UntypedMessage;
use agent_client_protocol::v1::schema::{
    LoadSessionRequest, NewSessionRequest, PromptRequest, SessionId as AcpSessionId, StopReason,
};
use serde_json::{Value, json};
use sessionstore::SessionId;
use sessionstore::model::ItemBody;

use super::{
    AGENT, AGENT_NAME, ProxyProcess, Seen, Setup, attachments, call, client, data_block,
    image_block, initialize, notes_block, prompt_text, store_id, text_block, wait_ended,
};
use crate::support::Whole;
use crate::support::{Expect, check_attachment, context_of};

/// Raw JSON-RPC over a process's pipes (the `acp` tests' `Wire`), with what the
/// component's tests ask of it: messages sent as values, wrapped requests, answers.
struct Wire(crate::acp::Wire);

impl Wire {
    fn over(child: &mut Child) -> Wire {
        Wire(crate::acp::Wire::over(child))
    }

    /// Sends one message, `jsonrpc` added.
    fn send(&mut self, mut message: Value) {
        message["jsonrpc"] = json!("2.0");
        self.0.send(&message.to_string());
    }

    /// The next line, which must be one JSON-RPC message.
    fn next(&self) -> Value {
        self.0.next()
    }

    /// The next message, which must be a `proxy/successor` request wrapping `method`:
    /// its id and the wrapped params.
    fn wrapped_request(&self, method: &str) -> (Value, Value) {
        let m = self.next();
        assert_eq!(m["method"], "proxy/successor", "{m}");
        assert_eq!(m["params"]["method"], method, "{m}");
        assert!(m["id"].is_u64(), "a request: {m}");
        (m["id"].clone(), m["params"]["params"].clone())
    }

    /// The next message, which must be the answer to request `id`.
    fn answer(&self, id: u64) -> Value {
        let m = self.next();
        assert_eq!(m["id"], id, "the answer to {id}: {m}");
        assert!(m.get("method").is_none(), "{m}");
        m
    }
}

/// `sessionstore proxy` with no agent (a chain's component) on the store of `s`.
fn component(s: &Setup) -> ProxyProcess {
    let dir = s.t.dir.path();
    let stderr = dir.join(format!("component-stderr-{}.log", SessionId::new()));
    let child = crate::support::Bin::new(dir)
        .current_dir(dir)
        .env("RUST_LOG", "sessionstore=debug")
        .arg("proxy")
        .arg("--db")
        .arg(s.t.db_path())
        .arg("--attachments-root")
        .arg(s.root())
        .stderr(File::create(&stderr).expect("a log file"))
        .spawn();
    ProxyProcess { child, stderr }
}

/// The component's side of a chain, by hand: `proxy/initialize` is answered only
/// after `initialize` went to the successor through `proxy/successor` (its params
/// unchanged), with the successor's answer plus what the store serves; what the
/// proxy sends its agent goes wrapped, and the successor's update, its `fs` request
/// and its answer come back wrapped and are taken as a child agent's are: the update
/// relayed under the store's id and recorded, the request relayed to the client and
/// its answer returned as the envelope's result, the prompt's answer the client's. A
/// cancellation of a relayed request names the envelope's id; a cancelled turn
/// answers the successor's waiting permission request `cancelled` and sends it
/// `session/cancel` in the envelope.
#[test]
fn the_component_speaks_to_its_successor_through_the_envelope() {
    let s = Setup::new();
    let mut proxy = component(&s);
    let mut wire = Wire::over(&mut proxy.child);

    let init = json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true}},
        "_meta": {"k": "v"}});
    wire.send(json!({"id": 1, "method": "proxy/initialize", "params": init}));
    let (envelope, params) = wire.wrapped_request("initialize");
    assert_eq!(params, init, "initialize goes on unchanged");
    wire.send(json!({"id": envelope, "result": {"protocolVersion": 1,
        "agentCapabilities": {"promptCapabilities": {"embeddedContext": false}},
        "agentInfo": {"name": "hand-agent", "version": "7"}, "authMethods": []}}));
    let answer = wire.answer(1);
    let result = &answer["result"];
    assert_eq!(result["protocolVersion"], 1, "{answer}");
    assert_eq!(result["agentInfo"]["name"], "hand-agent");
    let caps = &result["agentCapabilities"];
    assert_eq!(caps["loadSession"], true);
    assert_eq!(caps["promptCapabilities"]["embeddedContext"], true);
    for served in ["list", "resume", "close", "delete", "fork", "archive"] {
        assert!(caps["sessionCapabilities"].get(served).is_some(), "{caps}");
    }

    let cwd = s.cwd.to_str().expect("UTF-8").to_owned();
    wire.send(json!({"id": 2, "method": "session/new", "params": {"cwd": cwd, "mcpServers": []}}));
    let (envelope, params) = wire.wrapped_request("session/new");
    assert_eq!(params["cwd"], cwd);
    wire.send(json!({"id": envelope, "result": {"sessionId": "agent-1"}}));
    let made = wire.answer(2);
    let session: SessionId = made["result"]["sessionId"]
        .as_str()
        .expect("a session id")
        .parse()
        .expect("the store's id");

    // A prompt with a text file: the successor gets it with the file's path.
    wire.send(json!({"id": 3, "method": "session/prompt", "params": {
        "sessionId": session.to_string(),
        "prompt": [{"type": "text", "text": "read this"},
            serde_json::to_value(notes_block()).expect("JSON")]}}));
    let (prompt, params) = wire.wrapped_request("session/prompt");
    assert_eq!(params["sessionId"], "agent-1");
    let blocks = params["prompt"].as_array().expect("blocks");
    let with_path = blocks
        .iter()
        .find(|b| context_of(b).is_some())
        .expect("the file is given with its path context");
    // The successor takes no embedded context: the file comes as a link to its path.
    assert_eq!(with_path["type"], "resource_link", "{with_path}");
    let path = crate::support::context_line(context_of(with_path).expect("a context")).path;
    assert!(Path::new(&path).starts_with(s.root()), "{path:?}");
    assert_eq!(
        std::fs::read_to_string(&path).expect("a live path"),
        super::NOTES
    );

    // The successor's update, wrapped: relayed unwrapped under the store's id.
    wire.send(
        json!({"method": "proxy/successor", "params": {"method": "session/update",
        "params": {"sessionId": "agent-1", "update": {"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "It says 42."}}}}}),
    );
    let update = wire.next();
    assert_eq!(update["method"], "session/update", "{update}");
    assert!(update.get("id").is_none());
    assert_eq!(update["params"]["sessionId"], session.to_string());
    assert_eq!(update["params"]["update"]["content"]["text"], "It says 42.");

    // The successor's request, wrapped: to the client, and its answer back as the
    // envelope's result under the conductor's id.
    wire.send(
        json!({"id": "conductor-9", "method": "proxy/successor", "params": {
        "method": "fs/read_text_file",
        "params": {"sessionId": "agent-1", "path": "/tmp/x.txt"}, "_meta": {"hop": 1}}}),
    );
    let asked = wire.next();
    assert_eq!(asked["method"], "fs/read_text_file", "{asked}");
    assert_eq!(asked["params"]["sessionId"], session.to_string());
    assert_eq!(asked["params"]["path"], "/tmp/x.txt");
    assert!(
        asked["params"].get("_meta").is_none(),
        "the envelope's _meta is hop-local: {asked}"
    );
    wire.send(json!({"id": asked["id"], "result": {"content": "x"}}));
    let returned = wire.next();
    assert_eq!(
        returned,
        json!({"jsonrpc": "2.0", "id": "conductor-9", "result": {"content": "x"}})
    );

    // The prompt's answer, as the envelope's result.
    wire.send(json!({"id": prompt, "result": {"stopReason": "end_turn"}}));
    let answered = wire.answer(3);
    assert_eq!(answered["result"]["stopReason"], "end_turn", "{answered}");

    // A request the proxy relays, cancelled by the client: the cancellation names the
    // envelope's id; the successor's error comes back as the request's.
    wire.send(json!({"id": 4, "method": "_hand/slow", "params": {"n": 1}}));
    let (slow, params) = wire.wrapped_request("_hand/slow");
    assert_eq!(params, json!({"n": 1}));
    wire.send(json!({"method": "$/cancel_request", "params": {"id": 4}}));
    let cancel = wire.next();
    assert_eq!(
        cancel,
        json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"id": slow}})
    );
    wire.send(json!({"id": slow, "error": {"code": -32800, "message": "cancelled"}}));
    let cancelled = wire.answer(4);
    assert_eq!(cancelled["error"]["code"], -32800, "{cancelled}");

    // A cancelled turn: the successor's permission request, still waiting on the
    // client, is answered `cancelled` under the conductor's id, then the cancellation
    // goes to the successor in the envelope; the turn ends as the successor says.
    let session_id = session.to_string();
    wire.send(json!({"id": 6, "method": "session/prompt", "params": {
        "sessionId": session_id, "prompt": [{"type": "text", "text": "go on"}]}}));
    let (prompt, _) = wire.wrapped_request("session/prompt");
    wire.send(json!({"id": 11, "method": "proxy/successor", "params": {
        "method": "session/request_permission", "params": {"sessionId": "agent-1",
            "toolCall": {"toolCallId": "call-1"},
            "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}]}}}));
    let asked = wire.next();
    assert_eq!(asked["method"], "session/request_permission", "{asked}");
    assert_eq!(asked["params"]["sessionId"], session_id);
    wire.send(json!({"method": "session/cancel", "params": {"sessionId": session_id}}));
    assert_eq!(
        wire.next(),
        json!({"jsonrpc": "2.0", "id": 11, "result": {"outcome": {"outcome": "cancelled"}}})
    );
    assert_eq!(
        wire.next(),
        json!({"jsonrpc": "2.0", "method": "proxy/successor",
            "params": {"method": "session/cancel", "params": {"sessionId": "agent-1"}}})
    );
    wire.send(json!({"id": prompt, "result": {"stopReason": "cancelled"}}));
    let ended = wire.answer(6);
    assert_eq!(ended["result"]["stopReason"], "cancelled", "{ended}");
    // The client's late answer goes nowhere.
    wire.send(
        json!({"id": asked["id"], "result": {"outcome": {"outcome": "selected",
        "optionId": "allow"}}}),
    );

    // A wrapped request with no method is refused; the connection stays up.
    wire.send(json!({"id": 5, "method": "proxy/successor", "params": {"params": {}}}));
    let refused = wire.answer(5);
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    drop(wire);
    assert!(proxy.wait().success());

    // The turn is recorded as a child agent's: the prompt, and the agent's message.
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let store = sessionstore::Store::open_as(s.t.config.clone(), Access::ReadOnly)
            .await
            .expect("the store");
        let stored = store.session(session).await.expect("the session");
        assert_eq!(
            stored.agent.expect("bound to the successor").agent,
            "hand-agent"
        );
        let items = store.all_items(session).await.expect("the items");
        assert!(
            items
                .iter()
                .any(|i| matches!(&i.body, ItemBody::AgentMessage(t)
                if serde_json::to_string(&t.content).unwrap_or_default().contains("It says 42."))),
            "{items:?}"
        );
    });
}

/// Outside a chain the proxy says what it needs: a plain `initialize` with no agent
/// gets one line of error naming `-- AGENT` and a conductor (and the connection stays
/// up), `proxy/successor` before `proxy/initialize` is refused, and `sessionstore acp`
/// does not take `proxy/initialize`.
#[test]
fn with_no_agent_a_plain_initialize_needs_an_agent_or_a_conductor() {
    let s = Setup::new();
    let mut proxy = component(&s);
    let mut wire = Wire::over(&mut proxy.child);
    wire.send(json!({"id": 1, "method": "initialize", "params": {"protocolVersion": 1}}));
    let refused = wire.answer(1);
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let message = refused["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("-- AGENT") && message.contains("conductor"),
        "{message}"
    );
    assert!(!message.contains('\n'));
    wire.send(
        json!({"id": 2, "method": "proxy/successor", "params": {"method": "session/update",
        "params": {}}}),
    );
    let early = wire.answer(2);
    assert_eq!(early["error"]["code"], -32600, "{early}");
    assert!(
        early["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("proxy/initialize")),
        "{early}"
    );
    drop(wire);
    assert!(proxy.wait().success());

    let dir = s.t.dir.path();
    let mut acp = crate::support::Bin::new(dir)
        .current_dir(dir)
        .arg("acp")
        .arg("--db")
        .arg(s.t.db_path())
        .arg("--attachments-root")
        .arg(s.root())
        .stderr(Stdio::null())
        .spawn();
    let mut wire = Wire::over(&mut acp);
    wire.send(json!({"id": 1, "method": "proxy/initialize", "params": {"protocolVersion": 1}}));
    let not_here = wire.answer(1);
    assert_eq!(not_here["error"]["code"], -32601, "{not_here}");
    drop(wire);
    let _ = acp.kill();
    let _ = acp.wait();
}

/// The conductor these tests run: `$SESSIONSTORE_CONDUCTOR`, else the one `cargo
/// install --locked agent-client-protocol-conductor@5.0.0 --root target/conductor`
/// puts in this checkout. Not a dev-dependency: its `serde_json/preserve_order` would
/// change every test build of the store's own JSON.
fn conductor() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SESSIONSTORE_CONDUCTOR").filter(|p| !p.is_empty()) {
        return Some(path.into());
    }
    let installed = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/conductor/bin/agent-client-protocol-conductor");
    installed.exists().then_some(installed)
}

/// A word of a conductor's component command line, quoted for its shell-word split.
fn word(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// `agent-client-protocol-conductor agent "sessionstore proxy …" "test-agent …"` on the
/// store of `s`, the client's end its standard input and output.
fn chain(s: &Setup, conductor: &Path) -> ProxyProcess {
    let dir = s.t.dir.path();
    let stderr = dir.join(format!("conductor-stderr-{}.log", SessionId::new()));
    let store = format!(
        "{} proxy --db {} --attachments-root {}",
        word(Path::new(env!("CARGO_BIN_EXE_sessionstore"))),
        word(&s.t.db_path()),
        word(s.root()),
    );
    let agent = format!("{} --report {}", word(Path::new(AGENT)), word(&s.report.0));
    let mut command = Command::new(conductor);
    for var in [
        "SESSIONSTORE_DB",
        "SESSIONSTORE_ATTACHMENTS_ROOT",
        "SESSIONSTORE_LEGACY_ROOTS",
        "SESSIONSTORE_KEY_FILE",
        "SESSIONSTORE_REDACT",
    ] {
        command.env_remove(var);
    }
    let child = command
        .current_dir(dir)
        .env("HOME", dir)
        .env("XDG_DATA_HOME", dir.join(".local/share"))
        .args(["agent", &store, &agent])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(File::create(&stderr).expect("a log file"))
        .spawn()
        .expect("the conductor starts");
    ProxyProcess { child, stderr }
}

/// Each attachment block the agent got, checked against `expected` in order: its
/// bytes, and a path context whose path, under `folder`, reads them.
fn given_with_paths(blocks: &[Value], expected: &[Expect], folder: &Path) {
    let given: Vec<&Value> = blocks.iter().filter(|b| context_of(b).is_some()).collect();
    assert_eq!(given.len(), expected.len(), "{blocks:#?}");
    for (block, expect) in given.into_iter().zip(expected) {
        let (_, path) = check_attachment(block, expect);
        assert!(path.starts_with(folder), "{path:?} is not under {folder:?}");
    }
}

/// The proxy's story in a real chain (issue 47 item 6): `agent-client-protocol-conductor`
/// 5.0 runs `sessionstore proxy` (no agent: it is initialized with `proxy/initialize`)
/// in front of the test agent. The client sees the store's capabilities; a prompt with
/// an image, a text file and a binary file reaches the agent with a live path for
/// each, and the agent's permission request reaches the client and its answer the
/// agent. The conductor exits with its client; a new chain on the same store loads
/// the session (the replay's attachments read under the root), prompts it (the fresh
/// agent is told the conversation with the paths), forks it at the cursor after its
/// first message (the client announces session cursors) and
/// archives the fork (listed by `only`, not by default). The store verifies.
#[tokio::test]
async fn a_conductor_chain_runs_the_proxys_story() {
    let Some(conductor) = conductor() else {
        // Straight to standard error, past the harness's capture, so that a run
        // shows it.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "a_conductor_chain_runs_the_proxys_story skipped: no \
             agent-client-protocol-conductor; install it with `cargo install --locked \
             agent-client-protocol-conductor@5.0.0 --root target/conductor`, or name one \
             in SESSIONSTORE_CONDUCTOR"
        );
        return;
    };
    let s = Setup::new();
    let prompt = vec![
        text_block("Look at the chart,"),
        image_block(),
        text_block("the notes and the data:"),
        notes_block(),
        data_block(),
    ];

    let seen = Seen::default();
    let mut first = chain(&s, &conductor);
    let (id, init, answer) = client(&mut first, &seen, {
        let (cwd, prompt) = (s.cwd.clone(), prompt.clone());
        async move |cx| {
            let init = call(&cx, initialize()).await?;
            let id = call(&cx, NewSessionRequest::new(&cwd)).await?.session_id;
            let answer = call(&cx, PromptRequest::new(id.clone(), prompt)).await?;
            Ok((id, init, answer))
        }
    })
    .await;
    assert!(
        first.wait().success(),
        "the conductor exits with its client"
    );
    for pid in s.report.pids() {
        wait_ended(pid, "the first chain's agent");
    }
    assert_eq!(answer.stop_reason, StopReason::EndTurn);
    let caps = serde_json::to_value(&init.agent_capabilities).expect("JSON");
    assert_eq!(caps["loadSession"], true, "{caps}");
    for served in ["list", "resume", "close", "delete", "fork", "archive"] {
        assert!(caps["sessionCapabilities"].get(served).is_some(), "{caps}");
    }
    let session = store_id(&id);
    let prompts = s.report.prompts();
    assert_eq!(prompts.len(), 1);
    given_with_paths(
        &prompts[0],
        &attachments(session),
        &s.root().join(session.to_string()),
    );
    assert_eq!(
        seen.permissions().len(),
        1,
        "the agent's permission request"
    );
    assert_eq!(seen.permissions()[0].session_id, id);
    assert_eq!(
        s.report.permission_answers()[0]["result"]["outcome"],
        json!({"outcome": "selected", "optionId": "allow"})
    );
    for m in seen.raw() {
        assert_eq!(m["params"]["sessionId"], id.0.as_ref(), "{m}");
    }
    assert!(
        seen.raw_updates()
            .iter()
            .any(|u| u["sessionUpdate"] == "agent_message_chunk")
    );

    // A new chain on the same store, its client announcing session cursors (ACP 1.20,
    // as JSON): load, prompt, fork at the cursor after the first user message, archive.
    let seen = Seen::default();
    let mut second = chain(&s, &conductor);
    let run = client(&mut second, &seen, {
        let (cwd, seen, id) = (s.cwd.clone(), seen.clone(), id.clone());
        async move |cx| {
            let init = json!({
                "protocolVersion": 1,
                "clientCapabilities": {"session": {"cursors": {}}},
            });
            call(&cx, UntypedMessage::new("initialize", init)?).await?;
            call(&cx, LoadSessionRequest::new(id.clone(), &cwd)).await?;
            let replay = seen.raw();
            let again = prompt_text(&cx, &id, "What is new since then?").await?;
            let cursor = replay
                .iter()
                .map(|m| &m["params"]["update"])
                .find(|u| {
                    u["sessionUpdate"] == "cursor_update" && u["anchor"]["type"] == "user_message"
                })
                .expect("a cursor after the replayed user message")["cursorId"]
                .clone();
            let fork = json!({
                "sessionId": id.0.as_ref(), "cwd": cwd, "mcpServers": [], "cursorId": cursor,
            });
            let at = call(&cx, UntypedMessage::new("session/fork", fork)?).await?;
            let at = AcpSessionId::new(at["sessionId"].as_str().expect("the fork's id"));
            let in_at = prompt_text(&cx, &at, "Only the first question?").await?;
            let archive = json!({"sessionId": at.0.as_ref()});
            call(&cx, UntypedMessage::new("session/archive", archive)?).await?;
            let listed = call(
                &cx,
                UntypedMessage::new("session/list", json!({"cwd": cwd}))?,
            )
            .await?;
            let only = call(
                &cx,
                UntypedMessage::new("session/list", json!({"cwd": cwd, "archived": "only"}))?,
            )
            .await?;
            Ok((
                replay,
                [again.stop_reason, in_at.stop_reason],
                at,
                listed,
                only,
            ))
        }
    })
    .await;
    assert!(second.wait().success());
    for pid in s.report.pids() {
        wait_ended(pid, "an agent");
    }
    let (replay, stops, at, listed, only) = run;
    // Each chain's agent was initialized once, through the proxy's envelope.
    assert_eq!(s.report.requests("initialize").len(), 2);
    assert_eq!(stops, [StopReason::EndTurn; 2]);

    // The replay: the user's message with each attachment read under the root now.
    let user: Vec<Value> = replay
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "user_message_chunk")
        .map(|m| m["params"]["update"]["content"].clone())
        .collect();
    let files: Vec<&Value> = user.iter().filter(|b| b["type"] != "text").collect();
    assert_eq!(files.len(), 3, "{user:#?}");
    for (block, expect) in files.into_iter().zip(attachments(session)) {
        let (_, path) = check_attachment(block, &expect);
        assert!(
            path.starts_with(s.root().join(session.to_string())),
            "{path:?}"
        );
        assert!(path.exists(), "a live path: {path:?}");
    }

    // The second chain's agent knew nothing: it was told the conversation, with the
    // paths, before the new prompt; the fork's agent side only the first message.
    let prompts = s.report.prompts();
    assert_eq!(prompts.len(), 3, "{prompts:#?}");
    assert_ne!(s.report.pids()[0], s.report.pids()[1], "a new agent");
    given_with_paths(
        &prompts[1],
        &attachments(session),
        &s.root().join(session.to_string()),
    );
    let fork = store_id(&at);
    given_with_paths(
        &prompts[2],
        &attachments(fork),
        &s.root().join(fork.to_string()),
    );
    let told: String = prompts[2]
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect();
    assert!(told.contains("Look at the chart,"), "{told}");
    assert!(!told.contains("What is new since then?"), "{told}");

    // Archived: out of the default list, in `only`.
    let ids = |list: &Value| -> Vec<String> {
        list["sessions"]
            .as_array()
            .expect("sessions")
            .iter()
            .map(|r| r["sessionId"].as_str().expect("an id").to_owned())
            .collect()
    };
    assert_eq!(ids(&listed), [id.0.to_string()], "{listed}");
    assert_eq!(ids(&only), [fork.to_string()], "{only}");

    let store = sessionstore::Store::open_as(s.t.config.clone(), Access::ReadOnly)
        .await
        .expect("the store");
    let stored = store.session(session).await.expect("the session");
    assert_eq!(stored.agent.expect("an agent binding").agent, AGENT_NAME);
    let report = store
        .verify(Verify::Check)
        .await
        .expect("verify runs")
        .after;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
