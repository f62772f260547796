//! Group commit on both engines: writes from many sessions at once share commits, and
//! a member refused inside its group is refused alone while the others commit.

use agent_client_protocol_schema::v1::SessionUpdate;
use sessionstore::model::NewSession;
use sessionstore::store::Verify;
use sessionstore::{Error, Store};

use crate::support::Whole;
use crate::support::{TestStore, conformance, user_text};

conformance!(
    concurrent_writes_of_many_sessions_share_commits,
    a_refused_member_of_a_group_is_refused_alone,
);

fn update(value: serde_json::Value) -> SessionUpdate {
    serde_json::from_value(value).expect("a valid update")
}

fn chunk(text: &str) -> SessionUpdate {
    update(serde_json::json!({"sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": text}}))
}

/// An update the store refuses inside the write: it names a tool call never recorded.
fn orphan_tool_update() -> SessionUpdate {
    update(serde_json::json!({"sessionUpdate": "tool_call_update",
        "toolCallId": "never-recorded", "status": "completed"}))
}

async fn sessions(store: &Store, n: usize) -> Vec<sessionstore::SessionId> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(
            store
                .create_session(NewSession::default())
                .await
                .unwrap()
                .id,
        );
    }
    ids
}

/// 32 sessions, each recording 8 chunks and sending one message at once: every write
/// lands, in order within its session, and fewer commits than writes were made.
async fn concurrent_writes_of_many_sessions_share_commits(b: TestStore) {
    let store = b.open().await;
    let ids = sessions(&store, 32).await;
    let before = sessionstore::testkit::write_stats(&store);
    let mut tasks = tokio::task::JoinSet::new();
    for (n, id) in ids.iter().copied().enumerate() {
        let store = store.clone();
        tasks.spawn(async move {
            store.send(id, user_text(&format!("question {n}"))).await?;
            for i in 0..8 {
                store.record(id, vec![chunk(&format!("{n}.{i} "))]).await?;
            }
            Ok::<_, Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap().unwrap();
    }
    let after = sessionstore::testkit::write_stats(&store);
    let writes = after.writes - before.writes;
    let commits = after.commits - before.commits;
    assert_eq!(writes, 32 * 9, "{after:?}");
    assert!(
        commits < writes,
        "no commit was shared: {commits} for {writes} writes"
    );
    for (n, id) in ids.iter().copied().enumerate() {
        let items = store.all_items(id).await.unwrap();
        assert_eq!(items.len(), 1, "the chunks coalesce into one message");
        let sessionstore::model::ItemBody::AgentMessage(message) = &items[0].body else {
            panic!("not an agent message: {:?}", items[0].body);
        };
        let text = serde_json::to_string(&message.content).unwrap();
        let expected: String = (0..8).map(|i| format!("{n}.{i} ")).collect();
        assert!(text.contains(&expected), "{text}");
        assert_eq!(store.all_messages(id).await.unwrap().len(), 1);
    }
}

/// Many sessions record at once, every other one with a batch whose second update is
/// refused inside the write: those store nothing of their batch, and every other
/// session's batch is stored whole, whichever group each landed in.
async fn a_refused_member_of_a_group_is_refused_alone(b: TestStore) {
    let store = b.open().await;
    let ids = sessions(&store, 24).await;
    let mut tasks = tokio::task::JoinSet::new();
    for (n, id) in ids.iter().copied().enumerate() {
        let store = store.clone();
        tasks.spawn(async move {
            let mut batch = vec![chunk("kept? ")];
            if n % 2 == 1 {
                batch.push(orphan_tool_update());
            }
            (n, store.record(id, batch).await)
        });
    }
    while let Some(done) = tasks.join_next().await {
        let (n, outcome) = done.unwrap();
        if n % 2 == 1 {
            let e = outcome.expect_err("a batch with an orphan tool update is refused");
            assert!(e.is_refused(), "{e}");
        } else {
            outcome.unwrap();
        }
    }
    for (n, id) in ids.iter().copied().enumerate() {
        let items = store.all_items(id).await.unwrap();
        assert_eq!(items.len(), 1 - n % 2, "session {n}: {items:?}");
    }
    let verified = store.verify(Verify::Check).await.unwrap().after;
    assert!(verified.problems.is_empty(), "{:?}", verified.problems);
}
