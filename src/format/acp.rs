//! The ACP shapes: content blocks, the restore object's messages and recorded items,
//! and `session/update` notification lines, written from dispatch's parts and the
//! stored items in the schema crate's field order. No IO besides the given writer.

use std::io::{self, Write};

use agent_client_protocol_schema::v1::{ContentBlock, Plan, SessionUpdate, ToolCall};
use serde::Serialize;

use super::{base64_string, json};
use crate::DAEMON_ATTACHMENT_CONTEXT_META_KEY;
use crate::dispatch::{Attached, Content, ModelMessage, Part};
use crate::ids::{ItemId, SessionId};
use crate::model::{Item, ItemBody, Role};
use crate::turns;

/// One `ContentBlock`: `{"type":"text","text"}`, `{"type":"image","data","mimeType",
/// "uri","_meta"}` or `{"type":"resource","resource":{…},"_meta"}`.
pub(super) fn block(out: &mut impl Write, part: &Part) -> io::Result<()> {
    match part {
        Part::Text(text) => text_block(out, text),
        Part::Attachment(a) => attachment_block(out, a),
    }
}

fn text_block(out: &mut impl Write, text: &str) -> io::Result<()> {
    out.write_all(b"{\"type\":\"text\",\"text\":")?;
    json(out, text)?;
    out.write_all(b"}")
}

fn attachment_block(out: &mut impl Write, a: &Attached) -> io::Result<()> {
    let p = &a.prepared;
    let uri = p.uri_text();
    match &p.content {
        Content::Image(data) => {
            out.write_all(b"{\"type\":\"image\",\"data\":")?;
            base64_string(out, data)?;
            out.write_all(b",\"mimeType\":")?;
            json(out, &p.mime)?;
            out.write_all(b",\"uri\":")?;
            json(out, uri)?;
        }
        Content::Text(text) => {
            out.write_all(b"{\"type\":\"resource\",\"resource\":{\"mimeType\":")?;
            json(out, &p.mime)?;
            out.write_all(b",\"text\":")?;
            json(out, &**text)?;
            out.write_all(b",\"uri\":")?;
            json(out, uri)?;
            out.write_all(b"}")?;
        }
        Content::Blob(blob) => {
            out.write_all(b"{\"type\":\"resource\",\"resource\":{\"blob\":")?;
            base64_string(out, blob)?;
            out.write_all(b",\"mimeType\":")?;
            json(out, &p.mime)?;
            out.write_all(b",\"uri\":")?;
            json(out, uri)?;
            out.write_all(b"}")?;
        }
    }
    out.write_all(b",\"_meta\":{")?;
    json(out, DAEMON_ATTACHMENT_CONTEXT_META_KEY)?;
    out.write_all(b":")?;
    out.write_all(a.context.json().as_bytes())?;
    out.write_all(b"}}")
}

/// `{"id","role","content":[ContentBlock]}`, one message of the restore object.
pub(super) fn restore_message(out: &mut impl Write, m: &ModelMessage) -> io::Result<()> {
    out.write_all(b"{\"id\":")?;
    json(out, &m.message.id)?;
    out.write_all(b",\"role\":")?;
    json(out, &m.message.role)?;
    out.write_all(b",\"content\":[")?;
    for (i, part) in m.parts.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        block(out, part)?;
    }
    out.write_all(b"]}")
}

/// One line per block: a user message's blocks as `user_message_chunk`s, an
/// assistant's as `agent_message_chunk`s, each chunk carrying the message's id so a
/// client can tell two consecutive messages apart. ACP has no chunk for a system
/// message, and restore never replays one (the store does not take them), so none is
/// written.
pub(super) fn updates(
    out: &mut impl Write,
    session: &SessionId,
    m: &ModelMessage,
) -> io::Result<()> {
    let kind: &[u8] = match m.message.role {
        Role::User => b"user_message_chunk",
        Role::Assistant => b"agent_message_chunk",
        Role::System => return Ok(()),
    };
    for part in &m.parts {
        out.write_all(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":",
        )?;
        json(out, session)?;
        out.write_all(b",\"update\":{\"sessionUpdate\":\"")?;
        out.write_all(kind)?;
        out.write_all(b"\",\"content\":")?;
        block(out, part)?;
        out.write_all(b",\"messageId\":")?;
        json(out, &m.message.id)?;
        out.write_all(b"}}}\n")?;
    }
    Ok(())
}

/// A recorded item in the restore object's `messages`, beside the messages' own
/// `{"id","role","content"}`. The `role` says which shape it is:
/// `{"id","role":"assistant","content"}` (an agent message),
/// `{"id","role":"thought","content"}` (a role of its own, so a reader that takes
/// every `assistant` entry as conversation never takes a thought for one),
/// `{"id","role":"tool","toolCall"}` (in its merged final state),
/// `{"id","role":"plan","plan"}` and `{"id","role":"session","update"}` (a
/// session-level `SessionUpdate`, as the agent sent it). `id` is the item's.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecordedEntry<'a> {
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
}

impl<'a> RecordedEntry<'a> {
    pub(crate) fn new(item: &'a Item) -> RecordedEntry<'a> {
        let mut entry = RecordedEntry {
            id: item.id,
            role: "",
            content: None,
            tool_call: None,
            plan: None,
            update: None,
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
        }
        entry
    }
}

/// The `session/update` lines a recorded item replays as (`turns::replay_updates`):
/// chunks under the agent's own `messageId`, one `tool_call` in its merged state, the
/// plan or session-level update as stored.
pub(super) fn recorded_updates(
    out: &mut impl Write,
    session: &SessionId,
    item: &Item,
) -> io::Result<()> {
    for update in turns::replay_updates(&item.body) {
        out.write_all(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"session/update\",\"params\":{\"sessionId\":",
        )?;
        json(out, session)?;
        out.write_all(b",\"update\":")?;
        json(out, &update)?;
        out.write_all(b"}}\n")?;
    }
    Ok(())
}
