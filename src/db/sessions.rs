//! Sessions as a whole: the paged listing, deletion with its tombstone, and what gc
//! asks of the database (whether a folder's session is live or deleted, which stored
//! names a session refers to). It never touches attachment files; the one place
//! events are deleted is `erase`, after the tombstone that permits it.

use std::collections::HashSet;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::lifecycle::{SessionCursor, SessionSummary};

fn sql(action: &'static str) -> impl FnOnce(rusqlite::Error) -> Error {
    move |e| Error::sqlite(action, e)
}

/// Columns of a summary: the session, its message count, and the bytes of the
/// distinct attachments its messages refer to (by URI, each counted once).
const SUMMARY: &str = "
    SELECT s.id, s.title, s.tools_host, s.created_at, s.updated_at,
           (SELECT count(*) FROM messages m WHERE m.session_id = s.id),
           (SELECT coalesce(sum(size), 0) FROM
               (SELECT max(r.size) AS size FROM messages m
                  JOIN message_refs r ON r.message_id = m.id
                 WHERE m.session_id = s.id GROUP BY r.uri))
      FROM sessions s";

fn summary_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<SessionSummary> {
    let text = |idx: usize| -> rusqlite::Result<String> { row.get(idx) };
    let parse_err = |idx: usize, e: String| {
        rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Text, e.into())
    };
    let count = |idx: usize| -> rusqlite::Result<u64> {
        u64::try_from(row.get::<_, i64>(idx)?).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Integer, e.into())
        })
    };
    Ok(SessionSummary {
        id: text(0)?
            .parse()
            .map_err(|e: crate::IdError| parse_err(0, e.to_string()))?,
        title: row.get(1)?,
        tools_host: text(2)?
            .parse()
            .map_err(|e: Error| parse_err(2, e.to_string()))?,
        created_at: text(3)?,
        updated_at: text(4)?,
        messages: count(5)?,
        attachment_bytes: count(6)?,
    })
}

/// Up to `limit` sessions in the order `updated_at DESC, id DESC`, after `cursor`.
/// The row-value comparison walks the `sessions_by_updated (updated_at, id)` index
/// backwards from the cursor, so a page costs the same wherever it starts.
pub fn page(
    conn: &Connection,
    limit: usize,
    cursor: Option<&SessionCursor>,
) -> Result<Vec<SessionSummary>> {
    let limit = i64::try_from(limit).map_err(|_| Error::OutOfRange {
        what: "a page size",
    })?;
    let rows = match cursor {
        None => {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "{SUMMARY} ORDER BY s.updated_at DESC, s.id DESC LIMIT ?1"
                ))
                .map_err(sql("list sessions"))?;
            stmt.query_map([limit], summary_from_row)
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        }
        Some(c) => {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "{SUMMARY} WHERE (s.updated_at, s.id) < (?1, ?2)
                     ORDER BY s.updated_at DESC, s.id DESC LIMIT ?3"
                ))
                .map_err(sql("list sessions"))?;
            stmt.query_map(
                params![c.updated_at, c.id.to_string(), limit],
                summary_from_row,
            )
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
        }
    };
    rows.map_err(sql("list sessions"))
}

/// How much of a session there is (or was, for a tombstone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub messages: u64,
    pub items: u64,
    pub events: u64,
    /// Attachment references of its messages.
    pub refs: u64,
}

pub fn counts(conn: &Connection, id: &SessionId) -> Result<Counts> {
    conn.query_row(
        "SELECT (SELECT count(*) FROM messages WHERE session_id = ?1),
                (SELECT count(*) FROM items WHERE session_id = ?1),
                (SELECT count(*) FROM events WHERE session_id = ?1),
                (SELECT count(*) FROM message_refs r JOIN messages m ON m.id = r.message_id
                  WHERE m.session_id = ?1)",
        [id.to_string()],
        |r| {
            let n = |i| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
            Ok(Counts {
                messages: n(0)?,
                items: n(1)?,
                events: n(2)?,
                refs: n(3)?,
            })
        },
    )
    .map_err(sql("count a session's rows"))
}

/// What the database knows of a session id.
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

pub fn state(conn: &Connection, id: &SessionId) -> Result<State> {
    let live: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM sessions WHERE id = ?1",
            [id.to_string()],
            |r| r.get(0),
        )
        .optional()
        .map_err(sql("look a session up"))?;
    if live.is_some() {
        return Ok(State::Live);
    }
    let tomb = conn
        .query_row(
            "SELECT deleted_at, messages, items, events, refs FROM tombstones
             WHERE session_id = ?1",
            [id.to_string()],
            |r| {
                let n = |i| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
                Ok(State::Deleted {
                    at: r.get(0)?,
                    counts: Counts {
                        messages: n(1)?,
                        items: n(2)?,
                        events: n(3)?,
                        refs: n(4)?,
                    },
                })
            },
        )
        .optional()
        .map_err(sql("look a tombstone up"))?;
    Ok(tomb.unwrap_or(State::Unknown))
}

/// Whether `id` names a session or a deleted one: either way a new session cannot
/// take it.
pub fn id_taken(conn: &Connection, id: &SessionId) -> Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sessions WHERE id = ?1)
             OR EXISTS (SELECT 1 FROM tombstones WHERE session_id = ?1)",
        [id.to_string()],
        |r| r.get(0),
    )
    .map_err(|e| Error::sqlite("look for a session id", e))
}

/// Erases a live session: writes its tombstone first (the `events_no_delete` trigger
/// lets a session's events go only once it has one), then deletes its references,
/// messages, items, events and the session row, children before parents. Returns
/// what went. Run on a connection with `secure_delete` on, so the freed space is
/// zeroed rather than left holding the text.
pub fn erase(conn: &Connection, id: &SessionId, at: &str) -> Result<Counts> {
    let counts = counts(conn, id)?;
    let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    conn.execute(
        "INSERT INTO tombstones (session_id, deleted_at, messages, items, events, refs)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
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
            "delete a session's items",
            "DELETE FROM items WHERE session_id = ?1",
        ),
        (
            "delete a session's events",
            "DELETE FROM events WHERE session_id = ?1",
        ),
        ("delete a session", "DELETE FROM sessions WHERE id = ?1"),
    ] {
        conn.execute(statement, [&id]).map_err(sql(action))?;
    }
    Ok(counts)
}

/// The stored names a live session's messages refer to: what gc must keep in its
/// folder under the configured root.
pub fn referenced_names(conn: &Connection, id: &SessionId) -> Result<HashSet<String>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT DISTINCT r.stored_name FROM message_refs r
               JOIN messages m ON m.id = r.message_id WHERE m.session_id = ?1",
        )
        .map_err(sql("read a session's references"))?;
    let names = stmt
        .query_map([id.to_string()], |r| r.get(0))
        .and_then(|rows| rows.collect::<rusqlite::Result<HashSet<String>>>())
        .map_err(sql("read a session's references"))?;
    Ok(names)
}

/// Tombstones, and a problem for each deleted session that still has rows or events
/// (its erasure did not finish, or something wrote under its id since).
pub fn tombstone_problems(conn: &Connection) -> Result<(usize, Vec<String>)> {
    let mut stmt = conn
        .prepare(
            "SELECT t.session_id,
                    (SELECT count(*) FROM sessions WHERE id = t.session_id),
                    (SELECT count(*) FROM messages WHERE session_id = t.session_id),
                    (SELECT count(*) FROM items WHERE session_id = t.session_id),
                    (SELECT count(*) FROM events WHERE session_id = t.session_id)
               FROM tombstones t ORDER BY t.session_id",
        )
        .map_err(sql("read tombstones"))?;
    let rows: Vec<(String, [i64; 4])> = stmt
        .query_map([], |r| {
            Ok((r.get(0)?, [r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?]))
        })
        .and_then(|rows| rows.collect())
        .map_err(sql("read tombstones"))?;
    let mut problems = Vec::new();
    for (id, [session, messages, items, events]) in &rows {
        if session + messages + items + events > 0 {
            problems.push(format!(
                "session {id} was deleted but still has {session} session rows, \
                 {messages} messages, {items} items and {events} events"
            ));
        }
    }
    Ok((rows.len(), problems))
}
