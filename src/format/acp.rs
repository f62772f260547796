//! The ACP shapes: content blocks, the restore object's messages, and `session/update`
//! notification lines, written from dispatch's parts in the schema crate's field
//! order. No IO besides the given writer.

use std::io::{self, Write};

use super::{base64_string, json};
use crate::DAEMON_ATTACHMENT_CONTEXT_META_KEY;
use crate::dispatch::{Attached, Content, ModelMessage, Part};
use crate::ids::SessionId;
use crate::model::Role;

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
    json(out, &a.context)?;
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
