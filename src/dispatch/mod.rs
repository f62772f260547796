//! Dispatch: turns a message's references into model content blocks. IO happens first,
//! through a `Resolver` and the memo (`resolve`); the conversion to parts is pure
//! (`to_parts`). A path given to the model is only ever the path of the read that
//! produced the block's bytes; it is never rebuilt from a root, never persisted.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use foldhash::fast::RandomState as FastState;

use agent_client_protocol_schema::v1::{ContentBlock, Meta, TextContent};
use serde::Deserialize;

use crate::attachments::{AttachmentError, AttachmentStore, AttachmentUri, Resolved};
use crate::ids::{MessageId, SessionId};
use crate::model::{Message, MessageBlock, Role, ToolsHost};

mod blocks;
mod context;
mod encoding;
mod kinds;
mod memo;
mod recycle;
pub(crate) mod shell;

pub use blocks::{Attached, ModelMessage, Part, live_link};
pub use context::{Context, attachment_context, degradation_notice, hidden_escaped, json_escaped};
pub use encoding::SharedStr;
pub(crate) use encoding::encode_base64;
use kinds::{is_image, is_text};
pub use memo::{DEFAULT_MEMO_BUDGET, Memo};
pub use recycle::Recycler;

/// The `_meta` key under which every attachment block carries its path context.
pub const DAEMON_ATTACHMENT_CONTEXT_META_KEY: &str = "daemon/attachmentContext";

/// Reads an attachment and reports the path of that read. The store's resolver is the
/// real one; tests wrap it to count reads.
pub trait Resolver: Send + Sync {
    fn read(&self, session: &SessionId, uri: &AttachmentUri) -> Result<Resolved, AttachmentError>;

    /// Where the encodings of this resolver's reads take their buffers from and give
    /// them back to; none by default.
    fn recycler(&self) -> Option<&Arc<Recycler>> {
        None
    }
}

/// A resolver whose reads are encoded into buffers kept by `recycler`: what a
/// [`crate::Store`] dispatches and restores through.
#[derive(Clone)]
pub struct Recycling<R> {
    pub resolver: R,
    pub recycler: Arc<Recycler>,
}

impl<R: Resolver> Resolver for Recycling<R> {
    fn read(&self, session: &SessionId, uri: &AttachmentUri) -> Result<Resolved, AttachmentError> {
        self.resolver.read(session, uri)
    }

    fn recycler(&self) -> Option<&Arc<Recycler>> {
        Some(&self.recycler)
    }
}

impl Resolver for AttachmentStore {
    fn read(&self, session: &SessionId, uri: &AttachmentUri) -> Result<Resolved, AttachmentError> {
        AttachmentStore::read(self, session, uri)
    }
}

/// A successful read, encoded once for the model. Clones share the encoded text (and
/// start with no context or shell kept: their fields may be changed).
#[derive(Debug)]
pub struct Prepared {
    pub name: String,
    pub uri: AttachmentUri,
    pub mime: String,
    /// The absolute path of the read that produced `content`.
    pub path: PathBuf,
    pub content: Content,
    /// `uri` as text, made once per read: every block of this read carries it.
    uri_text: String,
    /// The context string of this read for the placement it was first asked for.
    /// It is written from this read's own path, so it lives and dies with the read:
    /// a file evicted from the memo and read again is a new `Prepared`, whose context
    /// is written anew from the path of that new read.
    context: OnceLock<(Placement, Context)>,
    /// The serialized shell of this read's block for the first context a writer
    /// wrote it with (`None` when no shell could be cut: the block is then written
    /// whole), kept beside that context so each later block costs a lookup.
    shell: OnceLock<(Context, Option<shell::Shell>)>,
}

impl Clone for Prepared {
    fn clone(&self) -> Prepared {
        Prepared::new(
            self.name.clone(),
            self.uri.clone(),
            self.mime.clone(),
            self.path.clone(),
            self.content.clone(),
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// Base64 of an image's bytes.
    Image(SharedStr),
    /// A text file's contents, decoded as UTF-8.
    Text(SharedStr),
    /// Base64 of any other file's bytes.
    Blob(SharedStr),
}

impl Content {
    /// The length of the encoded text.
    pub fn encoded_len(&self) -> u64 {
        self.text().len() as u64
    }

    /// The size of the file the encoding was made from: a text's own length, or what
    /// the base64 decodes to.
    pub fn source_len(&self) -> u64 {
        match self {
            Content::Text(text) => text.len() as u64,
            Content::Image(b64) | Content::Blob(b64) => {
                let padding = b64.bytes().rev().take_while(|b| *b == b'=').count() as u64;
                (b64.len() as u64 / 4) * 3 - padding
            }
        }
    }

    /// The bytes the encoding's buffer holds: its capacity, which for a recycled
    /// buffer may be up to twice its text. What a memo's budget and a restore's
    /// batches count, so a budget bounds memory rather than text.
    pub fn held_bytes(&self) -> u64 {
        self.text().capacity() as u64
    }

    /// The encoded text, moved out when nothing else holds it (see
    /// [`SharedStr::into_string`]).
    pub fn into_text(self) -> String {
        match self {
            Content::Image(s) | Content::Text(s) | Content::Blob(s) => s.into_string(),
        }
    }

    /// The encoded text, whichever kind it is.
    pub fn text(&self) -> &SharedStr {
        match self {
            Content::Image(s) | Content::Text(s) | Content::Blob(s) => s,
        }
    }
}

impl Prepared {
    fn from_read(
        uri: &AttachmentUri,
        read: Resolved,
        recycler: Option<&Arc<Recycler>>,
    ) -> Prepared {
        let b64 = |bytes: &[u8]| encode_base64(bytes, recycler);
        let content = if is_image(&read.mime) {
            Content::Image(b64(&read.bytes))
        } else if is_text(&read.mime, &read.name) {
            // The read's own buffer becomes the text when it is UTF-8: no copy.
            match String::from_utf8(read.bytes) {
                Ok(text) => Content::Text(text.into()),
                Err(e) => Content::Blob(b64(e.as_bytes())),
            }
        } else {
            Content::Blob(b64(&read.bytes))
        };
        Prepared::new(read.name, uri.clone(), read.mime, read.path, content)
    }

    /// A read as dispatch keeps it: what was read, from which path, and its encoding.
    pub fn new(
        name: String,
        uri: AttachmentUri,
        mime: String,
        path: PathBuf,
        content: Content,
    ) -> Prepared {
        Prepared {
            name,
            uri_text: uri.to_string(),
            uri,
            mime,
            path,
            content,
            context: OnceLock::new(),
            shell: OnceLock::new(),
        }
    }

    /// The URI as text, as every block of this read writes it.
    pub fn uri_text(&self) -> &str {
        &self.uri_text
    }

    /// [`attachment_context`] for this read, written once per placement: every block
    /// made from this read (duplicates, and later messages while the memo keeps it)
    /// gets a copy of that one string.
    pub fn context(&self, placement: &Placement) -> Context {
        if let Some((at, text)) = self.context.get()
            && at == placement
        {
            return text.clone();
        }
        let text = Context::new(attachment_context(self, placement));
        // Only the first placement is kept; a memo serves one session, so one
        // placement, and another one is simply written each time.
        let _ = self.context.set((placement.clone(), text.clone()));
        text
    }
}

/// A reference that could not be read, named for errors and the degradation notice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub name: String,
    pub uri: AttachmentUri,
    pub reason: String,
    pub not_found: bool,
}

/// Parses a byte size for a memo budget: plain bytes (`1048576`), or a number with a
/// binary unit, `B`, `KiB`, `MiB` or `GiB` (any case, `K`/`M`/`G` alone too, a space
/// allowed before the unit). Decimal units like `MB` are refused rather than guessed.
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(digits_end);
    if number.is_empty() {
        return Err(format!(
            "{text:?} is not a size: expected a number of bytes, or one like 512KiB, 64MiB, 1GiB"
        ));
    }
    let shift = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => {
            return Err(format!(
                "{text:?} has an unknown unit: use B, KiB, MiB or GiB"
            ));
        }
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1u64 << shift))
        .ok_or_else(|| format!("{text:?} is too large a size"))
}

/// The outcome of reading each of a message's references, in order.
pub type Reads = Vec<Result<Arc<Prepared>, Unreadable>>;

/// Reads every reference of `message` (IO only). Within the call a reference is read
/// at most once, however often it repeats and whether or not the memo keeps it;
/// across calls only successes are memoized, within the memo's budget.
pub fn resolve(resolver: &dyn Resolver, memo: &Memo, message: &Message) -> Reads {
    // A repeat shares the first one's read: keyed by the parsed URI itself, no text is
    // built per reference (foldhash, as the memo's).
    let mut first: HashMap<&AttachmentUri, usize, FastState> = HashMap::default();
    let mut out: Reads = Vec::with_capacity(message.refs.len());
    for (i, reference) in message.refs.iter().enumerate() {
        let key = &reference.uri;
        let j = *first.entry(key).or_insert(i);
        if j != i {
            out.push(out[j].clone());
            continue;
        }
        let read = match memo.get(key) {
            Some(hit) => Ok(hit),
            None => {
                let read = resolver
                    .read(&message.session_id, &reference.uri)
                    .map(|r| Arc::new(Prepared::from_read(&reference.uri, r, resolver.recycler())))
                    .map_err(|e| Unreadable {
                        name: reference.stored_name.clone(),
                        uri: reference.uri.clone(),
                        reason: e.to_string(),
                        not_found: e.is_not_found(),
                    });
                if let Ok(prepared) = &read {
                    memo.insert(key, prepared.clone());
                }
                read
            }
        };
        out.push(read);
    }
    out
}

/// Heads the text block that carries a message's audio transcription.
pub const TRANSCRIPT_LABEL: &str = "Audio transcript:\n";

/// Strict dispatch fails on any unreadable reference; degrading dispatch drops those
/// blocks and says so in a short notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Strict,
    Degrade,
}

/// Where the model's tools run, and the daemon host every path is on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub host: String,
    pub tools_host: ToolsHost,
}

/// Why a strict dispatch refused: every unreadable reference, by name and URI.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("message {message} has unreadable attachments: {}", named(unreadable.iter()))]
pub struct DispatchError {
    pub message: MessageId,
    pub unreadable: Vec<Unreadable>,
}

impl Prepared {
    /// The same read: same URI, name, type, path and encoded content.
    pub(super) fn same_as(&self, other: &Prepared) -> bool {
        self.uri == other.uri
            && self.name == other.name
            && self.mime == other.mime
            && self.path == other.path
            && self.content == other.content
    }
}

/// Pure: a message and the reads of its references become its parts. User messages
/// get their model text (when not blank), their transcript (when there is one), then
/// one part per reference in order; a message stored from a prompt gets its blocks in
/// the order they were sent instead (`Message::content`); other roles convert to text
/// only.
pub fn to_parts(
    message: &Message,
    reads: &[Result<Arc<Prepared>, Unreadable>],
    placement: &Placement,
    mode: Mode,
) -> Result<Vec<Part>, DispatchError> {
    let mut parts = Vec::with_capacity(reads.len() + 2);
    let text = message.model_text();
    if message.role != Role::User {
        parts.push(Part::Text(text.to_owned()));
        return Ok(parts);
    }
    if let Some(content) = &message.content {
        return ordered_parts(message, content, reads, placement, mode);
    }
    // Whitespace alone is no text, as `send` already judges it.
    if !text.trim().is_empty() {
        parts.push(Part::Text(text.to_owned()));
    }
    // An audio message's words reach the main model too, as their own text block.
    if let Some(transcript) = message
        .transcript
        .as_deref()
        .filter(|t| !t.trim().is_empty())
    {
        parts.push(Part::Text(format!("{TRANSCRIPT_LABEL}{transcript}")));
    }
    let mut unreadable = Vec::new();
    for read in reads {
        match read {
            Ok(p) => parts.push(attached(p, placement, None)),
            Err(u) => unreadable.push(u.clone()),
        }
    }
    with_unreadable(parts, unreadable, message, mode)
}

/// A read as an attachment part: its context for `placement`, the client block's own
/// `meta` beside it.
fn attached(read: &Arc<Prepared>, placement: &Placement, meta: Option<Meta>) -> Part {
    Part::Attachment(Attached {
        context: read.context(placement),
        prepared: read.clone(),
        meta,
    })
}

/// The end of every message's parts: with no unreadable reference, the parts; else
/// strict fails naming them, and degrading adds the notice of what was left out.
fn with_unreadable(
    mut parts: Vec<Part>,
    unreadable: Vec<Unreadable>,
    message: &Message,
    mode: Mode,
) -> Result<Vec<Part>, DispatchError> {
    if unreadable.is_empty() {
        return Ok(parts);
    }
    match mode {
        Mode::Strict => Err(DispatchError {
            message: message.id,
            unreadable,
        }),
        Mode::Degrade => {
            parts.push(Part::Text(degradation_notice(&unreadable)));
            Ok(parts)
        }
    }
}

/// The parts of a message stored from a prompt, in the order its blocks were sent:
/// its text blocks, each reference's read where the attachment was (with the client
/// block's own `_meta`), and the client's own blocks as kept.
fn ordered_parts(
    message: &Message,
    content: &[MessageBlock],
    reads: &[Result<Arc<Prepared>, Unreadable>],
    placement: &Placement,
    mode: Mode,
) -> Result<Vec<Part>, DispatchError> {
    let mut parts = Vec::with_capacity(content.len() + 1);
    let mut unreadable = Vec::new();
    let mut unparsed = 0;
    for block in content {
        match block {
            // Whitespace alone is no text, as `send` judges it.
            MessageBlock::Text { text, .. } if text.trim().is_empty() => {}
            MessageBlock::Text { text, meta: None } => parts.push(Part::Text(text.clone())),
            MessageBlock::Text { text, meta } => {
                let mut t = TextContent::new(text.clone());
                t.meta = meta.clone();
                parts.push(Part::Verbatim(Box::new(ContentBlock::Text(t))));
            }
            MessageBlock::Reference { ordinal, meta } => match reads.get(*ordinal as usize) {
                Some(Ok(p)) => parts.push(attached(p, placement, meta.clone())),
                Some(Err(u)) => unreadable.push(u.clone()),
                // A block naming no reference: a row this store did not write.
                None => unparsed += 1,
            },
            MessageBlock::Verbatim { block } => match ContentBlock::deserialize(block) {
                Ok(block) => parts.push(Part::Verbatim(Box::new(block))),
                Err(_) => unparsed += 1,
            },
        }
    }
    if unparsed > 0 {
        parts.push(Part::Text(format!(
            "[{unparsed} block{} of this message could not be read and {} left out]",
            if unparsed == 1 { "" } else { "s" },
            if unparsed == 1 { "was" } else { "were" },
        )));
    }
    with_unreadable(parts, unreadable, message, mode)
}

/// IO then conversion, for one message, as parts that share their encodings.
pub fn dispatch_parts(
    resolver: &dyn Resolver,
    memo: &Memo,
    message: Message,
    placement: &Placement,
    mode: Mode,
) -> Result<ModelMessage, DispatchError> {
    let reads = if message.role == Role::User {
        resolve(resolver, memo, &message)
    } else {
        vec![]
    };
    warn_if_degraded(&message, &reads, mode);
    let parts = to_parts(&message, &reads, placement, mode)?;
    Ok(ModelMessage { message, parts })
}

/// Logs one line per message that a degrading dispatch left references out of, naming
/// what was left out and why; a strict dispatch reports the same as its error instead.
fn warn_if_degraded(message: &Message, reads: &Reads, mode: Mode) {
    if mode != Mode::Degrade {
        return;
    }
    let left_out: Vec<&Unreadable> = reads.iter().filter_map(|r| r.as_ref().err()).collect();
    if !left_out.is_empty() {
        tracing::warn!(
            "message {} was dispatched without {} unreadable attachment{}: {}",
            message.id,
            left_out.len(),
            if left_out.len() == 1 { "" } else { "s" },
            named(left_out.into_iter())
        );
    }
}

/// Unreadable references by name and reason, as errors and logs give them.
fn named<'a>(unreadable: impl Iterator<Item = &'a Unreadable>) -> String {
    let named: Vec<String> = unreadable
        .map(|u| format!("{} ({})", json_escaped(&u.name), u.reason))
        .collect();
    named.join("; ")
}

#[cfg(test)]
mod tests;
