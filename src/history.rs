//! Histories of any length: a long `record` input written in batches inside one
//! write, each batch its own `turn_recorded` event, so what is held at once is one
//! batch and not the whole input; and a replay from a point (`Replay`: the last N
//! entries, or from an entry's id), which says where it starts (`Partial`); a restore
//! reads the tables forward and never compares them with the log (`verify`'s work).
//! It runs no SQL itself (that is `db`) and reads no attachment file.

use std::collections::HashSet;

use crate::turns::Update;

use crate::db::sql::Tx;
use crate::db::turns::{Recorded, Touched, record_batch};
use crate::db::{entries, queries, turns};
use crate::dispatch::Memo;
use crate::error::{Error, Result};
use crate::ids::{EntryId, ItemId, SessionId};
use crate::model::Delivery;
use crate::replay::{RestoreStream, Sink};
use crate::store::{Store, blocking};

/// Where a replay starts. Entries are counted as `restore --format acp` shows them:
/// the delivered messages and the recorded items, in the history's one order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Replay {
    /// The whole history.
    #[default]
    Whole,
    /// The last N entries (all of them when there are fewer).
    Tail(u64),
    /// From this entry (a delivered message or a recorded item), inclusive.
    From(EntryId),
    /// From a `messageId` as an ACP client saw it in a replay (see
    /// [`Replay::from_acp_message`]), inclusive.
    AcpMessage(String),
}

impl Replay {
    /// The whole history (`Replay::default()`).
    pub fn whole() -> Replay {
        Replay::Whole
    }

    /// A replay from a `messageId` as an ACP client saw it in a replay: a user
    /// message's id, which is the store's own, or the `messageId` an agent's
    /// recorded message or thought carried, which is the agent's; the store's
    /// id of a recorded item is taken too. It is found in the history when the
    /// replay starts.
    pub fn from_acp_message(message_id: &str) -> Replay {
        Replay::AcpMessage(message_id.to_owned())
    }
}

pub use crate::replay::Partial;

/// How many updates one `turn_recorded` event of a long record holds at most: small
/// enough that one batch (its updates, their merge and its event's payload) is a few
/// tens of KiB, and that a replay from a point, which replays the whole event that
/// made its first entry, replays little more than it hands on (at 1,024, a tail of
/// 100 cost six times a 100-item session's whole restore; at 128, 1.3 times); big
/// enough that a million lines make under 8,000 events.
pub const RECORD_BATCH: usize = 128;

/// Where the updates of a long [`Store::record`] come from, read a batch at a time.
/// A write may run more than once (PostgreSQL runs a transaction again when it lost
/// a race), so `batches` hands the updates over from the first one every time it is
/// called.
pub trait UpdateSource: Send + 'static {
    /// Calls `each` with the updates in order, in batches of at most
    /// [`RECORD_BATCH`], stopping at the first error `each` returns.
    fn batches(&mut self, each: &mut dyn FnMut(Vec<Update>) -> Result<()>) -> Result<()>;
}

/// A source already in a box.
impl UpdateSource for Box<dyn UpdateSource> {
    fn batches(&mut self, each: &mut dyn FnMut(Vec<Update>) -> Result<()>) -> Result<()> {
        (**self).batches(each)
    }
}

/// Updates already in memory, recorded as a long input is: a batch of at most
/// [`RECORD_BATCH`] at a time, each with its own `turn_recorded` event.
#[derive(Debug, Clone, PartialEq)]
pub struct Batches(pub Vec<Update>);

impl UpdateSource for Batches {
    fn batches(&mut self, each: &mut dyn FnMut(Vec<Update>) -> Result<()>) -> Result<()> {
        for batch in self.0.chunks(RECORD_BATCH) {
            each(batch.to_vec())?;
        }
        Ok(())
    }
}

/// Updates as the JSON an agent sent (the `update` of each `session/update`), each
/// read as `record` reads an input line.
#[derive(Debug, Clone, PartialEq)]
pub struct Values(pub Vec<serde_json::Value>);

/// What [`Store::record`] records: a batch in memory (a `Vec` of anything that is
/// an [`Update`]), one as the JSON an agent sent ([`Values`]), or a long input read
/// a batch at a time (any [`UpdateSource`], such as [`Batches`]).
pub struct Updates(pub(crate) Input);

pub(crate) enum Input {
    Batch(Vec<Update>),
    Values(Vec<serde_json::Value>),
    Source(Box<dyn UpdateSource>),
}

impl<U: Into<Update>> From<Vec<U>> for Updates {
    fn from(updates: Vec<U>) -> Updates {
        Updates(Input::Batch(updates.into_iter().map(Into::into).collect()))
    }
}

impl From<Values> for Updates {
    fn from(values: Values) -> Updates {
        Updates(Input::Values(values.0))
    }
}

impl<S: UpdateSource> From<S> for Updates {
    fn from(source: S) -> Updates {
        Updates(Input::Source(Box::new(source)))
    }
}

/// The items a record touched, each listed once in the order first touched, without
/// a set of every id: within a batch the ids are distinct already, and a later batch
/// can only touch again the last item made (a chunk continuing it), a tool call, or
/// an item from before this record, which are the ones remembered.
#[derive(Default)]
struct ItemsTouched {
    ids: Vec<ItemId>,
    again: HashSet<ItemId>,
    last_made: Option<ItemId>,
}

impl ItemsTouched {
    fn add(&mut self, t: Touched) {
        if t.created {
            self.ids.push(t.id);
            self.last_made = Some(t.id);
            if t.tool_call {
                self.again.insert(t.id);
            }
        } else if self.last_made != Some(t.id) && self.again.insert(t.id) {
            self.ids.push(t.id);
        }
    }
}

/// Long histories: replay from a point (the last entries, or from an id) and
/// recording a long input in batches.
impl Store {
    /// Records ACP session updates from the agent (its messages, thoughts, tool
    /// calls, plans and session-level updates, and updates of kinds the schema does
    /// not know, kept opaque) in one write, all or nothing: a refused update (a
    /// `user_message_chunk`, a kind that is not history, an update for a tool call
    /// never recorded) stores nothing, and is `Error::UpdateRefused` with its place
    /// in the input (numbered from 1). `updates` is one of:
    ///
    /// - a `Vec` of updates (or of what converts into one): one batch, written with
    ///   one event;
    /// - [`Values`], the JSON an agent sent (the `update` of each
    ///   `session/update`), each read as `record` reads an input line, one batch;
    /// - any [`UpdateSource`] (such as [`Batches`]), a long input
    ///   read and written a batch of at most [`RECORD_BATCH`] at a time,
    ///   each with its own `turn_recorded` event, so it is never held whole.
    ///
    /// With redaction on (`Config::redaction`) a message streamed in its chunks is
    /// redacted as one text: within the batch for a `Vec` or `Values`, but not
    /// across calls (the proxy carries a message's tail from batch to batch), and
    /// across the batches of an `UpdateSource`.
    pub async fn record(
        &self,
        session: SessionId,
        updates: impl Into<Updates>,
    ) -> Result<Recorded> {
        match updates.into().0 {
            Input::Batch(mut updates) => {
                if self.config().redaction.is_on() {
                    updates = crate::store::redacted_whole(updates);
                }
                self.write_record(move |tx, tails| {
                    crate::db::turns::record_remembered(tx, tails, &session, &updates)
                })
                .await
            }
            Input::Values(mut updates) => {
                if self.config().redaction.is_on() {
                    updates = crate::store::redacted_whole(updates);
                }
                self.record_json(session, &updates).await
            }
            Input::Source(source) => self.record_batches(session, source).await,
        }
    }

    /// Restores a session as a stream of items in history order, read forward from
    /// its tables, the store's projection of the event log: every delivered message
    /// as its row holds it, its references replayed through the resolver as the reader
    /// asks for it (one memo of `memo_budget` bytes, [`dispatch::DEFAULT_MEMO_BUDGET`]
    /// by default: each distinct file is read once while it fits, and read again when
    /// evicted), and each recorded turn item as its row holds it. A restore trusts
    /// the rows: whether they agree with the log is `verify`'s to check, once, and
    /// `verify --repair` rebuilds them from it. References whose files are gone
    /// degrade; queued messages stay queued. The rows are read a page at a time in one
    /// snapshot, as the reader takes the items, so neither the time to the first item
    /// nor what is held grows with the history. A row that does not read, met before
    /// the first batch (16 items) is handed over, makes this call fail; one met later
    /// ends the stream with the error, after the items before it. Write the items as
    /// they come (a `format::StreamWriter`) rather than collect them.
    ///
    /// `replay` says where it starts: the whole history ([`Replay::whole`]), its
    /// last N entries, the entries from one message or recorded item on
    /// (inclusive), or from an ACP `messageId`. An id that is not in the delivered
    /// history is `Error::ReplayPoint`, a `messageId` it does not hold
    /// `Error::ReplayMessage`. The stream says where a partial replay starts
    /// ([`RestoreStream::partial`]).
    pub async fn restore(
        &self,
        session: SessionId,
        memo_budget: u64,
        replay: Replay,
    ) -> Result<RestoreStream> {
        let db = self.db().clone();
        let produce =
            move |sink: &mut dyn Sink| db.read_once(|tx| produce(tx, session, &replay, sink));
        let host = self.config().host.clone();
        RestoreStream::start(
            produce,
            self.resolver(),
            move |session| crate::store::placement(&host, session),
            Memo::with_budget(memo_budget),
        )
        .await
    }

    /// Records updates read from `source` in one write, all or nothing, as
    /// [`Store::record`] does a batch, but one batch at a time: each batch of at most
    /// [`RECORD_BATCH`] updates is merged and written with its own `turn_recorded`
    /// event before the next is read, so a long input is never held whole. A
    /// refused update (numbered from 1 over the whole input) stores nothing.
    pub(crate) async fn record_batches(
        &self,
        session: SessionId,
        mut source: impl UpdateSource,
    ) -> Result<Recorded> {
        let db = self.db().clone();
        let redacting = self.config().redaction.is_on();
        blocking(move || {
            db.write_for(&session, |tx| {
                queries::get_session(tx, &session)?;
                let mut listed = ItemsTouched::default();
                let mut recorded = 0usize;
                // A message streamed across batches is redacted as one text: its
                // held-back tail goes into the next batch, or one of its own at the
                // end (`redact::Streams`), which the input's numbering does not count.
                // Each batch is held until the next is redacted, so that a message
                // the next one ends gets its tail in its own last chunk.
                let mut streams = crate::redact::Streams::default();
                let mut held: Vec<Update> = Vec::new();
                let mut write = |batch: Vec<Update>, added: usize| {
                    let touched = record_batch(tx, &session, &batch).map_err(|e| match e {
                        Error::UpdateRefused { line, refusal } => Error::UpdateRefused {
                            line: (line + recorded).saturating_sub(added),
                            refusal,
                        },
                        e => e,
                    })?;
                    recorded += batch.len() - added;
                    touched.into_iter().for_each(|t| listed.add(t));
                    Ok(())
                };
                source.batches(&mut |batch| match redacting {
                    true => {
                        let (next, added) = streams.pass_after(&mut held, batch);
                        debug_assert_eq!(added, 0, "a held batch takes every tail");
                        match std::mem::replace(&mut held, next) {
                            done if done.is_empty() => Ok(()),
                            done => write(done, 0),
                        }
                    }
                    false => write(batch, 0),
                })?;
                streams.end(&mut held);
                if !held.is_empty() {
                    write(held, 0)?;
                }
                // Written outside the store's writer, which would not know that what
                // this sealed waits to be indexed (V14): indexed here, in the write.
                crate::db::search::index_waiting(tx, Some(&session), None)?;
                Ok(Recorded {
                    recorded,
                    items: std::mem::take(&mut listed.ids),
                })
            })
        })
        .await
    }
}

/// How many history seqs a page of rows covers: the first page is small, so the
/// first entry costs little, and each next one twice the last, up to the most.
const ENTRY_PAGE_FIRST: i64 = 16;
const ENTRY_PAGE_MOST: i64 = 256;

/// Reads a session's delivered history forward from its rows, from `point` on, a page
/// at a time, and hands each entry to `sink` as its row holds it: the tables are the
/// store's projection of the event log, and checking them against it is `verify`'s
/// work, done once, not on every read (`verify --repair` rebuilds what disagrees).
/// What is held is a page of rows, never the history; time to the first entry is a
/// page's, whatever the history's length. A row that does not read ends the output
/// there with its error.
pub(crate) fn produce(
    tx: &Tx<'_>,
    session: SessionId,
    point: &Replay,
    sink: &mut dyn Sink,
) -> Result<()> {
    let row = queries::get_session(tx, &session)?;
    let last = entries::last_seq(tx, &session)?;
    let start = match point {
        Replay::Whole => None,
        Replay::Tail(n) => Some(entries::tail_start(tx, &session, *n)?),
        Replay::From(entry) => Some(Some(entries::seq_of(tx, &session, *entry)?.ok_or(
            Error::ReplayPoint {
                session,
                entry: *entry,
            },
        )?)),
        Replay::AcpMessage(id) => {
            let by_store_id = match id.parse::<EntryId>() {
                Ok(entry) => entries::seq_of(tx, &session, entry)?,
                Err(_) => None,
            };
            let found = match by_store_id {
                Some(seq) => Some(seq),
                None => entries::seq_of_acp_message(tx, &session, id)?,
            };
            Some(Some(found.ok_or_else(|| Error::ReplayMessage {
                session,
                message_id: id.clone(),
            })?))
        }
    };
    let (from, skipped) = match start {
        None => (1, None),
        Some(None) => {
            let skipped = entries::entries_before(tx, &session, last + 1)?;
            sink.begin(
                row,
                Some(Partial {
                    from: None,
                    skipped,
                }),
            );
            return Ok(());
        }
        Some(Some(seq)) => (seq, Some(entries::entries_before(tx, &session, seq)?)),
    };
    let mut head = Some(row);
    // The event whose updates the rows of the last page named (V12), kept for the next.
    let mut made = turns::Made::default();
    let (mut lo, mut page) = (from, ENTRY_PAGE_FIRST);
    while lo <= last {
        let hi = lo.saturating_add(page);
        page = (page * 2).min(ENTRY_PAGE_MOST);
        let entries = entries::page_of(tx, &session, lo..hi, Some(Delivery::Delivered), &mut made)?;
        lo = hi;
        for entry in entries {
            if let Some(session) = head.take() {
                let partial = skipped.map(|skipped| Partial {
                    from: Some(entry.id()),
                    skipped,
                });
                sink.begin(session, partial);
            }
            if !sink.entry(entry)? {
                return Ok(()); // nobody reads any more
            }
        }
    }
    if let Some(session) = head {
        sink.begin(
            session,
            skipped.map(|skipped| Partial {
                from: None,
                skipped,
            }),
        );
    }
    Ok(())
}
