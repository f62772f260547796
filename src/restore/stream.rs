//! Restore as a stream: messages and turn items in their one `seq` order, each message
//! dispatched through one budgeted memo on a blocking thread, handed over through a
//! bounded channel. Never the whole history's content at once; it never writes.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::dispatch::{self, Memo, Mode, ModelMessage, Placement, Resolver};
use crate::error::{Error, Result};
use crate::ids::EntryId;
use crate::model::{Item, Session};
use crate::projection::Entry;

/// One item of a restored history (non-exhaustive: later kinds may join).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
// Messages are most of a history: boxing them would cost an allocation per item.
#[allow(clippy::large_enum_variant)]
pub enum ReplayItem {
    /// A delivered user or assistant message, with the parts the model gets for it.
    Message(ModelMessage),
    /// A recorded turn item as stored (no attachment to read). Boxed: several times a
    /// message handle's size, and messages are most of a history.
    Recorded(Box<Item>),
}

/// Batches are cut at this many bytes made for their items ([`Batch`]) or at the item
/// cap: one wake-up per batch, memory bounded by a few batches.
const BATCH_BYTES: u64 = 4 * 1024 * 1024;
/// The first batch's item cap, small so the first item comes soon; each later one
/// may hold four times as many, up to [`BATCH_ITEMS_MAX`].
const BATCH_ITEMS_FIRST: usize = 16;
const BATCH_ITEMS_MAX: usize = 1024;

/// Where a replay from a point starts (`None`: it holds no entry) and how many entries
/// come before it. Serialized as `{"from","skipped"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Partial {
    pub from: Option<EntryId>,
    pub skipped: u64,
}

/// A restore in progress, through a channel of one batch: the blocking side runs at
/// most one batch ahead of the reader. Dropping the stream stops the replay.
#[derive(Debug)]
pub struct RestoreStream {
    session: Session,
    partial: Option<Partial>,
    rx: mpsc::Receiver<Result<Vec<ReplayItem>>>,
    ready: VecDeque<ReplayItem>,
}

impl RestoreStream {
    /// The session being restored, as its row holds it.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Where a replay from a point starts; `None` for the whole history.
    pub fn partial(&self) -> Option<&Partial> {
        self.partial.as_ref()
    }

    /// The next item, `None` once the history is done.
    pub async fn next(&mut self) -> Option<Result<ReplayItem>> {
        if let Some(item) = self.ready.pop_front() {
            return Some(Ok(item));
        }
        match self.rx.recv().await? {
            Ok(batch) => {
                self.ready = batch.into();
                self.ready.pop_front().map(Ok)
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// Runs `produce` on one blocking thread that reads and dispatches (one hop to the
    /// pool). The stream is handed back with the first batch, so an error before it
    /// refuses the restore; one after ends the stream after the items before it.
    pub(crate) async fn start(
        produce: impl FnOnce(&mut dyn Sink) -> Result<()> + Send + 'static,
        resolver: impl Resolver + 'static,
        placement: impl FnOnce(&Session) -> Placement + Send + 'static,
        memo: Memo,
    ) -> Result<RestoreStream> {
        let (tx, rx) = mpsc::channel(1);
        let (loaded_tx, loaded) = tokio::sync::oneshot::channel();
        let producer = tokio::task::spawn_blocking(move || {
            let mut feed = Feed {
                head: None,
                loaded: Some(loaded_tx),
                place: Some(Box::new(placement)),
                placement: None,
                resolver,
                memo,
                tx,
                batch: Batch::default(),
            };
            match produce(&mut feed) {
                Ok(()) => {
                    if feed.announce() && !feed.batch.items.is_empty() {
                        let batch = feed.batch.take();
                        let _ = feed.tx.blocking_send(Ok(batch));
                    }
                }
                Err(e) => match feed.loaded.take() {
                    Some(loaded) => {
                        let _ = loaded.send(Err(e));
                    }
                    None => {
                        // What passed before the error is handed over first: the
                        // stream stops at an item's end.
                        if !feed.batch.items.is_empty() {
                            let batch = feed.batch.take();
                            if feed.tx.blocking_send(Ok(batch)).is_err() {
                                return;
                            }
                        }
                        let _ = feed.tx.blocking_send(Err(e));
                    }
                },
            }
        });
        let (session, partial) = match loaded.await {
            Ok(loaded) => loaded?,
            // The thread panicked while loading; the join error carries its message.
            Err(_) => {
                return Err(Error::Task(match producer.await {
                    Err(e) => e.to_string(),
                    Ok(()) => "the restore ended before its history was loaded".into(),
                }));
            }
        };
        Ok(RestoreStream {
            session,
            partial,
            rx,
            ready: VecDeque::new(),
        })
    }
}

/// Where a restore's reader puts what it read: the session once, then each entry.
pub(crate) trait Sink {
    /// Called once, before the first entry.
    fn begin(&mut self, session: Session, partial: Option<Partial>);
    /// Hands an entry on; `false` once nobody reads any more.
    fn entry(&mut self, entry: Entry) -> Result<bool>;
}

/// The session, and where a partial replay starts.
type Head = (Session, Option<Partial>);

type Place = Box<dyn FnOnce(&Session) -> Placement + Send>;

/// The restore's sink: dispatches and batches on the reading thread.
struct Feed<R> {
    head: Option<Head>,
    /// Until the stream is handed back: where the session (or an error) goes.
    loaded: Option<tokio::sync::oneshot::Sender<Result<Head>>>,
    /// How to place the session's messages, until `begin` has placed them.
    place: Option<Place>,
    placement: Option<Placement>,
    resolver: R,
    memo: Memo,
    tx: mpsc::Sender<Result<Vec<ReplayItem>>>,
    batch: Batch,
}

impl<R: Resolver> Feed<R> {
    /// Hands the stream back with its session, once; false when its caller left.
    fn announce(&mut self) -> bool {
        match (self.loaded.take(), self.head.take()) {
            (Some(loaded), Some(head)) => loaded.send(Ok(head)).is_ok(),
            (Some(loaded), None) => {
                let _ = loaded.send(Err(Error::Task(
                    "the restore ended before its history was loaded".into(),
                )));
                false
            }
            (None, _) => true,
        }
    }
}

impl<R: Resolver> Sink for Feed<R> {
    fn begin(&mut self, session: Session, partial: Option<Partial>) {
        if let Some(place) = self.place.take() {
            self.placement = Some(place(&session));
        }
        self.head = Some((session, partial));
    }

    fn entry(&mut self, entry: Entry) -> Result<bool> {
        let item = match entry {
            Entry::Message(message) => {
                let Some(placement) = &self.placement else {
                    return Err(Error::Task("an entry came before its session".into()));
                };
                ReplayItem::Message(dispatch::dispatch_parts(
                    &self.resolver,
                    &self.memo,
                    message,
                    placement,
                    Mode::Degrade,
                )?)
            }
            Entry::Item(item) => ReplayItem::Recorded(item),
        };
        // The stream is handed back with its first batch: an error found before that
        // batch is full (a short history's, say) refuses the restore before any item.
        if self.batch.push(item) {
            if !self.announce() {
                return Ok(false);
            }
            let batch = self.batch.take();
            return Ok(self.tx.blocking_send(Ok(batch)).is_ok());
        }
        Ok(true)
    }
}

/// Items waiting to be handed over, and the bytes made for them: distinct encodings
/// (a shared one counts once) and their parts' texts.
struct Batch {
    items: Vec<ReplayItem>,
    /// How many items this batch may hold.
    cap: usize,
    /// Addresses of the encodings counted so far, only to recognise a shared one.
    seen: HashSet<usize>,
    bytes: u64,
}

impl Default for Batch {
    fn default() -> Batch {
        Batch {
            items: Vec::new(),
            cap: BATCH_ITEMS_FIRST,
            seen: HashSet::new(),
            bytes: 0,
        }
    }
}

impl Batch {
    /// Adds an item; true when the batch is full and should be handed over.
    fn push(&mut self, item: ReplayItem) -> bool {
        // A recorded item is moved here from the replayed history, not copied, so only
        // what a message's dispatch made counts: its encodings and its parts' texts.
        let parts = match &item {
            ReplayItem::Message(m) => &m.parts[..],
            ReplayItem::Recorded(_) => &[],
        };
        for part in parts {
            match part {
                dispatch::Part::Text(text) => self.bytes += text.len() as u64,
                // A client's own block is counted by its JSON.
                dispatch::Part::Verbatim(block) => {
                    self.bytes += serde_json::to_vec(block).map_or(0, |v| v.len() as u64)
                }
                dispatch::Part::Attachment(a) => {
                    if self.seen.insert(Arc::as_ptr(&a.prepared) as usize) {
                        self.bytes += a.prepared.content.held_bytes();
                    }
                }
            }
        }
        self.items.push(item);
        self.bytes >= BATCH_BYTES || self.items.len() >= self.cap
    }

    fn take(&mut self) -> Vec<ReplayItem> {
        self.seen.clear();
        self.bytes = 0;
        self.cap = (self.cap * 4).min(BATCH_ITEMS_MAX);
        // Room for the next batch at once: grown a push at a time, its reallocations
        // cost a restore more than its items' own.
        std::mem::replace(&mut self.items, Vec::with_capacity(self.cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attachments::{AttachmentStore, Roots};
    use crate::ids::{MessageId, SessionId};
    use crate::model::{Delivery, Message, Role, ToolsHost};

    fn resolver(dir: &std::path::Path) -> AttachmentStore {
        AttachmentStore::new(Roots {
            configured: dir.to_owned(),
            legacy: vec![],
        })
    }

    fn placement(_: &Session) -> Placement {
        Placement {
            host: "host".into(),
            tools_host: ToolsHost::Local,
        }
    }

    fn text_message(session: SessionId, seq: i64, text: String) -> Message {
        Message {
            id: MessageId::new(),
            session_id: session,
            seq,
            role: Role::Assistant,
            display_text: text,
            model_text: None,
            transcript: None,
            state: Delivery::Delivered,
            created_at: String::new(),
            refs: vec![],
            content: None,
        }
    }

    /// A panic while loading reaches the caller as an error that carries the panic's
    /// own message, not as a closed channel.
    #[tokio::test]
    async fn a_panic_while_loading_is_reported_with_its_message() {
        let dir = tempfile::tempdir().unwrap();
        let err = RestoreStream::start(
            |_: &mut dyn Sink| -> Result<()> { panic!("the log broke here") },
            resolver(dir.path()),
            placement,
            Memo::new(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&err, Error::Task(m) if m.contains("the log broke here")),
            "{err:?}"
        );
    }

    /// The texts a dispatch copies into its parts count against a batch's bytes, so a
    /// history of long replies is handed over in batches of about 4 MiB, not 1,024
    /// replies at a time.
    #[test]
    fn long_texts_cut_a_batch_by_their_bytes() {
        let session = SessionId::new();
        let reply = "a".repeat(150_000);
        let mut batch = Batch {
            cap: BATCH_ITEMS_MAX,
            ..Batch::default()
        };
        let mut held = 0;
        let full = loop {
            held += 1;
            let message = text_message(session, held, reply.clone());
            let item = ReplayItem::Message(ModelMessage {
                parts: vec![dispatch::Part::Text(message.display_text.clone())],
                message,
            });
            if batch.push(item) {
                break held;
            }
        };
        let expected = BATCH_BYTES.div_ceil(150_000) as i64;
        assert_eq!(full, expected, "cut by bytes at {expected} replies");
    }
}
