//! The integrity check: SQLite's own, the schema against its migrations', then the
//! tables against the event log they project; plus exposure warnings. It reads only,
//! reports every problem, and changes no file's mode.

use rusqlite::Connection;

use super::error::sql;
use super::sql::{Tx, args};
use crate::db::items as queries_items;
use crate::db::{SqliteFile, entries, queries, schema};
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::{Problem, ProblemKind, Session, SessionFigures, Setting, Turn};
use crate::projection::{
    Entry, Meet, Projection, Replayer, compare, compare_figures, compare_items, compare_turns,
    session_problem,
};

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct VerifyReport {
    pub sessions: usize,
    pub messages: usize,
    /// Recorded turn items: agent messages, thoughts, tool calls, plans, updates.
    pub items: usize,
    pub events: usize,
    /// Deleted sessions: each left a tombstone and no rows or events.
    pub tombstones: usize,
    /// Each prints (and serializes) as one line of words.
    pub problems: Vec<Problem>,
    /// Warnings, not problems: `ok` ignores them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Exposure>,
}

mod exposure;
pub use exposure::{Exposure, ExposureKind, exposures, key_file_exposure};

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// What only the engine can tell: SQLite's integrity, foreign keys and schema;
/// PostgreSQL keeps pages and keys whole, so only its schema is checked.
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
    problems.extend(search_problems(conn)?);
    problems.extend(key_problems(conn)?);
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
    // A session's log a row at a time: a long history is never all in memory.
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
        // A page at a time against the replaying log; a session whose rows do not
        // read that way is read whole below, which names what is wrong.
        if let Some((problems, messages)) = windowed(conn, session)? {
            report.problems.extend(problems);
            report.messages += messages;
            continue;
        }
        // A row this store could not have written (a URI that does not parse, a
        // negative size) is a finding to report, not a reason to stop checking.
        let unreadable = |what: &str, e: &Error| {
            Problem::new(
                ProblemKind::UnreadableRows,
                format!(
                    "session {} has {what} that do not parse ({})",
                    session.id,
                    with_cause(e)
                ),
            )
            .with_session(session.id)
        };
        let rows = match queries::messages(conn, &session.id, None) {
            Ok(rows) => rows,
            Err(e) => {
                report.problems.push(unreadable("rows", &e));
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
        let items = match queries_items::items(conn, &session.id) {
            Ok(items) => Some(items),
            Err(e) => {
                report.problems.push(unreadable("item rows", &e));
                None
            }
        };
        let proxied = match proxied_rows(conn, &session.id) {
            Ok(proxied) => Some(proxied),
            Err(e) => {
                report.problems.push(unreadable("turn or setting rows", &e));
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
            if let Some(proxied) = &proxied {
                report
                    .problems
                    .extend(compare_proxied(session, proxied, &expected));
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
    report.problems.extend(stray_streaming_parts(conn)?);
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

/// Where `event_keys` (V13) disagrees with the log: an event up to `event_keys_upto`
/// without a key (hidden from every read of its session), a key of no such event, or
/// two events at one place in a session's log.
fn key_problems(conn: &Connection) -> Result<Vec<Problem>> {
    let failed = |e| crate::db::error::sqlite("check the log's index", e);
    let present: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema
             WHERE type = 'table' AND name IN ('event_keys', 'event_keys_upto')",
            [],
            |r| r.get(0),
        )
        .map_err(failed)?;
    if present != 2 {
        return Ok(Vec::new());
    }
    let count =
        |sql: &str| -> Result<i64> { conn.query_row(sql, [], |r| r.get(0)).map_err(failed) };
    let mut problems = Vec::new();
    let mut found = |n: i64, what: &str| {
        if n > 0 {
            problems.push(Problem::new(
                ProblemKind::LogIndex,
                format!("the log's index (event_keys): {n} {what}"),
            ));
        }
    };
    if count("SELECT count(*) FROM event_keys_upto")? != 1 {
        found(1, "end that is not one row of event_keys_upto");
        return Ok(problems);
    }
    found(
        count(
            "SELECT count(*) FROM events ev
             WHERE ev.seq <= (SELECT upto FROM event_keys_upto)
               AND NOT EXISTS (SELECT 1 FROM event_keys k
                               WHERE k.session_id = ev.session_id
                                 AND k.session_seq = ev.session_seq AND k.seq = ev.seq)",
        )?,
        "event(s) at or below its end with no key, which no read of their session finds",
    );
    found(
        count(
            "SELECT count(*) FROM event_keys k
             WHERE k.seq > (SELECT upto FROM event_keys_upto)
                OR NOT EXISTS (SELECT 1 FROM events ev
                               WHERE ev.seq = k.seq AND ev.session_id = k.session_id
                                 AND ev.session_seq = k.session_seq)",
        )?,
        "key(s) of no such event",
    );
    found(
        count(
            "SELECT count(*) FROM events ev
             WHERE ev.seq > (SELECT upto FROM event_keys_upto)
               AND (EXISTS (SELECT 1 FROM event_keys k
                            WHERE k.session_id = ev.session_id
                              AND k.session_seq = ev.session_seq)
                    OR EXISTS (SELECT 1 FROM events o
                               WHERE o.seq > (SELECT upto FROM event_keys_upto)
                                 AND o.seq < ev.seq AND o.session_id = ev.session_id
                                 AND o.session_seq = ev.session_seq))",
        )?,
        "unkeyed event(s) at a place in their session's log that another event takes",
    );
    Ok(problems)
}

/// What SQLite's integrity check cannot see in the full-text index (V11 on): a row
/// missing its document (a matching search may fail as malformed), a document of no
/// row (it matches whatever later takes its id), an entry naming a gone row, and a
/// sealed segment not indexed. FTS5's `'integrity-check'` is a write, so it is not
/// used; each count walks one table with keyed look-ups, in bounded memory.
fn search_problems(conn: &Connection) -> Result<Vec<Problem>> {
    let failed = |e| crate::db::error::sqlite("check the search index", e);
    let version = schema::read_history(conn)
        .map_err(failed)?
        .map(|applied| schema::current(&applied))
        .unwrap_or(0);
    let present: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_schema
             WHERE name IN ('items', 'search_entries', 'search_docsize', 'item_parts')",
            [],
            |r| r.get(0),
        )
        .map_err(failed)?;
    if version < 11 || present != 4 {
        return Ok(Vec::new());
    }
    let count =
        |sql: &str| -> Result<i64> { conn.query_row(sql, [], |r| r.get(0)).map_err(failed) };
    let items = count(
        "SELECT count(*) FROM items i
         WHERE i.kind IN ('agent_message', 'agent_thought')
           AND NOT EXISTS (SELECT 1 FROM search_docsize d WHERE d.id = i.rowid)",
    )?;
    let entries = count(
        "SELECT count(*) FROM search_entries e
         WHERE NOT EXISTS (SELECT 1 FROM search_docsize d WHERE d.id = e.id)",
    )?;
    let documents = count(
        "SELECT count(*) FROM search_docsize d
         WHERE NOT EXISTS (SELECT 1 FROM items i
                           WHERE d.id > 0 AND i.rowid = d.id
                             AND i.kind IN ('agent_message', 'agent_thought'))
           AND NOT EXISTS (SELECT 1 FROM search_entries e WHERE d.id < 0 AND e.id = d.id)",
    )?;
    // A title's entry names its session (with a title), a message's its message, and
    // a sealed segment's `<item id>/<part>` the segment, in the entry's session.
    let named = count(
        "SELECT count(*) FROM search_entries e
         WHERE CASE e.source
             WHEN 'title' THEN NOT EXISTS (SELECT 1 FROM sessions s
                                           WHERE s.id = e.entry_id AND s.title IS NOT NULL)
             WHEN 'message' THEN NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = e.entry_id)
             ELSE NOT EXISTS (SELECT 1 FROM item_parts p
                              WHERE p.session_id = e.session_id
                                AND p.item_id = substr(e.entry_id, 1, 36)
                                AND p.part = CAST(substr(e.entry_id, 38) AS INTEGER))
         END",
    )?;
    let unindexed = count(
        "SELECT count(*) FROM item_parts p JOIN items i ON i.id = p.item_id
         WHERE p.sealed = 1 AND i.kind IN ('agent_message', 'agent_thought')
           AND NOT EXISTS (SELECT 1 FROM search_entries e
                           WHERE e.entry_id = p.item_id || '/' || p.part)",
    )?;
    let found = [
        (
            items,
            "1 agent message or thought has no document in it (a search that matches it \
             may fail, or miss it)",
            "agent messages or thoughts have no document in it (a search that matches \
             them may fail, or miss them)",
        ),
        (
            entries,
            "1 title, message or sealed segment has no document in it (a search that \
             matches it may fail, or miss it)",
            "titles, messages or sealed segments have no document in it (a search that \
             matches them may fail, or miss them)",
        ),
        (
            documents,
            "1 document names no row (its words would match whatever row takes its id)",
            "documents name no row (their words would match whatever rows take their ids)",
        ),
        (
            named,
            "1 entry names a title, message or sealed segment that is gone",
            "entries name a title, message or sealed segment that is gone",
        ),
        (
            unindexed,
            "1 sealed segment is not indexed (no search finds it)",
            "sealed segments are not indexed (no search finds them)",
        ),
    ];
    Ok(found
        .into_iter()
        .filter(|(n, _, _)| *n > 0)
        .map(|(n, one, many)| {
            let what = if n == 1 {
                one.to_owned()
            } else {
                format!("{n} {many}")
            };
            Problem::new(ProblemKind::SearchIndex, format!("search index: {what}"))
        })
        .collect())
}

/// Sessions with streamed parts no item holds from its `streaming_from` on (V9).
/// `streaming_parts` has no foreign keys (each delete would scan it), so this finds
/// what an erasure left; it holds only what still streams, so reading it is cheap.
fn stray_streaming_parts(conn: &Tx<'_>) -> Result<Vec<Problem>> {
    let strays: Vec<(String, i64)> = conn
        .query_map(
            "SELECT p.session_id, count(*) FROM streaming_parts p
             WHERE NOT EXISTS (SELECT 1 FROM items i
                               WHERE i.id = p.item_id AND i.session_id = p.session_id
                                 AND i.streaming_from IS NOT NULL
                                 AND p.id >= i.streaming_from)
             GROUP BY p.session_id ORDER BY p.session_id",
            args![],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(sql("read streamed parts"))?;
    Ok(strays
        .into_iter()
        .map(|(session, parts)| {
            let problem = Problem::new(
                ProblemKind::StrayRows,
                format!(
                    "{parts} streamed parts of session {session} belong to no item still \
                     streaming"
                ),
            );
            match session.parse() {
                Ok(id) => problem.with_session(id),
                Err(_) => problem,
            }
        })
        .collect())
}

/// An error and its cause, which names the column or value that did not parse.
fn with_cause(e: &Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// Before a write, refuses a schema unlike its migrations': a dropped table would
/// fail only midway, after the open rewrote the header for WAL; a dropped trigger
/// would let the write skip a guarantee.
pub(crate) fn require_intact_schema(db: &SqliteFile) -> Result<()> {
    let problems = super::readonly::read(db, |tx| schema_problems(tx))?;
    if problems.is_empty() {
        return Ok(());
    }
    Err(Error::SchemaDamaged {
        path: db.path.clone(),
        problems,
    })
}

/// Names each difference from a fresh database at the same version: a dropped
/// trigger would let the append-only log be edited with no row out of place.
fn schema_problems(conn: &Connection) -> Result<Vec<Problem>> {
    let failed = |e| crate::db::error::sqlite("compare the schema", e);
    let version = schema::read_history(conn)
        .map_err(failed)?
        .map(|applied| schema::current(&applied))
        .unwrap_or(0);
    let want = super::reference::at(version)?;
    let have = super::reference::objects(conn).map_err(failed)?;
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

/// An export's first check, each row against the log as `verify` does: a copy would
/// carry damage where `verify` of the origin could no longer point at it.
pub(crate) fn check_session(conn: &Tx<'_>, session: &Session) -> Result<()> {
    let problems = match windowed(conn, session)? {
        Some((problems, _)) => problems,
        // Rows that do not read a page at a time: read whole, the read's own error
        // (a row that does not parse) refuses the copy.
        None => {
            let id = session.id;
            let messages = queries::messages(conn, &id, None)?;
            let items = queries_items::items(conn, &id)?;
            let events = queries::events(conn, &id)?;
            let proxied = proxied_rows(conn, &id)?;
            let (expected, mut problems) = crate::projection::replay(id, &events);
            if let Some(expected) = &expected {
                problems.extend(compare(session, &messages, expected));
                problems.extend(compare_items(session, &items, expected));
                problems.extend(compare_proxied(session, &proxied, expected));
            }
            problems
        }
    };
    match problems.is_empty() {
        true => Ok(()),
        false => Err(Error::LogMismatch {
            session: session.id,
            problems,
        }),
    }
}

/// How many seqs a page of `windowed`'s rows covers.
const ROW_PAGE: i64 = 256;

/// One session's rows against its log, a page at a time ([`Meet`]): the problems
/// (the log's, then the rows') and messages read. `None` when a row does not parse or
/// lies outside the pages (a seq edited out of range): the caller reads it whole.
fn windowed(conn: &Tx<'_>, session: &Session) -> Result<Option<(Vec<Problem>, usize)>> {
    let id = session.id;
    let last = entries::last_seq(conn, &id)?;
    let mut replayer = Replayer::windowed(id);
    let mut meet = Meet::new(id);
    let mut found = Vec::new();
    let (mut messages, mut items) = (0usize, 0usize);
    let mut log = entries::LogPages::new(conn, &id)?;
    let mut lo = 1;
    let mut made = super::items::Made::default();
    while lo <= last {
        let hi = lo.saturating_add(ROW_PAGE);
        let Ok(page) = entries::page_of(conn, &id, lo..hi, None, &mut made) else {
            return Ok(None);
        };
        while replayer.last_seq() < hi && !log.done() {
            let done = log.advance(conn, &mut replayer)?;
            found.extend(done.into_iter().filter_map(|entry| meet.logged(entry)));
        }
        for row in &page {
            match row {
                Entry::Message(_) => messages += 1,
                Entry::Item(_) => items += 1,
            }
            found.extend(meet.row(row));
        }
        lo = hi;
    }
    while !log.done() {
        let done = log.advance(conn, &mut replayer)?;
        found.extend(done.into_iter().filter_map(|entry| meet.logged(entry)));
    }
    let count = |table: &str| -> Result<usize> {
        let n: i64 = conn
            .query_row(
                &format!("SELECT count(*) FROM {table} WHERE session_id = ?1"),
                args![id.to_string()],
                |r| r.get(0),
            )
            .map_err(sql("count a session's rows"))?
            .unwrap_or(0);
        Ok(usize::try_from(n).unwrap_or(0))
    };
    if count("messages")? != messages || count("items")? != items {
        return Ok(None);
    }
    let Ok(proxied) = proxied_rows(conn, &id) else {
        return Ok(None);
    };
    let (expected, mut problems) = replayer.finish();
    // Rows are compared with what the log makes of them only where it makes a
    // session at all, as a whole read does.
    if let Some(expected) = &expected {
        problems.extend(session_problem(session, &expected.session));
        problems.append(&mut found);
        problems.extend(meet.finish());
        problems.extend(compare_proxied(session, &proxied, expected));
    }
    Ok(Some((problems, messages)))
}

type Proxied = (Vec<Turn>, Vec<Setting>, SessionFigures);

/// A session's turn, setting and usage rows.
fn proxied_rows(conn: &Tx<'_>, id: &SessionId) -> Result<Proxied> {
    let turns = super::proxied::turns(conn, id)?;
    let settings = super::proxied::settings(conn, id)?;
    Ok((turns, settings, super::usage::figures(conn, id)?))
}

fn compare_proxied(session: &Session, rows: &Proxied, expected: &Projection) -> Vec<Problem> {
    let (turns, settings, figures) = rows;
    let mut problems = compare_turns(session, turns, settings, expected);
    problems.extend(compare_figures(session, figures, expected));
    problems
}
