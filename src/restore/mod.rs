//! Restore: a session's delivered history streamed out of its tables, whole or from
//! a point (`Replay`: the last N entries, or from an entry's id), which says where it
//! starts (`Partial`). The rows are read forward a page at a time (`produce`) and
//! handed to the reader in batches (`stream`); a restore never compares them with the
//! log (`verify`'s work). It runs no SQL itself (that is `db`) and reads no
//! attachment file itself (that is `dispatch`, through the resolver).

mod stream;

pub(crate) use stream::Sink;
pub use stream::{Partial, ReplayItem, RestoreStream};

use crate::db::sql::Tx;
use crate::db::{entries, items, queries};
use crate::dispatch::Memo;
use crate::error::{Error, Result};
use crate::ids::{EntryId, SessionId};
use crate::model::Delivery;
use crate::store::Store;

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

impl Store {
    /// Restores a session as a stream of items in history order, read forward from
    /// its tables, the store's projection of the event log: every delivered message
    /// as its row holds it, its references replayed through the resolver as the reader
    /// asks for it (one memo of `memo_budget` bytes, [`crate::dispatch::DEFAULT_MEMO_BUDGET`]
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
}

/// How many history seqs a page of rows covers.
const ENTRY_PAGE: i64 = 256;

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
    let mut made = items::Made::default();
    let mut lo = from;
    while lo <= last {
        let hi = lo.saturating_add(ENTRY_PAGE);
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
