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
