//! Secrets in the store's JSON: every string value redacted except those no person or
//! agent wrote (base64, URIs, resource names, MIME types, ids, kinds); [`Streams`]
//! redacts a streamed message as one text across its chunks and batches. Pure.

use serde_json::Value;

use super::{Stream, redact};

/// Keys whose string values are never scanned: ids, kinds and MIME types (never a
/// secret, and skipping them saves the scan), and URIs (issue 48 keeps them as given).
const NOT_TEXT: &[&str] = &[
    "uri",
    "storedName",
    "mimeType",
    "toolCallId",
    "messageId",
    "sessionId",
    "sessionUpdate",
    "type",
];

/// Redacts every string in `value` that is text; true when one changed. Inline base64
/// (it becomes a byte-exact attachment) and a resource's `name` are left as they are.
pub fn value(value: &mut Value) -> bool {
    match value {
        Value::String(s) => match redact(s) {
            std::borrow::Cow::Borrowed(_) => false,
            std::borrow::Cow::Owned(r) => {
                *s = r;
                true
            }
        },
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, v| self::value(v) | changed),
        Value::Object(map) => {
            let inline = map.contains_key("mimeType");
            let resource = map.contains_key("uri");
            let mut changed = false;
            for (key, v) in map.iter_mut() {
                let skip = NOT_TEXT.contains(&key.as_str())
                    || key == "blob"
                    || (key == "data" && inline)
                    || (key == "name" && resource);
                if !skip {
                    changed |= self::value(v);
                }
            }
            changed
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// [`value`] of an object's members (a block's `_meta`, say).
pub fn object(map: &mut serde_json::Map<String, Value>) {
    let mut whole = Value::Object(std::mem::take(map));
    value(&mut whole);
    if let Value::Object(redacted) = whole {
        *map = redacted;
    }
}

/// A JSON text redacted whole as [`value`] does; `None` if no secret or unparsed.
pub fn json_text(text: &str) -> Option<String> {
    let mut document: Value = serde_json::from_str(text).ok()?;
    value(&mut document).then(|| document.to_string())
}

/// `text` redacted, kept as it is (no copy) when it holds no secret.
pub fn owned(text: String) -> String {
    match redact(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(r) => r,
    }
}

/// An update as [`Streams`] sees it, redacted in place.
pub trait Chunk: Clone + PartialEq {
    /// The text of an agent message or thought chunk of a text block, else `None`.
    fn text_mut(&mut self) -> Option<&mut String>;
    /// Redacts the whole update in place (for a chunk, the text it holds too).
    fn redact_whole(&mut self);
}

impl Chunk for Value {
    fn text_mut(&mut self) -> Option<&mut String> {
        let kind = self.get("sessionUpdate")?.as_str()?;
        if !matches!(kind, "agent_message_chunk" | "agent_thought_chunk") {
            return None;
        }
        let content = self.get_mut("content")?;
        if content.get("type")?.as_str()? != "text" {
            return None;
        }
        match content.get_mut("text")? {
            Value::String(text) => Some(text),
            _ => None,
        }
    }

    fn redact_whole(&mut self) {
        value(self);
    }
}

/// A streamed message or thought whose text is still coming.
#[derive(Debug)]
struct Open<T> {
    /// Its last chunk, text taken out: a chunk equal to it without its text continues
    /// the message.
    blank: T,
    stream: Stream,
    /// Where its last chunk is.
    last: Last,
}

/// Where an open message's last chunk is.
#[derive(Debug, Clone, Copy)]
enum Last {
    /// In the batch being passed, at this index.
    Here(usize),
    /// In the batch passed before it, at this index (when the caller still holds it).
    Before(usize),
    /// Written already.
    Gone,
}

/// Redacts updates as they are recorded, batch after batch: an agent's streamed text
/// as one text across its chunks. A chunk keeps the text safe so far, the rest (under
/// twice [`super::LONGEST`] bytes) is held until the message ends, then goes into its
/// last chunk, or, if that was written with an earlier batch, a chunk of its own right
/// before what ended it.
#[derive(Debug)]
pub struct Streams<T> {
    open: Option<Open<T>>,
}

impl<T> Default for Streams<T> {
    fn default() -> Self {
        Streams { open: None }
    }
}

impl<T: Chunk> Streams<T> {
    /// The batch redacted, and how many tail chunks of earlier batches it starts with
    /// (0 or 1). The batch before it is written already.
    pub fn pass(&mut self, batch: Vec<T>) -> (Vec<T>, usize) {
        self.pass_after(&mut [], batch)
    }

    /// [`Streams::pass`] while the caller still holds the previous batch (`before`),
    /// unwritten: a message ending there gets its tail there, no chunk added.
    pub fn pass_after(&mut self, before: &mut [T], batch: Vec<T>) -> (Vec<T>, usize) {
        let mut out = Vec::with_capacity(batch.len() + 1);
        let mut added = 0;
        if let Some(open) = &mut self.open {
            open.last = match open.last {
                Last::Here(i) if i < before.len() => Last::Before(i),
                _ => Last::Gone,
            };
        }
        for mut update in batch {
            let text = update.text_mut().map(std::mem::take);
            update.redact_whole();
            let continues = match (&self.open, &text) {
                (Some(open), Some(_)) => open.blank == update,
                _ => false,
            };
            if !continues && self.end_in(before, &mut out) {
                added += 1;
            }
            let Some(text) = text else {
                out.push(update);
                continue;
            };
            let open = self.open.get_or_insert_with(|| Open {
                blank: update.clone(),
                stream: Stream::default(),
                last: Last::Gone,
            });
            *update.text_mut().expect("a chunk's text was taken from it") = open.stream.push(&text);
            open.last = Last::Here(out.len());
            out.push(update);
        }
        (out, added)
    }

    /// The open message ended after `out` (unwritten): its tail goes into its last
    /// chunk if in `out`, else a chunk of its own at `out`'s end (then true).
    pub fn end(&mut self, out: &mut Vec<T>) -> bool {
        self.end_in(&mut [], out)
    }

    /// [`Streams::end`] with the batch before `out` still held too.
    fn end_in(&mut self, before: &mut [T], out: &mut Vec<T>) -> bool {
        let Some(open) = self.open.take() else {
            return false;
        };
        let tail = open.stream.finish();
        if tail.is_empty() {
            return false;
        }
        let last = match open.last {
            Last::Here(i) => out.get_mut(i),
            Last::Before(i) => before.get_mut(i),
            Last::Gone => None,
        };
        match last.and_then(Chunk::text_mut) {
            Some(text) => text.push_str(&tail),
            None => {
                let mut chunk = open.blank;
                *chunk.text_mut().expect("a blank is a chunk") = tail;
                out.push(chunk);
                return true;
            }
        }
        false
    }
}

impl Chunk for crate::turns::Update {
    fn text_mut(&mut self) -> Option<&mut String> {
        use agent_client_protocol_schema::v1::{ContentBlock, SessionUpdate};
        match self {
            crate::turns::Update::Known(
                SessionUpdate::AgentMessageChunk(c) | SessionUpdate::AgentThoughtChunk(c),
            ) => match &mut c.content {
                ContentBlock::Text(t) => Some(&mut t.text),
                _ => None,
            },
            _ => None,
        }
    }

    fn redact_whole(&mut self) {
        use crate::turns::Update;
        use agent_client_protocol_schema::v1::{ContentBlock, SessionUpdate};
        match self {
            // A chunk of plain text, the bulk of any history: its text alone.
            Update::Known(
                SessionUpdate::AgentMessageChunk(c) | SessionUpdate::AgentThoughtChunk(c),
            ) if c.meta.is_none()
                && matches!(&c.content, ContentBlock::Text(t) if t.meta.is_none() && t.annotations.is_none()) =>
            {
                if let ContentBlock::Text(t) = &mut c.content
                    && let std::borrow::Cow::Owned(r) = redact(&t.text)
                {
                    t.text = r;
                }
            }
            Update::Opaque(v) => {
                value(v);
            }
            Update::Known(known) => {
                let mut v =
                    serde_json::to_value(&*known).expect("ACP schema values always serialize");
                if value(&mut v) {
                    // Should a field refuse its new words, the update is kept as the
                    // JSON it now is rather than with the secret.
                    *self = match serde::Deserialize::deserialize(&v) {
                        Ok(known) => Update::Known(known),
                        Err(_) => Update::Opaque(v),
                    };
                }
            }
        }
    }
}

/// Redacts an event's payload, true when anything changed; a recorded batch as the
/// recorder would (`Streams`), so a secret split across its chunks is found. Export,
/// import and `redact` use it alike.
pub fn payload(payload: &mut Value) -> bool {
    let Some(map) = payload.as_object_mut() else {
        return value(payload);
    };
    let mut changed = false;
    for (key, v) in map.iter_mut() {
        match (key.as_str(), v) {
            ("updates", Value::Array(updates)) => {
                // Its chunks keep their texts unless a secret runs across them.
                let joined: String = updates
                    .iter_mut()
                    .filter_map(|u| Chunk::text_mut(u).map(|t| t.clone()))
                    .collect();
                if super::find(&joined).is_empty() {
                    for u in updates.iter_mut() {
                        changed |= value(u);
                    }
                    continue;
                }
                let mut streams = Streams::default();
                let (mut out, _) = streams.pass(std::mem::take(updates));
                streams.end(&mut out);
                *updates = out;
                changed = true;
            }
            (_, v) => changed |= value(v),
        }
    }
    changed
}
