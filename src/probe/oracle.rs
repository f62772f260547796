//! The oracle: what DESIGN.md says the store's output must be, worked out without the
//! code it judges (no `dispatch`, no `openai` builder); shared by the probe and the
//! tests (`sessionstore::oracle` with `testkit`). No state but a read counter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use agent_client_protocol_schema::v1::{ContentBlock, EmbeddedResourceResource, Meta};
use serde_json::{Value, json};

use crate::attachments::ReadObserver;
use crate::config::Config;
use crate::ids::SessionId;

/// A schema of its own on a PostgreSQL server, for the probe, the tests and the bench.
#[cfg(feature = "postgres")]
pub use crate::db::postgres::ScratchSchema;
use crate::model::Role;
use crate::openai::ChatPart;
use crate::store::Store;

pub use crate::db::audit::{CLIENT_CONTENT_COLUMNS, PATH_WORDS, PathAudit};

/// The `_meta` key of a block's path context as DESIGN.md spells it (invariant 3),
/// not the library's constant, so a block under another key fails.
pub const CONTEXT_META_KEY: &str = "daemon/attachmentContext";

/// A complete 1×1 RGBA PNG: real magic bytes, IHDR, IDAT and IEND with valid CRCs.
pub const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\x0dIDAT\x78\x9c\x63\xf8\xcf\xc0\xf0\x1f\x00\x05\x00\x01\xff\x89\x99\x3d\x1d\x00\x00\x00\x00IEND\xae\x42\x60\x82";

/// Every attachment read a store made, counted per URI (clones share the count).
#[derive(Clone, Default)]
pub struct ReadCounter(Arc<Mutex<HashMap<String, usize>>>);

/// Read counts at one moment, to compare with another.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadCounts(HashMap<String, usize>);

impl ReadCounter {
    /// A store on `config` whose reads this counter counts.
    pub async fn open(config: Config) -> crate::error::Result<(Store, ReadCounter)> {
        let counter = ReadCounter::default();
        let counts = counter.0.clone();
        let observer = ReadObserver::new(move |_, uri| {
            *counts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(uri.to_string())
                .or_default() += 1;
        });
        let store = Store::open_observing_reads(config, observer).await?;
        Ok((store, counter))
    }

    pub fn snapshot(&self) -> ReadCounts {
        ReadCounts(
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        )
    }

    /// Reads so far, of every URI.
    pub fn total(&self) -> usize {
        self.snapshot().total()
    }
}

impl ReadCounts {
    pub fn of(&self, uri: &str) -> usize {
        self.0.get(uri).copied().unwrap_or(0)
    }

    pub fn total(&self) -> usize {
        self.0.values().sum()
    }

    /// Reads of `uri` since `before`.
    pub fn of_since(&self, before: &ReadCounts, uri: &str) -> usize {
        self.of(uri) - before.of(uri)
    }

    pub fn total_since(&self, before: &ReadCounts) -> usize {
        self.total() - before.total()
    }
}

/// The URI the contract gives a stored name: unreserved characters kept, other bytes `%XX`.
pub fn expected_uri(session: SessionId, name: &str) -> String {
    let mut out = format!("attachment:///{session}/");
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Control and invisible format characters (bidi overrides, zero-width, tags): what a
/// context, a notice or an error must write as `\uXXXX`.
pub fn is_hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            c as u32,
            0x00AD
                | 0x061C
                | 0x180E
                | 0x200B..=0x200F
                | 0x2028..=0x202E
                | 0x2060..=0x2064
                | 0x2066..=0x206F
                | 0xFEFF
                | 0xFFF9..=0xFFFB
                | 0xE0000..=0xE007F
        )
}

/// The first hidden character of `text` other than a line break.
pub fn unescaped_hidden(text: &str) -> Option<char> {
    text.chars().find(|&c| c != '\n' && is_hidden(c))
}

/// The keys of a context's JSON line, sorted.
pub const CONTEXT_KEYS: [&str; 5] = ["host", "mimeType", "name", "path", "uri"];

/// The JSON line of a context string, its five keys, and the line as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextLine {
    pub name: String,
    pub uri: String,
    pub mime_type: String,
    pub path: String,
    pub host: String,
    pub raw: String,
}

/// A context's one JSON line: exactly one, with exactly [`CONTEXT_KEYS`], strings.
pub fn parse_context(context: &str) -> Result<ContextLine, String> {
    let objects: Vec<(&str, serde_json::Map<String, Value>)> = context
        .lines()
        .filter_map(|l| match serde_json::from_str::<Value>(l.trim()) {
            Ok(Value::Object(o)) => Some((l, o)),
            _ => None,
        })
        .collect();
    let [(raw, object)] = objects.as_slice() else {
        return Err(format!(
            "a context has {} JSON lines, expected exactly one",
            objects.len()
        ));
    };
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    if keys != CONTEXT_KEYS {
        return Err(format!("a context's JSON line has keys {keys:?}"));
    }
    let get = |key: &str| {
        object[key]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("the context's {key} is not a string"))
    };
    Ok(ContextLine {
        name: get("name")?,
        uri: get("uri")?,
        mime_type: get("mimeType")?,
        path: get("path")?,
        host: get("host")?,
        raw: (*raw).to_owned(),
    })
}

/// The context's lines other than its JSON line, joined and lowercased.
pub fn instructions(context: &str) -> String {
    context
        .lines()
        .filter(|l| {
            !matches!(
                serde_json::from_str::<Value>(l.trim()),
                Ok(Value::Object(_))
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// What a block carries for an attachment reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Image,
    Text,
    Blob,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Image => "image",
            Kind::Text => "text",
            Kind::Blob => "binary",
        }
    }
}

/// One attachment block, read straight from the ACP types.
pub struct Attached<'a> {
    pub uri: &'a str,
    pub kind: Kind,
    pub mime: Option<&'a str>,
    /// Base64 for images and blobs, the text itself for text resources.
    pub payload: &'a str,
    pub meta: Option<&'a Meta>,
}

impl<'a> Attached<'a> {
    /// The file's bytes as the block carries them.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        match self.kind {
            Kind::Text => Ok(self.payload.as_bytes().to_vec()),
            Kind::Image | Kind::Blob => base64_simd::STANDARD
                .decode_to_vec(self.payload)
                .map_err(|_| format!("the block for {} is not base64", self.uri)),
        }
    }

    /// The path context under the contract's `_meta` key.
    pub fn context(&self) -> Option<&'a str> {
        self.meta?.get(CONTEXT_META_KEY)?.as_str()
    }
}

/// The block as an attachment block, or `None` for text and other blocks.
pub fn attached(block: &ContentBlock) -> Option<Attached<'_>> {
    match block {
        ContentBlock::Image(image) => Some(Attached {
            uri: image.uri.as_deref().unwrap_or_default(),
            kind: Kind::Image,
            mime: Some(&image.mime_type),
            payload: &image.data,
            meta: image.meta.as_ref(),
        }),
        ContentBlock::Resource(resource) => match &resource.resource {
            EmbeddedResourceResource::TextResourceContents(t) => Some(Attached {
                uri: &t.uri,
                kind: Kind::Text,
                mime: t.mime_type.as_deref(),
                payload: &t.text,
                meta: resource.meta.as_ref(),
            }),
            EmbeddedResourceResource::BlobResourceContents(b) => Some(Attached {
                uri: &b.uri,
                kind: Kind::Blob,
                mime: b.mime_type.as_deref(),
                payload: &b.blob,
                meta: resource.meta.as_ref(),
            }),
            _ => None,
        },
        _ => None,
    }
}

pub fn text_of(block: &ContentBlock) -> Option<&str> {
    match block {
        ContentBlock::Text(t) => Some(&t.text),
        _ => None,
    }
}

/// The Chat Completions request the contract describes for `conversation`: each
/// attachment's context as a text part right before its part.
pub fn expected_chat(
    model: &str,
    conversation: &[(Role, Vec<ContentBlock>)],
) -> Result<Value, String> {
    let mut messages = Vec::new();
    for (role, blocks) in conversation {
        if *role != Role::User {
            let text: String = blocks.iter().filter_map(text_of).collect();
            messages.push(json!({ "role": role.as_str(), "content": text }));
            continue;
        }
        let mut parts = Vec::new();
        for block in blocks {
            if let Some(text) = text_of(block) {
                parts.push(json!({ "type": "text", "text": text }));
                continue;
            }
            let a = attached(block).ok_or("a block is neither text nor an attachment")?;
            let context = a
                .context()
                .ok_or_else(|| format!("the block for {} has no context", a.uri))?;
            parts.push(json!({ "type": "text", "text": context }));
            let mime = a.mime.unwrap_or("application/octet-stream");
            parts.push(match a.kind {
                Kind::Image => json!({
                    "type": "image_url",
                    "image_url": { "url": format!("data:{mime};base64,{}", a.payload) }
                }),
                Kind::Text => json!({ "type": "text", "text": a.payload }),
                Kind::Blob => json!({
                    "type": "file",
                    "file": {
                        "filename": parse_context(context)?.name,
                        "file_data": format!("data:{mime};base64,{}", a.payload)
                    }
                }),
            });
        }
        messages.push(json!({ "role": "user", "content": parts }));
    }
    Ok(json!({ "model": model, "messages": messages }))
}

/// The Responses request with the same parts as an expected Chat Completions request.
pub fn expected_responses(chat: &Value) -> Value {
    let input: Vec<Value> = chat["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let content = match m["content"].as_array() {
                None => m["content"].clone(),
                Some(parts) => parts
                    .iter()
                    .map(|p| match p["type"].as_str() {
                        Some("image_url") => json!({
                            "type": "input_image",
                            "image_url": p["image_url"]["url"],
                            "detail": "auto"
                        }),
                        Some("file") => json!({
                            "type": "input_file",
                            "filename": p["file"]["filename"],
                            "file_data": p["file"]["file_data"]
                        }),
                        _ => json!({ "type": "input_text", "text": p["text"] }),
                    })
                    .collect(),
            };
            json!({ "type": "message", "role": m["role"], "content": content })
        })
        .collect();
    json!({ "model": chat["model"], "input": input })
}

/// The bytes an image, file or text part of a chat request carries.
pub fn part_bytes(part: &ChatPart) -> Result<Vec<u8>, String> {
    let from_data_url = |url: &crate::openai::DataUrl| {
        base64_simd::STANDARD
            .decode_to_vec(&*url.base64)
            .map_err(|_| "not base64".to_owned())
    };
    match part {
        ChatPart::Text { text } => Ok(text.as_bytes().to_vec()),
        ChatPart::ImageUrl { image_url } => from_data_url(&image_url.url),
        ChatPart::File { file } => from_data_url(&file.file_data),
    }
}

/// Reads the database `config` names (and files beside it) behind the store's back and
/// reports every path-like column and every place one of `needles` is stored.
pub fn audit_database(config: &crate::Config, needles: &[String]) -> crate::Result<PathAudit> {
    crate::db::audit::audit(config, needles)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_uris_follow_the_contract() {
        let s: SessionId = "01890a5d-ac96-774b-bcce-b302099a8057".parse().unwrap();
        assert_eq!(
            expected_uri(s, "café menu (1).png"),
            format!("attachment:///{s}/caf%C3%A9%20menu%20%281%29.png")
        );
        assert_eq!(
            expected_uri(s, "a-b_c.~d"),
            format!("attachment:///{s}/a-b_c.~d")
        );
    }

    #[test]
    fn contexts_need_exactly_one_json_line_with_the_five_keys() {
        let good = "Attachment context.\nUse it.\n{\"name\":\"a\",\"uri\":\"u\",\"mimeType\":\"m\",\"path\":\"/p\",\"host\":\"h\"}";
        assert_eq!(parse_context(good).unwrap().path, "/p");
        let twice = format!("{good}\n{}", good.lines().last().unwrap());
        assert!(parse_context(&twice).is_err());
        let extra = "{\"name\":\"a\",\"uri\":\"u\",\"mimeType\":\"m\",\"path\":\"/p\",\"host\":\"h\",\"size\":1}";
        assert!(parse_context(extra).is_err());
        assert!(parse_context("no json here").is_err());
    }

    /// The library's public constant is the contract's key.
    #[test]
    fn the_library_names_the_contract_s_meta_key() {
        assert_eq!(
            crate::dispatch::DAEMON_ATTACHMENT_CONTEXT_META_KEY,
            CONTEXT_META_KEY
        );
    }

    #[test]
    fn the_png_is_a_png() {
        assert_eq!(crate::attachments::mime_for("x.bin", PNG), "image/png");
    }

    #[test]
    fn hidden_characters_are_found_but_line_breaks_pass() {
        assert_eq!(unescaped_hidden("two\nlines, café 日本"), None);
        assert_eq!(unescaped_hidden("a\u{202e}b"), Some('\u{202e}'));
        assert_eq!(unescaped_hidden("tag\u{e0041}"), Some('\u{e0041}'));
    }
}
