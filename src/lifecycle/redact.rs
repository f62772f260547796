//! `sessionstore redact`: the secrets already stored (before redaction existed, or
//! with it off) found and replaced by `[REDACTED:<kind>]` in each session's events,
//! rows and search entries, in place. Like erasure it is the documented exception to
//! the append-only log, taken the same careful way: one write per session with
//! SQLite's `secure_delete` on, the log's guard lifted and put back inside it
//! (`db::redact`), an event appended saying how many secrets of each kind went (never
//! a value), then the search index merged, the database written into fresh pages
//! (`VACUUM`: stale copies in pages' unused space go too) and the WAL checkpointed
//! and truncated. A
//! session a running proxy holds is skipped; attachment files are never rewritten.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::{Progress, Run};
use crate::config::Database;
use crate::db::{Db, append, queries, redact as rewrite, search};
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::{Event, EventPayload};
use crate::store::{Store, blocking};

/// How [`Store::redact_stored`] runs.
#[derive(Debug, Clone, Default)]
pub struct RedactOptions {
    /// The sessions to look through; none means every session.
    pub sessions: Vec<SessionId>,
    /// `Run::DryRun` reports what would be redacted and changes nothing (a store
    /// opened read-only is then enough).
    pub run: Run,
    pub progress: Progress,
}

/// What `redact` found, and what it did (see [`Store::redact_stored`]). Serialized,
/// it is `redact --json`'s document: `sessions`, `skipped`, `backups`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedactReport {
    /// The sessions that held secrets: redacted, or in a dry run to be.
    pub sessions: Vec<RedactedSession>,
    pub skipped: Vec<SkippedSession>,
    /// Backups the store made of this database earlier (`<db>.v<N>.bak`, from an
    /// upgrade or a repair): copies that still hold whatever was redacted.
    pub backups: Vec<PathBuf>,
    #[serde(skip)]
    pub dry_run: bool,
    /// Whether the WAL was checkpointed and truncated after the rewrite (SQLite), or
    /// the tables vacuumed (PostgreSQL); `false` when a reader held an old snapshot:
    /// the next checkpoint finishes the job. Always true when nothing was rewritten.
    #[serde(skip)]
    pub erased: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedactedSession {
    pub id: SessionId,
    /// How many secrets of each kind (its id, as in `[REDACTED:<kind>]`).
    pub redacted: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedSession {
    pub id: SessionId,
    /// Why, in a few words.
    pub reason: String,
}

/// Why a session was left as it was.
const OPEN_ELSEWHERE: &str = "open in a running proxy";
const LOG_MISMATCH: &str = "its rows disagree with its event log: run verify";

/// One event's payload redacted, with how many secrets of each kind went; `None`
/// when it holds none. A payload that does not parse is left for `verify` to name.
fn redacted(event: &Event<String>, counts: &mut BTreeMap<String, u64>) -> Option<String> {
    let mut payload: serde_json::Value = serde_json::from_str(&event.payload).ok()?;
    if !crate::redact::payload(&mut payload) {
        return None;
    }
    let text = payload.to_string();
    let mut marks: BTreeMap<crate::redact::Kind, i64> = BTreeMap::new();
    for kind in crate::redact::marks(&text) {
        *marks.entry(kind).or_default() += 1;
    }
    // Marks the payload had already are not this redaction's.
    for kind in crate::redact::marks(&event.payload) {
        *marks.entry(kind).or_default() -= 1;
    }
    for (kind, n) in marks {
        if n > 0 {
            *counts.entry(kind.id().to_owned()).or_default() += n as u64;
        }
    }
    Some(text)
}

/// Lifecycle: secrets already stored, redacted in place.
impl Store {
    /// Looks through the sessions named (every session when none is) for secrets in
    /// what they store, and replaces each by `[REDACTED:<kind>]`: its events, the rows
    /// made again from them, and their search entries, one write per session, with
    /// an event recording how many of each kind went. A session a claim holds (a
    /// running proxy has it open) is skipped, and so is one whose rows already
    /// disagree with its log (`verify` names why). Afterwards an SQLite database
    /// keeps no copy of what went: freed pages zeroed (`secure_delete`), the search
    /// index merged, every page written afresh (`VACUUM`), the WAL checkpointed and
    /// truncated; the report names the backups that still hold it. An id that names
    /// no session fails the call before anything changes. Attachment files are never
    /// rewritten. A secret split across two recorded batches of a store kept with
    /// redaction off is not found: each event is redacted by itself, as export does.
    pub async fn redact_stored(&self, options: RedactOptions) -> Result<RedactReport> {
        let RedactOptions {
            sessions,
            run,
            progress,
        } = options;
        let dry_run = run.is_dry();
        let db = self.db().clone();
        let ids = blocking({
            let db = db.clone();
            move || {
                db.read(|tx| match sessions.is_empty() {
                    true => Ok(queries::list_sessions(tx)?
                        .into_iter()
                        .map(|s| s.id)
                        .collect::<Vec<_>>()),
                    false => {
                        let mut unique: Vec<SessionId> = Vec::with_capacity(sessions.len());
                        for id in &sessions {
                            queries::get_session(tx, id)?;
                            if !unique.contains(id) {
                                unique.push(*id);
                            }
                        }
                        Ok(unique)
                    }
                })
            }
        })
        .await?;
        let mut report = RedactReport {
            sessions: Vec::new(),
            skipped: Vec::new(),
            backups: Vec::new(),
            dry_run,
            erased: true,
        };
        let total = ids.len() as u64;
        let mut rewritten = false;
        for (n, id) in ids.into_iter().enumerate() {
            progress.step("sessions looked through", n as u64, total);
            // Held while its session is rewritten, so no proxy opens it meanwhile.
            let claim = match dry_run {
                true => match self.session_claimed(id).await? {
                    true => None,
                    false => Some(None),
                },
                false => match self.claim_session(id).await {
                    Ok(claim) => Some(Some(claim)),
                    Err(Error::SessionOpenElsewhere { .. }) => None,
                    Err(e) => return Err(e),
                },
            };
            let Some(claim) = claim else {
                report.skipped.push(SkippedSession {
                    id,
                    reason: OPEN_ELSEWHERE.to_owned(),
                });
                continue;
            };
            let db = db.clone();
            let outcome = blocking(move || scan(&db, &id)).await;
            let counts = match outcome {
                Ok(counts) => counts,
                Err(Error::LogMismatch { .. }) => {
                    report.skipped.push(SkippedSession {
                        id,
                        reason: LOG_MISMATCH.to_owned(),
                    });
                    continue;
                }
                Err(e) => return Err(e),
            };
            if counts.is_empty() {
                continue;
            }
            let counts = match dry_run {
                true => counts,
                false => {
                    let db = self.db().clone();
                    match blocking(move || write(&db, &id)).await {
                        Ok((counts, erased)) => {
                            report.erased &= erased;
                            rewritten = true;
                            counts
                        }
                        // Found while replaying the rewritten log: the write rolled back.
                        Err(Error::LogMismatch { .. }) => {
                            report.skipped.push(SkippedSession {
                                id,
                                reason: LOG_MISMATCH.to_owned(),
                            });
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            drop(claim);
            report.sessions.push(RedactedSession {
                id,
                redacted: counts,
            });
        }
        progress.step("sessions looked through", total, total);
        if rewritten {
            // The rewrite took the secrets' terms out of the index, but its segments
            // keep them until they are merged: merged once, for every session.
            let db = self.db().clone();
            let erased = blocking(move || {
                let ((), merged) = db.erase(search::purge_deleted)?;
                Ok(db.rewrite_pages()? && merged)
            })
            .await?;
            report.erased &= erased;
        }
        if let Database::Sqlite(path) = &self.config().database {
            report.backups = crate::db::schema::backups(path);
        }
        Ok(report)
    }
}

/// What the session holds, read: its rows checked against its log (as a fork or an
/// export checks them), then how many secrets of each kind its log holds.
fn scan(db: &Db, id: &SessionId) -> Result<BTreeMap<String, u64>> {
    db.read(|tx| {
        let session = queries::get_session(tx, id)?;
        crate::db::verify::check_session(tx, &session)?;
        let mut counts = BTreeMap::new();
        rewrite::each_event_paged(tx, id, |event| {
            redacted(&event, &mut counts);
            Ok(())
        })?;
        Ok(counts)
    })
}

/// The session's log and rows rewritten in one write, and the event that records it;
/// what went, and whether the WAL was truncated after.
fn write(db: &Db, id: &SessionId) -> Result<(BTreeMap<String, u64>, bool)> {
    db.erase(|tx| {
        let mut counts = BTreeMap::new();
        rewrite::rewrite_session(tx, id, |event| redacted(event, &mut counts))?;
        if !counts.is_empty() {
            let at = append::now();
            append::append_event(
                tx,
                id,
                &EventPayload::SessionRedacted {
                    redacted: counts.clone(),
                },
                &at,
            )?;
        }
        Ok(counts)
    })
}
