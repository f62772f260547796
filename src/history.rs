//! Histories of any length: a long `record` input written in batches inside one
//! write, each batch its own `turn_recorded` event, so what is held at once is one
//! batch and not the whole input. It runs no SQL itself (that is `db::turns`) and
//! reads no attachment file.

use std::collections::HashSet;

use agent_client_protocol_schema::v1::SessionUpdate;

use crate::db::queries;
use crate::db::turns::{Recorded, Touched, record_batch};
use crate::error::{Error, Result};
use crate::ids::{ItemId, SessionId};
use crate::store::{Store, blocking};

/// How many updates one `turn_recorded` event of a long record holds at most: big
/// enough that a million lines make a thousand events, small enough that one batch
/// (its updates, their merge and its event's payload) is a few hundred KiB.
pub const RECORD_BATCH: usize = 1024;

/// Where the updates of [`Store::record_from`] come from. A write may run more than
/// once (PostgreSQL runs a transaction again when it lost a race), so `batches`
/// hands the updates over from the first one every time it is called.
pub trait UpdateSource: Send + 'static {
    /// Calls `each` with the updates in order, in batches of at most
    /// [`RECORD_BATCH`], stopping at the first error `each` returns.
    fn batches(&mut self, each: &mut dyn FnMut(Vec<SessionUpdate>) -> Result<()>) -> Result<()>;
}

/// Updates already in memory.
impl UpdateSource for Vec<SessionUpdate> {
    fn batches(&mut self, each: &mut dyn FnMut(Vec<SessionUpdate>) -> Result<()>) -> Result<()> {
        for batch in self.chunks(RECORD_BATCH) {
            each(batch.to_vec())?;
        }
        Ok(())
    }
}

/// The items a record touched, each listed once in the order first touched, without
/// a set of every id: within a batch the ids are distinct already, and a later batch
/// can only touch again the last item made (a chunk continuing it), a tool call, or
/// an item from before this record, which are the ones remembered.
#[derive(Default)]
struct Listed {
    ids: Vec<ItemId>,
    again: HashSet<ItemId>,
    last_made: Option<ItemId>,
}

impl Listed {
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

impl Store {
    /// Records updates read from `source` in one write, all or nothing, as
    /// [`Store::record`] does, but one batch at a time: each batch of at most
    /// [`RECORD_BATCH`] updates is merged and written with its own `turn_recorded`
    /// event before the next is read, so a long input is never held whole. A
    /// refused update (numbered from 1 over the whole input) stores nothing.
    pub async fn record_from(
        &self,
        session: SessionId,
        mut source: impl UpdateSource,
    ) -> Result<Recorded> {
        let db = self.db().clone();
        blocking(move || {
            db.write_for(&session, |tx| {
                queries::get_session(tx, &session)?;
                let mut listed = Listed::default();
                let mut recorded = 0usize;
                source.batches(&mut |batch| {
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
                })?;
                Ok(Recorded {
                    recorded,
                    items: std::mem::take(&mut listed.ids),
                })
            })
        })
        .await
    }
}
