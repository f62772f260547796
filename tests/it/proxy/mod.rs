//! `sessionstore proxy -- sessionstore-test-agent` driven by the SDK's client side: the
//! built binary started as an editor starts its agent, the test agent behind it (see
//! `tests/agent/main.rs`), and what both ends received checked against each other, the
//! store and the schema. The harness here starts the proxy on a test's store and roots,
//! runs a client against it that keeps every message it receives (raw, and as the SDK
//! parsed it), reads the agent's report, and checks that what either side received
//! parses as the schema's types; the tests are in the files beside it. Every process a
//! test starts is killed when it ends, and every wait has a bound, so a hang fails
//! rather than sticks.

mod capabilities;
mod chain;
mod cursors;
mod replay;
mod scenario;
mod schema;
mod turns;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_client_protocol::v1::schema::{
    AgentNotification, AgentRequest, BlobResourceContents, ClientNotification, ClientRequest,
    ContentBlock, EmbeddedResource, EmbeddedResourceResource, ImageContent, InitializeRequest,
    NewSessionRequest, PromptRequest, PromptResponse, RequestPermissionOutcome,
    RequestPermissionRequest, RequestPermissionResponse, SelectedPermissionOutcome,
    SessionId as AcpSessionId, SessionNotification, TextContent, TextResourceContents,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{
    Agent, ByteStreams, Client, Dispatch, Handled, JsonRpcMessage, JsonRpcRequest, UntypedMessage,
    V1,
};
use base64::Engine;
use blocking::Unblock;
use serde_json::Value;
use sessionstore::SessionId;

use crate::support::{Expect, PNG, TestStore};

/// How long one client conversation may take, and one wait for a process or a file.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The agent the proxy starts in these tests.
const AGENT: &str = env!("CARGO_BIN_EXE_sessionstore-test-agent");
/// What the store keeps as the agent's name beside a session: its file name.
const AGENT_NAME: &str = "sessionstore-test-agent";

/// One test's place: a store (its database and configured root), the client's project
/// folder (the `cwd` it gives for its sessions, which is not the proxy's own working
/// directory), and the agent's report, shared by every agent started in the test.
pub struct Setup {
    pub t: TestStore,
    pub cwd: PathBuf,
    pub report: Report,
}

impl Setup {
    pub fn new() -> Setup {
        let t = TestStore::empty();
        let cwd = t.dir.path().join("project");
        std::fs::create_dir(&cwd).expect("the project folder");
        let report = Report(t.dir.path().join("agent-report.jsonl"));
        Setup { t, cwd, report }
    }

    pub fn root(&self) -> &Path {
        self.t.configured()
    }

    /// The proxy on this store's configured root, its agent given `flags`.
    pub fn proxy(&self, flags: &[&str]) -> ProxyProcess {
        self.proxy_on(self.root(), flags)
    }

    /// The proxy with `root` as its configured root.
    pub fn proxy_on(&self, root: &Path, flags: &[&str]) -> ProxyProcess {
        self.proxy_with(root, &[], flags)
    }

    /// The proxy with `root` as its configured root and `store_flags` of its own
    /// before the agent's `flags`.
    pub fn proxy_with(&self, root: &Path, store_flags: &[&str], flags: &[&str]) -> ProxyProcess {
        let dir = self.t.dir.path();
        let stderr = dir.join(format!("proxy-stderr-{}.log", SessionId::new()));
        let child = crate::support::Bin::new(dir)
            .current_dir(dir)
            .env("RUST_LOG", "sessionstore=debug")
            .arg("proxy")
            .arg("--db")
            .arg(self.t.db_path())
            .arg("--attachments-root")
            .arg(root)
            .args(store_flags)
            .arg("--")
            .arg(AGENT)
            .arg("--report")
            .arg(&self.report.0)
            .args(flags)
            .stderr(File::create(&stderr).expect("a log file"))
            .spawn();
        ProxyProcess { child, stderr }
    }
}

/// What attachment `name` of `session` should be, for `check_attachment`.
pub fn expected(session: SessionId, name: &str, bytes: &[u8]) -> Expect {
    Expect {
        name: name.to_owned(),
        uri: sessionstore::oracle::expected_uri(session, name),
        bytes: bytes.to_vec(),
        host: sessionstore::config::host_name(),
    }
}

/// A running `sessionstore proxy`, killed and reaped when dropped. Its standard error
/// (the agent's too) goes to a file, so a test can show what it logged and see that
/// nothing panicked.
pub struct ProxyProcess {
    child: Child,
    stderr: PathBuf,
}

impl ProxyProcess {
    /// The SDK's byte-stream transport over the proxy's standard input and output.
    fn transport(&mut self) -> ByteStreams<Unblock<ChildStdin>, Unblock<ChildStdout>> {
        let stdin = self.child.stdin.take().expect("piped stdin");
        let stdout = self.child.stdout.take().expect("piped stdout");
        ByteStreams::new(Unblock::new(stdin), Unblock::new(stdout))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).expect("the proxy's log reads")
    }

    /// Waits (bounded) for the proxy to exit on its own, which it does once the client
    /// has closed its end; checks it never panicked, and returns how it exited.
    pub fn wait(mut self) -> ExitStatus {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("the proxy can be waited on") {
                break status;
            }
            assert!(
                start.elapsed() < TIMEOUT,
                "the proxy did not exit after its client left: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let log = self.log();
        assert!(!log.contains("panicked"), "the proxy panicked: {log}");
        status
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
pub fn has_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state is the field after the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// Waits (bounded) until `pid` has ended.
pub fn wait_ended(pid: u32, what: &str) {
    let start = Instant::now();
    while !has_ended(pid) {
        assert!(
            start.elapsed() < TIMEOUT,
            "{what} (pid {pid}) is still running"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Everything a client received, in order.
#[derive(Clone, Default)]
pub struct Seen(Arc<Mutex<SeenInner>>);

#[derive(Default)]
struct SeenInner {
    /// Every request and notification as it came: `{"kind", "method", "params"}`.
    raw: Vec<Value>,
    /// The `session/update`s the SDK parsed into the schema's type (an update of a kind
    /// the schema does not know is only in `raw`).
    updates: Vec<SessionNotification>,
    /// The permission requests the SDK parsed.
    permissions: Vec<RequestPermissionRequest>,
    /// Whether permission requests are held unanswered (see [`Seen::holding`]) rather
    /// than answered `allow`.
    holding: bool,
    held: Vec<Responder<RequestPermissionResponse>>,
}

impl Seen {
    /// A client that holds the agent's permission requests unanswered (while a test
    /// cancels the turn), until [`Seen::allow_held`].
    pub fn holding() -> Seen {
        let seen = Seen::default();
        seen.lock().holding = true;
        seen
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SeenInner> {
        self.0.lock().expect("the client's log")
    }

    pub fn raw(&self) -> Vec<Value> {
        self.lock().raw.clone()
    }

    pub fn updates(&self) -> Vec<SessionNotification> {
        self.lock().updates.clone()
    }

    pub fn permissions(&self) -> Vec<RequestPermissionRequest> {
        self.lock().permissions.clone()
    }

    /// How many permission requests are held unanswered.
    pub fn held(&self) -> usize {
        self.lock().held.len()
    }

    /// Answers every held permission request with `allow`, and the ones to come too.
    pub fn allow_held(&self) {
        let held = {
            let mut seen = self.lock();
            seen.holding = false;
            std::mem::take(&mut seen.held)
        };
        for responder in held {
            let _ = responder.respond(allow());
        }
    }

    /// The `update` objects of every raw `session/update`, in order.
    pub fn raw_updates(&self) -> Vec<Value> {
        self.lock()
            .raw
            .iter()
            .filter(|m| m["method"] == "session/update")
            .map(|m| m["params"]["update"].clone())
            .collect()
    }

    /// Forgets what was received so far (the next step's updates start afresh).
    pub fn clear(&self) {
        let mut seen = self.lock();
        seen.raw.clear();
        seen.updates.clear();
        seen.permissions.clear();
    }
}

fn allow() -> RequestPermissionResponse {
    RequestPermissionResponse::new(RequestPermissionOutcome::Selected(
        SelectedPermissionOutcome::new("allow"),
    ))
}

/// Runs `script` as an ACP client of `proxy`, keeping what it receives in `seen` and
/// answering permission requests `allow` (unless `seen` is holding them). The client's
/// end is closed when the script returns.
pub async fn client<T: Send + 'static>(
    proxy: &mut ProxyProcess,
    seen: &Seen,
    script: impl AsyncFnOnce(ConnectionTo<Agent>) -> Result<T, agent_client_protocol::Error> + Send,
) -> T {
    connection(proxy, seen, script)
        .await
        .unwrap_or_else(|e| panic!("the client failed: {e:?}: {}", proxy.log()))
}

/// [`client`], with how the connection ended: an error where the proxy went away under
/// it (a test that kills it), or the script failed.
pub async fn connection<T: Send + 'static>(
    proxy: &mut ProxyProcess,
    seen: &Seen,
    script: impl AsyncFnOnce(ConnectionTo<Agent>) -> Result<T, agent_client_protocol::Error> + Send,
) -> Result<T, agent_client_protocol::Error> {
    let (tap, updates, asked) = (seen.clone(), seen.clone(), seen.clone());
    let run = Client
        .v1()
        .name("sessionstore-proxy-test")
        // First in the chain: every request and notification as it came, before (and
        // whether or not) a typed handler parses it.
        .on_receive_dispatch(
            async move |message: Dispatch<UntypedMessage, UntypedMessage, V1>, _cx| {
                let entry = match &message {
                    Dispatch::Request(m, _) => Some(("request", m)),
                    Dispatch::Notification(m) => Some(("notification", m)),
                    Dispatch::Response(..) => None,
                };
                if let Some((kind, m)) = entry {
                    tap.lock().raw.push(serde_json::json!({
                        "kind": kind, "method": m.method, "params": m.params,
                    }));
                }
                Ok(Handled::No {
                    message,
                    retry: false,
                })
            },
            agent_client_protocol::on_receive_dispatch!(),
        )
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                updates.lock().updates.push(n);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: RequestPermissionRequest,
                        responder: Responder<RequestPermissionResponse>,
                        _cx| {
                let mut seen = asked.lock();
                seen.permissions.push(request);
                if seen.holding {
                    seen.held.push(responder);
                    Ok(())
                } else {
                    responder.respond(allow())
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(proxy.transport(), script);
    tokio::time::timeout(TIMEOUT, run)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the client did not finish in time; it got {:#?}; the proxy logged: {}",
                seen.raw(),
                proxy.log()
            )
        })
}

pub async fn call<R: JsonRpcRequest>(
    cx: &ConnectionTo<Agent>,
    request: R,
) -> Result<R::Response, agent_client_protocol::Error> {
    cx.send_request(request).block_task().await
}

pub fn initialize() -> InitializeRequest {
    InitializeRequest::new(agent_client_protocol::schema::ProtocolVersion::V1)
}

/// `initialize`, then a new session under `cwd`: its id.
pub async fn open_session(
    cx: &ConnectionTo<Agent>,
    cwd: &Path,
) -> Result<AcpSessionId, agent_client_protocol::Error> {
    call(cx, initialize()).await?;
    Ok(call(cx, NewSessionRequest::new(cwd)).await?.session_id)
}

pub async fn prompt_text(
    cx: &ConnectionTo<Agent>,
    session: &AcpSessionId,
    text: &str,
) -> Result<PromptResponse, agent_client_protocol::Error> {
    call(
        cx,
        PromptRequest::new(session.clone(), vec![text_block(text)]),
    )
    .await
}

pub fn text_block(text: &str) -> ContentBlock {
    ContentBlock::Text(TextContent::new(text))
}

/// The text file and the binary file the tests attach.
pub const NOTES: &str = "budget: 42\nquarterly notes\n";
pub const DATA: &[u8] = &[0, 159, 146, 150, 255, 7, 0, 1];

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A pasted image (no URI): stored as `attachment.png`.
pub fn image_block() -> ContentBlock {
    ContentBlock::Image(ImageContent::new(b64(PNG), "image/png"))
}

/// An editor's selection, embedded: stored as `notes v2.txt`.
pub fn notes_block() -> ContentBlock {
    let mut notes = TextResourceContents::new(NOTES, "zed://selection/notes%20v2.txt");
    notes.mime_type = Some("text/plain".into());
    ContentBlock::Resource(EmbeddedResource::new(
        EmbeddedResourceResource::TextResourceContents(notes),
    ))
}

/// Bytes from the clipboard, embedded: stored as `data.bin`.
pub fn data_block() -> ContentBlock {
    let mut data = BlobResourceContents::new(b64(DATA), "zed://clipboard/data.bin");
    data.mime_type = Some("application/octet-stream".into());
    ContentBlock::Resource(EmbeddedResource::new(
        EmbeddedResourceResource::BlobResourceContents(data),
    ))
}

/// What [`image_block`], [`notes_block`] and [`data_block`] are stored as in
/// `session`.
pub fn attachments(session: SessionId) -> [Expect; 3] {
    [
        expected(session, "attachment.png", PNG),
        expected(session, "notes v2.txt", NOTES.as_bytes()),
        expected(session, "data.bin", DATA),
    ]
}

/// Each block's `type`.
pub fn kinds(blocks: &[Value]) -> Vec<&str> {
    blocks
        .iter()
        .map(|b| b["type"].as_str().expect("a block type"))
        .collect()
}

pub fn store_id(id: &AcpSessionId) -> SessionId {
    id.0.parse()
        .expect("the client sees the store's session ids")
}

/// Waits (bounded) until `ready` holds, polling.
pub async fn eventually(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < TIMEOUT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The agent's report (see `tests/agent/main.rs`): one JSON object a line, from every
/// agent the test started.
#[derive(Clone)]
pub struct Report(PathBuf);

impl Report {
    pub fn entries(&self) -> Vec<Value> {
        match std::fs::read_to_string(&self.0) {
            Ok(text) => text
                .lines()
                .map(|l| serde_json::from_str(l).expect("a report line is JSON"))
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
            Err(e) => panic!("the report reads: {e}"),
        }
    }

    /// The params of every request of `method` the agent received, in order.
    pub fn requests(&self, method: &str) -> Vec<Value> {
        self.entries()
            .into_iter()
            .filter(|e| e["kind"] == "request" && e["method"] == method)
            .map(|e| e["params"].clone())
            .collect()
    }

    /// The blocks of every prompt the agent received, in order.
    pub fn prompts(&self) -> Vec<Vec<Value>> {
        self.requests("session/prompt")
            .into_iter()
            .map(|p| p["prompt"].as_array().expect("a prompt").clone())
            .collect()
    }

    /// The process ids of the agents that wrote to the report, in the order they
    /// first did.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        for e in self.entries() {
            let pid = e["pid"].as_u64().expect("each line names its pid") as u32;
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
        pids
    }

    /// The answers the agent got to its permission requests, in order.
    pub fn permission_answers(&self) -> Vec<Value> {
        self.entries()
            .into_iter()
            .filter(|e| e["response"] == "session/request_permission")
            .collect()
    }
}

/// The update kinds the schema knows: what a `session/update` must parse as.
fn known_update(update: &Value) -> bool {
    update["sessionUpdate"] != "sessionstore_test_future"
}

/// Item 6 of the issue, for one test's traffic: every request and notification the
/// client received parses as the schema's type for its method (`session/update`
/// unless its update kind is one the schema does not know), the SDK's typed handlers
/// got each of those, and every request and notification the agent received parses
/// as the schema's type for its method. A method the schema does not know at all
/// (not an extension either) is a failure too: nothing in these runs sends one.
pub fn assert_schema_accepts(seen: &Seen, report: &Report) {
    let raw = seen.raw();
    let mut typed_updates = 0;
    let mut typed_permissions = 0;
    for m in &raw {
        let (method, params) = (m["method"].as_str().expect("a method"), &m["params"]);
        match m["kind"].as_str() {
            Some("notification") => {
                if method == "session/update" && !known_update(&params["update"]) {
                    continue;
                }
                if let Err(e) = AgentNotification::parse_message(method, params) {
                    panic!("the client got a {method} the schema refuses ({e:?}): {params}");
                }
                typed_updates += usize::from(method == "session/update");
            }
            Some("request") => {
                if let Err(e) = AgentRequest::parse_message(method, params) {
                    panic!(
                        "the client got a {method} request the schema refuses ({e:?}): {params}"
                    );
                }
                typed_permissions += usize::from(method == "session/request_permission");
            }
            other => panic!("a raw entry of kind {other:?}"),
        }
    }
    assert_eq!(
        seen.updates().len(),
        typed_updates,
        "the SDK's typed handler got every update the schema knows"
    );
    assert_eq!(seen.permissions().len(), typed_permissions);

    for e in report.entries() {
        let (Some(kind), Some(method)) = (e["kind"].as_str(), e["method"].as_str()) else {
            continue; // the agent's own notes: what it answered, what it was answered
        };
        let params = &e["params"];
        let parsed = match kind {
            "request" => ClientRequest::parse_message(method, params).map(|_| ()),
            _ => ClientNotification::parse_message(method, params).map(|_| ()),
        };
        if let Err(e) = parsed {
            panic!("the agent got a {method} {kind} the schema refuses ({e:?}): {params}");
        }
    }
}
