//! The proxy SIGKILLed mid-turn, again and again at random moments (during a start, a
//! load, a prompt's store, dispatch or recording), then started again and the session
//! loaded: every prompt the client saw answered is in the store with its whole turn,
//! ended, and `verify` is ok. A few kills in `cargo test`; `SESSIONSTORE_LONG=1` (or
//! `SESSIONSTORE_PROXY_KILLS=N`) runs many.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use sessionstore::SessionId;
use sessionstore::model::Role;

use super::{Proxy, prompt, verified};
use crate::support::Whole;
use crate::support::{Rng, TestStore, count};

#[tokio::test(flavor = "multi_thread")]
async fn a_proxy_killed_mid_turn_loses_nothing_it_acknowledged() {
    let kills = count("SESSIONSTORE_PROXY_KILLS", 4, 60);
    let mut rng = Rng::seeded("faults/proxy-kills");
    let t = TestStore::new().await;
    let session = {
        let mut p = Proxy::start(&t, &[], &[]);
        let session = p.new_session(t.dir.path());
        p.finish();
        session
    };
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let mut next = 0usize;
    for _ in 0..kills {
        let mut p = Proxy::start(&t, &[], &[]);
        let pid = p.pid();
        let first = next;
        next += 1000;
        let (sid, sink, dir) = (session.clone(), acked.clone(), t.dir.path().to_owned());
        let client = std::thread::spawn(move || {
            if p.request("initialize", json!({"protocolVersion": 1}))
                .is_none()
            {
                return;
            }
            let load = json!({"sessionId": sid, "cwd": dir, "mcpServers": []});
            match p.request("session/load", load) {
                Some(answer) if answer.get("error").is_none() => {}
                Some(answer) => panic!("the session loads after a kill: {answer}"),
                None => return,
            }
            for n in first.. {
                let text = format!("prompt {n}");
                match p.request("session/prompt", prompt(&sid, &text)) {
                    Some(answer) if answer.get("error").is_none() => {
                        sink.lock().unwrap().insert(text);
                    }
                    Some(answer) => panic!("{text}: {answer}"),
                    None => return,
                }
            }
        });
        std::thread::sleep(Duration::from_millis(50 + rng.below(600)));
        // SIGKILL, not a polite end: the process gets no chance to finish anything.
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
        client.join().expect("the client thread");
    }

    // Started again, the session loads; what was acknowledged is all there.
    let mut p = Proxy::start(&t, &[], &[]);
    p.ok("initialize", json!({"protocolVersion": 1}));
    p.ok(
        "session/load",
        json!({"sessionId": session, "cwd": t.dir.path(), "mcpServers": []}),
    );
    p.ok("session/prompt", prompt(&session, "after the kills"));
    p.finish();
    verified(&t);

    let acked = acked.lock().unwrap().clone();
    assert!(
        !acked.is_empty(),
        "no prompt was acknowledged in {kills} runs"
    );
    let store = t.open().await;
    let id: SessionId = session.parse().unwrap();
    let messages = store.all_messages(id).await.unwrap();
    let turns = store.all_turns(id).await.unwrap();
    let items = store.all_items(id).await.unwrap();
    let items_after = |message: &sessionstore::model::Message| {
        let until = messages
            .iter()
            .map(|m| m.seq)
            .filter(|seq| *seq > message.seq)
            .min()
            .unwrap_or(i64::MAX);
        items
            .iter()
            .filter(|item| item.seq > message.seq && item.seq < until)
            .count()
    };
    let stored = |text: &str| {
        messages
            .iter()
            .find(|m| m.role == Role::User && m.display_text == text)
            .unwrap_or_else(|| panic!("acknowledged {text:?} is not stored"))
    };
    // What one whole turn of the test agent leaves at least: the last, never
    // interrupted (its tool call, always `call-1`, is an item of the first turn's).
    let whole = items_after(stored("after the kills"));
    for text in &acked {
        let message = stored(text);
        let turn = turns
            .iter()
            .find(|turn| turn.messages.contains(&message.id))
            .unwrap_or_else(|| panic!("acknowledged {text:?} has no turn"));
        assert_eq!(turn.state(), "ended", "the turn of {text:?}: {turn:?}");
        // The agent's whole answer was recorded before the client was told: the items
        // between this turn's message and the session's next message.
        assert!(
            items_after(message) >= whole,
            "the turn of {text:?} kept {} items, a whole one {whole}",
            items_after(message)
        );
    }
    eprintln!(
        "{kills} kills: {} prompts acknowledged, {} turns stored",
        acked.len(),
        turns.len()
    );
}
