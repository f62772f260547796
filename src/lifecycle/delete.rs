//! `session delete`: a session erased in one write that leaves its tombstone, then its
//! folder removed (legacy roots' files reported, never touched). Never rows without a
//! tombstone, or a tombstone beside rows.

use std::path::PathBuf;

use serde::Serialize;

use super::{Progress, Run};
use crate::db::search;
use crate::db::sessions::{self, Counts, State};
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::store::{Store, blocking};

/// What happened to one session named to `session delete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeletionStatus {
    Deleted,
    /// Its tombstone was there already: deleting twice is not an error.
    AlreadyDeleted,
    /// A dry run: this is what would go.
    WouldDelete,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletedSession {
    pub id: SessionId,
    pub status: DeletionStatus,
    /// When the tombstone was written (`None` for a dry run).
    pub deleted_at: Option<String>,
    pub messages: u64,
    pub items: u64,
    pub events: u64,
    pub references: u64,
    /// Files removed from (or, in a dry run, in) its folder under the configured root.
    pub files: usize,
    pub bytes: u64,
    /// Its files in legacy roots, left where they are.
    pub legacy_files: Vec<PathBuf>,
}

/// How `Store::delete_sessions` runs; `Default`: for real, no progress shown.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `Run::DryRun` reports what would go and changes nothing.
    pub run: Run,
    pub progress: Progress,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteReport {
    pub dry_run: bool,
    pub sessions: Vec<DeletedSession>,
    /// Whether the WAL was truncated after the erasure (`false`: a reader held an old
    /// snapshot; the next checkpoint finishes); on PostgreSQL, whether the tables were
    /// vacuumed (space reclaimed, not zeroed).
    pub erased: bool,
}

/// Lifecycle: deleting a session, its rows, log and files, leaving a tombstone.
impl Store {
    /// Deletes each session named: in one write (secure delete, WAL truncated after)
    /// each gets its tombstone (id, time, counts, no content) and loses its rows and
    /// events; then its folder is removed. Deleting twice is reported, not an error; an
    /// unknown id fails the call before anything changes.
    pub async fn delete_sessions(
        &self,
        ids: Vec<SessionId>,
        options: DeleteOptions,
    ) -> Result<DeleteReport> {
        let DeleteOptions { run, progress } = options;
        let dry_run = run.is_dry();
        let db = self.db().clone();
        let attachments = self.attachments().clone();
        blocking(move || {
            let mut unique = Vec::with_capacity(ids.len());
            for id in ids {
                if !unique.contains(&id) {
                    unique.push(id);
                }
            }
            let states = db.read(|tx| {
                unique
                    .iter()
                    .map(|id| match sessions::state(tx, id)? {
                        State::Live => Ok((*id, State::Live, sessions::counts(tx, id)?)),
                        State::Deleted { at, counts } => {
                            Ok((*id, State::Deleted { at, counts }, counts))
                        }
                        State::Unknown => Err(Error::SessionNotFound(*id)),
                    })
                    .collect::<Result<Vec<_>>>()
            })?;
            let total = states.len() as u64 * 2;
            let mut erased = true;
            let mut deleted_at: Vec<Option<String>> = vec![None; states.len()];
            let mut counts: Vec<Counts> = states.iter().map(|(_, _, c)| *c).collect();
            if !dry_run && states.iter().any(|(_, s, _)| *s == State::Live) {
                let at = crate::db::append::now();
                let (written, checkpointed) = db.erase(|tx| {
                    let mut written = Vec::with_capacity(states.len());
                    for (n, (id, _, _)) in states.iter().enumerate() {
                        progress.step("sessions erased", n as u64, total);
                        // Looked up again under the write lock: another delete may
                        // have won since the read above.
                        written.push(match sessions::state(tx, id)? {
                            State::Live => Some(sessions::erase(tx, id, &at)?),
                            State::Deleted { .. } => None,
                            State::Unknown => return Err(Error::SessionNotFound(*id)),
                        });
                    }
                    // The triggers took the sessions' texts out of the search index,
                    // but its segments keep their terms until they are merged.
                    if written.iter().any(Option::is_some) {
                        search::purge_deleted(tx)?;
                    }
                    Ok(written)
                })?;
                erased = checkpointed;
                for (i, w) in written.into_iter().enumerate() {
                    if let Some(c) = w {
                        counts[i] = c;
                        deleted_at[i] = Some(at.clone());
                    }
                }
            }
            let mut report = Vec::with_capacity(states.len());
            for (n, (id, state, _)) in states.iter().enumerate() {
                progress.step("folders removed", states.len() as u64 + n as u64, total);
                let (status, at) = match (state, deleted_at[n].take()) {
                    (_, Some(at)) => (DeletionStatus::Deleted, Some(at)),
                    (State::Deleted { at, .. }, None) => {
                        (DeletionStatus::AlreadyDeleted, Some(at.clone()))
                    }
                    // Another delete won the race between the read and the write.
                    _ if !dry_run => (DeletionStatus::AlreadyDeleted, None),
                    _ => (DeletionStatus::WouldDelete, None),
                };
                let folder = attachments.roots().configured.join(id.to_string());
                let cleanup = |cause| Error::Cleanup {
                    path: folder.clone(),
                    cause,
                };
                let (files, bytes) = if dry_run {
                    let files = attachments.folder_files(id).map_err(cleanup)?;
                    (files.len(), files.iter().map(|f| f.size).sum())
                } else {
                    let swept = attachments.remove_session_folder(id).map_err(cleanup)?;
                    (swept.files, swept.bytes)
                };
                let c = counts[n];
                report.push(DeletedSession {
                    id: *id,
                    status,
                    deleted_at: at,
                    messages: c.messages,
                    items: c.items,
                    events: c.events,
                    references: c.refs,
                    files,
                    bytes,
                    legacy_files: attachments.legacy_files(id),
                });
            }
            progress.step("folders removed", total, total);
            Ok(DeleteReport {
                dry_run,
                sessions: report,
                erased,
            })
        })
        .await
    }
}
