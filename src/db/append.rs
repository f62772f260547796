//! The event log's one way in: appends with per-session sequence numbers, the history's
//! numbering, and SQLite's index by session (`event_keys`, V13, written in batches). A
//! leaf of `db`: it reads no record and never updates or deletes an event.

use super::error::sql;
use super::sql::{DbError, Engine, Tx, args};
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

pub fn append_event(
    conn: &Tx<'_>,
    session: &SessionId,
    payload: &EventPayload,
    at: &str,
) -> Result<EventSeq> {
    let body = serde_json::to_string(payload).expect("event payloads always serialize");
    append_event_json(conn, session, payload.kind(), &body, at, None)
}

/// [`append_event`] of JSON already written, at `session_seq` when the caller knows
/// it (`items::Tails`), else after the session's last.
pub(crate) fn append_event_json(
    conn: &Tx<'_>,
    session: &SessionId,
    kind: &str,
    body: &str,
    at: &str,
    session_seq: Option<i64>,
) -> Result<EventSeq> {
    let session_seq = match session_seq {
        Some(n) => n,
        None => last_session_seq(conn, session)? + 1,
    };
    let session = session.to_string();
    let seq = conn
        .insert_id(
            "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            "seq",
            args![session, session_seq, kind, body, at],
        )
        .map_err(sql("append an event"))?
        .ok_or(Error::OutOfRange {
            what: "an appended event's sequence number",
        })?;
    conn.execute(
        "UPDATE sessions SET updated_at = ?2 WHERE id = ?1",
        args![session, at],
    )
    .map_err(sql("touch the session"))?;
    if conn.engine() == Engine::Sqlite {
        key_events_when_due(conn, seq, body.len())?;
    }
    Ok(EventSeq(seq))
}

/// How far `event_keys` may lag the log: bounds the scan of the unkeyed end, while
/// keys written together share their pages among the writing sessions.
pub(crate) const UNKEYED_AT_MOST: i64 = 1024;

/// An event this large is keyed at once, with all before it: reads sort the unkeyed
/// end's rows, payloads and all, so large ones would slow every read (see BENCHMARKS,
/// `longhist`); only many small commits cannot afford the extra leaf or two.
pub(crate) const KEYED_AT_ONCE_BYTES: usize = 8 * 1024;

/// Keys every unkeyed event once `seq` is [`UNKEYED_AT_MOST`] past the keyed ones or
/// [`KEYED_AT_ONCE_BYTES`] long (SQLite only: PostgreSQL's `events` is its own index).
fn key_events_when_due(conn: &Tx<'_>, seq: i64, bytes: usize) -> Result<()> {
    if bytes >= KEYED_AT_ONCE_BYTES {
        return key_events(conn);
    }
    let read = sql("read where the log's keys end (`event_keys_upto`)");
    let upto: i64 = match conn.query_row("SELECT upto FROM event_keys_upto", args![], |r| r.get(0))
    {
        Ok(Some(upto)) => upto,
        Ok(None) => return Err(read(DbError::column(0, "the table has no row"))),
        Err(e) => return Err(read(e)),
    };
    if seq - upto >= UNKEYED_AT_MOST {
        key_events(conn)?;
    }
    Ok(())
}

/// Keys every event past `event_keys_upto`, each session's together. A second event
/// at a session's `session_seq` is refused here, as the old unique index refused it.
pub(crate) fn key_events(conn: &Tx<'_>) -> Result<()> {
    conn.execute(
        "INSERT INTO event_keys (session_id, session_seq, seq)
         SELECT session_id, session_seq, seq FROM events
         WHERE seq > (SELECT upto FROM event_keys_upto)
         ORDER BY session_id, session_seq",
        args![],
    )
    .map_err(sql("key the log's newest events"))?;
    conn.execute(
        "UPDATE event_keys_upto SET upto = (SELECT coalesce(max(seq), 0) FROM events)",
        args![],
    )
    .map_err(sql("move where the log's keys end"))?;
    Ok(())
}

/// The `session_seq` of a session's last event (0 for none).
pub(crate) fn last_session_seq(conn: &Tx<'_>, session: &SessionId) -> Result<i64> {
    let statement = match conn.engine() {
        // Its newest unkeyed event (walking back from the end, where a writing session
        // has one), else its highest key: places follow the events' `seq`.
        Engine::Sqlite => {
            "SELECT coalesce(
                 (SELECT session_seq FROM events
                  WHERE seq > (SELECT upto FROM event_keys_upto) AND session_id = ?1
                  ORDER BY seq DESC LIMIT 1),
                 (SELECT max(session_seq) FROM event_keys WHERE session_id = ?1),
                 0)"
        }
        Engine::Postgres => {
            "SELECT coalesce(max(session_seq), 0) FROM events WHERE session_id = ?1"
        }
    };
    Ok(conn
        .query_row(statement, args![session.to_string()], |r| r.get(0))
        .map_err(sql("read a session's last event"))?
        .unwrap_or(0))
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
