//! What the probe knows without asking the store: the files and texts it sends, and
//! what the scenario hands the checks (`Known`, `Sent`, `RecordedTurn`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::oracle::{self, Kind, attached, parse_context};
use crate::attachments::AttachmentUri;
use crate::ids::SessionId;
use crate::model::Message;
use crate::store::Dispatched;

/// Bytes that are not UTF-8 and match no image signature: a binary resource.
pub(super) const BLOB_BYTES: &[u8] = &[
    0x00, 0xff, 0xfe, 0x80, b'P', b'K', 0x03, 0x04, 0x00, 0x0a, 0xc3, 0x28, 0x7f, 0x00,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    Configured,
    /// Only in the legacy root, put there by hand as an older version would have.
    Legacy,
}

/// A file the probe stores: the upload's own name, the stored name it must get.
pub(super) struct Upload {
    pub upload: &'static str,
    pub name: &'static str,
    pub bytes: &'static [u8],
    pub kind: Kind,
    pub place: Place,
}

pub(super) const IMAGE: usize = 0;
pub(super) const NOTES: usize = 1;
pub(super) const NOTES_AGAIN: usize = 2;
pub(super) const BLOB: usize = 3;
pub(super) const LEGACY: usize = 4;
pub(super) const BIDI: usize = 5;

pub(super) static UPLOADS: [Upload; 6] = [
    Upload {
        upload: "caf\u{e9} menu.png",
        name: "caf\u{e9} menu.png",
        bytes: oracle::PNG,
        kind: Kind::Image,
        place: Place::Configured,
    },
    Upload {
        upload: "notes 日本.txt",
        name: "notes 日本.txt",
        bytes: "Lunch notes\nsoba 蕎麦 and tempura\nthis line must never reach a path context\n"
            .as_bytes(),
        kind: Kind::Text,
        place: Place::Configured,
    },
    Upload {
        upload: "notes 日本.txt",
        name: "notes 日本 (1).txt",
        bytes: "Second version of the notes, different bytes\nudon 饂飩\n".as_bytes(),
        kind: Kind::Text,
        place: Place::Configured,
    },
    Upload {
        upload: "data blob.bin",
        name: "data blob.bin",
        bytes: BLOB_BYTES,
        kind: Kind::Blob,
        place: Place::Configured,
    },
    Upload {
        upload: "\u{e4}ltere Notiz.md",
        name: "\u{e4}ltere Notiz.md",
        bytes: "# Aus der alten Version\nnur im Legacy-Verzeichnis\n".as_bytes(),
        kind: Kind::Text,
        place: Place::Legacy,
    },
    Upload {
        // A right-to-left override makes this look like "invoicetxt.pdf".
        upload: "invoice\u{202e}fdp.txt",
        name: "invoice\u{202e}fdp.txt",
        bytes: b"a name with a bidi override\n",
        kind: Kind::Text,
        place: Place::Configured,
    },
];

pub(super) const MODEL: &str = "gpt-4o";
pub(super) const QUESTION: &str = "What is on this menu, and do my notes agree with it?";
pub(super) const REPLY: &str = "The menu lists soba and tempura; your notes agree.";
pub(super) const MID_TURN: &str = "Also compare the second version of my notes.";
pub(super) const TRANSCRIPT: &str = "and tell me which one is cheaper";

/// The recorded turn's session: a question with one attachment, the agent's answer (sent
/// as these chunks, back joined verbatim; it names no temporary root, so the audit still
/// finds no path) and a tool call, then a follow-up.
pub(super) const TURN_QUESTION: &str = "Summarize my lunch note.";
pub(super) const TURN_NOTE: &[u8] = "soba 蕎麦 at noon\n".as_bytes();
pub(super) const AGENT_TEXT: [&str; 2] =
    ["Your note says \"soba 蕎麦\"", " at noon.\nNothing else."];
pub(super) const TURN_FOLLOW_UP: &str = "Thanks.";

/// The recorded turn's user messages, and the root its attachment must be read from.
pub(super) struct RecordedTurn {
    pub question: Message,
    pub follow_up: Message,
    pub configured: std::path::PathBuf,
}

/// The messages the scenario sends.
pub(super) struct Sent {
    pub normal: Message,
    pub reply: Message,
    pub image_only: Message,
    pub mid_turn: Message,
}

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
    /// The probe's directory, as given and resolved, and every path a context named:
    /// what nothing persisted may hold.
    pub needles: BTreeSet<String>,
}

impl Known {
    pub fn file(&self, index: usize) -> &Stored {
        &self.files[index]
    }

    pub fn by_uri(&self, uri: &str) -> Result<&Stored, String> {
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
    pub fn needles_and_names(&self) -> Vec<String> {
        let mut needles: Vec<String> = self.needles.iter().cloned().collect();
        for file in &self.files {
            needles.push(file.spec.name.to_owned());
            needles.push(file.uri.clone());
        }
        needles
    }

    pub fn find_needle(&self, text: &str) -> Option<&String> {
        self.needles.iter().find(|n| text.contains(n.as_str()))
    }
}
