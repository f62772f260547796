//! Restore: a session's delivered history streamed out of its tables, whole or from a
//! point (`Replay`), read a page at a time (`produce`) and handed over in batches
//! (`stream`). It never compares rows with the log (`verify`'s work), runs no SQL
//! (`db`) and reads no attachment file (`dispatch`).

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

/// Where a replay starts; entries are the delivered messages and recorded items.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Replay {
    /// The whole history.
    #[default]
    Whole,
    /// The last N entries (all of them when there are fewer).
    Tail(u64),
    /// From this entry (a delivered message or a recorded item), inclusive.
    From(EntryId),
    /// From an ACP `messageId` ([`Replay::from_acp_message`]), inclusive.
    AcpMessage(String),
}

impl Replay {
    /// The whole history (`Replay::default()`).
    pub fn whole() -> Replay {
        Replay::Whole
    }

    /// A replay from a `messageId` as an ACP client saw it: a user message's (the
    /// store's id), an agent message's or thought's (the agent's), or an item's id.
    pub fn from_acp_message(message_id: &str) -> Replay {
        Replay::AcpMessage(message_id.to_owned())
    }
}

impl Store {
    /// Restores a session as a stream of items in history order, read from its rows
    /// (trusted: `verify` checks them against the log) a page at a time in one
    /// snapshot, so neither the time to the first item nor what is held grows with the
    /// history. Messages' references are dispatched through one memo of `memo_budget`
    /// bytes ([`crate::dispatch::DEFAULT_MEMO_BUDGET`] by default); gone files degrade.
    /// A row that does not read fails the call before the first batch is handed over,
    /// and ends the stream with its error after. Write the items as they come.
    ///
    /// `replay` says where it starts; an id not in the delivered history is
    /// `Error::ReplayPoint`, an unknown `messageId` `Error::ReplayMessage`.
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

/// Hands each entry of a session's delivered history from `point` on to `sink` as its
/// row holds it, a page at a time (never the whole history); a row that does not read
/// ends the output there with its error.
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
