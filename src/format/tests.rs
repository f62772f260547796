//! The writers' one path against the schema types: what each format writes is
//! deserialized into the schema crate's (or `openai`'s) types and compared with the
//! typed values the builders give a library caller, and compared byte for byte with
//! serde_json's serialization of those values; on every kind of part, on strings that
//! need escaping, and on parts whose fields hold the writers' own placeholder (which
//! then are written whole).

use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol_schema::v1::{
    ContentBlock, JsonRpcMessage, Notification, PromptRequest, Request, RequestId,
    SessionNotification,
};

use super::{
    Format, RestoreEntry, RestoreMessage, RestoreObject, StreamWriter, message_update,
    notification_line, prompt_frame, prompt_request, session_updates,
};
use crate::attachments::AttachmentUri;
use crate::dispatch::{
    Attached, Content, ModelMessage, Part, Placement, Prepared, Unreadable, attachment_context,
    degradation_notice,
};
use crate::ids::{MessageId, SessionId};
use crate::model::{Delivery, Message, Role, ToolsHost};
use crate::openai::{ChatRequest, ResponsesRequest, chat_request, responses_request};
use crate::restore::ReplayItem;
use crate::store::Dispatched;

const HOSTILE: &str = "quote \" back \\ nl \n tab \t nul \u{0} bell \u{7} sep \u{2028} bidi \u{202E} é 日本 😀 </script>";

fn prepared(session: SessionId, name: &str, mime: &str, content: Content) -> Arc<Prepared> {
    Arc::new(Prepared::new(
        name.to_owned(),
        AttachmentUri::new(session, name),
        mime.to_owned(),
        PathBuf::from(format!("/roots/a \"b\"/{session}/{name}")),
        content,
    ))
}

fn attached(p: &Arc<Prepared>, tools_host: ToolsHost) -> Part {
    let placement = Placement {
        host: "host \u{202E} \"x\"".into(),
        tools_host,
    };
    Part::Attachment(Attached {
        context: attachment_context(p, &placement).into(),
        prepared: p.clone(),
        meta: None,
    })
}

fn message(session: SessionId, seq: i64, role: Role, parts: Vec<Part>) -> ModelMessage {
    ModelMessage {
        message: Message {
            id: MessageId::new(),
            session_id: session,
            seq,
            role,
            display_text: "typed".into(),
            model_text: None,
            transcript: None,
            state: Delivery::Delivered,
            created_at: String::new(),
            refs: vec![],
            content: None,
        },
        parts,
    }
}

/// A history with every part dispatch makes: text, expansion and transcript texts,
/// images, text and blob resources (one name that needs escaping, one nameless),
/// a repeated encoding, a degradation notice, assistant replies, an empty message.
fn history(session: SessionId) -> Vec<ModelMessage> {
    let image = prepared(
        session,
        "café \"chart\".png",
        "image/png",
        Content::Image("iVBORw0KGgo+/AAA=".into()),
    );
    let text = prepared(
        session,
        "notes 日本.txt",
        "text/plain",
        Content::Text(HOSTILE.into()),
    );
    let blob = prepared(
        session,
        "blob\u{200B}.bin",
        "application/octet-stream",
        Content::Blob("AAECAwQ=".into()),
    );
    let nameless = prepared(
        session,
        "",
        "application/x-thing",
        Content::Blob("/w==".into()),
    );
    let notice = degradation_notice(&[Unreadable {
        name: "gone \u{202E}.png".into(),
        uri: AttachmentUri::new(session, "gone.png"),
        reason: "not found".into(),
        not_found: true,
    }]);
    vec![
        message(
            session,
            1,
            Role::User,
            vec![
                Part::Text(HOSTILE.into()),
                Part::Text(format!("{}{HOSTILE}", crate::dispatch::TRANSCRIPT_LABEL)),
                attached(&image, ToolsHost::Local),
                attached(&text, ToolsHost::Local),
                attached(&blob, ToolsHost::Local),
                attached(&image, ToolsHost::Local),
                Part::Text(notice),
            ],
        ),
        message(
            session,
            2,
            Role::Assistant,
            vec![Part::Text(HOSTILE.into())],
        ),
        message(
            session,
            3,
            Role::User,
            vec![
                attached(&nameless, ToolsHost::Ssh),
                attached(&blob, ToolsHost::Managed),
            ],
        ),
        message(session, 4, Role::User, vec![]),
        message(session, 5, Role::Assistant, vec![Part::Text("ok".into())]),
    ]
}

fn streamed(format: Format, session: SessionId, history: &[ModelMessage]) -> String {
    let mut w = StreamWriter::begin(Vec::new(), format, session, "model \"x\"").unwrap();
    for m in history {
        w.message(m).unwrap();
    }
    String::from_utf8(w.finish().unwrap()).unwrap()
}

fn collected(history: &[ModelMessage]) -> Vec<Dispatched> {
    history
        .iter()
        .map(|m| Dispatched {
            message: m.message.clone(),
            blocks: m.to_blocks(),
        })
        .collect()
}

/// The notifications of a history built by the builders from typed blocks, one per
/// block, as a reader of `acp-updates` gets them.
fn typed_updates(session: SessionId, history: &[ModelMessage]) -> Vec<SessionNotification> {
    history
        .iter()
        .flat_map(|m| {
            m.to_blocks()
                .into_iter()
                .filter_map(|block| message_update(session, &m.message, block))
        })
        .collect()
}

/// Every format against the typed values of the same history: read back into the
/// types, the writer's output is those values, and it is what serde_json writes for
/// them.
#[test]
fn every_format_writes_what_its_typed_values_serialize_to() {
    let session = SessionId::new();
    let history = history(session);
    let dispatched = collected(&history);

    let entries: Vec<RestoreEntry<'_>> = dispatched
        .iter()
        .map(|d| {
            RestoreEntry::Message(RestoreMessage {
                id: d.message.id,
                role: d.message.role,
                content: &d.blocks[..],
            })
        })
        .collect();
    let restore = streamed(Format::AcpRestore, session, &history);
    let read: serde_json::Value = serde_json::from_str(&restore).unwrap();
    for (entry, d) in read["messages"].as_array().unwrap().iter().zip(&dispatched) {
        let blocks: Vec<ContentBlock> = serde_json::from_value(entry["content"].clone()).unwrap();
        assert_eq!(blocks, d.blocks);
    }
    let typed = RestoreObject {
        session_id: session,
        partial: None,
        messages: entries,
    };
    assert_eq!(restore, serde_json::to_string(&typed).unwrap());

    let blocks: Vec<ContentBlock> = dispatched.iter().flat_map(|d| d.blocks.clone()).collect();
    let written = streamed(Format::AcpBlocks, session, &history);
    assert_eq!(
        serde_json::from_str::<Vec<ContentBlock>>(&written).unwrap(),
        blocks
    );
    assert_eq!(written, serde_json::to_string(&blocks).unwrap());

    let chat = chat_request("model \"x\"", &dispatched);
    let written = streamed(Format::OpenaiChat, session, &history);
    assert_eq!(serde_json::from_str::<ChatRequest>(&written).unwrap(), chat);
    assert_eq!(written, serde_json::to_string(&chat).unwrap());
    // The same conversion from the parts, sharing their encodings.
    let from_parts: Vec<_> = history.iter().map(crate::openai::chat_message).collect();
    assert_eq!(from_parts, chat.messages);

    let responses = responses_request("model \"x\"", &dispatched);
    let written = streamed(Format::OpenaiResponses, session, &history);
    assert_eq!(
        serde_json::from_str::<ResponsesRequest>(&written).unwrap(),
        responses
    );
    assert_eq!(written, serde_json::to_string(&responses).unwrap());
    let from_parts: Vec<_> = history
        .iter()
        .map(crate::openai::responses_message)
        .collect();
    assert_eq!(from_parts, responses.input);

    let want = typed_updates(session, &history);
    let written = streamed(Format::AcpUpdates, session, &history);
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(
        lines.len(),
        11,
        "one line per block, assistant replies included"
    );
    assert_eq!(lines.len(), want.len());
    for (text, want) in lines.iter().zip(&want) {
        let got: JsonRpcMessage<Notification<SessionNotification>> =
            serde_json::from_str(text).unwrap();
        assert_eq!(got, notification_line(want.clone()));
        assert_eq!(
            *text,
            serde_json::to_string(&notification_line(want.clone())).unwrap()
        );
    }
    assert!(written.ends_with('\n'));
    // What an agent built on the SDK's types sends on `session/load`: the same
    // notifications, built without any JSON, from the items themselves.
    let replayed: Vec<SessionNotification> = history
        .iter()
        .flat_map(|m| session_updates(session, ReplayItem::Message(m.clone())))
        .map(|n| match n {
            crate::format::Replayed::Typed(n) => n,
            opaque => panic!("a message replays as typed updates, not {opaque:?}"),
        })
        .collect();
    assert_eq!(replayed, want);
    assert_eq!(written_whole(), 0, "every value was cut and spliced");
}

fn written_whole() -> usize {
    crate::dispatch::shell::WRITTEN_WHOLE.with(|n| n.get())
}

/// Fields that hold the writers' placeholder (a MIME type a caller set by hand, a
/// text) cannot be cut around: the writer writes those values whole, and the bytes
/// are still the typed values' serialization.
#[test]
fn a_field_holding_the_placeholder_is_written_whole_and_the_same() {
    let session = SessionId::new();
    let hole = crate::dispatch::shell::placeholder();
    let odd = prepared(
        session,
        "odd.png",
        &format!("image/{hole}"),
        Content::Image("AAAA".into()),
    );
    let text = prepared(
        session,
        "odd.txt",
        "text/plain",
        Content::Text(format!("a {hole} b").into()),
    );
    let history = vec![message(
        session,
        1,
        Role::User,
        vec![
            Part::Text(format!("x{hole}y")),
            attached(&odd, ToolsHost::Local),
            attached(&text, ToolsHost::Local),
        ],
    )];
    let dispatched = collected(&history);
    let blocks: Vec<ContentBlock> = dispatched[0].blocks.clone();
    assert_eq!(
        streamed(Format::AcpBlocks, session, &history),
        serde_json::to_string(&blocks).unwrap()
    );
    assert_eq!(
        streamed(Format::OpenaiChat, session, &history),
        serde_json::to_string(&chat_request("model \"x\"", &dispatched)).unwrap()
    );
    assert_eq!(
        streamed(Format::OpenaiResponses, session, &history),
        serde_json::to_string(&responses_request("model \"x\"", &dispatched)).unwrap()
    );
    let lines: String = typed_updates(session, &history)
        .into_iter()
        .map(|n| serde_json::to_string(&notification_line(n)).unwrap() + "\n")
        .collect();
    assert_eq!(streamed(Format::AcpUpdates, session, &history), lines);
    assert!(written_whole() > 0, "the odd values were written whole");
}

/// The prompt frame is what serde_json writes for the typed `PromptRequest` in its
/// JSON-RPC envelope, and what the SDK sends for it (it serializes the request to a
/// `serde_json::Value` first, then the envelope around that value).
#[test]
fn the_prompt_frame_is_the_typed_request_and_what_the_sdk_writes() {
    let session = SessionId::new();
    let history = history(session);
    let parts: Vec<Part> = history[..3].iter().flat_map(|m| m.parts.clone()).collect();
    let blocks: Vec<ContentBlock> = parts.iter().map(Part::to_block).collect();
    for id in [RequestId::Number(7), RequestId::Str("a \"b\"".into())] {
        let mut frame = Vec::new();
        prompt_frame(&mut frame, id.clone(), session, &parts).unwrap();
        let typed = prompt_request(id.clone(), session, blocks.clone());
        assert_eq!(frame, serde_json::to_vec(&typed).unwrap());
        let read: JsonRpcMessage<Request<PromptRequest>> = serde_json::from_slice(&frame).unwrap();
        assert_eq!(read, typed);

        let params =
            serde_json::to_value(PromptRequest::new(session.to_string(), blocks.clone())).unwrap();
        let sdk = JsonRpcMessage::wrap(Request {
            id,
            method: super::SESSION_PROMPT.into(),
            params: Some(params),
        });
        assert_eq!(frame, serde_json::to_vec(&sdk).unwrap());
    }
    assert_eq!(written_whole(), 0, "every frame was cut and spliced");
    let mut empty = Vec::new();
    prompt_frame(&mut empty, RequestId::Number(1), session, &[]).unwrap();
    assert_eq!(
        empty,
        serde_json::to_vec(&prompt_request(RequestId::Number(1), session, vec![])).unwrap()
    );
}

#[test]
fn an_empty_stream_is_an_empty_document() {
    let session = SessionId::new();
    assert_eq!(streamed(Format::AcpBlocks, session, &[]), "[]");
    assert_eq!(streamed(Format::AcpUpdates, session, &[]), "");
    assert_eq!(
        streamed(Format::AcpRestore, session, &[]),
        format!("{{\"sessionId\":\"{session}\",\"messages\":[]}}")
    );
    assert_eq!(
        streamed(Format::OpenaiChat, session, &[]),
        "{\"model\":\"model \\\"x\\\"\",\"messages\":[]}"
    );
}
