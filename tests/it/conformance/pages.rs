//! A session's history read back a page at a time (`Store::messages`, `items`,
//! `events`, `turns`, `attachments_of`): a history longer than a page comes back whole, in order, each
//! entry once, and equal to what was written; a cursor past the end gives an empty
//! last page.

use std::future::Future;

use serde_json::json;
use sessionstore::attachments::RootKind;
use sessionstore::model::{Delivery, ItemBody, ToolsHost, TurnEnd};
use sessionstore::store::{Outgoing, Page, PageQuery, Upload, whole};
use sessionstore::turns::Update;
use sessionstore::{Error, Result};

use super::common::session;
use crate::support::{TestStore, Whole, conformance, queued_text, user_text};

conformance!(
    a_history_longer_than_a_page_reads_back_whole_a_page_at_a_time,
    a_cursor_past_the_end_gives_an_empty_last_page,
    attachments_read_a_page_at_a_time_come_back_whole_by_stored_name,
);

/// Every page of `read` at `limit` entries a page: each page full but the last, the
/// last one without a next cursor.
async fn paged<T, F, Fut>(mut read: F, limit: usize) -> Vec<T>
where
    F: FnMut(PageQuery<T>) -> Fut,
    Fut: Future<Output = Result<Page<T>>>,
{
    let mut all = Vec::new();
    let mut query = PageQuery::first(limit);
    loop {
        let page = read(query).await.expect("a page reads");
        assert!(
            page.entries.len() <= limit,
            "{} > {limit}",
            page.entries.len()
        );
        let full = page.entries.len() == limit;
        all.extend(page.entries);
        match page.next {
            Some(next) => {
                assert!(full, "a page before the last is full");
                query = PageQuery::after(Some(next), limit);
            }
            None => return all,
        }
    }
}

/// Seven turns, each a message, a tool call and an end, and a queued message after
/// every third: read three at a time, each kind of entry comes back as written, and
/// as one page of them all gives it.
async fn a_history_longer_than_a_page_reads_back_whole_a_page_at_a_time(b: TestStore) {
    let store = b.open().await;
    let s = session(&store, ToolsHost::Local).await;
    let (mut sent, mut queued, mut calls, mut turns) = (vec![], vec![], vec![], vec![]);
    for i in 0..7 {
        let m = store.send(s, user_text(&format!("question {i}"))).await;
        let m = m.expect("a message");
        sent.push(m.id);
        let turn = store.begin_turn(s, vec![m.id]).await.expect("a turn");
        turns.push(turn.id);
        let call = format!("call-{i}");
        let update = json!({"sessionUpdate": "tool_call", "toolCallId": call, "title": "look"});
        let update = Update::from_value(&update).expect("an update");
        store.record(s, vec![update]).await.expect("recorded");
        calls.push(call);
        let end = TurnEnd::Stopped {
            stop_reason: "end_turn".to_owned(),
        };
        store.end_turn(s, turn.id, end, None).await.expect("ended");
        if i % 3 == 0 {
            let q = store.send(s, queued_text(&format!("later {i}"))).await;
            let q = q.expect("a queued message");
            sent.push(q.id);
            queued.push(q.id);
        }
    }
    let messages = paged(|q| store.messages(s, None, q), 3).await;
    let ids: Vec<_> = messages.iter().map(|m| m.id).collect();
    assert_eq!(ids, sent);
    assert_eq!(messages, store.all_messages(s).await.unwrap());
    let waiting = paged(|q| store.messages(s, Some(Delivery::Queued), q), 2).await;
    let ids: Vec<_> = waiting.iter().map(|m| m.id).collect();
    assert_eq!(ids, queued);
    let items = paged(|q| store.items(s, q), 3).await;
    let named: Vec<_> = items
        .iter()
        .map(|i| match &i.body {
            ItemBody::ToolCall(call) => call.tool_call_id.0.to_string(),
            other => panic!("not a tool call: {other:?}"),
        })
        .collect();
    assert_eq!(named, calls);
    assert_eq!(items, store.all_items(s).await.unwrap());
    let paged_turns = paged(|q| store.turns(s, q), 3).await;
    let ids: Vec<_> = paged_turns.iter().map(|t| t.id).collect();
    assert_eq!(ids, turns);
    assert!(paged_turns.iter().all(|t| t.state() == "ended"));
    let events = paged(|q| store.events(s, q), 3).await;
    // A session made, 10 messages, 7 turns begun and ended, 7 recordings.
    assert!(events.len() >= 1 + 10 + 7 * 3, "{}", events.len());
    assert!(
        events
            .windows(2)
            .all(|w| w[0].session_seq < w[1].session_seq)
    );
    let one = store.events(s, PageQuery::first(1000)).await.unwrap();
    assert_eq!(one.next, None);
    assert_eq!(events, one.entries);
}

/// A cursor from a longer history, given to a shorter one, is past its end: an empty
/// page with no next one. A limit of 0 reads one entry; an unknown session is refused.
async fn a_cursor_past_the_end_gives_an_empty_last_page(b: TestStore) {
    let store = b.open().await;
    let long = session(&store, ToolsHost::Local).await;
    let short = session(&store, ToolsHost::Local).await;
    for i in 0..4 {
        store.send(long, user_text(&format!("{i}"))).await.unwrap();
    }
    store.send(short, user_text("only")).await.unwrap();
    let first = store.messages(long, None, PageQuery::first(3)).await;
    let after_three = first.unwrap().next.expect("a next page");
    let past = store
        .messages(short, None, PageQuery::after(Some(after_three.clone()), 3))
        .await
        .unwrap();
    assert_eq!(past.entries, vec![]);
    assert_eq!(past.next, None);
    let last = store
        .messages(long, None, PageQuery::after(Some(after_three), 3))
        .await
        .unwrap();
    assert_eq!(last.entries.len(), 1);
    assert_eq!(last.next, None);
    let one = store.messages(long, None, PageQuery::first(0)).await;
    assert_eq!(one.unwrap().entries.len(), 1);
    let events = store.events(short, PageQuery::first(1000)).await.unwrap();
    let end = store
        .events(long, PageQuery::first(events.entries.len()))
        .await;
    let end = end.unwrap().next.expect("the longer log goes on");
    let past = store.events(short, PageQuery::after(Some(end), 5)).await;
    assert_eq!(past.unwrap().entries, vec![]);
    let unknown = sessionstore::SessionId::new();
    let refused = store.turns(unknown, PageQuery::default()).await;
    assert!(matches!(refused, Err(Error::SessionNotFound(id)) if id == unknown));
}

/// A session's attachments read three at a time come back as one read of them all
/// gives them, by stored name, though the URIs' percent-encoded order differs (`é.txt`
/// after `z.txt` by name, before it by URI): its uploads, a legacy copy (hidden by a
/// configured one of the same name), a referenced file gone from disk, each once with
/// the messages that refer to it. A cursor past the end gives an empty last page.
async fn attachments_read_a_page_at_a_time_come_back_whole_by_stored_name(b: TestStore) {
    let b = b.with_legacy();
    let store = b.open().await;
    let s = session(&store, ToolsHost::Local).await;
    let names = [
        "b.txt", "z.txt", "é.txt", "a b.txt", "a!b.txt", "c.txt", "d.txt",
    ];
    let uploads = names
        .iter()
        .map(|n| Upload::new(*n, n.as_bytes()))
        .collect();
    let stored = store.attach(s, uploads).await.expect("uploads stored");
    let refer = |text: &str, files: &[usize]| {
        let mut out = Outgoing::user(text);
        out.attach = files.iter().map(|&i| stored[i].uri.clone()).collect();
        out
    };
    let first = store.send(s, refer("first", &[0, 2])).await.unwrap();
    let second = store.send(s, refer("second", &[2, 5, 2])).await.unwrap();
    let folder = |root: &std::path::Path| root.join(s.to_string());
    std::fs::remove_file(folder(&b.config.roots.configured).join("c.txt")).unwrap();
    let legacy = folder(&b.config.roots.legacy[0]);
    std::fs::create_dir_all(&legacy).unwrap();
    std::fs::write(legacy.join("legacy.txt"), "old").unwrap();
    std::fs::write(legacy.join("b.txt"), "an older b").unwrap();

    let paged_all = paged(|q| store.attachments_of(s, q), 3).await;
    let listed: Vec<_> = paged_all.iter().map(|a| a.uri.name()).collect();
    let by_name = [
        "a b.txt",
        "a!b.txt",
        "b.txt",
        "c.txt",
        "d.txt",
        "legacy.txt",
        "z.txt",
        "é.txt",
    ];
    assert_eq!(listed, by_name);
    let mut by_uri: Vec<_> = paged_all.iter().map(|a| a.uri.to_string()).collect();
    by_uri.sort();
    let uris: Vec<_> = paged_all.iter().map(|a| a.uri.to_string()).collect();
    assert_ne!(by_uri, uris, "the URIs' order is not the names' order");
    assert_eq!(
        paged_all,
        whole(|q| store.attachments_of(s, q)).await.unwrap()
    );
    let one = store
        .attachments_of(s, PageQuery::first(1000))
        .await
        .unwrap();
    assert_eq!((one.entries, one.next), (paged_all.clone(), None));

    let entry = |name: &str| paged_all.iter().find(|a| a.uri.name() == name).unwrap();
    let root = |name: &str| entry(name).file.as_ref().map(|f| f.root.clone());
    assert_eq!(root("b.txt"), Some(RootKind::Configured));
    assert_eq!(entry("b.txt").file.as_ref().unwrap().size, 5);
    assert_eq!(root("legacy.txt"), Some(RootKind::Legacy(0)));
    assert_eq!(root("c.txt"), None);
    assert_eq!(entry("c.txt").messages, vec![second.id]);
    assert_eq!(entry("é.txt").messages, vec![first.id, second.id]);
    assert_eq!(entry("d.txt").messages, vec![]);

    let short = session(&store, ToolsHost::Local).await;
    store
        .attach(short, vec![Upload::new("a.txt", "x")])
        .await
        .unwrap();
    let six = store.attachments_of(s, PageQuery::first(6)).await.unwrap();
    let after_six = six.next.expect("a next page");
    let past = store
        .attachments_of(short, PageQuery::after(Some(after_six.clone()), 3))
        .await
        .unwrap();
    assert_eq!((past.entries, past.next), (vec![], None));
    let last = store
        .attachments_of(s, PageQuery::after(Some(after_six), 3))
        .await
        .unwrap();
    assert_eq!(last.entries, paged_all[6..].to_vec());
    assert_eq!(last.next, None);
    let unknown = sessionstore::SessionId::new();
    let refused = store.attachments_of(unknown, PageQuery::default()).await;
    assert!(matches!(refused, Err(Error::SessionNotFound(id)) if id == unknown));
}
