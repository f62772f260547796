//! A session's history read back a page at a time: its messages, recorded items,
//! events, turns and attachments, each page read on its own (never the whole history
//! read and then cut), with a cursor naming where the next one starts.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use super::{SessionAttachment, Store};
use crate::db::pages::{self, TurnKey};
use crate::db::{Tx, queries};
use crate::error::Result;
use crate::ids::SessionId;
use crate::lifecycle::{DEFAULT_PAGE, MAX_PAGE};
use crate::model::{Delivery, Event, Item, Message, Turn};

/// One page of a session's history, and where the next one starts (`None` on the last
/// page, so a caller reading everything stops without asking for an empty page).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub entries: Vec<T>,
    pub next: Option<Cursor<T>>,
}

/// Where a page starts: just after the entry it was made from, by that entry's place
/// in the history (its `seq`; an event's `session_seq`; a turn's `seq`, start time
/// and id; an attachment's stored name), so entries added between two pages neither shift the later pages nor show
/// twice. Typed by what it pages through; opaque to callers.
pub struct Cursor<T> {
    key: Key,
    of: PhantomData<fn() -> T>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Seq(i64),
    Turn(TurnKey),
    Name(String),
}

impl<T> Clone for Cursor<T> {
    fn clone(&self) -> Self {
        Cursor {
            key: self.key.clone(),
            of: PhantomData,
        }
    }
}

impl<T> PartialEq for Cursor<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl<T> Eq for Cursor<T> {}

impl<T> std::fmt::Debug for Cursor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Cursor").field(&self.key).finish()
    }
}

/// Which page to read: at most `limit` entries (clamped to 1..=[`MAX_PAGE`]) after
/// `after` (from the start when `None`). `Default`: the first page of
/// [`DEFAULT_PAGE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageQuery<T> {
    pub after: Option<Cursor<T>>,
    pub limit: usize,
}

impl<T> Default for PageQuery<T> {
    fn default() -> Self {
        PageQuery {
            after: None,
            limit: DEFAULT_PAGE,
        }
    }
}

impl<T> PageQuery<T> {
    /// The first page, of at most `limit` entries.
    pub fn first(limit: usize) -> Self {
        PageQuery { after: None, limit }
    }

    /// The page of at most `limit` entries after `cursor` (a page's `next`), or the
    /// first one when `None`.
    pub fn after(cursor: Option<Cursor<T>>, limit: usize) -> Self {
        PageQuery {
            after: cursor,
            limit,
        }
    }

    fn seq(&self) -> i64 {
        match &self.after {
            Some(Cursor {
                key: Key::Seq(seq), ..
            }) => *seq,
            _ => 0,
        }
    }

    fn turn(&self) -> Option<&TurnKey> {
        match &self.after {
            Some(Cursor {
                key: Key::Turn(key),
                ..
            }) => Some(key),
            _ => None,
        }
    }

    pub(super) fn name(&self) -> &str {
        match &self.after {
            Some(Cursor {
                key: Key::Name(name),
                ..
            }) => name,
            _ => "",
        }
    }

    /// The limit the page is read with: one past the page, to know whether another
    /// follows.
    pub(super) fn probe(&self) -> usize {
        self.limit.clamp(1, MAX_PAGE) + 1
    }
}

/// An entry's place in the history, which a cursor after it names.
trait Keyed {
    fn key(&self) -> Key;
}

impl Keyed for Message {
    fn key(&self) -> Key {
        Key::Seq(self.seq)
    }
}

impl Keyed for Item {
    fn key(&self) -> Key {
        Key::Seq(self.seq)
    }
}

impl<P> Keyed for Event<P> {
    fn key(&self) -> Key {
        Key::Seq(self.session_seq)
    }
}

impl Keyed for Turn {
    fn key(&self) -> Key {
        Key::Turn(TurnKey {
            seq: self.seq,
            started_at: self.started_at.clone(),
            id: self.id,
        })
    }
}

/// A page from entries read one past its limit.
fn page<T: Keyed>(mut entries: Vec<T>, probe: usize) -> Page<T> {
    let more = entries.len() >= probe;
    entries.truncate(probe - 1);
    let next = more.then(|| entries.last()).flatten().map(|last| Cursor {
        key: last.key(),
        of: PhantomData,
    });
    Page { entries, next }
}

/// A page of attachments from the stored names read one past its limit, in order: a
/// name whose file went between the listing and its check, and that no message refers
/// to, is left out but still counts for where the page ends.
pub(super) fn named_page(
    found: BTreeMap<String, SessionAttachment>,
    probe: usize,
) -> Page<SessionAttachment> {
    let more = found.len() >= probe;
    let kept: Vec<_> = found.into_iter().take(probe - 1).collect();
    let next = more.then(|| kept.last()).flatten().map(|(name, _)| Cursor {
        key: Key::Name(name.clone()),
        of: PhantomData,
    });
    let entries = kept.into_iter().map(|(_, a)| a);
    Page {
        entries: entries
            .filter(|a| a.file.is_some() || !a.messages.is_empty())
            .collect(),
        next,
    }
}

/// Reading a session's history back, a page at a time. Each call refuses a session
/// that does not exist; an `after` past the end gives an empty page.
impl Store {
    /// A page of a session's messages in history order: all of them, or only those
    /// in one delivery state (`Some(Delivery::Queued)`: the mid-turn queue).
    pub async fn messages(
        &self,
        session: SessionId,
        state: Option<Delivery>,
        query: PageQuery<Message>,
    ) -> Result<Page<Message>> {
        let after = query.seq();
        self.page_of(session, &query, move |tx, probe| {
            pages::messages(tx, &session, state, after, probe)
        })
        .await
    }

    /// A page of a session's recorded turn items, in history order.
    pub async fn items(&self, session: SessionId, query: PageQuery<Item>) -> Result<Page<Item>> {
        let after = query.seq();
        self.page_of(session, &query, move |tx, probe| {
            pages::items(tx, &session, after, probe)
        })
        .await
    }

    /// A page of a session's event log, in log order.
    pub async fn events(&self, session: SessionId, query: PageQuery<Event>) -> Result<Page<Event>> {
        let after = query.seq();
        self.page_of(session, &query, move |tx, probe| {
            pages::events(tx, &session, after, probe)
        })
        .await
    }

    /// A page of a session's turns (a proxied session's prompts and how each ended),
    /// in history order.
    pub async fn turns(&self, session: SessionId, query: PageQuery<Turn>) -> Result<Page<Turn>> {
        let after = query.turn().cloned();
        self.page_of(session, &query, move |tx, probe| {
            pages::turns(tx, &session, after.as_ref(), probe)
        })
        .await
    }

    /// The page `read` gives, read one past its limit, of a session that exists.
    async fn page_of<T: Keyed + Send + 'static>(
        &self,
        session: SessionId,
        query: &PageQuery<T>,
        read: impl Fn(&Tx<'_>, usize) -> Result<Vec<T>> + Send + 'static,
    ) -> Result<Page<T>> {
        let probe = query.probe();
        let read = self
            .with_read(move |tx| {
                queries::get_session(tx, &session)?;
                read(tx, probe)
            })
            .await?;
        Ok(page(read, probe))
    }
}

/// Every entry `read` pages through (`|q| store.turns(id, q)`), page after page of
/// [`MAX_PAGE`], for a caller that truly needs them all at once: one document of the
/// whole history (`session show --json`), a proxy's turns to mark in a replay, a test
/// comparing what it wrote.
pub async fn whole<T, F, Fut>(mut read: F) -> Result<Vec<T>>
where
    F: FnMut(PageQuery<T>) -> Fut,
    Fut: std::future::Future<Output = Result<Page<T>>>,
{
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = read(PageQuery::after(after, MAX_PAGE)).await?;
        all.extend(page.entries);
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(all),
        }
    }
}
