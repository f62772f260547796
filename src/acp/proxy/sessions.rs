//! The session methods the store serves and the settings it records, and how a
//! session's agent side is brought up again in a fresh agent: the agent's own resume
//! or load while it still knows the session, else a new agent session told the
//! conversation so far with its next prompt. With nothing behind, a session has no
//! agent side. The map of open sessions and ids is `sessions/map.rs`.

mod map;

use std::sync::Arc;

use serde_json::{Value, json};

use super::agent::Running;
use super::rpc::{Message, code};
use super::{Answer, Failure, Proxy};
use crate::acp::LIST_PAGE;
use crate::ids::SessionId;
use crate::lifecycle::{DeleteOptions, ListQuery, SessionCursor};
use crate::model::{AgentBinding, ArchiveFilter, NewSession, TitleSource, ToolsHost};
pub(crate) use map::{Open, Sessions};
use map::{not_open, parse_session};

/// The `_meta` key under which `session/fork` names the message (or recorded item) to
/// fork at: ACP v1's fork has no field for it.
pub const FORK_AT_META_KEY: &str = "sessionstore/forkAt";

impl Proxy {
    /// `session/new`: an agent session first, then the store session bound to it; the
    /// client sees the store's id and the agent's modes, models and config options.
    pub(super) async fn new_session(self: &Arc<Self>, id: Value, mut message: Message) -> Answer {
        let mut params = message.take_params();
        let cwd = self.client_cwd(&mut params)?;
        let (mut result, agent) = match self.agent.is_nothing() {
            true => (json!({}), None),
            false => {
                let agent = self.running_agent().await?;
                let answer = agent.request("session/new", params.clone()).await?;
                let result = match answer.outcome() {
                    Ok(result) => result.clone(),
                    Err(_) => {
                        let mut answer = answer;
                        answer.set_id(id);
                        return Ok(answer);
                    }
                };
                let agent_session = agent_session_of(&result)?;
                (result, Some((agent_session, agent.generation)))
            }
        };
        let session = self
            .store
            .create_session(NewSession {
                title: None,
                tools_host: ToolsHost::Local,
                cwd,
                agent: agent
                    .as_ref()
                    .zip(self.agent.name())
                    .map(|((session, _), agent)| AgentBinding {
                        agent,
                        session: session.clone(),
                    }),
            })
            .await?;
        let claim = self.store.claim_session(session.id).await?;
        self.sessions
            .open(session.id, claim, setup_of(&params), agent, false);
        result["sessionId"] = Value::String(session.id.to_string());
        Ok(Message::result(id, result))
    }

    /// `session/load` (with `replay`) and `session/resume`: the store's history as
    /// `session/update` notifications (for a load), then the agent side brought up,
    /// then the answer with what the agent said of it.
    pub(super) async fn load_session(
        self: &Arc<Self>,
        id: Value,
        mut message: Message,
        replay: bool,
    ) -> Answer {
        let mut params = message.take_params();
        let session = session_of(&params)?;
        self.client_cwd(&mut params)?;
        // The session must exist (a deleted one is not found) before anything is sent.
        let stored = self.store.session(session).await?;
        // Claimed before anything is sent: a session another proxy carries is refused
        // as open elsewhere. One already open on this connection keeps its claim.
        let claim = match self.sessions.is_open(&session) {
            true => None,
            false => Some(self.store.claim_session(session).await?),
        };
        // A resume replays only from a point the client asked for (v2's `replayFrom`).
        let point = crate::acp::replay_point(params.get("_meta").and_then(Value::as_object))?;
        if replay || point.is_some() {
            self.replay_to_client(session, point).await?;
        }
        // A load or resume opens the session afresh on this connection.
        let old = self.sessions.close(&session);
        let claim = match (claim, old) {
            (Some(claim), _) => claim,
            (None, Some(old)) => old.claim,
            // Closed on this connection meanwhile, its claim with it.
            (None, None) => self.store.claim_session(session).await?,
        };
        self.sessions
            .open(session, claim, setup_of(&params), None, true);
        let result = self.bring_up(session, stored.agent.as_ref()).await?;
        Ok(Message::result(id, result))
    }

    /// `session/list`: the store's sessions, most recently updated first, a page at a
    /// time, filtered by the client's working directory.
    pub(super) async fn list_sessions(self: &Arc<Self>, id: Value, message: Message) -> Answer {
        let params = message.params().cloned().unwrap_or(Value::Null);
        let cursor = params["cursor"]
            .as_str()
            .map(str::parse::<SessionCursor>)
            .transpose()
            .map_err(|e| Failure::invalid_params(e.to_string()))?;
        let own = self.options.cwd.to_string_lossy().into_owned();
        // Sessions no client gave a directory count as the proxy's own.
        let filter = params["cwd"]
            .as_str()
            .map(|cwd| crate::lifecycle::CwdFilter {
                cwd: cwd.to_owned(),
                unset_too: cwd == own,
            });
        let archived = match &params["archived"] {
            Value::Null => None,
            Value::String(which) => Some(which.parse::<ArchiveFilter>().map_err(|_| {
                Failure::invalid_params(format!(
                    "archived must be exclude, include or only, not {which:?}"
                ))
            })?),
            other => {
                return Err(Failure::invalid_params(format!(
                    "archived must be exclude, include or only, not {other}"
                )));
            }
        };
        let page = self
            .store
            .list_sessions(ListQuery {
                limit: LIST_PAGE,
                cursor,
                cwd: filter,
                archived,
            })
            .await?;
        let sessions: Vec<Value> = page
            .sessions
            .into_iter()
            .map(|s| {
                json!({
                    "sessionId": s.id.to_string(),
                    "cwd": s.cwd.clone().unwrap_or_else(|| own.clone()),
                    "title": s.title,
                    "updatedAt": s.updated_at,
                    "archived": s.archived,
                })
            })
            .collect();
        let mut result = json!({ "sessions": sessions });
        if let Some(next) = page.next_cursor {
            result["nextCursor"] = Value::String(next.to_string());
        }
        Ok(Message::result(id, result))
    }

    /// `session/archive` (`archived`) and `session/unarchive`, told to the agent too
    /// where it archives. Archiving a session open here cancels its turn and closes it,
    /// as the schema asks; one another proxy carries is refused as open elsewhere.
    pub(super) async fn archive_session(
        self: &Arc<Self>,
        id: Value,
        message: Message,
        archived: bool,
    ) -> Answer {
        let session = session_param(&message)?;
        let stored = self.store.session(session).await?;
        let claim = match archived {
            false => None,
            true if self.sessions.is_open(&session) => {
                self.cancel_turn(session).await;
                let open = self.close_open(session).await;
                open.map(|o| o.claim)
            }
            true => Some(self.store.claim_session(session).await?),
        };
        self.store.set_archived(vec![session], archived).await?;
        drop(claim);
        let method = if archived {
            "session/archive"
        } else {
            "session/unarchive"
        };
        self.tell_agent(stored.agent, |c| c.archive, method, json!({}))
            .await;
        Ok(Message::result(id, json!({})))
    }

    /// `session/set_title`: an explicit title, which stays until the next explicit one;
    /// the answer is the title stored. An agent that takes titles gets it too.
    pub(super) async fn set_title(self: &Arc<Self>, id: Value, message: Message) -> Answer {
        let params = message.params().unwrap_or(&Value::Null);
        let session = session_of(params)?;
        let Value::String(title) = &params["title"] else {
            return Err(Failure::invalid_params("title must be a string"));
        };
        let stored = self.store.session(session).await?;
        let title = self
            .store
            .set_title(session, title.clone(), TitleSource::Explicit)
            .await?;
        let params = json!({ "title": title });
        self.tell_agent(stored.agent, |c| c.title, "session/set_title", params)
            .await;
        Ok(Message::result(id, json!({ "title": title })))
    }

    /// `session/status`: `open` while a client holds the session, here or in another
    /// proxy (a probe of its claim), else `saved`. An unknown session is not found,
    /// its id in `data`.
    pub(super) async fn session_status(self: &Arc<Self>, id: Value, message: Message) -> Answer {
        let params = message.params().unwrap_or(&Value::Null);
        let with_id = |f: Failure| match f.code {
            code::RESOURCE_NOT_FOUND => Failure {
                data: Some(json!({ "sessionId": params["sessionId"] })),
                ..f
            },
            _ => f,
        };
        let session = session_of(params).map_err(with_id)?;
        let stored = self.store.session(session).await;
        stored.map_err(|e| with_id(e.into()))?;
        let open = self.sessions.is_open(&session) || self.store.session_claimed(session).await?;
        let status = if open { "open" } else { "saved" };
        Ok(Message::result(id, json!({ "status": status })))
    }

    /// Tells the running agent of a change the store made to a session bound to it,
    /// when it can take `method`, so its own lists agree. Its answer changes nothing.
    async fn tell_agent(
        self: &Arc<Self>,
        binding: Option<AgentBinding>,
        can: impl Fn(&super::agent::Capabilities) -> bool,
        method: &str,
        mut params: Value,
    ) {
        if let Some(binding) = binding
            && Some(&binding.agent) == self.agent.name().as_ref()
            && let Some(agent) = self.agent.current()
            && can(agent.caps())
        {
            params["sessionId"] = Value::String(binding.session);
            let _ = agent.link.request(method, params).await;
        }
    }

    /// Closes a session open here, and its agent side where the agent can; its state
    /// (and claim) is handed back.
    async fn close_open(self: &Arc<Self>, session: SessionId) -> Option<Open> {
        let mut open = self.sessions.close(&session)?;
        if let Some((agent_session, generation)) = open.agent.take()
            && let Some(agent) = self.agent.current()
            && agent.generation == generation
            && agent.caps().close
        {
            let _ = agent
                .link
                .request("session/close", json!({ "sessionId": agent_session }))
                .await;
        }
        Some(open)
    }

    pub(super) async fn close_session(self: &Arc<Self>, id: Value, message: Message) -> Answer {
        let session = session_param(&message)?;
        self.store.session(session).await?;
        self.close_open(session).await;
        Ok(Message::result(id, json!({})))
    }

    /// `session/delete`, in the agent too where it can. Deleting twice succeeds.
    pub(super) async fn delete_session(self: &Arc<Self>, id: Value, message: Message) -> Answer {
        let session = session_param(&message)?;
        let stored = self.store.session(session).await.ok();
        // A session another proxy carries is not deleted under it: its claim is taken
        // (or this connection's kept) until the delete is done.
        let claim = match self.sessions.close(&session) {
            Some(open) => open.claim,
            None => self.store.claim_session(session).await?,
        };
        self.store
            .delete_sessions(vec![session], DeleteOptions::default())
            .await?;
        drop(claim);
        let binding = stored.and_then(|s| s.agent);
        self.tell_agent(binding, |c| c.delete, "session/delete", json!({}))
            .await;
        Ok(Message::result(id, json!({})))
    }

    /// `session/fork`: the whole delivered history, or up to the entry a `cursorId` or
    /// `_meta` names; the fork's fresh agent side is told the conversation.
    pub(super) async fn fork_session(self: &Arc<Self>, id: Value, mut message: Message) -> Answer {
        let mut params = message.take_params();
        let origin = session_of(&params)?;
        self.client_cwd(&mut params)?;
        let at = match params["_meta"].get(FORK_AT_META_KEY) {
            None | Some(Value::Null) => None,
            Some(Value::String(at)) => Some(at.parse().map_err(|e| {
                Failure::invalid_params(format!(
                    "{FORK_AT_META_KEY} {at:?} is not an entry id: {e}"
                ))
            })?),
            Some(other) => {
                return Err(Failure::invalid_params(format!(
                    "{FORK_AT_META_KEY} must be an entry id, not {other}"
                )));
            }
        };
        let forked = match params.get("cursorId") {
            None | Some(Value::Null) => self.store.fork_session(origin, at, None).await?,
            Some(_) if at.is_some() => {
                return Err(Failure::invalid_params(format!(
                    "a fork is at a cursorId or at {FORK_AT_META_KEY}, not both"
                )));
            }
            Some(cursor) => self.fork_at_cursor(origin, cursor).await?,
        };
        let fork = forked.session.id;
        let claim = self.store.claim_session(fork).await?;
        self.sessions
            .open(fork, claim, setup_of(&params), None, true);
        let mut result = self.bring_up(fork, None).await?;
        result["sessionId"] = Value::String(fork.to_string());
        Ok(Message::result(id, result))
    }

    /// `session/set_mode`, `set_model` and `set_config_option`: to the agent, and once
    /// it took them recorded, so that a fresh agent side gets them again.
    pub(super) async fn setting(
        self: &Arc<Self>,
        id: Value,
        method: &str,
        mut message: Message,
    ) -> Answer {
        let session = session_param(&message)?;
        let (agent, agent_session) = self.agent_side(session).await?;
        message.set_session_id(&agent_session);
        let params = message.params().cloned().unwrap_or(Value::Null);
        let answer = agent.request(method, params.clone()).await?;
        if answer.outcome().is_ok() {
            let mut kept = params;
            if let Value::Object(kept) = &mut kept {
                kept.remove("sessionId");
            }
            self.store.record_setting(session, method, kept).await?;
        }
        let mut answer = answer;
        answer.set_id(id);
        self.sessions.agent_to_client_result(&mut answer, &agent);
        Ok(answer)
    }

    /// `session/cancel`: to the agent, and the session's waiting permission requests
    /// answered `cancelled` (the turn's own answer comes from the agent).
    pub(super) async fn cancel(self: &Arc<Self>, mut message: Message) {
        let Some(session) = message
            .session_id()
            .and_then(|s| s.parse::<SessionId>().ok())
        else {
            return;
        };
        let Some(agent) = self.agent.current() else {
            return;
        };
        for agent_id in self.sessions.cancel_permissions(&session) {
            let cancelled =
                Message::result(agent_id, json!({ "outcome": { "outcome": "cancelled" } }));
            let _ = agent.link.send(&cancelled).await;
        }
        if let Ok(Some(agent_session)) = self.sessions.client_to_agent(&message, &agent) {
            message.set_session_id(&agent_session);
            let _ = agent.link.send(&message).await;
        }
    }

    /// The running agent and the session's agent side in it, brought up if needed.
    pub(super) async fn agent_side(
        self: &Arc<Self>,
        session: SessionId,
    ) -> Result<(Arc<Running>, String), Failure> {
        let bringing_up = self
            .sessions
            .with_open(&session, |o| o.bringing_up.clone())
            .ok_or_else(|| not_open(session))?;
        let _held = bringing_up.lock().await;
        let agent = self.running_agent().await?;
        let current = self
            .sessions
            .with_open(&session, |o| o.agent.clone())
            .ok_or_else(|| not_open(session))?;
        if let Some((agent_session, generation)) = current
            && generation == agent.generation
        {
            return Ok((agent, agent_session));
        }
        let binding = self.store.session(session).await?.agent;
        self.bring_up_locked(session, &agent, binding.as_ref())
            .await?;
        let agent_session = self
            .sessions
            .with_open(&session, |o| o.agent.clone())
            .flatten()
            .map(|(id, _)| id)
            .ok_or_else(|| agent.gone_error())?;
        Ok((agent, agent_session))
    }

    /// Brings the agent side of an open session up and answers with what the agent
    /// said of it (no session id); `{}` with nothing behind.
    async fn bring_up(
        self: &Arc<Self>,
        session: SessionId,
        binding: Option<&AgentBinding>,
    ) -> Result<Value, Failure> {
        if self.agent.is_nothing() {
            return Ok(json!({}));
        }
        let bringing_up = self
            .sessions
            .with_open(&session, |o| o.bringing_up.clone())
            .ok_or_else(|| not_open(session))?;
        let _held = bringing_up.lock().await;
        let agent = self.running_agent().await?;
        self.bring_up_locked(session, &agent, binding).await
    }

    /// The agent's own resume or load while it still knows the session (its replay is
    /// dropped: the store's is the record), else a new agent session, bound to the
    /// store session, with the recorded settings applied again and the conversation
    /// given with the next prompt.
    async fn bring_up_locked(
        self: &Arc<Self>,
        session: SessionId,
        agent: &Arc<Running>,
        binding: Option<&AgentBinding>,
    ) -> Result<Value, Failure> {
        let setup = self
            .sessions
            .with_open(&session, |o| o.setup.clone())
            .ok_or_else(|| not_open(session))?;
        let name = self.agent.name().unwrap_or_default();
        let caps = agent.caps();
        let method = caps
            .resume
            .then_some("session/resume")
            .or(caps.load.then_some("session/load"));
        if let Some(binding) = binding.filter(|b| b.agent == name)
            && let Some(method) = method
        {
            let mut params = setup.clone();
            params["sessionId"] = Value::String(binding.session.clone());
            self.sessions.with_open(&session, |o| {
                o.agent = Some((binding.session.clone(), agent.generation));
                o.agent_replaying = method == "session/load";
            });
            self.sessions
                .lock()
                .by_agent
                .insert(binding.session.clone(), session);
            let answer = agent.request(method, params).await?;
            self.sessions
                .with_open(&session, |o| o.agent_replaying = false);
            if let Ok(result) = answer.outcome() {
                self.sessions.with_open(&session, |o| {
                    o.fresh = false;
                    o.stale_paths = true;
                });
                let mut result = result.clone();
                strip_session_id(&mut result);
                return Ok(result);
            }
            tracing::info!(
                "the agent no longer knows session {session} ({method} refused); starting it a new agent session"
            );
            let mut inner = self.sessions.lock();
            inner.by_agent.remove(&binding.session);
            if let Some(o) = inner.open.get_mut(&session) {
                o.agent = None;
            }
        }
        let answer = agent.request("session/new", setup).await?;
        let mut result = match answer.outcome() {
            Ok(result) => result.clone(),
            Err(error) => {
                return Err(Failure::internal(format!(
                    "the agent refused a new session for session {session}: {error}"
                )));
            }
        };
        let agent_session = agent_session_of(&result)?;
        self.store
            .bind_agent(
                session,
                AgentBinding {
                    agent: name,
                    session: agent_session.clone(),
                },
            )
            .await?;
        {
            let mut inner = self.sessions.lock();
            inner.by_agent.insert(agent_session.clone(), session);
            if let Some(o) = inner.open.get_mut(&session) {
                o.agent = Some((agent_session.clone(), agent.generation));
                o.fresh = true;
            }
        }
        for setting in self.store.settings(session).await? {
            let mut params = setting.params.clone();
            if let Value::Object(p) = &mut params {
                p.insert("sessionId".to_owned(), Value::String(agent_session.clone()));
            }
            match agent.link.request(&setting.method, params).await {
                Ok(answer) if answer.outcome().is_ok() => {}
                Ok(answer) => tracing::warn!(
                    "the agent refused {} again for session {session}: {:?}",
                    setting.method,
                    answer.outcome().err()
                ),
                Err(_) => return Err(agent.gone_error()),
            }
        }
        strip_session_id(&mut result);
        Ok(result)
    }
}

fn strip_session_id(result: &mut Value) {
    if let Value::Object(r) = result {
        r.remove("sessionId");
    }
}

fn agent_session_of(result: &Value) -> Result<String, Failure> {
    result["sessionId"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| Failure::internal("the agent answered session/new without a sessionId"))
}

impl Proxy {
    /// The client's working directory, absolute as ACP has it. A client that gives none
    /// gets the proxy's own in the request (for the agent), but the store keeps none
    /// for the session (`None`), which is listed under the proxy's own.
    fn client_cwd(&self, params: &mut Value) -> Result<Option<String>, Failure> {
        if params.is_null() {
            *params = json!({});
        }
        match &params["cwd"] {
            Value::String(cwd) if cwd.starts_with('/') => Ok(Some(cwd.clone())),
            Value::Null => {
                if let Value::Object(p) = params {
                    let own = self.options.cwd.to_string_lossy().into_owned();
                    p.insert("cwd".to_owned(), Value::String(own));
                }
                Ok(None)
            }
            cwd => Err(Failure::invalid_params(format!(
                "cwd must be an absolute path, not {cwd}"
            ))),
        }
    }
}

/// What of a `session/new`, `load` or `resume` request brings the agent side up again:
/// everything but the session id.
fn setup_of(params: &Value) -> Value {
    let mut setup = params.clone();
    if let Value::Object(s) = &mut setup {
        s.remove("sessionId");
        s.entry("mcpServers").or_insert_with(|| json!([]));
    }
    setup
}

fn session_param(message: &Message) -> Result<SessionId, Failure> {
    session_of(message.params().unwrap_or(&Value::Null))
}

/// The session a request's params name: a `sessionId` string that is not a session
/// id is not found.
pub(super) fn session_of(params: &Value) -> Result<SessionId, Failure> {
    match &params["sessionId"] {
        Value::String(id) => parse_session(id),
        _ => Err(Failure::invalid_params("sessionId must be a string")),
    }
}
