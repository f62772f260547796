//! A session's life after its messages: listing by pages, deleting with erasure, and
//! collecting what no session needs any more on disk. It goes through `db` for every
//! row and through `attachments` for every file, and never bypasses the event log: a
//! deleted session leaves its tombstone in the same write that erases it.

mod delete;
mod gc;
mod list;
mod progress;

pub use delete::{DeleteReport, DeletedSession, DeletionStatus};
pub use gc::{DEFAULT_GC_GRACE, GcOptions, GcReport, Tally, parse_duration};
pub use list::{CursorError, DEFAULT_PAGE, MAX_PAGE, SessionCursor, SessionPage, SessionSummary};
pub use progress::{Progress, Step};
