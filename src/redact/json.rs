//! Secrets in what the store keeps as JSON (ACP updates, client blocks, settings):
//! every string value redacted except the ones that are not text a person or an agent
//! wrote (inline base64, URIs, a resource's name, MIME types, ids, kinds), and
//! [`Streams`], which redacts an agent's streamed message or thought as one text
//! across the chunks and batches it comes in. Pure: no IO.

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

/// Redacts every string in `value` that is text (see the module); true when one
/// changed. Inline content's base64 (`data` beside a `mimeType`, a `blob`) and the
/// `name` of a resource (beside its `uri`) are left as they are: the first becomes an
/// attachment, which stays byte-exact, and the second is the file's name.
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

/// A JSON document given as text, redacted whole as [`value`] redacts it (a message's
/// text as one); `None` when it holds no secret, or does not parse.
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

/// An update as [`Streams`] sees it: a chunk of an agent's streamed text, or anything
/// else, each redacted in place.
pub trait Chunk: Clone + PartialEq {
    /// The text of an agent message or thought chunk whose content is a text block;
    /// `None` for anything else.
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
    /// Its last chunk with the text taken out: a chunk that equals it once its own
    /// text is taken out continues the message (same kind, message id, annotations
    /// and `_meta`).
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

/// Redacts a session's updates as they are recorded, batch after batch: each update
/// whole, except an agent's streamed text, which is redacted as one text across its
/// chunks. A chunk is written with the text that is safe so far (often none), the
/// rest held back (less than twice [`super::LONGEST`] bytes) until the message ends:
/// the next update that does not continue it, or [`Streams::end`] (the batch, the
/// turn or the input ended). Then the tail goes into the message's last chunk, or,
/// when that was written with an earlier batch, into a chunk of its own placed right
/// before what ended it, so it continues the same message.
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
    /// The batch redacted, and how many chunks of earlier batches' tails it starts
    /// with (0 or 1), which the updates given do not count. The batch before it is
    /// written already.
    pub fn pass(&mut self, batch: Vec<T>) -> (Vec<T>, usize) {
        self.pass_after(&mut [], batch)
    }

    /// [`Streams::pass`] while the caller still holds the batch passed before, unwritten
    /// (`before`): a message whose last chunk is there and that `batch` ends gets its
    /// tail there, and no chunk is added.
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

    /// The open message ended after `out`, the batch last given back, not written
    /// yet: its held-back text goes into its last chunk when that is in `out`, else
    /// into a chunk of its own at `out`'s end (then true).
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
                    // Strings replaced by strings read back as the same kind; should a
                    // field ever refuse its new words, the update is kept as the JSON
                    // it now is rather than with the secret.
                    *self = match serde::Deserialize::deserialize(&v) {
                        Ok(known) => Update::Known(known),
                        Err(_) => Update::Opaque(v),
                    };
                }
            }
        }
    }
}

/// Redacts an event's payload as a document, true when anything changed; a batch of
/// recorded updates as the recorder would have (`redact::Streams`), so that a
/// message streamed in chunks comes out as its item does: a secret split across two
/// chunks of one batch is found. Export, import and `redact` use it alike; `redact`
/// also walks a session's batches as one stream where a secret runs across two of
/// them (`lifecycle::redact`).
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
