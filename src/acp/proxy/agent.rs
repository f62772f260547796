//! What runs behind the proxy ([`Behind`]), and the agent's lifetime there. A child
//! agent is started on the client's `initialize`; if it ends, the requests waiting on
//! it fail naming it, and the next request starts it again after a pause that grows
//! with each crash in a row, re-sending the client's `initialize` and `authenticate`.
//! Each start is a generation: a session's agent side belongs to one, and is brought
//! up again in the next. A conductor's successor is reached once and never restarted
//! from here: the conductor owns it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::child::{self, AgentCommand};
use super::frame::FrameReader;
use super::link::Link;
use super::rpc::{Message, code};
use super::{Answer, FRAME_LIMIT, Failure, Proxy, lock};
use crate::DAEMON_ATTACHMENT_CONTEXT_META_KEY;

/// The pause before a restart after the first crash; it doubles with each crash in a
/// row, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const MAX_PAUSE: Duration = Duration::from_secs(30);
/// A run this long is no longer "in a row" with the crash before it.
const STEADY_RUN: Duration = Duration::from_secs(60);
/// How long a stopping agent gets to exit on its own once its input is closed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// What the agent can do, read from its `initialize` answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Capabilities {
    pub load: bool,
    pub resume: bool,
    pub close: bool,
    pub delete: bool,
    pub archive: bool,
    pub title: bool,
    pub image: bool,
    pub audio: bool,
    pub embedded: bool,
    /// The agent reads each attachment's path context under
    /// `DAEMON_ATTACHMENT_CONTEXT_META_KEY` (announced in `agentCapabilities._meta`).
    pub reads_context: bool,
}

impl Capabilities {
    fn of(initialized: &Value) -> Capabilities {
        let caps = &initialized["agentCapabilities"];
        let on = |v: &Value| v.as_bool().unwrap_or(false);
        let offered = |v: &Value| !v.is_null();
        let sessions = &caps["sessionCapabilities"];
        Capabilities {
            load: on(&caps["loadSession"]),
            resume: offered(&sessions["resume"]),
            close: offered(&sessions["close"]),
            delete: offered(&sessions["delete"]),
            archive: offered(&sessions["archive"]),
            title: offered(&sessions["title"]),
            image: on(&caps["promptCapabilities"]["image"]),
            audio: on(&caps["promptCapabilities"]["audio"]),
            embedded: on(&caps["promptCapabilities"]["embeddedContext"]),
            reads_context: caps["_meta"]
                .get(DAEMON_ATTACHMENT_CONTEXT_META_KEY)
                .is_some_and(|v| !matches!(v, Value::Null | Value::Bool(false))),
        }
    }
}

/// One start of the agent.
pub(crate) struct Running {
    pub generation: u64,
    pub link: Link,
    /// The agent's `initialize` result as it answered, and the capabilities read from
    /// it: set once the answer is in, before the agent is handed to anyone.
    initialized: std::sync::OnceLock<(Value, Capabilities)>,
    name: String,
    alive: AtomicBool,
    kill: tokio::sync::Notify,
    exited: tokio::sync::Notify,
    /// How it ended, for the errors of the requests it left unanswered.
    ended: Mutex<Option<String>>,
    /// Whether the next request starts the agent again once this one ended (a child;
    /// a conductor's successor is the conductor's to start).
    restarts: bool,
}

impl Running {
    /// A start of the agent that `link` reaches, not yet initialized, named `name` in
    /// errors.
    pub(super) fn reached(generation: u64, link: Link, name: String) -> Running {
        Running {
            generation,
            link,
            initialized: std::sync::OnceLock::new(),
            name,
            alive: AtomicBool::new(true),
            kill: tokio::sync::Notify::new(),
            exited: tokio::sync::Notify::new(),
            ended: Mutex::new(None),
            restarts: false,
        }
    }

    pub(super) fn set_initialized(&self, initialized: Value) {
        let caps = Capabilities::of(&initialized);
        let _ = self.initialized.set((initialized, caps));
    }

    /// The agent is gone: what waits on it fails, and a stop waits no longer. The
    /// caller tells the sessions.
    pub(super) fn mark_ended(&self, how: String) {
        *lock(&self.ended) = Some(how);
        self.alive.store(false, Ordering::Release);
        self.link.abandon_all();
        self.exited.notify_one();
    }

    pub fn caps(&self) -> &Capabilities {
        static NONE: std::sync::OnceLock<Capabilities> = std::sync::OnceLock::new();
        match self.initialized.get() {
            Some((_, caps)) => caps,
            None => NONE.get_or_init(Capabilities::default),
        }
    }

    pub fn initialized(&self) -> &Value {
        self.initialized.get().map_or(&Value::Null, |(v, _)| v)
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Sends a request and waits for its answer (an error response included).
    pub async fn request(&self, method: &str, params: Value) -> Answer {
        let answer = self.link.request(method, params).await;
        answer.map_err(|_| self.gone_error())
    }

    /// The error a request gets when this agent went away before answering it.
    pub fn gone_error(&self) -> Failure {
        let how = lock(&self.ended).clone();
        let how = how.unwrap_or_else(|| "exited".to_owned());
        let next = match self.restarts {
            true => "the next request starts it again",
            false => "its conductor starts the chain again",
        };
        Failure::internal(format!(
            "the agent {} {how} before it answered; {next}",
            self.name
        ))
    }
}

/// What runs behind the proxy, where it sends what it does not answer itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Behind {
    /// An ACP agent started as a child process (`sessionstore proxy -- AGENT`).
    Child(AgentCommand),
    /// Nothing (`sessionstore acp`): a prompt is recorded and its turn ended
    /// `end_turn`, and a method only an agent answers is not found.
    Nothing,
    /// The successor in a conductor's proxy chain (`sessionstore proxy` with no
    /// agent), reached through `proxy/successor` on the client's own connection.
    Successor,
}

impl From<AgentCommand> for Behind {
    fn from(command: AgentCommand) -> Behind {
        Behind::Child(command)
    }
}

/// The agent slot: at most one running agent, and what it takes to start another
/// (`None` with nothing behind).
pub(crate) struct Agent {
    command: Option<AgentCommand>,
    successor: bool,
    current: Mutex<Option<Arc<Running>>>,
    /// Held while an agent starts, so that requests arriving meanwhile wait for that
    /// start instead of making their own.
    starting: tokio::sync::Mutex<Starts>,
}

#[derive(Default)]
struct Starts {
    generation: u64,
    /// The client's `initialize` and `authenticate` params, re-sent on every start.
    initialize: Option<Value>,
    authenticate: Option<Value>,
    crashes_in_a_row: u32,
    last_start: Option<Instant>,
}

impl Agent {
    pub fn new(behind: Behind) -> Agent {
        let successor = behind == Behind::Successor;
        let command = match behind {
            Behind::Child(command) => Some(command),
            Behind::Nothing | Behind::Successor => None,
        };
        Agent {
            command,
            successor,
            current: Mutex::new(None),
            starting: tokio::sync::Mutex::new(Starts::default()),
        }
    }

    pub fn is_nothing(&self) -> bool {
        self.command.is_none() && !self.successor
    }

    pub fn is_successor(&self) -> bool {
        self.successor
    }

    /// The agent's name as a session's binding keeps it; `None` with nothing behind.
    /// A successor's is the `agentInfo.name` it answered `initialize` with.
    pub fn name(&self) -> Option<String> {
        if self.successor {
            return Some(name(self.current().as_deref()));
        }
        self.command.as_ref().map(AgentCommand::name)
    }

    /// The running agent, if there is one now (no start).
    pub fn current(&self) -> Option<Arc<Running>> {
        lock(&self.current).clone().filter(|a| a.is_alive())
    }

    /// Stops the agent: its input is closed, it gets a moment to exit, then it is
    /// killed (dropping the process kills it).
    pub async fn stop(&self) {
        let Some(running) = lock(&self.current).take() else {
            return;
        };
        running.link.close();
        if !running.is_alive() {
            return;
        }
        // An agent that does not exit when its input closes (Codex's does not) is
        // asked to, then made to.
        if tokio::time::timeout(EXIT_GRACE, running.exited.notified())
            .await
            .is_err()
        {
            running.kill.notify_one();
            running.exited.notified().await;
        }
    }
}

impl Proxy {
    /// Remembers the client's `initialize`, starts the agent with it, and answers with
    /// the agent's result plus what the proxy adds ([`advertise`]). With nothing
    /// behind, the answer is those additions alone, with version 1 (ACP has an agent
    /// answer a version it does not support with its own) and the store's name.
    pub(super) async fn initialize(self: &Arc<Self>, id: Value, mut message: Message) -> Answer {
        let mut params = message.take_params();
        self.cursors.take_capability(&mut params);
        if self.agent.is_nothing() {
            let mut result = serde_json::json!({
                "protocolVersion": 1,
                "agentCapabilities": {},
                "authMethods": [],
                "agentInfo": {"name": "sessionstore", "version": env!("CARGO_PKG_VERSION")},
            });
            advertise(&mut result);
            return Ok(Message::result(id, result));
        }
        self.agent.starting.lock().await.initialize = Some(params);
        let running = self.running_agent().await?;
        let mut result = running.initialized().clone();
        advertise(&mut result);
        Ok(Message::result(id, result))
    }

    /// `authenticate`, remembered so that a restarted agent is authenticated again.
    pub(super) async fn authenticate(self: &Arc<Self>, id: Value, message: Message) -> Answer {
        let params = message.params().cloned().unwrap_or(Value::Null);
        let running = self.running_agent().await?;
        let answer = running.request("authenticate", params.clone()).await?;
        if answer.outcome().is_ok() {
            self.agent.starting.lock().await.authenticate = Some(params);
        }
        let mut answer = answer;
        answer.set_id(id);
        Ok(answer)
    }

    /// The agent, started (or started again) if it is not running.
    pub(super) async fn running_agent(self: &Arc<Self>) -> Result<Arc<Running>, Failure> {
        if let Some(running) = self.agent.current() {
            return Ok(running);
        }
        if self.agent.is_nothing() {
            return Err(no_agent("this request"));
        }
        let mut starts = self.agent.starting.lock().await;
        // Another request may have started it while this one waited.
        if let Some(running) = self.agent.current() {
            return Ok(running);
        }
        let Some(initialize) = starts.initialize.clone() else {
            return Err(Failure::new(
                code::INVALID_REQUEST,
                "the client has not sent initialize yet",
            ));
        };
        starts.generation += 1;
        let generation = starts.generation;
        let running = if self.agent.successor {
            // The conductor owns the agent: it is reached once, never restarted here.
            if starts.last_start.is_some() {
                return Err(gone());
            }
            let running = self.reach_successor(generation, initialize).await?;
            starts.last_start = Some(Instant::now());
            running
        } else {
            if let Some(last) = starts.last_start {
                // A restart: the one before crashed, or exited.
                if last.elapsed() >= STEADY_RUN {
                    starts.crashes_in_a_row = 0;
                }
                starts.crashes_in_a_row += 1;
                let pause = FIRST_PAUSE
                    .saturating_mul(1 << starts.crashes_in_a_row.saturating_sub(1).min(16))
                    .min(MAX_PAUSE);
                tracing::warn!(
                    "starting the agent {} again in {} ms",
                    self.agent.name().unwrap_or_default(),
                    pause.as_millis()
                );
                tokio::time::sleep(pause).await;
            }
            starts.last_start = Some(Instant::now());
            let authenticate = starts.authenticate.clone();
            self.start(generation, initialize, authenticate).await?
        };
        *lock(&self.agent.current) = Some(running.clone());
        Ok(running)
    }

    async fn start(
        self: &Arc<Self>,
        generation: u64,
        initialize: Value,
        authenticate: Option<Value>,
    ) -> Result<Arc<Running>, Failure> {
        let command = self
            .agent
            .command
            .as_ref()
            .ok_or_else(|| no_agent("a start"))?;
        let (mut process, stdin, stdout) = child::spawn(command).map_err(|e| {
            Failure::internal(format!("cannot start the agent {}: {e}", command.shown()))
        })?;
        tracing::info!(
            "started the agent {} (pid {})",
            command.shown(),
            process.id().unwrap_or(0)
        );
        let running = Arc::new(Running {
            restarts: true,
            ..Running::reached(generation, Link::new(stdin), command.name())
        });
        let proxy = self.clone();
        let reader = running.clone();
        tokio::spawn(async move {
            let mut frames = FrameReader::new(stdout, FRAME_LIMIT);
            loop {
                let frame = tokio::select! {
                    frame = frames.next() => frame,
                    () = reader.kill.notified() => {
                        process.terminate(EXIT_GRACE).await;
                        break;
                    }
                };
                let Ok(Some(frame)) = frame else {
                    break;
                };
                match super::read_message(frame, "agent") {
                    Ok(message) => proxy.from_agent(&reader, message).await,
                    Err(answer) => {
                        let _ = reader.link.send(&answer).await;
                    }
                }
            }
            let how = match process.wait().await {
                Ok(status) => match status.code() {
                    Some(0) => "exited".to_owned(),
                    Some(code) => format!("exited with status {code}"),
                    None => format!("was ended ({status})"),
                },
                Err(e) => format!("ended ({e})"),
            };
            tracing::warn!("the agent {} {how}", reader.name);
            reader.mark_ended(how);
            proxy.sessions.agent_ended(reader.generation);
        });

        let answer = running.request("initialize", initialize).await?;
        let initialized = match answer.outcome() {
            Ok(result) => result.clone(),
            Err(error) => {
                return Err(Failure::internal(format!(
                    "the agent {} refused initialize: {error}",
                    command.shown()
                )));
            }
        };
        running.set_initialized(initialized);
        if let Some(params) = authenticate {
            let answer = running.request("authenticate", params).await?;
            if let Err(error) = answer.outcome() {
                tracing::warn!("the restarted agent refused authenticate: {error}");
            }
        }
        Ok(running)
    }
}

/// The answer to a request only an agent answers, with nothing behind the proxy.
pub(super) fn no_agent(what: &str) -> Failure {
    Failure::new(
        code::METHOD_NOT_FOUND,
        format!("{what} needs an agent, and none runs behind this store (sessionstore acp)"),
    )
}

/// The proxy's own additions to the agent's `initialize` result: the session methods
/// the store serves, and images and embedded context (converted for an agent that
/// takes neither).
fn advertise(result: &mut Value) {
    let Value::Object(result) = result else {
        return;
    };
    let caps = result
        .entry("agentCapabilities")
        .or_insert_with(|| Value::Object(Default::default()));
    let Value::Object(caps) = caps else {
        return;
    };
    caps.insert("loadSession".to_owned(), Value::Bool(true));
    let prompt = caps
        .entry("promptCapabilities")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(prompt) = prompt {
        prompt.insert("image".to_owned(), Value::Bool(true));
        prompt.insert("embeddedContext".to_owned(), Value::Bool(true));
    }
    let sessions = caps
        .entry("sessionCapabilities")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(sessions) = sessions {
        for served in [
            "list", "resume", "close", "delete", "fork", "archive", "title", "status",
        ] {
            sessions.insert(served.to_owned(), Value::Object(Default::default()));
        }
    }
}

/// How a session's binding names a successor: its `agentInfo.name`, else `successor`.
pub(super) fn name(running: Option<&Running>) -> String {
    running
        .and_then(|r| r.initialized()["agentInfo"]["name"].as_str())
        .filter(|name| !name.is_empty())
        .unwrap_or("successor")
        .to_owned()
}

/// What a request that needs the agent gets once the successor is gone.
pub(super) fn gone() -> Failure {
    Failure::internal(
        "the successor in the conductor's chain is gone; the conductor, which owns it, starts the chain again",
    )
}
