//! A session's history and its log read a page at a time (restore, `verify`), and
//! where a replay from a point starts. Every read costs what it reads, not what the
//! history holds.

use serde::Deserialize;

use super::append::next_seq;
use super::error::sql;
use super::sql::{Tx, args};
use super::{items, queries};

use crate::error::Result;
use crate::ids::{EntryId, SessionId};
use crate::model::{Delivery, Event};
use crate::projection::{Entry, Replayer};

/// The messages in `state` (`None`: every one) and the items whose seq is in `seqs`,
/// in history order; `made` kept from page to page.
pub fn page_of(
    conn: &Tx<'_>,
    session: &SessionId,
    seqs: std::ops::Range<i64>,
    state: Option<Delivery>,
    made: &mut items::Made,
) -> Result<Vec<Entry>> {
    let messages = queries::messages_in(conn, session, state, seqs.clone())?;
    let items = items::items_in(conn, session, seqs, made)?;
    let mut out = Vec::with_capacity(messages.len() + items.len());
    let mut items = items.into_iter().peekable();
    for message in messages {
        while let Some(item) = items.next_if(|i| i.seq < message.seq) {
            out.push(Entry::Item(Box::new(item)));
        }
        out.push(Entry::Message(message));
    }
    out.extend(items.map(|i| Entry::Item(Box::new(i))));
    Ok(out)
}

/// The highest seq of the session's history, 0 when it has none.
pub fn last_seq(conn: &Tx<'_>, session: &SessionId) -> Result<i64> {
    Ok(next_seq(conn, session)? - 1)
}

/// How many entries of the delivered history come before `seq`: the seqs before it,
/// less the messages still queued among them (a history's seqs run from 1 without a
/// gap, which the replay checks for what it replays).
pub fn entries_before(conn: &Tx<'_>, session: &SessionId, seq: i64) -> Result<u64> {
    let queued: i64 = conn
        .query_row(
            "SELECT count(*) FROM messages
             WHERE session_id = ?1 AND state = 'queued' AND seq < ?2",
            args![session.to_string(), seq],
            |r| r.get(0),
        )
        .map_err(sql("count queued messages"))?
        .unwrap_or(0);
    Ok(u64::try_from((seq - 1 - queued).max(0)).unwrap_or(0))
}

/// The seq of the `n`-th last entry of the delivered history (the first of a tail of
/// `n`), or of its first entry when it holds fewer; `None` for no entry at all.
pub fn tail_start(conn: &Tx<'_>, session: &SessionId, n: u64) -> Result<Option<i64>> {
    if n == 0 {
        return Ok(None);
    }
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    // The last n of each kind are enough: the tail is the last n of both merged.
    let last = |query: &str| -> Result<Vec<i64>> {
        conn.query_map(query, args![session.to_string(), n], |r| r.get(0))
            .map_err(sql("find a tail"))
    };
    let mut seqs = last(
        "SELECT seq FROM messages WHERE session_id = ?1 AND state = 'delivered'
         ORDER BY seq DESC LIMIT ?2",
    )?;
    seqs.extend(last(
        "SELECT seq FROM items WHERE session_id = ?1 ORDER BY seq DESC LIMIT ?2",
    )?);
    seqs.sort_unstable_by(|a, b| b.cmp(a));
    seqs.truncate(usize::try_from(n).unwrap_or(usize::MAX));
    Ok(seqs.last().copied())
}

/// The seq of a delivered message or an item of `session` by its id.
pub fn seq_of(conn: &Tx<'_>, session: &SessionId, entry: EntryId) -> Result<Option<i64>> {
    let (session, entry) = (session.to_string(), entry.to_string());
    let message = conn
        .query_row(
            "SELECT seq FROM messages WHERE session_id = ?1 AND id = ?2 AND state = 'delivered'",
            args![session, entry],
            |r| r.get(0),
        )
        .map_err(sql("find an entry"))?;
    if message.is_some() {
        return Ok(message);
    }
    conn.query_row(
        "SELECT seq FROM items WHERE session_id = ?1 AND id = ?2",
        args![session, entry],
        |r| r.get(0),
    )
    .map_err(sql("find an entry"))
}

/// The seq of the first agent message or thought of `session` that carried the ACP
/// `messageId` `id`. No index holds it: the items are read a page at a time until one
/// matches.
pub fn seq_of_acp_message(conn: &Tx<'_>, session: &SessionId, id: &str) -> Result<Option<i64>> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Named<'a> {
        #[serde(borrow, default)]
        message_id: Option<std::borrow::Cow<'a, str>>,
    }
    const PAGE: i64 = 256;
    let mut made = items::Made::default();
    let mut after = 0;
    loop {
        let page = items::message_texts(conn, session, after, PAGE, &mut made)?;
        let Some(&(last, _)) = page.last() else {
            return Ok(None);
        };
        for (seq, text) in page {
            let named = serde_json::from_str::<Named<'_>>(&text).ok();
            if named.and_then(|n| n.message_id).is_some_and(|m| m == id) {
                return Ok(Some(seq));
            }
        }
        after = last;
    }
}

/// How many events a page of [`LogPages`] holds at most, and the payload bytes past
/// which the next page is smaller.
const EVENT_PAGE_MOST: i64 = 256;
const EVENT_PAGE_BYTES: usize = 256 * 1024;

/// A session's log read a page at a time (`verify`, `redact`). A page starts at one
/// event and doubles while its payloads come to less than [`EVENT_PAGE_BYTES`], up to
/// [`EVENT_PAGE_MOST`], and halves when they come to more: a sent message's event is a
/// few hundred bytes, a long record's a batch of updates, so pages stay near a few
/// hundred KiB.
pub struct LogPages {
    session: SessionId,
    next: i64,
    /// The log's last event.
    end: i64,
    page: i64,
}

impl LogPages {
    /// The log of `session` from its first event.
    pub fn new(conn: &Tx<'_>, session: &SessionId) -> Result<LogPages> {
        Ok(LogPages {
            session: *session,
            next: 1,
            end: super::append::last_session_seq(conn, session)?,
            page: 1,
        })
    }

    /// Whether every event has been replayed.
    pub fn done(&self) -> bool {
        self.next > self.end
    }

    /// The next page of the log's events.
    pub fn next_page(&mut self, conn: &Tx<'_>) -> Result<Vec<Event<String>>> {
        let (events, next) = queries::events_page(conn, &self.session, self.next, self.page)?;
        self.next = next;
        let bytes: usize = events.iter().map(|e| e.payload.len()).sum();
        self.page = match bytes < EVENT_PAGE_BYTES {
            true => (self.page * 2).min(EVENT_PAGE_MOST),
            false => (self.page / 2).max(1),
        };
        Ok(events)
    }

    /// Replays the next page into `replayer` and hands back the entries it finished
    /// (once the log is done, every entry still open too). The problems the replay
    /// found stay in `replayer`.
    pub fn advance(&mut self, conn: &Tx<'_>, replayer: &mut Replayer) -> Result<Vec<Entry>> {
        for event in &self.next_page(conn)? {
            replayer.apply(event);
        }
        if self.done() {
            replayer.close();
        }
        Ok(replayer.take_retired().collect())
    }
}
