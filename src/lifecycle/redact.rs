//! `sessionstore redact`: secrets already stored replaced by `[REDACTED:<kind>]` in
//! each session's events, rows and search entries, in place. Like erasure, the
//! documented exception to the append-only log: one `secure_delete` write per session
//! (`db::redact`) with an event counting what went (never a value), then the index
//! merged, `VACUUM` and the WAL truncated. Attachment files are never rewritten.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use super::{Progress, Run};
use crate::config::Database;
use crate::db::{Db, append, queries, redact as rewrite, search};
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::{Event, EventPayload};
use crate::store::{Store, blocking};

/// How [`Store::redact_stored`] runs.
#[derive(Debug, Clone, Default)]
pub struct RedactOptions {
    /// The sessions to look through; none means every session.
    pub sessions: Vec<SessionId>,
    /// `Run::DryRun` only reports (a read-only store is then enough).
    pub run: Run,
    pub progress: Progress,
}

/// What `redact` found and did; serialized, `redact --json`'s document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedactReport {
    /// The sessions that held secrets: redacted, or in a dry run to be.
    pub sessions: Vec<RedactedSession>,
    pub skipped: Vec<SkippedSession>,
    /// Earlier backups of this database (`<db>.v<N>.bak`): they still hold the secrets.
    pub backups: Vec<PathBuf>,
    #[serde(skip)]
    pub dry_run: bool,
    /// Whether the WAL was truncated (SQLite) or the tables vacuumed (PostgreSQL) after
    /// the rewrite; `false` when a reader held an old snapshot. True if nothing changed.
    #[serde(skip)]
    pub erased: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RedactedSession {
    pub id: SessionId,
    /// How many secrets of each kind (its id, as in `[REDACTED:<kind>]`).
    pub redacted: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedSession {
    pub id: SessionId,
    /// Why, in a few words.
    pub reason: String,
}

/// Why a session was left as it was.
const OPEN_ELSEWHERE: &str = "open in a running proxy";
const LOG_MISMATCH: &str = "its rows disagree with its event log: run verify";

/// Secrets of each kind a rewrite took out: new payloads' marks less the old ones',
/// summed over the session (a streamed message's marks may move between events).
#[derive(Debug, Default)]
struct Tally(BTreeMap<crate::redact::Kind, i64>);

impl Tally {
    fn add(&mut self, old: &str, new: &str) {
        for kind in crate::redact::marks(new) {
            *self.0.entry(kind).or_default() += 1;
        }
        for kind in crate::redact::marks(old) {
            *self.0.entry(kind).or_default() -= 1;
        }
    }

    fn counts(&self) -> BTreeMap<String, u64> {
        self.0
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(kind, n)| (kind.id().to_owned(), *n as u64))
            .collect()
    }
}

/// One event's payload redacted by itself, as export does, and whether it changed;
/// `None` when it does not parse (left for `verify` to name).
fn alone(event: &Event<String>) -> Option<(Value, bool)> {
    let mut payload: Value = serde_json::from_str(&event.payload).ok()?;
    let changed = crate::redact::payload(&mut payload);
    Some((payload, changed))
}

/// Events a walk gives back in log order, each with its new payload if it changed.
type Ready = Vec<(Event<String>, Option<String>)>;

/// The log walked as the recorder redacts it: a message streamed across several
/// `turn_recorded` events is redacted as one text (`redact::Streams`), so a secret split
/// across them is found whole. The event with the open message's last chunk is held
/// until the next one, which continues the message or ends it (the tail then stays in
/// that chunk, as the recorder puts it); [`QUIET`] events wait behind it. So at most
/// one `turn_recorded` event and a few small ones are held, never a whole message.
#[derive(Default)]
struct Streamed {
    streams: crate::redact::Streams<Value>,
    held: Option<Held>,
    /// [`QUIET`] events after the held one, given back after it in order.
    after: Vec<(Event<String>, Option<String>)>,
    /// Given the texts of the chunks of each event made ready, when a scan compares.
    agree: Option<Agree>,
}

/// Event kinds that change no history entry: a message goes on across them (`projection`).
const QUIET: &[&str] = &[
    "setting_recorded",
    "session_renamed",
    "session_archived",
    "session_unarchived",
    "agent_bound",
];

/// At most this many such events are held behind a message; past that it ends.
const AFTER_MOST: usize = 64;

/// A `turn_recorded` event held back, its updates redacted so far.
struct Held {
    event: Event<String>,
    /// Its payload, `updates` taken out.
    doc: Value,
    updates: Vec<Value>,
    /// Its updates as stored, to tell whether they changed.
    stored: Vec<Value>,
    /// Whether anything beside its updates changed.
    changed: bool,
}

impl Held {
    fn done(self, agree: Option<&mut Agree>) -> (Event<String>, Option<String>) {
        let Held {
            event,
            mut doc,
            mut updates,
            stored,
            changed,
        } = self;
        if let Some(agree) = agree {
            agree.give(true, &mut updates);
        }
        if !changed && updates == stored {
            return (event, None);
        }
        if let Some(slot) = doc.get_mut("updates") {
            *slot = Value::Array(updates);
        }
        let text = doc.to_string();
        (event, Some(text))
    }
}

impl Streamed {
    /// The next event of the log (`None`: it ended); gives back the events now ready.
    fn next(&mut self, event: Option<Event<String>>) -> Ready {
        let doc = event
            .as_ref()
            .filter(|e| e.kind == "turn_recorded")
            .and_then(|e| serde_json::from_str::<Value>(&e.payload).ok());
        self.next_read(event, doc)
    }

    /// [`Streamed::next`] with the payload read already (`None`: unparsed, or not read).
    fn next_read(&mut self, event: Option<Event<String>>, doc: Option<Value>) -> Ready {
        let mut ready = Vec::with_capacity(2);
        let Some(event) = event else {
            self.end(&mut ready);
            return ready;
        };
        let recorded = match event.kind == "turn_recorded" {
            true => doc.filter(|doc| doc.get("updates").is_some_and(Value::is_array)),
            false => None,
        };
        let Some(mut doc) = recorded else {
            let payload = alone(&event).and_then(|(doc, changed)| changed.then(|| doc.to_string()));
            if self.held.is_some()
                && QUIET.contains(&event.kind.as_str())
                && self.after.len() < AFTER_MOST
            {
                self.after.push((event, payload));
                return ready;
            }
            self.end(&mut ready);
            ready.push((event, payload));
            return ready;
        };
        let mut changed = false;
        let mut batch = Vec::new();
        if let Some(map) = doc.as_object_mut() {
            for (key, v) in map.iter_mut() {
                match (key.as_str(), v) {
                    ("updates", Value::Array(updates)) => batch = std::mem::take(updates),
                    (_, v) => changed |= crate::redact::value(v),
                }
            }
        }
        let stored = batch.clone();
        let mut none: [Value; 0] = [];
        let before = match &mut self.held {
            Some(held) => &mut held.updates[..],
            None => &mut none[..],
        };
        // The open message's last chunk is in the held event, so its tail never needs
        // a chunk of its own.
        let (updates, _) = self.streams.pass_after(before, batch);
        if let Some(held) = self.held.take() {
            ready.push(held.done(self.agree.as_mut()));
            ready.append(&mut self.after);
        }
        self.held = Some(Held {
            event,
            doc,
            updates,
            stored,
            changed,
        });
        ready
    }

    /// The open message ended: its tail goes into its last chunk, in the held event.
    fn end(&mut self, ready: &mut Ready) {
        if let Some(mut held) = self.held.take() {
            self.streams.end(&mut held.updates);
            ready.push(held.done(self.agree.as_mut()));
            ready.append(&mut self.after);
        }
    }
}

/// Whether the walk event by event and the streamed one give the same agent text
/// (they differ only when a secret was split across events). Holds only the text one
/// walk has given beyond the other.
#[derive(Default)]
struct Agree {
    alone: Vec<u8>,
    streamed: Vec<u8>,
    differ: bool,
}

impl Agree {
    /// The text of each agent message or thought chunk of a batch of updates.
    fn give(&mut self, streamed: bool, updates: &mut [Value]) {
        for u in updates.iter_mut() {
            if self.differ {
                return;
            }
            let Some(text) = crate::redact::Chunk::text_mut(u) else {
                continue;
            };
            match streamed {
                true => self.streamed.extend_from_slice(text.as_bytes()),
                false => self.alone.extend_from_slice(text.as_bytes()),
            }
            let n = self.alone.len().min(self.streamed.len());
            if self.alone[..n] != self.streamed[..n] {
                self.differ = true;
                self.alone = Vec::new();
                self.streamed = Vec::new();
                return;
            }
            self.alone.drain(..n);
            self.streamed.drain(..n);
        }
    }

    /// Whether the two differ once both walks ended.
    fn differ(&self) -> bool {
        self.differ || self.alone != self.streamed
    }
}

/// Lifecycle: secrets already stored, redacted in place.
impl Store {
    /// Replaces the secrets stored in the sessions named (all when none) by
    /// `[REDACTED:<kind>]`, one write per session (see the module doc). Skipped: a
    /// session a running proxy holds, one whose rows disagree with its log. An unknown
    /// id fails before anything changes. Each event is redacted by itself, as export
    /// does, unless a secret runs across a streamed message's batches (then streamed).
    pub async fn redact_stored(&self, options: RedactOptions) -> Result<RedactReport> {
        let RedactOptions {
            sessions,
            run,
            progress,
        } = options;
        let dry_run = run.is_dry();
        let db = self.db().clone();
        let ids = blocking({
            let db = db.clone();
            move || {
                db.read(|tx| match sessions.is_empty() {
                    true => Ok(queries::list_sessions(tx)?
                        .into_iter()
                        .map(|s| s.id)
                        .collect::<Vec<_>>()),
                    false => {
                        let mut unique: Vec<SessionId> = Vec::with_capacity(sessions.len());
                        for id in &sessions {
                            queries::get_session(tx, id)?;
                            if !unique.contains(id) {
                                unique.push(*id);
                            }
                        }
                        Ok(unique)
                    }
                })
            }
        })
        .await?;
        let mut report = RedactReport {
            sessions: Vec::new(),
            skipped: Vec::new(),
            backups: Vec::new(),
            dry_run,
            erased: true,
        };
        let total = ids.len() as u64;
        let mut rewritten = false;
        for (n, id) in ids.into_iter().enumerate() {
            progress.step("sessions looked through", n as u64, total);
            // Held while its session is rewritten, so no proxy opens it meanwhile.
            let claim = match dry_run {
                true => match self.session_claimed(id).await? {
                    true => None,
                    false => Some(None),
                },
                false => match self.claim_session(id).await {
                    Ok(claim) => Some(Some(claim)),
                    Err(Error::SessionOpenElsewhere { .. }) => None,
                    Err(e) => return Err(e),
                },
            };
            let Some(claim) = claim else {
                report.skipped.push(SkippedSession {
                    id,
                    reason: OPEN_ELSEWHERE.to_owned(),
                });
                continue;
            };
            let db = db.clone();
            let outcome = blocking(move || scan(&db, &id)).await;
            let (counts, streamed) = match outcome {
                Ok(found) => found,
                Err(Error::LogMismatch { .. }) => {
                    report.skipped.push(SkippedSession {
                        id,
                        reason: LOG_MISMATCH.to_owned(),
                    });
                    continue;
                }
                Err(e) => return Err(e),
            };
            if counts.is_empty() {
                continue;
            }
            let counts = match dry_run {
                true => counts,
                false => {
                    let db = self.db().clone();
                    match blocking(move || write(&db, &id, streamed)).await {
                        Ok((counts, erased)) => {
                            report.erased &= erased;
                            rewritten = true;
                            counts
                        }
                        // Found while replaying the rewritten log: the write rolled back.
                        Err(Error::LogMismatch { .. }) => {
                            report.skipped.push(SkippedSession {
                                id,
                                reason: LOG_MISMATCH.to_owned(),
                            });
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                }
            };
            drop(claim);
            report.sessions.push(RedactedSession {
                id,
                redacted: counts,
            });
        }
        progress.step("sessions looked through", total, total);
        if rewritten {
            // The rewrite took the secrets' terms out of the index, but its segments
            // keep them until they are merged: merged once, for every session.
            let db = self.db().clone();
            let erased = blocking(move || {
                let ((), merged) = db.erase(search::purge_deleted)?;
                Ok(db.rewrite_pages()? && merged)
            })
            .await?;
            report.erased &= erased;
        }
        if let Database::Sqlite(path) = &self.config().database {
            report.backups = crate::db::schema::backups(path);
        }
        Ok(report)
    }
}

/// The session's rows checked against its log, then its secrets counted by kind, and
/// whether it must be walked streamed. The log is read a second time, both ways, only
/// when a streamed message goes on from one event into another.
fn scan(db: &Db, id: &SessionId) -> Result<(BTreeMap<String, u64>, bool)> {
    db.read(|tx| {
        let session = queries::get_session(tx, id)?;
        crate::db::verify::check_session(tx, &session)?;
        let mut tally = Tally::default();
        let mut spans = Spans::default();
        rewrite::each_event_paged(tx, id, |event| {
            let Ok(mut doc) = serde_json::from_str::<Value>(&event.payload) else {
                spans.other(&event);
                return Ok(());
            };
            spans.see(&event, &doc);
            if crate::redact::payload(&mut doc) {
                tally.add(&event.payload, &doc.to_string());
            }
            Ok(())
        })?;
        match spans.found {
            false => Ok((tally.counts(), false)),
            true => scan_both(tx, id),
        }
    })
}

/// Whether a message may go on from one `turn_recorded` event into a later one (last
/// and first chunks of one kind and message id, only [`QUIET`] events between); errs
/// towards yes.
#[derive(Default)]
struct Spans {
    last: Option<(String, Value)>,
    found: bool,
}

impl Spans {
    fn key(update: Option<&Value>) -> Option<(String, Value)> {
        let update = update?;
        let kind = update.get("sessionUpdate")?.as_str()?;
        matches!(kind, "agent_message_chunk" | "agent_thought_chunk").then(|| {
            (
                kind.to_owned(),
                update.get("messageId").cloned().unwrap_or(Value::Null),
            )
        })
    }

    fn see(&mut self, event: &Event<String>, doc: &Value) {
        let updates = match doc.get("updates") {
            Some(Value::Array(updates)) if event.kind == "turn_recorded" => updates,
            _ => return self.other(event),
        };
        if self.last.is_some() && self.last == Self::key(updates.first()) {
            self.found = true;
        }
        self.last = Self::key(updates.last());
    }

    fn other(&mut self, event: &Event<String>) {
        if !QUIET.contains(&event.kind.as_str()) {
            self.last = None;
        }
    }
}

/// [`scan`]'s counts and choice, from the log walked both ways at once: streamed when
/// the two walks' texts of agent messages and thoughts differ ([`Agree`]).
fn scan_both(tx: &crate::db::Tx<'_>, id: &SessionId) -> Result<(BTreeMap<String, u64>, bool)> {
    let mut alone_tally = Tally::default();
    let mut streamed_tally = Tally::default();
    let mut walk = Streamed {
        agree: Some(Agree::default()),
        ..Streamed::default()
    };
    let mut take = |ready: Ready| {
        for (event, payload) in ready {
            if let Some(new) = payload {
                streamed_tally.add(&event.payload, &new);
            }
        }
    };
    rewrite::each_event_paged(tx, id, |event| {
        // Read once for both walks.
        let read = serde_json::from_str::<Value>(&event.payload).ok();
        let mut original = None;
        if let Some(mut doc) = read {
            let recorded = event.kind == "turn_recorded";
            if recorded {
                original = Some(doc.clone());
            }
            if crate::redact::payload(&mut doc) {
                alone_tally.add(&event.payload, &doc.to_string());
            }
            if recorded
                && let Some(Value::Array(updates)) = doc.get_mut("updates")
                && let Some(agree) = walk.agree.as_mut()
            {
                agree.give(false, updates);
            }
        }
        take(walk.next_read(Some(event), original));
        Ok(())
    })?;
    take(walk.next(None));
    let differ = walk.agree.as_ref().is_some_and(Agree::differ);
    Ok(match differ {
        true => (streamed_tally.counts(), true),
        false => (alone_tally.counts(), false),
    })
}

/// The session rewritten in one write with the event recording it; what went, and
/// whether the WAL was truncated after.
fn write(db: &Db, id: &SessionId, streamed: bool) -> Result<(BTreeMap<String, u64>, bool)> {
    db.erase(|tx| {
        let mut tally = Tally::default();
        let mut walk = Streamed::default();
        rewrite::rewrite_session(tx, id, |event| {
            let ready = match (streamed, event) {
                (true, event) => walk.next(event),
                (false, None) => Vec::new(),
                (false, Some(event)) => {
                    let payload =
                        alone(&event).and_then(|(doc, changed)| changed.then(|| doc.to_string()));
                    vec![(event, payload)]
                }
            };
            for (event, payload) in &ready {
                if let Some(new) = payload {
                    tally.add(&event.payload, new);
                }
            }
            ready
        })?;
        let counts = tally.counts();
        if !counts.is_empty() {
            let at = append::now();
            append::append_event(
                tx,
                id,
                &EventPayload::SessionRedacted {
                    redacted: counts.clone(),
                },
                &at,
            )?;
        }
        Ok(counts)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::EventSeq;
    use crate::redact::fresh::{Rng, fresh};
    use crate::redact::{Chunk, Kind, Streams};

    fn event(seq: i64, kind: &str, payload: Value) -> Event<String> {
        Event {
            seq: EventSeq(seq),
            session_id: SessionId::new(),
            session_seq: seq,
            kind: kind.to_owned(),
            payload: payload.to_string(),
            created_at: String::new(),
        }
    }

    fn chunk(id: &str, text: &str) -> Value {
        serde_json::json!({"sessionUpdate": "agent_message_chunk", "messageId": id,
            "content": {"type": "text", "text": text}})
    }

    fn texts(updates: &mut [Value]) -> String {
        updates
            .iter_mut()
            .filter_map(|u| Chunk::text_mut(u).map(|t| t.clone()))
            .collect()
    }

    /// A message streamed across two `turn_recorded` events, with a secret split
    /// across them, comes out of the walk as the recorder (`record_from`) would have
    /// stored it: the same chunks, the tail moved into the message's last chunk, and
    /// an event of another kind ending the message.
    #[test]
    fn a_walk_streams_a_message_across_events_as_the_recorder_does() {
        let (secret, _) = fresh(Kind::AnthropicApiKey, &mut Rng::new());
        let (a, b) = secret.split_at(secret.len() / 2);
        let batches = vec![
            vec![chunk("m1", "it starts: "), chunk("m1", a)],
            vec![chunk("m1", b), chunk("m1", " and goes on")],
            vec![chunk("m2", "another")],
        ];
        let mut log: Vec<Event<String>> = batches
            .iter()
            .enumerate()
            .map(|(i, u)| {
                event(
                    i as i64 + 1,
                    "turn_recorded",
                    serde_json::json!({"kind": "turn_recorded", "updates": u, "items": []}),
                )
            })
            .collect();
        // A setting between the halves leaves the message going on (its item joins
        // across it); a user's message before the last batch ends it.
        log.insert(
            1,
            event(
                10,
                "setting_recorded",
                serde_json::json!({"kind": "setting_recorded", "setting": {}}),
            ),
        );
        log.insert(
            3,
            event(
                11,
                "message_appended",
                serde_json::json!({"kind": "message_appended", "displayText": "hi"}),
            ),
        );
        // The recorder, a batch held until the next, the user's message ending the
        // message.
        let mut streams = Streams::<Value>::default();
        let mut expected: Vec<Vec<Value>> = Vec::new();
        let mut held: Vec<Value> = Vec::new();
        for (i, batch) in batches.into_iter().enumerate() {
            if i == 2 {
                streams.end(&mut held);
            }
            let (next, added) = streams.pass_after(&mut held, batch);
            assert_eq!(added, 0);
            expected.push(std::mem::replace(&mut held, next));
        }
        streams.end(&mut held);
        expected.push(held);
        expected.remove(0);

        let mut walk = Streamed::default();
        let mut ready = Vec::new();
        for e in log {
            ready.extend(walk.next(Some(e)));
        }
        ready.extend(walk.next(None));
        let seqs: Vec<i64> = ready.iter().map(|(e, _)| e.seq.0).collect();
        assert_eq!(seqs, [1, 10, 2, 11, 3], "every event, in order");
        let mut got: Vec<Vec<Value>> = Vec::new();
        let mut tally = Tally::default();
        for (event, payload) in &ready {
            let text = payload.as_deref().unwrap_or(&event.payload);
            assert!(!text.contains(a) && !text.contains(b), "{text}");
            if let Some(new) = payload {
                tally.add(&event.payload, new);
            }
            let mut doc: Value = serde_json::from_str(text).unwrap();
            if let Some(Value::Array(updates)) = doc.get_mut("updates") {
                got.push(std::mem::take(updates));
            }
        }
        assert_eq!(got, expected);
        assert_eq!(
            texts(&mut got[0]) + &texts(&mut got[1]),
            "it starts: [REDACTED:anthropic-api-key] and goes on"
        );
        assert_eq!(ready[1].1, None, "the setting is left as it was");
        assert_eq!(ready[3].1, None, "the user's message is left as it was");
        assert_eq!(
            tally.counts(),
            BTreeMap::from([("anthropic-api-key".to_owned(), 1)])
        );
    }

    /// The two walks agree on a log whose secrets each sit in one event, and differ
    /// once one is split across two.
    #[test]
    fn the_walks_differ_only_when_a_secret_runs_across_events() {
        let (secret, _) = fresh(Kind::GithubToken, &mut Rng::new());
        let (a, b) = secret.split_at(secret.len() / 2);
        let differ = |batches: Vec<Vec<Value>>| {
            let mut walk = Streamed {
                agree: Some(Agree::default()),
                ..Streamed::default()
            };
            for (i, u) in batches.into_iter().enumerate() {
                let e = event(
                    i as i64 + 1,
                    "turn_recorded",
                    serde_json::json!({"kind": "turn_recorded", "updates": u, "items": []}),
                );
                let (mut doc, _) = alone(&e).unwrap();
                if let Some(Value::Array(updates)) = doc.get_mut("updates") {
                    walk.agree.as_mut().unwrap().give(false, updates);
                }
                walk.next(Some(e));
            }
            walk.next(None);
            walk.agree.unwrap().differ()
        };
        let whole = format!("{a}{b}");
        assert!(!differ(vec![
            vec![chunk("m", "say "), chunk("m", &whole)],
            vec![chunk("m", " plain words")],
        ]));
        assert!(differ(vec![
            vec![chunk("m", "say "), chunk("m", a)],
            vec![chunk("m", b), chunk("m", " plain words")],
        ]));
    }

    /// A message going on into a later event is noticed across a quiet event, and not
    /// across a user's message or into another message.
    #[test]
    fn a_message_going_on_into_a_later_event_is_noticed() {
        let recorded = |seq, u: Vec<Value>| {
            event(
                seq,
                "turn_recorded",
                serde_json::json!({"kind": "turn_recorded", "updates": u, "items": []}),
            )
        };
        let found = |log: Vec<Event<String>>| {
            let mut spans = Spans::default();
            for e in &log {
                spans.see(e, &serde_json::from_str(&e.payload).unwrap());
            }
            spans.found
        };
        let setting = event(
            2,
            "setting_recorded",
            serde_json::json!({"kind": "setting_recorded"}),
        );
        let user = event(
            2,
            "message_appended",
            serde_json::json!({"kind": "message_appended"}),
        );
        let a = || recorded(1, vec![chunk("m", "a")]);
        assert!(found(vec![
            a(),
            setting,
            recorded(3, vec![chunk("m", "b")])
        ]));
        assert!(!found(vec![a(), user, recorded(3, vec![chunk("m", "b")])]));
        assert!(!found(vec![a(), recorded(3, vec![chunk("n", "b")])]));
    }
}
