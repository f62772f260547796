//! The agent misbehaving mid-turn behind the proxy: crashing (the client gets an
//! error naming it, the turn is marked failed, the next prompt starts a new agent),
//! and going silent (a cancellation still ends the turn; `--agent-timeout` ends one
//! the agent never answers, with an error to the client and the turn marked failed).
//! Each ends with `verify` ok and every acknowledged turn kept.

use std::time::{Duration, Instant};

use serde_json::json;
use sessionstore::SessionId;
use sessionstore::model::TurnEnd;

use super::{Proxy, prompt, verified};
use crate::support::TestStore;
use crate::support::Whole;

/// The ends of the session's turns, in order, as the store has them.
async fn turn_ends(t: &TestStore, session: &str) -> Vec<Option<TurnEnd>> {
    let session: SessionId = session.parse().unwrap();
    let store = t.open().await;
    let turns = store.all_turns(session).await.unwrap();
    turns.into_iter().map(|turn| turn.end).collect()
}

fn stopped(reason: &str) -> Option<TurnEnd> {
    Some(TurnEnd::Stopped {
        stop_reason: reason.to_owned(),
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_crashes_mid_turn_fails_the_turn_and_the_next_prompt_starts_it_again() {
    let t = TestStore::new().await;
    let mut p = Proxy::start(&t, &[], &["--last-block"]);
    let session = p.new_session(t.dir.path());
    p.ok("session/prompt", prompt(&session, "before"));
    let answer = p
        .request("session/prompt", prompt(&session, "crash now"))
        .expect("the proxy answers");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("sessionstore-test-agent") && message.contains("status 3"),
        "the error names the agent and how it ended: {answer}"
    );
    // The agent's chunk before it died was relayed to the client.
    assert!(
        p.seen
            .iter()
            .any(|m| m["params"]["update"]["content"]["text"] == "about to crash"),
        "{:?}",
        p.seen
    );
    p.ok("session/prompt", prompt(&session, "after"));
    p.finish();
    let ends = turn_ends(&t, &session).await;
    assert_eq!(ends.len(), 3, "{ends:?}");
    assert_eq!(ends[0], stopped("end_turn"));
    assert!(
        matches!(&ends[1], Some(TurnEnd::Failed { reason }) if reason.contains("status 3")),
        "{ends:?}"
    );
    assert_eq!(ends[2], stopped("end_turn"));
    verified(&t);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_agent_is_cancelled_by_the_client_before_the_inactivity_limit() {
    let t = TestStore::new().await;
    let mut p = Proxy::start(&t, &["--agent-timeout", "60s"], &[]);
    let session = p.new_session(t.dir.path());
    let id = p
        .send("session/prompt", prompt(&session, "hang"))
        .expect("sent");
    std::thread::sleep(Duration::from_millis(300));
    assert!(p.notify("session/cancel", json!({"sessionId": session})));
    let answer = p.answer(&json!(id)).expect("the turn ends");
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    p.ok("session/prompt", prompt(&session, "after the cancel"));
    p.finish();
    let ends = turn_ends(&t, &session).await;
    assert_eq!(ends, vec![stopped("cancelled"), stopped("end_turn")]);
    verified(&t);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_agent_past_the_inactivity_limit_ends_the_turn_failed() {
    let t = TestStore::new().await;
    let mut p = Proxy::start(&t, &["--agent-timeout", "2s"], &[]);
    let session = p.new_session(t.dir.path());
    // A turn that talks and ends within the limit is not cut short.
    p.ok("session/prompt", prompt(&session, "quick"));
    let began = Instant::now();
    let answer = p
        .request("session/prompt", prompt(&session, "hang"))
        .expect("the proxy answers");
    let waited = began.elapsed();
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("sent nothing") && message.contains("--agent-timeout"),
        "{answer}"
    );
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(20),
        "ended after {waited:?}"
    );
    // The proxy told the agent to stop, and the session goes on.
    p.ok("session/prompt", prompt(&session, "after the limit"));
    p.finish();
    let ends = turn_ends(&t, &session).await;
    assert_eq!(ends.len(), 3, "{ends:?}");
    assert!(
        matches!(&ends[1], Some(TurnEnd::Failed { reason }) if reason.contains("--agent-timeout")),
        "{ends:?}"
    );
    assert_eq!(ends[2], stopped("end_turn"));
    verified(&t);
}
