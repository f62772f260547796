//! The store's own promises on both engines: every change and its event, queued
//! messages and their drain, renames, a whole recorded turn restored in every format,
//! `verify` (clean, and catching rows edited behind the log), dispatch paths from the
//! configured and the legacy root, and a restore larger than its memo budget. It never
//! checks what only one engine promises without saying so.

use sessionstore::store::Verify;
use sessionstore::store::{Dispatched, Drain};
use std::process::Output;

use agent_client_protocol_schema::v1::SessionUpdate;
use sessionstore::dispatch::{Memo, Mode};
use sessionstore::model::{Delivery, NewSession, ProblemKind, TitleSource, ToolsHost};
use sessionstore::store::Outgoing;
use sessionstore::{Error, SessionId};

use super::common::{expect, session};
use crate::restored::CollectRestore;
use crate::support::Whole;
use crate::support::{
    Expect, RECORDED_TURN, TestStore, block_json, check_attachment, conformance, json, queued_text,
    roles, stderr, stdout, user_text,
};

conformance!(
    every_change_writes_its_event_in_order,
    queued_messages_wait_for_a_drain_that_marks_them_delivered,
    a_rename_is_an_event_and_an_unknown_session_is_named,
    a_whole_turn_is_recorded_and_restores_in_every_format,
    verify_catches_rows_edited_behind_the_logs_back,
    dispatch_gives_paths_that_read_back_from_the_configured_and_legacy_roots,
    a_restore_larger_than_its_memo_budget_reads_evicted_files_again,
);

crate::support::over_tls!(
    every_change_writes_its_event_in_order,
    a_whole_turn_is_recorded_and_restores_in_every_format,
    verify_catches_rows_edited_behind_the_logs_back,
);

fn kinds(events: &[sessionstore::model::Event]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

/// The binary on `b`'s store with `input` on its stdin.
fn run_fed(b: &TestStore, args: &[&str], input: &str) -> Output {
    b.bin().args(args).stdin(input).output()
}

/// `expect` as the binary gives it: it names the machine it runs on.
fn expect_from_binary(session: SessionId, name: &str, bytes: &[u8]) -> Expect {
    Expect {
        host: sessionstore::config::host_name(),
        ..expect(session, name, bytes)
    }
}

async fn every_change_writes_its_event_in_order(b: TestStore) {
    let store = b.open().await;
    let s = store
        .create_session(NewSession {
            tools_host: ToolsHost::Ssh,
            ..NewSession::default()
        })
        .await
        .unwrap();
    let m = store
        .send(s.id, user_text("first question\nmore"))
        .await
        .unwrap();
    let q = store.send(s.id, queued_text("mid-turn")).await.unwrap();
    assert_eq!(q.state, Delivery::Queued);
    store.mark_delivered(s.id, vec![q.id]).await.unwrap();
    let events = store.all_events(s.id).await.unwrap();
    assert_eq!(
        kinds(&events),
        [
            "session_created",
            "message_appended",
            "session_renamed",
            "message_appended",
            "message_delivered"
        ]
    );
    // The log's sequence only grows, on either engine's way of numbering it.
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq), "{events:?}");
    let session = store.session(s.id).await.unwrap();
    assert_eq!(session.title.as_deref(), Some("first question"));
    assert_eq!(session.tools_host, ToolsHost::Ssh);
    assert!(session.updated_at > s.updated_at, "{session:?}");
    let messages = store.all_messages(s.id).await.unwrap();
    assert_eq!(messages.iter().map(|m| m.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(messages[0].id, m.id);
    assert!(messages.iter().all(|m| m.state == Delivery::Delivered));
    let report = store.verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!((report.sessions, report.messages, report.events), (1, 2, 5));

    // The same log through the binary, a line each.
    let out = b.run(&["events", "--session", &s.id.to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect();
    let printed: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(printed, kinds(&events));
}

async fn queued_messages_wait_for_a_drain_that_marks_them_delivered(b: TestStore) {
    let store = b.open().await;
    let s = session(&store, ToolsHost::Local).await;
    store.send(s, Outgoing::user("start")).await.unwrap();
    let stored = store
        .attach_one(s, "later.txt".into(), b"mid-turn notes".to_vec())
        .await
        .unwrap();
    let mut first = Outgoing::user("one more thing");
    first.mid_turn = true;
    first.attach = vec![stored.uri.clone()];
    let q1 = store.send(s, first).await.unwrap();
    let mut second = Outgoing::user("and another");
    second.mid_turn = true;
    let q2 = store.send(s, second).await.unwrap();
    assert_eq!(
        store
            .queued_messages(s)
            .await
            .unwrap()
            .iter()
            .map(|m| m.id)
            .collect::<Vec<_>>(),
        [q1.id, q2.id]
    );
    // A dispatch takes the latest delivered message, never a queued one.
    let latest = store
        .dispatch(s, None, Mode::Strict, Memo::new())
        .await
        .map(Dispatched::from)
        .unwrap();
    assert_eq!(latest.message.display_text, "start");

    // Preparing a drain changes nothing; the drain marks both, in order.
    let prepared = store
        .drain(s, Mode::Strict, Memo::new(), Drain::Prepare)
        .await
        .unwrap();
    assert_eq!(prepared.len(), 2);
    assert_eq!(store.queued_messages(s).await.unwrap().len(), 2);
    let drained = store
        .drain(s, Mode::Strict, Memo::new(), Drain::Commit)
        .await
        .unwrap();
    assert_eq!(
        drained.iter().map(|d| d.message.id).collect::<Vec<_>>(),
        [q1.id, q2.id]
    );
    let blocks: Vec<_> = drained[0].to_blocks().iter().map(block_json).collect();
    let (kind, path) = check_attachment(&blocks[1], &expect(s, "later.txt", b"mid-turn notes"));
    assert_eq!(kind, "text");
    assert!(path.starts_with(b.configured()), "{path:?}");
    assert!(store.queued_messages(s).await.unwrap().is_empty());
    let events = store.all_events(s).await.unwrap();
    assert_eq!(
        kinds(&events)
            .iter()
            .filter(|k| **k == "message_delivered")
            .count(),
        2
    );
    assert!(
        store
            .drain(s, Mode::Strict, Memo::new(), Drain::Commit)
            .await
            .unwrap()
            .is_empty()
    );

    // The binary's drain: the blocks of what was queued, then nothing left.
    let mut third = Outgoing::user("from the queue");
    third.mid_turn = true;
    store.send(s, third).await.unwrap();
    let sid = s.to_string();
    // The binary's dispatch, too, skips what is queued: its latest delivered message
    // is the last one drained.
    let latest = json(&b.run(&["dispatch", "--session", &sid]));
    assert_eq!(
        latest,
        serde_json::json!([{"type": "text", "text": "and another"}])
    );
    let out = json(&b.run(&["drain", "--session", &sid, "--format", "acp"]));
    assert_eq!(
        out,
        serde_json::json!([{"type": "text", "text": "from the queue"}])
    );
    // Nothing left, in the default format.
    let again = b.run(&["drain", "--session", &sid]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(stdout(&again).trim(), "[]");
    let report = store.verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
}

async fn a_rename_is_an_event_and_an_unknown_session_is_named(b: TestStore) {
    let store = b.open().await;
    let s = store
        .create_session(NewSession {
            title: Some("before".into()),
            ..NewSession::default()
        })
        .await
        .unwrap();
    // A given title is not replaced by the first message.
    store.send(s.id, user_text("hello")).await.unwrap();
    assert_eq!(
        store.session(s.id).await.unwrap().title.as_deref(),
        Some("before")
    );
    store
        .set_title(s.id, "after".into(), TitleSource::Explicit)
        .await
        .unwrap();
    assert_eq!(
        store.session(s.id).await.unwrap().title.as_deref(),
        Some("after")
    );
    let events = store.all_events(s.id).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.kind, "session_renamed");
    assert_eq!(last.payload["title"], "after");
    let out = b.run(&[
        "session",
        "rename",
        &s.id.to_string(),
        "the third",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        store.session(s.id).await.unwrap().title.as_deref(),
        Some("the third")
    );
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());

    let ghost = SessionId::new();
    let err = store
        .set_title(ghost, "x".into(), TitleSource::Explicit)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::SessionNotFound(id) if id == ghost),
        "{err:?}"
    );
    let err = store.send(ghost, user_text("x")).await.unwrap_err();
    assert!(
        matches!(err, Error::SessionNotFound(id) if id == ghost),
        "{err:?}"
    );
    assert_eq!(err.to_string(), format!("no session {ghost}"));
    let err = store.all_events(ghost).await.unwrap_err();
    assert_eq!(err.to_string(), format!("no session {ghost}"));
}

async fn a_whole_turn_is_recorded_and_restores_in_every_format(b: TestStore) {
    let store = b.open().await;
    let s = session(&store, ToolsHost::Local).await;
    let sid = s.to_string();
    let stored = store
        .attach_one(s, "notes.txt".into(), b"budget: 42\n".to_vec())
        .await
        .unwrap();
    let mut question = Outgoing::user("What is the budget?");
    question.attach = vec![stored.uri.clone()];
    store.send(s, question).await.unwrap();

    let recorded = json(&run_fed(
        &b,
        &["record", "--session", &sid, "--json"],
        RECORDED_TURN,
    ));
    assert_eq!(recorded["recorded"], 10, "{recorded}");
    // A later batch continues the stored answer (the same item, one message), then
    // the agent changes mode.
    let more: SessionUpdate = serde_json::from_value(serde_json::json!({
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": " That is all."},
        "messageId": "answer"
    }))
    .unwrap();
    let mode: SessionUpdate = serde_json::from_value(serde_json::json!({
        "sessionUpdate": "current_mode_update", "currentModeId": "code"
    }))
    .unwrap();
    let report = store.record(s, vec![more, mode]).await.unwrap();
    assert_eq!(report.recorded, 2);
    assert_eq!(report.items.len(), 2);
    store.send(s, Outgoing::user("thanks")).await.unwrap();

    let items = store.all_items(s).await.unwrap();
    let item_kinds: Vec<(i64, &str)> = items.iter().map(|i| (i.seq, i.body.kind())).collect();
    assert_eq!(
        item_kinds,
        [
            (2, "agent_thought"),
            (3, "plan"),
            (4, "tool_call"),
            (5, "tool_call"),
            (6, "agent_message"),
            (7, "current_mode_update"),
        ]
    );
    let read_call = items[2].body.to_json();
    assert!(read_call.contains(r#""status":"completed""#), "{read_call}");
    assert!(read_call.contains("Read notes (2 lines)"), "{read_call}");
    assert!(
        items[4]
            .body
            .to_json()
            .contains("The budget is 42. That is all."),
        "{:?}",
        items[4]
    );
    let messages = store.all_messages(s).await.unwrap();
    assert_eq!(messages.iter().map(|m| m.seq).collect::<Vec<_>>(), [1, 8]);
    let verified = store.verify(Verify::Check).await.unwrap().after;
    assert!(verified.ok(), "{:?}", verified.problems);
    assert_eq!(verified.items, 6);
    drop(store);

    let restore = |format: &str| {
        let out = b.run(&["restore", "--session", &sid, "--format", format]);
        assert!(out.status.success(), "{format}: {}", stderr(&out));
        stdout(&out)
    };
    let acp: serde_json::Value = serde_json::from_str(&restore("acp")).unwrap();
    assert_eq!(acp["sessionId"], sid.as_str());
    assert_eq!(
        roles(&acp["messages"]),
        [
            "user",
            "thought",
            "plan",
            "tool",
            "tool",
            "assistant",
            "session",
            "user"
        ]
    );
    let entries = acp["messages"].as_array().unwrap();
    let (_, path) = check_attachment(
        &entries[0]["content"][1],
        &expect_from_binary(s, "notes.txt", b"budget: 42\n"),
    );
    assert!(path.starts_with(b.configured()), "{path:?}");
    assert_eq!(entries[3]["toolCall"]["status"], "completed");
    assert_eq!(entries[4]["toolCall"]["status"], "failed");
    assert_eq!(
        entries[5]["content"][0]["text"],
        "The budget is 42. That is all."
    );

    let lines: Vec<serde_json::Value> = restore("acp-updates")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let tags: Vec<&str> = lines
        .iter()
        .map(|l| l["params"]["update"]["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(
        tags,
        [
            "user_message_chunk",
            "user_message_chunk",
            "agent_thought_chunk",
            "plan",
            "tool_call",
            "tool_call",
            "agent_message_chunk",
            "current_mode_update",
            "user_message_chunk",
        ]
    );
    for line in &lines {
        let _: agent_client_protocol_schema::v1::SessionNotification =
            serde_json::from_value(line["params"].clone()).expect("a session/update");
    }
    assert_eq!(lines[6]["params"]["update"]["messageId"], "answer");

    for format in ["openai", "openai-responses"] {
        let request: serde_json::Value = serde_json::from_str(&restore(format)).unwrap();
        let text = request.to_string();
        assert!(text.contains("The budget is 42. That is all."), "{format}");
        // Thoughts, tool calls, plans and mode changes are not conversation.
        for absent in ["Look at the chart", "Read notes", "in_progress", "\"code\""] {
            assert!(!text.contains(absent), "{format}: {absent} in {text}");
        }
    }
    let chat: serde_json::Value = serde_json::from_str(&restore("openai")).unwrap();
    assert_eq!(roles(&chat["messages"]), ["user", "assistant", "user"]);
}

async fn verify_catches_rows_edited_behind_the_logs_back(b: TestStore) {
    let store = b.open().await;
    let s = session(&store, ToolsHost::Local).await;
    store.send(s, Outgoing::user("as typed")).await.unwrap();
    let call =
        |value: serde_json::Value| -> SessionUpdate { serde_json::from_value(value).unwrap() };
    store
        .record(
            s,
            vec![
                call(
                    serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "t1",
                    "title": "Run tests", "kind": "execute", "status": "pending"}),
                ),
                call(serde_json::json!({"sessionUpdate": "tool_call_update",
                    "toolCallId": "t1", "status": "completed"})),
            ],
        )
        .await
        .unwrap();
    assert!(store.verify(Verify::Check).await.unwrap().after.ok());
    let out = b.run(&["verify"]);
    assert!(out.status.success(), "{}", stdout(&out));

    // `replace` is spelled the same on both engines, and neither table has a trigger
    // that would stop it: only the log can tell.
    b.raw_execute("UPDATE messages SET display_text = 'edited later'")
        .unwrap();
    b.raw_execute(
        "UPDATE items SET body = replace(body, '\"completed\"', '\"failed\"') \
         WHERE kind = 'tool_call'",
    )
    .unwrap();
    assert_eq!(
        b.raw_query("SELECT display_text FROM messages").unwrap(),
        [[Some("edited later".to_owned())]]
    );
    let report = store.verify(Verify::Check).await.unwrap().after;
    assert!(!report.ok());
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind() == ProblemKind::ChangedRow
                && p.session() == Some(s)
                && p.message().is_some()
                && p.to_string().contains(&s.to_string())
                && p.detail().contains("differs from its event log")
                && p.detail().contains("display text")),
        "{:?}",
        report.problems
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind() == ProblemKind::ChangedRow
                && p.item().is_some()
                && p.detail().contains("tool_call item")
                && p.detail().contains("(content)")),
        "{:?}",
        report.problems
    );
    let out = b.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1), "verify exits non-zero");
    let said = stdout(&out);
    assert!(
        said.contains("tool_call item") && said.contains(&s.to_string()),
        "{said}"
    );

    // Restore reads the rows forward and trusts them (the comparison is `verify`'s,
    // above): the edited message and tool call are printed as their rows hold them.
    let restored = store.collect_restore(s).await.unwrap();
    let blocks = serde_json::to_string(&restored.messages[0].blocks).unwrap();
    assert!(blocks.contains("edited later") && !blocks.contains("as typed"));
    for format in ["acp", "acp-updates", "openai", "openai-responses"] {
        let out = b.run(&["restore", "--session", &s.to_string(), "--format", format]);
        assert!(out.status.success(), "{format}: {}", stdout(&out));
        assert!(stdout(&out).contains("edited later"), "{format}");
    }
    let out = b.run(&[
        "restore",
        "--session",
        &s.to_string(),
        "--format",
        "acp-updates",
    ]);
    assert!(stdout(&out).contains("\"failed\""), "{}", stdout(&out));

    // A log that does not replay is `verify`'s to name; a restore still reads the rows.
    b.raw_execute(&format!(
        "INSERT INTO events (session_id, session_seq, kind, payload, created_at) \
         SELECT session_id, max(session_seq) + 1, 'message_delivered', \
                '{{\"kind\":\"message_delivered\",\"id\":\"{}\"}}', 'now' \
         FROM events WHERE session_id = '{s}' GROUP BY session_id",
        sessionstore::ids::MessageId::new()
    ))
    .unwrap();
    let report = store.verify(Verify::Check).await.unwrap().after;
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.kind() == ProblemKind::Delivery
                && p.session() == Some(s)
                && p.to_string().contains("which was never appended")),
        "{:?}",
        report.problems
    );
    assert!(store.collect_restore(s).await.is_ok());
}

async fn dispatch_gives_paths_that_read_back_from_the_configured_and_legacy_roots(b: TestStore) {
    let store = b.open().await;
    let s = session(&store, ToolsHost::Managed).await;
    let png = store
        .attach_one(s, "café chart.png".into(), crate::support::PNG.to_vec())
        .await
        .unwrap();
    let notes = store
        .attach_one(s, "notes 日本.txt".into(), b"kiwi notes".to_vec())
        .await
        .unwrap();
    // A file that lives only in the legacy root, as after the store was moved.
    let legacy = b.legacy().join(s.to_string());
    std::fs::create_dir_all(&legacy).unwrap();
    std::fs::write(legacy.join("old.bin"), b"\x00\x01 legacy bytes").unwrap();
    let old = sessionstore::attachments::AttachmentUri::new(s, "old.bin");
    let mut out = Outgoing::user("three files");
    out.attach = vec![png.uri.clone(), notes.uri.clone(), old, notes.uri.clone()];
    let sent = store.send(s, out).await.unwrap();
    let types: Vec<&str> = sent.refs.iter().map(|r| r.mime_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "image/png",
            "text/plain",
            "application/octet-stream",
            "text/plain"
        ]
    );
    drop(store);

    let (fresh, reads) = b.open_counting().await;
    let dispatched = fresh
        .dispatch(s, None, Mode::Strict, Memo::new())
        .await
        .map(Dispatched::from)
        .unwrap();
    assert_eq!(reads.total(), 3, "the duplicate shares one read");
    let blocks: Vec<_> = dispatched.blocks.iter().map(block_json).collect();
    assert_eq!(blocks.len(), 5, "the text, then one block a reference");
    let files = [
        (
            expect(s, "café chart.png", crate::support::PNG),
            "image",
            false,
        ),
        (expect(s, "notes 日本.txt", b"kiwi notes"), "text", false),
        (expect(s, "old.bin", b"\x00\x01 legacy bytes"), "blob", true),
        (expect(s, "notes 日本.txt", b"kiwi notes"), "text", false),
    ];
    for (block, (file, want_kind, in_legacy)) in blocks[1..].iter().zip(&files) {
        let (kind, path) = check_attachment(block, file);
        assert_eq!(kind, *want_kind, "{}", file.name);
        let root = if *in_legacy {
            b.legacy()
        } else {
            b.configured()
        };
        assert_eq!(path, root.join(s.to_string()).join(&file.name));
    }
    // A managed session's context says the path is on the daemon host.
    let context = crate::support::context_of(&blocks[1]).unwrap();
    assert!(context.contains("daemon host"), "{context}");

    // The binary prints the same paths.
    let printed = json(&b.run(&[
        "dispatch",
        "--session",
        &s.to_string(),
        "--format",
        "acp",
        "--strict",
    ]));
    let paths: Vec<String> = printed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(crate::support::context_of)
        .map(|c| crate::support::context_line(c).path)
        .collect();
    assert_eq!(paths.len(), 4);
    assert!(
        paths[2].starts_with(b.legacy().to_str().unwrap()),
        "{paths:?}"
    );

    // A file gone from every root: strict dispatch names it, degrading drops it.
    std::fs::remove_file(legacy.join("old.bin")).unwrap();
    let err = fresh
        .dispatch(s, None, Mode::Strict, Memo::new())
        .await
        .map(Dispatched::from)
        .unwrap_err();
    assert!(err.to_string().contains("old.bin"), "{err}");
    let degraded = fresh
        .dispatch(s, None, Mode::Degrade, Memo::new())
        .await
        .map(Dispatched::from)
        .unwrap();
    let kept = degraded
        .blocks
        .iter()
        .map(block_json)
        .filter(|block| crate::support::context_of(block).is_some())
        .count();
    assert_eq!(kept, 3);
}

async fn a_restore_larger_than_its_memo_budget_reads_evicted_files_again(b: TestStore) {
    let store = b.open().await;
    let s = session(&store, ToolsHost::Local).await;
    // Five 6000-byte files, 8000 bytes once encoded; the budget holds two of them.
    let mut files = Vec::new();
    for i in 0..5u8 {
        let bytes: Vec<u8> = (0..6000u32)
            .map(|j| (j as u8) ^ i.wrapping_mul(37))
            .collect();
        let name = format!("part {i}.bin");
        let stored = store
            .attach_one(s, name.clone(), bytes.clone())
            .await
            .unwrap();
        files.push((stored.uri, expect(s, &name, &bytes)));
    }
    for i in 0..15 {
        let (a, b2) = (&files[i % 5], &files[(i * 3 + 1) % 5]);
        let mut out = Outgoing::user(format!("message {i}"));
        out.attach = vec![a.0.clone(), b2.0.clone(), a.0.clone()];
        store.send(s, out).await.unwrap();
    }
    drop(store);

    let (fresh, reads) = b.open_counting().await;
    let restored = fresh.collect_restore_with_budget(s, 16_000).await.unwrap();
    assert_eq!(restored.messages.len(), 15);
    let folder = b.configured().join(s.to_string());
    for (i, d) in restored.messages.iter().enumerate() {
        let out: Vec<_> = d.blocks.iter().map(block_json).collect();
        assert_eq!(out.len(), 4, "{out:?}");
        assert_eq!(out[0]["text"], format!("message {i}"));
        let expected = [&files[i % 5].1, &files[(i * 3 + 1) % 5].1, &files[i % 5].1];
        for (block, file) in out[1..].iter().zip(expected) {
            let (kind, path) = check_attachment(block, file);
            assert_eq!(kind, "blob");
            assert_eq!(path, folder.join(&file.name));
        }
    }
    let over_budget = reads.total();
    assert!(
        over_budget > 5,
        "evicted files were read again ({over_budget} reads of 5 files)"
    );
    // At most one read per distinct file per message, even over budget.
    assert!(over_budget <= 30, "{over_budget} reads");
    let (roomy, reads) = b.open_counting().await;
    let whole = roomy.collect_restore(s).await.unwrap();
    assert_eq!(
        reads.total(),
        5,
        "with the default budget each file is read once"
    );
    assert_eq!(whole, restored);
}
