//! Recording whole turns: `Store::record` and `sessionstore record` keep what the agent
//! said, thought and did, all or nothing, in one history sequence with the messages;
//! `verify` and restore replay the merge from the log. That they catch a row edited
//! behind the log is checked on both engines in `conformance::store`.

use agent_client_protocol_schema::v1::SessionUpdate;
use sessionstore::store::Outgoing;
use sessionstore::turns::Refusal;
use sessionstore::{Error, SessionId};

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
    let items = t.store().items(s).await.unwrap();
    let bodies: Vec<String> = items.iter().map(|i| i.body.to_json()).collect();
    assert!(bodies[1].contains(r#""status":"completed""#), "{bodies:?}");
    assert!(bodies[2].contains(r#""text":"All green.""#), "{bodies:?}");
    let report = t.store().verify().await.unwrap();
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.items, 4);
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
