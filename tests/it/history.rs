//! Histories of any length, from outside: `restore --tail N` and `--from ID` in every
//! format are the whole restore's entries from that point on, say where they start
//! where a whole restore says nothing, and refuse an id the delivered history does
//! not hold; the library gives the same through `Store::restore_from`.

use sessionstore::history::Replay;
use sessionstore::store::Outgoing;
use sessionstore::{EntryId, SessionId};

use crate::restored::CollectRestore;
use crate::support::{RECORDED_TURN, TestStore, stderr, stdout};

/// A session of a user message, a recorded turn (a thought, a plan, two tool calls
/// and agent text: five items), a queued message and another user message.
async fn seeded(t: &TestStore) -> SessionId {
    let s = t.session().await;
    t.store().send(s, Outgoing::user("first")).await.unwrap();
    let out = t
        .bin()
        .args(["record", "--session", &s.to_string()])
        .stdin(RECORDED_TURN)
        .output();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut queued = Outgoing::user("waiting");
    queued.mid_turn = true;
    t.store().send(s, queued).await.unwrap();
    t.store().send(s, Outgoing::user("last")).await.unwrap();
    s
}

fn restore(t: &TestStore, s: SessionId, format: &str, point: &[&str]) -> String {
    let sid = s.to_string();
    let mut args = vec!["restore", "--session", &sid, "--format", format];
    args.extend_from_slice(point);
    let out = t.run(&args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

fn doc(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("one JSON document")
}

/// Each format's tail is the whole restore's suffix, with the partial marker the whole
/// one lacks; `--from` an entry's id is the tail that starts there.
#[tokio::test]
async fn a_tail_and_a_start_are_the_whole_restores_suffix_in_every_format() {
    let t = TestStore::new().await;
    let s = seeded(&t).await;
    let whole = doc(&restore(&t, s, "acp", &[]));
    assert!(whole.get("partial").is_none());
    let entries = whole["messages"].as_array().unwrap().clone();
    // first, five items, last: the queued message is not in the delivered history.
    assert_eq!(entries.len(), 7);

    for n in [0usize, 1, 3, 7, 50] {
        let tail = doc(&restore(&t, s, "acp", &["--tail", &n.to_string()]));
        let kept = n.min(entries.len());
        let skipped = entries.len() - kept;
        assert_eq!(
            tail["messages"].as_array().unwrap()[..],
            entries[skipped..],
            "--tail {n}"
        );
        let from = entries.get(skipped).map(|e| e["id"].clone());
        assert_eq!(
            tail["partial"],
            serde_json::json!({"from": from, "skipped": skipped}),
            "--tail {n}"
        );
        // The same point named by its id.
        if let Some(from) = from {
            let by_id = restore(&t, s, "acp", &["--from", from.as_str().unwrap()]);
            assert_eq!(doc(&by_id), tail, "--from {from}");
        }
    }

    // acp-updates: one leading line says where, then the whole stream's last lines.
    let whole_lines: Vec<String> = restore(&t, s, "acp-updates", &[])
        .lines()
        .map(str::to_owned)
        .collect();
    let tail = restore(&t, s, "acp-updates", &["--tail", "2"]);
    let mut lines = tail.lines();
    let notice: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(
        notice["params"]["update"],
        serde_json::json!({"sessionUpdate": "session_info_update"})
    );
    assert_eq!(
        notice["params"]["_meta"][sessionstore::format::REPLAY_META_KEY]["partial"],
        serde_json::json!({"from": entries[5]["id"], "skipped": 5})
    );
    let rest: Vec<&str> = lines.collect();
    // The agent text is one chunk line, "last" one more.
    assert_eq!(rest.len(), 2);
    assert_eq!(rest[..], whole_lines[whole_lines.len() - 2..]);

    // The OpenAI requests: the whole one's last messages, and `metadata`.
    for format in ["openai", "openai-responses"] {
        let list = if format == "openai" {
            "messages"
        } else {
            "input"
        };
        let whole = doc(&restore(&t, s, format, &[]));
        assert!(whole.get("metadata").is_none(), "{format}");
        let tail = doc(&restore(&t, s, format, &["--tail", "2"]));
        let all = whole[list].as_array().unwrap();
        let kept = tail[list].as_array().unwrap();
        assert_eq!(kept[..], all[all.len() - 2..], "{format}");
        assert_eq!(
            tail["metadata"],
            serde_json::json!({
                "sessionstore_replay_from": entries[5]["id"],
                "sessionstore_replay_skipped": "5",
            }),
            "{format}"
        );
    }
}

/// The library's replay from a point is the command line's: the same entries, and
/// the same `Partial`.
#[tokio::test]
async fn the_library_replays_from_the_same_point() {
    let t = TestStore::new().await;
    let s = seeded(&t).await;
    let whole = t.store().collect_restore(s).await.unwrap();
    let mut stream = t
        .store()
        .restore_from(s, 1 << 20, Replay::Tail(3))
        .await
        .unwrap();
    let partial = *stream.partial().expect("a partial replay says so");
    assert_eq!(partial.skipped, 4);
    let mut ids = Vec::new();
    while let Some(item) = stream.next().await {
        ids.push(match item.unwrap() {
            sessionstore::replay::ReplayItem::Message(m) => EntryId::from(m.message.id),
            sessionstore::replay::ReplayItem::Recorded(i) => EntryId::from(i.id),
            other => panic!("{other:?}"),
        });
    }
    assert_eq!(partial.from, Some(ids[0]));
    assert_eq!(ids.len(), 3);
    let last = whole.messages.last().unwrap().message.id;
    assert_eq!(ids[2], EntryId::from(last));
    let stream = t
        .store()
        .restore_from(s, 1 << 20, Replay::Whole)
        .await
        .unwrap();
    assert!(stream.partial().is_none(), "a whole replay says nothing");
}

/// An id the delivered history does not hold (another session's message, a queued
/// one, no entry at all) is refused with one line naming it, before any output.
#[tokio::test]
async fn a_start_outside_the_delivered_history_is_refused() {
    let t = TestStore::new().await;
    let s = seeded(&t).await;
    let other = t.session().await;
    let theirs = t
        .store()
        .send(other, Outgoing::user("elsewhere"))
        .await
        .unwrap();
    let queued = t.store().queued_messages(s).await.unwrap().pop().unwrap();
    for id in [
        theirs.id.to_string(),
        queued.id.to_string(),
        SessionId::new().to_string(),
    ] {
        let out = t.run(&[
            "restore",
            "--session",
            &s.to_string(),
            "--format",
            "acp-updates",
            "--from",
            &id,
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stdout(&out).is_empty(), "nothing is written");
        let error: serde_json::Value = serde_json::from_str(&stderr(&out)).unwrap();
        assert_eq!(error["error"]["kind"], "replay_point");
        assert!(
            error["error"]["message"].as_str().unwrap().contains(&id),
            "{error}"
        );
    }
    let out = t.run(&[
        "restore",
        "--session",
        &s.to_string(),
        "--tail",
        "1",
        "--from",
        &queued.id.to_string(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--tail and --from are one or the other"
    );
}

/// A session of `n` user messages `m0`, `m1`, … each sent by itself, so its log is
/// `n` events after the session's.
async fn sent(t: &TestStore, n: usize) -> SessionId {
    let s = t.session().await;
    for i in 0..n {
        t.store()
            .send(s, Outgoing::user(format!("m{i}")))
            .await
            .unwrap();
    }
    s
}

fn lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("each line one JSON value"))
        .collect()
}

/// Restore does not replay the whole log before its first item: damage at the log's
/// end is found after output began. A stream of lines then stops after a whole line
/// with the one-line error; a format that is one document is checked first and
/// prints nothing; the library's stream gives its first items, then the error.
#[tokio::test]
async fn damage_found_late_stops_a_stream_of_lines_and_refuses_a_document() {
    let t = TestStore::new().await;
    let s = sent(&t, 40).await;
    t.deliver_a_stranger(s);
    let sid = s.to_string();
    let out = t.run(&["restore", "--session", &sid, "--format", "acp-updates"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.ends_with('\n'), "stops at a line's end: {text:?}");
    let replayed = lines(&text);
    assert!(
        !replayed.is_empty() && replayed.len() <= 40,
        "{}",
        replayed.len()
    );
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("never appended"), "{err}");
    for format in ["acp", "openai", "openai-responses"] {
        let out = t.run(&["restore", "--session", &sid, "--format", format]);
        assert_eq!(out.status.code(), Some(1), "{format}");
        assert!(out.stdout.is_empty(), "{format}: {}", stdout(&out));
        assert!(stderr(&out).contains("never appended"), "{format}");
    }

    let mut stream = t
        .store()
        .restore_stream(s, sessionstore::dispatch::DEFAULT_MEMO_BUDGET)
        .await
        .expect("the stream starts: the damage is past its first entries");
    let mut items = 0;
    let err = loop {
        match stream.next().await {
            Some(Ok(_)) => items += 1,
            Some(Err(e)) => break e,
            None => panic!("the stream ended without the error"),
        }
    };
    assert!(items > 0);
    assert!(
        matches!(&err, sessionstore::Error::LogMismatch { .. }),
        "{err:?}"
    );
}

/// Every format `restore` writes.
const FORMATS: [&str; 4] = ["acp", "acp-updates", "openai", "openai-responses"];

/// The command line's `restore` of session `s` in `format`, whole or its last `tail`.
fn restore_of(
    t: &TestStore,
    s: SessionId,
    format: &str,
    tail: Option<&str>,
) -> std::process::Output {
    let sid = s.to_string();
    let mut args = vec!["restore", "--session", &sid, "--format", format];
    if let Some(n) = tail {
        args.extend(["--tail", n]);
    }
    t.run(&args)
}

/// A session of `n` recorded agent messages, the i-th `mI` under a `messageId` of its
/// own, after one user message.
async fn recorded(t: &TestStore, n: usize) -> SessionId {
    let s = t.session().await;
    t.store().send(s, Outgoing::user("go")).await.unwrap();
    let updates: Vec<sessionstore::turns::Update> = (0..n)
        .map(|i| {
            sessionstore::turns::Update::Known(
                serde_json::from_value(serde_json::json!({
                    "sessionUpdate": "agent_message_chunk", "messageId": format!("a{i}"),
                    "content": {"type": "text", "text": format!("m{i}")}}))
                .unwrap(),
            )
        })
        .collect();
    t.store().record_from(s, updates).await.unwrap();
    s
}

/// A restore meets an item row with the log's item by writing that item against the
/// row's text, and parses the row only when the words differ: rows that hold the same
/// items in other words (here, with spaces around them), of every kind, still restore,
/// as the log has them, in every format and from a tail; a row whose kind or times were
/// edited, its body left as it was, is refused as before.
#[tokio::test]
async fn an_item_row_in_other_words_restores_and_an_edited_kind_or_time_is_refused() {
    let t = TestStore::new().await;
    let s = recorded(&t, 40).await;
    let other_kinds: Vec<sessionstore::turns::Update> = [
        serde_json::json!({"sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": "thinking", "annotations": {"priority": 0.25}}}),
        serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "c1", "title": "Read",
            "kind": "read", "status": "completed", "rawInput": {"path": "a", "n": [1.5, true]}}),
        serde_json::json!({"sessionUpdate": "plan",
            "entries": [{"content": "step", "priority": "high", "status": "pending"}]}),
        serde_json::json!({"sessionUpdate": "current_mode_update", "currentModeId": "code"}),
        serde_json::json!({"sessionUpdate": "a_kind_from_a_newer_agent", "z": {"y": 1}}),
        serde_json::json!({"sessionUpdate": "agent_message_chunk", "messageId": "last",
            "content": {"type": "text", "text": "done"}}),
    ]
    .into_iter()
    .map(|v| sessionstore::turns::Update::from_value(&v).unwrap())
    .collect();
    t.store().record_from(s, other_kinds).await.unwrap();
    let items = 46;
    // Rows as they were before V12, each with its body: those are what is edited here
    // (`a_row_that_names_its_update_is_read_from_it_and_an_edited_name_is_refused`
    // edits the rows V12 writes).
    assert_eq!(t.write_out_bodies(s).await, items);
    let restore = |format: &str, tail: Option<&str>| restore_of(&t, s, format, tail);
    let formats = FORMATS;
    let clean: Vec<(String, String)> = formats
        .iter()
        .flat_map(|f| [(f, None), (f, Some("10"))])
        .map(|(f, tail)| (f.to_string(), stdout(&restore(f, tail))))
        .collect();
    let sql = |statement: &str| t.raw().execute(statement, []).unwrap();

    assert_eq!(
        sql("UPDATE items SET body = ' ' || body || char(10)"),
        items
    );
    for (i, (format, want)) in clean.iter().enumerate() {
        let tail = (i % 2 == 1).then_some("10");
        let out = restore(format, tail);
        assert!(out.status.success(), "{format} {tail:?}: {}", stderr(&out));
        assert_eq!(&stdout(&out), want, "{format} {tail:?}");
    }
    // The words back as the store wrote them, so the edit below is all that differs.
    assert_eq!(
        sql("UPDATE items SET body = trim(body, ' ' || char(10))"),
        items
    );

    let last = "(SELECT max(seq) FROM items)";
    for (edit, undo, named) in [
        (
            format!(
                "UPDATE items SET updated_at = '2020-01-01T00:00:00.000000000Z' WHERE seq = {last}"
            ),
            None,
            "(updated time)",
        ),
        (
            format!(
                "UPDATE items SET created_at = '2020-01-01T00:00:00.000000000Z' WHERE seq = {last}"
            ),
            None,
            "(created time)",
        ),
        (
            format!("UPDATE items SET kind = 'agent_thought' WHERE seq = {last}"),
            Some(format!(
                "UPDATE items SET kind = 'agent_message' WHERE seq = {last}"
            )),
            "agent_message item",
        ),
    ] {
        let before: String = t
            .raw()
            .query_row(
                &format!("SELECT created_at || updated_at FROM items WHERE seq = {last}"),
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(sql(&edit), 1, "{edit}");
        for format in formats {
            for tail in [None, Some("10")] {
                let out = restore(format, tail);
                assert_eq!(out.status.code(), Some(1), "{edit}: {format} {tail:?}");
                assert!(
                    stderr(&out).contains(named),
                    "{edit}: {format} {tail:?}: {}",
                    stderr(&out)
                );
            }
        }
        match undo {
            Some(undo) => assert_eq!(sql(&undo), 1),
            None => {
                let (created, updated) = before.split_at(before.len() / 2);
                t.raw()
                    .execute(
                        &format!(
                            "UPDATE items SET created_at = ?1, updated_at = ?2 WHERE seq = {last}"
                        ),
                        [created, updated],
                    )
                    .unwrap();
            }
        }
        let out = restore("acp-updates", None);
        assert_eq!(stdout(&out), clean[2].1, "after undoing {edit}");
    }
}

/// An item that one update made, and that nothing changed since, names that update in
/// its row (V12) in place of a body and times: such rows restore in every format, whole
/// and from a tail, exactly as the same items held whole (as before V12) do, are found
/// by search, and their terms leave the index with them. A row whose name of its
/// update was edited is refused by a restore and named by `verify`; one that names an
/// update that is not there is refused with one line.
#[tokio::test]
async fn a_row_that_names_its_update_is_read_from_it_and_an_edited_name_is_refused() {
    let t = TestStore::new().await;
    let s = recorded(&t, 40).await;
    let update = |v: serde_json::Value| sessionstore::turns::Update::from_value(&v).unwrap();
    // A tool call changed by a later batch, and a message of two chunks, hold bodies;
    // a message continued by the next batch names its first chunk and streams the rest.
    for batch in [
        vec![
            serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": "c1",
                "title": "Read", "status": "pending"}),
            serde_json::json!({"sessionUpdate": "agent_message_chunk",
                "messageId": "two", "content": {"type": "text", "text": "first half "}}),
            serde_json::json!({"sessionUpdate": "agent_message_chunk",
                "messageId": "two", "content": {"type": "text", "text": "second half"}}),
            serde_json::json!({"sessionUpdate": "plan",
                "entries": [{"content": "step", "priority": "high", "status": "pending"}]}),
            serde_json::json!({"sessionUpdate": "agent_thought_chunk",
                "content": {"type": "text", "text": "pondering"}}),
        ],
        vec![
            serde_json::json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1",
                "status": "completed"}),
            serde_json::json!({"sessionUpdate": "agent_message_chunk",
                "messageId": "streamed", "content": {"type": "text", "text": "begun "}}),
        ],
        vec![serde_json::json!({"sessionUpdate": "agent_message_chunk",
            "messageId": "streamed", "content": {"type": "text", "text": "and ended"}})],
    ] {
        t.store()
            .record_from(s, batch.into_iter().map(update).collect::<Vec<_>>())
            .await
            .unwrap();
    }
    let rows = |sql: &str| t.raw_query(sql).unwrap();
    let kinds = |bodies: &str| -> Vec<String> {
        rows(&format!(
            "SELECT kind FROM items WHERE body IS {bodies} NULL ORDER BY seq"
        ))
        .into_iter()
        .map(|r| r[0].clone().unwrap())
        .collect()
    };
    let named = kinds("");
    assert_eq!(named.len(), 43, "{named:?}");
    assert_eq!(named.iter().filter(|k| *k == "agent_message").count(), 41);
    assert_eq!(kinds("NOT"), ["tool_call", "agent_message"]);
    assert_eq!(
        rows(
            "SELECT count(*) FROM items WHERE body IS NULL
              AND (created_at IS NOT NULL OR updated_at IS NOT NULL
                   OR made_by_start IS NULL OR made_by_length IS NULL)"
        ),
        [[Some("0".to_owned())]]
    );

    let restore = |format: &str, tail: Option<&str>| restore_of(&t, s, format, tail);
    let formats = FORMATS;
    let outputs = || -> Vec<String> {
        formats
            .iter()
            .flat_map(|f| [(f, None), (f, Some("10"))])
            .map(|(f, tail)| {
                let out = restore(f, tail);
                assert!(out.status.success(), "{f} {tail:?}: {}", stderr(&out));
                stdout(&out)
            })
            .collect()
    };
    let clean = outputs();
    assert!(clean[2].contains("and ended") && clean[2].contains("pondering"));
    let hits = t.store().search("m17".into(), Some(s), 10).await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(hits[0].source, "agent_message");

    // The 40th message, within the last ten entries, now names the bytes of the update
    // before its own.
    let named = rows(
        "SELECT seq, made_by_start, made_by_length FROM items
         WHERE body IS NULL AND kind = 'agent_message' ORDER BY seq LIMIT 2 OFFSET 38",
    );
    let [m38, m39] = [&named[0], &named[1]].map(|r| r[0].clone().unwrap());
    let (start, length) = (named[1][1].clone().unwrap(), named[1][2].clone().unwrap());
    let edit = |statement: &str| t.raw_execute(statement).unwrap();
    edit(&format!(
        "UPDATE items SET (made_by_start, made_by_length) =
             (SELECT made_by_start, made_by_length FROM items WHERE seq = {m38})
         WHERE seq = {m39}"
    ));
    for (i, format) in formats.iter().enumerate() {
        for (j, tail) in [None, Some("10")].into_iter().enumerate() {
            let out = restore(format, tail);
            assert_eq!(out.status.code(), Some(1), "{format} {tail:?}");
            // Nothing, or (a stream of lines) whole lines of what a clean restore prints.
            let printed = stdout(&out);
            assert!(
                clean[2 * i + j].starts_with(&printed)
                    && (printed.is_empty() || printed.ends_with('\n')),
                "{format} {tail:?}: {printed}"
            );
            assert!(
                stderr(&out).contains("agent_message item"),
                "{format} {tail:?}: {}",
                stderr(&out)
            );
        }
    }
    let verified = t.run(&["verify"]);
    assert_eq!(verified.status.code(), Some(1));
    assert!(
        stdout(&verified).contains("differs from its event log (content)"),
        "{}",
        stdout(&verified)
    );
    let undo = format!(
        "UPDATE items SET made_by_start = {start}, made_by_length = {length} WHERE seq = {m39}"
    );
    edit(&undo);
    assert_eq!(outputs(), clean);

    // The right update, but the row's kind edited: refused, in the whole restore and
    // in a tail.
    edit(&format!(
        "UPDATE items SET kind = 'agent_thought' WHERE seq = {m39}"
    ));
    for tail in [None, Some("10")] {
        let out = restore("acp-updates", tail);
        assert_eq!(out.status.code(), Some(1), "{tail:?}");
        assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
        assert!(
            stderr(&out).contains(
                "of kind agent_thought names an update that makes an item of kind agent_message"
            ),
            "{}",
            stderr(&out)
        );
    }
    edit(&format!(
        "UPDATE items SET kind = 'agent_message' WHERE seq = {m39}"
    ));
    assert_eq!(outputs(), clean);

    // An update that is not there.
    edit(&format!(
        "UPDATE items SET made_by_start = 1000000 WHERE seq = {m39}"
    ));
    let out = restore("acp-updates", None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("no such update"), "{}", stderr(&out));
    edit(&undo);
    assert_eq!(outputs(), clean);

    // A second session's named rows deleted with it take their terms out of the index.
    let gone = recorded(&t, 5).await;
    let deleted = t.run(&["session", "delete", &gone.to_string()]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    edit("INSERT INTO search (search, rank) VALUES ('integrity-check', 1)");
    assert_eq!(
        t.store().search("m3".into(), None, 10).await.unwrap().len(),
        1
    );

    // The same items held whole restore the same.
    // (All but the one still streaming.)
    assert_eq!(t.write_out_bodies(s).await, 42);
    assert_eq!(outputs(), clean);
}

/// A tail checks what it replays against the log: an item row edited within it is
/// refused, never printed; one before it is not the tail's to find, and the whole
/// restore and `verify` find it.
#[tokio::test]
async fn a_tail_refuses_an_edit_within_it_and_leaves_one_before_it_to_verify() {
    let t = TestStore::new().await;
    let s = recorded(&t, 40).await;
    let sid = s.to_string();
    let tail = |format: &str| {
        t.run(&[
            "restore",
            "--session",
            &sid,
            "--format",
            format,
            "--tail",
            "10",
        ])
    };
    // Each row with its body, to be edited as text.
    t.write_out_bodies(s).await;
    let clean = stdout(&tail("acp-updates"));
    // The notice of where the replay starts, then the ten.
    assert_eq!(lines(&clean).len(), 11);
    let edit = |from: &str, to: &str| {
        t.raw()
            .execute(
                "UPDATE items SET body = replace(body, ?1, ?2) WHERE body LIKE ?3",
                [
                    format!("\"{from}\""),
                    format!("\"{to}\""),
                    format!("%\"{from}\"%"),
                ],
            )
            .unwrap()
    };

    assert_eq!(edit("m35", "edited"), 1);
    for format in ["acp", "acp-updates", "openai"] {
        let out = tail(format);
        assert_eq!(out.status.code(), Some(1), "{format}");
        // Fewer entries than a first batch: refused before any line.
        assert!(out.stdout.is_empty(), "{format}: {}", stdout(&out));
        assert!(
            stderr(&out).contains("agent_message item") && stderr(&out).contains("(content)"),
            "{format}: {}",
            stderr(&out)
        );
    }

    assert_eq!(edit("edited", "m35"), 1);
    assert_eq!(edit("m3", "edited"), 1);
    for format in ["acp", "acp-updates", "openai", "openai-responses"] {
        let out = tail(format);
        assert!(out.status.success(), "{format}: {}", stderr(&out));
    }
    assert_eq!(stdout(&tail("acp-updates")), clean);
    let out = t.run(&["restore", "--session", &sid, "--format", "acp"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let out = t.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).contains("(content)"), "{}", stdout(&out));
}

/// V13: the log's index by session (`event_keys`) is written a batch at a time, not
/// with every event. A session's log reads the same whether its events are keyed or
/// still past the keys' end, and with both; the keys follow the log through a delete;
/// and `verify` names a key taken away (which hides its event: the restore is
/// refused) and an unkeyed event at a place another takes.
#[tokio::test]
async fn the_log_is_keyed_a_batch_at_a_time_and_reads_the_same_keyed_or_not() {
    let t = TestStore::new().await;
    let (a, b) = (t.session().await, t.session().await);
    let record = |s: SessionId, i: usize| {
        let update = if i % 40 == 39 {
            serde_json::json!({"sessionUpdate": "tool_call", "toolCallId": format!("c{i}"),
                "title": "Read", "status": "pending"})
        } else {
            serde_json::json!({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": format!("{s} chunk {i} ")}})
        };
        let store = t.store().clone();
        async move { store.record_values(s, vec![update]).await.unwrap() }
    };
    // Each update its own batch and event, the two sessions taking turns, as two
    // streams through one proxy do.
    for i in 0..200 {
        record(a, i).await;
        record(b, i).await;
    }
    let one = |sql: &str| number(&t, sql);
    let upto = || one("SELECT upto FROM event_keys_upto");
    let restores = || -> Vec<String> {
        FORMATS
            .iter()
            .flat_map(|f| [(f, None), (f, Some("5"))])
            .map(|(f, tail)| {
                let out = restore_of(&t, a, f, tail);
                assert!(out.status.success(), "{f} {tail:?}: {}", stderr(&out));
                stdout(&out)
            })
            .collect()
    };
    let verified = || {
        let out = t.run(&["verify"]);
        assert!(out.status.success(), "{}", stdout(&out));
    };
    // Fewer events than the keys may lag by: none is keyed yet.
    assert_eq!(upto(), 0);
    assert_eq!(one("SELECT count(*) FROM event_keys"), 0);
    let unkeyed = restores();
    assert!(
        unkeyed[2].contains(&format!("{a} chunk 198")),
        "{}",
        unkeyed[2]
    );
    verified();

    // `b` alone writes on until the keys pass every event of `a`.
    let last_of_a = one(&format!(
        "SELECT max(seq) FROM events WHERE session_id = '{a}'"
    ));
    let mut i = 200;
    while upto() < last_of_a {
        record(b, i).await;
        i += 1;
        assert!(i < 3000, "the keys never moved");
    }
    // Every event up to the end has its key, and only those.
    assert_eq!(
        one("SELECT count(*) FROM event_keys"),
        one("SELECT count(*) FROM events WHERE seq <= (SELECT upto FROM event_keys_upto)")
    );
    assert_eq!(restores(), unkeyed, "the same log, keyed");
    verified();

    // `a` again: keyed events, then unkeyed ones.
    for i in 200..210 {
        record(a, i).await;
    }
    let both = restores();
    assert!(both[2].contains(&format!("{a} chunk 209")), "{}", both[2]);
    assert!(both[2].contains(&format!("{a} chunk 3 ")), "{}", both[2]);
    verified();

    // A deleted session takes its keys with its events.
    let deleted = t.run(&["session", "delete", &b.to_string()]);
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    for table in ["event_keys", "events"] {
        assert_eq!(
            one(&format!(
                "SELECT count(*) FROM {table} WHERE session_id = '{b}'"
            )),
            0,
            "{table}"
        );
    }
    assert_eq!(restores(), both);
    verified();

    // A key taken away hides its event: `verify` names it, and the restore is refused.
    let edit = |statement: &str| t.raw_execute(statement).unwrap();
    edit(&format!(
        "DELETE FROM event_keys WHERE session_id = '{a}' AND session_seq = 3"
    ));
    let out = t.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("the log's index (event_keys): 1 event(s) at or below its end"),
        "{}",
        stdout(&out)
    );
    let out = restore_of(&t, a, "acp-updates", None);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    edit(&format!(
        "INSERT INTO event_keys (session_id, session_seq, seq)
         SELECT session_id, session_seq, seq FROM events
         WHERE session_id = '{a}' AND session_seq = 3"
    ));
    assert_eq!(restores(), both);
    verified();

    // A second unkeyed event at a place in the log that a keyed one takes.
    edit(&format!(
        "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
         SELECT session_id, session_seq, kind, payload, created_at FROM events
         WHERE session_id = '{a}' AND session_seq = 3"
    ));
    let out = t.run(&["verify"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("1 unkeyed event(s) at a place in their session's log"),
        "{}",
        stdout(&out)
    );
}

/// An event of 8 KiB or more is keyed at once, with every event before it: a read of
/// a session's log sorts the unkeyed end's rows, payloads and all.
#[tokio::test]
async fn a_large_event_is_keyed_at_once_with_the_events_before_it() {
    let t = TestStore::new().await;
    let s = recorded(&t, 3).await;
    let one = |sql: &str| number(&t, sql);
    assert_eq!(
        one("SELECT upto FROM event_keys_upto"),
        0,
        "small events wait"
    );
    let long = "word ".repeat(2000);
    t.store()
        .record_values(
            s,
            vec![serde_json::json!({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": long}})],
        )
        .await
        .unwrap();
    assert_eq!(
        one("SELECT upto FROM event_keys_upto"),
        one("SELECT max(seq) FROM events")
    );
    assert_eq!(
        one("SELECT count(*) FROM event_keys"),
        one("SELECT count(*) FROM events")
    );
    let verified = t.run(&["verify"]);
    assert!(verified.status.success(), "{}", stdout(&verified));
    let out = restore_of(&t, s, "acp-updates", Some("1"));
    assert!(out.status.success() && stdout(&out).contains("word word"));
}

/// The one number a query behind the store's back returns.
fn number(t: &TestStore, sql: &str) -> i64 {
    t.raw_query(sql).unwrap()[0][0]
        .clone()
        .unwrap()
        .parse()
        .unwrap()
}
