//! A prompt's turn through the proxy: the client's blocks stored as a user message,
//! dispatched so each attachment reaches the agent with the path of a live read, the
//! agent's updates relayed at once and recorded, and the answer relayed only once
//! everything the turn recorded is durable. A prompt that arrives while a turn runs is
//! stored queued and delivered when that turn ends. With nothing behind, a turn is
//! the stored prompt alone, ended `end_turn`.

mod recorder;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agent_client_protocol_schema::v1::ContentBlock;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::agent::{Capabilities, Running};
use super::rpc::{Message, code};
use super::{Answer, Failure, Proxy, lock};
use crate::dispatch::{Memo, Mode, ModelMessage, Part};
use crate::ids::{MessageId, SessionId};
use crate::model::{Delivery, TurnEnd};
use crate::store::{Prompt, PromptBlock, Upload, whole};
use recorder::Recorder;

/// The turns of this connection's sessions: which one runs, and the prompts queued
/// behind it.
#[derive(Default)]
pub(crate) struct Turns {
    sessions: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<TurnState>>>>,
    recorders: Mutex<HashMap<SessionId, Recorder>>,
    /// Prompts as the client sent them, until their turn delivers them: the store
    /// keeps them redacted, the agent gets them as they were.
    given: Mutex<HashMap<MessageId, crate::model::Message>>,
}

#[derive(Default)]
struct TurnState {
    running: bool,
    /// Prompts queued while the turn ran: each gets the answer of the turn that
    /// delivers it.
    waiting: Vec<oneshot::Sender<Result<Value, Failure>>>,
}

impl Turns {
    fn state(&self, session: SessionId) -> Arc<tokio::sync::Mutex<TurnState>> {
        lock(&self.sessions).entry(session).or_default().clone()
    }
}

/// How long archiving a session waits for its cancelled turn to end before it
/// closes the session anyway.
const CANCEL_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Proxy {
    /// Cancels the session's running turn here, as `session/cancel` would, and waits
    /// (up to [`CANCEL_WAIT`]) for its end to be recorded.
    pub(super) async fn cancel_turn(self: &Arc<Self>, session: SessionId) {
        let state = self.turns.state(session);
        if !state.lock().await.running {
            return;
        }
        let cancel = Message::notification(
            "session/cancel",
            json!({ "sessionId": session.to_string() }),
        );
        self.cancel(cancel).await;
        let deadline = std::time::Instant::now() + CANCEL_WAIT;
        while state.lock().await.running && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    pub(super) async fn prompt(self: &Arc<Self>, id: Value, mut message: Message) -> Answer {
        let mut params = message.take_params();
        // The request's shape first, as for any method: then whether its session is.
        let Value::Array(blocks) = params.get_mut("prompt").map_or(Value::Null, Value::take) else {
            return Err(Failure::invalid_params(
                "prompt must be an array of content blocks",
            ));
        };
        let session = super::sessions::session_of(&params)?;
        if !self.sessions.is_open(&session) {
            // An unknown session is named as such, not as one that is merely closed.
            self.store.session(session).await?;
            return Err(Failure::invalid_params(format!(
                "session {session} is not open on this connection: call session/new, \
                 session/load or session/resume first"
            )));
        }
        let mut prompt = client_prompt(blocks)?;
        let state = self.turns.state(session);
        let mut turn = state.lock().await;
        if turn.running {
            // Stored while the lock is held, so the running turn, which takes the
            // waiting list under the same lock, drains this message too.
            prompt.delivery = Delivery::Queued;
            self.keep_given(self.store.send_prompt_as_given(session, prompt).await?);
            let (tx, rx) = oneshot::channel();
            turn.waiting.push(tx);
            drop(turn);
            let result = rx.await.map_err(|_| {
                Failure::internal("the turn that was to deliver this prompt ended")
            })??;
            return Ok(Message::result(id, result));
        }
        let stored = self.keep_given(self.store.send_prompt_as_given(session, prompt).await?);
        turn.running = true;
        drop(turn);
        let result = self
            .run_turns(session, id.clone(), params, vec![stored.id])
            .await;
        Ok(Message::result(id, result?))
    }

    /// Keeps a prompt as given for its delivery; returns the stored message.
    fn keep_given(
        &self,
        (stored, given): (crate::model::Message, crate::model::Message),
    ) -> crate::model::Message {
        if given != stored {
            lock(&self.turns.given).insert(stored.id, given);
        }
        stored
    }

    /// Runs the turn for `messages` and returns its outcome. Prompts queued meanwhile
    /// are delivered by turns on a task of their own, so the first prompt is answered
    /// as its turn ends.
    async fn run_turns(
        self: &Arc<Self>,
        session: SessionId,
        client_id: Value,
        params: Value,
        messages: Vec<MessageId>,
    ) -> Result<Value, Failure> {
        let first = self.run_turn(session, &client_id, &params, messages).await;
        let state = self.turns.state(session);
        let mut turn = state.lock().await;
        if turn.waiting.is_empty() {
            turn.running = false;
        } else {
            drop(turn);
            let proxy = self.clone();
            tokio::spawn(async move { proxy.run_queued(session, client_id, params).await });
        }
        first
    }

    /// The turns that deliver queued prompts; the session's turn stays running until
    /// none is left.
    async fn run_queued(self: Arc<Self>, session: SessionId, client_id: Value, params: Value) {
        let state = self.turns.state(session);
        loop {
            let mut turn = state.lock().await;
            if turn.waiting.is_empty() {
                turn.running = false;
                return;
            }
            let waiting = std::mem::take(&mut turn.waiting);
            drop(turn);
            let outcome = self.run_drained_turn(session, &client_id, &params).await;
            for waiter in waiting {
                let _ = waiter.send(outcome.clone());
            }
        }
    }

    async fn run_drained_turn(
        self: &Arc<Self>,
        session: SessionId,
        client_id: &Value,
        params: &Value,
    ) -> Result<Value, Failure> {
        let queued = whole(|q| self.store.messages(session, Some(Delivery::Queued), q)).await?;
        let ids: Vec<MessageId> = queued.iter().map(|m| m.id).collect();
        if ids.is_empty() {
            return Ok(json!({ "stopReason": "end_turn" }));
        }
        self.store.mark_delivered(session, ids.clone()).await?;
        self.run_turn(session, client_id, params, ids).await
    }

    /// One turn, marked begun; once the recorder has made everything before the
    /// agent's answer durable, marked ended with its stop reason (or failed).
    async fn run_turn(
        self: &Arc<Self>,
        session: SessionId,
        client_id: &Value,
        params: &Value,
        messages: Vec<MessageId>,
    ) -> Result<Value, Failure> {
        let turn = self.store.begin_turn(session, messages.clone()).await?;
        self.cursors.turn_begins(session);
        let outcome = self.turn_body(session, client_id, params, &messages).await;
        let flushed = self.recorder(session).flush().await;
        let end = match (&outcome, &flushed) {
            (Ok(result), Ok(())) => TurnEnd::Stopped {
                stop_reason: result["stopReason"]
                    .as_str()
                    .unwrap_or("end_turn")
                    .to_owned(),
            },
            (_, Err(e)) | (Err(e), _) => TurnEnd::Failed {
                reason: e.message.clone(),
            },
        };
        let usage = outcome
            .as_ref()
            .ok()
            .and_then(crate::model::TurnUsage::of_answer);
        self.store.end_turn(session, turn.id, end, usage).await?;
        flushed?;
        outcome
    }

    async fn turn_body(
        self: &Arc<Self>,
        session: SessionId,
        client_id: &Value,
        params: &Value,
        messages: &[MessageId],
    ) -> Result<Value, Failure> {
        let mut given: Vec<Option<crate::model::Message>> = {
            let mut kept = lock(&self.turns.given);
            messages.iter().map(|id| kept.remove(id)).collect()
        };
        if self.agent.is_nothing() {
            // Nothing answers, and nothing would take a dispatch's blocks.
            return Ok(json!({ "stopReason": "end_turn" }));
        }
        let (agent, agent_session) = self.agent_side(session).await?;
        let (fresh, stale_paths) = self
            .sessions
            .with_open(&session, |o| {
                (
                    std::mem::take(&mut o.fresh),
                    std::mem::take(&mut o.stale_paths),
                )
            })
            .unwrap_or((false, false));
        let memo = Memo::new();
        let mut prompt = Vec::new();
        if fresh {
            prompt = self
                .restored_conversation(session, messages[0], agent.caps())
                .await?;
        } else if stale_paths {
            prompt = self.current_paths(session, messages[0]).await?;
        }
        for (message, given) in messages.iter().zip(given.iter_mut()) {
            let parts = match given.take() {
                Some(given) => {
                    self.store
                        .dispatch_given_parts(session, given, Mode::Degrade, memo.clone())
                        .await?
                }
                None => {
                    self.store
                        .dispatch(session, Some(*message), Mode::Degrade, memo.clone())
                        .await?
                }
            };
            prompt.extend(agent_blocks(&parts, agent.caps()));
        }
        let mut agent_params = params.clone();
        agent_params["sessionId"] = Value::String(agent_session.clone());
        agent_params["prompt"] = serde_json::to_value(&prompt)
            .map_err(|e| Failure::internal(format!("cannot write the prompt: {e}")))?;
        let request = Message::request(Value::Null, "session/prompt", agent_params);
        let (agent_id, answer) = agent.link.forward(request).await;
        self.sessions.track_forwarded(client_id, agent_id);
        let answer = match self.options.agent_timeout {
            None => Some(answer.await),
            Some(limit) => self.unless_silent(session, limit, answer).await,
        };
        self.sessions.untrack_forwarded(client_id);
        let Some(answer) = answer else {
            let limit = self.options.agent_timeout.unwrap_or_default();
            tracing::warn!(
                "the agent sent nothing for session {session} in {limit:?}: ending the turn"
            );
            // The agent may only be stuck: it is told to stop the turn, as a client's
            // cancellation would; its late answer, if any, goes nowhere.
            let cancel =
                Message::notification("session/cancel", json!({ "sessionId": agent_session }));
            let _ = agent.link.send(&cancel).await;
            return Err(Failure::internal(format!(
                "the agent sent nothing for {limit:?} (--agent-timeout): the turn was ended"
            )));
        };
        let answer = answer.map_err(|_| agent.gone_error())?;
        match answer.outcome() {
            Ok(result) => Ok(result.clone()),
            Err(error) => Err(Failure {
                code: error["code"].as_i64().unwrap_or(code::INTERNAL_ERROR),
                message: error["message"]
                    .as_str()
                    .unwrap_or("the agent failed the prompt")
                    .to_owned(),
                data: error.get("data").cloned(),
            }),
        }
    }

    /// `answer`, unless the agent sends nothing for `session` for `limit` while no
    /// request of its waits on the client: then `None`.
    async fn unless_silent<T>(
        &self,
        session: SessionId,
        limit: std::time::Duration,
        answer: impl Future<Output = T>,
    ) -> Option<T> {
        tokio::pin!(answer);
        self.sessions.heard_from(&session);
        loop {
            let Some((last, asking)) = self
                .sessions
                .with_open(&session, |o| (o.last_heard, o.asking))
            else {
                // Closed meanwhile: the answer is still the turn's end.
                return Some(answer.await);
            };
            if asking == 0 && last.elapsed() >= limit {
                return None;
            }
            let wake = if asking > 0 {
                std::time::Instant::now() + limit
            } else {
                last + limit
            };
            tokio::select! {
                out = &mut answer => return Some(out),
                () = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    /// A `session/update` from the agent: relayed at once, and recorded when it is
    /// history. What the agent replays for its own `session/load` is neither (the
    /// store's replay is the record).
    pub(super) async fn agent_update(self: &Arc<Self>, agent: &Arc<Running>, mut message: Message) {
        let Some(session) = self.sessions.agent_to_client(&mut message, agent) else {
            tracing::debug!(
                "dropped a session/update for a session this connection does not carry"
            );
            return;
        };
        self.sessions.heard_from(&session);
        if self
            .sessions
            .with_open(&session, |o| o.agent_replaying)
            .unwrap_or(false)
        {
            return;
        }
        let cursor = match self.cursors.relayed(session, &mut message) {
            super::cursors::Relay::Drop => return,
            super::cursors::Relay::Pass(cursor) => cursor,
        };
        let kind = message
            .params()
            .and_then(|p| p["update"]["sessionUpdate"].as_str())
            .unwrap_or_default();
        if kind == "session_info_update"
            && let Some(title) = message
                .params()
                .and_then(|p| p["update"]["title"].as_str())
                .filter(|t| !t.trim().is_empty())
        {
            // In force unless an explicit title is there (`TitleSource::replaces`).
            if let Err(e) = self
                .store
                .set_title(session, title.to_owned(), crate::model::TitleSource::Agent)
                .await
            {
                tracing::warn!("cannot record the agent's title of session {session}: {e}");
            }
        }
        let record = is_history(kind) && self.options.record_updates;
        // Relayed before it is queued for recording, so that nothing of the recorder's
        // stands before the relay; then the update moves to the recorder, not copied.
        let _ = self.client.send(&message).await;
        if let Some(cursor) = cursor {
            let _ = self.client.send(&cursor).await;
        }
        if record {
            let update = message
                .params_mut()
                .and_then(|p| p.get_mut("update"))
                .map_or(Value::Null, Value::take);
            self.recorder(session).record(update).await;
        }
    }

    fn recorder(self: &Arc<Self>, session: SessionId) -> Recorder {
        lock(&self.turns.recorders)
            .entry(session)
            .or_insert_with(|| Recorder::start(self.store.clone(), session))
            .clone()
    }

    /// The history replayed to the client: the store's `acp-updates` stream written
    /// straight into frames; from the client's `replayFrom` point when it gave one,
    /// then ended with the replay-complete marker.
    pub(super) async fn replay_to_client(
        self: &Arc<Self>,
        session: SessionId,
        point: Option<crate::restore::Replay>,
    ) -> Result<(), Failure> {
        let budget = crate::dispatch::DEFAULT_MEMO_BUDGET;
        let turns = whole(|q| self.store.turns(session, q)).await?;
        let marked = point.is_some();
        let mut stream = self
            .store
            .restore(session, budget, point.unwrap_or_default())
            .await?;
        let partial = stream.partial().copied();
        let cannot =
            |e: std::io::Error| Failure::internal(format!("cannot replay session {session}: {e}"));
        let mut writer = crate::format::StreamWriter::begin_replay(
            Vec::new(),
            crate::format::Format::AcpUpdates,
            session,
            "",
            partial.as_ref(),
        )
        .map_err(cannot)?
        .marking_turns(turns);
        let cursors = self.cursors.on();
        while let Some(item) = stream.next().await {
            let mut item = item?;
            let cursor = cursors
                .then(|| super::cursors::replayed(session, &mut item))
                .flatten();
            writer.item(&item).map_err(cannot)?;
            self.send_lines(std::mem::take(writer.get_mut())).await?;
            if let Some(cursor) = cursor {
                self.send_lines(cursor.to_bytes()).await?;
            }
        }
        // A partial replay's opening notice, when the stream held no item.
        self.send_lines(writer.finish().map_err(cannot)?).await?;
        if marked {
            let complete = crate::format::notification_line(crate::format::replay_complete(
                session,
                partial.as_ref(),
            ));
            let line = serde_json::to_vec(&complete).map_err(|e| cannot(e.into()))?;
            self.send_lines(line).await?;
        }
        Ok(())
    }

    /// Sends each line of `lines` (newline-separated JSON) to the client as a frame.
    async fn send_lines(self: &Arc<Self>, lines: Vec<u8>) -> Result<(), Failure> {
        for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            self.client
                .send_bytes(line.to_vec())
                .await
                .map_err(|_| Failure::internal("the client went away during the replay"))?;
        }
        Ok(())
    }
}

/// Whether an update kind is part of a session's history: not the echo of the user's
/// message (the store has it), nor notices. Unknown kinds are kept as they came.
fn is_history(kind: &str) -> bool {
    !matches!(kind, "user_message_chunk" | "notice" | "")
}

/// The client's prompt as the store takes it: images, embedded resources and blobs
/// (but `file://` ones) as uploads; other blocks but text kept as the JSON they came
/// as. A block that is not an ACP content block refuses the prompt before anything
/// is stored.
fn client_prompt(blocks: Vec<Value>) -> Result<Prompt, Failure> {
    use agent_client_protocol_schema::v1::EmbeddedResourceResource as R;
    let mut out = Vec::with_capacity(blocks.len());
    for (i, raw) in blocks.into_iter().enumerate() {
        let block: ContentBlock = serde_json::from_value(raw.clone()).map_err(|e| {
            Failure::invalid_params(format!("prompt block {i} is not a content block: {e}"))
        })?;
        let decoded = |data: &str| {
            base64_simd::STANDARD
                .decode_to_vec(data.trim())
                .map_err(|_| {
                    Failure::invalid_params(format!("prompt block {i} is not valid base64"))
                })
        };
        let upload = |name: String, bytes: Vec<u8>, meta| PromptBlock::Upload {
            upload: Upload { name, bytes },
            meta,
        };
        let piece = match block {
            ContentBlock::Text(t) => PromptBlock::Text {
                text: t.text,
                meta: t.meta,
            },
            ContentBlock::Image(image) => upload(
                crate::acp::upload_name(image.uri.as_deref(), Some(&image.mime_type)),
                decoded(&image.data)?,
                image.meta,
            ),
            ContentBlock::Resource(embedded) => match embedded.resource {
                R::TextResourceContents(r) if !r.uri.starts_with("file:") => upload(
                    crate::acp::upload_name(Some(&r.uri), r.mime_type.as_deref()),
                    r.text.into_bytes(),
                    embedded.meta,
                ),
                R::BlobResourceContents(r) if !r.uri.starts_with("file:") => upload(
                    crate::acp::upload_name(Some(&r.uri), r.mime_type.as_deref()),
                    decoded(&r.blob)?,
                    embedded.meta,
                ),
                _ => PromptBlock::Verbatim(raw),
            },
            _ => PromptBlock::Verbatim(raw),
        };
        out.push(piece);
    }
    Ok(Prompt {
        blocks: out,
        delivery: Delivery::Delivered,
    })
}

/// A dispatched message as the agent takes it: the path context as a text block
/// before an attachment for an agent that does not read it in `_meta`; for an agent
/// that takes no images the context alone, and without embedded context a
/// `resource_link` to the live path.
pub(crate) fn agent_blocks(message: &ModelMessage, caps: &Capabilities) -> Vec<ContentBlock> {
    let mut out = Vec::with_capacity(message.parts.len() * 2);
    for part in &message.parts {
        let Part::Attachment(attached) = part else {
            out.push(part.to_block());
            continue;
        };
        let context = attached.context.as_str();
        let block = part.to_block();
        let is_image = matches!(block, ContentBlock::Image(_));
        let is_resource = matches!(block, ContentBlock::Resource(_));
        if !caps.reads_context || (is_image && !caps.image) || (is_resource && !caps.embedded) {
            out.push(ContentBlock::Text(
                agent_client_protocol_schema::v1::TextContent::new(context.to_owned()),
            ));
        }
        if is_image && !caps.image {
            continue;
        }
        if is_resource && !caps.embedded {
            out.push(crate::dispatch::live_link(attached));
            continue;
        }
        out.push(block);
    }
    out
}
