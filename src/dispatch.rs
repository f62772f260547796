//! Dispatch: turns a message's references into model content blocks. IO happens first,
//! through a `Resolver` and the memo (`resolve`); the conversion to ACP blocks is pure
//! (`to_blocks`). A path given to the model is only ever the path of the read that
//! produced the block's bytes; it is never rebuilt from a root, never persisted.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use agent_client_protocol_schema::v1::{
    BlobResourceContents, ContentBlock, EmbeddedResource, EmbeddedResourceResource, ImageContent,
    Meta, TextContent, TextResourceContents,
};

use crate::attachments::{AttachmentError, AttachmentStore, AttachmentUri, Resolved};

mod recycle;
use crate::ids::{MessageId, SessionId};
use crate::model::{Message, Role, ToolsHost};
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

/// A successful read, encoded once for the model. Clones share the encoded text.
#[derive(Debug, Clone)]
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
}

#[derive(Debug, Clone)]
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

    /// The bytes the encoding's buffer holds: its capacity, which for a recycled
    /// buffer may be up to twice its text. What a memo's budget and a restore's
    /// batches count, so a budget bounds memory rather than text.
    pub fn held_bytes(&self) -> u64 {
        self.text().0.text.capacity() as u64
    }

    /// The encoded text, whichever kind it is.
    pub fn text(&self) -> &SharedStr {
        match self {
            Content::Image(s) | Content::Text(s) | Content::Blob(s) => s,
        }
    }
}

/// An encoding shared by every block made from one read. It wraps the `String` the
/// encoding was made in, so sharing it costs no copy: an `Arc<str>` made from a
/// `String` copies every byte into a new allocation, which for a 16 MiB image is
/// 21 MB copied and a second buffer faulted in. An encoding made in a recycled buffer
/// gives that buffer back when the last block holding it is dropped.
#[derive(Clone)]
pub struct SharedStr(Arc<Kept>);

struct Kept {
    text: String,
    home: Option<Arc<Recycler>>,
}

impl Drop for Kept {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            home.give(std::mem::take(&mut self.text));
        }
    }
}

impl SharedStr {
    /// Whether both are the one buffer (not merely equal text).
    pub fn ptr_eq(a: &SharedStr, b: &SharedStr) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    /// `text`, to be given back to `home` once no block holds it.
    fn recycled(text: String, home: Arc<Recycler>) -> SharedStr {
        SharedStr(Arc::new(Kept {
            text,
            home: Some(home),
        }))
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &SharedStr) -> bool {
        **self == **other
    }
}

impl Eq for SharedStr {}

impl std::ops::Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0.text
    }
}

impl std::fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl std::fmt::Display for SharedStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl From<String> for SharedStr {
    fn from(text: String) -> SharedStr {
        SharedStr(Arc::new(Kept { text, home: None }))
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> SharedStr {
        SharedStr::from(s.to_owned())
    }
}

/// Standard base64 with padding, as the `base64` crate writes it, by a SIMD encoder
/// (picked at run time for the CPU): a large attachment's encoding is most of what a
/// dispatch or a restore spends its time on. The buffer comes from `recycler` when
/// there is one.
pub(crate) fn encode_base64(bytes: &[u8], recycler: Option<&Arc<Recycler>>) -> SharedStr {
    let base64 = base64_simd::STANDARD;
    match recycler {
        Some(home) => {
            let mut buffer = home.take(base64.encoded_length(bytes.len()));
            base64.encode_append(bytes, &mut buffer);
            SharedStr::recycled(buffer, home.clone())
        }
        None => base64.encode_to_string(bytes).into(),
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

/// The image types vision models accept inline. A BMP is still stored as an image,
/// but goes to the model as a file: an `image_url` of BMP fails a whole OpenAI request.
fn is_image(mime: &str) -> bool {
    matches!(
        mime,
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    )
}

/// Text files: `text/*`, the structured text types, and common source files.
fn is_text(mime: &str, name: &str) -> bool {
    const TYPES: &[&str] = &[
        "application/json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-javascript",
        "application/typescript",
        "application/x-sh",
        "application/x-shellscript",
        "application/sql",
        "application/csv",
        "application/x-python",
        "application/x-httpd-php",
        "image/svg+xml",
    ];
    const EXTENSIONS: &[&str] = &[
        "rs",
        "py",
        "js",
        "mjs",
        "cjs",
        "ts",
        "tsx",
        "jsx",
        "go",
        "c",
        "h",
        "cc",
        "cpp",
        "hpp",
        "java",
        "kt",
        "kts",
        "rb",
        "sh",
        "bash",
        "zsh",
        "fish",
        "toml",
        "yaml",
        "yml",
        "ini",
        "cfg",
        "conf",
        "md",
        "markdown",
        "csv",
        "tsv",
        "sql",
        "json",
        "jsonl",
        "xml",
        "html",
        "htm",
        "css",
        "scss",
        "txt",
        "log",
        "swift",
        "php",
        "pl",
        "lua",
        "r",
        "scala",
        "cs",
        "fs",
        "hs",
        "ml",
        "ex",
        "exs",
        "erl",
        "clj",
        "vue",
        "svelte",
        "gradle",
        "properties",
        "env",
        "tex",
        "rst",
        "diff",
        "patch",
        "proto",
        "graphql",
        "dockerfile",
        "makefile",
    ];
    if mime.starts_with("text/")
        || TYPES.contains(&mime)
        || mime.ends_with("+json")
        || mime.ends_with("+xml")
    {
        return true;
    }
    let lower = name.to_lowercase();
    let ext = lower.rsplit_once('.').map_or(lower.as_str(), |(_, e)| e);
    EXTENSIONS.contains(&ext)
}

/// A reference that could not be read, named for errors and the degradation notice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    pub name: String,
    pub uri: AttachmentUri,
    pub reason: String,
    pub not_found: bool,
}

/// The restore memo's default budget: 64 MiB of encoded content.
pub const DEFAULT_MEMO_BUDGET: u64 = 64 * 1024 * 1024;

/// Successful reads shared across the dispatches of one turn (normal delivery and
/// drains) or one restore. A cheap handle: clones share one memo.
///
/// A failed read is never kept, so the next dispatch reads the file again. Successes
/// are kept up to a budget of encoded bytes, least recently used evicted first, so a
/// long history cannot pile every file up in memory; a file evicted and needed again
/// is read again, and its blocks carry the path of that new read. Within one message
/// duplicates always share one read and one encoding, whatever the budget.
#[derive(Debug, Clone)]
pub struct Memo {
    inner: Arc<Mutex<Lru>>,
}

#[derive(Debug)]
struct Lru {
    budget: u64,
    used: u64,
    /// Bumped on every use, so the smallest tick is the least recently used entry.
    tick: u64,
    entries: HashMap<AttachmentUri, Entry>,
    by_age: BTreeMap<u64, AttachmentUri>,
}

#[derive(Debug)]
struct Entry {
    prepared: Arc<Prepared>,
    cost: u64,
    tick: u64,
}

impl Default for Memo {
    fn default() -> Memo {
        Memo::new()
    }
}

impl Memo {
    /// A memo with the default budget, [`DEFAULT_MEMO_BUDGET`].
    pub fn new() -> Memo {
        Memo::with_budget(DEFAULT_MEMO_BUDGET)
    }

    /// A memo that keeps at most `budget` bytes of encoded content. A budget of 0
    /// keeps nothing across messages.
    pub fn with_budget(budget: u64) -> Memo {
        Memo {
            inner: Arc::new(Mutex::new(Lru {
                budget,
                used: 0,
                tick: 0,
                entries: HashMap::new(),
                by_age: BTreeMap::new(),
            })),
        }
    }

    pub fn budget(&self) -> u64 {
        self.lock().budget
    }

    /// Encoded bytes held now; never more than the budget.
    pub fn used(&self) -> u64 {
        self.lock().used
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a successful read of `uri` is held.
    pub fn contains(&self, uri: &AttachmentUri) -> bool {
        self.lock().entries.contains_key(uri)
    }

    /// The held read of `uri`, marked as just used.
    fn get(&self, uri: &AttachmentUri) -> Option<Arc<Prepared>> {
        let mut lru = self.lock();
        lru.tick += 1;
        let tick = lru.tick;
        let Lru {
            entries, by_age, ..
        } = &mut *lru;
        let entry = entries.get_mut(uri)?;
        // The key moves to its new age rather than being copied there.
        let key = by_age.remove(&entry.tick).unwrap_or_else(|| uri.clone());
        entry.tick = tick;
        by_age.insert(tick, key);
        Some(entry.prepared.clone())
    }

    /// Keeps a successful read, evicting the least recently used entries to make room.
    /// A read larger than the whole budget is not kept at all.
    fn insert(&self, uri: &AttachmentUri, prepared: Arc<Prepared>) {
        let cost = prepared.content.held_bytes();
        let mut lru = self.lock();
        if cost > lru.budget {
            return;
        }
        if let Some(old) = lru.entries.remove(uri) {
            lru.by_age.remove(&old.tick);
            lru.used -= old.cost;
        }
        while lru.used + cost > lru.budget {
            let Some((_, victim)) = lru.by_age.pop_first() else {
                break;
            };
            if let Some(old) = lru.entries.remove(&victim) {
                lru.used -= old.cost;
            }
        }
        lru.tick += 1;
        let tick = lru.tick;
        lru.used += cost;
        lru.by_age.insert(tick, uri.clone());
        lru.entries.insert(
            uri.clone(),
            Entry {
                prepared,
                cost,
                tick,
            },
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        // A panic while holding this lock cannot leave a half-made entry (each change
        // is made before `used` is), so a poisoned memo is still sound to use.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
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
    // Keyed by the parsed URI itself: no text is built per reference.
    let mut seen: HashMap<&AttachmentUri, Result<Arc<Prepared>, Unreadable>> = HashMap::new();
    let mut out = Vec::with_capacity(message.refs.len());
    for reference in &message.refs {
        let key = &reference.uri;
        if let Some(done) = seen.get(key) {
            out.push(done.clone());
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
        seen.insert(key, read.clone());
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

/// Escapes a string as JSON, and then also every control, invisible-format, bidi,
/// zero-width, tag and line-separator character as `\uXXXX`, so a name or path can
/// neither hide text nor reorder what the model reads. Printable Unicode stays.
pub fn json_escaped(s: &str) -> String {
    hidden_escaped(&serde_json::to_string(s).expect("a string always serializes"))
}

/// Every control, invisible-format, bidi, zero-width, tag and separator character of
/// `s` as `\\uXXXX` (UTF-16 units, as in JSON), the rest unchanged: how a message that
/// echoes a name, a path or a database's own text reaches a terminal without letting
/// it move the cursor, recolour the screen or reorder what is read.
pub fn hidden_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if is_hidden(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Control characters (Cc), format characters (Cf: bidi controls, zero-width,
/// tags...) and the line and paragraph separators.
fn is_hidden(c: char) -> bool {
    let u = c as u32;
    c.is_control()
        || matches!(
            u,
            0x00AD
                | 0x0600..=0x0605
                | 0x061C
                | 0x06DD
                | 0x070F
                | 0x0890..=0x0891
                | 0x08E2
                | 0x115F..=0x1160
                | 0x17B4..=0x17B5
                | 0x180B..=0x180F
                | 0x200B..=0x200F
                | 0x2028..=0x202E
                | 0x2060..=0x206F
                | 0x3164
                | 0xFE00..=0xFE0F
                | 0xFEFF
                | 0xFFA0
                | 0xFFF0..=0xFFFB
                | 0x110BD
                | 0x110CD
                | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3
                | 0x1D173..=0x1D17A
                | 0xE0000..=0xE0FFF
        )
}

/// The plain-text context that rides in an attachment block's `_meta`: instructions,
/// then exactly one JSON line with the name, URI, MIME type, path and host. Nothing
/// from the file's contents is in it.
pub fn attachment_context(p: &Prepared, placement: &Placement) -> String {
    let json = format!(
        "{{\"name\":{},\"uri\":{},\"mimeType\":{},\"path\":{},\"host\":{}}}",
        json_escaped(&p.name),
        json_escaped(p.uri_text()),
        json_escaped(&p.mime),
        json_escaped(&p.path.to_string_lossy()),
        json_escaped(&placement.host),
    );
    let instruction = match placement.tools_host {
        ToolsHost::Local => {
            "This attachment is stored as a file on the daemon host. Tools running on the \
             daemon host can open it at the absolute path below."
        }
        ToolsHost::Ssh | ToolsHost::Managed => {
            "This attachment is stored as a file on the daemon host, not where this \
             session's tools run. The path below is on the daemon host; those tools may not \
             be able to reach it."
        }
    };
    format!("Attachment context.\n{instruction}\n{json}")
}

fn meta_with(context: String) -> Meta {
    let mut meta = Meta::new();
    meta.insert(
        DAEMON_ATTACHMENT_CONTEXT_META_KEY.to_owned(),
        serde_json::Value::String(context),
    );
    meta
}

/// One content block for one prepared attachment, with its path context.
pub fn attachment_block(p: &Prepared, placement: &Placement) -> ContentBlock {
    attachment_block_with(p, attachment_context(p, placement))
}

fn attachment_block_with(p: &Prepared, context: String) -> ContentBlock {
    let meta = Some(meta_with(context));
    match &p.content {
        Content::Image(data) => {
            let mut image = ImageContent::new(data.to_string(), p.mime.clone());
            image.uri = Some(p.uri_text().to_owned());
            image.meta = meta;
            ContentBlock::Image(image)
        }
        Content::Text(text) => {
            let mut contents = TextResourceContents::new(text.to_string(), p.uri_text().to_owned());
            contents.mime_type = Some(p.mime.clone());
            let mut resource =
                EmbeddedResource::new(EmbeddedResourceResource::TextResourceContents(contents));
            resource.meta = meta;
            ContentBlock::Resource(resource)
        }
        Content::Blob(blob) => {
            let mut contents = BlobResourceContents::new(blob.to_string(), p.uri_text().to_owned());
            contents.mime_type = Some(p.mime.clone());
            let mut resource =
                EmbeddedResource::new(EmbeddedResourceResource::BlobResourceContents(contents));
            resource.meta = meta;
            ContentBlock::Resource(resource)
        }
    }
}

/// Why a strict dispatch refused: every unreadable reference, by name and URI.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "message {message} has unreadable attachments: {}",
    unreadable.iter().map(|u| format!("{} ({})", json_escaped(&u.name), u.reason)).collect::<Vec<_>>().join("; ")
)]
pub struct DispatchError {
    pub message: MessageId,
    pub unreadable: Vec<Unreadable>,
}

/// The short notice a degrading dispatch adds: names only, never paths.
pub fn degradation_notice(unreadable: &[Unreadable]) -> String {
    let mut names: Vec<String> = Vec::new();
    for u in unreadable {
        let n = json_escaped(&u.name);
        if !names.contains(&n) {
            names.push(n);
        }
    }
    format!(
        "[Some attachments could not be read and were left out: {}]",
        names.join(", ")
    )
}

/// One piece of what the model gets for a message, before it is written anywhere: a
/// text, or an attachment as its shared encoding plus its context string. An encoding
/// made once is held here by `Arc`, never copied, so a writer can put it on the output
/// straight from the memo's buffer.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// The model text, a transcript, a degradation notice, or an assistant's words.
    Text(String),
    Attachment(Attached),
}

/// An attachment as dispatched: the read (with its encoding) and the path context
/// written from that read.
#[derive(Debug, Clone)]
pub struct Attached {
    pub prepared: Arc<Prepared>,
    pub context: Context,
}

/// The path context of one read, shared by every block made from that read (one
/// buffer, however many blocks repeat the reference), with its JSON string form
/// written once, the first time a writer asks for it.
#[derive(Clone)]
pub struct Context(Arc<ContextText>);

struct ContextText {
    text: String,
    json: OnceLock<String>,
}

impl Context {
    pub fn new(text: String) -> Context {
        Context(Arc::new(ContextText {
            text,
            json: OnceLock::new(),
        }))
    }

    pub fn as_str(&self) -> &str {
        &self.0.text
    }

    /// The context as a JSON string, quotes and escapes included: what serde_json
    /// writes for it.
    pub fn json(&self) -> &str {
        self.0.json.get_or_init(|| {
            // Serializing a string cannot fail.
            serde_json::to_string(&self.0.text).unwrap_or_default()
        })
    }
}

impl std::ops::Deref for Context {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0.text
    }
}

impl PartialEq for Context {
    fn eq(&self, other: &Context) -> bool {
        self.as_str() == other.as_str()
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<String> for Context {
    fn from(text: String) -> Context {
        Context::new(text)
    }
}

impl PartialEq for Attached {
    fn eq(&self, other: &Attached) -> bool {
        self.context == other.context && self.prepared.same_as(&other.prepared)
    }
}

impl Prepared {
    /// The same read: same URI, name, type, path and encoded content.
    fn same_as(&self, other: &Prepared) -> bool {
        self.uri == other.uri
            && self.name == other.name
            && self.mime == other.mime
            && self.path == other.path
            && match (&self.content, &other.content) {
                (Content::Image(a), Content::Image(b))
                | (Content::Text(a), Content::Text(b))
                | (Content::Blob(a), Content::Blob(b)) => a == b,
                _ => false,
            }
    }
}

impl Part {
    /// The ACP block this part stands for. This copies the encoding into the block
    /// (the schema types own their strings), so the streaming writers in `format`
    /// never call it; it is for library callers who want blocks.
    pub fn to_block(&self) -> ContentBlock {
        match self {
            Part::Text(text) => ContentBlock::Text(TextContent::new(text.clone())),
            Part::Attachment(a) => attachment_block_with(&a.prepared, a.context.to_string()),
        }
    }
}

/// One message and what the model gets for it, as parts that share their encodings.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelMessage {
    pub message: Message,
    pub parts: Vec<Part>,
}

impl ModelMessage {
    /// The parts as ACP blocks (each one owning a copy of its encoding).
    pub fn to_blocks(&self) -> Vec<ContentBlock> {
        self.parts.iter().map(Part::to_block).collect()
    }
}

/// Pure: a message and the reads of its references become its parts. User messages
/// get their model text (when not blank), their transcript (when there is one), then
/// one part per reference in order; other roles convert to text only.
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
            Ok(p) => parts.push(Part::Attachment(Attached {
                context: p.context(placement),
                prepared: p.clone(),
            })),
            Err(u) => unreadable.push(u.clone()),
        }
    }
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

/// Pure: a message and the reads of its references become its content blocks, as
/// [`to_parts`] orders them.
pub fn to_blocks(
    message: &Message,
    reads: &[Result<Arc<Prepared>, Unreadable>],
    placement: &Placement,
    mode: Mode,
) -> Result<Vec<ContentBlock>, DispatchError> {
    Ok(to_parts(message, reads, placement, mode)?
        .iter()
        .map(Part::to_block)
        .collect())
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
    let left_out: Vec<String> = reads
        .iter()
        .filter_map(|r| r.as_ref().err())
        .map(|u| format!("{} ({})", json_escaped(&u.name), u.reason))
        .collect();
    if !left_out.is_empty() {
        tracing::warn!(
            "message {} was dispatched without {} unreadable attachment{}: {}",
            message.id,
            left_out.len(),
            if left_out.len() == 1 { "" } else { "s" },
            left_out.join("; ")
        );
    }
}

/// IO then conversion, for one message.
pub fn dispatch(
    resolver: &dyn Resolver,
    memo: &Memo,
    message: &Message,
    placement: &Placement,
    mode: Mode,
) -> Result<Vec<ContentBlock>, DispatchError> {
    let reads = if message.role == Role::User {
        resolve(resolver, memo, message)
    } else {
        vec![]
    };
    warn_if_degraded(message, &reads, mode);
    to_blocks(message, &reads, placement, mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use proptest::prelude::*;

    proptest! {
        /// The SIMD encoder writes what the `base64` crate writes, for every length
        /// (each of the three tails, and lengths past the SIMD block sizes).
        #[test]
        fn simd_base64_is_the_base64_crates_output(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            prop_assert_eq!(
                &*encode_base64(&bytes, None),
                base64::engine::general_purpose::STANDARD.encode(&bytes)
            );
        }
    }

    /// A memo's budget counts the buffer an encoding holds, which for a recycled one
    /// may be up to twice its text: the budget bounds memory, not text.
    #[test]
    fn a_memo_counts_a_recycled_buffer_whole() {
        let recycler = Recycler::new(64 << 20);
        recycler.give(String::with_capacity(2 << 20));
        let bytes = vec![7u8; 900_000];
        let encoded = encode_base64(&bytes, Some(&recycler));
        assert_eq!(encoded.len(), 1_200_000);
        let content = Content::Blob(encoded);
        assert_eq!(content.held_bytes(), 2 << 20, "the recycled buffer, whole");
        let memo = Memo::with_budget(3 << 20);
        let session = SessionId::new();
        for name in ["a.bin", "b.bin"] {
            let uri = AttachmentUri::new(session, name);
            let prepared = Prepared::new(
                name.into(),
                uri.clone(),
                "application/octet-stream".into(),
                PathBuf::from("/nowhere").join(name),
                content.clone(),
            );
            memo.insert(&uri, Arc::new(prepared));
        }
        assert_eq!(memo.used(), 2 << 20, "the second entry evicted the first");
    }

    /// Into a fresh buffer and into recycled ones that held a longer and a shorter
    /// encoding before: the same text, with nothing of the old one left.
    #[test]
    fn simd_base64_agrees_on_large_buffers_recycled_or_not() {
        let noise = |len: u32, seed: u32| -> Vec<u8> {
            (0..len)
                .map(|i| (i.wrapping_add(seed).wrapping_mul(2654435761) >> 13) as u8)
                .collect()
        };
        let recycler = Recycler::new(64 << 20);
        for (len, seed) in [(3 << 20, 1), (200_000, 2), (3 << 20, 3), (2_500_000, 4)] {
            let bytes = noise(len + 2, seed);
            let want = base64::engine::general_purpose::STANDARD.encode(&bytes);
            assert_eq!(&*encode_base64(&bytes, None), want);
            let recycled = encode_base64(&bytes, Some(&recycler));
            assert_eq!(&*recycled, want);
            drop(recycled);
            assert!(recycler.held() >= want.len(), "given back when dropped");
        }
    }

    use crate::attachments::Roots;
    use crate::model::{Delivery, Reference};

    fn message(session: SessionId, uris: &[AttachmentUri]) -> Message {
        Message {
            id: MessageId::new(),
            session_id: session,
            seq: 1,
            role: Role::User,
            display_text: "look".into(),
            model_text: None,
            transcript: None,
            state: Delivery::Delivered,
            created_at: String::new(),
            refs: uris
                .iter()
                .enumerate()
                .map(|(i, uri)| Reference {
                    ordinal: i as u32,
                    uri: uri.clone(),
                    stored_name: String::new(),
                    mime_type: String::new(),
                    size: 0,
                })
                .collect(),
        }
    }

    fn encoded(read: &Result<Arc<Prepared>, Unreadable>) -> SharedStr {
        read.as_ref()
            .expect("the file reads")
            .content
            .text()
            .clone()
    }

    /// Invariant 6: duplicates share one encoding, within a dispatch and across
    /// dispatches that share the memo, and a fresh memo encodes anew.
    #[test]
    fn duplicate_references_share_one_encoding() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let store = AttachmentStore::new(Roots {
            configured: dir.path().to_owned(),
            legacy: vec![],
        });
        let session = SessionId::new();
        let stored = store
            .store(&session, "blob.bin", &[0u8, 1, 2, 255])
            .expect("stored");
        let uri = stored.uri;
        let m = message(session, &[uri.clone(), uri.clone()]);
        let memo = Memo::new();
        let first = resolve(&store, &memo, &m);
        assert!(SharedStr::ptr_eq(&encoded(&first[0]), &encoded(&first[1])));
        let again = resolve(&store, &memo, &m);
        assert!(SharedStr::ptr_eq(&encoded(&first[0]), &encoded(&again[0])));
        let fresh = resolve(&store, &Memo::new(), &m);
        assert!(!SharedStr::ptr_eq(&encoded(&first[0]), &encoded(&fresh[0])));
        assert_eq!(encoded(&first[0]), encoded(&fresh[0]));
    }

    /// Three 3000-byte blobs encode to 4000 bytes each; a 9000-byte budget holds two.
    /// `dir` as the configured root, with no legacy root.
    fn only_root(dir: &std::path::Path) -> Roots {
        Roots {
            configured: dir.to_owned(),
            legacy: vec![],
        }
    }

    /// A temporary folder with `configured` and `legacy` root paths inside it.
    fn two_roots() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("a temp dir");
        let configured = dir.path().join("configured");
        let legacy = dir.path().join("legacy");
        (dir, configured, legacy)
    }

    fn three_blobs(roots: Roots) -> (AttachmentStore, SessionId, Vec<AttachmentUri>) {
        let store = AttachmentStore::new(roots);
        let session = SessionId::new();
        let uris = (0..3u8)
            .map(|i| {
                let bytes = vec![i; 3000];
                let stored = store
                    .store(&session, &format!("f{i}.bin"), &bytes)
                    .expect("stored");
                stored.uri
            })
            .collect();
        (store, session, uris)
    }

    #[test]
    fn the_memo_keeps_its_budget_and_evicts_the_least_recently_used() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (store, session, uris) = three_blobs(only_root(dir.path()));
        let memo = Memo::with_budget(9000);
        let clone = memo.clone();
        resolve(&store, &memo, &message(session, &[uris[0].clone()]));
        resolve(&store, &memo, &message(session, &[uris[1].clone()]));
        assert_eq!(
            (clone.len(), clone.used()),
            (2, 8000),
            "clones share one memo"
        );
        // Using the first again makes the second the least recently used.
        resolve(&store, &memo, &message(session, &[uris[0].clone()]));
        resolve(&store, &memo, &message(session, &[uris[2].clone()]));
        assert!(memo.contains(&uris[0]) && memo.contains(&uris[2]));
        assert!(!memo.contains(&uris[1]));
        assert!(memo.used() <= memo.budget());
    }

    #[test]
    fn duplicates_in_one_message_share_a_read_even_with_no_budget() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (store, session, uris) = three_blobs(only_root(dir.path()));
        let memo = Memo::with_budget(0);
        let m = message(
            session,
            &[uris[0].clone(), uris[1].clone(), uris[0].clone()],
        );
        let reads = resolve(&store, &memo, &m);
        assert!(SharedStr::ptr_eq(&encoded(&reads[0]), &encoded(&reads[2])));
        assert!(memo.is_empty());
        let again = resolve(&store, &memo, &m);
        assert!(!SharedStr::ptr_eq(&encoded(&reads[0]), &encoded(&again[0])));
    }

    #[test]
    fn an_evicted_file_is_read_again_and_given_the_path_of_that_read() {
        let (_dir, configured, legacy) = two_roots();
        let (store, session, uris) = three_blobs(Roots {
            configured: configured.clone(),
            legacy: vec![legacy.clone()],
        });
        let memo = Memo::with_budget(4000);
        let first = resolve(&store, &memo, &message(session, &[uris[0].clone()]));
        let first = first[0].as_ref().expect("the file reads");
        assert_eq!(
            first.path,
            configured.join(session.to_string()).join("f0.bin")
        );
        resolve(&store, &memo, &message(session, &[uris[1].clone()]));
        assert!(!memo.contains(&uris[0]), "evicted by the second file");
        // The file moves to the legacy root while it is out of the memo.
        let moved = legacy.join(session.to_string());
        std::fs::create_dir_all(&moved).expect("a legacy folder");
        std::fs::rename(
            configured.join(session.to_string()).join("f0.bin"),
            moved.join("f0.bin"),
        )
        .expect("the file moves");
        let again = resolve(&store, &memo, &message(session, &[uris[0].clone()]));
        let again = again[0]
            .as_ref()
            .expect("the file reads from the legacy root");
        assert_eq!(again.path, moved.join("f0.bin"));
        assert_eq!(encoded(&Ok(again.clone())), encoded(&Ok(first.clone())));
    }

    /// Invariant 2 with the cached context: blocks of one kept read share its context,
    /// and a file evicted, moved and read again gets a context naming the new path.
    #[test]
    fn a_cached_context_belongs_to_its_read_and_a_re_read_writes_a_new_one() {
        let (_dir, configured, legacy) = two_roots();
        let (store, session, uris) = three_blobs(Roots {
            configured: configured.clone(),
            legacy: vec![legacy.clone()],
        });
        let placement = Placement {
            host: "h".into(),
            tools_host: ToolsHost::Local,
        };
        let memo = Memo::with_budget(4000);
        let context_of = |uri: &AttachmentUri| {
            let m = message(session, &[uri.clone(), uri.clone()]);
            let parts = dispatch_parts(&store, &memo, m, &placement, Mode::Strict)
                .expect("dispatched")
                .parts;
            let contexts: Vec<String> = parts
                .iter()
                .filter_map(|p| match p {
                    Part::Attachment(a) => Some(a.context.to_string()),
                    Part::Text(_) => None,
                })
                .collect();
            assert_eq!(contexts.len(), 2);
            assert_eq!(contexts[0], contexts[1], "duplicates share one context");
            contexts[0].clone()
        };
        let old = configured.join(session.to_string()).join("f0.bin");
        let first = context_of(&uris[0]);
        assert!(first.contains(&json_escaped(&old.to_string_lossy())[1..]));
        context_of(&uris[1]); // evicts the first file
        let moved = legacy.join(session.to_string());
        std::fs::create_dir_all(&moved).expect("a legacy folder");
        std::fs::rename(&old, moved.join("f0.bin")).expect("the file moves");
        let again = context_of(&uris[0]);
        assert!(again.contains(&json_escaped(&moved.join("f0.bin").to_string_lossy())[1..]));
        assert!(!again.contains(&json_escaped(&old.to_string_lossy())[1..]));
    }

    #[test]
    fn a_failed_read_is_never_kept() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (store, session, uris) = three_blobs(only_root(dir.path()));
        std::fs::remove_file(dir.path().join(session.to_string()).join("f0.bin"))
            .expect("the file goes");
        let memo = Memo::new();
        let reads = resolve(&store, &memo, &message(session, &[uris[0].clone()]));
        assert!(reads[0].as_ref().is_err_and(|u| u.not_found));
        assert!(memo.is_empty() && memo.used() == 0);
    }

    #[test]
    fn byte_sizes_parse_with_binary_units_and_garbage_is_refused() {
        for (text, bytes) in [
            ("0", 0),
            ("1048576", 1 << 20),
            ("64MiB", 64 << 20),
            ("512KiB", 512 << 10),
            ("1GiB", 1 << 30),
            ("1gib", 1 << 30),
            ("3 MiB", 3 << 20),
            ("7B", 7),
            ("2k", 2048),
            (" 5M ", 5 << 20),
        ] {
            assert_eq!(parse_byte_size(text), Ok(bytes), "{text:?}");
        }
        for text in [
            "",
            "MiB",
            "-1",
            "1.5MiB",
            "64MB",
            "64 MiBs",
            "x",
            "1e6",
            "0x10",
            "99999999999999999999",
            "17179869184GiB",
        ] {
            let e = parse_byte_size(text).expect_err(text);
            assert!(!e.contains('\n') && e.contains(&format!("{text:?}")), "{e}");
        }
    }

    #[test]
    fn hidden_characters_are_escaped_and_printable_ones_kept() {
        let escaped = json_escaped("a\u{202E}b\u{200B}c\u{E0041}d é 日本\n");
        assert_eq!(escaped, "\"a\\u202eb\\u200bc\\udb40\\udc41d é 日本\\n\"");
        let back: String = serde_json::from_str(&escaped).expect("still JSON");
        assert_eq!(back, "a\u{202E}b\u{200B}c\u{E0041}d é 日本\n");
    }
}
