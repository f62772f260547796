//! Malformed JSON, an oversized frame and a line that never ends, from either side of
//! the proxy: the sender gets a JSON-RPC error for each, the proxy logs what the agent
//! sent, the connection and the session go on, and the proxy's peak memory stays
//! bounded by one frame (`FRAME_LIMIT`) however much is streamed at it.

use serde_json::Value;
use sessionstore::acp::proxy::FRAME_LIMIT;

use super::{Proxy, prompt, verified};
use crate::support::TestStore;
use crate::support::Whole;

/// How much a line that never ends streams before it is ended: well over twice the
/// bound below, so a proxy that held it would be seen.
const ENDLESS: usize = 256 << 20;

/// Over what the proxy used before the flood (the runtime, the store's connections,
/// a turn), its peak memory may grow by one frame held whole and some slack.
const PEAK_GROWTH: u64 = FRAME_LIMIT as u64 + (16 << 20);

/// The proxy's peak memory, reported, is within `PEAK_GROWTH` of `before`.
fn bounded(p: &Proxy, before: u64) {
    let peak = p.peak_rss();
    eprintln!(
        "the proxy's peak RSS: {} MiB before the flood, {} MiB after",
        before >> 20,
        peak >> 20
    );
    assert!(
        peak < before + PEAK_GROWTH,
        "peak RSS {} MiB, over {} MiB + {} MiB",
        peak >> 20,
        before >> 20,
        PEAK_GROWTH >> 20
    );
}

/// The next message, which must be an error with `code` and no id.
fn refused(p: &mut Proxy, code: i64) -> Value {
    let message = p.next().expect("the proxy answers");
    assert_eq!(message["error"]["code"], code, "{message}");
    assert_eq!(message["id"], Value::Null, "{message}");
    message
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_frames_from_the_client_are_refused_and_the_connection_goes_on() {
    let t = TestStore::new().await;
    let mut p = Proxy::start(&t, &[], &[]);
    let session = p.new_session(t.dir.path());
    p.ok("session/prompt", prompt(&session, "before"));
    let before = p.peak_rss();

    assert!(p.write_raw(b"{\"jsonrpc\": \"2.0\", \"method\": oops\n"));
    refused(&mut p, -32700);
    assert!(p.write_raw(b"[1, 2, 3]\n"));
    refused(&mut p, -32600);

    let mut over = vec![b'x'; FRAME_LIMIT + 1];
    over.push(b'\n');
    assert!(p.write_raw(&over));
    drop(over);
    let message = refused(&mut p, -32600);
    assert!(
        message["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("over the")),
        "{message}"
    );

    let block = vec![b'y'; 1 << 20];
    for _ in 0..ENDLESS >> 20 {
        assert!(p.write_raw(&block), "the proxy reads an endless line");
    }
    assert!(p.write_raw(b"\n"));
    let message = refused(&mut p, -32600);
    assert!(
        message["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&ENDLESS.to_string())),
        "{message}"
    );

    p.ok("session/prompt", prompt(&session, "still here"));
    bounded(&p, before);
    p.finish();
    verified(&t);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_frames_from_the_agent_are_refused_and_the_turn_goes_on() {
    let t = TestStore::new().await;
    let mut p = Proxy::start(&t, &[], &["--last-block"]);
    let session = p.new_session(t.dir.path());
    p.ok("session/prompt", prompt(&session, "before"));
    let before = p.peak_rss();
    let answer = p.ok("session/prompt", prompt(&session, "garbage"));
    assert_eq!(answer["stopReason"], "end_turn");
    let answer = p.ok("session/prompt", prompt(&session, "endless"));
    assert_eq!(answer["stopReason"], "end_turn");
    // Nothing of it reached the client: every line the proxy wrote was JSON (the
    // reader checks), and none was the flood.
    assert!(
        p.seen.iter().all(|m| m.to_string().len() < 1 << 20),
        "a flood reached the client"
    );
    bounded(&p, before);
    p.ok("session/prompt", prompt(&session, "after"));
    p.finish();
    let log = std::fs::read_to_string(t.dir.path().join(p_log(&t))).unwrap();
    assert!(log.contains("the agent sent a malformed message"), "{log}");
    assert!(
        log.contains(&format!(
            "refused a frame of {} bytes from the agent",
            FRAME_LIMIT + 1
        )),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "refused a frame of {} bytes from the agent",
            200 << 20
        )),
        "{log}"
    );
    let store = t.open().await;
    let id = session.parse().unwrap();
    let turns = store.all_turns(id).await.unwrap();
    assert!(
        turns.iter().all(|turn| turn.state() == "ended"),
        "{turns:?}"
    );
    verified(&t);
}

/// The log file of the only proxy started in `t`'s folder.
fn p_log(t: &TestStore) -> String {
    std::fs::read_dir(t.dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("proxy-") && n.ends_with(".log"))
        .expect("the proxy's log")
}
