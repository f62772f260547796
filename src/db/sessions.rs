//! Sessions as a whole: paged listing, deletion with its tombstone, and gc's questions.
//! It never touches attachment files; events are deleted only by `erase`, after the
//! tombstone that permits it.

use std::collections::HashSet;

use super::error::sql;
use super::sql::{DbError, Engine, Row, Tx, args};
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::{ArchiveFilter, Problem, ProblemKind, SessionSummary};

/// A summary's columns; attachment bytes count each distinct URI once.
const SUMMARY: &str = "
    SELECT s.id, s.title, s.tools_host, s.created_at, s.updated_at,
           (SELECT count(*) FROM messages m WHERE m.session_id = s.id),
           (SELECT CAST(coalesce(sum(size), 0) AS BIGINT) FROM
               (SELECT max(r.size) AS size FROM messages m
                  JOIN message_refs r ON r.message_id = m.id
                 WHERE m.session_id = s.id GROUP BY r.uri) AS distinct_files),
           s.cwd, s.archived
      FROM sessions s";

fn summary_from_row(row: &Row<'_>) -> Result<SessionSummary, DbError> {
    Ok(SessionSummary {
        id: row.parsed(0)?,
        title: row.get(1)?,
        tools_host: row.parsed(2)?,
        created_at: row.get(3)?,
        updated_at: row.get(4)?,
        messages: row.get(5)?,
        attachment_bytes: row.get(6)?,
        cwd: row.get(7)?,
        archived: row.get(8)?,
    })
}

/// Sessions with `cwd`, and with `unset_too` those without one (the lister's own).
#[derive(Debug, Clone, Copy)]
pub struct CwdFilter<'a> {
    pub cwd: &'a str,
    pub unset_too: bool,
}

/// A page in `updated_at DESC, id DESC` order after the cursor `after`. The row-value
/// comparison walks `sessions_by_updated` (or `sessions_by_archived`, which a literal
/// archive state lets the planner pick) back from the cursor: every page costs the same.
pub fn page(
    conn: &Tx<'_>,
    limit: usize,
    after: Option<(&str, &SessionId)>,
    cwd: Option<CwdFilter<'_>>,
    archived: ArchiveFilter,
) -> Result<Vec<SessionSummary>> {
    let state = match archived {
        ArchiveFilter::Exclude => "s.archived = 0 AND",
        ArchiveFilter::Only => "s.archived = 1 AND",
        ArchiveFilter::Include => "",
    };
    let limit = i64::try_from(limit).map_err(|_| Error::OutOfRange {
        what: "a page size",
    })?;
    // No directory means every session.
    let (dir, unset_too) = match cwd {
        Some(f) => (Some(f.cwd), i64::from(f.unset_too)),
        None => (None, 1),
    };
    let in_dir = |d: u8, u: u8| {
        format!("(CAST(?{d} AS TEXT) IS NULL OR s.cwd = ?{d} OR (?{u} = 1 AND s.cwd IS NULL))")
    };
    let rows = match after {
        None => conn.query_map(
            &format!(
                "{SUMMARY} WHERE {state} {}
                 ORDER BY s.updated_at DESC, s.id DESC LIMIT ?1",
                in_dir(2, 3)
            ),
            args![limit, dir, unset_too],
            summary_from_row,
        ),
        Some((updated_at, id)) => conn.query_map(
            &format!(
                "{SUMMARY} WHERE {state} (s.updated_at, s.id) < (?2, ?3) AND {}
                 ORDER BY s.updated_at DESC, s.id DESC LIMIT ?1",
                in_dir(4, 5)
            ),
            args![limit, updated_at, id.to_string(), dir, unset_too],
            summary_from_row,
        ),
    };
    rows.map_err(sql("list sessions"))
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub messages: u64,
    pub items: u64,
    pub events: u64,
    /// Attachment references of its messages.
    pub refs: u64,
}

pub fn counts(conn: &Tx<'_>, id: &SessionId) -> Result<Counts> {
    conn.query_row(
        "SELECT (SELECT count(*) FROM messages WHERE session_id = ?1),
                (SELECT count(*) FROM items WHERE session_id = ?1),
                (SELECT count(*) FROM session_events WHERE session_id = ?1),
                (SELECT count(*) FROM message_refs r JOIN messages m ON m.id = r.message_id
                  WHERE m.session_id = ?1)",
        args![id.to_string()],
        |r| {
            Ok(Counts {
                messages: r.get(0)?,
                items: r.get(1)?,
                events: r.get(2)?,
                refs: r.get(3)?,
            })
        },
    )
    .map_err(sql("count a session's rows"))?
    .ok_or(Error::SessionNotFound(*id))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Live,
    /// Deleted at this time, leaving a tombstone with these counts.
    Deleted {
        at: String,
        counts: Counts,
    },
    Unknown,
}

pub fn state(conn: &Tx<'_>, id: &SessionId) -> Result<State> {
    let live: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM sessions WHERE id = ?1",
            args![id.to_string()],
            |r| r.get(0),
        )
        .map_err(sql("look a session up"))?;
    if live.is_some() {
        return Ok(State::Live);
    }
    let tomb = conn
        .query_row(
            "SELECT deleted_at, messages, items, events, refs FROM tombstones
             WHERE session_id = ?1",
            args![id.to_string()],
            |r| {
                Ok(State::Deleted {
                    at: r.get(0)?,
                    counts: Counts {
                        messages: r.get(1)?,
                        items: r.get(2)?,
                        events: r.get(3)?,
                        refs: r.get(4)?,
                    },
                })
            },
        )
        .map_err(sql("look a tombstone up"))?;
    Ok(tomb.unwrap_or(State::Unknown))
}

/// Live or deleted: either way a new session cannot take `id`.
pub fn id_taken(conn: &Tx<'_>, id: &SessionId) -> Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)
             OR EXISTS (SELECT 1 FROM tombstones WHERE session_id = ?1)",
        args![id.to_string()],
        |r| r.get(0),
    )
    .map_err(sql("look for a session id"))
    .map(|taken| taken.unwrap_or(false))
}

/// Writes the tombstone first (`events_no_delete` lets events go only then), then
/// deletes children before parents. Run with `secure_delete` on: freed pages are zeroed.
pub fn erase(conn: &Tx<'_>, id: &SessionId, at: &str) -> Result<Counts> {
    let counts = counts(conn, id)?;
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    conn.execute(
        "INSERT INTO tombstones (session_id, deleted_at, messages, items, events, refs)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        args![
            id.to_string(),
            at,
            as_i64(counts.messages),
            as_i64(counts.items),
            as_i64(counts.events),
            as_i64(counts.refs)
        ],
    )
    .map_err(sql("write a tombstone"))?;
    let id = id.to_string();
    for (action, statement) in [
        (
            "delete a session's references",
            "DELETE FROM message_refs WHERE message_id IN
                 (SELECT id FROM messages WHERE session_id = ?1)",
        ),
        (
            "delete a session's messages",
            "DELETE FROM messages WHERE session_id = ?1",
        ),
        (
            "delete a session's item parts",
            "DELETE FROM item_parts WHERE session_id = ?1",
        ),
        (
            // No index but the row id (V9): from the first its items name on.
            "delete a session's streaming parts",
            "DELETE FROM streaming_parts WHERE session_id = ?1 AND id >=
                 (SELECT min(streaming_from) FROM items WHERE session_id = ?1)",
        ),
        (
            "delete a session's items",
            "DELETE FROM items WHERE session_id = ?1",
        ),
        (
            "delete a session's turns",
            "DELETE FROM turns WHERE session_id = ?1",
        ),
        (
            "delete a session's settings",
            "DELETE FROM settings WHERE session_id = ?1",
        ),
        (
            // Found through the log's keys and its unkeyed end (V13), not by a scan.
            "delete a session's events",
            "DELETE FROM events WHERE seq IN
                 (SELECT seq FROM session_events WHERE session_id = ?1)",
        ),
        ("delete a session", "DELETE FROM sessions WHERE id = ?1"),
    ] {
        conn.execute(statement, args![id]).map_err(sql(action))?;
    }
    // PostgreSQL's `events` is its own index.
    if conn.engine() == Engine::Sqlite {
        conn.execute("DELETE FROM event_keys WHERE session_id = ?1", args![id])
            .map_err(sql("delete a session's keys in the log"))?;
    }
    Ok(counts)
}

/// What gc must keep in a live session's folder.
pub fn referenced_names(conn: &Tx<'_>, id: &SessionId) -> Result<HashSet<String>> {
    let names = conn
        .query_map(
            "SELECT DISTINCT r.stored_name FROM message_refs r
               JOIN messages m ON m.id = r.message_id WHERE m.session_id = ?1",
            args![id.to_string()],
            |r| r.get::<String>(0),
        )
        .map_err(sql("read a session's references"))?;
    Ok(names.into_iter().collect())
}

/// Tombstones, and a problem for each deleted session that still has rows or events
/// (its erasure did not finish, or something wrote under its id since).
pub fn tombstone_problems(conn: &Tx<'_>) -> Result<(usize, Vec<Problem>)> {
    let rows: Vec<(String, [i64; 4])> = conn
        .query_map(
            "SELECT t.session_id,
                    (SELECT count(*) FROM sessions WHERE id = t.session_id),
                    (SELECT count(*) FROM messages WHERE session_id = t.session_id),
                    (SELECT count(*) FROM items WHERE session_id = t.session_id),
                    (SELECT count(*) FROM session_events WHERE session_id = t.session_id)
               FROM tombstones t ORDER BY t.session_id",
            args![],
            |r| Ok((r.get(0)?, [r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?])),
        )
        .map_err(sql("read tombstones"))?;
    let mut problems = Vec::new();
    for (id, [session, messages, items, events]) in &rows {
        if session + messages + items + events > 0 {
            let problem = Problem::new(
                ProblemKind::DeletedButPresent,
                format!(
                    "session {id} was deleted but still has {session} session rows, \
                     {messages} messages, {items} items and {events} events"
                ),
            );
            // The id is the tombstone's, which this store wrote; one that does not
            // parse is still reported, by its text.
            problems.push(match id.parse() {
                Ok(id) => problem.with_session(id),
                Err(_) => problem,
            });
        }
    }
    Ok((rows.len(), problems))
}
