//! Streaming writers of what the model gets, over any `io::Write`, each written as
//! `begin`, one `item` per history entry, `finish`; and the ACP `session/prompt` frame
//! (`prompt_frame`). Pure: they write only to the writer they are given.
//!
//! One code path per format: everything written is the serialization of the typed
//! value a library caller gets from the same builder, cut at its placeholders with
//! each encoding written from its one shared buffer (`dispatch::shell`).

mod acp_writer;
mod openai_writer;

use std::io::{self, Write};

use crate::dispatch::ModelMessage;
use crate::dispatch::shell::{Hole, Scratch, placeholder_block};
use crate::ids::SessionId;
use crate::model::{Item, Turn, TurnEnd};
use crate::restore::Partial;
use crate::restore::ReplayItem;
use crate::turns;

pub use acp_writer::{
    OpaqueNotification, REPLAY_META_KEY, RecordedEntry, Replayed, RestoreEntry, RestoreMessage,
    RestoreObject, SESSION_PROMPT, SESSION_UPDATE, message_update, notification_line, prompt_frame,
    prompt_request, recorded_updates, replay_complete, replay_notice, session_updates,
};
use openai_writer::Api;

/// What a stream is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `{"sessionId","messages":[{"id","role","content":[ContentBlock]}]}`, what
    /// `restore --format acp` prints; recorded items join `messages` in the shapes
    /// `RecordedEntry` describes.
    AcpRestore,
    /// One JSON array of every message's ACP blocks, what `dispatch` and `drain` print.
    AcpBlocks,
    /// One `session/update` JSON-RPC notification a line, as an ACP agent answers
    /// `session/load`.
    AcpUpdates,
    /// An OpenAI Chat Completions request.
    OpenaiChat,
    /// An OpenAI Responses API request.
    OpenaiResponses,
}

impl Format {
    /// Whether the output is lines that each end in a newline already (a caller
    /// printing a single JSON document adds its own final newline).
    pub fn is_lines(self) -> bool {
        self == Format::AcpUpdates
    }
}

/// A stream being written: `begin` writes the opening, each `item` one message, and
/// `finish` the closing.
#[derive(Debug)]
pub struct StreamWriter<W: Write> {
    out: W,
    format: Format,
    session: SessionId,
    /// No item has been written yet, so the next one takes no comma before it.
    first: bool,
    /// What `finish` writes: the end of the document's typed shape.
    closing: Vec<u8>,
    /// Where a message's shape is serialized before it is written, when no kept
    /// shell serves it.
    scratch: Scratch,
    kept: acp_writer::Kept,
    /// The session's turns that did not end with `end_turn` (cancelled, failed,
    /// interrupted), in history order: the `acp-updates` lines of their entries say so
    /// under `_meta` ([`TURN_META_KEY`]).
    marked: Vec<Turn>,
}

/// The `_meta` key under which a replayed `session/update` of a turn that did not end
/// with `end_turn` says how it ended: `{"id", "state", "stopReason"?, "reason"?}`,
/// `state` being `interrupted` (no end recorded), `failed`, or the stop reason.
pub const TURN_META_KEY: &str = "sessionstore/turn";

impl<W: Write> StreamWriter<W> {
    /// Writes the opening of `format` for `session`; `model` names the model in the
    /// OpenAI requests and is not written in the other formats.
    pub fn begin(
        out: W,
        format: Format,
        session: SessionId,
        model: &str,
    ) -> io::Result<StreamWriter<W>> {
        StreamWriter::begin_replay(out, format, session, model, None)
    }

    /// [`StreamWriter::begin`] for a replay from a point, which says so where a whole
    /// one says nothing: the restore object's `partial` field, a first `acp-updates`
    /// line ([`replay_notice`]), the OpenAI requests' `metadata`
    /// ([`replay_metadata`]). With `None` the output is `begin`'s, byte for byte.
    pub fn begin_replay(
        mut out: W,
        format: Format,
        session: SessionId,
        model: &str,
        partial: Option<&Partial>,
    ) -> io::Result<StreamWriter<W>> {
        let mut scratch = Scratch::default();
        let metadata = partial.map(replay_metadata);
        let ends = match format {
            Format::AcpRestore => {
                let shape = RestoreObject {
                    session_id: session,
                    partial: partial.copied(),
                    messages: [placeholder_block()],
                };
                ends(&mut scratch, &shape, Hole::block())
            }
            Format::AcpBlocks => ends(&mut scratch, &[placeholder_block()], Hole::block()),
            Format::AcpUpdates => {
                let mut opening = Vec::new();
                if let Some(partial) = partial {
                    json(
                        &mut opening,
                        &notification_line(replay_notice(session, partial)),
                    )?;
                    opening.push(b'\n');
                }
                Some((opening, vec![]))
            }
            Format::OpenaiChat => openai_writer::ends(&mut scratch, Api::Chat, model, metadata),
            Format::OpenaiResponses => {
                openai_writer::ends(&mut scratch, Api::Responses, model, metadata)
            }
        };
        // Only a model name holding the writers' own placeholder (a random nonce after
        // a control character) can make a document that cannot be cut.
        let Some((opening, closing)) = ends else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the model name cannot be written",
            ));
        };
        out.write_all(&opening)?;
        Ok(StreamWriter {
            out,
            format,
            session,
            first: true,
            closing,
            scratch,
            kept: acp_writer::Kept::default(),
            marked: Vec::new(),
        })
    }

    /// Marks the `acp-updates` lines of the entries of `turns` that did not end with
    /// `end_turn` (each entry belongs to the latest turn that began at or before it);
    /// the other formats are unchanged.
    pub fn marking_turns(mut self, mut turns: Vec<Turn>) -> StreamWriter<W> {
        turns.sort_by_key(|t| t.seq);
        self.marked = turns;
        self
    }

    /// The `_meta` of the lines of the entry at `seq`, when its turn is marked.
    fn turn_meta(&self, seq: i64) -> Option<agent_client_protocol_schema::v1::Meta> {
        let at = self.marked.partition_point(|t| t.seq <= seq);
        let turn = self.marked.get(at.checked_sub(1)?)?;
        let mark = match &turn.end {
            Some(TurnEnd::Stopped { stop_reason }) if stop_reason == "end_turn" => return None,
            None => serde_json::json!({"id": turn.id, "state": "interrupted"}),
            Some(TurnEnd::Failed { reason }) => {
                serde_json::json!({"id": turn.id, "state": "failed", "reason": reason})
            }
            Some(TurnEnd::Stopped { stop_reason }) => {
                serde_json::json!({"id": turn.id, "state": stop_reason, "stopReason": stop_reason})
            }
        };
        let mut meta = agent_client_protocol_schema::v1::Meta::new();
        meta.insert(TURN_META_KEY.to_owned(), mark);
        Some(meta)
    }

    /// Writes one item of a restored history.
    pub fn item(&mut self, item: &ReplayItem) -> io::Result<()> {
        match item {
            ReplayItem::Message(m) => self.message(m),
            ReplayItem::Recorded(item) => self.recorded(item),
        }
    }

    /// Writes one recorded turn item: in full in the ACP formats, as the assistant
    /// text it carries in the OpenAI requests, where thoughts, tool calls, plans and
    /// session-level updates are left out (they are the agent's working and the
    /// client's state, not conversation: `turns::model_text`).
    pub fn recorded(&mut self, item: &Item) -> io::Result<()> {
        let api = self.api();
        let meta = self.turn_meta(item.seq);
        let out = &mut self.out;
        match self.format {
            Format::AcpRestore => {
                comma(out, &mut self.first)?;
                json(out, &RecordedEntry::new(item))
            }
            // `dispatch` and `drain` hand over messages only; a block array has no
            // place for a tool call or a plan.
            Format::AcpBlocks => Ok(()),
            Format::AcpUpdates => acp_writer::recorded_lines(out, self.session, item, meta),
            Format::OpenaiChat | Format::OpenaiResponses => {
                let Some(blocks) = turns::model_text(&item.body) else {
                    return Ok(());
                };
                comma(out, &mut self.first)?;
                openai_writer::assistant_text(out, api, &blocks)
            }
        }
    }

    /// Writes one dispatched message.
    pub fn message(&mut self, m: &ModelMessage) -> io::Result<()> {
        let api = self.api();
        let meta = self.turn_meta(m.message.seq);
        let out = &mut self.out;
        let scratch = &mut self.scratch;
        match self.format {
            Format::AcpRestore => {
                comma(out, &mut self.first)?;
                acp_writer::restore_message(out, &mut self.kept, m)
            }
            Format::AcpBlocks => {
                for part in &m.parts {
                    comma(out, &mut self.first)?;
                    part.write_json(out)?;
                }
                Ok(())
            }
            Format::AcpUpdates => match meta {
                None => acp_writer::message_lines(out, &mut self.kept, self.session, m),
                meta => acp_writer::whole_message_lines(out, self.session, m, meta),
            },
            Format::OpenaiChat | Format::OpenaiResponses => {
                comma(out, &mut self.first)?;
                openai_writer::message(out, scratch, api, m)
            }
        }
    }

    /// The writer written to, for a caller that takes what was written item by item.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Writes the closing and hands the writer back (not flushed).
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&self.closing)?;
        Ok(self.out)
    }

    fn api(&self) -> Api {
        match self.format {
            Format::OpenaiResponses => Api::Responses,
            _ => Api::Chat,
        }
    }
}

/// A partial replay as an OpenAI request's `metadata` (string values, as the API
/// takes them): `sessionstore_replay_from` (absent when the replay holds no entry) and
/// `sessionstore_replay_skipped`.
pub fn replay_metadata(partial: &Partial) -> std::collections::BTreeMap<String, String> {
    let mut metadata = std::collections::BTreeMap::new();
    if let Some(from) = partial.from {
        metadata.insert("sessionstore_replay_from".to_owned(), from.to_string());
    }
    metadata.insert(
        "sessionstore_replay_skipped".to_owned(),
        partial.skipped.to_string(),
    );
    metadata
}

/// A document's opening and closing, from its typed shape with one `hole` where its
/// entries go.
fn ends(
    scratch: &mut Scratch,
    shape: &impl serde::Serialize,
    hole: Hole,
) -> Option<(Vec<u8>, Vec<u8>)> {
    let cut = scratch.cut(shape, [hole])?;
    let (open, close) = cut.ends();
    Some((open.to_vec(), close.to_vec()))
}

fn comma(out: &mut impl Write, first: &mut bool) -> io::Result<()> {
    if !std::mem::take(first) {
        out.write_all(b",")?;
    }
    Ok(())
}

/// Any small value as serde_json writes it (strings escaped as the schema types'
/// serialization escapes them).
fn json<T: serde::Serialize + ?Sized>(out: &mut impl Write, value: &T) -> io::Result<()> {
    serde_json::to_writer(out, value).map_err(io::Error::from)
}

#[cfg(test)]
mod tests;
