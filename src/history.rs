//! Histories of any length: a long `record` input written in batches inside one
//! write, each batch its own `turn_recorded` event, so what is held at once is one
//! batch and not the whole input; and a replay from a point (`Replay`: the last N
//! entries, or from an entry's id), which says where it starts (`Partial`). It runs no
//! SQL itself (that is `db`) and reads no attachment file.

use std::collections::HashSet;

use crate::turns::Update;

use crate::db::queries;
use crate::db::turns::{Recorded, Touched, record_batch};
use crate::dispatch::Memo;
use crate::error::{Error, Result};
use crate::ids::{EntryId, ItemId, SessionId};
use crate::model::{Delivery, Item, Message};
use crate::projection;
use crate::replay::{Loaded, RestoreStream};
use crate::store::{Store, blocking};

/// Where a replay starts. Entries are counted as `restore --format acp` shows them:
/// the delivered messages and the recorded items, in the history's one order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replay {
    /// The whole history.
    #[default]
    Whole,
    /// The last N entries (all of them when there are fewer).
    Tail(u64),
    /// From this entry (a delivered message or a recorded item), inclusive.
    From(EntryId),
}

impl Replay {
    /// A replay from a `messageId` as an ACP client saw it in a replay: a user
    /// message's id, which is the store's own, or the `messageId` an agent's
    /// recorded message or thought carried, which is the agent's; the store's
    /// id of a recorded item is taken too.
    pub fn from_acp_message(message_id: &str) -> AcpPoint {
        AcpPoint(message_id.to_owned())
    }
}

/// A replay point named by an ACP `messageId` (see [`Replay::from_acp_message`]),
/// found in the history when the replay starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpPoint(String);

impl AcpPoint {
    /// Whether `item` is the entry this point names by the agent's `messageId`.
    fn names_item(&self, item: &Item) -> bool {
        match &item.body {
            crate::model::ItemBody::AgentMessage(t) | crate::model::ItemBody::AgentThought(t) => {
                t.message_id.as_ref().is_some_and(|id| *id.0 == *self.0)
            }
            _ => false,
        }
    }
}

/// Where a replay starts, as `cut` finds it: by the store's id, or by an ACP
/// `messageId`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Point {
    Replay(Replay),
    Acp(AcpPoint),
}

pub use crate::replay::Partial;

/// The delivered history cut at `replay`: the messages and items from its point on,
/// and what the cut left out. Both lists are in `seq` order and share one sequence.
fn cut(
    session: SessionId,
    point: &Point,
    rows: Vec<Message>,
    items: Vec<Item>,
) -> Result<(Vec<Message>, Vec<Item>, Option<Partial>)> {
    let start = match point {
        Point::Replay(Replay::Whole) => return Ok((rows, items, None)),
        Point::Acp(acp) => {
            let by_store_id = acp.0.parse::<EntryId>().ok();
            let found = rows
                .iter()
                .find(|m| Some(EntryId::from(m.id)) == by_store_id)
                .map(|m| m.seq)
                .or_else(|| {
                    items
                        .iter()
                        .find(|i| Some(EntryId::from(i.id)) == by_store_id || acp.names_item(i))
                        .map(|i| i.seq)
                });
            Some(found.ok_or_else(|| Error::ReplayMessage {
                session,
                message_id: acp.0.clone(),
            })?)
        }
        Point::Replay(Replay::Tail(n)) => {
            let n = *n;
            let total = (rows.len() + items.len()) as u64;
            let skip = total.saturating_sub(n);
            // The seq of the first kept entry: walk the merged order `skip` places.
            let (mut m, mut i) = (0usize, 0usize);
            for _ in 0..skip {
                match (rows.get(m), items.get(i)) {
                    (Some(a), Some(b)) if b.seq < a.seq => i += 1,
                    (Some(_), _) => m += 1,
                    (None, _) => i += 1,
                }
            }
            match (rows.get(m), items.get(i)) {
                (Some(a), Some(b)) => Some(a.seq.min(b.seq)),
                (Some(a), None) => Some(a.seq),
                (None, Some(b)) => Some(b.seq),
                (None, None) => None,
            }
        }
        Point::Replay(Replay::From(entry)) => {
            let entry = *entry;
            let found = rows
                .iter()
                .find(|m| EntryId::from(m.id) == entry)
                .map(|m| m.seq)
                .or_else(|| {
                    items
                        .iter()
                        .find(|i| EntryId::from(i.id) == entry)
                        .map(|i| i.seq)
                });
            Some(found.ok_or(Error::ReplayPoint { session, entry })?)
        }
    };
    let Some(start) = start else {
        let skipped = (rows.len() + items.len()) as u64;
        return Ok((
            vec![],
            vec![],
            Some(Partial {
                from: None,
                skipped,
            }),
        ));
    };
    let before = |seq: i64| seq < start;
    let skipped = (rows.iter().filter(|m| before(m.seq)).count()
        + items.iter().filter(|i| before(i.seq)).count()) as u64;
    let rows: Vec<Message> = rows.into_iter().filter(|m| !before(m.seq)).collect();
    let items: Vec<Item> = items.into_iter().filter(|i| !before(i.seq)).collect();
    let from = match (rows.first(), items.first()) {
        (Some(m), Some(i)) if i.seq < m.seq => Some(EntryId::from(i.id)),
        (Some(m), _) => Some(EntryId::from(m.id)),
        (None, Some(i)) => Some(EntryId::from(i.id)),
        (None, None) => None,
    };
    Ok((rows, items, Some(Partial { from, skipped })))
}

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
    fn batches(&mut self, each: &mut dyn FnMut(Vec<Update>) -> Result<()>) -> Result<()>;
}

/// Updates already in memory.
impl UpdateSource for Vec<Update> {
    fn batches(&mut self, each: &mut dyn FnMut(Vec<Update>) -> Result<()>) -> Result<()> {
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
    /// Rebuilds a session by replaying its event log (the record: a table edited
    /// behind the log's back changes nothing here, and `verify` reports it), refusing
    /// a log that does not replay, as a stream of items in history order: every
    /// delivered message, its references replayed through the resolver as the reader
    /// asks for it (one memo of `memo_budget` bytes, [`dispatch::DEFAULT_MEMO_BUDGET`] by
    /// default: each distinct file is read once while it fits, and read again when
    /// evicted), and the recorded turn items as stored. References whose files are
    /// gone degrade; queued messages stay queued. The log is replayed first, in one
    /// snapshot, so a session whose log does not replay is refused before any item is
    /// produced. What is held for the whole restore is the replayed texts and
    /// references, never their files' content: write the items as they come (a
    /// `format::StreamWriter`) rather than collect them.
    pub async fn restore_stream(
        &self,
        session: SessionId,
        memo_budget: u64,
    ) -> Result<RestoreStream> {
        self.restore_from(session, memo_budget, Replay::Whole).await
    }

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
                let mut listed = ItemsTouched::default();
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

    /// [`Store::restore_stream`] from a point: the whole history, its last N entries,
    /// or the entries from one message or recorded item on (inclusive); an id that
    /// is not in the delivered history is `Error::ReplayPoint`. The stream says where
    /// a partial replay starts ([`RestoreStream::partial`]).
    pub async fn restore_from(
        &self,
        session: SessionId,
        memo_budget: u64,
        replay: Replay,
    ) -> Result<RestoreStream> {
        self.restore_at(session, memo_budget, Point::Replay(replay))
            .await
    }

    /// [`Store::restore_from`] from an ACP `messageId` (see
    /// [`Replay::from_acp_message`]); one the history does not hold is
    /// `Error::ReplayMessage`.
    pub async fn restore_from_acp(
        &self,
        session: SessionId,
        memo_budget: u64,
        point: AcpPoint,
    ) -> Result<RestoreStream> {
        self.restore_at(session, memo_budget, Point::Acp(point))
            .await
    }

    async fn restore_at(
        &self,
        session: SessionId,
        memo_budget: u64,
        point: Point,
    ) -> Result<RestoreStream> {
        // The log is the record: restore replays it, row by row, and dispatches what
        // it says. The tables are not read for the history, so a row edited behind
        // the log's back cannot change what a model is given (`verify` reports the
        // edit). The replayed rows are kept whole because a read-only read may be run
        // again when a writer touched the file meanwhile: items already handed on
        // could not be taken back. Rows and events carry no attachment content.
        let db = self.db().clone();
        let load = move || {
            db.read(move |tx| {
                // The session row says whether the session exists or was deleted.
                queries::get_session(tx, &session)?;
                let mut replayer = projection::Replayer::new(session);
                queries::each_event(tx, &session, |event| replayer.apply(event))?;
                match replayer.finish() {
                    (Some(replayed), problems) if problems.is_empty() => {
                        let delivered = replayed
                            .messages
                            .into_iter()
                            .filter(|m| m.state == Delivery::Delivered)
                            .collect::<Vec<_>>();
                        let (rows, items, partial) =
                            cut(session, &point, delivered, replayed.items)?;
                        Ok(Loaded {
                            session: replayed.session,
                            rows,
                            items,
                            partial,
                        })
                    }
                    (_, problems) => Err(Error::LogMismatch { session, problems }),
                }
            })
        };
        let host = self.config().host.clone();
        RestoreStream::start(
            load,
            self.resolver(),
            move |session| crate::store::placement(&host, session),
            Memo::with_budget(memo_budget),
        )
        .await
    }
}
