//! The sessions open on the proxy's connection: store session ids to the agent's and
//! back, the client's requests forwarded to the agent, and the agent's permission
//! requests waiting on the client. A few map operations under one lock; no IO.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::super::Failure;
use super::super::agent::Running;
use super::super::rpc::{Message, code};
use crate::ids::SessionId;
use crate::store::SessionClaim;

#[derive(Default)]
pub(crate) struct Sessions {
    inner: Mutex<Inner>,
}

#[derive(Default)]
pub(super) struct Inner {
    pub(super) open: HashMap<SessionId, Open>,
    /// The agent's session ids in the running generation, to the store's.
    pub(super) by_agent: HashMap<String, SessionId>,
    /// Requests the client sent that went on to the agent, by the client's id (as JSON
    /// text), with the id they went under: how `$/cancel_request` is translated.
    forwarded: HashMap<String, u64>,
    permissions: HashMap<u64, Permission>,
    next_ticket: u64,
}

/// A session open on this connection.
pub(crate) struct Open {
    /// The agent side: its session id, and the generation of the agent that has it.
    pub agent: Option<(String, u64)>,
    /// The client's params for bringing the agent side up again.
    pub setup: Value,
    /// The agent side has not seen the history: the next prompt carries it.
    pub fresh: bool,
    /// The agent side is the agent's own session, resumed or loaded, whose attachment
    /// paths a moved root may have made stale: the next prompt carries current ones.
    pub stale_paths: bool,
    /// The agent is replaying the session (its own `session/load`): not relayed.
    pub agent_replaying: bool,
    /// Held while the agent side is brought up, so a prompt and a setting arriving
    /// together bring it up once.
    pub bringing_up: Arc<tokio::sync::Mutex<()>>,
    /// When the agent last sent anything for the session: `--agent-timeout`'s start.
    pub last_heard: std::time::Instant,
    /// How many requests of the agent for the session wait on the client.
    pub asking: usize,
    /// This process's claim on the session, which refuses it to another proxy while
    /// it is open here.
    pub claim: SessionClaim,
}

/// A permission request from the agent still waiting for the client.
struct Permission {
    session: SessionId,
    generation: u64,
    agent_id: Value,
    answered: bool,
}

/// A request of the agent waiting on the client (see `Sessions::asking`).
pub(crate) struct Asking {
    sessions: Arc<Sessions>,
    session: SessionId,
}

impl Drop for Asking {
    fn drop(&mut self) {
        self.sessions.with_open(&self.session, |o| {
            o.asking = o.asking.saturating_sub(1);
            o.last_heard = std::time::Instant::now();
        });
    }
}

/// Names a tracked permission request.
pub(crate) struct Ticket(u64);

impl Sessions {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        super::super::lock(&self.inner)
    }

    pub fn is_open(&self, session: &SessionId) -> bool {
        self.lock().open.contains_key(session)
    }

    pub(super) fn open(
        &self,
        session: SessionId,
        claim: SessionClaim,
        setup: Value,
        agent: Option<(String, u64)>,
        fresh: bool,
    ) {
        let mut inner = self.lock();
        if let Some((agent_id, _)) = &agent {
            inner.by_agent.insert(agent_id.clone(), session);
        }
        inner.open.insert(
            session,
            Open {
                agent,
                setup,
                fresh,
                stale_paths: false,
                agent_replaying: false,
                bringing_up: Arc::new(tokio::sync::Mutex::new(())),
                last_heard: std::time::Instant::now(),
                asking: 0,
                claim,
            },
        );
    }

    pub(super) fn close(&self, session: &SessionId) -> Option<Open> {
        let mut inner = self.lock();
        let open = inner.open.remove(session)?;
        if let Some((agent_id, _)) = &open.agent {
            inner.by_agent.remove(agent_id);
        }
        Some(open)
    }

    /// The client went: every session it had open is closed, their claims released.
    pub fn close_all(&self) {
        let mut inner = self.lock();
        inner.open.clear();
        inner.by_agent.clear();
    }

    /// The agent sent something for `session`.
    pub fn heard_from(&self, session: &SessionId) {
        self.with_open(session, |o| o.last_heard = std::time::Instant::now());
    }

    /// The agent asked the client something for `session`: until the guard is
    /// dropped (the client answered, or went), the agent is waiting, not silent.
    pub fn asking(self: &Arc<Self>, session: SessionId) -> Asking {
        self.with_open(&session, |o| {
            o.asking += 1;
            o.last_heard = std::time::Instant::now();
        });
        Asking {
            sessions: self.clone(),
            session,
        }
    }

    /// Runs `f` on an open session's state.
    pub fn with_open<T>(&self, session: &SessionId, f: impl FnOnce(&mut Open) -> T) -> Option<T> {
        self.lock().open.get_mut(session).map(f)
    }

    /// The agent of `generation` is gone: every agent side it held is, too, and its
    /// permission requests need no answer any more.
    pub fn agent_ended(&self, generation: u64) {
        let mut inner = self.lock();
        let Inner {
            open,
            by_agent,
            permissions,
            ..
        } = &mut *inner;
        for state in open.values_mut() {
            if let Some((agent_id, g)) = &state.agent
                && *g == generation
            {
                by_agent.remove(agent_id);
                state.agent = None;
                state.agent_replaying = false;
            }
        }
        permissions.retain(|_, p| p.generation != generation);
    }

    /// The store session a message from `agent` names, if it names one this
    /// connection carries in that agent's generation.
    pub fn store_session(&self, agent_session: &str, agent: &Running) -> Option<SessionId> {
        let inner = self.lock();
        let session = *inner.by_agent.get(agent_session)?;
        let state = inner.open.get(&session)?;
        matches!(&state.agent, Some((_, g)) if *g == agent.generation).then_some(session)
    }

    /// The agent's session id for the session a client message names: a session not
    /// open here is refused, one whose agent side is not up in `agent`'s generation is
    /// `None`.
    pub fn client_to_agent(
        &self,
        message: &Message,
        agent: &Running,
    ) -> Result<Option<String>, Failure> {
        let Some(id) = message.session_id() else {
            return Ok(None);
        };
        let session = parse_session(id)?;
        let inner = self.lock();
        let Some(state) = inner.open.get(&session) else {
            return Err(not_open(session));
        };
        Ok(match &state.agent {
            Some((agent_id, g)) if *g == agent.generation => Some(agent_id.clone()),
            _ => None,
        })
    }

    /// Translates the session id of a message from the agent into the store's, and
    /// says which session it was, if this connection carries it.
    pub fn agent_to_client(&self, message: &mut Message, agent: &Running) -> Option<SessionId> {
        let session = self.store_session(message.session_id()?, agent)?;
        message.set_session_id(&session.to_string());
        Some(session)
    }

    /// Translates the session id in the result of a relayed request.
    pub fn agent_to_client_result(&self, answer: &mut Message, agent: &Running) {
        if answer.outcome().is_ok() {
            self.agent_to_client(answer, agent);
        }
    }

    pub fn track_forwarded(&self, client_id: &Value, agent_id: u64) {
        self.lock()
            .forwarded
            .insert(client_id.to_string(), agent_id);
    }

    pub fn untrack_forwarded(&self, client_id: &Value) {
        self.lock().forwarded.remove(&client_id.to_string());
    }

    /// The id a client request went to the agent under, while it waits there.
    pub fn forwarded(&self, client_id: &Value) -> Option<u64> {
        self.lock().forwarded.get(&client_id.to_string()).copied()
    }

    /// Tracks a permission request from the agent for `session`.
    pub fn permission_asked(&self, session: SessionId, agent: &Running, agent_id: Value) -> Ticket {
        let mut inner = self.lock();
        inner.next_ticket += 1;
        let ticket = inner.next_ticket;
        inner.permissions.insert(
            ticket,
            Permission {
                session,
                generation: agent.generation,
                agent_id,
                answered: false,
            },
        );
        Ticket(ticket)
    }

    /// The client answered: true when the agent still waits for that answer (the
    /// request was not answered `cancelled` meanwhile).
    pub fn permission_answered(&self, ticket: &Ticket) -> bool {
        match self.lock().permissions.remove(&ticket.0) {
            Some(p) => !p.answered,
            None => false,
        }
    }

    /// The agent ids of the permission requests still waiting for `session`, marked
    /// answered: a cancellation answers them `cancelled` itself.
    pub fn cancel_permissions(&self, session: &SessionId) -> Vec<Value> {
        let mut inner = self.lock();
        inner
            .permissions
            .values_mut()
            .filter(|p| p.session == *session && !p.answered)
            .map(|p| {
                p.answered = true;
                p.agent_id.clone()
            })
            .collect()
    }
}

pub(super) fn parse_session(id: &str) -> Result<SessionId, Failure> {
    id.parse::<SessionId>()
        .map_err(|e| Failure::new(code::RESOURCE_NOT_FOUND, format!("no session {id:?}: {e}")))
}

pub(super) fn not_open(session: SessionId) -> Failure {
    Failure::invalid_params(format!(
        "session {session} is not open on this connection: call session/new, session/load or \
         session/resume first"
    ))
}
