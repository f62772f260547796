//! Reads and writes of sessions, messages, references and events. Each state change
//! here writes its rows and appends its event through the same transaction; the event
//! log has an append function and nothing that updates or deletes it.

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::attachments::AttachmentUri;
use crate::error::{Error, Result};
use crate::ids::{EventSeq, MessageId, SessionId};
use crate::model::{
    AppendedMessage, Delivery, Event, EventPayload, Message, Reference, Session, ToolsHost,
};

fn sql(action: &'static str) -> impl FnOnce(rusqlite::Error) -> Error {
    move |e| Error::sqlite(action, e)
}

/// Parses a text column into one of the store's typed values; a value that does not
/// parse means the row was written by something other than this store.
fn parsed<T: std::str::FromStr>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T>
where
    T::Err: std::fmt::Display,
{
    let text: String = row.get(idx)?;
    text.parse().map_err(|e: T::Err| {
        rusqlite::Error::FromSqlConversionFailure(
            idx,
            rusqlite::types::Type::Text,
            e.to_string().into(),
        )
    })
}

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
    conn: &Connection,
    session: &SessionId,
    payload: &EventPayload,
    at: &str,
) -> Result<EventSeq> {
    let body = serde_json::to_string(payload).expect("event payloads always serialize");
    conn.execute(
        "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
         VALUES (?1,
                 (SELECT coalesce(max(session_seq), 0) + 1 FROM events WHERE session_id = ?1),
                 ?2, ?3, ?4)",
        params![session.to_string(), payload.kind(), body, at],
    )
    .map_err(sql("append an event"))?;
    conn.execute(
        "UPDATE sessions SET updated_at = ?2 WHERE id = ?1",
        params![session.to_string(), at],
    )
    .map_err(sql("touch the session"))?;
    Ok(EventSeq(conn.last_insert_rowid()))
}

fn session_from_row(row: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        id: parsed(row, 0)?,
        title: row.get(1)?,
        tools_host: parsed(row, 2)?,
        created_at: row.get(3)?,
        updated_at: row.get(4)?,
    })
}

const SESSION_COLUMNS: &str = "id, title, tools_host, created_at, updated_at";

pub fn insert_session(
    conn: &Connection,
    title: Option<&str>,
    tools_host: ToolsHost,
) -> Result<Session> {
    let id = SessionId::new();
    let at = now();
    conn.execute(
        "INSERT INTO sessions (id, title, tools_host, created_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?4)",
        params![id.to_string(), title, tools_host.as_str(), at],
    )
    .map_err(sql("insert a session"))?;
    let payload = EventPayload::SessionCreated {
        title: title.map(str::to_owned),
        tools_host,
    };
    append_event(conn, &id, &payload, &at)?;
    get_session(conn, &id)
}

pub fn rename_session(conn: &Connection, id: &SessionId, title: &str) -> Result<()> {
    let changed = conn
        .execute(
            "UPDATE sessions SET title = ?2 WHERE id = ?1",
            params![id.to_string(), title],
        )
        .map_err(sql("rename a session"))?;
    if changed == 0 {
        return Err(Error::SessionNotFound(*id));
    }
    let payload = EventPayload::SessionRenamed {
        title: title.to_owned(),
    };
    append_event(conn, id, &payload, &now())?;
    Ok(())
}

pub fn get_session(conn: &Connection, id: &SessionId) -> Result<Session> {
    conn.query_row(
        &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"),
        [id.to_string()],
        session_from_row,
    )
    .optional()
    .map_err(sql("read a session"))?
    .ok_or(Error::SessionNotFound(*id))
}

pub fn list_sessions(conn: &Connection) -> Result<Vec<Session>> {
    let mut stmt = conn
        .prepare(&format!(
            // UUID v7 ids sort by creation time; timestamps written before they had a
            // fixed width do not sort as text.
            "SELECT {SESSION_COLUMNS} FROM sessions ORDER BY id"
        ))
        .map_err(sql("list sessions"))?;
    let rows = stmt
        .query_map([], session_from_row)
        .map_err(sql("list sessions"))?;
    rows.collect::<rusqlite::Result<_>>()
        .map_err(sql("list sessions"))
}

/// Inserts a message and its references, then its event; a custom-titled session is
/// left alone, an untitled one takes its title from the first user message.
pub fn insert_message(
    conn: &Connection,
    session: &SessionId,
    message: &crate::model::NewMessage,
    state: Delivery,
) -> Result<Message> {
    let current = get_session(conn, session)?;
    let id = MessageId::new();
    let at = now();
    // Messages and recorded items share one sequence: the session's history order.
    let seq = super::turns::next_seq(conn, session)?;
    conn.execute(
        "INSERT INTO messages
           (id, session_id, seq, role, display_text, model_text, transcript, state, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            id.to_string(),
            session.to_string(),
            seq,
            message.role.as_str(),
            message.display_text,
            message.model_text,
            message.transcript,
            state.as_str(),
            at
        ],
    )
    .map_err(sql("insert a message"))?;
    let mut refs = Vec::with_capacity(message.refs.len());
    for (ordinal, r) in message.refs.iter().enumerate() {
        let reference = Reference {
            ordinal: u32::try_from(ordinal).map_err(|_| Error::OutOfRange {
                what: "a reference's ordinal",
            })?,
            uri: r.uri.clone(),
            stored_name: r.stored_name.clone(),
            mime_type: r.mime_type.clone(),
            size: r.size,
        };
        conn.execute(
            "INSERT INTO message_refs (message_id, ordinal, uri, stored_name, mime_type, size)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                id.to_string(),
                reference.ordinal,
                reference.uri.to_string(),
                reference.stored_name,
                reference.mime_type,
                i64::try_from(reference.size).map_err(|_| Error::OutOfRange {
                    what: "an attachment's size"
                })?
            ],
        )
        .map_err(sql("insert a reference"))?;
        refs.push(reference);
    }
    let payload = EventPayload::MessageAppended {
        message: AppendedMessage {
            id,
            seq,
            role: message.role,
            display_text: message.display_text.clone(),
            model_text: message.model_text.clone(),
            transcript: message.transcript.clone(),
            state,
            refs,
        },
    };
    append_event(conn, session, &payload, &at)?;
    if current.title.is_none()
        && message.role == crate::model::Role::User
        && let Some(title) = title_from(&message.display_text)
    {
        rename_session(conn, session, &title)?;
    }
    get_message(conn, &id)
}

/// A title from what the user typed: its first non-empty line, at most 80 characters.
pub fn title_from(display_text: &str) -> Option<String> {
    let line = display_text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())?;
    let mut title: String = line.chars().take(80).collect();
    if line.chars().count() > 80 {
        title.push('…');
    }
    Some(title)
}

/// Marks queued messages delivered, in the order given, each with its event.
pub fn mark_delivered(conn: &Connection, session: &SessionId, ids: &[MessageId]) -> Result<()> {
    for id in ids {
        let changed = conn
            .execute(
                "UPDATE messages SET state = 'delivered'
                 WHERE id = ?1 AND session_id = ?2 AND state = 'queued'",
                params![id.to_string(), session.to_string()],
            )
            .map_err(sql("mark a message delivered"))?;
        if changed == 0 {
            return Err(Error::NoLongerQueued {
                message: *id,
                session: *session,
            });
        }
        append_event(
            conn,
            session,
            &EventPayload::MessageDelivered { id: *id },
            &now(),
        )?;
    }
    Ok(())
}

const MESSAGE_COLUMNS: &str =
    "id, session_id, seq, role, display_text, model_text, transcript, state, created_at";

fn message_from_row(row: &Row<'_>) -> rusqlite::Result<Message> {
    Ok(Message {
        id: parsed(row, 0)?,
        session_id: parsed(row, 1)?,
        seq: row.get(2)?,
        role: parsed(row, 3)?,
        display_text: row.get(4)?,
        model_text: row.get(5)?,
        transcript: row.get(6)?,
        state: parsed(row, 7)?,
        created_at: row.get(8)?,
        refs: vec![],
    })
}

fn load_refs(conn: &Connection, message: &mut Message) -> Result<()> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT ordinal, uri, stored_name, mime_type, size FROM message_refs
             WHERE message_id = ?1 ORDER BY ordinal",
        )
        .map_err(sql("read references"))?;
    let rows = stmt
        .query_map([message.id.to_string()], |row| {
            Ok(Reference {
                ordinal: row.get(0)?,
                uri: parsed(row, 1)?,
                stored_name: row.get(2)?,
                mime_type: row.get(3)?,
                // A negative size was not written by this store: refused like any
                // other row that does not parse, rather than read as 0.
                size: u64::try_from(row.get::<_, i64>(4)?).map_err(|e| {
                    rusqlite::Error::FromSqlConversionFailure(
                        4,
                        rusqlite::types::Type::Integer,
                        e.into(),
                    )
                })?,
            })
        })
        .map_err(sql("read references"))?;
    message.refs = rows
        .collect::<rusqlite::Result<_>>()
        .map_err(sql("read references"))?;
    Ok(())
}

pub fn get_message(conn: &Connection, id: &MessageId) -> Result<Message> {
    let mut message = conn
        .query_row(
            &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1"),
            [id.to_string()],
            message_from_row,
        )
        .optional()
        .map_err(sql("read a message"))?
        .ok_or(Error::MessageNotFound(*id))?;
    load_refs(conn, &mut message)?;
    Ok(message)
}

/// A session's messages in order, optionally only those in one delivery state.
pub fn messages(
    conn: &Connection,
    session: &SessionId,
    state: Option<Delivery>,
) -> Result<Vec<Message>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages
             WHERE session_id = ?1 AND (?2 IS NULL OR state = ?2) ORDER BY seq"
        ))
        .map_err(sql("read messages"))?;
    let rows = stmt
        .query_map(
            params![session.to_string(), state.map(Delivery::as_str)],
            message_from_row,
        )
        .map_err(sql("read messages"))?;
    let mut out: Vec<Message> = rows
        .collect::<rusqlite::Result<_>>()
        .map_err(sql("read messages"))?;
    for m in &mut out {
        load_refs(conn, m)?;
    }
    Ok(out)
}

/// Every reference a session's messages make, as (URI, message id) in message and
/// reference order: which messages refer to which file.
pub fn session_references(
    conn: &Connection,
    session: &SessionId,
) -> Result<Vec<(AttachmentUri, MessageId)>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT r.uri, r.message_id FROM message_refs r
             JOIN messages m ON m.id = r.message_id
             WHERE m.session_id = ?1 ORDER BY m.seq, r.ordinal",
        )
        .map_err(sql("read references"))?;
    let rows = stmt
        .query_map([session.to_string()], |row| {
            Ok((parsed(row, 0)?, parsed(row, 1)?))
        })
        .map_err(sql("read references"))?;
    rows.collect::<rusqlite::Result<_>>()
        .map_err(sql("read references"))
}

/// The latest delivered user message of a session, if any: what `dispatch` takes by
/// default, found without loading the rest of the history.
pub fn latest_delivered_user_message(
    conn: &Connection,
    session: &SessionId,
) -> Result<Option<Message>> {
    let found = conn
        .query_row(
            &format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages
                 WHERE session_id = ?1 AND role = 'user' AND state = 'delivered'
                 ORDER BY seq DESC LIMIT 1"
            ),
            [session.to_string()],
            message_from_row,
        )
        .optional()
        .map_err(sql("read the latest message"))?;
    match found {
        Some(mut message) => {
            load_refs(conn, &mut message)?;
            Ok(Some(message))
        }
        None => Ok(None),
    }
}

fn event_from_row(row: &Row<'_>) -> rusqlite::Result<Event> {
    let payload: String = row.get(4)?;
    Ok(Event {
        seq: EventSeq(row.get(0)?),
        session_id: parsed(row, 1)?,
        session_seq: row.get(2)?,
        kind: row.get(3)?,
        payload: serde_json::from_str(&payload).map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(4, rusqlite::types::Type::Text, e.into())
        })?,
        created_at: row.get(5)?,
    })
}

const EVENT_COLUMNS: &str = "seq, session_id, session_seq, kind, payload, created_at";

pub fn events(conn: &Connection, session: &SessionId) -> Result<Vec<Event>> {
    let mut stmt = conn
        .prepare(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ?1 ORDER BY session_seq"
        ))
        .map_err(sql("read events"))?;
    let rows = stmt
        .query_map([session.to_string()], event_from_row)
        .map_err(sql("read events"))?;
    rows.collect::<rusqlite::Result<_>>()
        .map_err(sql("read events"))
}

/// Every event, in log order; `verify` groups them by session itself so that events
/// naming a session that no longer exists are still seen.
pub fn all_events(conn: &Connection) -> Result<Vec<Event>> {
    let mut stmt = conn
        .prepare(&format!("SELECT {EVENT_COLUMNS} FROM events ORDER BY seq"))
        .map_err(sql("read events"))?;
    let rows = stmt
        .query_map([], event_from_row)
        .map_err(sql("read events"))?;
    rows.collect::<rusqlite::Result<_>>()
        .map_err(sql("read events"))
}
