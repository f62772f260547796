//! The integrity check: SQLite's own, then the tables against the event log, which is
//! the record they are a projection of. It reads only and reports every problem.

use std::collections::BTreeMap;

use rusqlite::Connection;

use crate::db::queries;
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::Event;
use crate::projection::{compare, replay};

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct VerifyReport {
    pub sessions: usize,
    pub messages: usize,
    pub events: usize,
    pub problems: Vec<String>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

pub fn verify(conn: &Connection) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    let mut stmt = conn
        .prepare("PRAGMA integrity_check")
        .map_err(|e| Error::sqlite("run the integrity check", e))?;
    let lines: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| Error::sqlite("run the integrity check", e))?;
    report.problems.extend(
        lines
            .into_iter()
            .filter(|l| l != "ok")
            .map(|l| format!("sqlite: {l}")),
    );
    let mut fk = conn
        .prepare("PRAGMA foreign_key_check")
        .map_err(|e| Error::sqlite("check foreign keys", e))?;
    let dangling: Vec<(String, i64)> = fk
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .and_then(|rows| rows.collect())
        .map_err(|e| Error::sqlite("check foreign keys", e))?;
    for (table, rowid) in dangling {
        report.problems.push(format!(
            "{table} row {rowid} points at a row that does not exist"
        ));
    }

    let sessions = queries::list_sessions(conn)?;
    let events = queries::all_events(conn)?;
    report.sessions = sessions.len();
    report.events = events.len();
    let mut by_session: BTreeMap<SessionId, Vec<Event>> = BTreeMap::new();
    for e in events {
        by_session.entry(e.session_id).or_default().push(e);
    }
    for id in by_session.keys() {
        if !sessions.iter().any(|s| s.id == *id) {
            report.problems.push(format!(
                "events name session {id}, which is not in the sessions table"
            ));
        }
    }
    for session in &sessions {
        // A row this store could not have written (a URI that does not parse, a
        // negative size) is a finding to report, not a reason to stop checking.
        let rows = match queries::messages(conn, &session.id, None) {
            Ok(rows) => rows,
            Err(e) => {
                let cause = std::error::Error::source(&e)
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default();
                report.problems.push(format!(
                    "session {} has rows that do not parse ({e}{cause})",
                    session.id
                ));
                by_session.remove(&session.id);
                // Its rows still count as its own, not as rows of no session.
                let count: i64 = conn
                    .query_row(
                        "SELECT count(*) FROM messages WHERE session_id = ?1",
                        [session.id.to_string()],
                        |r| r.get(0),
                    )
                    .map_err(|e| Error::sqlite("count messages", e))?;
                report.messages += count as usize;
                continue;
            }
        };
        report.messages += rows.len();
        let events = by_session.remove(&session.id).unwrap_or_default();
        let (expected, problems) = replay(session.id, &events);
        report.problems.extend(problems);
        if let Some(expected) = expected {
            report.problems.extend(compare(session, &rows, &expected));
        }
    }
    let total: i64 = conn
        .query_row("SELECT count(*) FROM messages", [], |r| r.get(0))
        .map_err(|e| Error::sqlite("count messages", e))?;
    if total as usize != report.messages {
        report.problems.push(format!(
            "{} messages belong to no listed session",
            total as usize - report.messages
        ));
    }
    Ok(report)
}
