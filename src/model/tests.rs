use super::*;

/// The direct read of a plain-text body, and `AgentText`'s own read it falls back
/// to, give the same body or the same error.
#[test]
fn a_plain_text_body_reads_as_its_general_read_does() {
    let bodies = [
        r#"{"messageId":"m1","content":[{"type":"text","text":"a"}]}"#,
        r#"{"content":[{"text":"a","type":"text"},{"type":"text","text":"\u00e9"}]}"#,
        r#"{"messageId":null,"content":[]}"#,
        r#"{"content":[{"type":"text","text":"a","annotations":{"priority":1.0}}]}"#,
        r#"{"content":[{"type":"text","text":"a","_meta":{"k":1}}]}"#,
        r#"{"content":[{"type":"image","data":"AA==","mimeType":"image/png"}]}"#,
        r#"{"content":[{"type":"text","text":"a"}],"extra":1}"#,
        r#"{"content":[{"type":"text"}]}"#,
        r#"{"messageId":5,"content":[]}"#,
        r#"{"content":{}}"#,
        r#"{"content":[{"type":{"text":null},"text":"a"}]}"#,
        r#"{"content":[["text","a"]]}"#,
        r#"[null,[{"type":"text","text":"a"}]]"#,
    ];
    for body in bodies {
        let general: Result<AgentText, String> =
            serde_json::from_str(body).map_err(|e| e.to_string());
        let read = AgentText::from_json(body).map_err(|e| e.to_string());
        assert_eq!(read, general, "{body}");
    }
}

/// The direct read of a part's array of plain text blocks, and `ContentBlock`'s
/// own read it falls back to, give the same blocks or the same error.
#[test]
fn plain_text_blocks_read_as_their_general_read_does() {
    let parts = [
        r#"[{"type":"text","text":"a"}]"#,
        r#"[{"text":"a","type":"text"},{"type":"text","text":"\u00e9 b"}]"#,
        r#"[]"#,
        r#"[{"type":"text","text":"a","annotations":{"priority":1.0}}]"#,
        r#"[{"type":"text","text":"a","_meta":{"k":1}}]"#,
        r#"[{"type":"text","text":"a"},{"type":"image","data":"AA==","mimeType":"image/png"}]"#,
        r#"[{"type":"text"}]"#,
        r#"[{"type":{"text":null},"text":"a"}]"#,
        r#"{"type":"text","text":"a"}"#,
        r#"[{"type":"text","text":"a"}"#,
        r#"[["text","a"]]"#,
    ];
    for part in parts {
        let general: Result<Vec<ContentBlock>, String> =
            serde_json::from_str(part).map_err(|e| e.to_string());
        let read = content_blocks(part).map_err(|e| e.to_string());
        assert_eq!(read, general, "{part}");
    }
}

/// A number reads back as the very float written (`verify` compares bodies); without
/// serde_json's `float_roundtrip` each of these read back one step away.
#[test]
fn a_float_reads_back_as_the_float_that_was_written() {
    for x in [
        1.0715660391465826e-75,
        -1.81996730402717e-179,
        -1.603964615428183e143,
        -9.643915712060552e-234,
    ] {
        let json = format!(
            r#"{{"toolCallId":"c1","title":"Read","rawInput":{{"x":{}}}}}"#,
            serde_json::to_string(&x).unwrap()
        );
        let body = ItemBody::from_json("tool_call", &json).unwrap();
        let again = ItemBody::from_json("tool_call", &body.to_json()).unwrap();
        assert_eq!(again, body, "{x:e}");
        let ItemBody::ToolCall(call) = &body else {
            panic!("a tool call");
        };
        assert_eq!(call.raw_input.as_ref().unwrap()["x"].as_f64(), Some(x));
    }
}

/// A problem prints and serializes as the one line `verify` has always printed.
#[test]
fn a_problem_reads_as_verify_prints_it() {
    let session = SessionId::new();
    let message = MessageId::new();
    let changed = Problem::new(
        ProblemKind::ChangedRow,
        format!("message {message} differs from its event log (display text)"),
    )
    .with_session(session)
    .with_message(message);
    let line =
        format!("session {session}: message {message} differs from its event log (display text)");
    assert_eq!(changed.to_string(), line);
    assert_eq!(
        serde_json::to_value(&changed).unwrap(),
        serde_json::json!(line)
    );
    assert_eq!(changed.within_session(session), changed.detail());
    assert_eq!(changed.within_session(SessionId::new()), line);
    assert_eq!(
        (changed.session(), changed.message()),
        (Some(session), Some(message))
    );

    let delivery = Problem::new(
        ProblemKind::Delivery,
        format!("event 7 delivers message {message}, which was never appended"),
    )
    .with_session(session)
    .with_event(EventSeq(7));
    assert_eq!(delivery.to_string(), delivery.detail());
    assert_eq!(delivery.within_session(session), delivery.detail());
    assert_eq!(delivery.event(), Some(EventSeq(7)));

    let schema = Problem::new(
        ProblemKind::SchemaMissing,
        "index messages_queued (on messages) is missing; the version-4 schema has it",
    );
    assert!(
        schema
            .to_string()
            .starts_with("schema: index messages_queued")
    );
    assert_eq!(schema.within_schema(), schema.detail());
    assert_eq!(
        Problem::new(ProblemKind::Integrity, "row 3 missing from index x").to_string(),
        "sqlite: row 3 missing from index x"
    );
}

#[test]
fn an_explicit_title_stays_until_the_next_explicit_one() {
    use TitleSource::{Agent, Explicit, Message};
    // (incoming, in force, whether a title is there) -> replaces
    for (incoming, current, has_title, replaces) in [
        (Explicit, Some(Explicit), true, true),
        (Explicit, Some(Agent), true, true),
        (Explicit, None, true, true),
        (Agent, None, false, true),
        (Agent, Some(Message), true, true),
        (Agent, Some(Agent), true, true),
        (Agent, Some(Explicit), true, false),
        // A title written before V16 has no source and counts as explicit.
        (Agent, None, true, false),
        (Message, None, false, true),
        (Message, Some(Explicit), true, false),
    ] {
        assert_eq!(
            incoming.replaces(current, has_title),
            replaces,
            "{incoming} over {current:?} ({has_title})"
        );
    }
    let event = EventPayload::SessionRenamed {
        title: "t".into(),
        source: None,
    };
    let old: EventPayload = serde_json::from_str(r#"{"kind":"session_renamed","title":"t"}"#)
        .expect("an event written before V16 reads");
    assert_eq!(old, event);
    assert_eq!(
        serde_json::to_string(&EventPayload::SessionArchived {}).unwrap(),
        r#"{"kind":"session_archived"}"#
    );
}

/// A prompt answer's `usage` is read leniently, and a `turn_ended` event carries it
/// only when there is one (an older event reads as none).
#[test]
fn a_turns_usage_is_read_from_its_answer_and_kept_in_its_end_event() {
    let answer = serde_json::json!({"stopReason": "end_turn", "usage": {
        "totalTokens": 9, "inputTokens": 4, "outputTokens": 5, "thoughtTokens": 0,
        "cachedReadTokens": -1, "cachedWriteTokens": "2"}});
    let usage = TurnUsage::of_answer(&answer).unwrap();
    assert_eq!(
        usage.kinds(),
        [Some(4), Some(5), Some(0), None, None, Some(9)]
    );
    for none in [
        serde_json::json!({"stopReason": "end_turn"}),
        serde_json::json!({"usage": null}),
        serde_json::json!({"usage": {"totalTokens": "x"}}),
    ] {
        assert_eq!(TurnUsage::of_answer(&none), None, "{none}");
    }
    let id = TurnId::new();
    let end = TurnEnd::Stopped {
        stop_reason: "end_turn".to_owned(),
    };
    let with = EventPayload::TurnEnded {
        id,
        end: end.clone(),
        usage: Some(usage),
    };
    let text = serde_json::to_string(&with).unwrap();
    assert!(text.contains(r#""usage":{"inputTokens":4,"#), "{text}");
    assert_eq!(serde_json::from_str::<EventPayload>(&text).unwrap(), with);
    let before = format!(
        r#"{{"kind":"turn_ended","id":"{id}","outcome":"stopped","stopReason":"end_turn"}}"#
    );
    let read: EventPayload = serde_json::from_str(&before).unwrap();
    assert_eq!(
        read,
        EventPayload::TurnEnded {
            id,
            end,
            usage: None
        }
    );
    assert_eq!(serde_json::to_string(&read).unwrap(), before);
}
