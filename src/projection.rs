//! Replays a session's events into the rows its tables should hold, including the
//! items of recorded turns (through `turns::apply`, the same merge `record` runs).
//! Pure: it is given events and returns records, so `verify` and restore can both
//! compare them with what the tables say.

use std::borrow::Cow;

use serde::Deserialize;

use crate::attachments::AttachmentUri;
use crate::ids::{MessageId, SessionId};
use crate::model::{
    Delivery, Event, EventPayload, Item, ItemBody, Message, MessageBlock, Problem, ProblemKind,
    Session, Setting, Turn,
};
use crate::turns::{self, Slot, State, Update};

/// A session as its event log describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    pub session: Session,
    pub messages: Vec<Message>,
    /// Recorded turn items, in the order they were created.
    pub items: Vec<Item>,
    /// Turns, in the order they began.
    pub turns: Vec<Turn>,
    /// The latest setting of each kind, by method and key.
    pub settings: Vec<Setting>,
}

/// An event payload as the log was read: a parsed JSON value, or the text itself.
pub trait Payload {
    /// `kind` is the event row's own `kind` column: a hint for choosing a decoder,
    /// never a substitute for the payload's own `kind` field. `uris` holds the URIs
    /// this replay has parsed so far, for a decoder that can reuse them.
    fn decode(&self, kind: &str, uris: &mut Uris) -> serde_json::Result<EventPayload>;
}

impl Payload for serde_json::Value {
    /// Deserialized from the borrowed value: cloning each payload first would copy the
    /// whole log once more.
    fn decode(&self, _kind: &str, _uris: &mut Uris) -> serde_json::Result<EventPayload> {
        EventPayload::deserialize(self)
    }
}

/// A payload as the text the log holds, borrowed from the row it was read from, so
/// that a restore decodes each one once, straight into its [`EventPayload`].
impl Payload for &str {
    fn decode(&self, kind: &str, uris: &mut Uris) -> serde_json::Result<EventPayload> {
        // The tagged, flattened `EventPayload` is decoded through serde's buffered
        // content, twice over; most of a log is `message_appended`, which a plain
        // struct decodes straight from the text, its references' URIs parsed once per
        // distinct text. Whatever the plain way refuses goes the general way, so what
        // is accepted, and every error, stay the same.
        if kind == "message_appended"
            && let Ok(plain) = serde_json::from_str::<PlainAppended>(self)
            && let Some(message) = plain.message(uris)
        {
            return Ok(EventPayload::MessageAppended { message });
        }
        serde_json::from_str(self)
    }
}

/// The URIs a replay parsed last, by their text: a history refers to the same few
/// files again and again, and a parse checks every part of a URI (about 1,100
/// instructions), where a comparison with the last few texts costs a few dozen. It
/// keeps the [`Uris::MOST`] latest, replacing the oldest.
#[derive(Default)]
pub struct Uris {
    recent: Vec<(Box<str>, AttachmentUri)>,
    /// Where the next new URI goes once `recent` is full.
    next: usize,
}

impl Uris {
    const MOST: usize = 16;

    fn parse(&mut self, text: &str) -> Option<AttachmentUri> {
        if let Some((_, uri)) = self.recent.iter().find(|(seen, _)| **seen == *text) {
            return Some(uri.clone());
        }
        let uri = AttachmentUri::parse(text).ok()?;
        let entry = (text.into(), uri.clone());
        if self.recent.len() < Self::MOST {
            self.recent.push(entry);
        } else {
            self.recent[self.next] = entry;
            self.next = (self.next + 1) % Self::MOST;
        }
        Some(uri)
    }
}

/// The `message_appended` tag, and no other.
#[derive(Deserialize)]
enum AppendedTag {
    #[serde(rename = "message_appended")]
    MessageAppended,
}

/// A `message_appended` payload with its fields listed directly: the same fields as
/// [`crate::model::AppendedMessage`] plus the tag, unknown fields ignored as the
/// flattened form ignores them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlainAppended<'a> {
    #[allow(dead_code)]
    kind: AppendedTag,
    id: MessageId,
    seq: i64,
    role: crate::model::Role,
    display_text: String,
    model_text: Option<String>,
    transcript: Option<String>,
    state: Delivery,
    #[serde(borrow)]
    refs: Vec<PlainReference<'a>>,
    #[serde(default)]
    content: Option<Vec<MessageBlock>>,
}

/// [`crate::model::Reference`] with its URI left as text (borrowed from the payload
/// where it holds no escape), to be parsed through [`Uris`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PlainReference<'a> {
    ordinal: u32,
    #[serde(borrow)]
    uri: Cow<'a, str>,
    stored_name: String,
    mime_type: String,
    size: u64,
}

impl PlainAppended<'_> {
    /// The message, or `None` when a URI does not parse (the general decoder then
    /// reports it in its own words).
    fn message(self, uris: &mut Uris) -> Option<crate::model::AppendedMessage> {
        let refs = self
            .refs
            .into_iter()
            .map(|r| {
                Some(crate::model::Reference {
                    ordinal: r.ordinal,
                    uri: uris.parse(&r.uri)?,
                    stored_name: r.stored_name,
                    mime_type: r.mime_type,
                    size: r.size,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(crate::model::AppendedMessage {
            id: self.id,
            seq: self.seq,
            role: self.role,
            display_text: self.display_text,
            model_text: self.model_text,
            transcript: self.transcript,
            state: self.state,
            refs,
            content: self.content,
        })
    }
}

/// Where the projection stands in the session's one history sequence.
#[derive(Default)]
struct History {
    /// The highest seq given to a message or an item so far.
    last: i64,
    /// The item holding that seq, if the last entry is an item.
    last_item: Option<usize>,
}

/// Folds one session's events, in `session_seq` order, into its expected rows, and
/// names each inconsistency found in the log itself. The projection is kept even when
/// the log has problems, so the tables can still be compared with what is there.
pub fn replay<P: Payload>(
    session_id: SessionId,
    events: &[Event<P>],
) -> (Option<Projection>, Vec<Problem>) {
    let mut replayer = Replayer::new(session_id);
    for event in events {
        replayer.apply(event);
    }
    replayer.finish()
}

/// [`replay`] one event at a time, for a caller that reads the log as it goes and
/// never holds it whole (restore).
pub struct Replayer {
    session_id: SessionId,
    applied: i64,
    problems: Vec<Problem>,
    session: Option<Session>,
    messages: Vec<Message>,
    items: Vec<Item>,
    turns: Vec<Turn>,
    settings: Vec<Setting>,
    history: History,
    uris: Uris,
}

impl Replayer {
    pub fn new(session_id: SessionId) -> Replayer {
        Replayer {
            session_id,
            applied: 0,
            problems: Vec::new(),
            session: None,
            messages: Vec::new(),
            items: Vec::new(),
            turns: Vec::new(),
            settings: Vec::new(),
            history: History::default(),
            uris: Uris::default(),
        }
    }

    /// Folds the next event of the log in.
    pub fn apply<P: Payload>(&mut self, event: &Event<P>) {
        let session_id = self.session_id;
        let problems = &mut self.problems;
        let session = &mut self.session;
        let messages = &mut self.messages;
        let history = &mut self.history;
        self.applied += 1;
        let expected_seq = self.applied;
        if event.session_seq != expected_seq {
            problems.push(
                Problem::new(
                    ProblemKind::EventSequence,
                    format!(
                        "event sequence jumps to {} where {expected_seq} was due",
                        event.session_seq
                    ),
                )
                .with_session(session_id)
                .with_event(event.seq),
            );
        }
        let payload = match event.payload.decode(&event.kind, &mut self.uris) {
            Ok(p) => p,
            Err(e) => {
                problems.push(
                    Problem::new(
                        ProblemKind::UnreadableEvent,
                        format!(
                            "event {} ({}) has a payload this store cannot read: {e}",
                            event.seq, event.kind
                        ),
                    )
                    .with_session(session_id)
                    .with_event(event.seq),
                );
                return;
            }
        };
        if payload.kind() != event.kind {
            problems.push(
                Problem::new(
                    ProblemKind::MislabelledEvent,
                    format!(
                        "event {} is labelled {} but records {}",
                        event.seq,
                        event.kind,
                        payload.kind()
                    ),
                )
                .with_session(session_id)
                .with_event(event.seq),
            );
        }
        if let Some(s) = session.as_mut() {
            // Into the buffer it already has: one allocation per session, not per event.
            s.updated_at.clone_from(&event.created_at);
        }
        match payload {
            EventPayload::SessionCreated {
                title,
                tools_host,
                cwd,
                agent,
                ..
            } => {
                if session.is_some() {
                    problems.push(
                        Problem::new(
                            ProblemKind::SessionCreation,
                            format!("session {session_id} is created twice"),
                        )
                        .with_session(session_id)
                        .with_event(event.seq),
                    );
                }
                *session = Some(Session {
                    id: session_id,
                    title,
                    tools_host,
                    created_at: event.created_at.clone(),
                    updated_at: event.created_at.clone(),
                    cwd,
                    agent,
                });
            }
            EventPayload::SessionRenamed { title } => match session.as_mut() {
                Some(s) => s.title = Some(title),
                None => problems.push(
                    Problem::new(
                        ProblemKind::SessionCreation,
                        format!(
                            "event {} renames session {session_id} before it was created",
                            event.seq
                        ),
                    )
                    .with_session(session_id)
                    .with_event(event.seq),
                ),
            },
            EventPayload::MessageAppended { message } => {
                if session.is_none() {
                    problems.push(
                        Problem::new(
                            ProblemKind::SessionCreation,
                            format!(
                                "event {} appends to session {session_id} before it was created",
                                event.seq
                            ),
                        )
                        .with_session(session_id)
                        .with_event(event.seq),
                    );
                }
                if message.seq != history.last + 1 {
                    problems.push(
                        Problem::new(
                            ProblemKind::HistorySequence,
                            format!(
                                "event {} puts message {} at seq {} where {} was due",
                                event.seq,
                                message.id,
                                message.seq,
                                history.last + 1
                            ),
                        )
                        .with_session(session_id)
                        .with_message(message.id)
                        .with_event(event.seq),
                    );
                }
                history.last = history.last.max(message.seq);
                history.last_item = None;
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
                    content: message.content,
                });
            }
            EventPayload::MessageDelivered { id } => {
                // A delivery is of a message queued mid-turn, so one near the end:
                // searched from there, a long history is not walked per delivery.
                match messages.iter_mut().rev().find(|m| m.id == id) {
                    Some(m) if m.state == Delivery::Queued => m.state = Delivery::Delivered,
                    Some(_) => problems.push(
                        Problem::new(
                            ProblemKind::Delivery,
                            format!(
                                "event {} delivers message {id}, which was not queued",
                                event.seq
                            ),
                        )
                        .with_session(session_id)
                        .with_message(id)
                        .with_event(event.seq),
                    ),
                    None => problems.push(
                        Problem::new(
                            ProblemKind::Delivery,
                            format!(
                                "event {} delivers message {id}, which was never appended",
                                event.seq
                            ),
                        )
                        .with_session(session_id)
                        .with_message(id)
                        .with_event(event.seq),
                    ),
                }
            }
            EventPayload::TurnRecorded {
                updates,
                items: created,
            } => {
                if session.is_none() {
                    problems.push(
                        Problem::new(
                            ProblemKind::SessionCreation,
                            format!(
                                "event {} records a turn in session {session_id} before it was \
                                 created",
                                event.seq
                            ),
                        )
                        .with_session(session_id)
                        .with_event(event.seq),
                    );
                }
                replay_turn(
                    event,
                    &updates,
                    &created,
                    &mut self.items,
                    history,
                    problems,
                );
            }
            EventPayload::AgentBound { agent } => match session.as_mut() {
                Some(s) => s.agent = Some(agent),
                None => problems.push(before_creation(event, session_id, "binds")),
            },
            EventPayload::TurnStarted { id, seq, messages } => {
                if session.is_none() {
                    problems.push(before_creation(event, session_id, "begins a turn in"));
                }
                self.turns.push(Turn {
                    id,
                    session_id,
                    seq,
                    messages,
                    end: None,
                    started_at: event.created_at.clone(),
                    ended_at: None,
                });
            }
            EventPayload::TurnEnded { id, end } => {
                match self.turns.iter_mut().rev().find(|t| t.id == id) {
                    Some(turn) if turn.end.is_none() => {
                        turn.end = Some(end);
                        turn.ended_at = Some(event.created_at.clone());
                    }
                    found => problems.push(
                        Problem::new(
                            ProblemKind::TurnSequence,
                            format!(
                                "event {} ends turn {id}, which {}",
                                event.seq,
                                if found.is_some() {
                                    "had ended"
                                } else {
                                    "never began"
                                }
                            ),
                        )
                        .with_session(session_id)
                        .with_event(event.seq),
                    ),
                }
            }
            EventPayload::SettingRecorded { setting } => {
                if session.is_none() {
                    problems.push(before_creation(event, session_id, "records a setting of"));
                }
                match self
                    .settings
                    .iter_mut()
                    .find(|s| s.method == setting.method && s.key == setting.key)
                {
                    Some(kept) => *kept = setting,
                    None => self.settings.push(setting),
                }
            }
        }
    }

    /// The projection and every problem found in the log.
    pub fn finish(mut self) -> (Option<Projection>, Vec<Problem>) {
        let session_id = self.session_id;
        if self.session.is_none() {
            self.problems.push(
                Problem::new(
                    ProblemKind::SessionCreation,
                    format!("session {session_id} has no session_created event"),
                )
                .with_session(session_id),
            );
        }
        let (messages, items, turns) = (self.messages, self.items, self.turns);
        let mut settings = self.settings;
        settings.sort_by(|a, b| (&a.method, &a.key).cmp(&(&b.method, &b.key)));
        (
            self.session.map(|session| Projection {
                session,
                messages,
                items,
                turns,
                settings,
            }),
            self.problems,
        )
    }
}

fn before_creation<P>(event: &Event<P>, session: SessionId, what: &str) -> Problem {
    Problem::new(
        ProblemKind::SessionCreation,
        format!(
            "event {} {what} session {session} before it was created",
            event.seq
        ),
    )
    .with_session(session)
    .with_event(event.seq)
}

/// Replays one recorded batch onto the projected items, the way `record` applied it.
fn replay_turn<P>(
    event: &Event<P>,
    updates: &[serde_json::Value],
    created: &[crate::model::CreatedItem],
    items: &mut Vec<Item>,
    history: &mut History,
    problems: &mut Vec<Problem>,
) {
    let about = |kind, detail: String| {
        Problem::new(kind, detail)
            .with_session(event.session_id)
            .with_event(event.seq)
    };
    let parsed: Result<Vec<Update>, _> = updates.iter().map(Update::from_value).collect();
    let batch = match parsed {
        Ok(batch) => batch,
        Err(e) => {
            problems.push(about(
                ProblemKind::UnreadableEvent,
                format!(
                    "event {} holds an update this store cannot read: {e}",
                    event.seq
                ),
            ));
            return;
        }
    };
    let mut state = State {
        tail: history
            .last_item
            .map(|at| &items[at])
            .filter(|item| {
                matches!(
                    item.body,
                    ItemBody::AgentMessage(_) | ItemBody::AgentThought(_)
                )
            })
            .map(|item| (item.id, item.body.clone())),
        ..State::default()
    };
    for id in turns::tool_call_ids(&batch) {
        let found = items.iter().find(|item| match &item.body {
            ItemBody::ToolCall(call) => call.tool_call_id == id,
            _ => false,
        });
        if let Some(Item {
            id: item,
            body: ItemBody::ToolCall(call),
            ..
        }) = found
        {
            state.tool_calls.insert(id, (*item, call.clone()));
        }
    }
    let outcome = match turns::apply(state, &batch) {
        Ok(outcome) => outcome,
        Err((index, refusal)) => {
            problems.push(about(
                ProblemKind::RecordedTurn,
                format!(
                    "event {} records update {} that the store refuses: {refusal}",
                    event.seq,
                    index + 1
                ),
            ));
            return;
        }
    };
    if outcome.created != created.len() {
        problems.push(about(
            ProblemKind::RecordedTurn,
            format!(
                "event {} names {} new items where its updates make {}",
                event.seq,
                created.len(),
                outcome.created
            ),
        ));
        return;
    }
    for (slot, body) in outcome.items {
        match slot {
            Slot::New(n) => {
                let made = created[n];
                if made.seq != history.last + 1 {
                    problems.push(
                        about(
                            ProblemKind::HistorySequence,
                            format!(
                                "event {} puts item {} at seq {} where {} was due",
                                event.seq,
                                made.id,
                                made.seq,
                                history.last + 1
                            ),
                        )
                        .with_item(made.id),
                    );
                }
                history.last = history.last.max(made.seq);
                history.last_item = Some(items.len());
                items.push(Item {
                    id: made.id,
                    session_id: event.session_id,
                    seq: made.seq,
                    body,
                    created_at: event.created_at.clone(),
                    updated_at: event.created_at.clone(),
                });
            }
            Slot::Stored(id) => {
                if let Some(item) = items.iter_mut().find(|item| item.id == id) {
                    item.body = body;
                    item.updated_at = event.created_at.clone();
                }
            }
        }
    }
}

/// Names every way the items table differs from what the event log says it should
/// hold: a tool-call row edited behind the log's back shows up here.
pub fn compare_items(session: &Session, rows: &[Item], expected: &Projection) -> Vec<Problem> {
    let mut problems = Vec::new();
    let about = |kind, item: &Item, detail: String| {
        Problem::new(kind, detail)
            .with_session(session.id)
            .with_item(item.id)
    };
    for want in &expected.items {
        match rows.iter().find(|i| i.id == want.id) {
            None => problems.push(about(
                ProblemKind::MissingRow,
                want,
                format!(
                    "{} item {} is in the event log but not in the table",
                    want.body.kind(),
                    want.id
                ),
            )),
            Some(have) if have != want => {
                let checks = [
                    (have.seq != want.seq, "seq"),
                    (have.body.kind() != want.body.kind(), "kind"),
                    (have.body != want.body, "content"),
                    (have.created_at != want.created_at, "created time"),
                    (have.updated_at != want.updated_at, "updated time"),
                ];
                let fields: Vec<&str> = checks
                    .iter()
                    .filter(|(differs, _)| *differs)
                    .map(|(_, name)| *name)
                    .collect();
                problems.push(about(
                    ProblemKind::ChangedRow,
                    want,
                    format!(
                        "{} item {} differs from its event log ({})",
                        want.body.kind(),
                        want.id,
                        fields.join(", ")
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    for have in rows {
        if !expected.items.iter().any(|i| i.id == have.id) {
            problems.push(about(
                ProblemKind::UnloggedRow,
                have,
                format!(
                    "{} item {} is in the table but no event records it",
                    have.body.kind(),
                    have.id
                ),
            ));
        }
    }
    problems
}

/// Names every way the tables' rows differ from what the event log says they should be.
pub fn compare(session: &Session, rows: &[Message], expected: &Projection) -> Vec<Problem> {
    let mut problems = Vec::new();
    let about = |kind, message: MessageId, detail: String| {
        Problem::new(kind, detail)
            .with_session(session.id)
            .with_message(message)
    };
    let want = &expected.session;
    let mut fields = Vec::new();
    if session.title != want.title {
        fields.push("title");
    }
    if session.tools_host != want.tools_host {
        fields.push("tools host");
    }
    if session.cwd != want.cwd {
        fields.push("working directory");
    }
    if session.agent != want.agent {
        fields.push("agent");
    }
    if session.created_at != want.created_at {
        fields.push("created time");
    }
    if session.updated_at != want.updated_at {
        fields.push("updated time");
    }
    if !fields.is_empty() {
        problems.push(
            Problem::new(
                ProblemKind::ChangedRow,
                format!(
                    "table row differs from its event log ({})",
                    fields.join(", ")
                ),
            )
            .with_session(session.id),
        );
    }
    // Rows and the log both list messages in history order, so the same index is
    // tried first: a consistent session is compared in one pass, not in n² lookups.
    fn find(list: &[Message], at: usize, id: MessageId) -> Option<&Message> {
        list.get(at)
            .filter(|m| m.id == id)
            .or_else(|| list.iter().find(|m| m.id == id))
    }
    for (at, want) in expected.messages.iter().enumerate() {
        match find(rows, at, want.id) {
            None => problems.push(about(
                ProblemKind::MissingRow,
                want.id,
                format!(
                    "message {} is in the event log but not in the table",
                    want.id
                ),
            )),
            Some(have) if have != want => problems.push(about(
                ProblemKind::ChangedRow,
                want.id,
                format!(
                    "message {} differs from its event log ({})",
                    want.id,
                    message_differences(have, want)
                ),
            )),
            Some(_) => {}
        }
    }
    for (at, have) in rows.iter().enumerate() {
        if find(&expected.messages, at, have.id).is_none() {
            problems.push(about(
                ProblemKind::UnloggedRow,
                have.id,
                format!(
                    "message {} is in the table but no event records it",
                    have.id
                ),
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
        (have.content != want.content, "block order"),
    ];
    checks
        .iter()
        .filter(|(differs, _)| *differs)
        .map(|(_, name)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Names every way a session's turns and settings differ from what its log says.
pub fn compare_turns(
    session: &Session,
    turns: &[Turn],
    settings: &[Setting],
    expected: &Projection,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let about = |kind, detail: String| Problem::new(kind, detail).with_session(session.id);
    for want in &expected.turns {
        match turns.iter().find(|t| t.id == want.id) {
            None => problems.push(about(
                ProblemKind::MissingRow,
                format!("turn {} is in the event log but not in the table", want.id),
            )),
            Some(have) if have != want => problems.push(about(
                ProblemKind::ChangedRow,
                format!("turn {} differs from its event log", want.id),
            )),
            Some(_) => {}
        }
    }
    for have in turns {
        if !expected.turns.iter().any(|t| t.id == have.id) {
            problems.push(about(
                ProblemKind::UnloggedRow,
                format!("turn {} is in the table but no event records it", have.id),
            ));
        }
    }
    if settings != expected.settings.as_slice() {
        problems.push(about(
            ProblemKind::ChangedRow,
            "the settings differ from the event log's".to_owned(),
        ));
    }
    problems
}

#[cfg(test)]
mod tests;
