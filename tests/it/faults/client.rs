//! The client going away mid-turn: the proxy ends (stopping the agent), the turn is
//! left failed or interrupted, the session loads again in a new proxy with what was
//! acknowledged, and `verify` is ok.

use std::io::{BufRead, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sessionstore::SessionId;

use super::{Proxy, prompt, verified};
use crate::support::TestStore;
use crate::support::Whole;

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_goes_mid_turn_leaves_the_session_whole_and_loadable() {
    let t = TestStore::new().await;
    let mut p = Proxy::start(&t, &[], &["--last-block"]);
    let session = p.new_session(t.dir.path());
    p.ok("session/prompt", prompt(&session, "kept"));
    p.send("session/prompt", prompt(&session, "hang"))
        .expect("sent");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let status = p.finish();
    assert!(status.success(), "the proxy ends cleanly: {status}");

    let mut again = Proxy::start(&t, &[], &["--last-block"]);
    again.ok("initialize", json!({"protocolVersion": 1}));
    again.ok(
        "session/load",
        json!({"sessionId": session, "cwd": t.dir.path(), "mcpServers": []}),
    );
    // The replay holds the acknowledged turn.
    assert!(
        again
            .seen
            .iter()
            .any(|m| m["params"]["update"]["content"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("from the test agent"))),
        "{:?}",
        again.seen
    );
    again.ok("session/prompt", prompt(&session, "after"));
    again.finish();
    let store = t.open().await;
    let id: SessionId = session.parse().unwrap();
    let states: Vec<String> = store
        .all_turns(id)
        .await
        .unwrap()
        .iter()
        .map(|turn| turn.state().to_owned())
        .collect();
    assert_eq!(
        states.first().map(String::as_str),
        Some("ended"),
        "{states:?}"
    );
    assert_eq!(
        states.last().map(String::as_str),
        Some("ended"),
        "{states:?}"
    );
    assert_eq!(states.len(), 3, "{states:?}");
    // The abandoned turn: failed, when the proxy recorded the agent's end before it
    // exited, or interrupted.
    assert!(
        matches!(states[1].as_str(), "failed" | "interrupted"),
        "{states:?}"
    );
    verified(&t);
}

/// `sessionstore proxy -- sessionstore-test-agent` on `t`'s store, reading `input` and
/// writing `output`, its debug log in `t`'s directory ([`served`] reads it).
fn proxy_on(t: &TestStore, input: Stdio, output: Stdio) -> Child {
    let log = std::fs::File::create(t.dir.path().join("proxy.log")).expect("the log file");
    Command::new(env!("CARGO_BIN_EXE_sessionstore"))
        .arg("proxy")
        .arg("--db")
        .arg(crate::support::db_arg(&t.config.database))
        .arg("--attachments-root")
        .arg(&t.config.roots.configured)
        .arg("--")
        .arg(super::test_agent())
        .current_dir(t.dir.path())
        .env("HOME", t.dir.path())
        .env("RUST_LOG", "sessionstore::acp::proxy=debug")
        .stdin(input)
        .stdout(output)
        .stderr(log)
        .spawn()
        .expect("the proxy starts")
}

/// How the proxy said it served its input and its output, from the log of
/// [`proxy_on`]: the stdio kinds must each take the path meant for them, not merely
/// work (the blocking fallback would serve a socket or a pipe too).
fn served(t: &TestStore) -> String {
    let log = std::fs::read_to_string(t.dir.path().join("proxy.log")).expect("the log reads");
    log.lines()
        .find_map(|line| {
            line.split_once("the client's input: ")
                .map(|(_, kinds)| kinds)
        })
        .unwrap_or_else(|| panic!("no line on the client's stdio in the log: {log}"))
        .to_owned()
}

const INITIALIZE: &[u8] =
    b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1}}\n";

/// `line` is the proxy's answer to [`INITIALIZE`].
fn initialized(line: &str) {
    let answer: Value = serde_json::from_str(line).expect("one JSON line");
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["result"]["protocolVersion"], 1, "{answer}");
}

/// Waits, within `ANSWER`, for the proxy to end once its client is done, and says it
/// ended cleanly.
fn ends_cleanly(mut child: Child) {
    let deadline = Instant::now() + super::ANSWER;
    let status = loop {
        if let Some(status) = child.try_wait().expect("the proxy's status") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the proxy did not end when its client was done");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
}

/// The proxy reads and writes a pipe through the runtime's own poller, and anything
/// else (here its output is a file) through tokio's standard streams: a client whose
/// output is a file gets the same answers, and the proxy ends when its input does.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_whose_output_is_a_file_is_answered_there() {
    let t = TestStore::new().await;
    let out = t.dir.path().join("client-out.jsonl");
    let file = std::fs::File::create(&out).expect("the output file");
    let mut child = proxy_on(&t, Stdio::piped(), Stdio::from(file));
    let mut to = child.stdin.take().expect("a piped stdin");
    to.write_all(INITIALIZE).expect("the request is written");
    let deadline = Instant::now() + super::ANSWER;
    let answer = loop {
        let text = std::fs::read_to_string(&out).expect("the output file reads");
        if let Some(line) = text.strip_suffix('\n') {
            break line.to_owned();
        }
        assert!(Instant::now() < deadline, "no answer in the file: {text:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    initialized(&answer);
    drop(to);
    ends_cleanly(child);
    assert_eq!(
        served(&t),
        "a pipe, polled; its output: neither a socket nor a pipe, on a blocking thread"
    );
}

/// A client that gives the proxy a socket for its input and another for its output, as
/// Node's `spawn` does (a socket pair for each stream): the proxy reads and writes them
/// through the runtime's poller, answers there, and ends when the client closes its
/// input.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_on_sockets_is_answered_there() {
    let t = TestStore::new().await;
    let (to, input) = UnixStream::pair().expect("a socket pair");
    let (from, output) = UnixStream::pair().expect("a socket pair");
    let child = proxy_on(
        &t,
        Stdio::from(OwnedFd::from(input)),
        Stdio::from(OwnedFd::from(output)),
    );
    from.set_read_timeout(Some(super::ANSWER))
        .expect("a read timeout");
    (&to).write_all(INITIALIZE).expect("the request is written");
    let mut line = String::new();
    std::io::BufReader::new(&from)
        .read_line(&mut line)
        .expect("an answer within the bound");
    initialized(&line);
    drop(to);
    ends_cleanly(child);
    assert_eq!(served(&t), "a socket, polled; its output: a socket, polled");
}

/// Pipes, as Rust's `Command` gives a child (and as every other proxy test runs):
/// both read and written through the runtime's poller.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_on_pipes_is_served_by_the_poller() {
    let t = TestStore::new().await;
    let mut child = proxy_on(&t, Stdio::piped(), Stdio::piped());
    let mut to = child.stdin.take().expect("a piped stdin");
    to.write_all(INITIALIZE).expect("the request is written");
    let out = child.stdout.take().expect("a piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = std::io::BufReader::new(out).read_line(&mut line);
        let _ = tx.send(read.map(|_| line));
    });
    let line = rx
        .recv_timeout(super::ANSWER)
        .expect("an answer within the bound")
        .expect("the answer reads");
    initialized(&line);
    drop(to);
    ends_cleanly(child);
    assert_eq!(served(&t), "a pipe, polled; its output: a pipe, polled");
}
