//! How a turn ends through the proxy, and what the store keeps of it: cancelled (with a
//! permission request pending, too), crashed (the agent restarted for the next prompt),
//! a prompt sent while a turn runs (queued, then delivered), and a proxy killed
//! mid-turn (the turn kept without an end, and replayed).

use sessionstore::store::{Access, Verify};
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    CancelNotification, LoadSessionRequest, PromptRequest, StopReason,
};
use serde_json::{Value, json};
use sessionstore::model::{Delivery, ItemBody, TurnEnd};
use sessionstore::{SessionId, Store};

use super::{
    AGENT_NAME, Seen, Setup, assert_schema_accepts, call, client, connection, eventually,
    open_session, prompt_text, store_id, text_block, wait_ended,
};
use crate::support::Whole;

/// Whether the client has seen the agent think `text` (the test agent's sign that a
/// `hang` turn has begun).
fn thought(seen: &Seen, text: &str) -> bool {
    seen.raw_updates()
        .iter()
        .any(|u| u["sessionUpdate"] == "agent_thought_chunk" && u["content"]["text"] == text)
}

const WAITING: &str = "waiting to be cancelled";

/// The session's events as `sessionstore events` prints them (the real binary, on the
/// database the proxy wrote).
fn events(s: &Setup, session: SessionId) -> Vec<Value> {
    let out = s.t.run(&["events", "--session", &session.to_string()]);
    assert!(out.status.success(), "{}", crate::support::stderr(&out));
    crate::support::stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one event a line"))
        .collect()
}

fn kinds_of(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["kind"].as_str().expect("a kind"))
        .collect()
}

async fn verified(store: &Store) {
    let report = store
        .verify(Verify::Check)
        .await
        .expect("verify runs")
        .after;
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}

#[tokio::test]
async fn a_cancelled_turn_answers_cancelled_and_is_stored_so() {
    let s = Setup::new();
    let seen = Seen::holding();
    let mut proxy = s.proxy(&[]);
    let (id, stops) = client(&mut proxy, &seen, {
        let (cwd, seen) = (s.cwd.clone(), seen.clone());
        async move |cx| {
            let id = open_session(&cx, &cwd).await?;
            // A turn that waits for the cancellation.
            let hanging =
                cx.send_request(PromptRequest::new(id.clone(), vec![text_block("hang on")]));
            eventually("the turn to begin", || thought(&seen, WAITING)).await;
            cx.send_notification(CancelNotification::new(id.clone()))?;
            let first = hanging.block_task().await?.stop_reason;
            // A turn whose permission request is pending when it is cancelled.
            let asking = cx.send_request(PromptRequest::new(
                id.clone(),
                vec![text_block("ask for permission")],
            ));
            eventually("the permission request", || seen.held() == 1).await;
            cx.send_notification(CancelNotification::new(id.clone()))?;
            let second = asking.block_task().await?.stop_reason;
            // The client's answer comes late: the agent already has its answer.
            seen.allow_held();
            let third = prompt_text(&cx, &id, "and now?").await?.stop_reason;
            Ok((id, [first, second, third]))
        }
    })
    .await;
    assert_eq!(
        stops,
        [
            StopReason::Cancelled,
            StopReason::Cancelled,
            StopReason::EndTurn
        ]
    );
    assert!(proxy.wait().success());
    let session = store_id(&id);

    // The agent got each cancellation for its own session, and `cancelled` as the
    // pending permission's answer (from the proxy: the client had not answered).
    let agent_session = s.report.requests("session/prompt")[0]["sessionId"].clone();
    let cancels: Vec<Value> = s
        .report
        .entries()
        .into_iter()
        .filter(|e| e["method"] == "session/cancel")
        .collect();
    assert_eq!(cancels.len(), 2);
    for cancel in &cancels {
        assert_eq!(cancel["kind"], "notification");
        assert_eq!(cancel["params"]["sessionId"], agent_session);
    }
    let answers = s.report.permission_answers();
    assert_eq!(answers.len(), 2, "{answers:#?}");
    assert_eq!(
        answers[0]["result"]["outcome"],
        json!({"outcome": "cancelled"})
    );
    assert_eq!(
        answers[1]["result"]["outcome"],
        json!({"outcome": "selected", "optionId": "allow"})
    );
    assert_schema_accepts(&seen, &s.report);

    // The store: two turns ended `cancelled`, then one ended; as the binary shows it.
    let store = s.t.open().await;
    let turns = store.all_turns(session).await.expect("the turns");
    let states: Vec<&str> = turns.iter().map(|t| t.state()).collect();
    assert_eq!(states, ["cancelled", "cancelled", "ended"]);
    verified(&store).await;
    let events = events(&s, session);
    let ended: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "turn_ended")
        .collect();
    assert_eq!(ended.len(), 3, "{events:#?}");
    for (e, turn) in ended.iter().zip(&turns) {
        assert_eq!(e["payload"]["id"], turn.id.to_string());
    }
    assert_eq!(ended[0]["payload"]["stopReason"], "cancelled");
    assert_eq!(ended[1]["payload"]["stopReason"], "cancelled");
    assert_eq!(ended[2]["payload"]["stopReason"], "end_turn");
    let shown =
        crate::support::json(&s.t.run(&["session", "show", &session.to_string(), "--json"]));
    let ends: Vec<&Value> = shown["turns"]
        .as_array()
        .expect("the turns are shown")
        .iter()
        .map(|t| &t["end"]["stopReason"])
        .collect();
    assert_eq!(ends, ["cancelled", "cancelled", "end_turn"]);
    assert_eq!(shown["messages"][0]["displayText"], "hang on");
}

#[tokio::test]
async fn a_crashed_agent_fails_the_turn_and_is_started_again_for_the_next_prompt() {
    let s = Setup::new();
    let seen = Seen::default();
    let mut proxy = s.proxy(&[]);
    let (id, crashed, next) = client(&mut proxy, &seen, {
        let cwd = s.cwd.clone();
        async move |cx| {
            let id = open_session(&cx, &cwd).await?;
            let crashed = prompt_text(&cx, &id, "please crash").await;
            let next = prompt_text(&cx, &id, "are you back?").await?;
            Ok((id, crashed, next.stop_reason))
        }
    })
    .await;
    let error = crashed.expect_err("the crashed turn is an error");
    assert!(
        error.message.contains(AGENT_NAME) && error.message.contains("status 3"),
        "the error names the agent and how it ended: {error:?}"
    );
    assert_eq!(next, StopReason::EndTurn);
    assert!(proxy.wait().success());
    let session = store_id(&id);

    // The second prompt went to a new agent, which was told the conversation so far,
    // the crashed turn included.
    let pids = s.report.pids();
    assert_eq!(pids.len(), 2, "the agent was started again");
    wait_ended(pids[0], "the crashed agent");
    let prompts = s.report.prompts();
    assert_eq!(prompts.len(), 2);
    let blocks = &prompts[1];
    let restored = blocks[0]["text"].as_str().expect("text");
    assert!(restored.starts_with("[sessionstore]"), "{blocks:#?}");
    let all: String = blocks
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(all.contains("please crash"), "{all}");
    assert_eq!(
        blocks.last(),
        Some(&json!({"type": "text", "text": "are you back?"}))
    );
    assert_schema_accepts(&seen, &s.report);

    // The store: the crashed turn failed, naming the agent; the next one ended.
    let store = s.t.open().await;
    let turns = store.all_turns(session).await.expect("the turns");
    let states: Vec<&str> = turns.iter().map(|t| t.state()).collect();
    assert_eq!(states, ["failed", "ended"]);
    match &turns[0].end {
        Some(TurnEnd::Failed { reason }) => assert!(reason.contains(AGENT_NAME), "{reason}"),
        other => panic!("the crashed turn ended {other:?}"),
    }
    verified(&store).await;
    let out = s.t.run(&["verify"]);
    assert!(out.status.success(), "{}", crate::support::stdout(&out));
}

#[tokio::test]
async fn a_prompt_sent_during_a_turn_is_queued_and_that_turn_is_answered_before_it_runs() {
    let s = Setup::new();
    let seen = Seen::holding();
    let mut proxy = s.proxy(&[]);
    let config = s.t.config.clone();
    let (id, first, second) = client(&mut proxy, &seen, {
        let (cwd, seen) = (s.cwd.clone(), seen.clone());
        async move |cx| {
            let id = open_session(&cx, &cwd).await?;
            let session = store_id(&id);
            let hanging =
                cx.send_request(PromptRequest::new(id.clone(), vec![text_block("hang on")]));
            eventually("the turn to begin", || thought(&seen, WAITING)).await;
            let queued = cx.send_request(PromptRequest::new(
                id.clone(),
                vec![text_block("then ask for permission")],
            ));
            // Stored queued while the first turn runs.
            let store = Store::open_as(config, Access::ReadOnly)
                .await
                .expect("the store opens");
            let mut stored = vec![];
            let start = std::time::Instant::now();
            while stored.len() < 2 {
                assert!(
                    start.elapsed() < super::TIMEOUT,
                    "the second prompt is stored"
                );
                stored = store.all_messages(session).await.expect("the messages");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert_eq!(stored[1].display_text, "then ask for permission");
            assert_eq!(stored[1].state, Delivery::Queued);
            cx.send_notification(CancelNotification::new(id.clone()))?;
            // The first turn's answer comes as it ends, before the second turn (which
            // waits on its permission request) ends.
            let first = hanging.block_task().await?.stop_reason;
            eventually("the second turn's permission request", || seen.held() == 1).await;
            seen.allow_held();
            let second = queued.block_task().await?.stop_reason;
            Ok((id, first, second))
        }
    })
    .await;
    assert_eq!(first, StopReason::Cancelled);
    assert_eq!(second, StopReason::EndTurn);
    assert!(proxy.wait().success());
    let session = store_id(&id);

    // The agent got the second prompt after the cancellation, as a turn of its own.
    let order: Vec<String> = s
        .report
        .entries()
        .into_iter()
        .filter(|e| e["method"] == "session/prompt" || e["method"] == "session/cancel")
        .map(|e| {
            let text = e["params"]["prompt"][0]["text"].as_str().unwrap_or("");
            format!("{} {text}", e["method"].as_str().expect("a method"))
        })
        .collect();
    assert_eq!(
        order,
        [
            "session/prompt hang on",
            "session/cancel ",
            "session/prompt then ask for permission"
        ]
    );
    assert_schema_accepts(&seen, &s.report);

    // The store: the second message delivered after the first turn ended, by a turn
    // of its own.
    let store = s.t.open().await;
    let messages = store.all_messages(session).await.expect("the messages");
    assert!(messages.iter().all(|m| m.state == Delivery::Delivered));
    let turns = store.all_turns(session).await.expect("the turns");
    let states: Vec<&str> = turns.iter().map(|t| t.state()).collect();
    assert_eq!(states, ["cancelled", "ended"]);
    assert_eq!(turns[0].messages, [messages[0].id]);
    assert_eq!(turns[1].messages, [messages[1].id]);
    let events = events(&s, session);
    let kinds = kinds_of(&events);
    let first_end = kinds
        .iter()
        .position(|k| *k == "turn_ended")
        .expect("an end");
    let delivered = events
        .iter()
        .position(|e| {
            e["kind"] == "message_delivered" && e["payload"]["id"] == messages[1].id.to_string()
        })
        .expect("the second message is delivered");
    assert!(first_end < delivered, "{kinds:?}");
    verified(&store).await;
}

#[tokio::test]
async fn a_proxy_killed_mid_turn_leaves_the_turn_interrupted_and_replayable() {
    let s = Setup::new();
    let seen = Seen::default();
    // Redaction holds a streamed message's tail back until the message ends (README's
    // durability contract), so a proxy killed mid-message loses that tail: what this
    // pins, that everything written before the kill is kept, needs it off.
    let mut proxy = s.proxy_with(s.root(), &["--redact", "off"], &[]);
    let pid = proxy.pid();
    let config = s.t.config.clone();
    let opened = Arc::new(Mutex::new(None));
    // The connection may end with an error: its proxy is killed under it.
    let _ = connection(&mut proxy, &seen, {
        let (cwd, opened) = (s.cwd.clone(), opened.clone());
        async move |cx| {
            let id = open_session(&cx, &cwd).await?;
            *opened.lock().expect("the slot") = Some(id.clone());
            let session = store_id(&id);
            let _hanging =
                cx.send_request(PromptRequest::new(id.clone(), vec![text_block("hang on")]));
            // Killed once what the turn said so far is durable.
            let store = Store::open_as(config, Access::ReadOnly)
                .await
                .expect("the store opens");
            let start = std::time::Instant::now();
            while store
                .all_items(session)
                .await
                .expect("the items")
                .is_empty()
            {
                assert!(start.elapsed() < super::TIMEOUT, "the thought is recorded");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            // SAFETY: kill(2) with a pid and a signal number has no memory effects.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
            Ok(())
        }
    })
    .await;
    let id = opened
        .lock()
        .expect("the slot")
        .take()
        .expect("the session was opened");
    assert_eq!(proxy.wait().signal(), Some(libc::SIGKILL));
    let agent = s.report.pids()[0];
    // Its agent sees its input close, and exits on its own.
    wait_ended(agent, "the agent of the killed proxy");
    let session = store_id(&id);

    // The store: a turn with no end, its thought kept, and nothing wrong.
    let store = s.t.open().await;
    let turns = store.all_turns(session).await.expect("the turns");
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].state(), "interrupted");
    assert_eq!(turns[0].end, None);
    let items = store.all_items(session).await.expect("the items");
    assert_eq!(items.len(), 1, "{items:?}");
    match &items[0].body {
        ItemBody::AgentThought(text) => {
            assert_eq!(
                serde_json::to_value(&text.content).expect("JSON"),
                json!([{"type": "text", "text": WAITING}])
            );
        }
        other => panic!("the kept item is {other:?}"),
    }
    verified(&store).await;
    drop(store);

    // The next proxy replays it, and the session goes on.
    let seen = Seen::default();
    let mut proxy = s.proxy(&[]);
    let (replay, next) = client(&mut proxy, &seen, {
        let (cwd, seen, id) = (s.cwd.clone(), seen.clone(), id.clone());
        async move |cx| {
            call(&cx, super::initialize()).await?;
            call(&cx, LoadSessionRequest::new(id.clone(), &cwd)).await?;
            let replay = seen.raw();
            let next = prompt_text(&cx, &id, "where were we?").await?;
            Ok((replay, next.stop_reason))
        }
    })
    .await;
    assert_eq!(next, StopReason::EndTurn);
    assert!(proxy.wait().success());
    let turns =
        s.t.open()
            .await
            .all_turns(session)
            .await
            .expect("the turns");
    let replayed: Vec<(&str, &str)> = replay
        .iter()
        .map(|m| {
            let u = &m["params"]["update"];
            (
                u["sessionUpdate"].as_str().expect("a kind"),
                u["content"]["text"].as_str().expect("text"),
            )
        })
        .collect();
    assert_eq!(
        replayed,
        [
            ("user_message_chunk", "hang on"),
            ("agent_thought_chunk", WAITING)
        ]
    );
    // Both are marked as the entries of a turn that has no end.
    for m in &replay {
        let mark = &m["params"]["_meta"][sessionstore::format::TURN_META_KEY];
        assert_eq!(mark["state"], "interrupted", "{m}");
        assert_eq!(mark["id"], turns[0].id.to_string(), "{m}");
    }
    assert_schema_accepts(&seen, &s.report);
    let turns =
        s.t.open()
            .await
            .all_turns(session)
            .await
            .expect("the turns");
    let states: Vec<&str> = turns.iter().map(|t| t.state()).collect();
    assert_eq!(states, ["interrupted", "ended"]);
}
