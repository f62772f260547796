//! Replays a session's events into the rows its tables should hold. Pure: it is given
//! events and returns records, so `verify` and restore can both compare them with
//! what the tables say.

use crate::ids::SessionId;
use crate::model::{Delivery, Event, EventPayload, Message, Session};

/// A session as its event log describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    pub session: Session,
    pub messages: Vec<Message>,
}

/// Folds one session's events, in `session_seq` order, into its expected rows, and
/// names each inconsistency found in the log itself. The projection is kept even when
/// the log has problems, so the tables can still be compared with what is there.
pub fn replay(session_id: SessionId, events: &[Event]) -> (Option<Projection>, Vec<String>) {
    let mut problems = Vec::new();
    let mut session: Option<Session> = None;
    let mut messages: Vec<Message> = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let expected_seq = i as i64 + 1;
        if event.session_seq != expected_seq {
            problems.push(format!(
                "session {session_id}: event sequence jumps to {} where {expected_seq} was due",
                event.session_seq
            ));
        }
        let payload: EventPayload = match serde_json::from_value(event.payload.clone()) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!(
                    "event {} ({}) has a payload this store cannot read: {e}",
                    event.seq, event.kind
                ));
                continue;
            }
        };
        if payload.kind() != event.kind {
            problems.push(format!(
                "event {} is labelled {} but records {}",
                event.seq,
                event.kind,
                payload.kind()
            ));
        }
        if let Some(s) = session.as_mut() {
            s.updated_at = event.created_at.clone();
        }
        match payload {
            EventPayload::SessionCreated { title, tools_host } => {
                if session.is_some() {
                    problems.push(format!("session {session_id} is created twice"));
                }
                session = Some(Session {
                    id: session_id,
                    title,
                    tools_host,
                    created_at: event.created_at.clone(),
                    updated_at: event.created_at.clone(),
                });
            }
            EventPayload::SessionRenamed { title } => match session.as_mut() {
                Some(s) => s.title = Some(title),
                None => problems.push(format!(
                    "event {} renames session {session_id} before it was created",
                    event.seq
                )),
            },
            EventPayload::MessageAppended { message } => {
                if session.is_none() {
                    problems.push(format!(
                        "event {} appends to session {session_id} before it was created",
                        event.seq
                    ));
                }
                messages.push(Message {
                    id: message.id,
                    session_id,
                    seq: message.seq,
                    role: message.role,
                    display_text: message.display_text,
                    model_text: message.model_text,
                    transcript: message.transcript,
                    state: message.state,
                    created_at: event.created_at.clone(),
                    refs: message.refs,
                });
            }
            EventPayload::MessageDelivered { id } => {
                match messages.iter_mut().find(|m| m.id == id) {
                    Some(m) if m.state == Delivery::Queued => m.state = Delivery::Delivered,
                    Some(_) => problems.push(format!(
                        "event {} delivers message {id}, which was not queued",
                        event.seq
                    )),
                    None => problems.push(format!(
                        "event {} delivers message {id}, which was never appended",
                        event.seq
                    )),
                }
            }
        }
    }
    if session.is_none() {
        problems.push(format!("session {session_id} has no session_created event"));
    }
    (
        session.map(|session| Projection { session, messages }),
        problems,
    )
}

/// Names every way the tables' rows differ from what the event log says they should be.
pub fn compare(session: &Session, rows: &[Message], expected: &Projection) -> Vec<String> {
    let mut problems = Vec::new();
    let want = &expected.session;
    let mut fields = Vec::new();
    if session.title != want.title {
        fields.push("title");
    }
    if session.tools_host != want.tools_host {
        fields.push("tools host");
    }
    if session.created_at != want.created_at {
        fields.push("created time");
    }
    if session.updated_at != want.updated_at {
        fields.push("updated time");
    }
    if !fields.is_empty() {
        problems.push(format!(
            "session {}: table row differs from its event log ({})",
            session.id,
            fields.join(", ")
        ));
    }
    for want in &expected.messages {
        match rows.iter().find(|m| m.id == want.id) {
            None => problems.push(format!(
                "session {}: message {} is in the event log but not in the table",
                session.id, want.id
            )),
            Some(have) if have != want => problems.push(format!(
                "session {}: message {} differs from its event log ({})",
                session.id,
                want.id,
                message_differences(have, want)
            )),
            Some(_) => {}
        }
    }
    for have in rows {
        if !expected.messages.iter().any(|m| m.id == have.id) {
            problems.push(format!(
                "session {}: message {} is in the table but no event records it",
                session.id, have.id
            ));
        }
    }
    problems
}

fn message_differences(have: &Message, want: &Message) -> String {
    let checks = [
        (have.seq != want.seq, "seq"),
        (have.role != want.role, "role"),
        (have.display_text != want.display_text, "display text"),
        (have.model_text != want.model_text, "model text"),
        (have.transcript != want.transcript, "transcript"),
        (have.state != want.state, "delivery state"),
        (have.created_at != want.created_at, "created time"),
        (have.refs != want.refs, "references"),
    ];
    checks
        .iter()
        .filter(|(differs, _)| *differs)
        .map(|(_, name)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}
