//! Whole turns from ACP session updates: which are kept, chunks coalesced, tool-call
//! updates merged. Pure; `record` applies it to the tables and `projection` to the
//! log, so the two can only agree.

use std::collections::HashMap;

use agent_client_protocol_schema::v1::{
    self as acp, ContentBlock, ContentChunk, SessionUpdate, ToolCall,
};
use serde::Deserialize;

use crate::ids::{ItemId, SessionId};
use crate::model::{AgentText, ItemBody};

/// Why one update (or one input line) was not taken; nothing of its batch is stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    #[error(
        "a user_message_chunk is not recorded: user messages go through send, which checks their references"
    )]
    UserMessageChunk,
    #[error("{kind} updates are not part of a session's history, so they are not recorded")]
    NotRecorded { kind: String },
    #[error("tool_call_update for tool call {id:?}, which this session has not recorded")]
    UnknownToolCall { id: String },
    #[error("tool call {id:?} is already recorded; a tool_call_update changes it")]
    DuplicateToolCall { id: String },
    #[error("not a JSON object ({detail})")]
    NotJson { detail: String },
    #[error("not an ACP session update: {detail}")]
    NotAnUpdate { detail: String },
    #[error("a session/update notification for session {found:?}, not {session}")]
    OtherSession { found: String, session: SessionId },
}

/// One update: an ACP `SessionUpdate`, or one of a kind the schema does not know, kept
/// as the JSON it came as so it replays as it came.
#[derive(Debug, Clone, PartialEq)]
// Known updates are the common case; boxing them would cost an allocation each.
#[allow(clippy::large_enum_variant)]
pub enum Update {
    Known(SessionUpdate),
    Opaque(serde_json::Value),
}

/// The known `sessionUpdate` kinds; one that does not read as its kind is refused,
/// any other kind is kept opaque.
const KNOWN_KINDS: &[&str] = &[
    "user_message_chunk",
    "agent_message_chunk",
    "agent_thought_chunk",
    "tool_call",
    "tool_call_update",
    "plan",
    "plan_update",
    "plan_removed",
    "available_commands_update",
    "current_mode_update",
    "config_option_update",
    "session_info_update",
    "usage_update",
    "notice",
    "compaction_update",
    "compaction_summary_chunk",
    "subagent_update",
    "child_session_update",
];

impl Update {
    /// Reads one update (a `session/update`'s `update`): a plain text chunk directly,
    /// as [`Update::from_text`] does (the general read of a tagged enum buffers the
    /// object and costs several times as much); anything else through the general read.
    pub fn from_value(value: &serde_json::Value) -> Result<Update, Refusal> {
        if let Some(update) = crate::model::Object::<PlainChunk>::deserialize(value)
            .ok()
            .and_then(|chunk| chunk.0.into_update())
        {
            return Ok(Update::Known(update));
        }
        Update::read_value(value)
    }

    /// The general read of [`Update::from_value`].
    fn read_value(value: &serde_json::Value) -> Result<Update, Refusal> {
        let Some(kind) = value.get("sessionUpdate").and_then(|k| k.as_str()) else {
            return Err(Refusal::NotAnUpdate {
                detail: "an object without a \"sessionUpdate\" kind".to_owned(),
            });
        };
        if !KNOWN_KINDS.contains(&kind) {
            return Ok(Update::Opaque(value.clone()));
        }
        SessionUpdate::deserialize(value)
            .map(Update::Known)
            .map_err(|e| Refusal::NotAnUpdate {
                detail: e.to_string(),
            })
    }

    /// Reads one update from its JSON text: a plain text chunk directly, skipping the
    /// `Value` tree; anything else, and every error, through the general read, so the
    /// update and each refusal are the same either way.
    pub fn from_text(text: &str) -> Result<Update, Refusal> {
        if let Some(update) = serde_json::from_str::<crate::model::Object<PlainChunk>>(text)
            .ok()
            .and_then(|chunk| chunk.0.into_update())
        {
            return Ok(Update::Known(update));
        }
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| Refusal::NotJson {
                detail: e.to_string(),
            })?;
        Update::read_value(&value)
    }

    /// The update as the JSON an agent sends.
    pub fn to_value(&self) -> serde_json::Value {
        match self {
            Update::Known(u) => {
                serde_json::to_value(u).expect("ACP schema values always serialize")
            }
            Update::Opaque(v) => v.clone(),
        }
    }
}

/// A chunk of one plain text block and nothing else: the shape [`Update::from_text`]
/// reads directly. Any other or duplicate field makes it refuse, so where it reads
/// the general read agrees. The kind is a string: an enum would also take
/// `{"agent_message_chunk": null}`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PlainChunk<'a> {
    #[serde(borrow)]
    session_update: std::borrow::Cow<'a, str>,
    #[serde(default)]
    message_id: Option<String>,
    #[serde(borrow)]
    content: crate::model::Object<crate::model::PlainText<'a>>,
}

impl PlainChunk<'_> {
    /// The update, or `None` for a kind that is not a chunk or a block not text.
    fn into_update(self) -> Option<SessionUpdate> {
        let kind: fn(ContentChunk) -> SessionUpdate = match &*self.session_update {
            "user_message_chunk" => SessionUpdate::UserMessageChunk,
            "agent_message_chunk" => SessionUpdate::AgentMessageChunk,
            "agent_thought_chunk" => SessionUpdate::AgentThoughtChunk,
            _ => return None,
        };
        let chunk = ContentChunk::new(self.content.0.into_block()?)
            .message_id(self.message_id.map(acp::MessageId::from));
        Some(kind(chunk))
    }
}

impl From<SessionUpdate> for Update {
    fn from(update: SessionUpdate) -> Update {
        Update::Known(update)
    }
}

/// Reads one input line: a bare update, or a `session/update` notification of `session`.
pub fn parse_line(line: &str, session: SessionId) -> Result<Update, Refusal> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| Refusal::NotJson {
        detail: e.to_string(),
    })?;
    let Some(object) = value.as_object() else {
        return Err(Refusal::NotJson {
            detail: "a JSON value that is not an object".to_owned(),
        });
    };
    if object.contains_key("sessionUpdate") {
        return Update::from_value(&value);
    }
    if object.get("method").and_then(|m| m.as_str()) != Some("session/update") {
        return Err(Refusal::NotAnUpdate {
            detail: "neither a \"sessionUpdate\" object nor a \"session/update\" notification"
                .to_owned(),
        });
    }
    let params = object.get("params").cloned().unwrap_or_default();
    let found = params.get("sessionId").and_then(|s| s.as_str());
    match found {
        Some(found) if found == session.to_string() => {}
        Some(found) => {
            return Err(Refusal::OtherSession {
                found: found.to_owned(),
                session,
            });
        }
        None => {
            return Err(Refusal::NotAnUpdate {
                detail: "a session/update notification without a sessionId".to_owned(),
            });
        }
    }
    Update::from_value(params.get("update").unwrap_or(&serde_json::Value::Null))
}

/// The `sessionUpdate` tag of an update.
pub(crate) fn tag(update: &SessionUpdate) -> String {
    serde_json::to_value(update)
        .ok()
        .and_then(|v| v.get("sessionUpdate")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Which item an outcome changes: one already stored, or the n-th this batch creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Slot {
    Stored(ItemId),
    New(usize),
}

/// What of a history a batch may change: the last message, and the tool calls it names.
#[derive(Debug, Clone, Default)]
pub(crate) struct State {
    pub(crate) tail: Option<(ItemId, ItemBody)>,
    pub(crate) tool_calls: HashMap<acp::ToolCallId, (ItemId, ToolCall)>,
}

/// The items a batch creates or changes, each once, in the order it first touched them,
/// with their final content. `New(n)` slots appear in creation order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Outcome {
    pub(crate) items: Vec<(Slot, ItemBody)>,
    pub(crate) created: usize,
    /// The agent message or thought a later chunk may continue, if the batch ends on one.
    pub(crate) tail: Option<Slot>,
    /// For each item created, in order: the one update that made it (what [`made_by`]
    /// gives for it alone), or `None` once a later update changed it.
    pub(crate) made_by: Vec<Option<usize>>,
}

/// The tool-call ids a batch names: what `State::tool_calls` must hold before `apply`.
pub(crate) fn tool_call_ids(updates: &[Update]) -> Vec<acp::ToolCallId> {
    let mut ids: Vec<acp::ToolCallId> = Vec::new();
    for update in updates {
        let id = match update {
            Update::Known(SessionUpdate::ToolCall(c)) => &c.tool_call_id,
            Update::Known(SessionUpdate::ToolCallUpdate(u)) => &u.tool_call_id,
            _ => continue,
        };
        if !ids.contains(id) {
            ids.push(id.clone());
        }
    }
    ids
}

/// Applies a batch to `state`, all or nothing: the first update refused, with its index.
pub(crate) fn apply(mut state: State, updates: &[Update]) -> Result<Outcome, (usize, Refusal)> {
    let mut out = Outcome::default();
    let mut index: HashMap<Slot, usize> = HashMap::new();
    // Where tool calls live now: stored ones not yet touched stay in `state`.
    let mut calls: HashMap<acp::ToolCallId, Slot> = state
        .tool_calls
        .iter()
        .map(|(id, (item, _))| (id.clone(), Slot::Stored(*item)))
        .collect();
    let mut tail: Option<Slot> = state.tail.as_ref().map(|(id, _)| Slot::Stored(*id));

    for (i, update) in updates.iter().enumerate() {
        let update = match update {
            Update::Known(update) => update,
            Update::Opaque(value) => {
                create(&mut out, &mut index, i, ItemBody::Opaque(value.clone()));
                tail = None;
                continue;
            }
        };
        match update {
            SessionUpdate::AgentMessageChunk(chunk) | SessionUpdate::AgentThoughtChunk(chunk) => {
                let thought = matches!(update, SessionUpdate::AgentThoughtChunk(_));
                let continued = tail.filter(|slot| {
                    let body = body_of(&out, &index, &state, *slot);
                    match (body, thought) {
                        (Some(ItemBody::AgentMessage(t)), false)
                        | (Some(ItemBody::AgentThought(t)), true) => continues(t, chunk),
                        _ => false,
                    }
                });
                match continued {
                    Some(slot) => {
                        let at = touch(&mut out, &mut index, &mut state, slot);
                        if let ItemBody::AgentMessage(t) | ItemBody::AgentThought(t) =
                            &mut out.items[at].1
                        {
                            push_content(&mut t.content, chunk.content.clone());
                        }
                    }
                    None => {
                        let text = AgentText {
                            message_id: chunk.message_id.clone(),
                            content: vec![chunk.content.clone()],
                        };
                        let body = if thought {
                            ItemBody::AgentThought(text)
                        } else {
                            ItemBody::AgentMessage(text)
                        };
                        tail = Some(create(&mut out, &mut index, i, body));
                    }
                }
                continue;
            }
            SessionUpdate::ToolCall(call) => {
                if calls.contains_key(&call.tool_call_id) {
                    return Err((
                        i,
                        Refusal::DuplicateToolCall {
                            id: call.tool_call_id.to_string(),
                        },
                    ));
                }
                let slot = create(&mut out, &mut index, i, ItemBody::ToolCall(call.clone()));
                calls.insert(call.tool_call_id.clone(), slot);
            }
            SessionUpdate::ToolCallUpdate(change) => {
                let Some(slot) = calls.get(&change.tool_call_id).copied() else {
                    return Err((
                        i,
                        Refusal::UnknownToolCall {
                            id: change.tool_call_id.to_string(),
                        },
                    ));
                };
                let at = touch(&mut out, &mut index, &mut state, slot);
                if let ItemBody::ToolCall(call) = &mut out.items[at].1 {
                    // ACP's own merge: fields present replace, absent ones stay.
                    call.update(change.fields.clone());
                }
            }
            SessionUpdate::Plan(plan) => {
                create(&mut out, &mut index, i, ItemBody::Plan(plan.clone()));
            }
            SessionUpdate::AvailableCommandsUpdate(_)
            | SessionUpdate::CurrentModeUpdate(_)
            | SessionUpdate::SessionInfoUpdate(_)
            | SessionUpdate::ConfigOptionUpdate(_) => {
                create(&mut out, &mut index, i, ItemBody::Session(update.clone()));
            }
            SessionUpdate::UsageUpdate(_) => {
                // Kept as it came under the `opaque` kind (the items table's `kind`
                // has no `usage_update`); the figures follow it (`take_figures`).
                create(
                    &mut out,
                    &mut index,
                    i,
                    ItemBody::Opaque(
                        serde_json::to_value(update).expect("ACP schema values always serialize"),
                    ),
                );
            }
            SessionUpdate::UserMessageChunk(_) => return Err((i, Refusal::UserMessageChunk)),
            other => return Err((i, Refusal::NotRecorded { kind: tag(other) })),
        }
        // Any update other than a chunk ends the agent message or thought.
        tail = None;
    }
    out.tail = tail;
    Ok(out)
}

/// Takes into `figures` the latest context window and cost the `usage_update`s say
/// (one without a cost leaves it); the write and the projection both use it.
pub(crate) fn take_figures(figures: &mut crate::model::SessionFigures, updates: &[Update]) {
    use crate::model::{Context, Cost};
    for update in updates {
        if let Update::Known(SessionUpdate::UsageUpdate(u)) = update {
            figures.context = Some(Context {
                used: u.used,
                size: u.size,
            });
            if let Some(cost) = &u.cost {
                figures.cost = Some(Cost {
                    amount: cost.amount,
                    currency: cost.currency.clone(),
                });
            }
        }
    }
}

/// Whether a recorded item is a `usage_update` (kept under the `opaque` kind).
pub(crate) fn is_usage(body: &ItemBody) -> bool {
    matches!(body, ItemBody::Opaque(v)
        if v.get("sessionUpdate").and_then(serde_json::Value::as_str) == Some("usage_update"))
}

/// Whether `updates` hold a `usage_update`.
pub(crate) fn reports_usage(updates: &[Update]) -> bool {
    updates
        .iter()
        .any(|u| matches!(u, Update::Known(SessionUpdate::UsageUpdate(_))))
}

/// A chunk continues an agent message when it names the same message, or none.
fn continues(text: &AgentText, chunk: &ContentChunk) -> bool {
    chunk.message_id.is_none() || chunk.message_id == text.message_id
}

/// Adjacent text joins the text block before it when nothing else differs.
pub(crate) fn push_content(content: &mut Vec<ContentBlock>, block: ContentBlock) {
    if let (Some(ContentBlock::Text(last)), ContentBlock::Text(next)) = (content.last_mut(), &block)
        && last.annotations == next.annotations
        && last.meta == next.meta
    {
        last.text.push_str(&next.text);
        return;
    }
    content.push(block);
}

fn body_of<'a>(
    out: &'a Outcome,
    index: &HashMap<Slot, usize>,
    state: &'a State,
    slot: Slot,
) -> Option<&'a ItemBody> {
    if let Some(&at) = index.get(&slot) {
        return Some(&out.items[at].1);
    }
    match (slot, &state.tail) {
        (Slot::Stored(id), Some((tail, body))) if *tail == id => Some(body),
        _ => None,
    }
}

/// Creates an item of `body`, made by update `by` of the batch.
fn create(out: &mut Outcome, index: &mut HashMap<Slot, usize>, by: usize, body: ItemBody) -> Slot {
    let slot = Slot::New(out.created);
    out.created += 1;
    out.made_by.push(Some(by));
    index.insert(slot, out.items.len());
    out.items.push((slot, body));
    slot
}

/// The position in `out` of the item in `slot`, moving a stored one there first.
fn touch(
    out: &mut Outcome,
    index: &mut HashMap<Slot, usize>,
    state: &mut State,
    slot: Slot,
) -> usize {
    if let Slot::New(n) = slot {
        // Changed again: no longer what one update made.
        out.made_by[n] = None;
    }
    if let Some(&at) = index.get(&slot) {
        return at;
    }
    let Slot::Stored(id) = slot else {
        unreachable!("a new slot is indexed when it is created")
    };
    let body = match state.tail.take() {
        Some((tail, body)) if tail == id => body,
        other => {
            state.tail = other;
            let key = state
                .tool_calls
                .iter()
                .find(|(_, (item, _))| *item == id)
                .map(|(key, _)| key.clone())
                .expect("a stored slot is the tail or one of the state's tool calls");
            let (_, call) = state
                .tool_calls
                .remove(&key)
                .expect("the key was just found");
            ItemBody::ToolCall(call)
        }
    };
    index.insert(slot, out.items.len());
    out.items.push((slot, body));
    out.items.len() - 1
}

/// The item `update` makes first in a batch with nothing before it (what a row naming
/// it as its maker holds, [`Outcome::made_by`]); `None` if it makes no item.
pub(crate) fn made_by(update: &Update) -> Option<ItemBody> {
    let mut outcome = apply(State::default(), std::slice::from_ref(update)).ok()?;
    match outcome.items.pop() {
        Some((Slot::New(0), body)) if outcome.items.is_empty() => Some(body),
        _ => None,
    }
}

/// The updates an ACP agent sends for a recorded item on `session/load`: a chunk per
/// content block of a message, one merged `tool_call`, anything else as stored.
pub fn replay_updates(body: &ItemBody) -> Vec<Update> {
    let chunks = |text: &AgentText| -> Vec<ContentChunk> {
        text.content
            .iter()
            .map(|block| ContentChunk::new(block.clone()).message_id(text.message_id.clone()))
            .collect()
    };
    match body {
        ItemBody::AgentMessage(text) => chunks(text)
            .into_iter()
            .map(|c| SessionUpdate::AgentMessageChunk(c).into())
            .collect(),
        ItemBody::AgentThought(text) => chunks(text)
            .into_iter()
            .map(|c| SessionUpdate::AgentThoughtChunk(c).into())
            .collect(),
        ItemBody::ToolCall(call) => vec![SessionUpdate::ToolCall(call.clone()).into()],
        ItemBody::Plan(plan) => vec![SessionUpdate::Plan(plan.clone()).into()],
        ItemBody::Session(update) => vec![update.clone().into()],
        ItemBody::Opaque(value) => vec![Update::Opaque(value.clone())],
    }
}

/// What a model request carries of an item: an agent message's text blocks; the
/// rest is the agent's working or the client's state, not conversation (`None`).
pub fn model_text(body: &ItemBody) -> Option<Vec<ContentBlock>> {
    let ItemBody::AgentMessage(text) = body else {
        return None;
    };
    let blocks: Vec<ContentBlock> = text
        .content
        .iter()
        .filter(|b| matches!(b, ContentBlock::Text(_)))
        .cloned()
        .collect();
    (!blocks.is_empty()).then_some(blocks)
}

#[cfg(test)]
mod tests;
