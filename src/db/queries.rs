//! Reads and writes of sessions, messages, references and events. Each state change
//! writes its rows and appends its event (through `append`) in one transaction; nothing
//! here updates or deletes the log.

use super::append::{append_event, next_seq, now};
use super::error::sql;
use super::sql::{DbError, Row, Tx, args};

use crate::error::{Error, Result};
use crate::ids::{EventSeq, MessageId, SessionId};
use crate::model::{
    AgentBinding, AppendedMessage, Delivery, Event, EventPayload, Message, MessageBlock,
    NewSession, Reference, Session, TitleSource,
};

fn session_from_row(row: &Row<'_>) -> Result<Session, DbError> {
    let agent: Option<String> = row.get(6)?;
    let agent_session: Option<String> = row.get(7)?;
    Ok(Session {
        id: row.parsed(0)?,
        title: row.get(1)?,
        tools_host: row.parsed(2)?,
        created_at: row.get(3)?,
        updated_at: row.get(4)?,
        cwd: row.get(5)?,
        // The schema sets both or neither.
        agent: agent
            .zip(agent_session)
            .map(|(agent, session)| AgentBinding { agent, session }),
        title_source: row
            .get::<Option<String>>(8)?
            .map(|s| s.parse().map_err(|e| DbError::column(8, e)))
            .transpose()?,
        archived: row.get(9)?,
    })
}

const SESSION_COLUMNS: &str = "id, title, tools_host, created_at, updated_at, cwd, agent, \
     agent_session, title_source, archived";

/// Inserts a session with an id chosen by the caller (a fresh one, a fork's, an
/// import's kept id) and, for a fork, where it came from.
pub fn insert_session_as(
    conn: &Tx<'_>,
    id: SessionId,
    new: &NewSession,
    forked_from: Option<crate::model::ForkedFrom>,
) -> Result<Session> {
    let at = now();
    let (agent, agent_session) = match &new.agent {
        Some(b) => (Some(b.agent.as_str()), Some(b.session.as_str())),
        None => (None, None),
    };
    // A title given at creation is the caller's own: explicit.
    let title_source = new.title.as_ref().map(|_| TitleSource::Explicit);
    conn.execute(
        "INSERT INTO sessions
           (id, title, tools_host, created_at, updated_at, cwd, agent, agent_session,
            title_source)
         VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, ?7, ?8)",
        args![
            id.to_string(),
            new.title.as_deref(),
            new.tools_host.as_str(),
            at,
            new.cwd.as_deref(),
            agent,
            agent_session,
            title_source.map(TitleSource::as_str)
        ],
    )
    .map_err(sql("insert a session"))?;
    let payload = EventPayload::SessionCreated {
        title: new.title.clone(),
        tools_host: new.tools_host,
        forked_from,
        cwd: new.cwd.clone(),
        agent: new.agent.clone(),
        title_source,
    };
    append_event(conn, &id, &payload, &at)?;
    get_session(conn, &id)
}

/// Binds the session to an agent's session (a proxy started a new one for it).
pub fn bind_agent(conn: &Tx<'_>, id: &SessionId, binding: &AgentBinding) -> Result<()> {
    let changed = conn
        .execute(
            "UPDATE sessions SET agent = ?2, agent_session = ?3 WHERE id = ?1",
            args![id.to_string(), binding.agent, binding.session],
        )
        .map_err(sql("bind a session to its agent"))?;
    if changed == 0 {
        return Err(Error::SessionNotFound(*id));
    }
    let payload = EventPayload::AgentBound {
        agent: binding.clone(),
    };
    append_event(conn, id, &payload, &now())?;
    Ok(())
}

/// Records a title from `source`, and makes it the title in force when it replaces
/// the one there ([`TitleSource::replaces`]); the title in force is returned.
pub fn rename_session(
    conn: &Tx<'_>,
    id: &SessionId,
    title: &str,
    source: TitleSource,
) -> Result<String> {
    let current = get_session(conn, id)?;
    let replaces = source.replaces(current.title_source, current.title.is_some());
    if replaces {
        conn.execute(
            "UPDATE sessions SET title = ?2, title_source = ?3 WHERE id = ?1",
            args![id.to_string(), title, source.as_str()],
        )
        .map_err(sql("rename a session"))?;
    }
    let payload = EventPayload::SessionRenamed {
        title: title.to_owned(),
        source: Some(source),
    };
    append_event(conn, id, &payload, &now())?;
    Ok(match replaces {
        true => title.to_owned(),
        false => current.title.unwrap_or_default(),
    })
}

/// Archives or brings back a session, with its event; returns whether it changed (a
/// session already in that state gets no event).
pub fn set_archived(conn: &Tx<'_>, id: &SessionId, archived: bool) -> Result<bool> {
    let current = get_session(conn, id)?;
    if current.archived == archived {
        return Ok(false);
    }
    // Literals, not a parameter: PostgreSQL's column is a SMALLINT.
    let statement = match archived {
        true => "UPDATE sessions SET archived = 1 WHERE id = ?1",
        false => "UPDATE sessions SET archived = 0 WHERE id = ?1",
    };
    conn.execute(statement, args![id.to_string()])
        .map_err(sql("archive a session"))?;
    let payload = match archived {
        true => EventPayload::SessionArchived {},
        false => EventPayload::SessionUnarchived {},
    };
    append_event(conn, id, &payload, &now())?;
    Ok(true)
}

pub fn get_session(conn: &Tx<'_>, id: &SessionId) -> Result<Session> {
    conn.query_row(
        &format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"),
        args![id.to_string()],
        session_from_row,
    )
    .map_err(sql("read a session"))?
    .ok_or(Error::SessionNotFound(*id))
}

pub fn list_sessions(conn: &Tx<'_>) -> Result<Vec<Session>> {
    conn.query_map(
        // UUID v7 ids sort by creation time; timestamps written before they had a
        // fixed width do not sort as text.
        &format!("SELECT {SESSION_COLUMNS} FROM sessions ORDER BY id"),
        args![],
        session_from_row,
    )
    .map_err(sql("list sessions"))
}

/// Inserts a message and its references, then its event; an untitled session takes
/// its title from the first user message.
pub fn insert_message(
    conn: &Tx<'_>,
    session: &SessionId,
    message: &crate::model::NewMessage,
    state: Delivery,
) -> Result<Message> {
    let current = get_session(conn, session)?;
    insert_message_for(conn, &current, message, state)
}

/// One `messages` row as written, by a send and by a repair from the log alike.
pub(crate) struct MessageRow<'a> {
    pub id: &'a str,
    pub session: &'a str,
    pub seq: i64,
    pub role: crate::model::Role,
    pub display_text: &'a str,
    pub model_text: Option<&'a str>,
    pub transcript: Option<&'a str>,
    pub state: Delivery,
    pub created_at: &'a str,
    pub content: Option<&'a [crate::model::MessageBlock]>,
}

/// Writes the `messages` row alone (not its references, search entry or event).
pub(crate) fn insert_message_row(
    conn: &Tx<'_>,
    row: &MessageRow<'_>,
) -> super::sql::DbResult<usize> {
    let content = row
        .content
        .map(|c| serde_json::to_string(c).expect("message blocks always serialize"));
    conn.execute(
        "INSERT INTO messages
           (id, session_id, seq, role, display_text, model_text, transcript, state, created_at,
            content)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        args![
            row.id,
            row.session,
            row.seq,
            row.role.as_str(),
            row.display_text,
            row.model_text,
            row.transcript,
            row.state.as_str(),
            row.created_at,
            content
        ],
    )
}

/// [`insert_message`] for a session the caller has just read in this transaction; the
/// message returned is built from what was written, not read back. A streamed agent
/// message it follows must be sealed first (`items::settle`).
pub fn insert_message_for(
    conn: &Tx<'_>,
    current: &Session,
    message: &crate::model::NewMessage,
    state: Delivery,
) -> Result<Message> {
    let session = &current.id;
    let session_text = session.to_string();
    let id = MessageId::new();
    let id_text = id.to_string();
    let at = now();
    // Messages and recorded items share one sequence: the session's history order.
    let seq = next_seq(conn, session)?;
    insert_message_row(
        conn,
        &MessageRow {
            id: &id_text,
            session: &session_text,
            seq,
            role: message.role,
            display_text: &message.display_text,
            model_text: message.model_text.as_deref(),
            transcript: message.transcript.as_deref(),
            state,
            created_at: &at,
            content: message.content.as_deref(),
        },
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
        insert_reference(conn, &id_text, &reference)?;
        refs.push(reference);
    }
    // The event's copy of the message's parts becomes the message returned: no text
    // is copied twice.
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
            content: message.content.clone(),
        },
    };
    append_event(conn, session, &payload, &at)?;
    let EventPayload::MessageAppended { message: appended } = payload else {
        unreachable!("built as a message_appended payload just above")
    };
    let written = Message {
        id,
        session_id: *session,
        seq,
        role: appended.role,
        display_text: appended.display_text,
        model_text: appended.model_text,
        transcript: appended.transcript,
        state,
        created_at: at,
        refs: appended.refs,
        content: appended.content,
    };
    if current.title.is_none()
        && message.role == crate::model::Role::User
        && let Some(title) = title_from(&message.display_text)
    {
        rename_session(conn, session, &title, TitleSource::Message)?;
    }
    Ok(written)
}

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
pub fn mark_delivered(conn: &Tx<'_>, session: &SessionId, ids: &[MessageId]) -> Result<()> {
    for id in ids {
        let changed = conn
            .execute(
                "UPDATE messages SET state = 'delivered'
                 WHERE id = ?1 AND session_id = ?2 AND state = 'queued'",
                args![id.to_string(), session.to_string()],
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
    "id, session_id, seq, role, display_text, model_text, transcript, state, created_at, content";

fn message_from_row(row: &Row<'_>) -> Result<Message, DbError> {
    let content: Option<String> = row.get(9)?;
    let content = content
        .map(|text| serde_json::from_str::<Vec<MessageBlock>>(&text))
        .transpose()
        .map_err(|e| DbError::column(9, e))?;
    Ok(Message {
        id: row.parsed(0)?,
        session_id: row.parsed(1)?,
        seq: row.get(2)?,
        role: row.parsed(3)?,
        display_text: row.get(4)?,
        model_text: row.get(5)?,
        transcript: row.get(6)?,
        state: row.parsed(7)?,
        created_at: row.get(8)?,
        refs: vec![],
        content,
    })
}

/// Writes the row of `reference`, one of message `message`'s (its id as text).
pub(crate) fn insert_reference(conn: &Tx<'_>, message: &str, reference: &Reference) -> Result<()> {
    let size = i64::try_from(reference.size).map_err(|_| Error::OutOfRange {
        what: "an attachment's size",
    })?;
    conn.execute(
        "INSERT INTO message_refs (message_id, ordinal, uri, stored_name, mime_type, size)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        args![
            message,
            reference.ordinal,
            reference.uri.to_string(),
            reference.stored_name,
            reference.mime_type,
            size
        ],
    )
    .map_err(sql("insert a reference"))?;
    Ok(())
}

/// A reference row from column `at` on.
fn reference_from_row(row: &Row<'_>, at: usize) -> Result<Reference, DbError> {
    Ok(Reference {
        ordinal: row.get(at)?,
        uri: row.parsed(at + 1)?,
        stored_name: row.get(at + 2)?,
        mime_type: row.get(at + 3)?,
        // A negative size is refused like any other value that does not parse.
        size: row.get(at + 4)?,
    })
}

fn load_refs(conn: &Tx<'_>, message: &mut Message) -> Result<()> {
    message.refs = conn
        .query_map(
            "SELECT ordinal, uri, stored_name, mime_type, size FROM message_refs
             WHERE message_id = ?1 ORDER BY ordinal",
            args![message.id.to_string()],
            |row| reference_from_row(row, 0),
        )
        .map_err(sql("read references"))?;
    Ok(())
}

pub fn get_message(conn: &Tx<'_>, id: &MessageId) -> Result<Message> {
    let mut message = conn
        .query_row(
            &format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?1"),
            args![id.to_string()],
            message_from_row,
        )
        .map_err(sql("read a message"))?
        .ok_or(Error::MessageNotFound(*id))?;
    load_refs(conn, &mut message)?;
    Ok(message)
}

/// A session's messages in order, optionally only those in one delivery state.
pub fn messages(
    conn: &Tx<'_>,
    session: &SessionId,
    state: Option<Delivery>,
) -> Result<Vec<Message>> {
    messages_in(conn, session, state, 1..i64::MAX)
}

/// [`messages`] whose seq is in `seqs`: one page of a long history.
pub fn messages_in(
    conn: &Tx<'_>,
    session: &SessionId,
    state: Option<Delivery>,
    seqs: std::ops::Range<i64>,
) -> Result<Vec<Message>> {
    let session = session.to_string();
    let state = state.map(Delivery::as_str);
    let mut out: Vec<Message> = conn
        .query_map(
            &format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages
                 WHERE session_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR state = ?2)
                   AND seq >= ?3 AND seq < ?4
                 ORDER BY seq"
            ),
            args![session, state, seqs.start, seqs.end],
            message_from_row,
        )
        .map_err(sql("read messages"))?;
    if out.is_empty() {
        return Ok(out);
    }
    // Every reference of those messages in one query, in message order.
    let mut at = 0;
    conn.for_each(
        "SELECT m.seq, r.ordinal, r.uri, r.stored_name, r.mime_type, r.size
         FROM message_refs r JOIN messages m ON m.id = r.message_id
         WHERE m.session_id = ?1 AND (CAST(?2 AS TEXT) IS NULL OR m.state = ?2)
           AND m.seq >= ?3 AND m.seq < ?4
         ORDER BY m.seq, r.ordinal",
        args![session, state, seqs.start, seqs.end],
        |row| {
            // The owner by its seq (unique in the session), not its id: no id to parse.
            let owner: i64 = row.get(0)?;
            // Both lists are in seq order: the owner is this message or a later one (or,
            // outside a transaction, one added between the two queries: left out).
            let Some(found) = out[at..].iter().position(|m| m.seq == owner) else {
                return Ok(());
            };
            at += found;
            out[at].refs.push(reference_from_row(row, 1)?);
            Ok(())
        },
    )
    .map_err(sql("read references"))?;
    Ok(out)
}

/// The latest delivered user message of a session (what `dispatch` takes by default).
pub fn latest_delivered_user_message(
    conn: &Tx<'_>,
    session: &SessionId,
) -> Result<Option<Message>> {
    let found = conn
        .query_row(
            &format!(
                "SELECT {MESSAGE_COLUMNS} FROM messages
                 WHERE session_id = ?1 AND role = 'user' AND state = 'delivered'
                 ORDER BY seq DESC LIMIT 1"
            ),
            args![session.to_string()],
            message_from_row,
        )
        .map_err(sql("read the latest message"))?;
    match found {
        Some(mut message) => {
            load_refs(conn, &mut message)?;
            Ok(Some(message))
        }
        None => Ok(None),
    }
}

/// An event row, its payload read by `payload`.
pub(super) fn event_from_row<P>(
    row: &Row<'_>,
    payload: impl Fn(String) -> serde_json::Result<P>,
) -> Result<Event<P>, DbError> {
    let text: String = row.get(4)?;
    Ok(Event {
        seq: EventSeq(row.get(0)?),
        session_id: row.parsed(1)?,
        session_seq: row.get(2)?,
        kind: row.get(3)?,
        payload: payload(text).map_err(|e| DbError::column(4, e))?,
        created_at: row.get(5)?,
    })
}

pub(super) fn json_value(text: String) -> serde_json::Result<serde_json::Value> {
    serde_json::from_str(&text)
}

pub(super) const EVENT_COLUMNS: &str = "seq, session_id, session_seq, kind, payload, created_at";

pub fn events(conn: &Tx<'_>, session: &SessionId) -> Result<Vec<Event>> {
    conn.query_map(
        &format!(
            "SELECT {EVENT_COLUMNS} FROM session_events WHERE session_id = ?1 ORDER BY session_seq"
        ),
        args![session.to_string()],
        |row| event_from_row(row, json_value),
    )
    .map_err(sql("read events"))
}

/// A session's events whose `session_seq` is in `from..from + count`, in log order,
/// and where the next page starts (past a gap a damaged log may have, in one step). A
/// range rather than a `LIMIT`: a bound `LIMIT` made SQLite prepare the statement again
/// at every page.
pub fn events_page(
    conn: &Tx<'_>,
    session: &SessionId,
    from: i64,
    count: i64,
) -> Result<(Vec<Event<String>>, i64)> {
    let to = from.saturating_add(count);
    let events = conn
        .query_map(
            &format!(
                "SELECT {EVENT_COLUMNS} FROM session_events WHERE session_id = ?1
                   AND session_seq >= ?2 AND session_seq < ?3
                 ORDER BY session_seq"
            ),
            args![session.to_string(), from, to],
            |row| event_from_row(row, Ok),
        )
        .map_err(sql("read events"))?;
    if !events.is_empty() {
        return Ok((events, to));
    }
    let next: Option<i64> = conn
        .query_row(
            // Not `min()`: an aggregate of the view would read every key from `?2` on.
            "SELECT session_seq FROM session_events WHERE session_id = ?1 AND session_seq >= ?2
             ORDER BY session_seq LIMIT 1",
            args![session.to_string(), to],
            |r| r.get(0),
        )
        .map_err(sql("read events"))?;
    Ok((events, next.unwrap_or(i64::MAX)))
}

/// A session's events in log order, each handed to `f` with its payload borrowed from
/// the row: nothing of the log is held beyond the event `f` is given.
pub fn each_event(
    conn: &Tx<'_>,
    session: &SessionId,
    mut f: impl FnMut(&Event<&str>),
) -> Result<()> {
    conn.for_each(
        "SELECT seq, session_seq, kind, payload, created_at FROM session_events
         WHERE session_id = ?1 ORDER BY session_seq",
        args![session.to_string()],
        |row| {
            row.with_text(3, |payload| {
                let payload = payload.ok_or_else(|| DbError::column(3, "null"))?;
                f(&Event {
                    seq: EventSeq(row.get(0)?),
                    session_id: *session,
                    session_seq: row.get(1)?,
                    kind: row.get(2)?,
                    payload,
                    created_at: row.get(4)?,
                });
                Ok(())
            })
        },
    )
    .map_err(sql("read events"))
}
