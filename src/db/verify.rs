//! The integrity check: SQLite's own, the schema against the one its migrations make,
//! then the tables against the event log, which is the record they are a projection
//! of. It reads only and reports every problem.

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::Connection;

use super::error::sql;
use super::sql::{Tx, args};
use crate::db::turns as queries_turns;
use crate::db::{queries, schema};
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::{Problem, ProblemKind};
use crate::projection::{Replayer, compare, compare_items, compare_turns};

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct VerifyReport {
    pub sessions: usize,
    pub messages: usize,
    /// Recorded turn items: agent messages, thoughts, tool calls, plans, updates.
    pub items: usize,
    pub events: usize,
    /// Deleted sessions: each left a tombstone and no rows or events.
    pub tombstones: usize,
    /// Every inconsistency found, each with its kind and the ids it is about; each
    /// prints (and serializes) as one line of words.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// What only the engine can tell: SQLite's integrity and foreign-key checks and its
/// schema against the migrations'; PostgreSQL keeps its own pages and foreign keys
/// whole, so there only the schema objects are checked.
fn engine_problems(tx: &Tx<'_>) -> Result<Vec<Problem>> {
    let Some(conn) = tx.sqlite_conn() else {
        #[cfg(feature = "postgres")]
        return super::postgres::schema_problems(tx);
        #[cfg(not(feature = "postgres"))]
        unreachable!("a PostgreSQL transaction exists only with the postgres feature");
    };
    let mut problems = Vec::new();
    let mut stmt = conn
        .prepare("PRAGMA integrity_check")
        .map_err(|e| crate::db::error::sqlite("run the integrity check", e))?;
    let lines: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(|e| crate::db::error::sqlite("run the integrity check", e))?;
    problems.extend(
        lines
            .into_iter()
            .filter(|l| l != "ok")
            .map(|l| Problem::new(ProblemKind::Integrity, l)),
    );
    problems.extend(schema_problems(conn)?);
    let mut fk = conn
        .prepare("PRAGMA foreign_key_check")
        .map_err(|e| crate::db::error::sqlite("check foreign keys", e))?;
    let dangling: Vec<(String, i64)> = fk
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .and_then(|rows| rows.collect())
        .map_err(|e| crate::db::error::sqlite("check foreign keys", e))?;
    for (table, rowid) in dangling {
        problems.push(Problem::new(
            ProblemKind::DanglingReference,
            format!("{table} row {rowid} points at a row that does not exist"),
        ));
    }
    Ok(problems)
}

pub fn verify(conn: &Tx<'_>) -> Result<VerifyReport> {
    let mut report = VerifyReport {
        problems: engine_problems(conn)?,
        ..VerifyReport::default()
    };

    let sessions = queries::list_sessions(conn)?;
    // Each session's log is read by itself, a row at a time (`each_event`), rather
    // than the whole log at once: a long history's events are never all in memory.
    let events: i64 = conn
        .query_row("SELECT count(*) FROM events", args![], |r| r.get(0))
        .map_err(sql("count events"))?
        .unwrap_or(0);
    report.sessions = sessions.len();
    report.events = usize::try_from(events).unwrap_or(0);
    let strays: Vec<SessionId> = conn
        .query_map(
            "SELECT DISTINCT session_id FROM events
             WHERE session_id NOT IN (SELECT id FROM sessions) ORDER BY session_id",
            args![],
            |r| r.parsed(0),
        )
        .map_err(sql("read events"))?;
    for id in strays {
        report.problems.push(
            Problem::new(
                ProblemKind::StrayRows,
                format!("events name session {id}, which is not in the sessions table"),
            )
            .with_session(id),
        );
    }
    for session in &sessions {
        // A row this store could not have written (a URI that does not parse, a
        // negative size) is a finding to report, not a reason to stop checking.
        let rows = match queries::messages(conn, &session.id, None) {
            Ok(rows) => rows,
            Err(e) => {
                report.problems.push(
                    Problem::new(
                        ProblemKind::UnreadableRows,
                        format!(
                            "session {} has rows that do not parse ({})",
                            session.id,
                            with_cause(&e)
                        ),
                    )
                    .with_session(session.id),
                );
                // Its rows still count as its own, not as rows of no session.
                let count: i64 = conn
                    .query_row(
                        "SELECT count(*) FROM messages WHERE session_id = ?1",
                        args![session.id.to_string()],
                        |r| r.get(0),
                    )
                    .map_err(sql("count messages"))?
                    .unwrap_or(0);
                report.messages += usize::try_from(count).unwrap_or(0);
                continue;
            }
        };
        report.messages += rows.len();
        let mut replayer = Replayer::new(session.id);
        queries::each_event(conn, &session.id, |event| replayer.apply(event))?;
        let (expected, problems) = replayer.finish();
        report.problems.extend(problems);
        let items = match queries_turns::items(conn, &session.id) {
            Ok(items) => Some(items),
            Err(e) => {
                report.problems.push(
                    Problem::new(
                        ProblemKind::UnreadableRows,
                        format!(
                            "session {} has item rows that do not parse ({})",
                            session.id,
                            with_cause(&e)
                        ),
                    )
                    .with_session(session.id),
                );
                None
            }
        };
        let proxied = super::proxied::turns(conn, &session.id)
            .and_then(|turns| Ok((turns, super::proxied::settings(conn, &session.id)?)));
        let proxied = match proxied {
            Ok(proxied) => Some(proxied),
            Err(e) => {
                report.problems.push(
                    Problem::new(
                        ProblemKind::UnreadableRows,
                        format!(
                            "session {} has turn or setting rows that do not parse ({})",
                            session.id,
                            with_cause(&e)
                        ),
                    )
                    .with_session(session.id),
                );
                None
            }
        };
        if let Some(expected) = expected {
            report.problems.extend(compare(session, &rows, &expected));
            if let Some(items) = &items {
                report
                    .problems
                    .extend(compare_items(session, items, &expected));
            }
            if let Some((turns, settings)) = &proxied {
                report
                    .problems
                    .extend(compare_turns(session, turns, settings, &expected));
            }
        }
    }
    let count = |statement: &str, action: &'static str| -> Result<i64> {
        Ok(conn
            .query_row(statement, args![], |r| r.get(0))
            .map_err(sql(action))?
            .unwrap_or(0))
    };
    let total = count("SELECT count(*) FROM messages", "count messages")?;
    // The subtraction is checked: a file edited behind the store could make the rows
    // read per session outnumber the table's own count.
    let counted = usize::try_from(total).unwrap_or(0);
    match counted.checked_sub(report.messages) {
        Some(0) => {}
        Some(stray) => report.problems.push(Problem::new(
            ProblemKind::StrayRows,
            format!("{stray} messages belong to no listed session"),
        )),
        None => report.problems.push(Problem::new(
            ProblemKind::StrayRows,
            format!(
                "the messages table counts {counted} rows, fewer than the {} read by session",
                report.messages
            ),
        )),
    }
    let (tombstones, problems) = crate::db::sessions::tombstone_problems(conn)?;
    report.tombstones = tombstones;
    report.problems.extend(problems);
    let items = count("SELECT count(*) FROM items", "count items")?;
    report.items = usize::try_from(items).unwrap_or(0);
    let owned = count(
        "SELECT count(*) FROM items WHERE session_id IN (SELECT id FROM sessions)",
        "count items",
    )?;
    if owned != items {
        report.problems.push(Problem::new(
            ProblemKind::StrayRows,
            format!("{} items belong to no listed session", items - owned),
        ));
    }
    Ok(report)
}

/// Schema objects as `sqlite_master` records them: `(type, name)` to `(table, sql)`,
/// the SQL with runs of whitespace made one space (SQLite keeps the text as written,
/// and layout is not a difference).
type Objects = BTreeMap<(String, String), (String, Option<String>)>;

/// An error and its immediate cause, as one finding's text: the cause is what names
/// the column or value that did not parse.
fn with_cause(e: &Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

fn objects(conn: &Connection) -> rusqlite::Result<Objects> {
    // `sqlite_stat*` tables are made by ANALYZE, which changes no behaviour.
    let mut stmt = conn.prepare(
        "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_stat%' ESCAPE '\\'",
    )?;
    let rows = stmt.query_map([], |r| {
        let sql: Option<String> = r.get(3)?;
        Ok((
            (r.get(0)?, r.get(1)?),
            (
                r.get(2)?,
                sql.map(|s| s.split_whitespace().collect::<Vec<_>>().join(" ")),
            ),
        ))
    })?;
    rows.collect()
}

/// Refuses, before a writing command touches it, a database whose schema is not the
/// one its own migrations make. A dropped table would only fail the write midway,
/// after the open had already switched a rollback-journal file to WAL and so rewritten
/// its header; a dropped trigger would let the next write skip a guarantee. Read
/// through a connection that leaves no trace.
pub(crate) fn require_intact_schema(path: &Path) -> Result<()> {
    let problems = super::readonly::read(path, |tx| schema_problems(tx))?;
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::SchemaDamaged {
        path: path.to_owned(),
        problems,
    })
}

/// Compares the database's tables, indexes, triggers and views with those of a fresh
/// in-memory database migrated to the same version, naming each difference: a dropped
/// trigger would let the append-only event log be edited with no row out of place.
fn schema_problems(conn: &Connection) -> Result<Vec<Problem>> {
    let failed = |e| crate::db::error::sqlite("compare the schema", e);
    let version = schema::read_history(conn)
        .map_err(failed)?
        .map(|applied| schema::current(&applied))
        .unwrap_or(0);
    let mut reference = Connection::open_in_memory().map_err(failed)?;
    schema::build_reference(&mut reference, version)?;
    let want = objects(&reference).map_err(failed)?;
    let have = objects(conn).map_err(failed)?;
    let mut problems = Vec::new();
    for ((kind, name), (table, sql)) in &want {
        match have.get(&(kind.clone(), name.clone())) {
            None => problems.push(Problem::new(
                ProblemKind::SchemaMissing,
                format!(
                    "{kind} {name} (on {table}) is missing; the version-{version} schema has it"
                ),
            )),
            Some(found) if found != &(table.clone(), sql.clone()) => problems.push(Problem::new(
                ProblemKind::SchemaChanged,
                format!("{kind} {name} differs from the version-{version} schema"),
            )),
            Some(_) => {}
        }
    }
    for (kind, name) in have.keys() {
        if !want.contains_key(&(kind.clone(), name.clone())) {
            problems.push(Problem::new(
                ProblemKind::SchemaExtra,
                format!("{kind} {name} is not in the version-{version} schema"),
            ));
        }
    }
    Ok(problems)
}
