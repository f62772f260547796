//! Conversion of dispatched ACP content blocks into OpenAI Chat Completions and Responses
//! requests; pure: no IO, no HTTP, and it never computes a path (a path reaches the model
//! only inside a block's `_meta` context string, which dispatch wrote from a live read).

use agent_client_protocol_schema::v1::{ContentBlock, EmbeddedResourceResource};
use percent_encoding::percent_decode_str;
use serde::{Deserialize, Serialize};

pub use crate::dispatch::DAEMON_ATTACHMENT_CONTEXT_META_KEY;
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
}

/// One message of a Chat Completions request. Only user messages carry content parts:
/// assistant and system messages convert to text only.
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

/// The `image_url` object of an image part; `url` is a `data:` URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: String,
}

/// The `file` object of a file part; `file_data` is a `data:<mime>;base64,` URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileData {
    pub filename: String,
    pub file_data: String,
}

/// A Responses API request body (`POST /v1/responses`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResponsesRequest {
    pub model: String,
    pub input: Vec<ResponsesMessage>,
}

/// One input message of a Responses request (the API's `EasyInputMessage`, with its
/// optional `"type": "message"` written out). Assistant and system messages take string
/// content: the API refuses `input_*` parts on an assistant message.
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
        image_url: String,
        detail: ImageDetail,
    },
    InputFile {
        filename: String,
        file_data: String,
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

/// One turn of a conversation as the request builders read it: who spoke, and the
/// blocks they said. The builders borrow the blocks, so a dispatched history (base64
/// and all) is never copied to build a request.
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
    let messages = conversation
        .iter()
        .map(|turn| (turn.role(), turn.blocks()))
        .map(|(role, blocks)| match role {
            Role::User => ChatMessage::User {
                content: user_parts(blocks),
            },
            Role::Assistant => ChatMessage::Assistant {
                content: text_only(blocks),
            },
            Role::System => ChatMessage::System {
                content: text_only(blocks),
            },
        })
        .collect();
    ChatRequest {
        model: model.to_owned(),
        messages,
    }
}

/// The Responses API request for a conversation, with the same parts and context rule as
/// [`chat_request`].
#[must_use]
pub fn responses_request<T: Turn>(model: &str, conversation: &[T]) -> ResponsesRequest {
    let input = conversation
        .iter()
        .map(|turn| (turn.role(), turn.blocks()))
        .map(|(role, blocks)| match role {
            Role::User => ResponsesMessage::User {
                kind: MessageKind::Message,
                content: user_parts(blocks).into_iter().map(Into::into).collect(),
            },
            Role::Assistant => ResponsesMessage::Assistant {
                kind: MessageKind::Message,
                content: text_only(blocks),
            },
            Role::System => ResponsesMessage::System {
                kind: MessageKind::Message,
                content: text_only(blocks),
            },
        })
        .collect();
    ResponsesRequest {
        model: model.to_owned(),
        input,
    }
}

/// The Vision Bridge request: one user message holding the focus hint and every image
/// block's bytes. Path contexts, names and non-image attachments are left out on purpose:
/// the vision model only describes pictures, and the hint must stay the user's words.
#[must_use]
pub fn vision_request(model: &str, hint: &str, blocks: &[ContentBlock]) -> ChatRequest {
    let hint_part = (!hint.is_empty()).then(|| ChatPart::Text {
        text: hint.to_owned(),
    });
    let images = blocks.iter().filter_map(|block| match block {
        ContentBlock::Image(image) => Some(image_part(&image.mime_type, &image.data)),
        _ => None,
    });
    ChatRequest {
        model: model.to_owned(),
        messages: vec![ChatMessage::User {
            content: hint_part.into_iter().chain(images).collect(),
        }],
    }
}

/// Content parts of one user message: each block's content part, preceded by a text part
/// with its path context when the block carries one. Blocks dispatch never produces
/// (audio, resource links) have no part here and are skipped together with any context,
/// so no context is left without the content it describes.
fn user_parts(blocks: &[ContentBlock]) -> Vec<ChatPart> {
    let mut parts = Vec::with_capacity(blocks.len() * 2);
    for block in blocks {
        let context = attachment_context(block);
        let Some(content) = content_part(block, context) else {
            continue;
        };
        if let Some(context) = context {
            parts.push(ChatPart::Text {
                text: context.to_owned(),
            });
        }
        parts.push(content);
    }
    parts
}

fn content_part(block: &ContentBlock, context: Option<&str>) -> Option<ChatPart> {
    match block {
        ContentBlock::Text(text) => Some(ChatPart::Text {
            text: text.text.clone(),
        }),
        ContentBlock::Image(image) => Some(image_part(&image.mime_type, &image.data)),
        ContentBlock::Resource(resource) => match &resource.resource {
            EmbeddedResourceResource::TextResourceContents(contents) => Some(ChatPart::Text {
                text: contents.text.clone(),
            }),
            EmbeddedResourceResource::BlobResourceContents(contents) => {
                let mime = contents.mime_type.as_deref().unwrap_or(FALLBACK_BLOB_MIME);
                Some(ChatPart::File {
                    file: FileData {
                        filename: filename(context, &contents.uri),
                        file_data: data_url(mime, &contents.blob),
                    },
                })
            }
            _ => None,
        },
        _ => None,
    }
}

fn image_part(mime: &str, data: &str) -> ChatPart {
    ChatPart::ImageUrl {
        image_url: ImageUrl {
            url: data_url(mime, data),
        },
    }
}

fn data_url(mime: &str, base64: &str) -> String {
    format!("data:{mime};base64,{base64}")
}

/// The text of a message that converts to text only; ACP streams one message as chunks
/// whose texts concatenate, so the blocks are joined with nothing between them.
fn text_only(blocks: &[ContentBlock]) -> String {
    blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(text.text.as_str()),
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
mod tests {
    use super::*;
    use agent_client_protocol_schema::v1::{
        BlobResourceContents, EmbeddedResource, ImageContent, Meta, TextContent,
        TextResourceContents,
    };
    use serde_json::{Value, json};

    const MODEL: &str = "gpt-4o";
    const CTX_A: &str = "The user attached a file.\n{\"name\":\"report (1).pdf\",\"uri\":\"attachment:///s/report%20%281%29.pdf\",\"mimeType\":\"application/pdf\",\"path\":\"/data/attachments/s/report (1).pdf\",\"host\":\"box\"}\nUse the path with tools running on the daemon host.";
    const CTX_IMG: &str = "The user attached an image.\n{\"name\":\"cat.png\",\"uri\":\"attachment:///s/cat.png\",\"mimeType\":\"image/png\",\"path\":\"/data/attachments/s/cat.png\",\"host\":\"box\"}\nUse the path with tools running on the daemon host.";
    const CTX_TXT: &str = "The user attached a file.\n{\"name\":\"notes.md\",\"uri\":\"attachment:///s/notes.md\",\"mimeType\":\"text/markdown\",\"path\":\"/data/attachments/s/notes.md\",\"host\":\"box\"}\nUse the path with tools running on the daemon host.";

    fn context_meta(context: &str) -> Meta {
        let mut meta = Meta::new();
        meta.insert(
            DAEMON_ATTACHMENT_CONTEXT_META_KEY.to_owned(),
            Value::String(context.to_owned()),
        );
        meta
    }

    fn text(text: &str) -> ContentBlock {
        ContentBlock::Text(TextContent::new(text))
    }

    fn image(data: &str, mime: &str, uri: &str, context: Option<&str>) -> ContentBlock {
        let mut image = ImageContent::new(data, mime);
        image.uri = Some(uri.to_owned());
        image.meta = context.map(context_meta);
        ContentBlock::Image(image)
    }

    fn text_resource(contents: &str, uri: &str, context: Option<&str>) -> ContentBlock {
        let mut inner = TextResourceContents::new(contents, uri);
        inner.mime_type = Some("text/markdown".to_owned());
        let mut resource =
            EmbeddedResource::new(EmbeddedResourceResource::TextResourceContents(inner));
        resource.meta = context.map(context_meta);
        ContentBlock::Resource(resource)
    }

    fn blob_resource(
        blob: &str,
        uri: &str,
        mime: Option<&str>,
        context: Option<&str>,
    ) -> ContentBlock {
        let mut inner = BlobResourceContents::new(blob, uri);
        inner.mime_type = mime.map(str::to_owned);
        let mut resource =
            EmbeddedResource::new(EmbeddedResourceResource::BlobResourceContents(inner));
        resource.meta = context.map(context_meta);
        ContentBlock::Resource(resource)
    }

    /// One user message with every kind of attachment, then an assistant reply.
    fn sample_conversation() -> Vec<(Role, Vec<ContentBlock>)> {
        vec![
            (Role::System, vec![text("be brief")]),
            (
                Role::User,
                vec![
                    text("what is in these?"),
                    image(
                        "iVBORw0K",
                        "image/png",
                        "attachment:///s/cat.png",
                        Some(CTX_IMG),
                    ),
                    text_resource("# Notes\nhello", "attachment:///s/notes.md", Some(CTX_TXT)),
                    blob_resource(
                        "JVBERi0x",
                        "attachment:///s/report%20%281%29.pdf",
                        Some("application/pdf"),
                        Some(CTX_A),
                    ),
                ],
            ),
            (Role::Assistant, vec![text("a cat, notes and a report")]),
        ]
    }

    fn check_chat(conversation: &[(Role, Vec<ContentBlock>)], expected: Value) {
        let actual = serde_json::to_value(chat_request(MODEL, conversation))
            .expect("a request of strings serializes");
        assert_eq!(actual, expected, "chat request:\n{actual:#}");
    }

    fn check_responses(conversation: &[(Role, Vec<ContentBlock>)], expected: Value) {
        let actual = serde_json::to_value(responses_request(MODEL, conversation))
            .expect("a request of strings serializes");
        assert_eq!(actual, expected, "responses request:\n{actual:#}");
    }

    #[test]
    fn chat_converts_every_block_kind_with_context_right_before_it() {
        check_chat(
            &sample_conversation(),
            json!({
                "model": MODEL,
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": [
                        {"type": "text", "text": "what is in these?"},
                        {"type": "text", "text": CTX_IMG},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
                        {"type": "text", "text": CTX_TXT},
                        {"type": "text", "text": "# Notes\nhello"},
                        {"type": "text", "text": CTX_A},
                        {"type": "file", "file": {
                            "filename": "report (1).pdf",
                            "file_data": "data:application/pdf;base64,JVBERi0x"
                        }},
                    ]},
                    {"role": "assistant", "content": "a cat, notes and a report"},
                ]
            }),
        );
    }

    #[test]
    fn responses_converts_every_block_kind_with_context_right_before_it() {
        check_responses(
            &sample_conversation(),
            json!({
                "model": MODEL,
                "input": [
                    {"type": "message", "role": "system", "content": "be brief"},
                    {"type": "message", "role": "user", "content": [
                        {"type": "input_text", "text": "what is in these?"},
                        {"type": "input_text", "text": CTX_IMG},
                        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0K", "detail": "auto"},
                        {"type": "input_text", "text": CTX_TXT},
                        {"type": "input_text", "text": "# Notes\nhello"},
                        {"type": "input_text", "text": CTX_A},
                        {"type": "input_file",
                            "filename": "report (1).pdf",
                            "file_data": "data:application/pdf;base64,JVBERi0x"},
                    ]},
                    {"type": "message", "role": "assistant", "content": "a cat, notes and a report"},
                ]
            }),
        );
    }

    #[test]
    fn blocks_without_meta_get_no_context_part() {
        let conversation = vec![(
            Role::User,
            vec![
                text("inline"),
                image("AAAA", "image/jpeg", "attachment:///s/raw.jpg", None),
                text_resource("raw text", "attachment:///s/raw.txt", None),
                blob_resource("AQID", "attachment:///s/raw%20data.bin", None, None),
                text("Attachment x could not be read."),
            ],
        )];
        check_chat(
            &conversation,
            json!({"model": MODEL, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "inline"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
                {"type": "text", "text": "raw text"},
                {"type": "file", "file": {
                    "filename": "raw data.bin",
                    "file_data": "data:application/octet-stream;base64,AQID"
                }},
                {"type": "text", "text": "Attachment x could not be read."},
            ]}]}),
        );
        check_responses(
            &conversation,
            json!({"model": MODEL, "input": [{"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "inline"},
                {"type": "input_image", "image_url": "data:image/jpeg;base64,AAAA", "detail": "auto"},
                {"type": "input_text", "text": "raw text"},
                {"type": "input_file",
                    "filename": "raw data.bin",
                    "file_data": "data:application/octet-stream;base64,AQID"},
                {"type": "input_text", "text": "Attachment x could not be read."},
            ]}]}),
        );
    }

    #[test]
    fn roles_and_order_are_kept_across_turns() {
        let conversation = vec![
            (Role::User, vec![text("one")]),
            (Role::Assistant, vec![text("two")]),
            (Role::User, vec![text("three")]),
            (Role::Assistant, vec![text("fo"), text("ur")]),
        ];
        check_chat(
            &conversation,
            json!({"model": MODEL, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "one"}]},
                {"role": "assistant", "content": "two"},
                {"role": "user", "content": [{"type": "text", "text": "three"}]},
                {"role": "assistant", "content": "four"},
            ]}),
        );
        check_responses(
            &conversation,
            json!({"model": MODEL, "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "one"}]},
                {"type": "message", "role": "assistant", "content": "two"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "three"}]},
                {"type": "message", "role": "assistant", "content": "four"},
            ]}),
        );
    }

    #[test]
    fn assistant_messages_convert_to_text_only() {
        let conversation = vec![(
            Role::Assistant,
            vec![
                text("seen"),
                image("AAAA", "image/png", "attachment:///s/a.png", Some(CTX_IMG)),
            ],
        )];
        check_chat(
            &conversation,
            json!({"model": MODEL, "messages": [{"role": "assistant", "content": "seen"}]}),
        );
    }

    #[test]
    fn context_on_a_text_block_is_placed_before_it() {
        let mut block = TextContent::new("body");
        block.meta = Some(context_meta("ctx"));
        check_chat(
            &[(Role::User, vec![ContentBlock::Text(block)])],
            json!({"model": MODEL, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "ctx"},
                {"type": "text", "text": "body"},
            ]}]}),
        );
    }

    #[test]
    fn context_only_in_inner_resource_meta_is_not_a_block_context() {
        let mut inner = TextResourceContents::new("body", "attachment:///s/a.txt");
        inner.meta = Some(context_meta("inner ctx"));
        let block = ContentBlock::Resource(EmbeddedResource::new(
            EmbeddedResourceResource::TextResourceContents(inner),
        ));
        check_chat(
            &[(Role::User, vec![block])],
            json!({"model": MODEL, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "body"},
            ]}]}),
        );
    }

    #[test]
    fn non_string_context_is_ignored() {
        let mut meta = Meta::new();
        meta.insert(
            DAEMON_ATTACHMENT_CONTEXT_META_KEY.to_owned(),
            json!({"path": "/x"}),
        );
        let mut block = ImageContent::new("AAAA", "image/png");
        block.meta = Some(meta);
        check_chat(
            &[(Role::User, vec![ContentBlock::Image(block)])],
            json!({"model": MODEL, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ]}]}),
        );
    }

    #[test]
    fn filename_comes_from_context_then_uri_then_fallback() {
        let cases = [
            (Some(CTX_A), "attachment:///s/other.pdf", "report (1).pdf"),
            (
                Some("no json here"),
                "attachment:///s/caf%C3%A9%20menu.pdf",
                "café menu.pdf",
            ),
            (
                Some("{\"uri\":\"attachment:///s/x\"}"),
                "attachment:///s/x.bin",
                "x.bin",
            ),
            (Some("{not json"), "attachment:///s/y.bin", "y.bin"),
            (None, "attachment:///s/%E2%9C%93.bin", "✓.bin"),
            (None, "attachment:///s/", FALLBACK_FILENAME),
            (None, "", FALLBACK_FILENAME),
        ];
        for (context, uri, expected) in cases {
            assert_eq!(filename(context, uri), expected, "{context:?} {uri}");
        }
    }

    #[test]
    fn unsupported_blocks_are_skipped_with_their_context() {
        let mut audio = agent_client_protocol_schema::v1::AudioContent::new("AAAA", "audio/wav");
        audio.meta = Some(context_meta("audio ctx"));
        check_chat(
            &[(Role::User, vec![text("hi"), ContentBlock::Audio(audio)])],
            json!({"model": MODEL, "messages": [{"role": "user", "content": [
                {"type": "text", "text": "hi"},
            ]}]}),
        );
    }

    #[test]
    fn vision_request_has_hint_and_images_only() {
        let blocks = vec![
            text("what is in these?"),
            image(
                "iVBORw0K",
                "image/png",
                "attachment:///s/cat.png",
                Some(CTX_IMG),
            ),
            text_resource("# Notes", "attachment:///s/notes.md", Some(CTX_TXT)),
            blob_resource(
                "JVBERi0x",
                "attachment:///s/report.pdf",
                Some("application/pdf"),
                Some(CTX_A),
            ),
            image(
                "R0lGOD",
                "image/gif",
                "attachment:///s/dog.gif",
                Some(CTX_IMG),
            ),
        ];
        let request = vision_request("gpt-4o-mini", "Describe the cat.", &blocks);
        let actual = serde_json::to_value(&request).expect("a request of strings serializes");
        assert_eq!(
            actual,
            json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "Describe the cat."},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
                {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lGOD"}},
            ]}]})
        );
        let serialized = actual.to_string();
        assert!(!serialized.contains(DAEMON_ATTACHMENT_CONTEXT_META_KEY));
        assert!(!serialized.contains("path"));
        assert!(!serialized.contains("cat.png"));
    }

    #[test]
    fn vision_request_without_hint_has_images_only() {
        let blocks = vec![image("AAAA", "image/png", "attachment:///s/a.png", None)];
        let actual = serde_json::to_value(vision_request(MODEL, "", &blocks))
            .expect("a request of strings serializes");
        assert_eq!(
            actual,
            json!({"model": MODEL, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ]}]})
        );
    }

    #[test]
    fn chat_request_is_accepted_by_official_client_types() {
        let ours = serde_json::to_value(chat_request(MODEL, &sample_conversation()))
            .expect("a request of strings serializes");
        let theirs: async_openai::types::chat::CreateChatCompletionRequest =
            serde_json::from_value(ours.clone()).expect("async-openai accepts the request");
        let round_trip = serde_json::to_value(&theirs).expect("async-openai serializes");
        assert_eq!(round_trip, ours, "nothing lost in async-openai's types");
    }

    #[test]
    fn vision_request_is_accepted_by_official_client_types() {
        let blocks = vec![image("AAAA", "image/png", "attachment:///s/a.png", None)];
        let ours = serde_json::to_value(vision_request(MODEL, "hint", &blocks))
            .expect("a request of strings serializes");
        let theirs: async_openai::types::chat::CreateChatCompletionRequest =
            serde_json::from_value(ours.clone()).expect("async-openai accepts the request");
        let round_trip = serde_json::to_value(&theirs).expect("async-openai serializes");
        assert_eq!(round_trip, ours, "nothing lost in async-openai's types");
    }

    #[test]
    fn responses_request_is_accepted_by_official_client_types() {
        let ours = serde_json::to_value(responses_request(MODEL, &sample_conversation()))
            .expect("a request of strings serializes");
        let theirs: async_openai::types::responses::CreateResponse =
            serde_json::from_value(ours.clone()).expect("async-openai accepts the request");
        let round_trip = serde_json::to_value(&theirs).expect("async-openai serializes");
        assert_eq!(round_trip, ours, "nothing lost in async-openai's types");
    }

    #[test]
    fn our_types_read_back_what_they_write() {
        let chat = chat_request(MODEL, &sample_conversation());
        let json = serde_json::to_string(&chat).expect("a request of strings serializes");
        assert_eq!(
            serde_json::from_str::<ChatRequest>(&json).expect("reads back"),
            chat
        );
        let responses = responses_request(MODEL, &sample_conversation());
        let json = serde_json::to_string(&responses).expect("a request of strings serializes");
        assert_eq!(
            serde_json::from_str::<ResponsesRequest>(&json).expect("reads back"),
            responses
        );
    }
}
