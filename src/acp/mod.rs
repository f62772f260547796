//! The ACP session layer (`proxy`), run in front of an agent (`sessionstore proxy`)
//! or with nothing behind (`sessionstore acp`), and what it reads from a client beside
//! the wire: the `replayFrom` point and an upload's name. Every row and file goes
//! through `Store`.

pub mod proxy;

use crate::restore::Replay;
use proxy::Failure;

/// How many sessions one `session/list` answer holds (ACP has no page size).
pub const LIST_PAGE: usize = crate::lifecycle::DEFAULT_PAGE;

/// The `_meta` key of `session/load` and `session/resume` holding ACP v2's
/// `replayFrom` cursor, which v1 has no field for.
pub const REPLAY_FROM_META_KEY: &str = "replayFrom";

/// Where a replay starts, from `_meta.replayFrom` in v2's shapes: `{"type":"start"}`,
/// `{"type":"message","messageId"}` (inclusive; see `Replay::from_acp_message`) or this
/// store's `{"type":"_tail","count":N}`. Any other cursor is invalid params, as v2
/// requires, rather than another replay.
pub(crate) fn replay_point(
    meta: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Result<Option<Replay>, Failure> {
    let Some(cursor) = meta.and_then(|m| m.get(REPLAY_FROM_META_KEY)) else {
        return Ok(None);
    };
    let bad = |why: &str| {
        Failure::invalid_params(format!(
            "_meta.{REPLAY_FROM_META_KEY} {cursor}: {why}; this agent replays from \
             {{\"type\":\"start\"}}, {{\"type\":\"message\",\"messageId\":…}} or \
             {{\"type\":\"_tail\",\"count\":N}}"
        ))
    };
    match cursor.get("type").and_then(|t| t.as_str()) {
        Some("start") => Ok(Some(Replay::Whole)),
        Some("message") => match cursor.get("messageId").and_then(|m| m.as_str()) {
            Some(id) => Ok(Some(Replay::from_acp_message(id))),
            None => Err(bad("a message cursor needs a messageId string")),
        },
        Some("_tail") => match cursor.get("count").and_then(|n| n.as_u64()) {
            Some(n) => Ok(Some(Replay::Tail(n))),
            None => Err(bad("a _tail cursor needs a count of zero or more")),
        },
        Some(_) => Err(bad("an unsupported cursor type")),
        None => Err(bad("a cursor needs a type string")),
    }
}

/// The upload's own name: the last path segment of the resource URI, percent-decoded
/// (the store then makes it safe), or else `attachment.<ext>` from the MIME type.
pub(crate) fn upload_name(uri: Option<&str>, mime: Option<&str>) -> String {
    if let Some(name) = uri.and_then(last_segment) {
        return name;
    }
    match mime.and_then(extension_for) {
        Some(ext) => format!("attachment.{ext}"),
        None => "attachment".to_owned(),
    }
}

fn last_segment(uri: &str) -> Option<String> {
    let end = uri.find(['?', '#']).unwrap_or(uri.len());
    let path = &uri[..end];
    // `data:` and other opaque URIs have no path to take a name from.
    if path.starts_with("data:") {
        return None;
    }
    let segment = path.rsplit('/').next()?;
    let decoded = percent_encoding::percent_decode_str(segment).decode_utf8_lossy();
    let name = decoded.trim();
    (!name.is_empty()).then(|| name.to_owned())
}

/// An extension for a MIME type: the subtype when it is one of the type's extensions,
/// else a usual choice for common types (mime_guess lists `text/plain`'s
/// alphabetically, from `asm`), else the first one mime_guess knows.
fn extension_for(mime: &str) -> Option<&'static str> {
    let essence = mime.split(';').next()?.trim().to_ascii_lowercase();
    let usual = match essence.as_str() {
        "text/plain" => Some("txt"),
        "image/jpeg" => Some("jpg"),
        "image/svg+xml" => Some("svg"),
        "text/markdown" => Some("md"),
        "application/octet-stream" => Some("bin"),
        _ => None,
    };
    if usual.is_some() {
        return usual;
    }
    let extensions = mime_guess::get_mime_extensions_str(&essence)?;
    let subtype = essence.split('/').nth(1).unwrap_or_default();
    extensions
        .iter()
        .find(|e| **e == subtype)
        .or_else(|| extensions.first())
        .copied()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use agent_client_protocol::v1::schema::{PromptRequest, SessionId as AcpSessionId};

    use super::*;
    use crate::format;
    use crate::ids::SessionId;
    use crate::model::ToolsHost;

    /// A prompt frame written from parts is, byte for byte, the line the SDK sends for
    /// the same typed `PromptRequest`, through its own message type and serialization.
    #[test]
    fn a_prompt_frame_is_the_line_the_sdk_sends_for_the_typed_request() {
        use crate::attachments::AttachmentUri;
        use crate::dispatch::{Attached, Content, Part, Placement, Prepared};
        let session = SessionId::new();
        let placement = Placement {
            host: "h \u{202E}".into(),
            tools_host: ToolsHost::Ssh,
        };
        let part = |name: &str, mime: &str, content: Content| {
            let prepared = std::sync::Arc::new(Prepared::new(
                name.into(),
                AttachmentUri::new(session, name),
                mime.into(),
                PathBuf::from(format!("/roots/{session}/{name}")),
                content,
            ));
            Part::Attachment(Attached {
                context: prepared.context(&placement),
                prepared,
                meta: None,
            })
        };
        let parts = vec![
            Part::Text("look \"here\"\n\u{7}".into()),
            part(
                "a \"b\".png",
                "image/png",
                Content::Image("iVBORw0K".into()),
            ),
            part(
                "n.txt",
                "text/plain",
                Content::Text("x\ty \u{0} 日本".into()),
            ),
            part(
                "d.bin",
                "application/octet-stream",
                Content::Blob("AAEC".into()),
            ),
        ];
        for id in [
            agent_client_protocol::v1::schema::RequestId::Number(3),
            agent_client_protocol::v1::schema::RequestId::Str("p-1".into()),
        ] {
            let mut frame = Vec::new();
            format::prompt_frame(&mut frame, id.clone(), session, &parts).unwrap();
            let request = PromptRequest::new(
                AcpSessionId::new(session.to_string()),
                parts.iter().map(Part::to_block).collect(),
            );
            let params = serde_json::to_value(&request).unwrap();
            let sdk = agent_client_protocol::RawJsonRpcMessage::request(
                format::SESSION_PROMPT.to_owned(),
                params,
                agent_client_protocol::RawJsonRpcId::from(id),
            )
            .unwrap();
            assert_eq!(
                String::from_utf8(frame).unwrap(),
                serde_json::to_string(&sdk).unwrap()
            );
        }
    }

    #[test]
    fn upload_names_come_from_the_uri_then_the_mime_type() {
        let cases = [
            (Some("file:///home/me/notes%20v2.txt"), None, "notes v2.txt"),
            (Some("zed://selection/src/main.rs#L1-5"), None, "main.rs"),
            (
                Some("https://example.com/a/chart.png?x=1"),
                None,
                "chart.png",
            ),
            (
                Some("file:///home/me/"),
                Some("text/plain"),
                "attachment.txt",
            ),
            (None, Some("image/png"), "attachment.png"),
            (None, Some("image/jpeg"), "attachment.jpg"),
            (None, Some("application/pdf"), "attachment.pdf"),
            (
                Some("data:image/png;base64,AAAA"),
                Some("image/png"),
                "attachment.png",
            ),
            (None, Some("x-unknown/whatever"), "attachment"),
            (None, None, "attachment"),
        ];
        for (uri, mime, expected) in cases {
            assert_eq!(upload_name(uri, mime), expected, "{uri:?} {mime:?}");
        }
    }
}
