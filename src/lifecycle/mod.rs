//! Whole-session operations on a `Store`: listing by pages, deleting with erasure,
//! collecting what no session needs any more on disk, fork (a new session from part of
//! another, with its own files), export (one self-contained archive, or a readable
//! markdown transcript) and import (an untrusted archive back as a new session).
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
mod progress;

pub use crate::model::SessionSummary;
pub use delete::{DeleteOptions, DeleteReport, DeletedSession, DeletionStatus};
pub use gc::{DEFAULT_GC_GRACE, GcOptions, GcReport, Tally, parse_duration};
pub use list::{CursorError, CwdFilter, DEFAULT_PAGE, MAX_PAGE, SessionCursor, SessionPage};
pub use progress::{Progress, Step};

/// Whether an operation that removes things (`delete_sessions_with`, `gc`) removes
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

use crate::Store;
use crate::db::{proxied, queries, turns};
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::{Event, Item, Message, Session, Setting};
use crate::projection;

/// A session's rows and its event log read in one snapshot, after checking that the
/// rows are what the log says (the check restore makes): a fork or an export of a
/// session edited behind its log would carry the damage somewhere `verify` of the
/// origin could no longer point at it.
pub(crate) struct Snapshot {
    pub session: Session,
    pub messages: Vec<Message>,
    pub items: Vec<Item>,
    pub events: Vec<Event>,
    /// The client's settings (a proxied session's), which a fork and an import keep.
    pub settings: Vec<Setting>,
}

pub(crate) async fn snapshot(store: &Store, session: SessionId) -> Result<Snapshot> {
    store
        .with_read(move |tx| {
            let current = queries::get_session(tx, &session)?;
            let messages = queries::messages(tx, &session, None)?;
            let items = turns::items(tx, &session)?;
            let events = queries::events(tx, &session)?;
            let settings = proxied::settings(tx, &session)?;
            let turns = proxied::turns(tx, &session)?;
            let (expected, mut problems) = projection::replay(session, &events);
            if let Some(expected) = &expected {
                problems.extend(projection::compare(&current, &messages, expected));
                problems.extend(projection::compare_items(&current, &items, expected));
                problems.extend(projection::compare_turns(
                    &current, &turns, &settings, expected,
                ));
            }
            if !problems.is_empty() {
                return Err(Error::LogMismatch { session, problems });
            }
            Ok(Snapshot {
                session: current,
                messages,
                items,
                events,
                settings,
            })
        })
        .await
}
