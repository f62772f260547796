//! Whole-session operations on a `Store`: list, delete, gc, fork, export, import,
//! redact. Everything they write goes through `db`'s write functions with their events
//! and the attachment store: no SQL or attachment file here, nothing bypasses the log.

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

/// Whether an operation removes things, or only reports (a read-only store suffices).
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
