//! The probe's checks: pure functions, one per invariant, over what the scenario set
//! up (`Known`) and what the store returned. They do no IO of their own except reading
//! back a path a model was given, which is what invariant 2 is about.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1::ContentBlock;
use base64::Engine;
use serde::Serialize;
use serde_json::Value;

use super::oracle::{
    self, Attached, Kind, PathAudit, ReadCounts, attached, expected_uri, parse_context, text_of,
};
use super::report::Outcome;
use super::scenario::{
    AGENT_TEXT, BLOB, BLOB_BYTES, IMAGE, LEGACY, MID_TURN, MODEL, NOTES, NOTES_AGAIN, Place,
    QUESTION, REPLY, RecordedTurn, Sent, TRANSCRIPT, TURN_NOTE, UPLOADS, Upload,
};
use crate::attachments::AttachmentUri;
use crate::db::verify::VerifyReport;
use crate::dispatch::DAEMON_ATTACHMENT_CONTEXT_META_KEY;
use crate::error::Error;
use crate::focus;
use crate::ids::SessionId;
use crate::model::{ItemBody, Message, Role, Session};
use crate::openai::{self, ChatMessage, ChatPart, ChatRequest, ResponsesRequest};
use crate::replay::ReplayItem;
use crate::store::Dispatched;

/// A stored file and the URI the store gave it.
pub(super) struct Stored {
    pub spec: &'static Upload,
    /// The URI as text, as checks compare it with what blocks and contexts print.
    pub uri: String,
    pub parsed: AttachmentUri,
}

/// What the scenario set up, and every path a model was given so far.
pub(super) struct Known {
    pub session: SessionId,
    pub host: String,
    pub configured: PathBuf,
    pub legacy: PathBuf,
    pub files: Vec<Stored>,
    /// The probe's directory (every root and the database are under it), as given
    /// and resolved, and every path a context named: what nothing persisted may hold.
    pub needles: BTreeSet<String>,
}

impl Known {
    pub fn file(&self, index: usize) -> &Stored {
        &self.files[index]
    }

    fn by_uri(&self, uri: &str) -> Result<&Stored, String> {
        self.files
            .iter()
            .find(|f| f.uri == uri)
            .ok_or_else(|| format!("a block names an unknown URI {uri}"))
    }

    pub fn folder(&self, root: &Path) -> PathBuf {
        root.join(self.session.to_string())
    }

    /// Remembers the path of every context in `messages`.
    pub fn saw_paths(&mut self, messages: &[Dispatched]) {
        for a in messages
            .iter()
            .flat_map(|d| d.blocks.iter().filter_map(attached))
        {
            if let Some(line) = a.context().and_then(|c| parse_context(c).ok()) {
                self.needles.insert(line.path);
            }
        }
    }

    /// The needles, and every stored name and URI: none of which may reach a hint.
    fn needles_and_names(&self) -> Vec<String> {
        let mut needles: Vec<String> = self.needles.iter().cloned().collect();
        for file in &self.files {
            needles.push(file.spec.name.to_owned());
            needles.push(file.uri.clone());
        }
        needles
    }

    fn find_needle(&self, text: &str) -> Option<&String> {
        self.needles.iter().find(|n| text.contains(n.as_str()))
    }
}

fn user_messages(messages: &[Dispatched]) -> impl Iterator<Item = &Dispatched> {
    messages.iter().filter(|d| d.message.role == Role::User)
}

fn attachments(d: &Dispatched) -> impl Iterator<Item = Attached<'_>> {
    d.blocks.iter().filter_map(attached)
}

fn context_line(a: &Attached<'_>) -> Result<oracle::ContextLine, String> {
    parse_context(
        a.context()
            .ok_or_else(|| format!("the block for {} has no context", a.uri))?,
    )
}

pub(super) fn stored_names(k: &Known, stored: &[(&Upload, String)]) -> Outcome {
    for (spec, name) in stored {
        ensure!(
            name == spec.name,
            "upload {:?} was stored as {name:?}, expected {:?}",
            spec.upload,
            spec.name
        );
    }
    for file in &k.files {
        let expected = expected_uri(k.session, file.spec.name);
        ensure!(
            file.uri == expected,
            "{:?} has URI {}, expected {expected}",
            file.spec.name,
            file.uri
        );
        let parsed = AttachmentUri::parse(&file.uri)
            .map_err(|e| format!("the store's own URI does not parse: {e}"))?;
        ensure!(
            parsed.name() == file.spec.name && parsed.session() == k.session,
            "{} parses to another name or session",
            file.uri
        );
    }
    Ok(format!(
        "{} names kept with spaces and Unicode, the duplicate numbered {:?}",
        k.files.len(),
        UPLOADS[NOTES_AGAIN].name
    ))
}

pub(super) fn duplicates_share_one_read(
    k: &Known,
    normal: &Dispatched,
    before: &ReadCounts,
    after: &ReadCounts,
    memo_len: usize,
) -> Outcome {
    let refs = &normal.message.refs;
    let distinct: BTreeSet<String> = refs.iter().map(|r| r.uri.to_string()).collect();
    ensure!(
        distinct.len() < refs.len(),
        "the normal message has no duplicate reference ({} references)",
        refs.len()
    );
    for uri in &distinct {
        let n = after.of_since(before, uri);
        ensure!(n == 1, "{uri} was read {n} times in one dispatch");
    }
    let total = after.total_since(before);
    ensure!(
        total == distinct.len(),
        "{total} reads for {} distinct references",
        distinct.len()
    );
    ensure!(
        memo_len == distinct.len(),
        "the memo holds {memo_len} entries for {} distinct references",
        distinct.len()
    );
    let notes = &k.file(NOTES).uri;
    let dup_blocks: Vec<&ContentBlock> = normal
        .blocks
        .iter()
        .filter(|b| attached(b).is_some_and(|a| a.uri == notes))
        .collect();
    ensure!(
        dup_blocks.len() == 2 && dup_blocks[0] == dup_blocks[1],
        "the two references to {notes} did not give the same block ({} blocks)",
        dup_blocks.len()
    );
    Ok(format!(
        "{} references, {total} reads, {memo_len} memo entries",
        refs.len()
    ))
}

pub(super) fn image_only(k: &Known, sent: &Sent, latest: &Dispatched) -> Outcome {
    ensure!(
        latest.message.id == sent.image_only.id,
        "the default dispatch took message {} instead of the image-only {}",
        latest.message.id,
        sent.image_only.id
    );
    ensure!(
        latest.message.display_text.is_empty(),
        "the image-only message has display text {:?}",
        latest.message.display_text
    );
    ensure!(
        latest.blocks.len() == 1,
        "an image-only message gave {} blocks",
        latest.blocks.len()
    );
    let image = attached(&latest.blocks[0])
        .filter(|a| a.kind == Kind::Image)
        .ok_or("the image-only message's block is not an image")?;
    ensure!(
        image.uri == k.file(IMAGE).uri,
        "the image block names {}",
        image.uri
    );
    ensure!(
        image.bytes()? == UPLOADS[IMAGE].bytes,
        "the image block's bytes are not the PNG"
    );
    ensure!(
        image.context().is_some(),
        "the image block has no path context"
    );
    Ok("an empty text and one image give exactly one image block".into())
}

pub(super) fn queued_by_drain(
    k: &Known,
    sent: &Sent,
    latest: &Dispatched,
    queued_direct_refused: bool,
    drained: &[Dispatched],
    drained_again: usize,
    still_queued: usize,
) -> Outcome {
    ensure!(
        latest.message.id != sent.mid_turn.id,
        "the default dispatch took the queued mid-turn message"
    );
    ensure!(
        queued_direct_refused,
        "dispatch --message delivered the queued mid-turn message"
    );
    ensure!(
        drained.len() == 1 && drained[0].message.id == sent.mid_turn.id,
        "the drain delivered {} messages, expected the mid-turn one",
        drained.len()
    );
    let blocks = &drained[0].blocks;
    ensure!(
        blocks.len() == 3
            && text_of(&blocks[0]) == Some(MID_TURN)
            && text_of(&blocks[1]).is_some_and(|t| t.contains(TRANSCRIPT))
            && attached(&blocks[2]).is_some_and(|a| a.uri == k.file(NOTES_AGAIN).uri),
        "the drained message gave {} blocks, expected its text, its transcript and one attachment",
        blocks.len()
    );
    ensure!(
        drained_again == 0 && still_queued == 0,
        "after the drain, {still_queued} messages are still queued and a second drain \
         delivered {drained_again}"
    );
    Ok("dispatch skips and refuses the queued message; one drain delivers it".into())
}

pub(super) fn turn_memo_shared(after_first: &ReadCounts, after_drain: &ReadCounts) -> Outcome {
    let new_reads = after_drain.total_since(after_first);
    ensure!(
        new_reads == 0,
        "the image-only dispatch and the drain read {new_reads} files again; their \
         references were in the turn's memo"
    );
    Ok("the image-only dispatch and the drain were served from the turn's memo".into())
}

/// Each URI with what happened to it: `None` when it was accepted, else the refusal.
/// `counts` are the session's (messages, events) before and after.
pub(super) fn all_refused(
    outcomes: &[(String, Option<String>)],
    counts: ((usize, usize), (usize, usize)),
) -> Outcome {
    for (uri, refusal) in outcomes {
        let refusal = refusal
            .as_deref()
            .ok_or_else(|| format!("send accepted {uri:?}"))?;
        ensure!(
            !refusal.contains('\n'),
            "the refusal of {uri:?} is not one line"
        );
    }
    let (before, after) = counts;
    ensure!(
        before == after,
        "refused sends changed the session: (messages, events) {before:?} -> {after:?}"
    );
    Ok(format!("{} URIs refused, nothing stored", outcomes.len()))
}

/// The wording of a local session's context and of an ssh session's.
pub(super) fn tools_host_wording(k: &Known, local: &Dispatched, remote: &Dispatched) -> Outcome {
    let says_unreachable = |words: &str| {
        ["may not", "might not", "cannot", "can't", "not reach"]
            .iter()
            .any(|w| words.contains(w))
    };
    let local = attachments(local)
        .find_map(|a| a.context())
        .ok_or("the local session's blocks have no context")?;
    let remote = attachments(remote)
        .find_map(|a| a.context())
        .ok_or("the ssh session's block has no context")?;
    let local_words = oracle::instructions(local);
    let remote_words = oracle::instructions(remote);
    ensure!(
        local_words.contains("daemon host") && !says_unreachable(&local_words),
        "the local context does not tell the model to use the path on the daemon host: \
         {local_words:?}"
    );
    ensure!(
        remote_words.contains("daemon host") && says_unreachable(&remote_words),
        "the ssh context does not say the path is on the daemon host and may be \
         unreachable: {remote_words:?}"
    );
    let line = parse_context(remote)?;
    ensure!(
        line.host == k.host,
        "the ssh context names host {:?}",
        line.host
    );
    Ok(
        "local: use the path on the daemon host; ssh: the path is on the daemon host, \
        tools may not reach it"
            .into(),
    )
}

/// `first` is the first delivery of the normal, image-only and drained messages.
pub(super) fn restore_replays(
    sent: &Sent,
    first: [&Dispatched; 3],
    restored: &[Dispatched],
    counts: &ReadCounts,
) -> Outcome {
    let ids: Vec<_> = restored.iter().map(|d| d.message.id).collect();
    let expected = [
        sent.normal.id,
        sent.reply.id,
        sent.image_only.id,
        sent.mid_turn.id,
    ];
    ensure!(
        ids == expected,
        "the restored history is {ids:?}, expected {expected:?}"
    );
    let distinct: BTreeSet<String> = restored
        .iter()
        .flat_map(|d| d.message.refs.iter().map(|r| r.uri.to_string()))
        .collect();
    for uri in &distinct {
        let n = counts.of(uri);
        ensure!(
            n == 1,
            "the replay read {uri} {n} times through the new store's resolver"
        );
    }
    let total = counts.total();
    ensure!(
        total == distinct.len(),
        "the replay made {total} reads for {} distinct references",
        distinct.len()
    );
    let reply = &restored[1].blocks;
    ensure!(
        reply.len() == 1 && text_of(&reply[0]) == Some(REPLY),
        "the assistant reply did not restore as its text only"
    );
    for (replayed, delivered) in [&restored[0], &restored[2], &restored[3]]
        .into_iter()
        .zip(first)
    {
        ensure!(
            replayed.blocks == delivered.blocks,
            "message {} restored with other blocks than its first delivery",
            delivered.message.id
        );
    }
    Ok(format!(
        "{} messages replayed with {total} live reads, blocks equal to first delivery",
        restored.len()
    ))
}

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

pub(super) fn context_under_meta_key(restored: &[Dispatched]) -> Outcome {
    ensure!(
        DAEMON_ATTACHMENT_CONTEXT_META_KEY == "daemon/attachmentContext",
        "the meta key is {DAEMON_ATTACHMENT_CONTEXT_META_KEY:?}"
    );
    let mut n = 0;
    for block in restored.iter().flat_map(|d| &d.blocks) {
        let Some(a) = attached(block) else { continue };
        let meta = a
            .meta
            .ok_or_else(|| format!("the block for {} has no _meta", a.uri))?;
        let keys: Vec<&String> = meta.keys().collect();
        ensure!(
            keys == [DAEMON_ATTACHMENT_CONTEXT_META_KEY],
            "the block for {} has _meta keys {keys:?}",
            a.uri
        );
        let json = serde_json::to_value(block).map_err(|e| e.to_string())?;
        ensure!(
            json["_meta"][DAEMON_ATTACHMENT_CONTEXT_META_KEY].is_string(),
            "the block for {} does not serialize its context under _meta",
            a.uri
        );
        n += 1;
    }
    ensure!(n > 0, "no attachment block was dispatched");
    Ok(format!(
        "{n} attachment blocks carry their context under _meta.\"{DAEMON_ATTACHMENT_CONTEXT_META_KEY}\""
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

/// Reads each path the request gives the model back from disk (invariant 2 is about
/// exactly that read).
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

/// Every path is where its file was put: the legacy-only file in the legacy root, the
/// rest in the configured one. `legacy_copy_exists`: the configured root holds the
/// legacy-only file too, which would make the check prove nothing.
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
    needles.push(DAEMON_ATTACHMENT_CONTEXT_META_KEY.to_owned());
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
                base64::engine::general_purpose::STANDARD.encode(UPLOADS[IMAGE].bytes),
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

pub(super) fn strict_names_missing(k: &Known, strict: Result<Dispatched, Error>) -> Outcome {
    let blob = k.file(BLOB);
    let name = blob.spec.name;
    let e = match strict {
        Ok(_) => return Err("strict dispatch succeeded with a file missing".to_owned()),
        Err(Error::Dispatch(e)) => e,
        Err(other) => return Err(format!("strict dispatch failed otherwise: {other}")),
    };
    ensure!(
        e.unreadable.len() == 1 && e.unreadable[0].uri == blob.parsed,
        "the error names {:?}, expected only {}",
        e.unreadable.iter().map(|u| &u.uri).collect::<Vec<_>>(),
        blob.uri
    );
    let message = e.to_string();
    ensure!(
        message.contains(name) && !message.contains('\n'),
        "the error does not name {name:?} on one line: {message}"
    );
    Ok(format!("strict dispatch fails naming {name:?}"))
}

pub(super) fn degraded_keeps_survivors(k: &Known, sent: &Sent, degraded: &Dispatched) -> Outcome {
    let blob = &k.file(BLOB).uri;
    let blocks: Vec<Attached<'_>> = attachments(degraded).collect();
    ensure!(
        blocks.iter().all(|a| a.uri != *blob),
        "the unreadable reference still has a block"
    );
    let readable = sent.normal.refs.len() - 1;
    ensure!(
        blocks.len() == readable,
        "{} attachment blocks survived of {readable} readable references",
        blocks.len()
    );
    for a in &blocks {
        let spec = k.by_uri(a.uri)?.spec;
        ensure!(
            a.bytes()? == spec.bytes,
            "the surviving block for {:?} lost its content",
            spec.name
        );
        ensure!(
            a.context().is_some(),
            "the surviving block for {:?} lost its context",
            spec.name
        );
        context_line(a)?;
    }
    let notices: Vec<&str> = degraded
        .blocks
        .iter()
        .filter_map(text_of)
        .filter(|t| *t != QUESTION)
        .collect();
    ensure!(
        notices.len() == 1,
        "{} notices in the degraded dispatch, expected 1",
        notices.len()
    );
    let notice = notices[0];
    ensure!(
        notice.contains(UPLOADS[BLOB].name),
        "the notice does not name {:?}: {notice:?}",
        UPLOADS[BLOB].name
    );
    if let Some(needle) = k.find_needle(notice) {
        return Err(format!("the notice holds the path {needle:?}"));
    }
    ensure!(
        notice.chars().count() <= 300,
        "the notice is {} characters long",
        notice.chars().count()
    );
    Ok(format!(
        "{} blocks kept with content and context, one short notice",
        blocks.len()
    ))
}

pub(super) fn no_replacement(
    degraded: &Dispatched,
    decoys: &[PathBuf],
    send_refused: bool,
) -> Outcome {
    ensure!(
        send_refused,
        "send accepted the missing file while look-alikes existed"
    );
    for a in attachments(degraded) {
        ensure!(
            a.bytes()? != BLOB_BYTES,
            "a block carries the missing file's bytes, read from a look-alike"
        );
        if a.context().is_some() {
            let line = context_line(&a)?;
            if let Some(decoy) = decoys.iter().find(|d| Path::new(&line.path) == *d) {
                return Err(format!("a context points at the look-alike {decoy:?}"));
            }
        }
    }
    Ok(format!(
        "{} look-alikes in another session and under other names were not used",
        decoys.len()
    ))
}

/// What three dispatches on one memo read: with the blob missing (strict, then
/// degrading: `missing`), and again once it was back (`back`, counted from `before`).
pub(super) struct Eviction<'a> {
    pub evicted_while_missing: bool,
    pub kept_once_back: bool,
    pub before: &'a ReadCounts,
    pub after_missing: &'a ReadCounts,
    pub before_back: &'a ReadCounts,
    pub after_back: &'a ReadCounts,
    pub again: &'a Dispatched,
}

pub(super) fn failed_read_evicted(k: &Known, sent: &Sent, e: &Eviction<'_>) -> Outcome {
    let blob = &k.file(BLOB).uri;
    ensure!(
        e.evicted_while_missing,
        "the memo kept an entry for the unreadable {blob}"
    );
    let missing_reads = e.after_missing.of_since(e.before, blob);
    ensure!(
        missing_reads == 2,
        "the missing file was read {missing_reads} times by two dispatches, expected 2"
    );
    ensure!(
        e.after_back.of_since(e.before_back, blob) == 1,
        "the file was not read again once it was back"
    );
    let others: BTreeSet<String> = sent
        .normal
        .refs
        .iter()
        .map(|r| r.uri.to_string())
        .filter(|u| u != blob)
        .collect();
    for uri in &others {
        let n = e.after_back.of_since(e.before, uri);
        ensure!(
            n == 1,
            "{uri} was read {n} times by three dispatches on one memo"
        );
    }
    ensure!(e.kept_once_back, "the successful re-read was not memoized");
    let block = attachments(e.again)
        .find(|a| a.uri == blob)
        .ok_or("the file is back but its block is not")?;
    ensure!(
        block.bytes()? == BLOB_BYTES,
        "the re-read block holds other bytes"
    );
    ensure!(
        attachments(e.again).count() == sent.normal.refs.len(),
        "the dispatch after the file came back still drops blocks"
    );
    Ok("a failed read is not memoized; the next dispatch on the same memo reads again".into())
}

/// `records`: every session's messages and events as the store returns them.
pub(super) fn nothing_persisted_holds_a_path(
    k: &Known,
    sent: &Sent,
    sessions: &[Session],
    records: &[String],
) -> Outcome {
    let ours = sessions
        .iter()
        .find(|s| s.id == k.session)
        .ok_or("the probe's session is not listed")?;
    let title = ours.title.as_deref().ok_or("the session got no title")?;
    ensure!(
        QUESTION.starts_with(title.trim_end_matches('…')),
        "the title {title:?} is not from the question"
    );
    ensure!(
        sent.normal.display_text == QUESTION && sent.mid_turn.display_text == MID_TURN,
        "the display text was changed when stored"
    );
    ensure!(
        records.iter().all(|t| !t.is_empty()),
        "a record did not serialize"
    );
    let listed = serde_json::to_string(sessions).map_err(|e| e.to_string())?;
    for text in records.iter().chain([&listed]) {
        if let Some(needle) = k.find_needle(text) {
            return Err(format!("a stored record contains the path {needle:?}"));
        }
    }
    Ok(format!(
        "{} sessions with their titles, messages, references and events hold no path",
        sessions.len()
    ))
}

pub(super) fn log_matches_tables(report: &VerifyReport) -> Outcome {
    ensure!(report.ok(), "{}", report.problems.join("; "));
    Ok(format!(
        "{} sessions, {} messages, {} events agree",
        report.sessions, report.messages, report.events
    ))
}

/// A restore through a store that knows only `configured` and `legacy`, the roots'
/// new places.
pub(super) fn restored_from_moved_roots(
    k: &Known,
    configured: &Path,
    legacy: &Path,
    restored: &[Dispatched],
) -> Outcome {
    let mut n = 0;
    for d in user_messages(restored) {
        let blocks: Vec<Attached<'_>> = attachments(d).collect();
        ensure!(
            blocks.len() == d.message.refs.len(),
            "message {} restored {} of {} attachments after the move",
            d.message.id,
            blocks.len(),
            d.message.refs.len()
        );
        for a in blocks {
            let spec = k.by_uri(a.uri)?.spec;
            let line = context_line(&a)?;
            let root = match spec.place {
                Place::Configured => configured,
                Place::Legacy => legacy,
            };
            let expected = k.folder(root).join(spec.name);
            ensure!(
                Path::new(&line.path) == expected,
                "after the move {:?} was given as {:?}, expected {expected:?}",
                spec.name,
                line.path
            );
            let on_disk = std::fs::read(&expected).map_err(|e| e.to_string())?;
            ensure!(
                on_disk == spec.bytes && a.bytes()? == spec.bytes,
                "after the move {:?} does not read back its bytes",
                spec.name
            );
            n += 1;
        }
    }
    ensure!(n > 0, "nothing was restored after the move");
    Ok(format!(
        "{n} attachments restored from the moved roots, paths in the new roots"
    ))
}

/// A recorded turn replayed by a fresh store: the user message, the agent's answer,
/// its tool call and the next user message, in that order; the agent's text as it was
/// sent, chunks joined; the tool call in its merged final state; the user message's
/// attachment from a live read; and the `acp-updates` lines, each a
/// `SessionNotification`, in the same order.
pub(super) fn recorded_turn_replays(
    t: &RecordedTurn,
    items: &[ReplayItem],
    updates: &str,
) -> Outcome {
    use agent_client_protocol_schema::rpc::{JsonRpcMessage, Notification};
    use agent_client_protocol_schema::v1::{SessionNotification, SessionUpdate, ToolCallStatus};

    let answer = ContentBlock::from(AGENT_TEXT.concat());
    let order: Vec<String> = items
        .iter()
        .map(|item| match item {
            ReplayItem::Message(m) => format!("message {}", m.message.id),
            ReplayItem::Recorded(i) => i.body.kind().to_owned(),
        })
        .collect();
    let want = [
        format!("message {}", t.question.id),
        "agent_message".to_owned(),
        "tool_call".to_owned(),
        format!("message {}", t.follow_up.id),
    ];
    ensure!(order == want, "replayed as {order:?}, expected {want:?}");
    let [
        ReplayItem::Message(question),
        ReplayItem::Recorded(agent),
        ReplayItem::Recorded(call),
        _,
    ] = items
    else {
        return Err("the replay's items are not the kinds their order says".to_owned());
    };
    let ItemBody::AgentMessage(text) = &agent.body else {
        return Err("the agent message is not one".to_owned());
    };
    ensure!(
        text.content == [answer.clone()],
        "the agent's text came back as {:?}, not verbatim",
        text.content
    );
    let ItemBody::ToolCall(call) = &call.body else {
        return Err("the tool call is not one".to_owned());
    };
    ensure!(
        call.status == ToolCallStatus::Completed && !call.content.is_empty(),
        "the tool call replays as {:?} with {} content, not in its final state",
        call.status,
        call.content.len()
    );

    let blocks = question.to_blocks();
    let read: Vec<Attached<'_>> = blocks.iter().filter_map(attached).collect();
    let [a] = &read[..] else {
        return Err(format!(
            "the user message replayed {} attachment blocks, not 1",
            read.len()
        ));
    };
    let line = context_line(a)?;
    ensure!(
        Path::new(&line.path).starts_with(&t.configured),
        "the attachment was given as {:?}, outside the configured root",
        line.path
    );
    let on_disk = std::fs::read(&line.path).map_err(|e| format!("{}: {e}", line.path))?;
    ensure!(
        on_disk == TURN_NOTE && a.bytes()? == TURN_NOTE,
        "the attachment's path does not read back its bytes"
    );

    let mut tags = Vec::new();
    for l in updates.lines() {
        let n: JsonRpcMessage<Notification<SessionNotification>> =
            serde_json::from_str(l).map_err(|e| format!("an acp-updates line: {e}"))?;
        let update = n
            .into_inner()
            .params
            .ok_or("an acp-updates line has no params")?
            .update;
        if let SessionUpdate::AgentMessageChunk(chunk) = &update {
            ensure!(
                chunk.content == answer,
                "the agent chunk replays as {:?}, not verbatim",
                chunk.content
            );
        }
        tags.push(crate::turns::tag(&update));
    }
    let want_tags = [
        "user_message_chunk",
        "user_message_chunk",
        "agent_message_chunk",
        "tool_call",
        "user_message_chunk",
    ];
    ensure!(
        tags == want_tags,
        "acp-updates came as {tags:?}, expected {want_tags:?}"
    );
    Ok(format!(
        "{} history items and {} session/update lines in order, agent text verbatim",
        items.len(),
        tags.len()
    ))
}

pub(super) fn schema_has_no_path_column(audit: &PathAudit) -> Outcome {
    if let Some(column) = audit.path_columns.first() {
        return Err(format!("the column {column} looks like it stores a path"));
    }
    ensure!(!audit.columns.is_empty(), "the database has no columns");
    Ok(format!(
        "{} tables, {} columns, none for a path, root or directory",
        audit.tables.len(),
        audit.columns.len()
    ))
}

pub(super) fn db_text_has_no_path(audit: &PathAudit) -> Outcome {
    if let Some((table, needle)) = audit.value_hits.first() {
        return Err(format!("table {table} holds {needle:?}"));
    }
    ensure!(audit.values > 0, "the database holds no text");
    Ok(format!(
        "{} text values in {} tables hold no path",
        audit.values,
        audit.tables.len()
    ))
}

pub(super) fn db_file_has_no_path(audit: &PathAudit) -> Outcome {
    if let Some((path, needle)) = audit.file_hits.first() {
        return Err(format!("{path:?} holds {needle:?}"));
    }
    Ok(format!(
        "{} database files, {} bytes, hold no path",
        audit.files.len(),
        audit.file_bytes
    ))
}

#[cfg(test)]
mod tests {
    use agent_client_protocol_schema::v1::{EmbeddedResource, EmbeddedResourceResource, Meta};

    use super::*;

    fn user_message(refs: &[&AttachmentUri]) -> Message {
        Message {
            id: crate::ids::MessageId::new(),
            session_id: SessionId::new(),
            seq: 1,
            role: Role::User,
            display_text: "q".into(),
            model_text: None,
            transcript: None,
            state: crate::model::Delivery::Delivered,
            created_at: String::new(),
            refs: refs
                .iter()
                .enumerate()
                .map(|(i, uri)| crate::model::Reference {
                    ordinal: i as u32,
                    uri: (*uri).clone(),
                    stored_name: "a.txt".into(),
                    mime_type: "text/plain".into(),
                    size: 1,
                })
                .collect(),
        }
    }

    fn text_resource(uri: &str, meta: Option<Meta>) -> ContentBlock {
        let mut resource = EmbeddedResource::new(EmbeddedResourceResource::TextResourceContents(
            agent_client_protocol_schema::v1::TextResourceContents::new("x", uri),
        ));
        resource.meta = meta;
        ContentBlock::Resource(resource)
    }

    fn context_meta() -> Meta {
        let mut meta = Meta::new();
        meta.insert(
            DAEMON_ATTACHMENT_CONTEXT_META_KEY.to_owned(),
            Value::String("context".into()),
        );
        meta
    }

    #[test]
    fn block_checks_fail_on_broken_dispatches() {
        let question = ContentBlock::Text(agent_client_protocol_schema::v1::TextContent::new("q"));
        let u1 = AttachmentUri::new(SessionId::new(), "a.txt");
        let good = Dispatched {
            message: user_message(&[&u1, &u1]),
            blocks: vec![
                question.clone(),
                text_resource(&u1.to_string(), Some(context_meta())),
                text_resource(&u1.to_string(), Some(context_meta())),
            ],
        };
        assert!(one_block_per_reference(std::slice::from_ref(&good)).is_ok());
        assert!(context_under_meta_key(std::slice::from_ref(&good)).is_ok());
        assert!(raw_text_has_no_meta(std::slice::from_ref(&good)).is_ok());

        let mut merged = good.clone();
        merged.blocks.pop();
        assert!(one_block_per_reference(&[merged]).is_err());

        let mut bare = good.clone();
        bare.blocks[1] = text_resource(&u1.to_string(), None);
        assert!(context_under_meta_key(&[bare]).is_err());

        let mut tagged = good;
        tagged.blocks[0] = ContentBlock::Text(
            agent_client_protocol_schema::v1::TextContent::new("q").meta(context_meta()),
        );
        assert!(raw_text_has_no_meta(&[tagged]).is_err());
    }

    #[test]
    fn database_checks_fail_on_a_stored_path() {
        let clean = PathAudit {
            tables: vec!["refs".into()],
            columns: vec!["refs.uri".into()],
            values: 1,
            files: vec!["x.db".into()],
            file_bytes: 10,
            ..PathAudit::default()
        };
        assert!(schema_has_no_path_column(&clean).is_ok());
        assert!(db_text_has_no_path(&clean).is_ok());
        assert!(db_file_has_no_path(&clean).is_ok());
        let dirty = PathAudit {
            path_columns: vec!["cache.file_path".into()],
            value_hits: vec![("refs".into(), "/tmp/x".into())],
            file_hits: vec![("x.db-wal".into(), "/tmp/x".into())],
            ..clean
        };
        assert!(schema_has_no_path_column(&dirty).is_err());
        assert!(db_text_has_no_path(&dirty).is_err());
        assert!(db_file_has_no_path(&dirty).is_err());
    }

    #[test]
    fn the_blob_is_no_image_and_no_text() {
        assert_eq!(
            crate::attachments::mime_for("x.bin", BLOB_BYTES),
            "application/octet-stream"
        );
    }

    /// The recorded-turn check judges the order first: an agent answer handed over
    /// after the next user message, or one whose text changed, fails it.
    #[test]
    fn a_recorded_turn_out_of_order_or_reworded_fails() {
        use crate::dispatch::ModelMessage;
        use crate::model::{AgentText, Item};
        use agent_client_protocol_schema::v1::ToolCall;

        let turn = RecordedTurn {
            question: user_message(&[]),
            follow_up: user_message(&[]),
            configured: PathBuf::from("/nowhere"),
        };
        let message = |m: &Message| {
            ReplayItem::Message(ModelMessage {
                message: m.clone(),
                parts: vec![],
            })
        };
        let item = |body: ItemBody| {
            ReplayItem::Recorded(Box::new(Item {
                id: crate::ids::ItemId::new(),
                session_id: SessionId::new(),
                seq: 2,
                body,
                created_at: String::new(),
                updated_at: String::new(),
            }))
        };
        let answer = |text: String| {
            item(ItemBody::AgentMessage(AgentText {
                message_id: None,
                content: vec![ContentBlock::from(text)],
            }))
        };
        let call = || item(ItemBody::ToolCall(ToolCall::new("c", "Read")));
        let late = [
            message(&turn.question),
            call(),
            message(&turn.follow_up),
            answer(AGENT_TEXT.concat()),
        ];
        let err = recorded_turn_replays(&turn, &late, "").unwrap_err();
        assert!(err.starts_with("replayed as"), "{err}");
        let reworded = [
            message(&turn.question),
            answer(AGENT_TEXT.join(" ")),
            call(),
            message(&turn.follow_up),
        ];
        let err = recorded_turn_replays(&turn, &reworded, "").unwrap_err();
        assert!(err.contains("not verbatim"), "{err}");
    }
}
