//! The writer of OpenAI requests, one message at a time: each message is the one
//! conversion's typed message (`openai::chat_message`, `responses_message`), built with
//! a placeholder for each large field, serialized, and written with each encoding
//! from its shared buffer. No IO besides the given writer.

use std::io::{self, Write};
use std::sync::LazyLock;

use agent_client_protocol_schema::v1::ContentBlock;

use super::json;
use crate::dispatch::shell::{self, Around, Hole, Scratch};
use crate::dispatch::{Attached, Content, ModelMessage, Part};
use crate::model::Role;
use crate::openai::{
    self, ChatMessage, ChatRequest, MessageKind, ResponsesMessage, ResponsesRequest,
};

/// The two requests differ in shape; this says which one is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Api {
    Chat,
    Responses,
}

/// A system message whose content is the placeholder: where a request's messages go.
static CHAT_HOLE: LazyLock<Around> = LazyLock::new(|| {
    Around::of(&ChatMessage::System {
        content: shell::placeholder(),
    })
});

static RESPONSES_HOLE: LazyLock<Around> = LazyLock::new(|| {
    Around::of(&ResponsesMessage::System {
        kind: MessageKind::Message,
        content: shell::placeholder(),
    })
});

/// The request's opening and closing, from its typed shape.
pub(super) fn ends(
    scratch: &mut Scratch,
    api: Api,
    model: &str,
    metadata: Option<std::collections::BTreeMap<String, String>>,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let placeholder = shell::placeholder();
    match api {
        Api::Chat => {
            let shape = ChatRequest {
                model: model.to_owned(),
                messages: vec![ChatMessage::System {
                    content: placeholder,
                }],
                metadata,
            };
            super::ends(scratch, &shape, Hole::Value(&CHAT_HOLE))
        }
        Api::Responses => {
            let shape = ResponsesRequest {
                model: model.to_owned(),
                input: vec![ResponsesMessage::System {
                    kind: MessageKind::Message,
                    content: placeholder,
                }],
                metadata,
            };
            super::ends(scratch, &shape, Hole::Value(&RESPONSES_HOLE))
        }
    }
}

/// One dispatched message. A user message's attachments each hold one placeholder,
/// in part order: inside a `data:` URL for an image or blob, the whole text for a
/// text file.
pub(super) fn message(
    out: &mut impl Write,
    scratch: &mut Scratch,
    api: Api,
    m: &ModelMessage,
) -> io::Result<()> {
    let attached: Vec<&Attached> = match m.message.role {
        Role::User => m
            .parts
            .iter()
            .filter_map(|p| match p {
                Part::Attachment(a) => Some(a),
                Part::Text(_) | Part::Verbatim(_) => None,
            })
            .collect(),
        // Other roles convert to their texts alone.
        _ => vec![],
    };
    let holes = attached.iter().map(|a| match a.prepared.content {
        Content::Text(_) => Hole::String,
        Content::Image(_) | Content::Blob(_) => Hole::InString,
    });
    let cut = match api {
        Api::Chat => scratch.cut(&openai::chat_message_with_placeholders(m), holes),
        Api::Responses => scratch.cut(&openai::responses_message_with_placeholders(m), holes),
    };
    match cut {
        Some(cut) => cut.write(out, |i, out| match &attached[i].prepared.content {
            Content::Image(b64) | Content::Blob(b64) => shell::base64_chars(out, b64),
            Content::Text(text) => shell::text_string(out, text),
        }),
        None => {
            shell::written_whole();
            match api {
                Api::Chat => json(out, &openai::chat_message(m)),
                Api::Responses => json(out, &openai::responses_message(m)),
            }
        }
    }
}

/// A recorded agent message as the assistant message of plain text a request takes,
/// the same conversion `openai::chat_request` makes of an assistant's blocks.
pub(super) fn assistant_text(
    out: &mut impl Write,
    api: Api,
    blocks: &[ContentBlock],
) -> io::Result<()> {
    match api {
        Api::Chat => json(out, &openai::assistant_chat(blocks)),
        Api::Responses => json(out, &openai::assistant_responses(blocks)),
    }
}
