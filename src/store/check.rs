//! Finding and checking through the store: full-text search and `verify` (with its
//! repair).

use super::*;

impl Store {
    /// Full-text search over titles, messages (display text, expansion, transcript)
    /// and recorded agent messages and thoughts, best-ranked first, optionally in one
    /// session. `query` is FTS5 syntax; one FTS5 cannot parse is
    /// `Error::SearchQuery`.
    pub async fn search(
        &self,
        query: String,
        session: Option<SessionId>,
        limit: u32,
    ) -> Result<Vec<db::search::Hit>> {
        self.with_read(move |tx| {
            if let Some(s) = &session {
                queries::get_session(tx, s)?;
            }
            db::search::search(tx, &query, session.as_ref(), limit)
        })
        .await
    }

    /// The integrity check (`db::verify`), and, with `Verify::Repair`, the repair of
    /// what it finds (`verify --repair`). With `Verify::Check` nothing is written.
    pub async fn verify(&self, how: Verify) -> Result<db::repair::RepairReport> {
        match how {
            Verify::Check => Ok(unrepaired(self.check().await?)),
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

    /// `Verify::Repair`: when the check finds rows (or a search index) that disagree
    /// with the event log, backs the database up (`<db>.v<N>.bak`), makes those
    /// sessions' rows again from their log and the index from the rows in one write,
    /// and checks again. The log is never changed; what is not rebuilt stays in the
    /// report's `after`. SQLite only: on PostgreSQL, something to rebuild is
    /// `Error::RepairUnsupported`. Other writers had best leave the repaired sessions
    /// alone meanwhile: one that remembered a session's tail would not know it changed.
    async fn repair(&self) -> Result<db::repair::RepairReport> {
        let found = self.check().await?;
        let plan = db::repair::Plan::of(&found);
        if plan.is_empty() {
            return Ok(unrepaired(found));
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

/// A report of a check that rebuilt nothing and backed nothing up.
fn unrepaired(after: VerifyReport) -> db::repair::RepairReport {
    db::repair::RepairReport {
        backup: None,
        rebuilt: Vec::new(),
        search_rebuilt: false,
        found: after.problems.clone(),
        after,
    }
}
