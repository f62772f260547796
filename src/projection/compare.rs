//! A projection compared with the tables' rows, each difference a `Problem`.

use std::collections::HashMap;

use crate::ids::{MessageId, SessionId};
use crate::model::{Item, Message, Problem, ProblemKind, Session, SessionFigures, Setting, Turn};

use super::{Entry, Projection};

/// How an entry's row differs from what the log says it holds, if it does.
pub fn entry_problem(session: SessionId, have: &Entry, want: &Entry) -> Option<Problem> {
    if have == want {
        return None;
    }
    Some(match (have, want) {
        (Entry::Message(have), Entry::Message(want)) => Problem::new(
            ProblemKind::ChangedRow,
            format!(
                "message {} differs from its event log ({})",
                want.id,
                message_differences(have, want)
            ),
        )
        .with_session(session)
        .with_message(want.id),
        (Entry::Item(have), Entry::Item(want)) if have.id == want.id => Problem::new(
            ProblemKind::ChangedRow,
            format!(
                "{} item {} differs from its event log ({})",
                want.body.kind(),
                want.id,
                item_differences(have, want)
            ),
        )
        .with_session(session)
        .with_item(want.id),
        _ => Problem::new(
            ProblemKind::ChangedRow,
            format!(
                "the history entry at seq {} is {} in the table but {} in the event log",
                want.seq(),
                entry_name(have),
                entry_name(want)
            ),
        )
        .with_session(session),
    })
}

/// Rows and the log's finished entries met by id, whichever comes first waiting for
/// the other: the log mostly finishes an entry just after its row is read, so what
/// waits is the few entries the log keeps open. `verify` meets every row.
pub struct Meet {
    session: SessionId,
    rows: HashMap<crate::ids::EntryId, Entry>,
    logged: HashMap<crate::ids::EntryId, Entry>,
}

impl Meet {
    pub fn new(session: SessionId) -> Meet {
        Meet {
            session,
            rows: HashMap::new(),
            logged: HashMap::new(),
        }
    }

    /// A row: compared now if the log is done with its entry, else kept until it is.
    pub fn row(&mut self, row: &Entry) -> Option<Problem> {
        match self.logged.remove(&row.id()) {
            Some(want) => entry_problem(self.session, row, &want),
            None => {
                self.rows.insert(row.id(), row.clone());
                None
            }
        }
    }

    /// An entry the log is done with.
    pub fn logged(&mut self, want: Entry) -> Option<Problem> {
        match self.rows.remove(&want.id()) {
            Some(row) => entry_problem(self.session, &row, &want),
            None => {
                self.logged.insert(want.id(), want);
                None
            }
        }
    }

    /// What never met, in history order.
    pub fn finish(self) -> Vec<Problem> {
        let session = self.session;
        let mut problems: Vec<(i64, Problem)> = self
            .logged
            .values()
            .map(|want| (want.seq(), missing_entry(session, want)))
            .chain(
                self.rows
                    .values()
                    .map(|row| (row.seq(), unlogged_entry(session, row))),
            )
            .collect();
        problems.sort_by_key(|(seq, _)| *seq);
        problems.into_iter().map(|(_, p)| p).collect()
    }
}

/// A row of the delivered history that no event records ([`Entry`] counterpart of
/// the `UnloggedRow` problems of [`compare`]).
pub fn unlogged_entry(session: SessionId, have: &Entry) -> Problem {
    let problem = Problem::new(
        ProblemKind::UnloggedRow,
        format!(
            "{} is in the table but no event records it",
            entry_name(have)
        ),
    )
    .with_session(session);
    match have {
        Entry::Message(m) => problem.with_message(m.id),
        Entry::Item(i) => problem.with_item(i.id),
    }
}

/// An entry the log delivers that has no row.
pub fn missing_entry(session: SessionId, want: &Entry) -> Problem {
    let problem = Problem::new(
        ProblemKind::MissingRow,
        format!(
            "{} is in the event log but not in the table",
            entry_name(want)
        ),
    )
    .with_session(session);
    match want {
        Entry::Message(m) => problem.with_message(m.id),
        Entry::Item(i) => problem.with_item(i.id),
    }
}

fn entry_name(entry: &Entry) -> String {
    match entry {
        Entry::Message(m) => format!("message {}", m.id),
        Entry::Item(i) => format!("{} item {}", i.body.kind(), i.id),
    }
}

/// The names of the fields that differ, joined for a problem's words.
fn differing(checks: &[(bool, &str)]) -> String {
    checks
        .iter()
        .filter(|(differs, _)| *differs)
        .map(|(_, name)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn item_differences(have: &Item, want: &Item) -> String {
    let checks = [
        (have.seq != want.seq, "seq"),
        (have.body.kind() != want.body.kind(), "kind"),
        (have.body != want.body, "content"),
        (have.created_at != want.created_at, "created time"),
        (have.updated_at != want.updated_at, "updated time"),
    ];
    differing(&checks)
}

/// Names every way the items table differs from what the event log says.
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
            Some(have) if have != want => problems.push(about(
                ProblemKind::ChangedRow,
                want,
                format!(
                    "{} item {} differs from its event log ({})",
                    want.body.kind(),
                    want.id,
                    item_differences(have, want)
                ),
            )),
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

/// How a session's row differs from what its log says, if it does.
pub fn session_problem(session: &Session, want: &Session) -> Option<Problem> {
    let fields = differing(&[
        (session.title != want.title, "title"),
        (session.title_source != want.title_source, "title source"),
        (session.archived != want.archived, "archived"),
        (session.tools_host != want.tools_host, "tools host"),
        (session.cwd != want.cwd, "working directory"),
        (session.agent != want.agent, "agent"),
        (session.created_at != want.created_at, "created time"),
        (session.updated_at != want.updated_at, "updated time"),
    ]);
    (!fields.is_empty()).then(|| {
        Problem::new(
            ProblemKind::ChangedRow,
            format!("table row differs from its event log ({fields})"),
        )
        .with_session(session.id)
    })
}

/// Names every way the tables' rows differ from what the event log says they should be.
pub fn compare(session: &Session, rows: &[Message], expected: &Projection) -> Vec<Problem> {
    let mut problems = Vec::new();
    let about = |kind, message: MessageId, detail: String| {
        Problem::new(kind, detail)
            .with_session(session.id)
            .with_message(message)
    };
    problems.extend(session_problem(session, &expected.session));
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
    differing(&checks)
}

/// Names a session's cost and context figures if they differ from its log's.
pub fn compare_figures(
    session: &Session,
    figures: &SessionFigures,
    expected: &Projection,
) -> Option<Problem> {
    (*figures != expected.figures).then(|| {
        Problem::new(
            ProblemKind::ChangedRow,
            format!(
                "session {}'s cost and context differ from its event log's",
                session.id
            ),
        )
        .with_session(session.id)
    })
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
