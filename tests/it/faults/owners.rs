//! Two proxies on one database: each carries its own sessions freely; a session one
//! carries is refused to the other with `session_open_elsewhere` (load, resume,
//! delete) until the holder closes it or its process ends, when the other takes it
//! over. On both engines.

use serde_json::{Value, json};

use super::{Proxy, prompt, verified};
use crate::support::{TestStore, conformance};

conformance!(two_proxies_share_a_database_and_refuse_each_others_sessions);

/// The error of an answer that must be the open-elsewhere refusal of `session`.
fn open_elsewhere(answer: &Value, session: &str) {
    let error = &answer["error"];
    assert_eq!(error["data"]["kind"], "session_open_elsewhere", "{answer}");
    assert_eq!(error["code"], -32600, "{answer}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(session) && message.contains("open elsewhere"),
        "{answer}"
    );
}

async fn two_proxies_share_a_database_and_refuse_each_others_sessions(t: TestStore) {
    let cwd = t.dir.path().to_owned();
    let mut a = Proxy::start(&t, &[], &[]);
    let mut b = Proxy::start(&t, &[], &[]);
    let held_by_a = a.new_session(&cwd);
    let held_by_b = b.new_session(&cwd);
    a.ok("session/prompt", prompt(&held_by_a, "one for a"));
    b.ok("session/prompt", prompt(&held_by_b, "one for b"));

    let setup = |session: &str| json!({"sessionId": session, "cwd": cwd, "mcpServers": []});
    for method in ["session/load", "session/resume"] {
        let answer = b.request(method, setup(&held_by_a)).expect("b answers");
        open_elsewhere(&answer, &held_by_a);
    }
    // Refused before anything was replayed to b.
    assert!(
        !b.seen
            .iter()
            .any(|m| m["params"]["sessionId"] == json!(held_by_a)),
        "b was told of a's session: {:?}",
        b.seen
    );
    let answer = b
        .request("session/delete", json!({"sessionId": held_by_a}))
        .expect("b answers");
    open_elsewhere(&answer, &held_by_a);
    // a still carries it, whole.
    a.ok("session/prompt", prompt(&held_by_a, "still a's"));

    // Closed by its holder: the other takes it over.
    a.ok("session/close", json!({"sessionId": held_by_a}));
    b.ok("session/load", setup(&held_by_a));
    b.ok("session/prompt", prompt(&held_by_a, "now b's"));
    let answer = a
        .request("session/load", setup(&held_by_a))
        .expect("a answers");
    open_elsewhere(&answer, &held_by_a);

    // Its holder killed: the sessions it carried are free as soon as the database
    // knows (SQLite: at once, the lock goes with the process; PostgreSQL: when the
    // server has seen the killed connection close, which a loaded machine can delay).
    b.kill();
    load_once_free(&mut a, setup(&held_by_b), &held_by_b);
    a.ok("session/load", setup(&held_by_a));
    a.ok("session/prompt", prompt(&held_by_b, "a's now"));
    // The client going lets go of what it held, too.
    a.finish();
    let mut c = Proxy::start(&t, &[], &[]);
    c.ok("initialize", json!({"protocolVersion": 1}));
    c.ok("session/load", setup(&held_by_a));
    c.ok("session/load", setup(&held_by_b));
    c.finish();
    verified(&t);
}

/// `session/load` of `session` through `proxy`, asked again while it is still open
/// elsewhere (bounded: 10 s), so that only the release's timing may vary.
fn load_once_free(proxy: &mut Proxy, params: Value, session: &str) {
    let start = std::time::Instant::now();
    loop {
        let answer = proxy
            .request("session/load", params.clone())
            .expect("the proxy answers");
        if answer.get("error").is_none() {
            return;
        }
        open_elsewhere(&answer, session);
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "still open elsewhere 10 s after its holder was killed: {answer}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
