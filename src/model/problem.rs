//! What a check of the database found (`verify`, a replay, an import, a schema check).

use std::fmt;

use serde::Serialize;

use crate::ids::{EventSeq, ItemId, MessageId, SessionId};

/// What kind of inconsistency a check of the database found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProblemKind {
    /// The engine's own integrity check failed (SQLite's `integrity_check`).
    Integrity,
    /// A row points at a row that does not exist (a foreign key).
    DanglingReference,
    /// A schema object the migrations make is missing (or a trigger disabled).
    SchemaMissing,
    /// A schema object differs from the one its migrations make.
    SchemaChanged,
    /// A schema object the migrations do not make.
    SchemaExtra,
    /// A session's message or item rows that do not read as this store writes them.
    UnreadableRows,
    /// Rows or events of no listed session, or a table whose count disagrees with
    /// the rows read by session.
    StrayRows,
    /// A deleted session (it has a tombstone) that still has rows or events.
    DeletedButPresent,
    /// A session's event sequence numbers skip or repeat.
    EventSequence,
    /// An event whose payload, or an update it records, does not read.
    UnreadableEvent,
    /// An event whose `kind` column names another kind than its payload records.
    MislabelledEvent,
    /// A session created twice or never, or an event of it before its creation.
    SessionCreation,
    /// A message or item put at another place in the history than the next one.
    HistorySequence,
    /// A delivery of a message that was not queued, or never appended.
    Delivery,
    /// A recorded turn whose updates the store refuses, or that names another number
    /// of new items than its updates make.
    RecordedTurn,
    /// A row the event log has and the table does not.
    MissingRow,
    /// A row (a session, a message, an item) that differs from what its log says.
    ChangedRow,
    /// A row in the table that no event records.
    UnloggedRow,
    /// A turn ended twice, or ended without having begun.
    TurnSequence,
    /// The full-text index lacks a row it should index, or indexes one that is gone.
    SearchIndex,
    /// The log's index by session (SQLite's `event_keys`, V13) lacks an event it
    /// should key, keys one that is not there, or two events take one place.
    LogIndex,
}

impl ProblemKind {
    /// What the problem's words begin with, before its detail.
    fn subject(self) -> Subject {
        match self {
            ProblemKind::Integrity => Subject::Engine,
            ProblemKind::SchemaMissing | ProblemKind::SchemaChanged | ProblemKind::SchemaExtra => {
                Subject::Schema
            }
            ProblemKind::EventSequence
            | ProblemKind::MissingRow
            | ProblemKind::ChangedRow
            | ProblemKind::UnloggedRow => Subject::Session,
            _ => Subject::None,
        }
    }
}

/// The words a problem begins with: `sqlite: `, `schema: `, `session <id>: `, or none
/// (its detail then names what it is about itself).
enum Subject {
    Engine,
    Schema,
    Session,
    None,
}

/// One finding: its kind, the ids it is about (as far as they apply: the session,
/// the message or item, the event by its place in the log), and its detail in words.
/// `Display` gives the whole finding as `verify` prints it, and it serializes as
/// that text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    kind: ProblemKind,
    session: Option<SessionId>,
    message: Option<MessageId>,
    item: Option<ItemId>,
    event: Option<EventSeq>,
    detail: String,
}

impl Problem {
    pub(crate) fn new(kind: ProblemKind, detail: impl Into<String>) -> Problem {
        Problem {
            kind,
            session: None,
            message: None,
            item: None,
            event: None,
            detail: detail.into(),
        }
    }

    pub(crate) fn with_session(mut self, session: SessionId) -> Problem {
        self.session = Some(session);
        self
    }

    pub(crate) fn with_message(mut self, message: MessageId) -> Problem {
        self.message = Some(message);
        self
    }

    pub(crate) fn with_item(mut self, item: ItemId) -> Problem {
        self.item = Some(item);
        self
    }

    pub(crate) fn with_event(mut self, event: EventSeq) -> Problem {
        self.event = Some(event);
        self
    }

    pub fn kind(&self) -> ProblemKind {
        self.kind
    }

    pub fn session(&self) -> Option<SessionId> {
        self.session
    }

    pub fn message(&self) -> Option<MessageId> {
        self.message
    }

    pub fn item(&self) -> Option<ItemId> {
        self.item
    }

    /// The event the problem is about, by its place in the global log.
    pub fn event(&self) -> Option<EventSeq> {
        self.event
    }

    /// The finding without the words that say what it is about (`schema: `,
    /// `session <id>: `), for a message that has said so already.
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The finding as a message about `session` words it: without `session <id>: `,
    /// which that message has said once already.
    pub(crate) fn within_session(&self, session: SessionId) -> std::borrow::Cow<'_, str> {
        match self.kind.subject() {
            Subject::Session if self.session == Some(session) => self.detail.as_str().into(),
            _ => self.to_string().into(),
        }
    }

    /// The finding as a message about the schema words it: without `schema: `.
    pub(crate) fn within_schema(&self) -> std::borrow::Cow<'_, str> {
        match self.kind.subject() {
            Subject::Schema => self.detail.as_str().into(),
            _ => self.to_string().into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.kind.subject(), self.session) {
            (Subject::Engine, _) => write!(f, "sqlite: {}", self.detail),
            (Subject::Schema, _) => write!(f, "schema: {}", self.detail),
            (Subject::Session, Some(session)) => write!(f, "session {session}: {}", self.detail),
            _ => f.write_str(&self.detail),
        }
    }
}

impl Serialize for Problem {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}
