//! A session's history a page at a time: at most `limit` messages, items, events or
//! turns after a key, each page one or two bounded statements.

use super::error::sql;
use super::items::{Made, items_in};
use super::proxied::{TURN_COLUMNS, turn_from_row};
use super::queries::{self, EVENT_COLUMNS, event_from_row, json_value};
use super::sql::{Tx, Value, args};

use crate::attachments::AttachmentUri;
use crate::error::Result;
use crate::ids::{MessageId, SessionId, TurnId};
use crate::model::{Delivery, Event, Item, Message, Turn};

/// The last seq `statement` gives: where a page read by a seq range ends.
fn last_seq(
    conn: &Tx<'_>,
    what: &'static str,
    statement: &str,
    args: &[Value<'_>],
) -> Result<Option<i64>> {
    let seqs: Vec<i64> = conn
        .query_map(statement, args, |r| r.get(0))
        .map_err(sql(what))?;
    Ok(seqs.last().copied())
}

/// At most `limit` messages of `session` after seq `after`, in one delivery state when
/// `state` says, with their references.
pub fn messages(
    conn: &Tx<'_>,
    session: &SessionId,
    state: Option<Delivery>,
    after: i64,
    limit: usize,
) -> Result<Vec<Message>> {
    let last = last_seq(
        conn,
        "read messages",
        "SELECT seq FROM messages
         WHERE session_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR state = ?2) AND seq > ?3
         ORDER BY seq LIMIT ?4",
        args![
            session.to_string(),
            state.map(Delivery::as_str),
            after,
            limit as i64
        ],
    )?;
    match last {
        Some(last) => queries::messages_in(conn, session, state, after + 1..last + 1),
        None => Ok(vec![]),
    }
}

/// At most `limit` recorded items of `session` after seq `after`, each with its parts
/// folded in.
pub fn items(conn: &Tx<'_>, session: &SessionId, after: i64, limit: usize) -> Result<Vec<Item>> {
    let last = last_seq(
        conn,
        "read items",
        "SELECT seq FROM items WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
        args![session.to_string(), after, limit as i64],
    )?;
    match last {
        Some(last) => items_in(conn, session, after + 1..last + 1, &mut Made::default()),
        None => Ok(vec![]),
    }
}

/// At most `limit` events of `session`'s log after `session_seq` `after`, in log order.
pub fn events(conn: &Tx<'_>, session: &SessionId, after: i64, limit: usize) -> Result<Vec<Event>> {
    conn.query_map(
        &format!(
            "SELECT {EVENT_COLUMNS} FROM session_events WHERE session_id = ?1 AND session_seq > ?2
             ORDER BY session_seq LIMIT ?3"
        ),
        args![session.to_string(), after, limit as i64],
        |row| event_from_row(row, json_value),
    )
    .map_err(sql("read events"))
}

/// Where a page of turns starts: after this key in the order `seq, started_at, id`
/// (two turns may begin from one message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnKey {
    pub seq: i64,
    pub started_at: String,
    pub id: TurnId,
}

/// At most `limit` turns of `session` after `after` (from the start when `None`).
pub fn turns(
    conn: &Tx<'_>,
    session: &SessionId,
    after: Option<&TurnKey>,
    limit: usize,
) -> Result<Vec<Turn>> {
    let (seq, started_at, id) = match after {
        Some(k) => (k.seq, k.started_at.as_str(), k.id.to_string()),
        None => (0, "", String::new()),
    };
    conn.query_map(
        &format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ?1
               AND (seq > ?2 OR (seq = ?2 AND (started_at > ?3 OR (started_at = ?3 AND id > ?4))))
             ORDER BY seq, started_at, id LIMIT ?5"
        ),
        args![session.to_string(), seq, started_at, id, limit as i64],
        turn_from_row,
    )
    .map_err(sql("read turns"))
}

/// The references of `session`'s messages to the first `limit` stored names after
/// `after` (byte order, as both engines compare these columns): each as its stored
/// name, URI and message, by name, then in history order.
pub fn references(
    conn: &Tx<'_>,
    session: &SessionId,
    after: &str,
    limit: usize,
) -> Result<Vec<(String, AttachmentUri, MessageId)>> {
    let names: Vec<String> = conn
        .query_map(
            "SELECT DISTINCT r.stored_name FROM message_refs r
               JOIN messages m ON m.id = r.message_id
             WHERE m.session_id = ?1 AND r.stored_name > ?2 ORDER BY r.stored_name LIMIT ?3",
            args![session.to_string(), after, limit as i64],
            |r| r.get(0),
        )
        .map_err(sql("read references"))?;
    let Some(last) = names.last() else {
        return Ok(vec![]);
    };
    conn.query_map(
        "SELECT r.stored_name, r.uri, r.message_id FROM message_refs r
           JOIN messages m ON m.id = r.message_id
         WHERE m.session_id = ?1 AND r.stored_name > ?2 AND r.stored_name <= ?3
         ORDER BY r.stored_name, m.seq, r.ordinal",
        args![session.to_string(), after, last.as_str()],
        |row| Ok((row.get(0)?, row.parsed(1)?, row.parsed(2)?)),
    )
    .map_err(sql("read references"))
}
