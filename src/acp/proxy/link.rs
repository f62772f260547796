//! One peer as the proxy writes to it: a bounded queue of frames in front of a writer
//! task (so a slow reader slows the writers instead of piling frames up), and the
//! requests sent on it that wait for answers, which the caller's reader hands to
//! [`Link::answered`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::frame::write_frame;
use super::lock;
use super::rpc::Message;

/// How many frames may wait for a peer before a writer waits.
pub const QUEUE_FRAMES: usize = 64;

/// The peer went away: its writer stopped, or it never answered before it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

#[derive(Debug)]
pub struct Link {
    /// `None` once the link is closed: the writer then drains what is queued and
    /// closes its output.
    queue: Mutex<Option<mpsc::Sender<Vec<u8>>>>,
    next_id: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Message>>>,
}

impl Link {
    /// A link writing to `out` on a task of its own, which closes `out` once the link
    /// is closed or dropped.
    pub fn new(out: impl AsyncWrite + Unpin + Send + 'static) -> Link {
        let (link, frames) = Link::channel();
        tokio::spawn(write_all(out, frames));
        link
    }

    /// A link whose frames are handed to the receiver rather than written: for a peer
    /// reached through another connection (the successor in a conductor's chain).
    pub fn channel() -> (Link, mpsc::Receiver<Vec<u8>>) {
        let (queue, frames) = mpsc::channel(QUEUE_FRAMES);
        let link = Link {
            queue: Mutex::new(Some(queue)),
            next_id: AtomicU64::new(1),
            waiting: Mutex::new(HashMap::new()),
        };
        (link, frames)
    }

    /// Queues `message`, waiting while the queue is full.
    pub async fn send(&self, message: &Message) -> Result<(), Gone> {
        self.send_bytes(message.to_bytes()).await
    }

    /// Queues a frame already written as one line of JSON.
    pub async fn send_bytes(&self, frame: Vec<u8>) -> Result<(), Gone> {
        let queue = lock(&self.queue).clone().ok_or(Gone)?;
        queue.send(frame).await.map_err(|_| Gone)
    }

    /// Closes the link: what is queued is still written, then the output is closed
    /// (for an agent, its standard input: the sign to exit). Later sends are `Gone`.
    pub fn close(&self) {
        lock(&self.queue).take();
    }

    /// Sends a request under a fresh id of this link and waits for its answer. The
    /// answer is the whole response, an error response included; `Gone` when the peer
    /// went away first.
    pub async fn request(&self, method: &str, params: Value) -> Result<Message, Gone> {
        let request = Message::request(Value::Null, method, params);
        self.forward(request).await.1.await
    }

    /// Sends `message` as a request under a fresh id of this link, and returns that id
    /// (for a cancellation) with the answer to wait for.
    pub async fn forward(
        &self,
        mut message: Message,
    ) -> (u64, impl Future<Output = Result<Message, Gone>> + use<>) {
        let (id, answer) = self.expect();
        message.set_id(Value::from(id));
        let sent = self.send(&message).await;
        if sent.is_err() {
            self.lock().remove(&id);
        }
        (id, async move {
            sent?;
            answer.await.map_err(|_| Gone)
        })
    }

    fn expect(&self) -> (u64, oneshot::Receiver<Message>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id, tx);
        (id, rx)
    }

    /// Hands a response read from this peer to the request that waits for it, or back
    /// when none does.
    pub fn answered(&self, response: Message) -> Option<Message> {
        let id = response.id().and_then(Value::as_u64);
        let waiter = id.and_then(|id| self.lock().remove(&id));
        match waiter {
            Some(waiter) => {
                // The requester may have stopped waiting; then the answer has no taker.
                let _ = waiter.send(response);
                None
            }
            None => Some(response),
        }
    }

    /// Every request still waiting gets `Gone`: the peer ended before answering.
    pub fn abandon_all(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Message>>> {
        lock(&self.waiting)
    }
}

/// Writes queued frames to `out`, flushing whenever the queue runs dry: a burst goes
/// out in one write and a lone frame is never held back.
async fn write_all(mut out: impl AsyncWrite + Unpin, mut frames: mpsc::Receiver<Vec<u8>>) {
    while let Some(frame) = frames.recv().await {
        if write_frame(&mut out, &frame).await.is_err() {
            return;
        }
        while let Ok(frame) = frames.try_recv() {
            if write_frame(&mut out, &frame).await.is_err() {
                return;
            }
        }
        if out.flush().await.is_err() {
            return;
        }
    }
    let _ = out.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::AsyncBufReadExt;

    #[tokio::test]
    async fn a_request_gets_the_answer_with_its_id() {
        let (ours, theirs) = tokio::io::duplex(1024);
        let link = std::sync::Arc::new(Link::new(ours));
        let asker = link.clone();
        let pending = tokio::spawn(async move { asker.request("ping", json!({})).await });
        let mut lines = tokio::io::BufReader::new(theirs).lines();
        let sent = lines
            .next_line()
            .await
            .unwrap()
            .expect("the request was written");
        let sent = Message::parse(sent.as_bytes()).expect("a request");
        let id = sent.id().cloned().expect("an id");
        assert!(matches!(
            sent.kind(),
            super::super::rpc::Kind::Request { method: "ping", .. }
        ));
        assert!(
            link.answered(Message::result(json!(12345), json!(1)))
                .is_some()
        );
        assert!(link.answered(Message::result(id, json!("pong"))).is_none());
        let answer = pending.await.unwrap().expect("answered");
        assert_eq!(answer.outcome(), Ok(&json!("pong")));
    }

    #[tokio::test]
    async fn abandoned_requests_see_the_peer_gone() {
        let (ours, _theirs) = tokio::io::duplex(1024);
        let link = std::sync::Arc::new(Link::new(ours));
        let asker = link.clone();
        let pending = tokio::spawn(async move { asker.request("ping", json!({})).await });
        tokio::task::yield_now().await;
        while link.lock().is_empty() {
            tokio::task::yield_now().await;
        }
        link.abandon_all();
        assert_eq!(pending.await.unwrap(), Err(Gone));
    }
}
