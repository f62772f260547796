//! The client going away mid-turn: the proxy ends (stopping the agent), the turn is
//! left failed or interrupted, the session loads again in a new proxy with what was
//! acknowledged, and `verify` is ok.

use serde_json::json;
use sessionstore::SessionId;

use super::{Proxy, prompt, verified};
use crate::support::TestStore;

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_goes_mid_turn_leaves_the_session_whole_and_loadable() {
    let t = TestStore::new().await;
    let mut p = Proxy::start(&t, &[], &["--last-block"]);
    let session = p.new_session(t.dir.path());
    p.ok("session/prompt", prompt(&session, "kept"));
    p.send("session/prompt", prompt(&session, "hang"))
        .expect("sent");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let status = p.finish();
    assert!(status.success(), "the proxy ends cleanly: {status}");

    let mut again = Proxy::start(&t, &[], &["--last-block"]);
    again.ok("initialize", json!({"protocolVersion": 1}));
    again.ok(
        "session/load",
        json!({"sessionId": session, "cwd": t.dir.path(), "mcpServers": []}),
    );
    // The replay holds the acknowledged turn.
    assert!(
        again
            .seen
            .iter()
            .any(|m| m["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("from the test agent"))),
        "{:?}",
        again.seen
    );
    again.ok("session/prompt", prompt(&session, "after"));
    again.finish();
    let store = t.open().await;
    let id: SessionId = session.parse().unwrap();
    let states: Vec<String> = store
        .turns(id)
        .await
        .unwrap()
        .iter()
        .map(|turn| turn.state().to_owned())
        .collect();
    assert_eq!(
        states.first().map(String::as_str),
        Some("ended"),
        "{states:?}"
    );
    assert_eq!(
        states.last().map(String::as_str),
        Some("ended"),
        "{states:?}"
    );
    assert_eq!(states.len(), 3, "{states:?}");
    // The abandoned turn: failed, when the proxy recorded the agent's end before it
    // exited, or interrupted.
    assert!(
        matches!(states[1].as_str(), "failed" | "interrupted"),
        "{states:?}"
    );
    verified(&t);
}
