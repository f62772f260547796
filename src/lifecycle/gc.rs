//! `gc`: removes, under the configured root only, unreferenced uploads older than a
//! grace period, deleted sessions' folders and killed uploads' temporaries. It never
//! touches a legacy root, follows a symlink, or removes an entry it cannot place.
//!
//! Against a concurrent `send`: a session's uploads are decided and removed inside one
//! write, under the lock `send` stores its references under, and `send` checks inside
//! its own write that each file is still there. Whichever locks first wins cleanly.

use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::{Progress, Run};
use crate::attachments::FileKind;
use crate::db::sessions::{self, State};
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::store::{Store, blocking};

/// The default age before gc takes an upload: one about to be sent is safe.
pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(24 * 60 * 60);

#[derive(Debug, Clone)]
pub struct GcOptions {
    /// `Run::DryRun` reports what would go and changes nothing.
    pub run: Run,
    /// Files that changed more recently than this are kept.
    pub grace: Duration,
    pub progress: Progress,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            run: Run::Apply,
            grace: DEFAULT_GC_GRACE,
            progress: Progress::none(),
        }
    }
}

/// A count of files and their bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub files: usize,
    pub bytes: u64,
}

impl Tally {
    fn add(&mut self, files: usize, bytes: u64) {
        self.files += files;
        self.bytes += bytes;
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcReport {
    pub dry_run: bool,
    pub grace_seconds: u64,
    /// Uploads no message refers to, older than the grace period.
    pub unreferenced: Tally,
    /// Folders of deleted sessions, and the files that were in them.
    pub deleted_session_folders: usize,
    pub deleted_sessions: Tally,
    /// Temporary files of killed uploads, older than the grace period.
    pub leftovers: Tally,
    /// Entries left alone: symlinks, unknown sessions' folders, names no upload makes.
    pub skipped: usize,
    /// Everything removed (or, in a dry run, that would be).
    pub total: Tally,
}

/// Parses a duration like `24h`, `90m`, `30s`, `7d` or a plain number of seconds.
pub fn parse_duration(text: &str) -> std::result::Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: expected a number and s, m, h or d"))?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 60 * 60,
        "d" => 24 * 60 * 60,
        _ => {
            return Err(format!(
                "invalid duration {text:?}: the unit is one of s, m, h, d"
            ));
        }
    };
    n.checked_mul(scale)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("invalid duration {text:?}: too long"))
}

/// Lifecycle: collecting files no message refers to.
impl Store {
    /// Collects garbage under the configured root: see the module documentation.
    pub async fn gc(&self, options: GcOptions) -> Result<GcReport> {
        let db = self.db().clone();
        let attachments = self.attachments().clone();
        blocking(move || {
            let GcOptions {
                run,
                grace,
                progress,
            } = options;
            let dry_run = run.is_dry();
            let cutoff = SystemTime::now()
                .checked_sub(grace)
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let mut report = GcReport {
                dry_run,
                grace_seconds: grace.as_secs(),
                ..GcReport::default()
            };
            let root = attachments.roots().configured.clone();
            let (folders, others) =
                attachments
                    .session_folders()
                    .map_err(|cause| Error::Cleanup {
                        path: root.clone(),
                        cause,
                    })?;
            report.skipped += others;
            let total = folders.len() as u64;
            for (n, folder) in folders.iter().enumerate() {
                progress.step("session folders", n as u64, total);
                let id = folder.session;
                let path = root.join(id.to_string());
                let cleanup = |cause| Error::Cleanup {
                    path: path.clone(),
                    cause,
                };
                match db.read(|tx| sessions::state(tx, &id))? {
                    State::Unknown => report.skipped += 1,
                    State::Deleted { .. } => {
                        report.deleted_session_folders += 1;
                        if dry_run {
                            let files = if folder.is_link {
                                vec![]
                            } else {
                                attachments.folder_files(&id).map_err(cleanup)?
                            };
                            report
                                .deleted_sessions
                                .add(files.len(), files.iter().map(|f| f.size).sum());
                        } else {
                            let swept = attachments.remove_session_folder(&id).map_err(cleanup)?;
                            report.deleted_sessions.add(swept.files, swept.bytes);
                        }
                    }
                    // A live session's folder that is a link is never entered.
                    State::Live if folder.is_link => report.skipped += 1,
                    State::Live => {
                        collect_live(&db, &attachments, id, cutoff, dry_run, &mut report).map_err(
                            |e| match e {
                                Collect::Io(cause) => cleanup(cause),
                                Collect::Store(e) => e,
                            },
                        )?;
                        if !dry_run {
                            let swept = attachments.sweep_leftovers(&id, grace).map_err(cleanup)?;
                            report.leftovers.add(swept.files, swept.bytes);
                        }
                    }
                }
            }
            progress.step("session folders", total, total);
            report.total = Tally {
                files: report.unreferenced.files
                    + report.deleted_sessions.files
                    + report.leftovers.files,
                bytes: report.unreferenced.bytes
                    + report.deleted_sessions.bytes
                    + report.leftovers.bytes,
            };
            Ok(report)
        })
        .await
    }
}

enum Collect {
    Io(std::io::Error),
    Store(Error),
}

impl From<Error> for Collect {
    fn from(e: Error) -> Self {
        Collect::Store(e)
    }
}

/// One live session's folder: unreferenced uploads older than `cutoff` decided and
/// removed inside one write (no `send` in between); a dry run only counts.
fn collect_live(
    db: &crate::db::Db,
    attachments: &crate::attachments::AttachmentStore,
    id: SessionId,
    cutoff: SystemTime,
    dry_run: bool,
    report: &mut GcReport,
) -> std::result::Result<(), Collect> {
    let judge = |tx: &crate::db::Tx<'_>, remove: bool| {
        let referenced = sessions::referenced_names(tx, &id)?;
        let files = attachments.folder_files(&id).map_err(Collect::Io)?;
        let mut unreferenced = Tally::default();
        let mut leftovers = Tally::default();
        let mut skipped = 0;
        for file in files {
            match file.kind {
                FileKind::Other => skipped += 1,
                // The sweep goes by modification time, which a live upload moves.
                FileKind::Temp if file.modified < cutoff => leftovers.add(1, file.size),
                FileKind::Temp => {}
                FileKind::Upload if referenced.contains(&file.name) => {}
                FileKind::Upload if file.changed >= cutoff => {}
                FileKind::Upload if remove => {
                    if let Some(bytes) = attachments
                        .remove_upload_if_older(&id, &file.name, cutoff)
                        .map_err(Collect::Io)?
                    {
                        unreferenced.add(1, bytes);
                    }
                }
                FileKind::Upload => unreferenced.add(1, file.size),
            }
        }
        Ok::<_, Collect>((unreferenced, leftovers, skipped))
    };
    let (unreferenced, leftovers, skipped) = if dry_run {
        let outcome = std::cell::RefCell::new(None);
        db.read(|tx| {
            *outcome.borrow_mut() = Some(judge(tx, false));
            Ok(())
        })?;
        outcome
            .into_inner()
            .expect("the read ran its closure at least once")?
    } else {
        // On PostgreSQL the write may run again after a lost race: an earlier run's
        // removals (and count) stay; a database error is returned as the write's own,
        // so the race is retried.
        let mut removed = Tally::default();
        let mut outcome = None;
        let written = db.write_for(&id, |tx| match judge(tx, true) {
            Err(Collect::Store(e)) => Err(e),
            Ok((unreferenced, leftovers, skipped)) => {
                removed.add(unreferenced.files, unreferenced.bytes);
                outcome = Some(Ok((removed, leftovers, skipped)));
                Ok(())
            }
            Err(io) => {
                outcome = Some(Err(io));
                Ok(())
            }
        });
        written?;
        outcome.expect("the write ran its closure")?
    };
    report
        .unreferenced
        .add(unreferenced.files, unreferenced.bytes);
    report.skipped += skipped;
    if dry_run {
        report.leftovers.add(leftovers.files, leftovers.bytes);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_their_units() {
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("90m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("45s"), Ok(Duration::from_secs(45)));
        for bad in ["", "h", "-1h", "1w", "1.5h", "99999999999999999999d"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.starts_with("invalid duration"), "{bad}: {e}");
        }
    }
}
