//! The streaming writers against the schema types serialized by serde_json: every
//! format, every kind of part, on strings that need escaping.

use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol_schema::rpc::{JsonRpcMessage, Notification};
use agent_client_protocol_schema::v1::{
    ContentBlock, ContentChunk, MessageId as AcpMessageId, SessionNotification, SessionUpdate,
};

use super::{Format, StreamWriter};
use crate::attachments::AttachmentUri;
use crate::dispatch::{
    Attached, Content, ModelMessage, Part, Placement, Prepared, Unreadable, attachment_context,
    degradation_notice,
};
use crate::ids::{MessageId, SessionId};
use crate::model::{Delivery, Message, Role, Session, ToolsHost};
use crate::openai::{chat_request, responses_request};
use crate::store::{Dispatched, Restored};

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

fn type_built_updates(
    session: SessionId,
    history: &[ModelMessage],
) -> Vec<JsonRpcMessage<Notification<SessionNotification>>> {
    let mut lines = Vec::new();
    for m in history {
        for block in m.to_blocks() {
            let chunk =
                ContentChunk::new(block).message_id(AcpMessageId::from(m.message.id.to_string()));
            let update = match m.message.role {
                Role::User => SessionUpdate::UserMessageChunk(chunk),
                _ => SessionUpdate::AgentMessageChunk(chunk),
            };
            lines.push(JsonRpcMessage::wrap(Notification {
                method: "session/update".into(),
                params: Some(SessionNotification::new(session.to_string(), update)),
            }));
        }
    }
    lines
}

#[test]
fn every_format_writes_the_bytes_the_schema_types_serialize_to() {
    let session = SessionId::new();
    let history = history(session);
    let dispatched = collected(&history);

    let restored = Restored {
        session: Session {
            id: session,
            title: None,
            tools_host: ToolsHost::Local,
            created_at: String::new(),
            updated_at: String::new(),
        },
        messages: dispatched.clone(),
        items: vec![],
    };
    assert_eq!(
        streamed(Format::AcpRestore, session, &history),
        serde_json::to_string(&restored).unwrap()
    );
    let blocks: Vec<&ContentBlock> = dispatched.iter().flat_map(|d| &d.blocks).collect();
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
    let expected: String = type_built_updates(session, &history)
        .iter()
        .map(|n| serde_json::to_string(n).unwrap() + "\n")
        .collect();
    assert_eq!(streamed(Format::AcpUpdates, session, &history), expected);
}

#[test]
fn every_update_line_parses_back_into_a_session_notification() {
    let session = SessionId::new();
    let history = history(session);
    let text = streamed(Format::AcpUpdates, session, &history);
    let want = type_built_updates(session, &history);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), want.len());
    assert_eq!(
        lines.len(),
        11,
        "one line per block, assistant replies included"
    );
    for (line, want) in lines.iter().zip(&want) {
        let got: JsonRpcMessage<Notification<SessionNotification>> =
            serde_json::from_str(line).unwrap();
        assert_eq!(&got, want);
    }
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
}
