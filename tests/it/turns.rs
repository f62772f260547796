//! Recording whole turns: `Store::record` and `sessionstore record` keep what the agent
//! said, thought and did, all or nothing, in one history sequence with the messages;
//! `verify` and restore replay the merge from the log. That they catch a row edited
//! behind the log is checked on both engines in `conformance::store`.

use agent_client_protocol_schema::v1::SessionUpdate;
use sessionstore::store::Outgoing;
use sessionstore::store::{Access, Verify};
use sessionstore::turns::Refusal;
use sessionstore::{Error, SessionId};

use crate::support::Whole;
use crate::support::{TestStore, json, stderr};

fn update(value: serde_json::Value) -> SessionUpdate {
    serde_json::from_value(value).expect("a valid update")
}

fn text_chunk(text: &str) -> SessionUpdate {
    update(serde_json::json!({"sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": text}}))
}

fn tool_call(id: &str) -> SessionUpdate {
    update(
        serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": id,
        "title": "Run tests", "kind": "execute", "status": "pending"}),
    )
}

fn tool_update(id: &str, fields: serde_json::Value) -> SessionUpdate {
    let mut v = fields;
    v["sessionUpdate"] = "tool_call_update".into();
    v["toolCallId"] = id.into();
    update(v)
}

/// `(seq, kind)` of a session's history: messages and items in one order.
fn history(t: &TestStore, session: SessionId) -> Vec<(i64, String)> {
    let conn = t.raw();
    let mut stmt = conn
        .prepare(
            "SELECT seq, 'message:' || role FROM messages WHERE session_id = ?1
             UNION ALL SELECT seq, kind FROM items WHERE session_id = ?1 ORDER BY 1",
        )
        .unwrap();
    stmt.query_map([session.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn count(t: &TestStore, table: &str) -> i64 {
    t.raw()
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn messages_and_items_share_one_history_across_batches() {
    let t = TestStore::new().await;
    let s = t.session().await;
    t.send(s, Outgoing::user("run the tests")).await;
    let first = t
        .store()
        .record(s, vec![text_chunk("Running "), tool_call("t1")])
        .await
        .unwrap();
    assert_eq!(first.recorded, 2);
    assert_eq!(first.items.len(), 2);
    // A later batch merges into the stored call; a chunk after a tool call starts a
    // new message, and the next batch's chunk continues it.
    let second = t
        .store()
        .record(
            s,
            vec![
                tool_update("t1", serde_json::json!({"status": "completed"})),
                text_chunk("All "),
            ],
        )
        .await
        .unwrap();
    assert_eq!(second.items[0], first.items[1], "the update names its call");
    t.store()
        .record(s, vec![text_chunk("green.")])
        .await
        .unwrap();
    t.send(s, Outgoing::user("thanks")).await;
    t.store()
        .record(s, vec![text_chunk("You're welcome.")])
        .await
        .unwrap();
    assert_eq!(
        history(&t, s),
        [
            (1, "message:user".to_owned()),
            (2, "agent_message".to_owned()),
            (3, "tool_call".to_owned()),
            (4, "agent_message".to_owned()),
            (5, "message:user".to_owned()),
            (6, "agent_message".to_owned()),
        ]
    );
    let items = t.store().all_items(s).await.unwrap();
    let bodies: Vec<String> = items.iter().map(|i| i.body.to_json()).collect();
    assert!(bodies[1].contains(r#""status":"completed""#), "{bodies:?}");
    assert!(bodies[2].contains(r#""text":"All green.""#), "{bodies:?}");
    let report = t.store().verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.items, 4);
}

/// The store's writer remembers where each session's history ends (its last event,
/// next place, streaming message and last part) so a batch need not read it again.
/// Another process recording for the same session in between must not be written
/// over: the memo is dropped when the session's last event is not its own.
#[tokio::test]
async fn a_session_recorded_by_another_process_in_between_is_read_again() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let id = s.to_string();
    let chunk = |text: &str| {
        serde_json::json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": text}})
        .to_string()
    };
    t.store().record(s, vec![text_chunk("one ")]).await.unwrap();
    t.store().record(s, vec![text_chunk("two ")]).await.unwrap();
    // Another process continues the same message (its next part), then this store
    // continues it again: the part numbers must not collide.
    let out = record_cli(&t, &id, &format!("{}\n", chunk("three ")));
    assert!(out.status.success(), "{}", stderr(&out));
    t.store()
        .record(s, vec![text_chunk("four ")])
        .await
        .unwrap();
    // Another process ends the message with a tool call: the next chunk starts a new
    // message after it, at the next place.
    let call = serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "c1",
        "title": "Run tests", "kind": "execute", "status": "pending"});
    let out = record_cli(&t, &id, &format!("{call}\n"));
    assert!(out.status.success(), "{}", stderr(&out));
    t.store().record(s, vec![text_chunk("five")]).await.unwrap();
    assert_eq!(
        history(&t, s),
        [
            (1, "agent_message".to_owned()),
            (2, "tool_call".to_owned()),
            (3, "agent_message".to_owned()),
        ]
    );
    let items = t.store().all_items(s).await.unwrap();
    assert!(
        items[0]
            .body
            .to_json()
            .contains(r#""text":"one two three four ""#),
        "{:?}",
        items[0].body.to_json()
    );
    assert!(items[2].body.to_json().contains(r#""text":"five""#));
    let report = t.store().verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
    // And this store's own other writes (a send) are seen the same way.
    t.send(s, Outgoing::user("thanks")).await;
    t.store().record(s, vec![text_chunk("six")]).await.unwrap();
    let kinds: Vec<String> = history(&t, s).into_iter().map(|(_, k)| k).collect();
    assert_eq!(
        kinds[3..],
        ["message:user".to_owned(), "agent_message".to_owned()]
    );
    assert!(t.store().verify(Verify::Check).await.unwrap().after.ok());
}

/// The memo's idea of what the next chunk continues is a fresh read's: the last
/// entry of the history when it is an agent message, however the batch ended. The
/// same batches recorded through one store (its writer remembering between them) and
/// through `sessionstore record`, one process a batch (nothing remembered), make the
/// same history, and both verify.
#[tokio::test]
async fn batches_recorded_with_and_without_the_writers_memo_make_the_same_history() {
    let t = TestStore::new().await;
    let chunk = |text: &str| {
        serde_json::json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": text}})
    };
    let call = |id: &str| {
        serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": id,
            "title": "Run tests", "kind": "execute", "status": "pending"})
    };
    let done = |id: &str| {
        serde_json::json!({"sessionUpdate": "tool_call_update", "toolCallId": id,
            "status": "completed"})
    };
    let plan = serde_json::json!({"sessionUpdate": "plan",
        "entries": [{"content": "step", "priority": "high", "status": "pending"}]});
    let opaque = serde_json::json!({"sessionUpdate": "a_newer_kind", "x": 1});
    let batches: Vec<Vec<serde_json::Value>> = vec![
        // An update of an earlier call, alone, after a message: the message stays last.
        vec![call("c1")],
        vec![chunk("a ")],
        vec![done("c1")],
        vec![chunk("b ")],
        // A new message, then an update of an earlier call in the same batch.
        vec![call("c2"), chunk("c "), done("c2")],
        vec![chunk("d ")],
        // A plan, an opaque update: the next chunk starts a message of its own.
        vec![plan.clone()],
        vec![chunk("e ")],
        vec![opaque.clone(), chunk("f "), call("c3")],
        vec![done("c3"), chunk("g")],
    ];
    let remembered = t.session().await;
    for batch in &batches {
        t.store()
            .record(remembered, sessionstore::record::Values(batch.clone()))
            .await
            .unwrap();
    }
    let fresh = t.session().await;
    for batch in &batches {
        let lines: String = batch.iter().map(|u| format!("{u}\n")).collect();
        let out = record_cli(&t, &fresh.to_string(), &lines);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let bodies = |items: Vec<sessionstore::model::Item>| -> Vec<String> {
        items.iter().map(|i| i.body.to_json()).collect()
    };
    assert_eq!(history(&t, remembered), history(&t, fresh));
    assert_eq!(
        bodies(t.store().all_items(remembered).await.unwrap()),
        bodies(t.store().all_items(fresh).await.unwrap())
    );
    let report = t.store().verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
    // And what a fresh read makes of it: "a b " is one message, "c d " another.
    let texts: Vec<String> = t
        .store()
        .all_items(remembered)
        .await
        .unwrap()
        .iter()
        .map(|i| i.body.to_json())
        .filter(|b| b.contains("agent_message") || b.contains("\"text\""))
        .collect();
    assert!(
        texts.iter().any(|b| b.contains(r#""text":"a b ""#)),
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|b| b.contains(r#""text":"c d ""#)),
        "{texts:?}"
    );
}

#[tokio::test]
async fn a_refused_update_stores_nothing_of_its_batch() {
    let t = TestStore::new().await;
    let s = t.session().await;
    let events = count(&t, "events");
    let err = t
        .store()
        .record(
            s,
            vec![
                text_chunk("fine"),
                tool_call("t1"),
                tool_update("nope", serde_json::json!({"status": "failed"})),
            ],
        )
        .await
        .unwrap_err();
    match err {
        Error::UpdateRefused {
            line: 3,
            refusal: Refusal::UnknownToolCall { id },
        } => assert_eq!(id, "nope"),
        other => panic!("unexpected {other:?}"),
    }
    assert!(err_is_refused(&t, s).await);
    assert_eq!(count(&t, "items"), 0);
    assert_eq!(count(&t, "events"), events);
}

async fn err_is_refused(t: &TestStore, s: SessionId) -> bool {
    let user_chunk = update(serde_json::json!({"sessionUpdate": "user_message_chunk",
        "content": {"type": "text", "text": "hi"}}));
    let err = t.store().record(s, vec![user_chunk]).await.unwrap_err();
    err.is_refused()
        && matches!(
            err,
            Error::UpdateRefused {
                refusal: Refusal::UserMessageChunk,
                ..
            }
        )
}

/// Runs `record` with `input` on stdin.
fn record_cli(t: &TestStore, session: &str, input: &str) -> std::process::Output {
    t.bin()
        .args(["record", "--json", "--session", session])
        .stdin(input)
        .output()
}

#[test]
fn record_reads_lines_checks_them_all_and_names_a_bad_one() {
    let t = TestStore::empty();
    let sid = json(&t.run(&["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let good = format!(
        "{}\n\n{}\n{}\n",
        r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"Hi"}}"#,
        format_args!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"{sid}","update":{{"sessionUpdate":"tool_call","toolCallId":"a","title":"ls"}}}}}}"#
        ),
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"a","status":"completed"}"#,
    );
    let events_before = json(&t.run(&["verify", "--json"]))["events"].clone();
    // The same batch with a bad last line: named by its line number (blank lines
    // count), exit 3, and nothing stored.
    for (bad, line, words) in [
        ("not json", 5, "not a JSON object"),
        (
            r#"{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"x"}}"#,
            5,
            "send",
        ),
        (
            r#"{"sessionUpdate":"tool_call_update","toolCallId":"b"}"#,
            5,
            "\"b\"",
        ),
    ] {
        let out = record_cli(&t, &sid, &format!("{good}{bad}\n"));
        // Under --json the one error line is a JSON object naming the kind.
        let text = stderr(&out);
        assert_eq!(text.trim_end().lines().count(), 1, "{text}");
        let error: serde_json::Value = serde_json::from_str(&text).expect("a JSON error");
        assert_eq!(error["error"]["kind"], "update_refused", "{text}");
        let err = error["error"]["message"].as_str().unwrap().to_owned();
        assert!(err.contains(&format!("line {line}:")), "{err}");
        assert!(err.contains(words), "{err}");
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        let report = json(&t.run(&["verify", "--json"]));
        assert_eq!(report["events"], events_before, "nothing was stored");
        assert_eq!(report["items"], 0);
    }
    let out = json(&record_cli(&t, &sid, &good));
    assert_eq!(out["recorded"], 3);
    assert_eq!(out["items"].as_array().unwrap().len(), 2);
    let other = good.replace(&sid, "00000000-0000-7000-8000-000000000000");
    let out = record_cli(&t, &sid, &other);
    assert_eq!(out.status.code(), Some(3));
    let error: serde_json::Value = serde_json::from_str(&stderr(&out)).expect("a JSON error");
    let err = error["error"]["message"].as_str().unwrap();
    assert!(err.contains("line 3:") && err.contains("not "), "{err}");
}

/// A long input is written a batch at a time inside one write: each batch of
/// `RECORD_BATCH` updates is its own `turn_recorded` event, a chunk continuing an
/// agent message across a batch boundary and a tool call updated two batches later
/// merge as in one batch, every item is listed once, a refused update far into the
/// input is named by its line and stores nothing, and the history replays exactly as
/// the same updates recorded in one batch do.
#[tokio::test]
async fn a_long_record_is_written_in_batches_of_one_write() {
    use sessionstore::record::RECORD_BATCH;
    let t = TestStore::new().await;
    let s = t.session().await;
    let chunks = 2 * RECORD_BATCH + 150;
    // Update 1 is the tool call; chunk `i` is update `i + 2`, so the chunks that are
    // updates RECORD_BATCH and RECORD_BATCH + 1 straddle the first batch's end.
    let straddling = [RECORD_BATCH - 2, RECORD_BATCH - 1];
    let chunk = |i: usize| {
        let id = if straddling.contains(&i) {
            "across".to_owned()
        } else {
            format!("m{i}")
        };
        serde_json::json!({"sessionUpdate": "agent_message_chunk", "messageId": id,
            "content": {"type": "text", "text": format!("part {i} ")}})
    };
    let mut updates = vec![serde_json::json!({"sessionUpdate": "tool_call",
        "toolCallId": "t", "title": "Run tests", "kind": "execute", "status": "pending"})];
    updates.extend((0..chunks).map(chunk));
    updates.push(serde_json::json!({"sessionUpdate": "tool_call_update",
        "toolCallId": "t", "status": "completed"}));
    // A blank second line: skipped, but counted in line numbers.
    let lines: Vec<String> = updates.iter().map(|u| u.to_string()).collect();
    let input = format!("{}\n\n{}\n", lines[0], lines[1..].join("\n"));

    let sid = s.to_string();
    let bad = format!(
        "{input}{}\n",
        r#"{"sessionUpdate":"tool_call_update","toolCallId":"never"}"#
    );
    let out = record_cli(&t, &sid, &bad);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let line = updates.len() + 2;
    assert!(
        stderr(&out).contains(&format!("line {line}:")),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        count(&t, "items"),
        0,
        "nothing of a refused input is stored"
    );

    let out = record_cli(&t, &sid, &input);
    assert!(out.status.success(), "{}", stderr(&out));
    let recorded = json(&out);
    assert_eq!(recorded["recorded"], updates.len());
    let listed: Vec<&str> = recorded["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap())
        .collect();
    // One tool call and every chunk but the one that continued its predecessor.
    assert_eq!(listed.len(), 1 + chunks - 1);
    let distinct: std::collections::HashSet<&&str> = listed.iter().collect();
    assert_eq!(distinct.len(), listed.len(), "each item listed once");
    assert_eq!(count(&t, "items"), listed.len() as i64);
    let events = t.store().all_events(s).await.unwrap();
    let turns = events.iter().filter(|e| e.kind == "turn_recorded").count();
    assert_eq!(turns, updates.len().div_ceil(RECORD_BATCH));
    assert!(t.store().verify(Verify::Check).await.unwrap().after.ok());

    // The same updates in one batch, through the library, replay the same lines.
    let one = t.session().await;
    let parsed = updates.into_iter().map(update).collect::<Vec<_>>();
    t.store().record(one, parsed).await.unwrap();
    let replay = |id: SessionId| {
        let out = t.run(&[
            "restore",
            "--session",
            &id.to_string(),
            "--format",
            "acp-updates",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        crate::support::stdout(&out).replace(&id.to_string(), "<SESSION>")
    };
    let batched = replay(s);
    assert!(batched.contains("\"status\":\"completed\""));
    assert!(batched.contains(&format!("part {} part {} ", straddling[0], straddling[1])));
    assert_eq!(batched, replay(one));
}

/// How many streamed parts are not sealed yet (V9 keeps them in `streaming_parts`,
/// and `item_parts` only the sealed segments).
fn streaming(t: &TestStore) -> i64 {
    let conn = t.raw();
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT count(*) FROM item_parts WHERE sealed = 0"), 0);
    count("SELECT count(*) FROM streaming_parts")
}

async fn bodies(t: &TestStore, session: SessionId) -> Vec<String> {
    let items = t.store().all_items(session).await.unwrap();
    items.iter().map(|i| i.body.to_json()).collect()
}

/// Whether a search for `query` in `session` finds recorded agent text.
async fn found(t: &TestStore, session: SessionId, query: &str) -> bool {
    let hits = t
        .store()
        .search(query.to_owned(), Some(session), 10)
        .await
        .unwrap();
    hits.iter().any(|h| h.source == "agent_message")
}

/// A streamed message grows by one appended part per batch (V6) rather than being
/// rewritten whole, reads whole while it streams (the same message one batch would
/// have made, in `items`, every restore format and `verify`), and is sealed
/// once, when its turn ends (as sealed segments), which is also when search
/// indexes all of it.
#[tokio::test]
async fn a_streamed_message_grows_by_parts_and_is_sealed_once_its_turn_ends() {
    use sessionstore::format::Format;
    let t = TestStore::new().await;
    let streamed = t.session().await;
    let whole = t.session().await;
    let mut chunks: Vec<SessionUpdate> = (0..40).map(|i| text_chunk(&format!("w{i} "))).collect();
    // A block with its own `_meta` does not join the text before it, nor the text after.
    chunks[20] = update(serde_json::json!({"sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": "marked ", "_meta": {"k": 1}}}));
    let asked = t.send(streamed, Outgoing::user("stream")).await;
    let asked_whole = t.send(whole, Outgoing::user("stream")).await;
    let turn = t
        .store()
        .begin_turn(streamed, vec![asked.id])
        .await
        .unwrap();
    for chunk in &chunks {
        t.store()
            .record(streamed, vec![chunk.clone()])
            .await
            .unwrap();
    }
    t.store().record(whole, chunks.clone()).await.unwrap();
    assert_eq!(streaming(&t), 39, "one row, then a part per later batch");

    let expected = bodies(&t, whole).await;
    assert_eq!(bodies(&t, streamed).await, expected);
    assert!(expected[0].contains(r#""text":"w0 w1 "#), "{expected:?}");
    // The two sessions' restores differ only in their ids.
    let same_ids = [
        (whole.to_string(), streamed.to_string()),
        (asked_whole.id.to_string(), asked.id.to_string()),
        (
            t.store().all_items(whole).await.unwrap()[0].id.to_string(),
            t.store().all_items(streamed).await.unwrap()[0]
                .id
                .to_string(),
        ),
    ];
    for format in [
        Format::AcpRestore,
        Format::AcpUpdates,
        Format::OpenaiChat,
        Format::OpenaiResponses,
    ] {
        let mut other = crate::support::restore_text(t.store(), whole, format).await;
        for (from, to) in &same_ids {
            other = other.replace(from, to);
        }
        let text = crate::support::restore_text(t.store(), streamed, format).await;
        assert_eq!(text, other, "{format:?}");
    }
    let report = t.store().verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
    assert!(
        found(&t, streamed, "w0").await,
        "the first part is indexed as it is written"
    );
    assert!(
        !found(&t, streamed, "w30").await,
        "a streaming message is not re-indexed per batch"
    );

    t.store()
        .end_turn(
            streamed,
            turn.id,
            sessionstore::model::TurnEnd::Stopped {
                stop_reason: "end_turn".to_owned(),
            },
            None,
        )
        .await
        .unwrap();
    assert_eq!(streaming(&t), 0, "the parts are sealed");
    assert_eq!(
        count(&t, "item_parts"),
        1,
        "a short answer is one sealed segment"
    );
    assert_eq!(bodies(&t, streamed).await, expected);
    assert!(
        found(&t, streamed, "w30").await,
        "the whole message is indexed once it ends"
    );
    let report = t.store().verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
}

/// A long streamed answer is sealed as it streams, in segments of bounded size, each
/// cut between words so no word is split between two search entries; it reads back
/// as the one message a single batch makes, and a search finds a word anywhere in it
/// as one hit naming the item.
#[tokio::test]
async fn a_long_answer_is_sealed_in_segments_cut_between_words() {
    let t = TestStore::new().await;
    let streamed = t.session().await;
    let whole = t.session().await;
    let chunks: Vec<SessionUpdate> = (0..5000)
        .map(|i| text_chunk(&format!("word{i:04} and some more text to fill it up ")))
        .collect();
    for batch in chunks.chunks(10) {
        t.store().record(streamed, batch.to_vec()).await.unwrap();
    }
    t.store().record(whole, chunks.clone()).await.unwrap();
    // While it streams, what makes a whole segment is sealed as it comes: a few
    // segments' worth of parts never wait, and the sealed ones are found already.
    let sealed = || -> i64 {
        t.raw()
            .query_row(
                "SELECT count(*) FROM item_parts WHERE sealed = 1",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    assert!(sealed() >= 2, "{} sealed while streaming", sealed());
    assert!(streaming(&t) < 200, "{} parts waiting", streaming(&t));
    assert!(found(&t, streamed, "word0000").await);
    // The next entry ends the answer.
    t.send(streamed, Outgoing::user("next")).await;
    t.send(whole, Outgoing::user("next")).await;
    assert_eq!(streaming(&t), 0);
    let segments: Vec<String> = {
        let conn = t.raw();
        let mut stmt = conn
            .prepare("SELECT content FROM item_parts WHERE sealed = 1 ORDER BY part")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    assert!(segments.len() >= 3, "{} segments", segments.len());
    for segment in &segments[..segments.len() - 1] {
        let blocks: serde_json::Value = serde_json::from_str(segment).unwrap();
        let text = blocks[0]["text"].as_str().unwrap();
        assert!(
            text.ends_with(' '),
            "cut after a whitespace: {:?}",
            &text[text.len() - 20..]
        );
        assert!(text.len() < 80 * 1024, "{}", text.len());
    }
    assert_eq!(bodies(&t, streamed).await[0], bodies(&t, whole).await[0]);
    let item = t.store().all_items(streamed).await.unwrap()[0]
        .id
        .to_string();
    for word in ["word0000", "word2500", "word4999"] {
        let hits = t
            .store()
            .search(word.to_owned(), Some(streamed), 10)
            .await
            .unwrap();
        assert_eq!(hits.len(), 1, "{word}: {hits:?}");
        assert_eq!(hits[0].message_id.as_deref(), Some(item.as_str()));
    }
    let hits = t
        .store()
        .search("fill".to_owned(), Some(streamed), 10)
        .await
        .unwrap();
    assert_eq!(
        hits.len(),
        1,
        "one hit an item, whichever segments match: {hits:?}"
    );
    let report = t.store().verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
}

/// The parts still streaming are always the last parts of their session's last item
/// (V8 finds them there, with no index of them): after every batch of two sessions
/// streaming at once, through answers that turn into thoughts, tool calls, updates of
/// earlier calls and a long answer sealed in part as it streams, no other item has a
/// part waiting; the next message seals what waits; and each history reads as the one
/// batch of the same updates makes.
#[tokio::test]
async fn only_the_last_item_of_a_session_has_parts_waiting() {
    let t = TestStore::new().await;
    let streamed = [t.session().await, t.session().await];
    let whole = t.session().await;
    let thought = |text: &str| {
        update(serde_json::json!({"sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": text}}))
    };
    let long = "gannet ".repeat(150);
    let mut script: Vec<SessionUpdate> = (0..5).map(|i| text_chunk(&format!("a{i} "))).collect();
    script.extend((0..3).map(|i| thought(&format!("t{i} "))));
    script.extend((0..3).map(|i| text_chunk(&format!("b{i} "))));
    script.push(tool_call("call-1"));
    script.extend((0..3).map(|i| text_chunk(&format!("c{i} "))));
    script.push(tool_update(
        "call-1",
        serde_json::json!({"status": "completed"}),
    ));
    script.extend((0..100).map(|_| text_chunk(&long)));
    script.extend((0..2).map(|i| thought(&format!("u{i} "))));
    script.extend((0..3).map(|i| text_chunk(&format!("d{i} "))));
    let elsewhere = |t: &TestStore| -> i64 {
        t.raw()
            .query_row(
                "SELECT count(*) FROM streaming_parts p WHERE p.item_id IS NOT
                   (SELECT id FROM items i WHERE i.session_id = p.session_id
                    ORDER BY seq DESC LIMIT 1)",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    for update in &script {
        for session in streamed {
            t.store()
                .record(session, vec![update.clone()])
                .await
                .unwrap();
            assert_eq!(elsewhere(&t), 0, "after {update:?}");
        }
    }
    assert!(streaming(&t) > 0, "the last answer is still streaming");
    // In one batch an update of an earlier call ends the message before it; across
    // batches the message stays last and the next chunk continues it. The whole
    // session is recorded in three batches cut there, as the streamed ones were.
    let cut = script
        .iter()
        .position(|u| matches!(u, SessionUpdate::ToolCallUpdate(_)))
        .unwrap();
    for batch in [&script[..cut], &script[cut..=cut], &script[cut + 1..]] {
        t.store().record(whole, batch.to_vec()).await.unwrap();
    }
    let expected = bodies(&t, whole).await;
    assert!(
        expected.iter().any(|b| b.contains("gannet")),
        "{expected:?}"
    );
    for session in streamed {
        assert_eq!(bodies(&t, session).await, expected);
    }
    t.send(streamed[0], Outgoing::user("next")).await;
    let waiting: i64 = t
        .raw()
        .query_row(
            "SELECT count(*) FROM streaming_parts WHERE session_id = ?1",
            [streamed[0].to_string()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(waiting, 0, "the message sealed its session's answer");
    assert!(streaming(&t) > 0, "and left the other session's alone");
    t.send(streamed[1], Outgoing::user("next")).await;
    assert_eq!(streaming(&t), 0);
    for session in streamed {
        assert_eq!(bodies(&t, session).await[..expected.len()], expected[..]);
    }
    let report = t.store().verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
}

/// A sealed segment is indexed for search in the write that seals it (V18 undid V14's
/// waiting for an idle writer): right after the write that sealed the answer, a
/// read-only store finds its first and last segments, and `verify` is ok; a segment
/// taken out of the index behind the store's back is named by `verify`.
#[tokio::test]
async fn sealed_text_is_indexed_in_the_write_that_seals_it() {
    use sessionstore::Store;
    use sessionstore::model::NewSession;
    let t = TestStore::empty();
    let chunks: Vec<SessionUpdate> = (0..3000)
        .map(|i| text_chunk(&format!("word{i:04} and some more text to fill it up ")))
        .collect();
    let store = Store::open(t.config.clone()).await.unwrap();
    let s = store
        .create_session(NewSession::default())
        .await
        .unwrap()
        .id;
    for batch in chunks.chunks(10) {
        store.record(s, batch.to_vec()).await.unwrap();
    }
    store
        .send(s, Outgoing::user("next"))
        .await
        .expect("the next message seals the answer");
    let segments = count(&t, "item_parts");
    assert!(segments >= 2, "{segments} segments");

    let reader = Store::open_as(t.config.clone(), Access::ReadOnly)
        .await
        .unwrap();
    for word in ["word0000", "word2999"] {
        let hits = reader.search(word.to_owned(), Some(s), 10).await.unwrap();
        assert_eq!(hits.len(), 1, "{word}: {hits:?}");
    }
    let report = reader.verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "{:?}", report.problems);
    drop(reader);
    drop(store);

    let conn = t.raw();
    let entry: String = conn
        .query_row(
            "SELECT item_id || '/' || part FROM item_parts WHERE session_id = ?1
             ORDER BY part LIMIT 1",
            [s.to_string()],
            |r| r.get(0),
        )
        .unwrap();
    conn.execute(
        "INSERT INTO search (search, rowid, body)
         SELECT 'delete', id, body FROM search_text
         WHERE id = (SELECT id FROM search_entries WHERE entry_id = ?1)",
        [&entry],
    )
    .unwrap();
    conn.execute("DELETE FROM search_entries WHERE entry_id = ?1", [&entry])
        .unwrap();
    assert!(
        problems(&t)
            .await
            .contains("1 sealed segment is not indexed"),
        "{}",
        problems(&t).await
    );
}

/// What `verify` finds in the fixture's database, read by a read-only store.
async fn problems(t: &TestStore) -> String {
    let reader = sessionstore::Store::open_as(t.config.clone(), Access::ReadOnly)
        .await
        .unwrap();
    format!(
        "{:?}",
        reader.verify(Verify::Check).await.unwrap().after.problems
    )
}

/// `record` writes outside the store's writer (one write for the whole input), and
/// indexes what it sealed in that write: a read-only `search` right after it finds a
/// word of every segment.
#[test]
fn a_long_answer_recorded_by_the_command_line_is_found_by_its_search() {
    let t = TestStore::empty();
    let sid = json(&t.run(&["session", "new", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let input: String = (0..5000)
        .map(|i| {
            format!(
                r#"{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"okapi{i:04} and some more text to fill it up "}}}}"#
            ) + "\n"
        })
        .collect();
    let out = record_cli(&t, &sid, &input);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        count(&t, "item_parts") >= 2,
        "sealed while recorded: {}",
        count(&t, "item_parts")
    );
    for word in ["okapi0000", "okapi2000"] {
        let hits = json(&t.run(&["search", word, "--json"]));
        assert_eq!(hits.as_array().map(Vec::len), Some(1), "{word}: {hits}");
    }
}
