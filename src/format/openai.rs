//! The OpenAI request shapes (`openai::ChatRequest` and `openai::ResponsesRequest`)
//! written one message at a time from dispatch's parts, in those types' field order.
//! No IO besides the given writer.

use std::io::{self, Write};

use agent_client_protocol_schema::v1::ContentBlock;

use super::{data_url, json};
use crate::dispatch::{Attached, Content, ModelMessage, Part};
use crate::model::Role;

/// The two requests differ only in names: these are each one's.
struct Names {
    /// What follows `"role":"<role>"` in a message before its content.
    after_role: &'static [u8],
    text: &'static [u8],
    responses: bool,
}

const CHAT: Names = Names {
    after_role: b"",
    text: b"{\"type\":\"text\",\"text\":",
    responses: false,
};

const RESPONSES: Names = Names {
    after_role: b",\"type\":\"message\"",
    text: b"{\"type\":\"input_text\",\"text\":",
    responses: true,
};

pub(super) fn chat_message(out: &mut impl Write, m: &ModelMessage) -> io::Result<()> {
    message(out, m, &CHAT)
}

pub(super) fn responses_message(out: &mut impl Write, m: &ModelMessage) -> io::Result<()> {
    message(out, m, &RESPONSES)
}

fn message(out: &mut impl Write, m: &ModelMessage, names: &Names) -> io::Result<()> {
    out.write_all(b"{\"role\":")?;
    json(out, &m.message.role)?;
    out.write_all(names.after_role)?;
    out.write_all(b",\"content\":")?;
    if m.message.role != Role::User {
        // Assistant and system messages convert to their texts, joined.
        let text: String = m
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.as_str()),
                Part::Attachment(_) => None,
            })
            .collect();
        json(out, &text)?;
        return out.write_all(b"}");
    }
    out.write_all(b"[")?;
    let mut first = true;
    for part in &m.parts {
        if !std::mem::take(&mut first) {
            out.write_all(b",")?;
        }
        match part {
            Part::Text(text) => text_part(out, names, text)?,
            Part::Attachment(a) => {
                // The path context goes right before the content it describes.
                text_part_json(out, names, a.context.json())?;
                out.write_all(b",")?;
                content_part(out, names, a)?;
            }
        }
    }
    out.write_all(b"]}")
}

/// A recorded agent message as an assistant message of plain text, the same text an
/// assistant message's blocks convert to (`openai::chat_request` joins them).
pub(super) fn assistant_text(
    out: &mut impl Write,
    blocks: &[ContentBlock],
    responses: bool,
) -> io::Result<()> {
    let names = if responses { &RESPONSES } else { &CHAT };
    let text: String = blocks
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect();
    out.write_all(b"{\"role\":\"assistant\"")?;
    out.write_all(names.after_role)?;
    out.write_all(b",\"content\":")?;
    json(out, &text)?;
    out.write_all(b"}")
}

fn text_part(out: &mut impl Write, names: &Names, text: &str) -> io::Result<()> {
    out.write_all(names.text)?;
    json(out, text)?;
    out.write_all(b"}")
}

/// [`text_part`] of a text already written as a JSON string.
fn text_part_json(out: &mut impl Write, names: &Names, json: &str) -> io::Result<()> {
    out.write_all(names.text)?;
    out.write_all(json.as_bytes())?;
    out.write_all(b"}")
}

fn content_part(out: &mut impl Write, names: &Names, a: &Attached) -> io::Result<()> {
    let p = &a.prepared;
    let responses = names.responses;
    match &p.content {
        Content::Text(text) => text_part(out, names, text),
        Content::Image(data) if responses => {
            out.write_all(b"{\"type\":\"input_image\",\"image_url\":")?;
            data_url(out, &p.mime, data)?;
            out.write_all(b",\"detail\":\"auto\"}")
        }
        Content::Image(data) => {
            out.write_all(b"{\"type\":\"image_url\",\"image_url\":{\"url\":")?;
            data_url(out, &p.mime, data)?;
            out.write_all(b"}}")
        }
        Content::Blob(blob) => {
            // The same name the block conversion takes: the context's, else the URI's.
            let filename = crate::openai::filename(Some(a.context.as_str()), p.uri_text());
            if responses {
                out.write_all(b"{\"type\":\"input_file\",\"filename\":")?;
            } else {
                out.write_all(b"{\"type\":\"file\",\"file\":{\"filename\":")?;
            }
            json(out, &filename)?;
            out.write_all(b",\"file_data\":")?;
            data_url(out, &p.mime, blob)?;
            out.write_all(if responses { b"}" } else { b"}}" })
        }
    }
}
