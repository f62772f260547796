//! The recorder of a session's updates: a task per session that gathers what the agent
//! streams for a short window and records it a batch at a time, so relaying never
//! waits for a commit; a flush waits until everything before it is durable.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::super::Failure;
use crate::ids::SessionId;

const RECORD_BATCH: usize = RECORD_QUEUE;
/// How long the recorder gathers updates after the first before it writes them (a
/// flush writes at once): a couple of hundred commits a second rather than one a
/// chunk, and what the client saw runs ahead of what is durable by at most this plus
/// the commit in progress (BENCHMARKS.md, `streaming`).
pub(crate) const RECORD_WINDOW: std::time::Duration = std::time::Duration::from_millis(5);
/// How many updates may wait for the recorder before the agent's reader waits too.
const RECORD_QUEUE: usize = 1024;

#[derive(Clone)]
pub(crate) struct Recorder {
    queue: mpsc::Sender<Record>,
    /// Told by a flush, so a window that is gathering ends at once.
    flushed: Arc<tokio::sync::Notify>,
}

enum Record {
    Update(Value),
    Flush(oneshot::Sender<Result<(), Failure>>),
}

impl Recorder {
    pub(super) fn start(store: crate::Store, session: SessionId) -> Recorder {
        let (queue, mut rx) = mpsc::channel(RECORD_QUEUE);
        let flushed = Arc::new(tokio::sync::Notify::new());
        let told = flushed.clone();
        tokio::spawn(async move {
            // The first failure to record is kept until the next flush, and nothing
            // after it is recorded meanwhile: the turn keeps a prefix of its updates,
            // and its answer is not relayed as if the turn were durable. The flush
            // (the turn's end) clears it, so the next turn records again once the
            // store can write (a disk that was full has room again).
            let mut failed: Option<Failure> = None;
            let mut batch = Vec::new();
            let mut flushes = Vec::new();
            // The stored copy is redacted, a streamed message as one text: its tail is
            // held back from batch to batch until the message ends, and written at a
            // flush at the latest, before the turn's end is committed.
            let redacting = store.config().redaction.is_on();
            let mut streams = crate::redact::Streams::<Value>::default();
            while let Some(first) = rx.recv().await {
                // The window gathers without listening: updates wait in the queue
                // rather than wake this task one by one (a wake costs about as much
                // as recording the update). A flush ends it early.
                if matches!(first, Record::Update(_)) {
                    tokio::select! {
                        () = tokio::time::sleep(RECORD_WINDOW) => {}
                        () = told.notified() => {}
                    }
                }
                let mut next = Some(first);
                while let Some(record) = next.take() {
                    match record {
                        Record::Update(u) => batch.push(u),
                        // What comes after a flush is not before it: gathered next time.
                        Record::Flush(done) => {
                            flushes.push(done);
                            break;
                        }
                    }
                    if batch.len() >= RECORD_BATCH {
                        break;
                    }
                    next = rx.try_recv().ok();
                }
                if redacting {
                    batch = streams.pass(std::mem::take(&mut batch)).0;
                    if !flushes.is_empty() {
                        streams.end(&mut batch);
                    }
                }
                if !batch.is_empty()
                    && failed.is_none()
                    && let Err(e) = record_runs(&store, session, std::mem::take(&mut batch)).await
                {
                    tracing::error!(
                        "cannot record the agent's updates for session {session}: {}",
                        e.message
                    );
                    failed = Some(e);
                }
                batch.clear();
                if !flushes.is_empty() {
                    let outcome = failed.take().map_or(Ok(()), Err);
                    for done in flushes.drain(..) {
                        let _ = done.send(outcome.clone());
                    }
                }
            }
        });
        Recorder { queue, flushed }
    }

    pub(super) async fn record(&self, update: Value) {
        let _ = self.queue.send(Record::Update(update)).await;
    }

    pub(super) async fn flush(&self) -> Result<(), Failure> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .send(Record::Flush(tx))
            .await
            .map_err(|_| Failure::internal("the recorder stopped"))?;
        self.flushed.notify_one();
        rx.await
            .map_err(|_| Failure::internal("the recorder stopped"))?
    }
}

/// Records what the window gathered as the history each update recorded alone makes.
/// Inside a batch a tool call update ends the agent message before it, but across
/// batches the next chunk continues it (the update changes the call in place), so a
/// batch is cut after each `tool_call_update` that a chunk follows.
async fn record_runs(
    store: &crate::Store,
    session: SessionId,
    mut batch: Vec<Value>,
) -> Result<(), Failure> {
    while let Some(cut) = first_cut(&batch) {
        let rest = batch.split_off(cut);
        record_batch(store, session, batch).await?;
        batch = rest;
    }
    record_batch(store, session, batch).await
}

/// Where `batch` must be cut (see [`record_runs`]): after its first `tool_call_update`
/// that an agent message or thought chunk follows.
fn first_cut(batch: &[Value]) -> Option<usize> {
    fn kind(v: &Value) -> &str {
        v.get("sessionUpdate").and_then(Value::as_str).unwrap_or("")
    }
    batch
        .windows(2)
        .position(|pair| {
            kind(&pair[0]) == "tool_call_update"
                && matches!(
                    kind(&pair[1]),
                    "agent_message_chunk" | "agent_thought_chunk"
                )
        })
        .map(|i| i + 1)
}

/// Records a batch; an update the store refuses (a `tool_call_update` for a call it
/// never saw, say) is logged and left out, and the rest is recorded.
async fn record_batch(
    store: &crate::Store,
    session: SessionId,
    mut batch: Vec<Value>,
) -> Result<(), Failure> {
    loop {
        match store.record_json(session, &batch).await {
            Ok(_) => return Ok(()),
            Err(crate::Error::UpdateRefused { line, refusal })
                if line >= 1 && line <= batch.len() =>
            {
                tracing::warn!(
                    "left out an update the store refused for session {session}: {refusal}"
                );
                batch.remove(line - 1);
                if batch.is_empty() {
                    return Ok(());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(text: &str) -> Value {
        json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": text}})
    }

    fn call(id: &str) -> Value {
        json!({"sessionUpdate": "tool_call", "toolCallId": id, "title": "Run",
            "kind": "execute", "status": "pending"})
    }

    fn done(id: &str) -> Value {
        json!({"sessionUpdate": "tool_call_update", "toolCallId": id,
            "status": "completed"})
    }

    /// However the recorder's window cuts an agent's stream into batches (all of it
    /// at once, one update at a time, or cut anywhere in between), the session's
    /// history is the same: updates of earlier calls between chunks, one the store
    /// refuses, thoughts and new calls included.
    #[tokio::test]
    async fn the_history_does_not_depend_on_where_the_window_cuts_the_stream() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::Store::open(crate::Config::in_dir(dir.path()))
            .await
            .unwrap();
        let thought = json!({"sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": "hm "}});
        let stream = vec![
            call("c1"),
            chunk("a "),
            done("c1"),
            chunk("b "),
            done("c1"),
            done("never-seen"),
            done("c1"),
            thought.clone(),
            done("c1"),
            thought,
            call("c2"),
            chunk("c "),
            done("c1"),
            done("c2"),
            chunk("d "),
        ];
        let mut histories = Vec::new();
        let cuttings: Vec<Vec<usize>> = vec![
            vec![],
            (1..stream.len()).collect(),
            vec![2],
            vec![3],
            vec![5, 6],
            vec![8, 12],
            vec![4, 9, 13],
        ];
        for cuts in cuttings {
            let session = store
                .create_session(crate::model::NewSession::default())
                .await
                .unwrap()
                .id;
            let mut from = 0;
            for to in cuts.into_iter().chain([stream.len()]) {
                record_runs(&store, session, stream[from..to].to_vec())
                    .await
                    .unwrap();
                from = to;
            }
            let items = crate::store::whole(|q| store.items(session, q))
                .await
                .unwrap();
            histories.push(items.iter().map(|i| i.body.to_json()).collect::<Vec<_>>());
        }
        assert!(
            histories[0].iter().any(|b| b.contains(r#""text":"a b ""#)),
            "{:?}",
            histories[0]
        );
        for history in &histories[1..] {
            assert_eq!(history, &histories[0]);
        }
    }

    #[test]
    fn a_batch_is_cut_after_a_tool_call_update_that_a_chunk_follows() {
        assert_eq!(first_cut(&[chunk("a"), done("c"), chunk("b")]), Some(2));
        assert_eq!(first_cut(&[done("c"), done("c"), chunk("b")]), Some(2));
        assert_eq!(
            first_cut(&[chunk("a"), done("c"), call("d"), chunk("b")]),
            None
        );
        assert_eq!(first_cut(&[chunk("a"), chunk("b"), done("c")]), None);
    }
}
