//! The probe's checks of how the store behaves: pure functions, one per invariant, over
//! `Known` and what the store returned (`model_bound` has what a model gets). No IO but
//! reading back a path a model was given (invariant 2).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use agent_client_protocol_schema::v1::ContentBlock;

use super::known::{
    AGENT_TEXT, BLOB, BLOB_BYTES, IMAGE, Known, MID_TURN, NOTES, NOTES_AGAIN, Place, QUESTION,
    REPLY, RecordedTurn, Sent, TRANSCRIPT, TURN_NOTE, UPLOADS, Upload,
};
use super::oracle::{
    self, Attached, Kind, PathAudit, ReadCounts, attached, expected_uri, parse_context, text_of,
};
use super::report::Outcome;
use crate::attachments::AttachmentUri;
use crate::db::verify::VerifyReport;
use crate::error::Error;
use crate::model::{ItemBody, Role, Session};
use crate::restore::ReplayItem;
use crate::store::Dispatched;

/// A dispatch's user messages, which alone carry references.
pub(super) fn user_messages(messages: &[Dispatched]) -> impl Iterator<Item = &Dispatched> {
    messages.iter().filter(|d| d.message.role == Role::User)
}

/// A dispatched message's attachment blocks, in order.
pub(super) fn attachments(d: &Dispatched) -> impl Iterator<Item = Attached<'_>> {
    d.blocks.iter().filter_map(attached)
}

/// The JSON line of an attachment block's context; an error when it has none.
pub(super) fn context_line(a: &Attached<'_>) -> Result<oracle::ContextLine, String> {
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
    ensure!(
        report.ok(),
        "{}",
        report
            .problems
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    );
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

/// A recorded turn replayed by a fresh store, in order: the agent's text as sent, the
/// tool call merged, the attachment from a live read, the `acp-updates` lines alike.
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

/// `db`: the database file, which the audit must have read (else it proves nothing).
pub(super) fn db_file_has_no_path(audit: &PathAudit, db: &Path) -> Outcome {
    if let Some((path, needle)) = audit.file_hits.first() {
        return Err(format!("{path:?} holds {needle:?}"));
    }
    ensure!(
        audit.files.iter().any(|f| f == db),
        "the audit did not read the database file {db:?} (it read {:?})",
        audit.files
    );
    ensure!(
        audit.file_bytes > 0,
        "the database files read hold no bytes"
    );
    Ok(format!(
        "{} database files, {} bytes, hold no path",
        audit.files.len(),
        audit.file_bytes
    ))
}

/// An encrypted store's files hold none of the probe's texts (nor SQLite's header),
/// while the decrypting audit finds every one: only the key reads them.
pub(super) fn db_file_is_encrypted(audit: &PathAudit, texts: &[String], head: &[u8]) -> Outcome {
    ensure!(
        !head.starts_with(b"SQLite format 3\0"),
        "the database file begins with SQLite's plaintext header"
    );
    if let Some((path, text)) = audit.file_hits.first() {
        return Err(format!("{path:?} holds the plaintext {text:?}"));
    }
    for text in texts {
        ensure!(
            audit.value_hits.iter().any(|(_, hit)| hit == text),
            "the decrypting read did not find {text:?}, so the files' bytes prove nothing"
        );
    }
    ensure!(
        audit.file_bytes > 0,
        "the database files read hold no bytes"
    );
    Ok(format!(
        "{} database files, {} bytes, hold none of {} texts the decrypting read finds",
        audit.files.len(),
        audit.file_bytes,
        texts.len()
    ))
}

#[cfg(test)]
mod tests;
