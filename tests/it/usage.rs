//! Issue 47 item 5, what a session cost: the end-of-turn `usage` of each prompt's
//! answer and the agent's `usage_update`s recorded through `sessionstore proxy`, and
//! `sessionstore usage` reporting them, as raw JSON-RPC and the command line see it.

use std::time::Duration;

use serde_json::{Value, json};

use crate::acp::{Wire, spawn_layer};
use crate::support::{TestStore, json as json_of, stderr};

/// A prompt of one text block.
fn prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

fn new_session(wire: &mut Wire, id: u64, cwd: &std::path::Path) -> String {
    let (_, made) = wire.call(id, "session/new", json!({"cwd": cwd, "mcpServers": []}));
    made["result"]["sessionId"]
        .as_str()
        .expect("a session")
        .to_owned()
}

/// The `usage_update`s among the notifications in `lines`.
fn usage_updates(lines: &[Value]) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["method"] == "session/update")
        .map(|l| l["params"]["update"].clone())
        .filter(|u| u["sessionUpdate"] == "usage_update")
        .collect()
}

fn usage(t: &TestStore, args: &[&str]) -> Value {
    let mut all = vec!["usage", "--json"];
    all.extend_from_slice(args);
    json_of(&t.run(&all))
}

/// A session's row of the report, as `--json` prints it exactly.
#[allow(clippy::too_many_arguments)]
fn row(
    id: &str,
    title: &str,
    turns: u64,
    tokens: [Option<u64>; 6],
    cost: Value,
    context: Value,
) -> Value {
    json!({"id": id, "title": title, "turns": turns,
        "inputTokens": tokens[0], "outputTokens": tokens[1], "thoughtTokens": tokens[2],
        "cachedReadTokens": tokens[3], "cachedWriteTokens": tokens[4],
        "totalTokens": tokens[5], "cost": cost, "context": context})
}

fn total(turns: u64, tokens: [Option<u64>; 6]) -> Value {
    json!({"turns": turns,
        "inputTokens": tokens[0], "outputTokens": tokens[1], "thoughtTokens": tokens[2],
        "cachedReadTokens": tokens[3], "cachedWriteTokens": tokens[4],
        "totalTokens": tokens[5]})
}

/// What the test agent reports for each `usage` turn (input, output, thought, cache
/// read, cache write, total).
const ONE: [Option<u64>; 6] = [Some(100), Some(20), None, Some(30), None, Some(150)];
const NONE: [Option<u64>; 6] = [None; 6];

fn times(n: u64, t: [Option<u64>; 6]) -> [Option<u64>; 6] {
    t.map(|k| k.map(|k| k * n))
}

/// Through the proxy, each turn's end-of-turn usage is recorded with the turn and the
/// agent's `usage_update`s with the session; `usage --json` sums the tokens by kind
/// exactly (a kind no turn reported `null`, never 0; a session with no usage all
/// `null`), keeps the latest context and the latest cost (an update without a cost
/// leaves it), counts the turns begun from `--since` (a date, a date-time; a bad one a
/// one-line usage error), takes `--session`; a fork counts none of its origin's turns
/// nor its cost; after a restart `session/load` replays the `usage_update`s; `verify`
/// passes, names edited figures, and `verify --repair` writes them back from the log.
#[tokio::test]
async fn usage_through_the_proxy_is_recorded_reported_replayed_and_repaired() {
    let t = TestStore::empty();
    let dir = t.dir.path().to_owned();
    let mut process = spawn_layer(&t, Some(&["--last-block"][..]));
    let mut wire = Wire::over(&mut process.child);
    wire.call(1, "initialize", json!({"protocolVersion": 1}));
    let a = new_session(&mut wire, 2, &dir);

    let (before, done) = wire.call(3, "session/prompt", prompt(&a, "usage one"));
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    // Relayed as the agent sent them.
    assert_eq!(
        done["result"]["usage"],
        json!({"totalTokens": 150, "inputTokens": 100, "outputTokens": 20,
            "cachedReadTokens": 30}),
        "{done}"
    );
    assert_eq!(
        usage_updates(&before),
        vec![
            json!({"sessionUpdate": "usage_update", "used": 1000, "size": 200000,
            "cost": {"amount": 0.25, "currency": "USD"}})
        ]
    );
    // Turns begun from here on: the rest.
    std::thread::sleep(Duration::from_millis(20));
    let middle = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("a time formats");
    std::thread::sleep(Duration::from_millis(20));
    let (_, done) = wire.call(4, "session/prompt", prompt(&a, "usage nocost"));
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let (_, done) = wire.call(5, "session/prompt", prompt(&a, "echo in two: just talk"));
    assert!(done["result"].get("usage").is_none(), "{done}");
    let b = new_session(&mut wire, 6, &dir);
    let (_, done) = wire.call(7, "session/prompt", prompt(&b, "echo in two: hello there"));
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    drop(wire);
    process.kill();

    let a_row = |turns, tokens| {
        row(
            &a,
            "usage one",
            turns,
            tokens,
            json!({"amount": 0.25, "currency": "USD"}),
            json!({"used": 2000, "size": 200000}),
        )
    };
    let b_row = |turns| {
        row(
            &b,
            "echo in two: hello there",
            turns,
            NONE,
            Value::Null,
            Value::Null,
        )
    };
    let whole = json!({
        "sessions": [b_row(1), a_row(3, times(2, ONE))],
        "total": total(4, times(2, ONE)),
    });
    assert_eq!(usage(&t, &[]), whole);
    assert_eq!(
        usage(&t, &["--session", &a]),
        json!({"sessions": [a_row(3, times(2, ONE))], "total": total(3, times(2, ONE))})
    );
    assert_eq!(
        usage(&t, &["--session", &a, &b]),
        json!({"sessions": [a_row(3, times(2, ONE)), b_row(1)],
            "total": total(4, times(2, ONE))})
    );
    assert_eq!(usage(&t, &["--since", "2000-01-01"]), whole);
    assert_eq!(
        usage(&t, &["--since", &middle]),
        json!({"sessions": [b_row(1), a_row(2, ONE)], "total": total(3, ONE)})
    );
    // Nothing begun since: no turn, no token; cost and context are the latest still.
    assert_eq!(
        usage(&t, &["--since", "2999-01-01T00:00:00+02:00"]),
        json!({"sessions": [b_row(0), a_row(0, NONE)], "total": total(0, NONE)})
    );
    for bad in ["yesterday", "2026-13-01", "2026-12-01T25:00:00Z"] {
        let out = t.run(&["usage", "--since", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let err = stderr(&out);
        assert_eq!(err.trim_end().lines().count(), 1, "{err:?}");
        assert!(err.contains("--since") && err.contains(bad), "{err:?}");
    }
    let unknown = sessionstore::SessionId::new().to_string();
    let out = t.run(&["usage", "--session", &unknown]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // The human table: a row a session and the total, `-` for what none reported.
    let out = t.run(&["usage", "--session", &a, &b]);
    assert!(out.status.success(), "{out:?}");
    let table = crate::support::stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(
        lines[0].starts_with("SESSION") && lines[0].contains("COST"),
        "{table}"
    );
    assert!(
        lines[1].starts_with(a.as_str())
            && lines[1].contains("0.25 USD")
            && lines[1].contains("2000/200000")
            && lines[1].contains("usage one"),
        "{table}"
    );
    let words: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        &words[1..8],
        ["3", "200", "40", "-", "60", "-", "300"],
        "{table}"
    );
    let words: Vec<&str> = lines[3].split_whitespace().collect();
    assert_eq!(
        words,
        ["total", "4", "200", "40", "-", "60", "-", "300"],
        "{table}"
    );

    // A fork copies history, not cost.
    let forked = json_of(&t.run(&["--json", "session", "fork", &a]));
    let fork = forked["id"].as_str().expect("the fork's id").to_owned();
    assert_eq!(
        usage(&t, &["--session", &fork]),
        json!({"sessions": [row(&fork, "usage one", 0, NONE, Value::Null, Value::Null)],
            "total": total(0, NONE)})
    );
    // So does an import of an export; the transcript says what each update said.
    let archive = dir.join("a.tar");
    let out = t.run(&[
        "export",
        "--session",
        &a,
        "--out",
        archive.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let imported = json_of(&t.run(&["--json", "import", archive.to_str().unwrap()]));
    let imported = imported["id"].as_str().expect("the import's id").to_owned();
    assert_eq!(
        usage(&t, &["--session", &imported])["sessions"][0],
        row(&imported, "usage one", 0, NONE, Value::Null, Value::Null)
    );
    let transcript = dir.join("a.md");
    let out = t.run(&[
        "export",
        "--session",
        &a,
        "--format",
        "markdown",
        "--out",
        transcript.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let transcript = std::fs::read_to_string(&transcript).unwrap();
    assert!(
        transcript.contains("*(usage: 1000 of 200000 tokens in context; cost so far 0.25 USD)*")
            && transcript.contains("*(usage: 2000 of 200000 tokens in context)*"),
        "{transcript}"
    );
    assert!(t.run(&["verify"]).status.success(), "verify passes");

    // After a restart, loading the session replays its usage updates as they came.
    let mut process = spawn_layer(&t, Some(&["--last-block"][..]));
    let mut wire = Wire::over(&mut process.child);
    wire.call(1, "initialize", json!({"protocolVersion": 1}));
    let (replay, loaded) = wire.call(
        2,
        "session/load",
        json!({"sessionId": a, "cwd": dir, "mcpServers": []}),
    );
    assert!(loaded.get("result").is_some(), "{loaded}");
    assert_eq!(
        usage_updates(&replay),
        vec![
            json!({"sessionUpdate": "usage_update", "used": 1000, "size": 200000,
                "cost": {"amount": 0.25, "currency": "USD"}}),
            json!({"sessionUpdate": "usage_update", "used": 2000, "size": 200000}),
        ]
    );
    // The fork's replay has none.
    let (replay, loaded) = wire.call(
        3,
        "session/load",
        json!({"sessionId": fork, "cwd": dir, "mcpServers": []}),
    );
    assert!(loaded.get("result").is_some(), "{loaded}");
    assert!(usage_updates(&replay).is_empty(), "{replay:?}");
    drop(wire);
    process.kill();

    // Figures edited behind the log's back are named by verify and written back from
    // the log by its repair.
    {
        let raw = t.raw();
        raw.execute(
            "UPDATE turns SET input_tokens = 7, thought_tokens = 1 WHERE session_id = ?1",
            [&a],
        )
        .unwrap();
        raw.execute(
            "UPDATE sessions SET cost_amount = 9.5, context_used = 1, context_size = 2
             WHERE id = ?1",
            [&a],
        )
        .unwrap();
    }
    let out = t.run(&["--json", "verify"]);
    assert!(!out.status.success(), "verify names the edits: {out:?}");
    let said = crate::support::stdout(&out);
    assert!(said.contains("cost and context"), "{said}");
    assert!(said.contains("differs from its event log"), "{said}");
    let out = t.run(&["verify", "--repair"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        t.run(&["verify"]).status.success(),
        "verify passes after the repair"
    );
    let got = usage(&t, &[]);
    // (The loads moved the sessions' update times: compared by id.)
    let by_id = |report: &Value, id: &str| {
        report["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
    };
    for id in [&a, &b] {
        assert_eq!(by_id(&got, id), by_id(&whole, id), "{id}");
    }
    assert_eq!(got["sessions"].as_array().map(Vec::len), Some(4));
    assert_eq!(got["total"], whole["total"]);
}
