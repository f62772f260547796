//! The ACP shapes and their one builder each: the restore object and its entries, the
//! `session/update` notifications of a replay, and the `session/prompt` request frame.
//! A library caller gets the typed values; the writers serialize the same builders'
//! values with a placeholder where a content block goes and write each block from its
//! part (`Part::write_json`). No IO besides the given writer.

use std::io::{self, Write};

use agent_client_protocol_schema::v1::{
    ContentBlock, ContentChunk, JsonRpcMessage, MessageId as AcpMessageId, Notification, Plan,
    PromptRequest, Request, RequestId, SessionInfoUpdate, SessionNotification, SessionUpdate,
    ToolCall,
};
use serde::Serialize;
use serde::ser::SerializeSeq;

use super::json;
use crate::dispatch::shell::{self, Hole, Scratch, Shell};
use crate::dispatch::{ModelMessage, Part};
use crate::ids::{ItemId, MessageId, SessionId};
use crate::model::{Item, ItemBody, Message, Role};
use crate::restore::Partial;
use crate::restore::ReplayItem;
use crate::turns;

/// The method of a replay's notifications.
pub const SESSION_UPDATE: &str = "session/update";
/// The method of a prompt request.
pub const SESSION_PROMPT: &str = "session/prompt";

/// The object `restore --format acp` prints: `{"sessionId","messages":[…]}`, each
/// entry a [`RestoreMessage`] or a [`RecordedEntry`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreObject<M> {
    pub session_id: SessionId,
    /// Only a replay from a point has it: where it starts and what it left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partial: Option<Partial>,
    pub messages: M,
}

/// One message of the restore object: `{"id","role","content":[ContentBlock]}`.
/// (`I` is a message id but for the writers' shells, whose id is a placeholder.)
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RestoreMessage<C, I = MessageId> {
    pub id: I,
    pub role: Role,
    pub content: C,
}

/// An entry of the restore object's `messages`, as a reader collects them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum RestoreEntry<'a> {
    Message(RestoreMessage<&'a [ContentBlock]>),
    Recorded(RecordedEntry<'a>),
}

/// A recorded item in the restore object's `messages`, beside the messages' own
/// `{"id","role","content"}`. The `role` says which shape it is:
/// `{"id","role":"assistant","content"}` (an agent message),
/// `{"id","role":"thought","content"}` (a role of its own, so a reader that takes
/// every `assistant` entry as conversation never takes a thought for one),
/// `{"id","role":"tool","toolCall"}` (in its merged final state),
/// `{"id","role":"plan","plan"}` and `{"id","role":"session","update"}` (a
/// session-level `SessionUpdate`, as the agent sent it). `id` is the item's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedEntry<'a> {
    id: ItemId,
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a [ContentBlock]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call: Option<&'a ToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<&'a Plan>,
    #[serde(skip_serializing_if = "Option::is_none")]
    update: Option<&'a SessionUpdate>,
    /// An opaque update (a kind the schema does not know), as it came: written under
    /// `update`, as a session-level one is.
    #[serde(rename = "update", skip_serializing_if = "Option::is_none")]
    opaque: Option<&'a serde_json::Value>,
}

impl<'a> RecordedEntry<'a> {
    pub fn new(item: &'a Item) -> RecordedEntry<'a> {
        let mut entry = RecordedEntry {
            id: item.id,
            role: "",
            content: None,
            tool_call: None,
            plan: None,
            update: None,
            opaque: None,
        };
        match &item.body {
            ItemBody::AgentMessage(text) => {
                entry.role = "assistant";
                entry.content = Some(&text.content);
            }
            ItemBody::AgentThought(text) => {
                entry.role = "thought";
                entry.content = Some(&text.content);
            }
            ItemBody::ToolCall(call) => {
                entry.role = "tool";
                entry.tool_call = Some(call);
            }
            ItemBody::Plan(plan) => {
                entry.role = "plan";
                entry.plan = Some(plan);
            }
            ItemBody::Session(update) => {
                entry.role = "session";
                entry.update = Some(update);
            }
            ItemBody::Opaque(update) => {
                entry.role = "session";
                entry.opaque = Some(update);
            }
        }
        entry
    }
}

/// A value that could not be cut, written with its content in place.
fn whole(out: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    shell::written_whole();
    json(out, value)
}

/// `n` placeholder blocks, serialized as a list: where a writer puts `n` parts' blocks.
struct Holes(usize);

impl Serialize for Holes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0))?;
        for _ in 0..self.0 {
            seq.serialize_element(shell::placeholder_block())?;
        }
        seq.end()
    }
}

/// Shells a writer keeps from one message to the next: a restore message's for each
/// role and number of parts, and a notification line's for each role, each with the
/// message's id as one more hole, so a message costs a lookup rather than a
/// serialization. Messages with more parts than [`KEPT_PARTS`] are cut one by one.
#[derive(Debug, Default)]
pub(super) struct Kept {
    restore: Vec<((Role, usize), Option<Shell>)>,
    lines: Vec<(Role, Option<Shell>)>,
}

const KEPT_PARTS: usize = 16;

/// The shell kept under `key`, made by `cut` the first time.
fn kept<K: PartialEq + Copy>(
    shells: &mut Vec<(K, Option<Shell>)>,
    key: K,
    cut: impl FnOnce() -> Option<Shell>,
) -> &Option<Shell> {
    let at = match shells.iter().position(|(k, _)| *k == key) {
        Some(at) => at,
        None => {
            shells.push((key, cut()));
            shells.len() - 1
        }
    };
    &shells[at].1
}

/// A restore message's shell: the id a placeholder string, then `parts` blocks.
fn restore_shell(role: Role, parts: usize) -> Option<Shell> {
    let shape = RestoreMessage {
        id: shell::placeholder(),
        role,
        content: Holes(parts),
    };
    let holes: Vec<Hole> = std::iter::once(Hole::String)
        .chain(std::iter::repeat_n(Hole::block(), parts))
        .collect();
    Shell::cut(&shape, &holes)
}

/// One message of the restore object, its id and blocks written into its shell.
pub(super) fn restore_message(
    out: &mut impl Write,
    kept_shells: &mut Kept,
    m: &ModelMessage,
) -> io::Result<()> {
    let (role, parts) = (m.message.role, m.parts.len());
    let fresh;
    let shell = if parts <= KEPT_PARTS {
        kept(&mut kept_shells.restore, (role, parts), || {
            restore_shell(role, parts)
        })
    } else {
        fresh = restore_shell(role, parts);
        &fresh
    };
    match shell {
        Some(shell) => shell.write(out, |i, out| match i {
            0 => json(out, &m.message.id),
            i => m.parts[i - 1].write_json(out),
        }),
        None => whole(
            out,
            &RestoreMessage {
                id: m.message.id,
                role,
                content: m.to_blocks(),
            },
        ),
    }
}

/// The one builder of a replayed message's notifications: one block of a user
/// message is a `user_message_chunk`, of an assistant's an `agent_message_chunk`,
/// each under the message's id, so a client can tell two consecutive messages apart.
/// ACP has no chunk for a system message, and restore never replays one (the store
/// does not take them), so it has none.
pub fn message_update(
    session: SessionId,
    message: &Message,
    block: ContentBlock,
) -> Option<SessionNotification> {
    chunk_update(session, message.role, message.id.to_string(), block)
}

fn chunk_update(
    session: SessionId,
    role: Role,
    message_id: String,
    block: ContentBlock,
) -> Option<SessionNotification> {
    let chunk = ContentChunk::new(block).message_id(AcpMessageId::from(message_id));
    let update = match role {
        Role::User => SessionUpdate::UserMessageChunk(chunk),
        Role::Assistant => SessionUpdate::AgentMessageChunk(chunk),
        Role::System => return None,
    };
    Some(SessionNotification::new(session.to_string(), update))
}

/// One `session/update` of a replay: one the schema's types hold, or an opaque one
/// (an update of a kind the schema does not know, kept as it came), as the params it
/// goes out with.
#[derive(Debug, Clone, PartialEq)]
// One is made and sent at a time; boxing the typed one would cost an allocation each.
#[allow(clippy::large_enum_variant)]
pub enum Replayed {
    Typed(SessionNotification),
    Opaque(OpaqueNotification),
}

/// The params of an opaque update's notification: `{"sessionId","update"}`, the update
/// as the agent sent it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpaqueNotification {
    pub session_id: SessionId,
    pub update: serde_json::Value,
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<agent_client_protocol_schema::v1::Meta>,
}

impl Replayed {
    /// The notification's params as JSON.
    pub fn params(&self) -> serde_json::Value {
        match self {
            Replayed::Typed(n) => serde_json::to_value(n),
            Replayed::Opaque(n) => serde_json::to_value(n),
        }
        .expect("notifications always serialize")
    }

    /// The whole notification in its JSON-RPC envelope, as it goes on the wire.
    pub fn write_line(&self, out: &mut impl Write) -> io::Result<()> {
        match self {
            Replayed::Typed(n) => json(out, &notification_line(n)),
            Replayed::Opaque(n) => json(out, &notification_line(n)),
        }
    }
}

/// The notifications a recorded item replays as (`turns::replay_updates`): chunks
/// under the agent's own `messageId`, one `tool_call` in its merged state, the plan or
/// session-level update as stored, an opaque update as it came.
pub fn recorded_updates(session: SessionId, item: &Item) -> Vec<Replayed> {
    turns::replay_updates(&item.body)
        .into_iter()
        .map(|update| match update {
            turns::Update::Known(update) => {
                Replayed::Typed(SessionNotification::new(session.to_string(), update))
            }
            turns::Update::Opaque(update) => Replayed::Opaque(OpaqueNotification {
                session_id: session,
                update,
                meta: None,
            }),
        })
        .collect()
}

/// The notifications one history item replays as, as the `acp-updates` writer writes
/// them: an ACP agent's answer to `session/load`, one item at a time. A message's
/// encodings move into its blocks when nothing else keeps them (see
/// `Part::into_block`).
pub fn session_updates(session: SessionId, item: ReplayItem) -> Vec<Replayed> {
    match item {
        ReplayItem::Message(m) => {
            let ModelMessage { message, parts } = m;
            parts
                .into_iter()
                .filter_map(|part| message_update(session, &message, part.into_block()))
                .map(Replayed::Typed)
                .collect()
        }
        ReplayItem::Recorded(item) => recorded_updates(session, &item),
    }
}

/// The `_meta` key under which a replay says of itself what ACP v1 has no field for:
/// where a partial replay starts (`{"from","skipped"}`, see [`replay_notice`]) and,
/// at the end of a replay a client asked for with a point, ACP v2's `replay_complete`
/// update (see [`replay_complete`]). Moving to v2 is taking the value out of `_meta`.
pub const REPLAY_META_KEY: &str = "sessionstore/replay";

/// An update that changes nothing (a `session_info_update` with no field set), the
/// carrier of a replay's own `_meta`: v1 has no update of its own for it.
fn carrier(session: SessionId, meta: serde_json::Value) -> SessionNotification {
    let mut map = serde_json::Map::new();
    map.insert(REPLAY_META_KEY.to_owned(), meta);
    SessionNotification::new(
        session.to_string(),
        SessionUpdate::SessionInfoUpdate(SessionInfoUpdate::new()),
    )
    .meta(map)
}

/// The first notification of a partial replay: it says where the replay starts and
/// how many entries it leaves out, under [`REPLAY_META_KEY`] as
/// `{"partial":{"from","skipped"}}`. A whole replay has none.
pub fn replay_notice(session: SessionId, partial: &Partial) -> SessionNotification {
    carrier(session, serde_json::json!({ "partial": partial }))
}

/// The last notification of a replay a client asked for with a point: ACP v2's
/// `replay_complete` update, `{"sessionUpdate":"replay_complete"}`, under
/// [`REPLAY_META_KEY`] (with `partial` beside it when the replay was partial).
pub fn replay_complete(session: SessionId, partial: Option<&Partial>) -> SessionNotification {
    let mut meta = serde_json::json!({ "sessionUpdate": "replay_complete" });
    if let Some(partial) = partial {
        meta["partial"] = serde_json::json!(partial);
    }
    carrier(session, meta)
}

/// A notification's params in its JSON-RPC envelope, as it goes on the wire.
pub fn notification_line<P>(notification: P) -> JsonRpcMessage<Notification<P>> {
    JsonRpcMessage::wrap(Notification {
        method: SESSION_UPDATE.into(),
        params: Some(notification),
    })
}

/// One line per block of a dispatched message: [`message_update`] of each block, in
/// its envelope, written into the line's shell (kept per role) with the block and the
/// message's id in place.
pub(super) fn message_lines(
    out: &mut impl Write,
    kept_shells: &mut Kept,
    session: SessionId,
    m: &ModelMessage,
) -> io::Result<()> {
    let role = m.message.role;
    if m.parts.is_empty() || role == Role::System {
        return Ok(()); // a system message has no chunk (see `message_update`)
    }
    let shell = kept(&mut kept_shells.lines, role, || {
        let block = shell::placeholder_block().clone();
        let shape = chunk_update(session, role, shell::placeholder(), block)?;
        Shell::cut(&notification_line(shape), &[Hole::block(), Hole::String])
    });
    match shell {
        Some(shell) => {
            for part in &m.parts {
                shell.write(out, |i, out| match i {
                    0 => part.write_json(out),
                    _ => json(out, &m.message.id),
                })?;
                out.write_all(b"\n")?;
            }
            Ok(())
        }
        None => {
            shell::written_whole();
            whole_message_lines(out, session, m, None)
        }
    }
}

/// The lines of a recorded item, each with `meta` (a turn mark) when there is one.
pub(super) fn recorded_lines(
    out: &mut impl Write,
    session: SessionId,
    item: &Item,
    meta: Option<agent_client_protocol_schema::v1::Meta>,
) -> io::Result<()> {
    for mut n in recorded_updates(session, item) {
        if let Some(meta) = &meta {
            match &mut n {
                Replayed::Typed(n) => n.meta = Some(meta.clone()),
                Replayed::Opaque(n) => n.meta = Some(meta.clone()),
            }
        }
        match n {
            // Moved into its envelope: `write_line` would copy it.
            Replayed::Typed(n) => json(out, &notification_line(n))?,
            opaque => opaque.write_line(out)?,
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// The lines of a message written whole: [`message_update`] of each block, with
/// `meta` (a turn's mark: rare, so it has no kept shell) when there is one.
pub(super) fn whole_message_lines(
    out: &mut impl Write,
    session: SessionId,
    m: &ModelMessage,
    meta: Option<agent_client_protocol_schema::v1::Meta>,
) -> io::Result<()> {
    for part in &m.parts {
        if let Some(mut n) = message_update(session, &m.message, part.to_block()) {
            n.meta.clone_from(&meta);
            json(out, &notification_line(n))?;
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}

/// The one builder of a `session/prompt` request: `blocks` as the prompt of
/// `session`, under `id`, in its JSON-RPC envelope.
pub fn prompt_request(
    id: RequestId,
    session: SessionId,
    blocks: Vec<ContentBlock>,
) -> JsonRpcMessage<Request<PromptRequest>> {
    JsonRpcMessage::wrap(Request {
        id,
        method: SESSION_PROMPT.into(),
        params: Some(PromptRequest::new(session.to_string(), blocks)),
    })
}

/// Writes the whole `session/prompt` request frame for `parts` (no newline), byte for
/// byte what serde_json writes for [`prompt_request`] with the parts' blocks, without
/// building those blocks or a `serde_json::Value`: each block is written from its
/// part, the encodings from their shared buffers. For a caller that hands dispatched
/// prompts to an ACP agent and would otherwise hold a second copy of every attachment
/// (the SDK serializes a request through a `Value`, which copies every string).
pub fn prompt_frame(
    out: &mut impl Write,
    id: RequestId,
    session: SessionId,
    parts: &[Part],
) -> io::Result<()> {
    let shape = prompt_request(
        id.clone(),
        session,
        std::iter::repeat_n(shell::placeholder_block().clone(), parts.len()).collect(),
    );
    let mut scratch = Scratch::default();
    let holes = std::iter::repeat_n(Hole::block(), parts.len());
    match scratch.cut(&shape, holes) {
        Some(cut) => cut.write(out, |i, out| parts[i].write_json(out)),
        None => whole(
            out,
            &prompt_request(id, session, parts.iter().map(Part::to_block).collect()),
        ),
    }
}
