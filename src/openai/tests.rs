//! The request conversion against hand-written expected JSON, and the official
//! client types (async-openai) reading what it writes.

use super::*;
use agent_client_protocol_schema::v1::{
    BlobResourceContents, EmbeddedResource, ImageContent, Meta, TextContent, TextResourceContents,
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
    let mut resource = EmbeddedResource::new(EmbeddedResourceResource::TextResourceContents(inner));
    resource.meta = context.map(context_meta);
    ContentBlock::Resource(resource)
}

fn blob_resource(blob: &str, uri: &str, mime: Option<&str>, context: Option<&str>) -> ContentBlock {
    let mut inner = BlobResourceContents::new(blob, uri);
    inner.mime_type = mime.map(str::to_owned);
    let mut resource = EmbeddedResource::new(EmbeddedResourceResource::BlobResourceContents(inner));
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

/// `ours` reads as async-openai's `T` and writes back unchanged.
fn accepted_as<T: serde::de::DeserializeOwned + serde::Serialize>(ours: impl serde::Serialize) {
    let ours = serde_json::to_value(ours).expect("a request of strings serializes");
    let theirs: T = serde_json::from_value(ours.clone()).expect("async-openai accepts the request");
    let round_trip = serde_json::to_value(&theirs).expect("async-openai serializes");
    assert_eq!(round_trip, ours, "nothing lost in async-openai's types");
}

#[test]
fn chat_request_is_accepted_by_official_client_types() {
    use async_openai::types::chat::CreateChatCompletionRequest;
    accepted_as::<CreateChatCompletionRequest>(chat_request(MODEL, &sample_conversation()));
}

#[test]
fn vision_request_is_accepted_by_official_client_types() {
    use async_openai::types::chat::CreateChatCompletionRequest;
    let blocks = vec![image("AAAA", "image/png", "attachment:///s/a.png", None)];
    accepted_as::<CreateChatCompletionRequest>(vision_request(MODEL, "hint", &blocks));
}

#[test]
fn responses_request_is_accepted_by_official_client_types() {
    use async_openai::types::responses::CreateResponse;
    accepted_as::<CreateResponse>(responses_request(MODEL, &sample_conversation()));
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
