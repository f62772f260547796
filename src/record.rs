//! Recording an agent's updates (`Store::record`): a batch, an agent's JSON, or a
//! long input written in batches inside one write, each batch its own
//! `turn_recorded` event, so what is held at once is one batch and not the whole
//! input. It runs no SQL itself (that is `db`).

use std::collections::HashSet;

use crate::turns::Update;

use crate::db::items::{Recorded, Touched, record_batch};
use crate::db::queries;
use crate::error::{Error, Result};
use crate::ids::{ItemId, SessionId};
use crate::store::{Store, blocking};

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

/// Recording, of a batch or of a long input in batches.
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
                    crate::db::items::record_remembered(tx, tails, &session, &updates)
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
