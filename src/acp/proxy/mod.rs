//! The one ACP session layer: the store as an ACP proxy. Toward the client it is an
//! agent on standard input and output; behind it runs a child agent, the successor in
//! a conductor's chain, or nothing (`Behind`). Every message passes through, unknown
//! fields and extension methods included, with session ids translated between the
//! store's (what the client sees) and the agent's; what the proxy handles itself it
//! patches as JSON. The session methods are served by the store, the session
//! authority, whatever runs behind (`Proxy::client_request` is the table). Everything
//! it keeps goes through `Store`'s public API.

mod agent;
mod child;
mod cursors;
mod frame;
mod link;
mod prompt;
mod restored;
mod rpc;
mod sessions;
mod successor;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use tokio::io::BufReader;

pub use agent::Behind;
pub use child::AgentCommand;

use crate::Store;
use agent::Agent;
use frame::{Frame, FrameReader};
use link::Link;
use rpc::{Kind, Message, code};
use sessions::Sessions;

/// The largest frame the proxy reads from either side: the largest attachment,
/// base64-encoded, with room for its JSON. A longer line is refused without being held.
pub const FRAME_LIMIT: usize =
    (crate::attachments::MAX_ATTACHMENT_BYTES as usize / 3 + 1) * 4 + 1024 * 1024;

/// How the proxy is run.
#[derive(Debug, Clone)]
pub struct ProxyOptions {
    pub behind: Behind,
    /// The default for a client that gives no working directory (the store keeps none
    /// for such a session), and where sessions with none of their own are listed.
    pub cwd: PathBuf,
    /// How many bytes of attachment contents a fresh agent session is given with the
    /// restored conversation (paths are always given).
    pub restored_content_budget: usize,
    /// How long a turn's agent may send nothing before the turn is ended with an
    /// error and marked failed; `None` waits as long as it takes. Time spent waiting
    /// on the client (a permission request) does not count.
    pub agent_timeout: Option<std::time::Duration>,
    /// Off, the proxy only relays the agent's updates (prompts are still stored): the
    /// streaming benchmarks' baseline, never what a user runs.
    pub record_updates: bool,
}

impl ProxyOptions {
    pub fn new(behind: impl Into<Behind>, cwd: PathBuf) -> ProxyOptions {
        ProxyOptions {
            behind: behind.into(),
            cwd,
            restored_content_budget: restored::CONTENT_BUDGET,
            agent_timeout: None,
            record_updates: true,
        }
    }
}

/// What the proxy shares between the tasks that serve one client connection.
pub(crate) struct Proxy {
    store: Store,
    options: ProxyOptions,
    client: Arc<Link>,
    agent: Agent,
    sessions: Arc<Sessions>,
    turns: prompt::Turns,
    cursors: cursors::Cursors,
}

/// Serves one client on standard input and output until it closes its end; the agent
/// is started on its `initialize` and stopped when the client goes.
pub async fn run_stdio(store: Store, options: ProxyOptions) -> std::io::Result<()> {
    let (input, read) = stdin();
    let (output, written) = stdout();
    tracing::debug!("the client's input: {read}; its output: {written}");
    run(store, options, input, output).await
}

/// How the proxy serves one of its standard streams, as its debug log names it.
const POLLED_SOCKET: &str = "a socket, polled";
const POLLED_PIPE: &str = "a pipe, polled";
const BLOCKING: &str = "neither a socket nor a pipe, on a blocking thread";

/// Standard input as the proxy reads it: a pipe or a socket (as editors start agents)
/// through the runtime's poller, anything else through tokio's `stdin`, which hands
/// each read to a blocking thread.
fn stdin() -> (Box<dyn tokio::io::AsyncRead + Unpin + Send>, &'static str) {
    #[cfg(unix)]
    match polled(std::io::stdin()) {
        Some(Polled::Socket(socket)) => return (Box::new(socket), POLLED_SOCKET),
        Some(Polled::Pipe(fd)) => {
            if let Ok(pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) {
                return (Box::new(pipe), POLLED_PIPE);
            }
        }
        None => {}
    }
    (Box::new(tokio::io::stdin()), BLOCKING)
}

/// Standard output as the proxy writes it, like [`stdin`]: tokio's `stdout` hands
/// every write to a blocking thread, a hop and two wakeups for each relayed update.
fn stdout() -> (Box<dyn tokio::io::AsyncWrite + Unpin + Send>, &'static str) {
    #[cfg(unix)]
    match polled(std::io::stdout()) {
        Some(Polled::Socket(socket)) => return (Box::new(socket), POLLED_SOCKET),
        Some(Polled::Pipe(fd)) => {
            if let Ok(pipe) = tokio::net::unix::pipe::Sender::from_owned_fd(fd) {
                return (Box::new(pipe), POLLED_PIPE);
            }
        }
        None => {}
    }
    (Box::new(tokio::io::stdout()), BLOCKING)
}

/// A standard stream the runtime's poller can serve, on a duplicate of its
/// descriptor. The duplicate shares the stream's open file, which is made
/// non-blocking for every descriptor of it in this process; nothing else here reads
/// or writes it.
#[cfg(unix)]
enum Polled {
    /// A stream socket, already non-blocking.
    Socket(tokio::net::UnixStream),
    /// A pipe, for tokio's pipe types (which check its direction and make it
    /// non-blocking).
    Pipe(std::os::fd::OwnedFd),
}

/// What `stream` is for the poller, or `None` for a file or a terminal.
#[cfg(unix)]
fn polled(stream: impl std::os::fd::AsFd) -> Option<Polled> {
    use rustix::fs::FileType;
    let fd = stream.as_fd();
    let kind = FileType::from_raw_mode(rustix::fs::fstat(fd).ok()?.st_mode);
    if kind != FileType::Socket && kind != FileType::Fifo {
        return None;
    }
    let fd = fd.try_clone_to_owned().ok()?;
    if kind == FileType::Fifo {
        return Some(Polled::Pipe(fd));
    }
    let socket = std::os::unix::net::UnixStream::from(fd);
    socket.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(socket)
        .ok()
        .map(Polled::Socket)
}

/// Serves one client on `input` and `output`.
pub async fn run(
    store: Store,
    options: ProxyOptions,
    input: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    output: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
) -> std::io::Result<()> {
    let client = Arc::new(Link::new(output));
    let proxy = Arc::new(Proxy {
        agent: Agent::new(options.behind.clone()),
        sessions: Arc::new(Sessions::default()),
        turns: prompt::Turns::default(),
        cursors: cursors::Cursors::default(),
        store,
        options,
        client,
    });
    let mut frames = FrameReader::new(BufReader::with_capacity(64 * 1024, input), FRAME_LIMIT);
    // A failed read of the client's input ends the connection like its end does: its
    // sessions let go and the agent stopped, and then the error is returned.
    let ended = loop {
        let frame = match frames.next().await {
            Ok(Some(frame)) => frame,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        let message = match read_message(frame, "client") {
            Ok(message) => message,
            Err(answer) => {
                if proxy.client.send(&answer).await.is_err() {
                    break Ok(());
                }
                continue;
            }
        };
        proxy.from_client(message).await;
    };
    // The client is gone: its sessions are free for another proxy at once, even while
    // the agent is being stopped.
    proxy.sessions.close_all();
    proxy.agent.stop().await;
    ended
}

/// A frame read from `peer` as a message, or the error answer it gets instead: a frame
/// over [`FRAME_LIMIT`], or one that is not a JSON-RPC message.
fn read_message(frame: Frame<'_>, peer: &str) -> Result<Message, Message> {
    match frame {
        Frame::Oversized { len } => {
            tracing::warn!("refused a frame of {len} bytes from the {peer}");
            Err(Message::error(
                Value::Null,
                code::INVALID_REQUEST,
                format!("a message of {len} bytes is over the {FRAME_LIMIT}-byte limit"),
            ))
        }
        Frame::Line(line) => Message::parse(line).map_err(|m| {
            tracing::warn!("the {peer} sent a malformed message: {}", m.message);
            Message::error(m.id, m.code, m.message)
        }),
    }
}

impl Proxy {
    /// Routes one message from the client. Requests run on tasks of their own (a
    /// prompt lasts a whole turn, and a cancellation must get through meanwhile);
    /// notifications and responses are handled in order, here.
    async fn from_client(self: &Arc<Self>, message: Message) {
        match message.kind() {
            Kind::Response { .. } => {
                // An answer to a request the agent sent the client through us.
                if let Some(stray) = self.client.answered(message) {
                    tracing::debug!("dropped an answer from the client to no request: {stray:?}");
                }
            }
            Kind::Notification { method } | Kind::Request { method, .. }
                if method == successor::SUCCESSOR =>
            {
                // The successor's message, through the conductor.
                self.from_successor(message).await;
            }
            Kind::Notification { method } => {
                let method = method.to_owned();
                self.client_notification(&method, message).await;
            }
            Kind::Request { id, method } => {
                let id = id.clone();
                let method = method.to_owned();
                let proxy = self.clone();
                tokio::spawn(async move {
                    let answer = proxy.client_request(&method, id.clone(), message).await;
                    let answer = match answer {
                        Ok(answer) => answer,
                        Err(e) => {
                            tracing::warn!(
                                "{method} failed: {}",
                                crate::dispatch::hidden_escaped(&e.message)
                            );
                            e.into_message(id)
                        }
                    };
                    let _ = proxy.client.send(&answer).await;
                });
            }
        }
    }

    /// The table of the requests a client sends. The session methods are answered here
    /// whatever runs behind; the rest are the agent's (not found with nothing behind).
    async fn client_request(self: &Arc<Self>, method: &str, id: Value, message: Message) -> Answer {
        match method {
            "initialize" if self.agent.is_successor() => Err(successor::needs_an_agent()),
            "initialize" => self.initialize(id, message).await,
            successor::INITIALIZE if self.agent.is_successor() => {
                self.initialize(id, message).await
            }
            successor::INITIALIZE => Err(successor::not_in_a_chain(method)),
            "session/new" => self.new_session(id, message).await,
            "session/load" => self.load_session(id, message, true).await,
            "session/resume" => self.load_session(id, message, false).await,
            "session/list" => self.list_sessions(id, message).await,
            "session/close" => self.close_session(id, message).await,
            "session/delete" => self.delete_session(id, message).await,
            "session/fork" => self.fork_session(id, message).await,
            "session/archive" => self.archive_session(id, message, true).await,
            "session/unarchive" => self.archive_session(id, message, false).await,
            "session/set_title" => self.set_title(id, message).await,
            "session/status" => self.session_status(id, message).await,
            "session/prompt" => self.prompt(id, message).await,
            _ if self.agent.is_nothing() => Err(agent::no_agent(method)),
            "authenticate" => self.authenticate(id, message).await,
            "session/set_mode" | "session/set_model" | "session/set_config_option" => {
                self.setting(id, method, message).await
            }
            _ => self.relay_request(id, message).await,
        }
    }

    /// A request the proxy does not handle: to the agent, its session id translated,
    /// and the agent's answer back under the client's id.
    async fn relay_request(self: &Arc<Self>, id: Value, mut message: Message) -> Answer {
        let agent = self.running_agent().await?;
        if let Some(session) = self.sessions.client_to_agent(&message, &agent)? {
            message.set_session_id(&session);
        }
        let (agent_id, answer) = agent.link.forward(message).await;
        self.sessions.track_forwarded(&id, agent_id);
        let answer = answer.await;
        self.sessions.untrack_forwarded(&id);
        let mut answer = answer.map_err(|_| agent.gone_error())?;
        self.sessions.agent_to_client_result(&mut answer, &agent);
        answer.set_id(id);
        Ok(answer)
    }

    /// The table of the notifications a client sends; with nothing behind, each is
    /// dropped (a turn ends as soon as it is recorded, so there is nothing to cancel).
    async fn client_notification(self: &Arc<Self>, method: &str, mut message: Message) {
        match method {
            "session/cancel" => self.cancel(message).await,
            "$/cancel_request" => {
                let Some(agent) = self.agent.current() else {
                    return;
                };
                if let Some(forwarded) = message
                    .params()
                    .and_then(|p| p.get("id"))
                    .and_then(|id| self.sessions.forwarded(id))
                    && let Some(Value::Object(params)) = message.params_mut()
                {
                    params.insert("id".to_owned(), Value::from(forwarded));
                    let _ = agent.link.send(&message).await;
                }
            }
            _ => {
                let Some(agent) = self.agent.current() else {
                    tracing::debug!("dropped a {method} notification: no agent is running");
                    return;
                };
                if let Ok(Some(session)) = self.sessions.client_to_agent(&message, &agent) {
                    message.set_session_id(&session);
                }
                let _ = agent.link.send(&message).await;
            }
        }
    }

    /// Routes one message from the agent of generation `agent`.
    async fn from_agent(self: &Arc<Self>, agent: &Arc<agent::Running>, message: Message) {
        match message.kind() {
            Kind::Response { .. } => {
                if let Some(stray) = agent.link.answered(message) {
                    tracing::debug!("dropped an answer from the agent to no request: {stray:?}");
                }
            }
            Kind::Notification { method } => {
                if method == "session/update" {
                    self.agent_update(agent, message).await;
                    return;
                }
                let mut message = message;
                self.sessions.agent_to_client(&mut message, agent);
                let _ = self.client.send(&message).await;
            }
            Kind::Request { id, method } => {
                let id = id.clone();
                let method = method.to_owned();
                let proxy = self.clone();
                let agent = agent.clone();
                tokio::spawn(
                    async move { proxy.agent_request(&agent, id, &method, message).await },
                );
            }
        }
    }

    /// A request from the agent to the client (permission, `fs/*`, `terminal/*`,
    /// elicitation, an extension): to the client, and its answer back to the agent.
    /// A permission request is tracked under its session so that a cancellation can
    /// answer it.
    async fn agent_request(
        self: &Arc<Self>,
        agent: &Arc<agent::Running>,
        id: Value,
        method: &str,
        mut message: Message,
    ) {
        let session = self.sessions.agent_to_client(&mut message, agent);
        // The agent waits on the client now, which its inactivity limit does not count.
        let _asking = session.map(|s| self.sessions.asking(s));
        let permission = (method == "session/request_permission")
            .then(|| session.map(|s| self.sessions.permission_asked(s, agent, id.clone())))
            .flatten();
        let (_, answer) = self.client.forward(message).await;
        let answer = answer.await;
        if let Some(ticket) = &permission
            && !self.sessions.permission_answered(ticket)
        {
            // The turn was cancelled meanwhile and the agent already has its answer.
            return;
        }
        let mut answer = match answer {
            Ok(answer) => answer,
            Err(_) => Message::error(
                id.clone(),
                code::INTERNAL_ERROR,
                "the client went away before it answered",
            ),
        };
        answer.set_id(id);
        let _ = agent.link.send(&answer).await;
    }
}

/// What a request the proxy handles gets: the answer to relay, or an error.
type Answer = Result<Message, Failure>;

/// Locks one of the proxy's mutexes, poisoned or not: each change under them is a few
/// map operations that cannot panic midway, so a panic elsewhere leaves them whole.
fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A request the proxy answers with an error: the JSON-RPC error object the client
/// gets.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failure {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl Failure {
    pub fn new(code: i64, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into().replace(['\n', '\r'], " "),
            data: None,
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> Failure {
        Failure::new(code::INVALID_PARAMS, message)
    }

    pub fn internal(message: impl Into<String>) -> Failure {
        Failure::new(code::INTERNAL_ERROR, message)
    }

    fn into_message(self, id: Value) -> Message {
        let mut error = serde_json::json!({"code": self.code, "message": self.message});
        if let Some(data) = self.data {
            error["data"] = data;
        }
        Message::error_object(id, error)
    }
}

/// A store error as the client sees it: the JSON-RPC code its kind maps to, the error
/// and its causes on one line, and the store's stable `kind` in `data`.
impl From<crate::Error> for Failure {
    fn from(e: crate::Error) -> Failure {
        use crate::Error;
        let code = match &e {
            Error::SessionNotFound(_) => code::RESOURCE_NOT_FOUND,
            Error::SessionOpenElsewhere { .. } => code::INVALID_REQUEST,
            Error::EmptyMessage
            | Error::EmptyTitle
            | Error::MalformedReference(_)
            | Error::ForeignReference { .. }
            | Error::Attachment(crate::attachments::AttachmentError::UploadTooLarge { .. })
            | Error::Id(_)
            | Error::ReplayPoint { .. }
            | Error::ReplayMessage { .. } => code::INVALID_PARAMS,
            e if e.is_refused() => code::INVALID_PARAMS,
            _ => code::INTERNAL_ERROR,
        };
        let chain = std::iter::successors(Some(&e as &dyn std::error::Error), |c| c.source());
        let message = chain.map(|c| c.to_string()).collect::<Vec<_>>().join(": ");
        Failure {
            data: Some(serde_json::json!({ "kind": e.kind() })),
            ..Failure::new(code, message)
        }
    }
}
