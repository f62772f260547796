//! The probe's checks of what a model gets from the restored history, pure like
//! `checks`; their only IO reads back a path a model was given (invariant 2).

use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1::ContentBlock;
use serde::Serialize;
use serde_json::Value;

use super::checks::{attachments, context_line, user_messages};
use super::known::{IMAGE, Known, LEGACY, MODEL, UPLOADS};
use super::oracle::{self, CONTEXT_META_KEY, Kind, attached, parse_context, text_of};
use super::report::Outcome;
use crate::focus;
use crate::model::{Message, Role};
use crate::openai::{self, ChatMessage, ChatPart, ChatRequest, ResponsesRequest};
use crate::store::Dispatched;

pub(super) fn one_block_per_reference(restored: &[Dispatched]) -> Outcome {
    let mut refs = 0;
    for d in user_messages(restored) {
        let m = &d.message;
        // Whitespace alone is no text, as `send` judges it, so it gets no block.
        let text = usize::from(!m.model_text().trim().is_empty());
        // An audio transcript rides in a text block of its own, after the text.
        let transcript = usize::from(
            m.transcript
                .as_deref()
                .is_some_and(|t| !t.trim().is_empty()),
        );
        ensure!(
            d.blocks.len() == text + transcript + m.refs.len(),
            "message {} has {} references and {} blocks",
            m.id,
            m.refs.len(),
            d.blocks.len()
        );
        if text == 1 {
            ensure!(
                text_of(&d.blocks[0]) == Some(m.model_text()),
                "message {} does not start with its text",
                m.id
            );
        }
        let uris: Vec<&str> = attachments(d).map(|a| a.uri).collect();
        let expected: Vec<String> = m.refs.iter().map(|r| r.uri.to_string()).collect();
        ensure!(
            uris == expected,
            "message {} has blocks for {uris:?}, references {expected:?}",
            m.id
        );
        refs += m.refs.len();
    }
    ensure!(refs > 0, "no reference was dispatched");
    Ok(format!("{refs} references gave {refs} blocks, in order"))
}

/// Every attachment block carries its context under the contract's key and no other,
/// read from the blocks and their JSON, never from the library's constant.
pub(super) fn context_under_meta_key(restored: &[Dispatched]) -> Outcome {
    let mut n = 0;
    for block in restored.iter().flat_map(|d| &d.blocks) {
        let Some(a) = attached(block) else { continue };
        let meta = a
            .meta
            .ok_or_else(|| format!("the block for {} has no _meta", a.uri))?;
        let keys: Vec<&String> = meta.keys().collect();
        ensure!(
            keys == [CONTEXT_META_KEY],
            "the block for {} has _meta keys {keys:?}",
            a.uri
        );
        let json = serde_json::to_value(block).map_err(|e| e.to_string())?;
        ensure!(
            json["_meta"][CONTEXT_META_KEY].is_string(),
            "the block for {} does not serialize its context under _meta",
            a.uri
        );
        n += 1;
    }
    ensure!(n > 0, "no attachment block was dispatched");
    Ok(format!(
        "{n} attachment blocks carry their context under _meta.\"{CONTEXT_META_KEY}\""
    ))
}

pub(super) fn blocks_keep_content(k: &Known, restored: &[Dispatched], kind: Kind) -> Outcome {
    let label = kind.label();
    let mut seen = 0;
    for d in user_messages(restored) {
        let mut expected = 0;
        for r in &d.message.refs {
            expected += usize::from(k.by_uri(&r.uri.to_string())?.spec.kind == kind);
        }
        let mut found = 0;
        for a in attachments(d) {
            let file = k.by_uri(a.uri)?;
            let name = file.spec.name;
            if file.spec.kind != kind {
                ensure!(a.kind != kind, "{name:?} became a {label} block");
                continue;
            }
            ensure!(
                a.kind == kind,
                "{name:?} became a {} block, not a {label} block",
                a.kind.label()
            );
            ensure!(
                a.bytes()? == file.spec.bytes,
                "the {label} block for {name:?} does not hold the file's bytes"
            );
            let reference = d.message.refs.iter().find(|r| r.uri.to_string() == a.uri);
            ensure!(
                reference.is_some_and(|r| Some(r.mime_type.as_str()) == a.mime),
                "the {label} block for {name:?} has MIME type {:?}",
                a.mime
            );
            if kind == Kind::Image {
                ensure!(a.mime == Some("image/png"), "the PNG has type {:?}", a.mime);
            }
            found += 1;
        }
        ensure!(
            found == expected,
            "message {} has {expected} {label} references but {found} {label} blocks",
            d.message.id
        );
        seen += found;
    }
    ensure!(seen > 0, "no {label} block was dispatched");
    Ok(format!("{seen} {label} blocks equal to the stored bytes"))
}

pub(super) fn context_json_line(k: &Known, restored: &[Dispatched]) -> Outcome {
    let mut n = 0;
    for d in user_messages(restored) {
        for (a, r) in attachments(d).zip(&d.message.refs) {
            let line = context_line(&a)?;
            ensure!(
                line.name == r.stored_name
                    && line.uri == r.uri.to_string()
                    && line.mime_type == r.mime_type,
                "the context of {} names {:?} {:?} {:?}, its reference {:?} {:?} {:?}",
                a.uri,
                line.name,
                line.uri,
                line.mime_type,
                r.stored_name,
                r.uri,
                r.mime_type
            );
            ensure!(
                line.host == k.host,
                "the context names host {:?}, the daemon is {:?}",
                line.host,
                k.host
            );
            ensure!(
                !line.path.is_empty(),
                "the context of {} has no path",
                a.uri
            );
            n += 1;
        }
    }
    ensure!(n > 0, "no context was dispatched");
    Ok(format!(
        "{n} contexts, each with one JSON line of name, uri, mimeType, path, host"
    ))
}

pub(super) fn context_escapes(k: &Known, restored: &[Dispatched]) -> Outcome {
    let mut n = 0;
    for a in restored.iter().flat_map(attachments) {
        let Some(context) = a.context() else { continue };
        if let Some(c) = oracle::unescaped_hidden(context) {
            return Err(format!(
                "the context of {} holds U+{:04X} unescaped",
                a.uri, c as u32
            ));
        }
        let line = parse_context(context)?;
        let name = k.by_uri(a.uri)?.spec.name;
        ensure!(
            line.name == name,
            "the JSON line decodes to name {:?}, expected {name:?}",
            line.name
        );
        if name.chars().any(oracle::is_hidden) {
            ensure!(
                line.raw.to_lowercase().contains("\\u202e"),
                "the bidi override in {name:?} is not written as \\u202e"
            );
        } else {
            ensure!(
                line.raw.contains(name),
                "the printable name {name:?} is not readable in {:?}",
                line.raw
            );
        }
        n += 1;
    }
    ensure!(n > 0, "no context was dispatched");
    Ok(format!(
        "{n} contexts: hidden characters escaped, printable Unicode readable"
    ))
}

pub(super) fn context_holds_no_contents(k: &Known, restored: &[Dispatched]) -> Outcome {
    let mut n = 0;
    for a in restored.iter().flat_map(attachments) {
        let context = a
            .context()
            .ok_or_else(|| format!("the block for {} has no context", a.uri))?;
        let spec = k.by_uri(a.uri)?.spec;
        ensure!(
            !context.contains(a.payload),
            "the context of {:?} holds the file's content",
            spec.name
        );
        if let Ok(text) = std::str::from_utf8(spec.bytes) {
            for line in text.lines().filter(|l| l.chars().count() >= 8) {
                ensure!(
                    !context.contains(line),
                    "the context of {:?} quotes {line:?}",
                    spec.name
                );
            }
        }
        let lines = context.lines().count();
        ensure!(
            (2..=8).contains(&lines),
            "the context of {:?} has {lines} lines",
            spec.name
        );
        n += 1;
    }
    ensure!(n > 0, "no context was dispatched");
    Ok(format!("{n} contexts hold no file contents"))
}

pub(super) fn raw_text_has_no_meta(restored: &[Dispatched]) -> Outcome {
    let mut n = 0;
    for block in restored.iter().flat_map(|d| &d.blocks) {
        let ContentBlock::Text(text) = block else {
            continue;
        };
        ensure!(
            text.meta.is_none(),
            "the text block {:?} has _meta",
            text.text
        );
        let json = serde_json::to_value(block).map_err(|e| e.to_string())?;
        ensure!(
            json.get("_meta").is_none(),
            "the text block {:?} serializes a _meta",
            text.text
        );
        n += 1;
    }
    ensure!(n > 0, "no text block was dispatched");
    Ok(format!(
        "{n} text blocks without a reference carry no _meta"
    ))
}

/// The path contexts among a chat request's user parts, each with the part after it.
fn chat_contexts(chat: &ChatRequest) -> Vec<(oracle::ContextLine, Option<&ChatPart>)> {
    let mut out = Vec::new();
    for message in &chat.messages {
        let ChatMessage::User { content } = message else {
            continue;
        };
        for (i, part) in content.iter().enumerate() {
            if let ChatPart::Text { text } = part
                && let Ok(line) = parse_context(text)
            {
                out.push((line, content.get(i + 1)));
            }
        }
    }
    out
}

/// Reads each path the request gives the model back from disk (invariant 2).
pub(super) fn paths_read_back(k: &Known, chat: &ChatRequest) -> Outcome {
    let contexts = chat_contexts(chat);
    for (line, next) in &contexts {
        let file = k.by_uri(&line.uri)?;
        let path = Path::new(&line.path);
        ensure!(path.is_absolute(), "{path:?} is not absolute");
        let on_disk = std::fs::read(path)
            .map_err(|e| format!("the path {path:?} given to the model: {e}"))?;
        ensure!(
            on_disk == file.spec.bytes,
            "reading {path:?} does not give the bytes stored as {:?}",
            file.spec.name
        );
        let sent = next
            .ok_or("a context part ends the message")
            .and_then(|p| {
                oracle::part_bytes(p).map_err(|_| "a context part is not before content")
            })?;
        ensure!(
            sent == on_disk,
            "the part after the context of {:?} is not the bytes at {path:?}",
            file.spec.name
        );
    }
    let n = contexts.len();
    let refs: usize = chat
        .messages
        .iter()
        .map(|m| match m {
            ChatMessage::User { content } => content
                .iter()
                .filter(|p| !matches!(p, ChatPart::Text { .. }))
                .count(),
            _ => 0,
        })
        .sum();
    ensure!(n > 0, "no path reached the request");
    ensure!(
        n >= refs,
        "{n} paths for {refs} image and file parts in the request"
    );
    Ok(format!(
        "{n} paths in the request, all absolute, each reading back the model's bytes"
    ))
}

/// Every path is where its file was put; `legacy_copy_exists` (the configured root
/// holds the legacy-only file too) would make the check prove nothing.
pub(super) fn legacy_path(k: &Known, chat: &ChatRequest, legacy_copy_exists: bool) -> Outcome {
    let legacy = k.file(LEGACY);
    ensure!(
        !legacy_copy_exists,
        "the legacy-only file also exists at {:?}",
        k.folder(&k.configured).join(legacy.spec.name)
    );
    let mut seen = 0;
    for (line, _) in chat_contexts(chat) {
        let path = PathBuf::from(&line.path);
        let file = k.by_uri(&line.uri)?;
        let root = if line.uri == legacy.uri {
            seen += 1;
            &k.legacy
        } else {
            &k.configured
        };
        let expected = k.folder(root).join(file.spec.name);
        ensure!(
            path == expected,
            "{:?} was given as {path:?}, read from {expected:?}",
            file.spec.name
        );
    }
    ensure!(seen > 0, "the legacy-only file never reached the request");
    Ok(format!(
        "the legacy-only file's path is in the legacy root ({seen} parts)"
    ))
}

/// Compares a request with its expected JSON, naming the first message that differs.
fn compare_request<T: Serialize>(actual: &T, expected: &Value, list: &str) -> Result<(), String> {
    let actual = serde_json::to_value(actual).map_err(|e| e.to_string())?;
    if actual == *expected {
        return Ok(());
    }
    let empty = Vec::new();
    let a = actual[list].as_array().unwrap_or(&empty);
    let e = expected[list].as_array().unwrap_or(&empty);
    ensure!(
        a.len() == e.len(),
        "{} {list}, expected {}",
        a.len(),
        e.len()
    );
    let i = a.iter().zip(e).position(|(x, y)| x != y).unwrap_or(0);
    let shorten = |v: Option<&Value>| {
        let s = v.map(Value::to_string).unwrap_or_default();
        if s.chars().count() <= 400 {
            s
        } else {
            format!("{}…", s.chars().take(400).collect::<String>())
        }
    };
    Err(format!(
        "{list}[{i}] differs: got {}, expected {}",
        shorten(a.get(i)),
        shorten(e.get(i))
    ))
}

pub(super) fn openai_chat(
    conversation: &[(Role, Vec<ContentBlock>)],
    chat: &ChatRequest,
) -> Outcome {
    compare_request(
        chat,
        &oracle::expected_chat(MODEL, conversation)?,
        "messages",
    )?;
    let contexts = conversation
        .iter()
        .flat_map(|(_, blocks)| blocks)
        .filter(|b| attached(b).is_some_and(|a| a.context().is_some()))
        .count();
    Ok(format!(
        "{contexts} path-context text parts, each right before its attachment part"
    ))
}

pub(super) fn openai_responses(
    conversation: &[(Role, Vec<ContentBlock>)],
    responses: &ResponsesRequest,
) -> Outcome {
    let chat = oracle::expected_chat(MODEL, conversation)?;
    compare_request(responses, &oracle::expected_responses(&chat), "input")?;
    Ok("input_text context before each input_image / input_file / contents".into())
}

pub(super) fn round_trips(
    chat: &ChatRequest,
    responses: &ResponsesRequest,
    conversation: &[(Role, Vec<ContentBlock>)],
) -> Outcome {
    fn same<T: Serialize + serde::de::DeserializeOwned + PartialEq>(v: &T) -> Result<bool, String> {
        let text = serde_json::to_string(v).map_err(|e| e.to_string())?;
        let back: T = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        Ok(back == *v)
    }
    ensure!(same(chat)?, "the chat request changes through JSON");
    ensure!(
        same(responses)?,
        "the responses request changes through JSON"
    );
    for (_, blocks) in conversation {
        ensure!(same(blocks)?, "ACP blocks change through JSON");
    }
    Ok("chat, responses and ACP blocks survive JSON unchanged".into())
}

fn hint_of(m: &Message) -> String {
    focus::focus_hint(
        &m.display_text,
        m.model_text.as_deref(),
        m.transcript.as_deref(),
    )
}

pub(super) fn focus_hints(k: &Known, restored: &[Dispatched]) -> Outcome {
    let mut needles = k.needles_and_names();
    needles.push("attachment:".to_owned());
    needles.push(CONTEXT_META_KEY.to_owned());
    let mut n = 0;
    for d in user_messages(restored) {
        let m = &d.message;
        let hint = hint_of(m);
        ensure!(
            hint.starts_with(&m.display_text),
            "the hint for {} does not start with the question: {hint:?}",
            m.id
        );
        if let Some(t) = &m.transcript {
            ensure!(hint.contains(t.as_str()), "the hint lost the transcript");
        }
        ensure!(
            hint.chars().count() <= focus::FOCUS_HINT_LIMIT,
            "the hint has {} characters",
            hint.chars().count()
        );
        if let Some(needle) = needles.iter().find(|s| hint.contains(s.as_str())) {
            return Err(format!("the hint for {} contains {needle:?}", m.id));
        }
        n += 1;
    }
    ensure!(n > 0, "no user message to build a hint for");
    Ok(format!(
        "{n} hints hold the user's text and no path, name or URI"
    ))
}

pub(super) fn vision_request(k: &Known, restored: &[Dispatched]) -> Outcome {
    let normal = restored.first().ok_or("nothing was restored")?;
    let hint = hint_of(&normal.message);
    let request = openai::vision_request(MODEL, &hint, &normal.blocks);
    let text = serde_json::to_string(&request).map_err(|e| e.to_string())?;
    if let Some(needle) = k
        .needles_and_names()
        .into_iter()
        .find(|s| text.contains(s.as_str()))
    {
        return Err(format!("the vision request contains {needle:?}"));
    }
    let images = normal
        .blocks
        .iter()
        .filter(|b| matches!(b, ContentBlock::Image(_)))
        .count();
    let expected_image = ChatPart::ImageUrl {
        image_url: openai::ImageUrl {
            url: openai::DataUrl::new(
                "image/png",
                base64_simd::STANDARD.encode_to_string(UPLOADS[IMAGE].bytes),
            ),
        },
    };
    let [ChatMessage::User { content }] = request.messages.as_slice() else {
        return Err("the vision request is not one user message".into());
    };
    ensure!(
        content.first() == Some(&ChatPart::Text { text: hint.clone() }),
        "the vision request does not start with the hint"
    );
    ensure!(
        content.len() == 1 + images && content[1..].iter().all(|p| *p == expected_image),
        "the vision request has {} parts for {images} images",
        content.len()
    );
    Ok(format!("the hint and {images} image, no path, name or URI"))
}
