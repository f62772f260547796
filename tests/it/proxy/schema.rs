//! Item 6 of the issue: every request and notification on both sides of the proxy that
//! the schema knows parses as the schema's type for its method, over a run that sends
//! each method the proxy relays or makes itself: settings, cancellation, close, resume
//! (refused, so the agent side is made again with the settings re-sent), load, delete,
//! and a restart after a crash. The other proxy tests run the same check on their own
//! traffic; this one also sees that the agent got each method, under its own session
//! ids, and the client only the store's.

use agent_client_protocol::v1::schema::{
    CancelNotification, CloseSessionRequest, DeleteSessionRequest, LoadSessionRequest,
    PromptRequest, ResumeSessionRequest, SetSessionConfigOptionRequest, SetSessionModeRequest,
    StopReason,
};
use serde_json::Value;

use super::{
    Seen, Setup, assert_schema_accepts, call, client, eventually, open_session, prompt_text,
    text_block,
};

/// Every method the agent received, once each, in the order it first did.
fn methods(entries: &[Value]) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for e in entries {
        if let Some(method) = e["method"].as_str()
            && !seen.iter().any(|m| m == method)
        {
            seen.push(method.to_owned());
        }
    }
    seen
}

#[tokio::test]
async fn every_message_either_side_receives_parses_as_the_schemas_types() {
    let s = Setup::new();

    // An agent that resumes, closes and deletes sessions.
    let seen = Seen::default();
    let mut proxy = s.proxy(&["--resume", "--close", "--delete"]);
    let stops = client(&mut proxy, &seen, {
        let (cwd, seen) = (s.cwd.clone(), seen.clone());
        async move |cx| {
            let id = open_session(&cx, &cwd).await?;
            call(&cx, SetSessionModeRequest::new(id.clone(), "code")).await?;
            call(
                &cx,
                SetSessionConfigOptionRequest::new(id.clone(), "speed", "fast"),
            )
            .await?;
            let mut stops = vec![prompt_text(&cx, &id, "hello").await?.stop_reason];
            let hanging =
                cx.send_request(PromptRequest::new(id.clone(), vec![text_block("hang on")]));
            eventually("the turn to begin", || {
                seen.raw_updates()
                    .iter()
                    .any(|u| u["content"]["text"] == "waiting to be cancelled")
            })
            .await;
            cx.send_notification(CancelNotification::new(id.clone()))?;
            stops.push(hanging.block_task().await?.stop_reason);
            // Closed, the agent forgets the session: resuming it makes a new agent
            // session, told the settings again.
            call(&cx, CloseSessionRequest::new(id.clone())).await?;
            call(&cx, ResumeSessionRequest::new(id.clone(), &cwd)).await?;
            stops.push(prompt_text(&cx, &id, "again").await?.stop_reason);
            // A crash, and the agent started again for the next request.
            assert!(prompt_text(&cx, &id, "crash now").await.is_err());
            stops.push(prompt_text(&cx, &id, "back?").await?.stop_reason);
            call(&cx, DeleteSessionRequest::new(id.clone())).await?;
            Ok(stops)
        }
    })
    .await;
    assert_eq!(
        stops,
        [
            StopReason::EndTurn,
            StopReason::Cancelled,
            StopReason::EndTurn,
            StopReason::EndTurn
        ]
    );
    assert!(proxy.wait().success());
    assert_schema_accepts(&seen, &s.report);
    let first = s.report.entries();
    assert_eq!(
        methods(&first),
        [
            "initialize",
            "session/new",
            "session/set_mode",
            "session/set_config_option",
            "session/prompt",
            "session/cancel",
            "session/close",
            "session/resume",
            "session/delete"
        ]
    );
    // Resumed after the close: refused, so a new session, and the settings again.
    let mut after_resume: Vec<&str> = first
        .iter()
        .filter_map(|e| e["method"].as_str())
        .skip_while(|m| *m != "session/resume")
        .take(4)
        .collect();
    after_resume[2..].sort();
    assert_eq!(
        after_resume,
        [
            "session/resume",
            "session/new",
            "session/set_config_option",
            "session/set_mode"
        ]
    );
    // The settings were given to each agent session the client's session had: the
    // first, the one made when the resume was refused, and the one after the restart.
    let modes = s.report.requests("session/set_mode");
    let options = s.report.requests("session/set_config_option");
    assert_eq!((modes.len(), options.len()), (3, 3));
    for (mode, option) in modes.iter().zip(&options) {
        assert_eq!(mode["modeId"], "code");
        assert_eq!(option["configId"], "speed");
        assert_eq!(option["value"], "fast");
        assert_eq!(mode["sessionId"], option["sessionId"]);
    }
    assert_ne!(modes[0]["sessionId"], modes[1]["sessionId"]);
    assert_ne!(modes[1]["sessionId"], modes[2]["sessionId"]);
    assert_eq!(s.report.pids().len(), 2, "the agent was started again");
    assert_eq!(s.report.requests("initialize").len(), 2);

    // An agent that loads sessions: a session loaded while the agent still knows it
    // is loaded on the agent's side too.
    let seen = Seen::default();
    let mut proxy = s.proxy(&["--load"]);
    let before = s.report.entries().len();
    client(&mut proxy, &seen, {
        let cwd = s.cwd.clone();
        async move |cx| {
            let id = open_session(&cx, &cwd).await?;
            prompt_text(&cx, &id, "hello").await?;
            call(&cx, LoadSessionRequest::new(id.clone(), &cwd)).await?;
            prompt_text(&cx, &id, "still there?").await?;
            Ok(())
        }
    })
    .await;
    assert!(proxy.wait().success());
    assert_schema_accepts(&seen, &s.report);
    let second = s.report.entries().split_off(before);
    assert!(methods(&second).contains(&"session/load".to_owned()));
    let loaded = s.report.requests("session/load");
    assert_eq!(loaded.len(), 1);
    // The agent knew the session: its second prompt carries no restored conversation.
    let prompts = s.report.prompts();
    let last = prompts.last().expect("a prompt");
    assert_eq!(last.len(), 1, "{last:#?}");

    // Each side saw only its own session ids: the client the store's, the agent its own.
    for m in seen.raw() {
        if let Some(id) = m["params"]["sessionId"].as_str() {
            assert!(id.parse::<sessionstore::SessionId>().is_ok(), "{m}");
        }
    }
    for e in s.report.entries() {
        if let Some(id) = e["params"]["sessionId"].as_str() {
            assert!(id.starts_with("agent-"), "{e}");
        }
    }
}
