use super::*;

fn update(json: serde_json::Value) -> SessionUpdate {
    serde_json::from_value(json).expect("a valid update")
}

fn chunk(kind: &str, text: &str, id: Option<&str>) -> SessionUpdate {
    let mut v = serde_json::json!({
        "sessionUpdate": kind,
        "content": {"type": "text", "text": text},
    });
    if let Some(id) = id {
        v["messageId"] = id.into();
    }
    update(v)
}

/// The direct reads of a plain chunk, from its text and from its `Value`, and the
/// general read they fall back to, give the same update or the same refusal for
/// every shape near the one they take.
#[test]
fn an_update_read_from_text_is_the_update_read_from_its_value() {
    let texts = [
        r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"}}"#,
        r#"{"content":{"text":"a\n\u00e9","type":"text"},"messageId":"m1","sessionUpdate":"agent_thought_chunk"}"#,
        r#"{"sessionUpdate":"user_message_chunk","messageId":null,"content":{"type":"text","text":""}}"#,
        r#"{"sessionUpdate":"agent_message_chunk","messageId":7,"content":{"type":"text","text":"a"}}"#,
        r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a","annotations":{"priority":1.0}}}"#,
        r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a","_meta":{"k":1}}}"#,
        r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"},"_meta":{"k":1}}"#,
        r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a"},"extra":1}"#,
        r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AA==","mimeType":"image/png"}}"#,
        r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text"}}"#,
        r#"{"sessionUpdate":"agent_message_chunk","sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"a"}}"#,
        r#"{"sessionUpdate":"plan","entries":[]}"#,
        r#"{"sessionUpdate":{"agent_message_chunk":null},"content":{"type":"text","text":"a"}}"#,
        r#"{"sessionUpdate":"agent_message_chunk","content":{"type":{"text":null},"text":"a"}}"#,
        r#"{"sessionUpdate":"plan","content":{"type":"text","text":"a"}}"#,
        r#"{"sessionUpdate":"a_kind_from_a_newer_agent","x":[1,2]}"#,
        r#"{"content":{"type":"text","text":"a"}}"#,
        r#"[1]"#,
        r#"{"sessionUpdate":"agent_message_chunk","content":["text","hi"]}"#,
        r#"["agent_message_chunk",null,{"type":"text","text":"hi"}]"#,
    ];
    for text in texts {
        let value: serde_json::Value = serde_json::from_str(text).expect("JSON");
        let general = Update::read_value(&value);
        assert_eq!(Update::from_text(text), general, "{text}");
        assert_eq!(Update::from_value(&value), general, "{text}");
    }
    assert!(matches!(
        Update::from_text("{"),
        Err(Refusal::NotJson { .. })
    ));
}

fn bodies(outcome: &Outcome) -> Vec<serde_json::Value> {
    outcome
        .items
        .iter()
        .map(|(_, b)| {
            let mut v: serde_json::Value = serde_json::from_str(&b.to_json()).unwrap();
            v["kind"] = b.kind().into();
            v
        })
        .collect()
}

/// Applies `updates` to an empty session and returns the bodies it makes.
fn check(updates: &[SessionUpdate]) -> Vec<serde_json::Value> {
    bodies(&apply(State::default(), &known(updates)).unwrap())
}

fn known(updates: &[SessionUpdate]) -> Vec<Update> {
    updates.iter().cloned().map(Update::Known).collect()
}

#[test]
fn chunks_of_one_message_coalesce_and_other_content_is_its_own_block() {
    let image = update(serde_json::json!({
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "image", "mimeType": "image/png", "data": "AA=="},
        "messageId": "m",
    }));
    let got = check(&[
        chunk("agent_message_chunk", "Hello, ", Some("m")),
        chunk("agent_message_chunk", "world", None),
        image,
        chunk("agent_message_chunk", "after", Some("m")),
        chunk("agent_message_chunk", " the image", Some("m")),
    ]);
    assert_eq!(got.len(), 1, "{got:?}");
    let content = got[0]["content"].as_array().unwrap();
    assert_eq!(content.len(), 3);
    assert_eq!(content[0]["text"], "Hello, world");
    assert_eq!(content[1]["type"], "image");
    assert_eq!(content[2]["text"], "after the image");
    assert_eq!(got[0]["messageId"], "m");
}

#[test]
fn a_new_message_id_or_another_kind_ends_the_message() {
    let got = check(&[
        chunk("agent_message_chunk", "one", Some("a")),
        chunk("agent_message_chunk", "two", Some("b")),
        chunk("agent_thought_chunk", "hmm", Some("b")),
        chunk("agent_thought_chunk", " yes", None),
        chunk("agent_message_chunk", "three", Some("b")),
        update(serde_json::json!({"sessionUpdate": "current_mode_update", "currentModeId": "x"})),
        chunk("agent_message_chunk", "four", Some("b")),
    ]);
    let kinds: Vec<&str> = got.iter().map(|v| v["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "agent_message",
            "agent_message",
            "agent_thought",
            "agent_message",
            "current_mode_update",
            "agent_message"
        ]
    );
    assert_eq!(got[2]["content"][0]["text"], "hmm yes");
}

#[test]
fn tool_call_updates_replace_present_fields_and_keep_absent_ones() {
    let got = check(&[
        update(
            serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "t",
            "title": "Read", "kind": "read", "rawInput": {"p": 1}}),
        ),
        update(
            serde_json::json!({"sessionUpdate": "tool_call_update", "toolCallId": "t",
            "status": "in_progress"}),
        ),
        update(
            serde_json::json!({"sessionUpdate": "tool_call_update", "toolCallId": "t",
            "title": "Read (done)"}),
        ),
        update(
            serde_json::json!({"sessionUpdate": "tool_call_update", "toolCallId": "t",
            "status": "completed",
            "content": [{"type": "content", "content": {"type": "text", "text": "ok"}}]}),
        ),
    ]);
    assert_eq!(got.len(), 1);
    let call = &got[0];
    assert_eq!(call["title"], "Read (done)");
    assert_eq!(call["kind"], "tool_call", "the item kind, set by `bodies`");
    assert_eq!(call["status"], "completed");
    assert_eq!(call["rawInput"], serde_json::json!({"p": 1}));
    assert_eq!(call["content"][0]["content"]["text"], "ok");
}

#[test]
fn later_batches_continue_the_stored_tail_and_merge_into_stored_calls() {
    let message = ItemId::new();
    let call_item = ItemId::new();
    let mut state = State {
        tail: Some((
            message,
            ItemBody::AgentMessage(AgentText {
                message_id: None,
                content: vec![ContentBlock::from("Hel")],
            }),
        )),
        ..State::default()
    };
    state
        .tool_calls
        .insert("t".into(), (call_item, ToolCall::new("t", "Run")));
    let outcome = apply(
        state,
        &known(&[
            chunk("agent_message_chunk", "lo", None),
            update(serde_json::json!({"sessionUpdate": "tool_call_update",
                "toolCallId": "t", "status": "failed"})),
        ]),
    )
    .unwrap();
    assert_eq!(outcome.created, 0);
    assert_eq!(outcome.items[0].0, Slot::Stored(message));
    assert_eq!(bodies(&outcome)[0]["content"][0]["text"], "Hello");
    assert_eq!(outcome.items[1].0, Slot::Stored(call_item));
    assert_eq!(bodies(&outcome)[1]["status"], "failed");
}

#[test]
fn items_replay_as_the_updates_a_client_loads_and_only_messages_reach_a_model() {
    let session = SessionId::new();
    let input = [
        chunk("agent_thought_chunk", "think", Some("t")),
        chunk("agent_message_chunk", "one ", Some("m")),
        update(serde_json::json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "image", "mimeType": "image/png", "data": "AA=="},
            "messageId": "m"})),
        chunk("agent_message_chunk", "two", Some("m")),
        update(
            serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "c",
            "title": "ls"}),
        ),
        update(
            serde_json::json!({"sessionUpdate": "tool_call_update", "toolCallId": "c",
            "status": "completed"}),
        ),
        update(serde_json::json!({"sessionUpdate": "current_mode_update",
            "currentModeId": "ask"})),
    ];
    let outcome = apply(State::default(), &known(&input)).unwrap();
    let replayed: Vec<SessionUpdate> = outcome
        .items
        .iter()
        .flat_map(|(_, body)| replay_updates(body))
        .map(|u| match u {
            Update::Known(u) => u,
            Update::Opaque(v) => panic!("no opaque update was recorded: {v}"),
        })
        .collect();
    let tags: Vec<String> = replayed.iter().map(tag).collect();
    assert_eq!(
        tags,
        [
            "agent_thought_chunk",
            "agent_message_chunk",
            "agent_message_chunk",
            "agent_message_chunk",
            "tool_call",
            "current_mode_update"
        ]
    );
    // Each line a client reads is a session/update the schema crate accepts, and
    // recording the replay again gives the same items.
    for update in &replayed {
        let line = serde_json::json!({"jsonrpc": "2.0", "method": "session/update",
            "params": acp::SessionNotification::new(session.to_string(), update.clone())});
        parse_line(&line.to_string(), session).unwrap();
    }
    assert_eq!(
        apply(State::default(), &known(&replayed)).unwrap().items,
        outcome.items
    );
    let model: Vec<Option<Vec<ContentBlock>>> =
        outcome.items.iter().map(|(_, b)| model_text(b)).collect();
    assert_eq!(model[0], None, "thoughts stay out of model requests");
    assert_eq!(
        model[1],
        Some(vec![ContentBlock::from("one "), ContentBlock::from("two")])
    );
    assert!(model[2..].iter().all(Option::is_none));
}

/// An opaque update is an item of its own, ends an agent message that ran before
/// it, and replays as it came.
#[test]
fn an_unknown_kind_is_kept_whole_between_the_messages_it_parts() {
    let odd = serde_json::json!({"sessionUpdate": "future_thing", "deep": {"n": [1, 2]}});
    let updates = vec![
        Update::Known(chunk("agent_message_chunk", "one", None)),
        Update::Opaque(odd.clone()),
        Update::Known(chunk("agent_message_chunk", "two", None)),
    ];
    let outcome = apply(State::default(), &updates).unwrap();
    assert_eq!(outcome.created, 3);
    assert_eq!(outcome.items[1].1, ItemBody::Opaque(odd.clone()));
    assert_eq!(
        replay_updates(&outcome.items[1].1),
        vec![Update::Opaque(odd)]
    );
    assert_eq!(bodies(&outcome)[2]["content"][0]["text"], "two");
}

#[test]
fn refusals_name_the_update() {
    let refused = |updates: &[SessionUpdate]| apply(State::default(), &known(updates)).unwrap_err();
    let call =
        update(serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "t", "title": "x"}));
    assert_eq!(
        refused(&[
            call.clone(),
            update(serde_json::json!({"sessionUpdate": "tool_call_update", "toolCallId": "u"}))
        ]),
        (1, Refusal::UnknownToolCall { id: "u".into() })
    );
    assert_eq!(
        refused(&[call.clone(), call]),
        (1, Refusal::DuplicateToolCall { id: "t".into() })
    );
    assert_eq!(
        refused(&[chunk("user_message_chunk", "hi", None)]),
        (0, Refusal::UserMessageChunk)
    );
    assert_eq!(
        refused(&[update(
            serde_json::json!({"sessionUpdate": "notice", "severity": "info", "title": "t"})
        )]),
        (
            0,
            Refusal::NotRecorded {
                kind: "notice".into()
            }
        )
    );
}

#[test]
fn lines_are_bare_updates_or_notifications_of_this_session() {
    let session = SessionId::new();
    let bare = r#"{"sessionUpdate":"plan","entries":[]}"#;
    assert!(matches!(
        parse_line(bare, session),
        Ok(Update::Known(SessionUpdate::Plan(_)))
    ));
    let wrapped = format!(
        r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"{session}","update":{bare}}}}}"#
    );
    assert!(matches!(
        parse_line(&wrapped, session),
        Ok(Update::Known(SessionUpdate::Plan(_)))
    ));
    let other = wrapped.replace(&session.to_string(), "elsewhere");
    assert!(matches!(
        parse_line(&other, session),
        Err(Refusal::OtherSession { .. })
    ));
    assert!(matches!(
        parse_line("[1]", session),
        Err(Refusal::NotJson { .. })
    ));
    // A kind the schema does not know is kept as it came; a known kind that does
    // not read as that kind, and an object with no kind, are refused.
    assert_eq!(
        parse_line(r#"{"sessionUpdate":"no_such_thing","x":[1]}"#, session),
        Ok(Update::Opaque(
            serde_json::json!({"sessionUpdate": "no_such_thing", "x": [1]})
        ))
    );
    assert!(matches!(
        parse_line(r#"{"sessionUpdate":"tool_call","title":"no id"}"#, session),
        Err(Refusal::NotAnUpdate { .. })
    ));
    assert!(matches!(
        parse_line(r#"{"kind":"plan"}"#, session),
        Err(Refusal::NotAnUpdate { .. })
    ));
    assert!(matches!(
        parse_line(r#"{"method":"session/prompt"}"#, session),
        Err(Refusal::NotAnUpdate { .. })
    ));
}

/// A `usage_update` is kept as the update it came as (an `opaque` item, which a
/// copy leaves out), replays as it came, ends an agent message like any other
/// update, and the session's figures follow the latest one: its context always,
/// its cost only when it has one.
#[test]
fn a_usage_update_is_kept_as_it_came_and_the_figures_follow_the_latest() {
    let first = serde_json::json!({"sessionUpdate": "usage_update", "used": 5,
        "size": 10, "cost": {"amount": 0.5, "currency": "USD"}});
    let second = serde_json::json!({"sessionUpdate": "usage_update", "used": 7, "size": 10});
    let updates = known(&[
        chunk("agent_message_chunk", "a", None),
        update(first.clone()),
        chunk("agent_message_chunk", "b", None),
        update(second.clone()),
    ]);
    let outcome = apply(State::default(), &updates).unwrap();
    assert_eq!(outcome.items.len(), 4, "the usage update ends the message");
    assert_eq!(outcome.items[1].1, ItemBody::Opaque(first.clone()));
    assert!(is_usage(&outcome.items[1].1) && !is_usage(&outcome.items[0].1));
    assert_eq!(replay_updates(&outcome.items[3].1)[0].to_value(), second);
    assert_eq!(made_by(&updates[1]), Some(ItemBody::Opaque(first)));
    assert!(reports_usage(&updates) && !reports_usage(&updates[..1]));
    let mut figures = crate::model::SessionFigures::default();
    take_figures(&mut figures, &updates);
    assert_eq!(
        serde_json::to_value(&figures).unwrap(),
        serde_json::json!({"cost": {"amount": 0.5, "currency": "USD"},
            "context": {"used": 7, "size": 10}})
    );
}
