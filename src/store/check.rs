//! Finding and checking through the store: full-text search and `verify` (with its
//! repair).

use super::*;

impl Store {
    /// Full-text search over titles, messages (display text, expansion, transcript)
    /// and recorded agent messages and thoughts, best-ranked first, optionally in one
    /// session. `query` is FTS5 syntax; one FTS5 cannot parse is
    /// `Error::SearchQuery`. A store that can write first indexes the sealed text
    /// still waiting for its writer to be idle; a read-only one does not see that
    /// text until a writer has indexed it.
    pub async fn search(
        &self,
        query: String,
        session: Option<SessionId>,
        limit: u32,
    ) -> Result<Vec<db::search::Hit>> {
        // Sealed text waits to be indexed until the writer is idle (V14); a store that
        // can write indexes it first, so its own search finds what it recorded. A
        // read-only store searches what a writer has indexed.
        // It is still a search when that write fails (a full disk, a lock held too
        // long): it finds what is indexed, and says so in the log.
        if self.writer.is_some()
            && self.db.defers_search()
            && self
                .with_read(db::search::anything_waiting)
                .await
                .unwrap_or(false)
            && let Err(e) = self
                .with_write(|tx| db::search::index_waiting(tx, None, None))
                .await
        {
            tracing::warn!("searched without the sealed text still waiting to be indexed: {e}");
        }
        self.with_read(move |tx| {
            if let Some(s) = &session {
                queries::get_session(tx, s)?;
            }
            db::search::search(tx, &query, session.as_ref(), limit)
        })
        .await
    }

    /// The integrity check (`db::verify`), and, with `Verify::Repair`, the repair of
    /// what it finds (`verify --repair`; see [`Verify`]). With `Verify::Check` nothing
    /// is written: the report's `after` is the check, `found` its problems, and nothing
    /// is rebuilt or backed up.
    pub async fn verify(&self, how: Verify) -> Result<db::repair::RepairReport> {
        match how {
            Verify::Check => {
                let after = self.check().await?;
                Ok(db::repair::RepairReport {
                    backup: None,
                    rebuilt: Vec::new(),
                    search_rebuilt: false,
                    found: after.problems.clone(),
                    after,
                })
            }
            Verify::Repair => self.repair().await,
        }
    }

    /// The integrity check (`db::verify`), and, as warnings that are no problem, the
    /// database files more exposed than this store would make them.
    async fn check(&self) -> Result<VerifyReport> {
        let mut report = self.with_read(db::verify::verify).await?;
        let config = self.config.clone();
        report.warnings = blocking(move || Ok(db::verify::exposures(&config))).await?;
        Ok(report)
    }

    /// `Verify::Repair`: runs the check, and when it finds rows that disagree
    /// with the event log (or a search index that disagrees with the rows), backs the
    /// database up (`<db>.v<N>.bak`, as a migration does), makes the rows of each such
    /// session again from its log and the search index from the rows, in one write,
    /// and runs `verify` again. The log itself is never changed: a problem of the log
    /// (an event that does not replay), of the engine or of the schema is not rebuilt,
    /// and stays in the report's `after`. Nothing is written, and no backup made, when
    /// `verify` finds nothing to rebuild. Rows are rebuilt on SQLite only: on PostgreSQL
    /// a store with something to rebuild is `Error::RepairUnsupported`.
    /// The repaired sessions are best left unwritten by other processes meanwhile: a
    /// writer that remembered a session's tail would not know it was rebuilt.
    async fn repair(&self) -> Result<db::repair::RepairReport> {
        let found = self.check().await?;
        let plan = db::repair::Plan::of(&found);
        if plan.is_empty() {
            return Ok(db::repair::RepairReport {
                backup: None,
                rebuilt: Vec::new(),
                search_rebuilt: false,
                found: found.problems.clone(),
                after: found,
            });
        }
        // Only SQLite's rows are rebuilt; a consistent PostgreSQL store has nothing to
        // repair and says so above.
        let file = db::sqlite_file(&self.config)?.ok_or(Error::RepairUnsupported {
            engine: "PostgreSQL",
        })?;
        let db = self.db.clone();
        let search = plan.search;
        let (backup, rebuilt) = blocking(move || {
            db.write(|tx| {
                // Taken inside the write, which holds the lock: the copy is the
                // database exactly as the repair found it.
                let backup = db::schema::back_up(&file, db::schema::latest_version())?;
                let mut rebuilt = Vec::new();
                if !plan.sessions.is_empty() {
                    db::repair::align_search(tx)?;
                }
                for session in &plan.sessions {
                    // A session with no row of its own (deleted, or never made) has
                    // nothing to hang rows on: `verify` names it afterwards.
                    if queries::get_session(tx, session).is_ok()
                        && db::repair::rebuild_session(tx, session)?
                    {
                        rebuilt.push(*session);
                    }
                }
                if plan.search {
                    db::repair::rebuild_search(tx)?;
                }
                Ok((backup, rebuilt))
            })
        })
        .await?;
        let after = self.check().await?;
        Ok(db::repair::RepairReport {
            backup: Some(backup),
            rebuilt,
            search_rebuilt: search,
            found: found.problems,
            after,
        })
    }
}
