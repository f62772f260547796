//! Whole-session operations on a `Store`: listing by pages, deleting with erasure,
//! collecting what no session needs any more on disk, fork (a new session from part of
//! another, with its own files), export (one self-contained archive, or a readable
//! markdown transcript), import (an untrusted archive back as a new session) and redact
//! (the secrets already stored, replaced in place).
//! Everything they write goes through `db` write functions with their events and
//! through the attachment store; nothing here runs SQL or opens an attachment file
//! itself, and nothing bypasses the event log: a deleted session leaves its tombstone
//! in the same write that erases it.

mod delete;
pub mod export;
pub mod fork;
mod gc;
pub mod import;
mod list;
pub mod manifest;
mod progress;
mod redact;

pub use crate::model::SessionSummary;
pub use delete::{DeleteOptions, DeleteReport, DeletedSession, DeletionStatus};
pub use export::{Export, ExportFormat};
pub use gc::{DEFAULT_GC_GRACE, GcOptions, GcReport, Tally, parse_duration};
pub use list::{
    CursorError, CwdFilter, DEFAULT_PAGE, ListQuery, MAX_PAGE, SessionCursor, SessionPage,
};
pub use progress::{Progress, Step};
pub use redact::{RedactOptions, RedactReport, RedactedSession, SkippedSession};

/// Whether an operation that removes things (`delete_sessions`, `gc`) removes
/// them, or only reports what it would remove and changes nothing (opening the store
/// read-only is then enough).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Run {
    #[default]
    Apply,
    DryRun,
}

impl Run {
    pub fn is_dry(self) -> bool {
        self == Run::DryRun
    }
}
