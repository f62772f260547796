//! Recording an agent's updates (`Store::record`): a batch, an agent's JSON, or a long
//! input written a batch (one `turn_recorded` event) at a time inside one write, never
//! held whole. No SQL here (that is `db`).

use std::collections::HashSet;

use crate::turns::Update;

use crate::db::items::{Recorded, Touched, record_batch};
use crate::db::queries;
use crate::error::{Error, Result};
use crate::ids::{ItemId, SessionId};
use crate::store::{Store, blocking};

/// How many updates one `turn_recorded` event of a long record holds at most: small
/// enough that a replay from a point (which replays the whole event of its first
/// entry) replays little more than it hands on, big enough to keep events few.
pub const RECORD_BATCH: usize = 128;

/// Where the updates of a long [`Store::record`] come from, a batch at a time. A write
/// may run more than once (PostgreSQL retries a transaction that lost a race), so
/// `batches` starts from the first update every time it is called.
pub trait UpdateSource: Send + 'static {
    /// Calls `each` with batches of at most [`RECORD_BATCH`], stopping at its first error.
    fn batches(&mut self, each: &mut dyn FnMut(Vec<Update>) -> Result<()>) -> Result<()>;
}

/// A source already in a box.
impl UpdateSource for Box<dyn UpdateSource> {
    fn batches(&mut self, each: &mut dyn FnMut(Vec<Update>) -> Result<()>) -> Result<()> {
        (**self).batches(each)
    }
}

/// Updates in memory, recorded as a long input is ([`RECORD_BATCH`] at a time).
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

/// Updates as the JSON an agent sent, each read as `record` reads an input line.
#[derive(Debug, Clone, PartialEq)]
pub struct Values(pub Vec<serde_json::Value>);

/// What [`Store::record`] records: a `Vec` of updates, [`Values`], or any [`UpdateSource`].
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

/// The items a record touched, once each in order, without a set of every id: a later
/// batch can only touch again the last item made, a tool call, or an older item.
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
    /// Records the agent's ACP session updates in one write, all or nothing: a refused
    /// update stores nothing and is `Error::UpdateRefused` with its place (from 1).
    /// A `Vec` or [`Values`] is one batch and one event; an [`UpdateSource`] is written
    /// [`RECORD_BATCH`] at a time, each with its own event. With redaction on, a
    /// streamed message is redacted as one text within a batch or across a source's
    /// batches, not across calls (the proxy carries the tail itself).
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

    /// [`Store::record`] of a source: each batch written with its own event before the
    /// next is read; a refused update is numbered over the whole input.
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
                // Each batch is held until the next is redacted, so a message the next
                // one ends gets its held-back tail in its own last chunk.
                let mut streams = crate::redact::Streams::default();
                let mut held: Vec<Update> = Vec::new();
                let mut write = |batch: Vec<Update>| {
                    let touched = record_batch(tx, &session, &batch).map_err(|e| match e {
                        Error::UpdateRefused { line, refusal } => Error::UpdateRefused {
                            line: line + recorded,
                            refusal,
                        },
                        e => e,
                    })?;
                    recorded += batch.len();
                    touched.into_iter().for_each(|t| listed.add(t));
                    Ok(())
                };
                source.batches(&mut |batch| match redacting {
                    true => {
                        let (next, added) = streams.pass_after(&mut held, batch);
                        debug_assert_eq!(added, 0, "a held batch takes every tail");
                        match std::mem::replace(&mut held, next) {
                            done if done.is_empty() => Ok(()),
                            done => write(done),
                        }
                    }
                    false => write(batch),
                })?;
                streams.end(&mut held);
                if !held.is_empty() {
                    write(held)?;
                }
                Ok(Recorded {
                    recorded,
                    items: std::mem::take(&mut listed.ids),
                })
            })
        })
        .await
    }
}
