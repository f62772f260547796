//! The event log's one way in and the history's numbering: the next place in a
//! session's history (which messages and items share), the append of an event with
//! its per-session sequence number, and the timestamps both carry. A leaf of `db`: it
//! reads no record and never updates or deletes an event.

use super::error::sql;
use super::sql::{Tx, args};
use crate::error::{Error, Result};
use crate::ids::{EventSeq, SessionId};
use crate::model::EventPayload;

/// RFC 3339 in UTC with all nine fraction digits, so timestamps sort as text.
const TIMESTAMP: &[time::format_description::BorrowedFormatItem<'static>] = time::macros::format_description!(
    "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:9]Z"
);

pub fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(TIMESTAMP)
        .expect("a UTC timestamp always formats with a fixed-width pattern")
}

/// Appends one event for `session`, giving it the next per-session sequence number.
pub fn append_event(
    conn: &Tx<'_>,
    session: &SessionId,
    payload: &EventPayload,
    at: &str,
) -> Result<EventSeq> {
    let body = serde_json::to_string(payload).expect("event payloads always serialize");
    append_event_json(conn, session, payload.kind(), &body, at, None)
}

/// [`append_event`] of a payload already written as JSON (`body`, of kind `kind`),
/// as `session_seq` when the caller knows the session's next one (the writer's memo,
/// `turns::Tails`), else the next after the session's last.
pub(crate) fn append_event_json(
    conn: &Tx<'_>,
    session: &SessionId,
    kind: &str,
    body: &str,
    at: &str,
    session_seq: Option<i64>,
) -> Result<EventSeq> {
    let session = session.to_string();
    const NEXT: &str = "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
         VALUES (?1,
                 (SELECT coalesce(max(session_seq), 0) + 1 FROM events WHERE session_id = ?1),
                 ?2, ?3, ?4)";
    const AT: &str = "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
         VALUES (?1, ?5, ?2, ?3, ?4)";
    let appended = match session_seq {
        Some(n) => conn.insert_id(AT, "seq", args![session, kind, body, at, n]),
        None => conn.insert_id(NEXT, "seq", args![session, kind, body, at]),
    };
    let seq = appended
        .map_err(sql("append an event"))?
        .ok_or(Error::OutOfRange {
            what: "an appended event's sequence number",
        })?;
    conn.execute(
        "UPDATE sessions SET updated_at = ?2 WHERE id = ?1",
        args![session, at],
    )
    .map_err(sql("touch the session"))?;
    Ok(EventSeq(seq))
}

/// The `session_seq` of a session's last event (0 for none).
pub(crate) fn last_session_seq(conn: &Tx<'_>, session: &SessionId) -> Result<i64> {
    conn.query_row(
        "SELECT coalesce(max(session_seq), 0) FROM events WHERE session_id = ?1",
        args![session.to_string()],
        |r| r.get(0),
    )
    .map_err(sql("read a session's last event"))?
    .ok_or(Error::OutOfRange {
        what: "an event's sequence number",
    })
}

/// The next place in a session's history, which messages and items share.
pub fn next_seq(conn: &Tx<'_>, session: &SessionId) -> Result<i64> {
    conn.query_row(
        "SELECT coalesce(max(seq), 0) + 1 FROM (
             SELECT max(seq) AS seq FROM messages WHERE session_id = ?1
             UNION ALL
             SELECT max(seq) FROM items WHERE session_id = ?1) AS history",
        args![session.to_string()],
        |r| r.get(0),
    )
    .map_err(sql("number a history entry"))?
    .ok_or(Error::OutOfRange {
        what: "a history entry's sequence number",
    })
}
