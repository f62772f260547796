//! Histories of any length, from outside: `restore --tail N` and `--from ID` in every
//! format are the whole restore's entries from that point on, say where they start
//! where a whole restore says nothing, and refuse an id the delivered history does
//! not hold; the library gives the same through `Store::restore`.

use sessionstore::restore::Replay;
use sessionstore::store::Outgoing;
use sessionstore::{EntryId, SessionId};

use crate::restored::CollectRestore;
use crate::support::{RECORDED_TURN, TestStore, Whole, stderr, stdout};

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
        .restore(s, 1 << 20, Replay::Tail(3))
        .await
        .unwrap();
    let partial = *stream.partial().expect("a partial replay says so");
    assert_eq!(partial.skipped, 4);
    let mut ids = Vec::new();
    while let Some(item) = stream.next().await {
        ids.push(match item.unwrap() {
            sessionstore::restore::ReplayItem::Message(m) => EntryId::from(m.message.id),
            sessionstore::restore::ReplayItem::Recorded(i) => EntryId::from(i.id),
            other => panic!("{other:?}"),
        });
    }
    assert_eq!(partial.from, Some(ids[0]));
    assert_eq!(ids.len(), 3);
    let last = whole.messages.last().unwrap().message.id;
    assert_eq!(ids[2], EntryId::from(last));
    let stream = t.store().restore(s, 1 << 20, Replay::Whole).await.unwrap();
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
pub(crate) async fn sent(t: &TestStore, n: usize) -> SessionId {
    let s = t.session().await;
    for i in 0..n {
        t.store()
            .send(s, Outgoing::user(format!("m{i}")))
            .await
            .unwrap();
    }
    s
}

pub(crate) fn lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("each line one JSON value"))
        .collect()
}

/// Every format `restore` writes.
pub(crate) const FORMATS: [&str; 4] = ["acp", "acp-updates", "openai", "openai-responses"];

/// The command line's `restore` of session `s` in `format`, whole or its last `tail`.
pub(crate) fn restore_of(
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
pub(crate) async fn recorded(t: &TestStore, n: usize) -> SessionId {
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
    t.store()
        .record(s, sessionstore::record::Batches(updates))
        .await
        .unwrap();
    s
}

/// V13: the log's index by session (`event_keys`) is written a batch at a time, not
/// with every event. A session's log reads the same whether its events are keyed or
/// still past the keys' end, and with both; the keys follow the log through a delete;
/// and `verify` names a key taken away (which hides its event from every read of the
/// log; a restore reads the rows) and an unkeyed event at a place another takes.
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
        async move {
            store
                .record(s, sessionstore::record::Values(vec![update]))
                .await
                .unwrap()
        }
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

    // A key taken away hides its event: `verify` names it; a restore reads the rows,
    // which it does not hide.
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
    assert_eq!(restores(), both);
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
        .record(
            s,
            sessionstore::record::Values(vec![
                serde_json::json!({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": long}}),
            ]),
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
