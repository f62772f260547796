//! Restore as a stream: a session's delivered history, one item at a time, each message
//! dispatched through one budgeted memo on a blocking thread and handed over through a
//! bounded channel. It never holds the whole history's attachment content at once, and
//! it never writes: output is the `format` writers' business.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::dispatch::{self, Memo, Mode, ModelMessage, Placement, Resolver};
use crate::error::{Error, Result};
use crate::model::{Message, Session};

/// One item of a restored history, in history order. An enum so that later kinds of
/// recorded item (an agent's own message, a tool call) can join without breaking
/// the writers that match on it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ReplayItem {
    /// A delivered user or assistant message, with the parts the model gets for it.
    Message(ModelMessage),
}

/// Batches are cut at this many distinct bytes of encoded content (or
/// [`BATCH_ITEMS`] items), so the hand-over costs one wake-up per batch rather than
/// one per message while memory stays bounded by a few batches.
const BATCH_BYTES: u64 = 4 * 1024 * 1024;
const BATCH_ITEMS: usize = 64;

/// A restore in progress. Items arrive in order through a channel of one batch, so
/// the blocking side runs at most one batch ahead of the reader: memory is bounded by
/// backpressure, not by the history's length. Dropping the stream stops the replay.
#[derive(Debug)]
pub struct RestoreStream {
    session: Session,
    rx: mpsc::Receiver<Result<Vec<ReplayItem>>>,
    ready: VecDeque<ReplayItem>,
}

impl RestoreStream {
    /// The session being restored, as its table row says (checked against its log).
    pub fn session(&self) -> &Session {
        &self.session
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

    /// Starts replaying `rows` (the delivered messages, in order) on a blocking thread.
    pub(crate) fn start(
        session: Session,
        rows: Vec<Message>,
        resolver: impl Resolver + 'static,
        placement: Placement,
        memo: Memo,
    ) -> RestoreStream {
        let (tx, rx) = mpsc::channel(1);
        tokio::task::spawn_blocking(move || {
            let mut batch = Batch::default();
            for message in rows {
                let item =
                    dispatch::dispatch_parts(&resolver, &memo, message, &placement, Mode::Degrade)
                        .map_err(Error::from);
                let item = match item {
                    Ok(m) => ReplayItem::Message(m),
                    Err(e) => {
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
                };
                if batch.push(item) && tx.blocking_send(Ok(batch.take())).is_err() {
                    return; // the reader went away
                }
            }
            if !batch.items.is_empty() {
                let _ = tx.blocking_send(Ok(batch.take()));
            }
        });
        RestoreStream {
            session,
            rx,
            ready: VecDeque::new(),
        }
    }
}

/// Items waiting to be handed over, and the distinct encoded bytes they hold (an
/// encoding shared by several items counts once: it is one buffer).
#[derive(Default)]
struct Batch {
    items: Vec<ReplayItem>,
    /// Addresses of the encodings counted so far, only to recognise a shared one.
    seen: Vec<usize>,
    bytes: u64,
}

impl Batch {
    /// Adds an item; true when the batch is full and should be handed over.
    fn push(&mut self, item: ReplayItem) -> bool {
        let ReplayItem::Message(m) = &item;
        for part in &m.parts {
            if let dispatch::Part::Attachment(a) = part {
                let ptr = Arc::as_ptr(&a.prepared) as usize;
                if !self.seen.contains(&ptr) {
                    self.seen.push(ptr);
                    self.bytes += a.prepared.content.encoded_len();
                }
            }
        }
        self.items.push(item);
        self.bytes >= BATCH_BYTES || self.items.len() >= BATCH_ITEMS
    }

    fn take(&mut self) -> Vec<ReplayItem> {
        self.seen.clear();
        self.bytes = 0;
        std::mem::take(&mut self.items)
    }
}
