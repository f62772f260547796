//! Replays a session's events into the rows its tables should hold (turn items through
//! `turns::apply`, as `record` does). Pure: `verify` compares, `verify --repair` writes.

use std::collections::{HashMap, HashSet, VecDeque};

use agent_client_protocol_schema::v1::ToolCallId;

use serde::Deserialize;

use crate::ids::{ItemId, MessageId, SessionId};
use crate::model::{
    Delivery, Event, EventPayload, Item, ItemBody, Message, Problem, ProblemKind, Session,
    SessionFigures, Setting, Turn,
};
use crate::turns::{self, Refusal, Slot, State, Update};

mod compare;

pub use compare::{Meet, compare, compare_figures, compare_items, compare_turns, session_problem};

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
    /// The session's cost and context as its latest `usage_update`s said them.
    pub figures: SessionFigures,
}

/// An event payload as the log was read: a parsed JSON value, or the text itself.
pub trait Payload {
    fn decode(&self) -> serde_json::Result<EventPayload>;
}

impl Payload for serde_json::Value {
    /// Read from the borrowed value: a clone would copy the whole log once more.
    fn decode(&self) -> serde_json::Result<EventPayload> {
        EventPayload::deserialize(self)
    }
}

/// A payload read as text and owned (a page of the log).
impl Payload for String {
    fn decode(&self) -> serde_json::Result<EventPayload> {
        serde_json::from_str(self)
    }
}

/// A payload as the text the log holds, borrowed from the row it was read from.
impl Payload for &str {
    fn decode(&self) -> serde_json::Result<EventPayload> {
        serde_json::from_str(self)
    }
}

/// Where the projection stands in the session's one history sequence.
#[derive(Default)]
struct History {
    /// The highest seq given to a message or an item so far.
    last: i64,
    /// The item holding that seq, if the last entry is an item.
    last_item: Option<ItemId>,
}

/// An entry no later event can change (a delivered message, an item neither a tool call
/// nor the last), handed over as a windowed replay goes ([`Replayer::take_retired`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    Message(Message),
    /// Boxed: an item is several times the size of a message's handle.
    Item(Box<Item>),
}

impl Entry {
    pub fn id(&self) -> crate::ids::EntryId {
        match self {
            Entry::Message(m) => m.id.into(),
            Entry::Item(i) => i.id.into(),
        }
    }

    pub fn seq(&self) -> i64 {
        match self {
            Entry::Message(m) => m.seq,
            Entry::Item(i) => i.seq,
        }
    }
}

/// The entries a replay holds: those a later event may still change (queued messages,
/// tool calls, the last item), and, when it keeps everything (`verify`), the rest.
#[derive(Default)]
struct Entries {
    /// Whether retired entries are kept for `finish` rather than handed over.
    keep: bool,
    done_messages: Vec<Message>,
    done_items: Vec<Item>,
    retired: VecDeque<Entry>,
    /// Every message appended, to tell a second delivery from one never appended.
    appended: HashSet<MessageId>,
    queued: Vec<Message>,
    live: HashMap<ItemId, Item>,
    calls: HashMap<ToolCallId, ItemId>,
    history: History,
}

impl Entries {
    fn retire(&mut self, entry: Entry) {
        match (self.keep, entry) {
            (true, Entry::Message(m)) => self.done_messages.push(m),
            (true, Entry::Item(i)) => self.done_items.push(*i),
            (false, entry) => self.retired.push_back(entry),
        }
    }

    /// A new entry follows: the last item, unless a tool call, can no longer change.
    fn follow(&mut self) {
        if let Some(id) = self.history.last_item.take()
            && !matches!(
                self.live.get(&id),
                Some(Item {
                    body: ItemBody::ToolCall(_),
                    ..
                })
            )
            && let Some(item) = self.live.remove(&id)
        {
            self.retire(Entry::Item(Box::new(item)));
        }
    }

    fn message(&mut self, message: Message) {
        self.follow();
        self.history.last = self.history.last.max(message.seq);
        self.appended.insert(message.id);
        if message.state == Delivery::Queued {
            self.queued.push(message);
        } else {
            self.retire(Entry::Message(message));
        }
    }

    fn item(&mut self, item: Item) {
        self.follow();
        self.history.last = self.history.last.max(item.seq);
        self.history.last_item = Some(item.id);
        if let ItemBody::ToolCall(call) = &item.body {
            self.calls.insert(call.tool_call_id.clone(), item.id);
        }
        self.live.insert(item.id, item);
    }

    /// The tool call an update names.
    fn tool_call(&self, id: &ToolCallId) -> Option<&Item> {
        self.calls.get(id).and_then(|item| self.live.get(item))
    }

    /// Everything still held, in history order.
    fn drain(&mut self) -> (Vec<Message>, Vec<Item>) {
        let mut messages = std::mem::take(&mut self.done_messages);
        messages.append(&mut self.queued);
        messages.sort_by_key(|m| m.seq);
        let mut items = std::mem::take(&mut self.done_items);
        items.extend(self.live.drain().map(|(_, item)| item));
        items.sort_by_key(|i| i.seq);
        self.calls.clear();
        (messages, items)
    }
}

/// Folds a session's events into its expected rows, naming each inconsistency in the
/// log; the projection is kept even then, so the tables can still be compared.
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

/// [`replay`] one event at a time, never holding the log. [`Replayer::new`] keeps every
/// entry for `finish`; [`Replayer::windowed`] hands each over once no later event can
/// change it, so it holds the entries still open, not the history.
pub struct Replayer {
    session_id: SessionId,
    applied: i64,
    problems: Vec<Problem>,
    session: Option<Session>,
    entries: Entries,
    turns: Vec<Turn>,
    settings: Vec<Setting>,
    figures: SessionFigures,
}

impl Replayer {
    pub fn new(session_id: SessionId) -> Replayer {
        let mut replayer = Replayer::windowed(session_id);
        replayer.entries.keep = true;
        replayer
    }

    /// A replay of the whole log that hands entries over as they are done.
    pub fn windowed(session_id: SessionId) -> Replayer {
        Replayer {
            session_id,
            applied: 0,
            problems: Vec::new(),
            session: None,
            entries: Entries::default(),
            turns: Vec::new(),
            settings: Vec::new(),
            figures: SessionFigures::default(),
        }
    }

    /// The entries done since the last call, in the order they were done.
    pub fn take_retired(&mut self) -> impl Iterator<Item = Entry> + '_ {
        self.entries.retired.drain(..)
    }

    /// The log ended: every open entry goes to the next [`Replayer::take_retired`].
    pub fn close(&mut self) {
        let (messages, items) = self.entries.drain();
        let mut rest: Vec<Entry> = messages
            .into_iter()
            .map(Entry::Message)
            .chain(items.into_iter().map(|i| Entry::Item(Box::new(i))))
            .collect();
        rest.sort_by_key(Entry::seq);
        self.entries.history.last_item = None;
        self.entries.retired.extend(rest);
    }

    /// The highest history seq the log has given so far.
    pub fn last_seq(&self) -> i64 {
        self.entries.history.last
    }

    /// Folds the next event of the log in.
    pub fn apply<P: Payload>(&mut self, event: &Event<P>) {
        let session_id = self.session_id;
        let problems = &mut self.problems;
        let session = &mut self.session;
        let entries = &mut self.entries;
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
        let payload = match event.payload.decode() {
            Ok(payload) => payload,
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
        let payload_kind = payload.kind();
        match payload {
            EventPayload::SessionCreated {
                title,
                tools_host,
                cwd,
                agent,
                title_source,
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
                    title_source,
                    archived: false,
                });
            }
            EventPayload::SessionRenamed { title, source } => match session.as_mut() {
                // A title with no source was written before V16 and always took.
                Some(s) => match source {
                    None => {
                        s.title = Some(title);
                        s.title_source = None;
                    }
                    Some(source) if source.replaces(s.title_source, s.title.is_some()) => {
                        s.title = Some(title);
                        s.title_source = Some(source);
                    }
                    Some(_) => {}
                },
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
            EventPayload::SessionArchived {} | EventPayload::SessionUnarchived {} => {
                let archived = matches!(payload_kind, "session_archived");
                match session.as_mut() {
                    Some(s) => s.archived = archived,
                    None => problems.push(
                        Problem::new(
                            ProblemKind::SessionCreation,
                            format!(
                                "event {} archives or unarchives session {session_id} before it was created",
                                event.seq
                            ),
                        )
                        .with_session(session_id)
                        .with_event(event.seq),
                    ),
                }
            }
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
                if message.seq != entries.history.last + 1 {
                    problems.push(
                        Problem::new(
                            ProblemKind::HistorySequence,
                            format!(
                                "event {} puts message {} at seq {} where {} was due",
                                event.seq,
                                message.id,
                                message.seq,
                                entries.history.last + 1
                            ),
                        )
                        .with_session(session_id)
                        .with_message(message.id)
                        .with_event(event.seq),
                    );
                }
                entries.message(Message {
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
                match entries.queued.iter().position(|m| m.id == id) {
                    Some(at) => {
                        let mut message = entries.queued.remove(at);
                        message.state = Delivery::Delivered;
                        entries.retire(Entry::Message(message));
                    }
                    None if entries.appended.contains(&id) => problems.push(
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
                let read: Result<Vec<_>, _> = updates.iter().map(Update::from_value).collect();
                if let Ok(updates) = &read {
                    crate::turns::take_figures(&mut self.figures, updates);
                }
                replay_turn(event, read, &created, entries, problems);
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
                    usage: None,
                });
            }
            EventPayload::TurnEnded { id, end, usage } => {
                match self.turns.iter_mut().rev().find(|t| t.id == id) {
                    Some(turn) if turn.end.is_none() => {
                        turn.end = Some(end);
                        turn.usage = usage;
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
            // What `redact` rewrote is in the events before it: it changes no row but
            // the session's last change (above).
            EventPayload::SessionRedacted { .. } => {
                if session.is_none() {
                    problems.push(before_creation(event, session_id, "redacts"));
                }
            }
        }
    }

    /// The projection (for a windowed replay, the entries not handed over) and problems.
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
        let (messages, items) = self.entries.drain();
        let turns = self.turns;
        let mut settings = self.settings;
        settings.sort_by(|a, b| (&a.method, &a.key).cmp(&(&b.method, &b.key)));
        (
            self.session.map(|session| Projection {
                session,
                messages,
                items,
                turns,
                settings,
                figures: self.figures,
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
    read: Result<Vec<Update>, Refusal>,
    created: &[crate::model::CreatedItem],
    entries: &mut Entries,
    problems: &mut Vec<Problem>,
) {
    let about = |kind, detail: String| {
        Problem::new(kind, detail)
            .with_session(event.session_id)
            .with_event(event.seq)
    };
    let batch = match read {
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
        tail: entries
            .history
            .last_item
            .and_then(|id| entries.live.get(&id))
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
        if let Some(Item {
            id: item,
            body: ItemBody::ToolCall(call),
            ..
        }) = entries.tool_call(&id)
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
                if made.seq != entries.history.last + 1 {
                    problems.push(
                        about(
                            ProblemKind::HistorySequence,
                            format!(
                                "event {} puts item {} at seq {} where {} was due",
                                event.seq,
                                made.id,
                                made.seq,
                                entries.history.last + 1
                            ),
                        )
                        .with_item(made.id),
                    );
                }
                entries.item(Item {
                    id: made.id,
                    session_id: event.session_id,
                    seq: made.seq,
                    body,
                    created_at: event.created_at.clone(),
                    updated_at: event.created_at.clone(),
                });
            }
            Slot::Stored(id) => {
                if let Some(item) = entries.live.get_mut(&id) {
                    item.body = body;
                    item.updated_at = event.created_at.clone();
                }
            }
        }
    }
}
