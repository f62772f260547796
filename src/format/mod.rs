//! Streaming writers of what the model gets, over any `io::Write`: the ACP restore
//! object and block array, `acp-updates` lines, and the OpenAI Chat Completions and
//! Responses requests, each written as `begin`, one `item` per history entry (a
//! dispatched message or a recorded turn item), `finish`. Pure: they write only to
//! the writer they are given and never read a file.
//!
//! The bytes are exactly what serde_json writes for the schema types (the ACP
//! crate's, and `openai`'s request types), field for field in declaration order; the
//! tests compare both on every kind of part. An encoding is written from its one
//! shared buffer: base64 goes out as it is (its alphabet needs no JSON escape), other
//! strings go through serde_json's escaping.

mod acp;
mod openai;

use std::io::{self, Write};

use crate::dispatch::ModelMessage;
use crate::ids::SessionId;
use crate::model::Item;
use crate::replay::ReplayItem;
use crate::turns;

pub(crate) use acp::RecordedEntry;

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
}

impl<W: Write> StreamWriter<W> {
    /// Writes the opening of `format` for `session`; `model` names the model in the
    /// OpenAI requests and is not written in the other formats.
    pub fn begin(
        mut out: W,
        format: Format,
        session: SessionId,
        model: &str,
    ) -> io::Result<StreamWriter<W>> {
        match format {
            Format::AcpRestore => {
                out.write_all(b"{\"sessionId\":")?;
                json(&mut out, &session)?;
                out.write_all(b",\"messages\":[")?;
            }
            Format::AcpBlocks => out.write_all(b"[")?,
            Format::AcpUpdates => {}
            Format::OpenaiChat => {
                out.write_all(b"{\"model\":")?;
                json(&mut out, model)?;
                out.write_all(b",\"messages\":[")?;
            }
            Format::OpenaiResponses => {
                out.write_all(b"{\"model\":")?;
                json(&mut out, model)?;
                out.write_all(b",\"input\":[")?;
            }
        }
        Ok(StreamWriter {
            out,
            format,
            session,
            first: true,
        })
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
        let out = &mut self.out;
        match self.format {
            Format::AcpRestore => {
                comma(out, &mut self.first)?;
                json(out, &RecordedEntry::new(item))
            }
            // `dispatch` and `drain` hand over messages only; a block array has no
            // place for a tool call or a plan.
            Format::AcpBlocks => Ok(()),
            Format::AcpUpdates => acp::recorded_updates(out, &self.session, item),
            Format::OpenaiChat | Format::OpenaiResponses => {
                let Some(blocks) = turns::model_text(&item.body) else {
                    return Ok(());
                };
                comma(out, &mut self.first)?;
                let responses = self.format == Format::OpenaiResponses;
                openai::assistant_text(out, &blocks, responses)
            }
        }
    }

    /// Writes one dispatched message.
    pub fn message(&mut self, m: &ModelMessage) -> io::Result<()> {
        let out = &mut self.out;
        match self.format {
            Format::AcpRestore => {
                comma(out, &mut self.first)?;
                acp::restore_message(out, m)
            }
            Format::AcpBlocks => {
                for part in &m.parts {
                    comma(out, &mut self.first)?;
                    acp::block(out, part)?;
                }
                Ok(())
            }
            Format::AcpUpdates => acp::updates(out, &self.session, m),
            Format::OpenaiChat => {
                comma(out, &mut self.first)?;
                openai::chat_message(out, m)
            }
            Format::OpenaiResponses => {
                comma(out, &mut self.first)?;
                openai::responses_message(out, m)
            }
        }
    }

    /// Writes the closing and hands the writer back (not flushed).
    pub fn finish(mut self) -> io::Result<W> {
        match self.format {
            Format::AcpRestore | Format::OpenaiChat | Format::OpenaiResponses => {
                self.out.write_all(b"]}")?
            }
            Format::AcpBlocks => self.out.write_all(b"]")?,
            Format::AcpUpdates => {}
        }
        Ok(self.out)
    }
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

/// A base64 text as a JSON string, written from its buffer as it is: the standard
/// alphabet and `=` never need escaping, so this is what serde_json would write.
fn base64_string(out: &mut impl Write, b64: &str) -> io::Result<()> {
    debug_assert!(
        b64.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
    );
    out.write_all(b"\"")?;
    out.write_all(b64.as_bytes())?;
    out.write_all(b"\"")
}

/// `"data:<mime>;base64,<b64>"` as one JSON string, the base64 written unescaped.
fn data_url(out: &mut impl Write, mime: &str, b64: &str) -> io::Result<()> {
    let head = serde_json::to_vec(&format!("data:{mime};base64,"))?;
    // The head's own closing quote is left off, so the base64 continues the string.
    out.write_all(&head[..head.len() - 1])?;
    out.write_all(b64.as_bytes())?;
    out.write_all(b"\"")
}

#[cfg(test)]
mod tests;
