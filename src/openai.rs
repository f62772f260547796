//! OpenAI Chat Completions, Responses and Vision Bridge requests, and the one
//! conversion from ACP content: a conversation's blocks or a dispatched message's parts,
//! both read as the same `Piece`s. Pure, and it never computes a path (a path reaches
//! the model only in the `_meta` context dispatch wrote from a live read).

use std::borrow::Cow;
use std::sync::LazyLock;

use agent_client_protocol_schema::v1::{ContentBlock, EmbeddedResourceResource};
use percent_encoding::percent_decode_str;
use serde::{Deserialize, Serialize};

pub use crate::dispatch::DAEMON_ATTACHMENT_CONTEXT_META_KEY;
use crate::dispatch::{Content, ModelMessage, Part, SharedStr};
pub use crate::model::Role;

/// The stored-name rules turn an empty name into this one, so a nameless file gets it too.
const FALLBACK_FILENAME: &str = "attachment";

/// A blob resource without a MIME type is still sent; this is the type that claims nothing.
const FALLBACK_BLOB_MIME: &str = "application/octet-stream";

/// A Chat Completions request body (`POST /v1/chat/completions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    /// The API's string-to-string `metadata`: only a replay from a point writes it,
    /// saying where it starts (see `format::replay_metadata`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<std::collections::BTreeMap<String, String>>,
}

/// One message of a Chat Completions request; only user messages carry content parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    System { content: String },
    User { content: Vec<ChatPart> },
    Assistant { content: String },
}

/// A content part of a Chat Completions user message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ChatPart {
    Text { text: String },
    ImageUrl { image_url: ImageUrl },
    File { file: FileData },
}

/// The `image_url` object of an image part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: DataUrl,
}

/// The `file` object of a file part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileData {
    pub filename: String,
    pub file_data: DataUrl,
}

/// A `data:<mime>;base64,<base64>` URL whose base64 is a [`SharedStr`] shared with the
/// memo, not copied; serialized straight from it (`collect_str`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataUrl {
    pub mime: String,
    pub base64: SharedStr,
}

impl DataUrl {
    pub fn new(mime: impl Into<String>, base64: impl Into<SharedStr>) -> DataUrl {
        DataUrl {
            mime: mime.into(),
            base64: base64.into(),
        }
    }
}

impl std::fmt::Display for DataUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("data:")?;
        f.write_str(&self.mime)?;
        f.write_str(";base64,")?;
        f.write_str(&self.base64)
    }
}

impl Serialize for DataUrl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DataUrl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<DataUrl, D::Error> {
        let url = String::deserialize(deserializer)?;
        let (mime, base64) = url
            .strip_prefix("data:")
            .and_then(|rest| rest.split_once(";base64,"))
            .ok_or_else(|| serde::de::Error::custom("not a base64 data: URL"))?;
        Ok(DataUrl::new(mime, base64))
    }
}

/// A Responses API request body (`POST /v1/responses`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponsesRequest {
    pub model: String,
    pub input: Vec<ResponsesMessage>,
    /// As in [`ChatRequest`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<std::collections::BTreeMap<String, String>>,
}

/// One input message of a Responses request (`EasyInputMessage`). Assistant and system
/// messages take string content: the API refuses `input_*` parts there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ResponsesMessage {
    System {
        #[serde(rename = "type")]
        kind: MessageKind,
        content: String,
    },
    User {
        #[serde(rename = "type")]
        kind: MessageKind,
        content: Vec<ResponsesPart>,
    },
    Assistant {
        #[serde(rename = "type")]
        kind: MessageKind,
        content: String,
    },
}

/// The `type` of a Responses input message; `message` is the only one this crate sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageKind {
    #[default]
    Message,
}

/// A content part of a Responses user message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponsesPart {
    InputText {
        text: String,
    },
    /// `detail` is required by the API's schema for `input_image`, so it is always written.
    InputImage {
        image_url: DataUrl,
        detail: ImageDetail,
    },
    InputFile {
        filename: String,
        file_data: DataUrl,
    },
}

/// How closely an image is looked at; `auto` leaves it to the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageDetail {
    #[default]
    Auto,
    Low,
    High,
}

impl From<ChatPart> for ResponsesPart {
    fn from(part: ChatPart) -> Self {
        match part {
            ChatPart::Text { text } => ResponsesPart::InputText { text },
            ChatPart::ImageUrl { image_url } => ResponsesPart::InputImage {
                image_url: image_url.url,
                detail: ImageDetail::Auto,
            },
            ChatPart::File { file } => ResponsesPart::InputFile {
                filename: file.filename,
                file_data: file.file_data,
            },
        }
    }
}

/// One turn of a conversation as the request builders read (borrow) it.
pub trait Turn {
    fn role(&self) -> Role;
    fn blocks(&self) -> &[ContentBlock];
}

impl Turn for (Role, Vec<ContentBlock>) {
    fn role(&self) -> Role {
        self.0
    }

    fn blocks(&self) -> &[ContentBlock] {
        &self.1
    }
}

/// The Chat Completions request for a conversation, roles and order kept.
#[must_use]
pub fn chat_request<T: Turn>(model: &str, conversation: &[T]) -> ChatRequest {
    ChatRequest {
        model: model.to_owned(),
        messages: conversation
            .iter()
            .map(|turn| chat_of(turn.role(), turn.blocks().iter().map(Piece::of_block)))
            .collect(),
        metadata: None,
    }
}

/// The Responses API request for a conversation, with [`chat_request`]'s parts.
#[must_use]
pub fn responses_request<T: Turn>(model: &str, conversation: &[T]) -> ResponsesRequest {
    ResponsesRequest {
        model: model.to_owned(),
        input: conversation
            .iter()
            .map(|turn| responses_of(turn.role(), turn.blocks().iter().map(Piece::of_block)))
            .collect(),
        metadata: None,
    }
}

/// One dispatched message as a Chat Completions message, by [`chat_request`]'s
/// conversion; images and blobs share their encoding with the part.
#[must_use]
pub fn chat_message(m: &ModelMessage) -> ChatMessage {
    chat_of(
        m.message.role,
        m.parts.iter().map(|p| Piece::of_part(p, Fill::Shared)),
    )
}

/// [`chat_message`] as a Responses input message.
#[must_use]
pub fn responses_message(m: &ModelMessage) -> ResponsesMessage {
    responses_of(
        m.message.role,
        m.parts.iter().map(|p| Piece::of_part(p, Fill::Shared)),
    )
}

/// The Vision Bridge request: the focus hint and every image. Contexts, names and other
/// attachments are left out: the model only describes pictures, the hint stays the user's.
#[must_use]
pub fn vision_request(model: &str, hint: &str, blocks: &[ContentBlock]) -> ChatRequest {
    let hint_part = (!hint.is_empty()).then(|| ChatPart::Text {
        text: hint.to_owned(),
    });
    let images = blocks.iter().filter_map(|block| match block {
        ContentBlock::Image(image) => {
            Some(image_part(&image.mime_type, Payload::Borrowed(&image.data)))
        }
        _ => None,
    });
    ChatRequest {
        model: model.to_owned(),
        messages: vec![ChatMessage::User {
            content: hint_part.into_iter().chain(images).collect(),
        }],
        metadata: None,
    }
}

/// One block as the conversion reads it, whichever form: its path context and content.
pub(crate) struct Piece<'a> {
    context: Option<&'a str>,
    body: Body<'a>,
}

enum Body<'a> {
    Text(&'a str),
    Image {
        mime: &'a str,
        data: Payload<'a>,
    },
    TextFile(Payload<'a>),
    Blob {
        mime: &'a str,
        data: Payload<'a>,
        filename: Cow<'a, str>,
    },
    /// What a request has no part for: left out with its context.
    Other,
}

/// A large field: borrowed from a block, shared with a part, or the writers' placeholder.
#[derive(Clone, Copy)]
enum Payload<'a> {
    Borrowed(&'a str),
    Shared(&'a SharedStr),
    Placeholder,
}

/// How a part's large fields are put in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fill {
    Shared,
    Placeholder,
}

static PLACEHOLDER: LazyLock<SharedStr> =
    LazyLock::new(|| SharedStr::from(crate::dispatch::shell::placeholder()));

impl Payload<'_> {
    fn shared(self) -> SharedStr {
        match self {
            Payload::Borrowed(s) => SharedStr::from(s),
            Payload::Shared(s) => s.clone(),
            Payload::Placeholder => PLACEHOLDER.clone(),
        }
    }

    fn string(self) -> String {
        match self {
            Payload::Borrowed(s) => s.to_owned(),
            Payload::Shared(s) => s.to_string_exact(),
            Payload::Placeholder => crate::dispatch::shell::placeholder(),
        }
    }
}

impl<'a> Piece<'a> {
    fn of_block(block: &'a ContentBlock) -> Piece<'a> {
        let context = attachment_context(block);
        let body = match block {
            ContentBlock::Text(text) => Body::Text(&text.text),
            ContentBlock::Image(image) => Body::Image {
                mime: &image.mime_type,
                data: Payload::Borrowed(&image.data),
            },
            ContentBlock::Resource(resource) => match &resource.resource {
                EmbeddedResourceResource::TextResourceContents(contents) => {
                    Body::TextFile(Payload::Borrowed(&contents.text))
                }
                EmbeddedResourceResource::BlobResourceContents(contents) => Body::Blob {
                    mime: contents.mime_type.as_deref().unwrap_or(FALLBACK_BLOB_MIME),
                    data: Payload::Borrowed(&contents.blob),
                    filename: Cow::Owned(filename(context, &contents.uri)),
                },
                _ => Body::Other,
            },
            _ => Body::Other,
        };
        Piece { context, body }
    }

    /// A part read as the block it stands for (`Part::to_block`) would be read.
    pub(crate) fn of_part(part: &'a Part, fill: Fill) -> Piece<'a> {
        let a = match part {
            Part::Text(text) => {
                return Piece {
                    context: None,
                    body: Body::Text(text),
                };
            }
            Part::Verbatim(block) => return Piece::of_block(block),
            Part::Attachment(a) => a,
        };
        let p = &a.prepared;
        let payload = |s: &'a SharedStr| match fill {
            Fill::Shared => Payload::Shared(s),
            Fill::Placeholder => Payload::Placeholder,
        };
        let body = match &p.content {
            Content::Image(data) => Body::Image {
                mime: &p.mime,
                data: payload(data),
            },
            Content::Text(text) => Body::TextFile(payload(text)),
            // The part has the stored name already: the context is not parsed for it.
            Content::Blob(data) => Body::Blob {
                mime: &p.mime,
                data: payload(data),
                filename: if p.name.is_empty() {
                    Cow::Owned(filename(None, p.uri_text()))
                } else {
                    Cow::Borrowed(&p.name)
                },
            },
        };
        Piece {
            context: Some(a.context.as_str()),
            body,
        }
    }
}

/// The one conversion of a turn into a Chat Completions message.
fn chat_of<'a>(role: Role, pieces: impl Iterator<Item = Piece<'a>>) -> ChatMessage {
    match role {
        Role::User => ChatMessage::User {
            content: user_parts(pieces),
        },
        Role::Assistant => ChatMessage::Assistant {
            content: text_only(pieces),
        },
        Role::System => ChatMessage::System {
            content: text_only(pieces),
        },
    }
}

/// [`chat_of`] as a Responses input message.
fn responses_of<'a>(role: Role, pieces: impl Iterator<Item = Piece<'a>>) -> ResponsesMessage {
    let kind = MessageKind::Message;
    match role {
        Role::User => ResponsesMessage::User {
            kind,
            content: user_parts(pieces).into_iter().map(Into::into).collect(),
        },
        Role::Assistant => ResponsesMessage::Assistant {
            kind,
            content: text_only(pieces),
        },
        Role::System => ResponsesMessage::System {
            kind,
            content: text_only(pieces),
        },
    }
}

/// [`chat_message`] and [`responses_message`] with placeholders for `dispatch::shell`.
pub(crate) fn chat_message_with_placeholders(m: &ModelMessage) -> ChatMessage {
    chat_of(
        m.message.role,
        m.parts.iter().map(|p| Piece::of_part(p, Fill::Placeholder)),
    )
}

pub(crate) fn responses_message_with_placeholders(m: &ModelMessage) -> ResponsesMessage {
    responses_of(
        m.message.role,
        m.parts.iter().map(|p| Piece::of_part(p, Fill::Placeholder)),
    )
}

/// A recorded agent message's blocks as the assistant turn a request holds.
pub(crate) fn assistant_chat(blocks: &[ContentBlock]) -> ChatMessage {
    chat_of(Role::Assistant, blocks.iter().map(Piece::of_block))
}

pub(crate) fn assistant_responses(blocks: &[ContentBlock]) -> ResponsesMessage {
    responses_of(Role::Assistant, blocks.iter().map(Piece::of_block))
}

/// Content parts of one user message: each block's part, after a text part with its
/// path context if it has one. Blocks with no part are skipped with their context.
fn user_parts<'a>(pieces: impl Iterator<Item = Piece<'a>>) -> Vec<ChatPart> {
    let mut parts = Vec::new();
    for piece in pieces {
        let Some(content) = content_part(piece.body) else {
            continue;
        };
        if let Some(context) = piece.context {
            parts.push(ChatPart::Text {
                text: context.to_owned(),
            });
        }
        parts.push(content);
    }
    parts
}

fn content_part(body: Body<'_>) -> Option<ChatPart> {
    match body {
        Body::Text(text) => Some(ChatPart::Text {
            text: text.to_owned(),
        }),
        Body::Image { mime, data } => Some(image_part(mime, data)),
        Body::TextFile(text) => Some(ChatPart::Text {
            text: text.string(),
        }),
        Body::Blob {
            mime,
            data,
            filename,
        } => Some(ChatPart::File {
            file: FileData {
                filename: filename.into_owned(),
                file_data: DataUrl::new(mime, data.shared()),
            },
        }),
        Body::Other => None,
    }
}

fn image_part(mime: &str, data: Payload<'_>) -> ChatPart {
    ChatPart::ImageUrl {
        image_url: ImageUrl {
            url: DataUrl::new(mime, data.shared()),
        },
    }
}

/// The text of a message that converts to text only; ACP streams one message as chunks
/// whose texts concatenate, so the blocks are joined with nothing between them.
fn text_only<'a>(pieces: impl Iterator<Item = Piece<'a>>) -> String {
    pieces
        .filter_map(|piece| match piece.body {
            Body::Text(text) => Some(text),
            _ => None,
        })
        .collect()
}

/// The path context dispatch put in a block's own `_meta`. A value that is not a string
/// was not written by the daemon and is not passed on.
fn attachment_context(block: &ContentBlock) -> Option<&str> {
    let meta = match block {
        ContentBlock::Text(text) => text.meta.as_ref(),
        ContentBlock::Image(image) => image.meta.as_ref(),
        ContentBlock::Audio(audio) => audio.meta.as_ref(),
        ContentBlock::ResourceLink(link) => link.meta.as_ref(),
        ContentBlock::Resource(resource) => resource.meta.as_ref(),
        _ => None,
    }?;
    meta.get(DAEMON_ATTACHMENT_CONTEXT_META_KEY)?.as_str()
}

/// A file part's name: the stored name from the context's JSON line when there is one,
/// else the URI's last segment decoded, since a URI is the percent-encoded stored name.
pub(crate) fn filename(context: Option<&str>, uri: &str) -> String {
    if let Some(name) = context.and_then(name_from_context) {
        return name;
    }
    let last = uri.rsplit('/').next().unwrap_or_default();
    let decoded = percent_decode_str(last).decode_utf8_lossy();
    if decoded.is_empty() {
        FALLBACK_FILENAME.to_owned()
    } else {
        decoded.into_owned()
    }
}

fn name_from_context(context: &str) -> Option<String> {
    context.lines().find_map(|line| {
        let line = line.trim();
        if !line.starts_with('{') {
            return None;
        }
        let value: serde_json::Value = serde_json::from_str(line).ok()?;
        let name = value.get("name")?.as_str()?;
        (!name.is_empty()).then(|| name.to_owned())
    })
}

#[cfg(test)]
mod tests;
