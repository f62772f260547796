//! Issue 48: secrets kept out of the stored history. Each kind, with a credential made
//! fresh for the run in its issuer's format, goes in through `send`, `record`, the
//! proxy and `sessionstore acp`, one of them split across two streamed chunks; each
//! test then reads the database file and its WAL as bytes and finds the secret's bytes
//! nowhere and `[REDACTED:<kind>]` there, while ordinary text survives. What is relayed
//! live is untouched, uploaded files stay byte-exact, and `export` redacts even a store
//! kept with redaction off.

use sessionstore::store::Access;
use std::path::Path;

use sessionstore::redact::Kind;
use sessionstore::redact::fresh::{Rng, fresh};

use crate::support::{TestStore, Whole, json, stderr};

/// Ordinary words around every secret, which must survive byte for byte.
const BEFORE: &str = "the deploy notes say: ";
const AFTER: &str = " and then run make ship, café ✓";

/// One credential of each kind: the kind, the secret, and the text it stands in (the
/// key name or the URL around it, when its rule reads one).
fn credentials() -> Vec<(Kind, String, String)> {
    let mut rng = Rng::new();
    Kind::ALL
        .iter()
        .map(|&kind| {
            let (secret, around) = fresh(kind, &mut rng);
            (kind, secret, around)
        })
        .collect()
}

/// What the store wrote so far: the database file and its WAL, as bytes.
fn written(db: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(db).expect("the database reads");
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    if let Ok(more) = std::fs::read(&wal) {
        bytes.extend(more);
    }
    bytes
}

fn holds(bytes: &[u8], needle: &str) -> bool {
    bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// No secret's bytes on disk (each of its lines, for a private key, since JSON writes
/// its line breaks as `\n`), each kind's marker there, and the ordinary text whole.
fn nothing_secret_on_disk(db: &Path, credentials: &[(Kind, String, String)]) {
    let bytes = written(db);
    for (kind, secret, _) in credentials {
        for line in secret
            .lines()
            .filter(|l| l.len() >= 16 && !l.starts_with("-----"))
        {
            assert!(!holds(&bytes, line), "{kind}: the secret is on disk");
        }
        let marker = format!("[REDACTED:{}]", kind.id());
        assert!(holds(&bytes, &marker), "{kind}: no {marker} on disk");
    }
    assert!(
        holds(&bytes, BEFORE) && holds(&bytes, AFTER),
        "ordinary text kept"
    );
}

fn new_session(t: &TestStore) -> String {
    json(&t.run(&["session", "new", "--json"]))["id"]
        .as_str()
        .expect("an id")
        .to_owned()
}

/// The text a credential is sent in.
fn said(around: &str) -> String {
    format!("{BEFORE}{around}{AFTER}")
}

#[test]
fn send_stores_every_kind_redacted_and_search_finds_the_rest() {
    let t = TestStore::empty();
    let sid = new_session(&t);
    let credentials = credentials();
    for (kind, _, around) in &credentials {
        let text = said(around);
        let out = t.run(&[
            "send",
            "--session",
            &sid,
            "--text",
            &text,
            "--expanded",
            &format!("expanded: {text}"),
            "--transcript",
            &format!("heard: {text}"),
        ]);
        assert!(out.status.success(), "{kind}: {}", stderr(&out));
    }
    let (_, _, first) = &credentials[0];
    let out = t.run(&["session", "rename", &sid, &format!("title {first}")]);
    assert!(out.status.success(), "{}", stderr(&out));
    nothing_secret_on_disk(&t.db_path(), &credentials);

    // What the model gets is what was stored, ordinary words included.
    let messages = json(&t.run(&["session", "show", &sid, "--json"]));
    let shown = messages.to_string();
    for (kind, secret, around) in &credentials {
        assert!(!shown.contains(secret.as_str()), "{kind}");
        let expected = said(&around.replace(secret.as_str(), &format!("[REDACTED:{}]", kind.id())));
        let encoded = serde_json::to_string(&expected).expect("JSON");
        assert!(
            shown.contains(&encoded[1..encoded.len() - 1]),
            "{kind}: the text around the secret survives: {shown}"
        );
    }

    // Search indexes the redacted text: it finds the rest, never a secret.
    let hits = json(&t.run(&["search", "deploy", "--json"]));
    assert!(!hits.as_array().expect("hits").is_empty(), "{hits}");
    for (kind, secret, _) in &credentials {
        let token = secret.lines().nth(1).unwrap_or(secret);
        let phrase = format!("\"{}\"", token.replace('"', ""));
        let hits = json(&t.run(&["search", &phrase, "--json"]));
        assert_eq!(hits.as_array().map(Vec::len), Some(0), "{kind}: {hits}");
    }
}

/// `record` with each secret in a message split across two chunks at its middle, whole
/// in a thought, a tool call's title, raw input and output, a plan, and an update kind
/// the schema does not know.
#[test]
fn record_redacts_every_kind_even_split_across_two_chunks() {
    let t = TestStore::empty();
    let sid = new_session(&t);
    let credentials = credentials();
    // The first secret's two halves fall on either side of the first batch's end
    // (`RECORD_BATCH` updates): the tail held back crosses into the next write.
    let mut lines: Vec<serde_json::Value> = (1..sessionstore::record::RECORD_BATCH)
        .map(|_| {
            serde_json::json!({"sessionUpdate": "agent_thought_chunk",
                "content": {"type": "text", "text": "ordinary thinking "}})
        })
        .collect();
    let mut messages = Vec::new();
    for (i, (_, _, around)) in credentials.iter().enumerate() {
        let text = said(around);
        let mid = BEFORE.len() + around.len() / 2;
        let (a, b) = text.split_at(mid);
        let chunk = |part: &str| {
            serde_json::json!({"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": part}})
        };
        lines.push(chunk(a));
        lines.push(chunk(b));
        messages.push(text.clone());
        lines.push(serde_json::json!({"sessionUpdate": "agent_thought_chunk",
            "content": {"type": "text", "text": text}}));
        lines.push(serde_json::json!({"sessionUpdate": "tool_call",
            "toolCallId": format!("call-{i}"), "title": format!("run {text}"),
            "rawInput": {"command": text}, "status": "pending"}));
        lines.push(serde_json::json!({"sessionUpdate": "tool_call_update",
            "toolCallId": format!("call-{i}"), "status": "completed",
            "rawOutput": {"stdout": text}}));
        lines.push(serde_json::json!({"sessionUpdate": "plan",
            "entries": [{"content": text, "priority": "high", "status": "pending"}]}));
        lines.push(
            serde_json::json!({"sessionUpdate": "sessionstore_test_future",
            "detail": {"note": text}}),
        );
    }
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let out = t
        .bin()
        .args(["record", "--json", "--session", &sid])
        .stdin(input)
        .output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        json(&out)["recorded"],
        lines.len(),
        "every line counts once"
    );
    nothing_secret_on_disk(&t.db_path(), &credentials);

    // Each message reads back as its whole text redacted: ordinary text byte for byte.
    let restored =
        crate::support::stdout(&t.run(&["restore", "--session", &sid, "--format", "acp-updates"]));
    let mut texts = Vec::new();
    for line in restored.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let update = &v["params"]["update"];
        if update["sessionUpdate"] == "agent_message_chunk" {
            texts.push(update["content"]["text"].as_str().unwrap_or("").to_owned());
        }
    }
    let expected: Vec<String> = messages
        .iter()
        .map(|m| sessionstore::redact::redact(m).into_owned())
        .collect();
    assert_eq!(texts.join(""), expected.join(""));
    let verified = t.run(&["verify"]);
    assert!(verified.status.success(), "{}", stderr(&verified));
}

#[test]
fn with_redaction_off_text_is_stored_as_given_and_export_still_redacts() {
    let t = TestStore::empty();
    let sid = new_session(&t);
    let credentials = credentials();
    let (kind, secret, around) = &credentials[2];
    let text = said(around);
    let file = t.dir.path().join("creds.txt");
    std::fs::write(&file, format!("{text}\n")).unwrap();
    let attached = json(&t.run(&[
        "attach",
        "--session",
        &sid,
        "--json",
        file.to_str().unwrap(),
    ]));
    let uri = attached[0]["uri"].as_str().expect("a uri").to_owned();
    let out = t
        .bin()
        .env("SESSIONSTORE_REDACT", "off")
        .args(["send", "--session", &sid, "--text", &text, "--attach", &uri])
        .output();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        holds(&written(&t.db_path()), secret),
        "{kind}: kept as given"
    );

    let line = serde_json::json!({"sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": text}});
    let out = t
        .bin()
        .env("SESSIONSTORE_REDACT", "off")
        .args(["record", "--session", &sid])
        .stdin(format!("{line}\n"))
        .output();
    assert!(out.status.success(), "{}", stderr(&out));

    // A fork by a store that redacts is redacted as it is written.
    let fork = json(&t.run(&["session", "fork", &sid, "--json"]))["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let restored =
        crate::support::stdout(&t.run(&["restore", "--session", &fork, "--format", "acp-updates"]));
    // Once: the attached file, read live and byte-exact.
    assert_eq!(
        restored.matches(secret.as_str()).count(),
        1,
        "{kind}: {restored}"
    );
    assert_eq!(
        restored
            .matches(&format!("[REDACTED:{}]", kind.id()))
            .count(),
        2
    );
    let verified = t.run(&["verify"]);
    assert!(verified.status.success(), "{}", stderr(&verified));

    // The uploaded file is the user's: read back byte for byte.
    let got = t.bin().args(["attachment", "get", &uri]).output();
    assert_eq!(got.stdout, format!("{text}\n").into_bytes());

    let redacted = t.dir.path().join("redacted.tar");
    let out = t.run(&[
        "export",
        "--session",
        &sid,
        "--out",
        redacted.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let archive = std::fs::read(&redacted).unwrap();
    let file_entry = format!("{text}\n");
    // The secret is in the archive once: inside the attachment's own bytes.
    let count = archive
        .windows(secret.len())
        .filter(|w| *w == secret.as_bytes())
        .count();
    assert_eq!(count, 1, "only the attachment holds it");
    assert!(holds(&archive, &file_entry), "the file is byte-exact");
    assert!(holds(&archive, &format!("[REDACTED:{}]", kind.id())));

    let plain = t.dir.path().join("plain.tar");
    let out = t.run(&[
        "export",
        "--session",
        &sid,
        "--out",
        plain.to_str().unwrap(),
        "--no-redact",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let archive = std::fs::read(&plain).unwrap();
    assert!(
        archive
            .windows(secret.len())
            .filter(|w| *w == secret.as_bytes())
            .count()
            > 1
    );

    let md = t.dir.path().join("t.md");
    let out = t.run(&[
        "export",
        "--session",
        &sid,
        "--out",
        md.to_str().unwrap(),
        "--format",
        "markdown",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let transcript = std::fs::read_to_string(&md).unwrap();
    assert!(!transcript.contains(secret.as_str()) && transcript.contains(BEFORE));

    // The redacted archive imports: its log still replays to its rows.
    let out = t.run(&["import", redacted.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // The unredacted one, imported into a store that redacts, is redacted on the
    // way in; its file still reads back byte for byte.
    let other = TestStore::empty();
    let out = other.run(&["import", plain.to_str().unwrap(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let imported = json(&out)["id"].as_str().expect("an id").to_owned();
    let bytes = written(&other.db_path());
    assert!(!holds(&bytes, secret) && holds(&bytes, &format!("[REDACTED:{}]", kind.id())));
    let files = json(&other.run(&["attachment", "list", "--session", &imported, "--json"]));
    let uri = files[0]["uri"].as_str().expect("a uri");
    let got = other.bin().args(["attachment", "get", uri]).output();
    assert_eq!(got.stdout, format!("{text}\n").into_bytes());
    let verified = other.run(&["verify"]);
    assert!(verified.status.success(), "{}", stderr(&verified));
}

#[cfg(feature = "acp")]
mod fronts {
    use super::*;
    use crate::proxy::{Seen, Setup, client, open_session, prompt_text, store_id};

    /// Through the proxy: the agent gets each prompt as sent and the client each chunk
    /// as the agent said it; the store keeps them redacted, the agent's echo split
    /// across two chunks included.
    #[tokio::test]
    async fn the_proxy_relays_as_given_and_stores_redacted() {
        let s = Setup::new();
        let seen = Seen::default();
        let mut proxy = s.proxy(&[]);
        let credentials = credentials();
        let prompts: Vec<String> = credentials
            .iter()
            .map(|(_, _, around)| format!("echo in two:{}", said(around)))
            .collect();
        let sent = prompts.clone();
        let id = client(&mut proxy, &seen, {
            let cwd = s.cwd.clone();
            async move |cx| {
                let id = open_session(&cx, &cwd).await?;
                for p in &sent {
                    prompt_text(&cx, &id, p).await?;
                }
                Ok(id)
            }
        })
        .await;
        // Live: untouched both ways.
        let given: Vec<String> = s
            .report
            .prompts()
            .iter()
            .map(|blocks| {
                blocks.last().expect("a block")["text"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned()
            })
            .collect();
        for p in &prompts {
            assert!(
                given.iter().any(|g| g.contains(p.as_str())),
                "the agent got {p:?}"
            );
        }
        let relayed: String = seen
            .raw_updates()
            .iter()
            .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
            .map(|u| u["content"]["text"].as_str().unwrap_or("").to_owned())
            .collect();
        for (kind, secret, _) in &credentials {
            assert!(relayed.contains(secret.as_str()), "{kind}: relayed as said");
        }
        drop(proxy);
        nothing_secret_on_disk(&s.t.db_path(), &credentials);
        let store = s.t.open().await;
        let messages = store
            .all_messages(store_id(&id))
            .await
            .expect("the messages");
        assert_eq!(messages.len(), credentials.len());
    }

    /// A proxy of a store kept with redaction off writes the agent's echo, streamed in
    /// two chunks well apart, in two events; `redact` finds each secret split across
    /// them whole.
    #[tokio::test]
    async fn redact_finds_a_secret_split_across_two_proxy_writes() {
        let s = Setup::new();
        let seen = Seen::default();
        let mut proxy = s.proxy_with(s.root(), &["--redact", "off"], &[]);
        let credentials = credentials();
        let sent: Vec<String> = credentials
            .iter()
            .map(|(_, _, around)| format!("echo in two:{}", said(around)))
            .collect();
        let id = client(&mut proxy, &seen, {
            let cwd = s.cwd.clone();
            async move |cx| {
                let id = open_session(&cx, &cwd).await?;
                for p in &sent {
                    prompt_text(&cx, &id, p).await?;
                }
                Ok(id)
            }
        })
        .await;
        drop(proxy);
        let sid = store_id(&id).to_string();
        // The message's halves were written apart (for most at least: the window is
        // a timer); the thought and the tool call hold the secret whole.
        let events = crate::support::stdout(&s.t.run(&["events", "--session", &sid]));
        let apart = credentials
            .iter()
            .filter(|(_, secret, _)| {
                !events.lines().any(|e| {
                    let e: serde_json::Value = serde_json::from_str(e).expect("an event");
                    e["payload"]["updates"].as_array().is_some_and(|u| {
                        u.iter().any(|u| {
                            u["sessionUpdate"] == "agent_message_chunk"
                                && u.to_string().contains(secret.lines().next().unwrap())
                        })
                    })
                })
            })
            .count();
        assert!(apart > 0, "no secret was written apart: {events}");

        let report = json(&s.t.run(&["redact", "--json"]));
        let counts = &report["sessions"][0]["redacted"];
        for (kind, _, _) in &credentials {
            // Each is in the message, the thought and the tool call's title and input.
            assert!(counts[kind.id()].as_u64() >= Some(3), "{kind}: {report}");
        }
        nothing_secret_on_disk(&s.t.db_path(), &credentials);
        let verified = s.t.run(&["verify"]);
        assert!(verified.status.success(), "{}", stderr(&verified));
        let restored =
            crate::support::stdout(&s.t.run(&["restore", "--session", &sid, "--format", "acp"]));
        for (kind, secret, _) in &credentials {
            assert!(!restored.contains(secret.lines().next().unwrap()), "{kind}");
        }
    }

    /// A prompt queued mid-turn is stored redacted and, delivered by the same proxy
    /// when the turn ends, reaches the agent as the user sent it.
    #[tokio::test]
    async fn a_queued_prompt_reaches_the_agent_as_sent() {
        use agent_client_protocol::v1::schema::{CancelNotification, PromptRequest};
        let s = Setup::new();
        let seen = Seen::default();
        let mut proxy = s.proxy(&[]);
        let credentials = credentials();
        let (kind, secret, around) = credentials[4].clone();
        let text = format!("echo in two:{}", said(&around));
        let config = s.t.config.clone();
        client(&mut proxy, &seen, {
            let (cwd, seen, text) = (s.cwd.clone(), seen.clone(), text.clone());
            async move |cx| {
                let id = open_session(&cx, &cwd).await?;
                let hanging = cx.send_request(PromptRequest::new(
                    id.clone(),
                    vec![crate::proxy::text_block("hang on")],
                ));
                crate::proxy::eventually("the turn to begin", || {
                    seen.raw_updates()
                        .iter()
                        .any(|u| u["sessionUpdate"] == "agent_thought_chunk")
                })
                .await;
                let queued = cx.send_request(PromptRequest::new(
                    id.clone(),
                    vec![crate::proxy::text_block(&text)],
                ));
                let store = sessionstore::Store::open_as(config, Access::ReadOnly)
                    .await
                    .expect("the store opens");
                let session = store_id(&id);
                let start = std::time::Instant::now();
                while store.all_messages(session).await.expect("messages").len() < 2 {
                    assert!(start.elapsed() < std::time::Duration::from_secs(60));
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                cx.send_notification(CancelNotification::new(id.clone()))?;
                hanging.block_task().await?;
                queued.block_task().await?;
                Ok(())
            }
        })
        .await;
        let prompts = s.report.prompts();
        let last = prompts
            .last()
            .expect("two prompts")
            .last()
            .expect("a block")
            .clone();
        assert!(
            last["text"]
                .as_str()
                .unwrap_or("")
                .contains(secret.as_str()),
            "{kind}"
        );
        drop(proxy);
        let bytes = written(&s.t.db_path());
        assert!(!holds(&bytes, &secret), "{kind}: stored redacted");
        assert!(holds(&bytes, &format!("[REDACTED:{}]", kind.id())));
    }

    /// Through `sessionstore acp`: prompts stored redacted.
    #[test]
    fn the_acp_front_stores_prompts_redacted() {
        let t = TestStore::empty();
        let dir = t.dir.path().to_owned();
        let mut child = crate::support::Bin::new(&dir)
            .arg("acp")
            .arg("--cwd")
            .arg(&dir)
            .on(&t.config)
            .spawn();
        let mut wire = crate::acp::Wire::over(&mut child);
        wire.call(1, "initialize", serde_json::json!({"protocolVersion": 1}));
        let (_, new) = wire.call(
            2,
            "session/new",
            serde_json::json!({"cwd": dir, "mcpServers": []}),
        );
        let session = new["result"]["sessionId"].clone();
        let credentials = credentials();
        for (i, (_, _, around)) in credentials.iter().enumerate() {
            let (_, answer) = wire.call(
                10 + i as u64,
                "session/prompt",
                serde_json::json!({"sessionId": session,
                    "prompt": [{"type": "text", "text": said(around)},
                        {"type": "resource_link", "uri": "file:///tmp/notes.txt",
                         "name": "notes.txt", "description": said(around)}]}),
            );
            assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
        }
        nothing_secret_on_disk(&t.db_path(), &credentials);
        drop(wire);
        let _ = child.kill();
        let _ = child.wait();
        nothing_secret_on_disk(&t.db_path(), &credentials);
    }
}

#[test]
fn paths_says_whether_text_is_redacted_and_where_that_came_from() {
    let t = TestStore::empty();
    let report = |env: Option<&str>, flags: &[&str]| {
        let mut bin = t.bin();
        if let Some(v) = env {
            bin.env("SESSIONSTORE_REDACT", v);
        }
        bin.args(["paths", "--json"]).args(flags).output()
    };
    let on = json(&report(None, &[]));
    assert_eq!(
        on["redaction"],
        serde_json::json!({"mode": "on", "source": "default"})
    );
    let off = json(&report(Some("off"), &[]));
    assert_eq!(
        off["redaction"],
        serde_json::json!({"mode": "off", "source": "environment"})
    );
    let flag = json(&report(Some("off"), &["--redact", "on"]));
    assert_eq!(
        flag["redaction"],
        serde_json::json!({"mode": "on", "source": "flag"})
    );
    let bad = report(Some("maybe"), &[]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
}

/// `sessionstore redact`: what a store kept with redaction off holds, redacted in
/// place (issue 48, item 5).
mod stored {
    use super::*;

    /// A session written with redaction off through `send` (text, expansion,
    /// transcript), a title, and `record` (each secret in a message split across two
    /// chunks of one batch, in a thought, a tool call's title, raw input and output, a
    /// plan, an update kind the schema does not know); its id.
    pub(super) fn stored_as_given(t: &TestStore, credentials: &[(Kind, String, String)]) -> String {
        let off = |args: &[&str], stdin: Option<String>| {
            let mut bin = t.bin();
            bin.args(["--redact", "off"]).args(args);
            if let Some(input) = stdin {
                bin.stdin(input);
            }
            let out = bin.output();
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
            out
        };
        let (_, _, first) = &credentials[0];
        let out = off(
            &[
                "session",
                "new",
                "--json",
                "--title",
                &format!("title {first}"),
            ],
            None,
        );
        let sid = json(&out)["id"].as_str().expect("an id").to_owned();
        let mut lines = Vec::new();
        for (i, (_, _, around)) in credentials.iter().enumerate() {
            let text = said(around);
            off(
                &[
                    "send",
                    "--session",
                    &sid,
                    "--text",
                    &text,
                    "--expanded",
                    &format!("expanded: {text}"),
                    "--transcript",
                    &format!("heard: {text}"),
                ],
                None,
            );
            let (a, b) = text.split_at(BEFORE.len() + around.len() / 2);
            for part in [a, b] {
                lines.push(serde_json::json!({"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": part}}));
            }
            lines.push(serde_json::json!({"sessionUpdate": "agent_thought_chunk",
                "content": {"type": "text", "text": text}}));
            lines.push(serde_json::json!({"sessionUpdate": "tool_call",
                "toolCallId": format!("call-{i}"), "title": format!("run {text}"),
                "rawInput": {"command": text}, "status": "pending"}));
            lines.push(serde_json::json!({"sessionUpdate": "tool_call_update",
                "toolCallId": format!("call-{i}"), "status": "completed",
                "rawOutput": {"stdout": text}}));
            lines.push(serde_json::json!({"sessionUpdate": "plan",
                "entries": [{"content": text, "priority": "high", "status": "pending"}]}));
            lines.push(
                serde_json::json!({"sessionUpdate": "sessionstore_test_future",
                "detail": {"note": text}}),
            );
        }
        let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
        off(&["record", "--session", &sid], Some(input));
        sid
    }

    /// Every file of the database (main file and side files), by name, with its bytes.
    fn files(db: &Path) -> Vec<(String, Vec<u8>)> {
        let name = db.file_name().unwrap().to_str().unwrap().to_owned();
        let mut found: Vec<(String, Vec<u8>)> = std::fs::read_dir(db.parent().unwrap())
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                let n = e.file_name().to_str()?.to_owned();
                n.starts_with(&name)
                    .then(|| (n, std::fs::read(e.path()).unwrap()))
            })
            .collect();
        found.sort();
        found
    }

    fn ok(out: std::process::Output) -> std::process::Output {
        assert!(out.status.success(), "{}", stderr(&out));
        out
    }

    /// The report's shape, exactly: `sessions` (id, and a count by kind), `skipped`
    /// and `backups`.
    fn assert_shape(report: &serde_json::Value) {
        let keys = |v: &serde_json::Value| {
            let mut keys: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
            keys.sort();
            keys
        };
        assert_eq!(keys(report), ["backups", "sessions", "skipped"], "{report}");
        for s in report["sessions"].as_array().expect("sessions") {
            assert_eq!(keys(s), ["id", "redacted"], "{report}");
            for (kind, n) in s["redacted"].as_object().expect("counts") {
                assert!(Kind::ALL.iter().any(|k| k.id() == kind), "{kind}");
                assert!(n.as_u64().is_some_and(|n| n > 0), "{report}");
            }
        }
        for s in report["skipped"].as_array().expect("skipped") {
            assert_eq!(keys(s), ["id", "reason"], "{report}");
        }
        assert!(report["backups"].is_array(), "{report}");
    }

    #[test]
    fn redact_removes_what_was_stored_as_given_and_a_dry_run_changes_nothing() {
        let t = TestStore::empty();
        let credentials = credentials();
        let sid = stored_as_given(&t, &credentials);
        // A second session with nothing secret in it is left alone.
        let other = new_session(&t);
        ok(t.run(&["send", "--session", &other, "--text", "plain words only"]));
        let before = written(&t.db_path());
        for (kind, secret, _) in &credentials {
            let line = secret.lines().next().unwrap();
            assert!(holds(&before, line), "{kind}: stored as given");
        }

        let on_disk = files(&t.db_path());
        let dry = json(&ok(t.run(&["redact", "--dry-run", "--json"])));
        assert_shape(&dry);
        assert_eq!(files(&t.db_path()), on_disk, "a dry run changes nothing");
        let sessions = dry["sessions"].as_array().unwrap();
        assert_eq!(sessions.len(), 1, "{dry}");
        assert_eq!(sessions[0]["id"], sid.as_str());
        for (kind, _, _) in &credentials {
            assert!(
                sessions[0]["redacted"][kind.id()].as_u64() >= Some(1),
                "{kind}: {dry}"
            );
        }

        let report = json(&ok(t.run(&["redact", "--json"])));
        assert_shape(&report);
        assert_eq!(
            report["sessions"], dry["sessions"],
            "the dry run said what went"
        );
        assert_eq!(report["skipped"], serde_json::json!([]));
        assert_eq!(report["backups"], serde_json::json!([]));
        nothing_secret_on_disk(&t.db_path(), &credentials);
        let verified = t.run(&["verify"]);
        assert!(verified.status.success(), "{}", stderr(&verified));

        // What reads back is every text with its secrets replaced, the rest whole.
        let restored =
            crate::support::stdout(&t.run(&["restore", "--session", &sid, "--format", "acp"]));
        for (kind, secret, _) in &credentials {
            let line = secret.lines().next().unwrap();
            assert!(!restored.contains(line), "{kind}");
            assert!(
                restored.contains(&format!("[REDACTED:{}]", kind.id())),
                "{kind}"
            );
        }
        assert!(restored.contains("the deploy notes say"));
        let shown = json(&ok(t.run(&["session", "show", &sid, "--json"]))).to_string();
        assert!(shown.contains(&format!("[REDACTED:{}]", credentials[0].0.id())));
        // Search finds the rest and no secret.
        let hits = json(&ok(t.run(&["search", "deploy", "--json"])));
        assert!(!hits.as_array().unwrap().is_empty(), "{hits}");
        for (kind, secret, _) in &credentials {
            let token = secret.lines().nth(1).unwrap_or(secret);
            let phrase = format!("\"{}\"", token.replace('"', ""));
            let hits = json(&t.run(&["search", &phrase, "--json"]));
            assert_eq!(hits.as_array().map(Vec::len), Some(0), "{kind}: {hits}");
        }
        // The log says what went, by kind and count, and never a value.
        let events = crate::support::stdout(&t.run(&["events", "--session", &sid]));
        let last: serde_json::Value = serde_json::from_str(events.lines().last().unwrap()).unwrap();
        assert_eq!(last["kind"], "session_redacted");
        assert_eq!(
            last["payload"]["redacted"],
            report["sessions"][0]["redacted"]
        );
        // The other session was not touched: no event of redaction.
        let theirs = crate::support::stdout(&t.run(&["events", "--session", &other]));
        assert!(!theirs.contains("session_redacted"));

        // Nothing is left to find.
        let again = json(&ok(t.run(&["redact", "--json"])));
        assert_eq!(again["sessions"], serde_json::json!([]));
    }

    /// The parts of a secret on either side of where its text was split, long enough
    /// to tell (each line of them, for a private key): what a redaction of each half
    /// alone would leave.
    fn halves(secret: &str, around: &str, at: usize) -> Vec<String> {
        let start = around.find(secret).expect("the secret is in its text");
        let at = at.clamp(start, start + secret.len()) - start;
        let (a, b) = secret.split_at(at);
        [a, b]
            .iter()
            .flat_map(|part| part.lines())
            .filter(|l| l.len() >= 12 && !l.starts_with("-----"))
            .map(str::to_owned)
            .collect()
    }

    /// Each secret in a streamed agent message split across two `record` runs of a
    /// store kept with redaction off, so two events each hold half of it: `redact`
    /// walks the log as the recorder streams it and finds it whole, in the message
    /// that goes on after it and in the one that ends right after it (the log's last,
    /// whose tail is written at the log's end).
    #[test]
    fn a_secret_split_across_two_recorded_batches_is_found_whole() {
        let t = TestStore::empty();
        let credentials = credentials();
        let sid = json(&ok(t.run(&["--redact", "off", "session", "new", "--json"])))["id"]
            .as_str()
            .expect("an id")
            .to_owned();
        let record = |lines: &[serde_json::Value]| {
            let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
            let mut bin = t.bin();
            bin.args(["--redact", "off", "record", "--session", &sid])
                .stdin(input);
            ok(bin.output());
        };
        let chunk = |id: usize, text: &str| {
            serde_json::json!({"sessionUpdate": "agent_message_chunk", "messageId": format!("m{id}"),
                "content": {"type": "text", "text": text}})
        };
        let mut messages = Vec::new();
        let mut parts = Vec::new();
        for (i, (_, secret, around)) in credentials.iter().enumerate() {
            let text = said(around);
            let mid = BEFORE.len() + around.len() / 2;
            let (a, b) = text.split_at(mid);
            parts.push(halves(secret, around, mid - BEFORE.len()));
            record(&[chunk(i, "it starts: "), chunk(i, a)]);
            // Every other message (and the last) ends right after the secret's end.
            let mut message = format!("it starts: {text}");
            match i % 2 == 0 && i + 1 < credentials.len() {
                true => {
                    record(&[chunk(i, b), chunk(i, " and it goes on.")]);
                    message.push_str(" and it goes on.");
                }
                false => record(&[chunk(i, b)]),
            }
            messages.push(message);
        }
        // Whole in the rows made of the two events (the last message's, still open,
        // is kept in its parts until another entry follows).
        let before = written(&t.db_path());
        for (kind, secret, _) in &credentials[..credentials.len() - 1] {
            assert!(
                holds(&before, secret.lines().next().unwrap()),
                "{kind}: stored as given"
            );
        }

        let dry = json(&ok(t.run(&["redact", "--dry-run", "--json"])));
        assert_shape(&dry);
        let report = json(&ok(t.run(&["redact", "--json"])));
        assert_eq!(
            report["sessions"], dry["sessions"],
            "the dry run said what went"
        );
        let counts = &report["sessions"][0]["redacted"];
        for (kind, _, _) in &credentials {
            assert_eq!(counts[kind.id()], 1, "{kind}: {report}");
        }
        assert_eq!(
            counts.as_object().map(|c| c.len()),
            Some(credentials.len()),
            "{report}"
        );

        // Neither the secret nor a half of it is on disk; its marker and the ordinary
        // text around it are.
        nothing_secret_on_disk(&t.db_path(), &credentials);
        let bytes = written(&t.db_path());
        for ((kind, _, _), halves) in credentials.iter().zip(&parts) {
            for half in halves {
                assert!(
                    !holds(&bytes, half),
                    "{kind}: half of it is on disk: {half}"
                );
            }
        }
        let verified = t.run(&["verify"]);
        assert!(verified.status.success(), "{}", stderr(&verified));

        // Each message reads back as its whole text redacted, the rest byte for byte.
        let restored = crate::support::stdout(&t.run(&[
            "restore",
            "--session",
            &sid,
            "--format",
            "acp-updates",
        ]));
        let mut texts = vec![String::new(); messages.len()];
        for line in restored.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let update = &v["params"]["update"];
            if update["sessionUpdate"] == "agent_message_chunk" {
                let id = update["messageId"].as_str().expect("a message id");
                let n: usize = id[1..].parse().expect("m<n>");
                texts[n].push_str(update["content"]["text"].as_str().unwrap_or(""));
            }
        }
        for ((text, message), (kind, _, _)) in texts.iter().zip(&messages).zip(&credentials) {
            assert_eq!(text, &sessionstore::redact::redact(message), "{kind}");
            assert!(
                text.contains(&format!("[REDACTED:{}]", kind.id())),
                "{kind}"
            );
        }
        // Search finds the rest and no part of a secret.
        let hits = json(&ok(t.run(&["search", "deploy", "--json"])));
        assert!(!hits.as_array().unwrap().is_empty(), "{hits}");
        for ((kind, _, _), halves) in credentials.iter().zip(&parts) {
            for half in halves {
                let phrase = format!("\"{}\"", half.replace('"', ""));
                let hits = json(&t.run(&["search", &phrase, "--json"]));
                assert_eq!(hits.as_array().map(Vec::len), Some(0), "{kind}: {hits}");
            }
        }
        let again = json(&ok(t.run(&["redact", "--json"])));
        assert_eq!(
            again["sessions"],
            serde_json::json!([]),
            "nothing left to find"
        );
    }

    #[tokio::test]
    async fn a_session_a_proxy_holds_is_skipped_and_reported() {
        let t = TestStore::new().await;
        let credentials = credentials();
        let held = stored_as_given(&t, &credentials);
        let free = stored_as_given(&t, &credentials);
        // The claim a proxy takes for each session it opens, held by this process.
        let claim = t
            .store()
            .claim_session(held.parse().unwrap())
            .await
            .expect("the session is claimed");
        for args in [
            &["redact", "--dry-run", "--json"][..],
            &["redact", "--json"],
        ] {
            let report = json(&ok(t.run(args)));
            assert_shape(&report);
            assert_eq!(report["skipped"][0]["id"], held.as_str(), "{report}");
            assert_eq!(report["skipped"].as_array().unwrap().len(), 1, "{report}");
            let done: Vec<&str> = report["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap())
                .collect();
            assert_eq!(done, [free.as_str()], "{report}");
        }
        let kept = crate::support::stdout(&t.run(&["events", "--session", &held]));
        assert!(kept.contains(credentials[2].1.as_str()), "left as it was");
        drop(claim);
        let report = json(&ok(t.run(&["redact", "--session", &held, "--json"])));
        assert_eq!(report["sessions"][0]["id"], held.as_str());
        nothing_secret_on_disk(&t.db_path(), &credentials);
        ok(t.run(&["verify"]));
    }

    #[test]
    fn an_unknown_session_is_refused_before_anything_changes() {
        let t = TestStore::empty();
        let credentials = credentials();
        let sid = stored_as_given(&t, &credentials);
        let on_disk = files(&t.db_path());
        let unknown = "01900000-0000-7000-8000-000000000000";
        let out = t.run(&["redact", "--session", &sid, "--session", unknown]);
        assert!(!out.status.success());
        crate::support::assert_one_line_error(&out);
        assert_eq!(files(&t.db_path()), on_disk);
    }

    #[test]
    fn a_session_whose_rows_disagree_with_its_log_is_skipped() {
        let t = TestStore::empty();
        let credentials = credentials();
        let sid = stored_as_given(&t, &credentials);
        t.raw_execute(&format!(
            "UPDATE sessions SET tools_host = 'ssh' WHERE id = '{sid}'"
        ))
        .unwrap();
        let report = json(&ok(t.run(&["redact", "--json"])));
        assert_shape(&report);
        assert_eq!(report["sessions"], serde_json::json!([]), "{report}");
        assert_eq!(report["skipped"][0]["id"], sid.as_str(), "{report}");
        assert!(
            report["skipped"][0]["reason"]
                .as_str()
                .unwrap()
                .contains("verify"),
            "{report}"
        );
        let kept = crate::support::stdout(&t.run(&["events", "--session", &sid]));
        assert!(kept.contains(credentials[1].1.as_str()), "left as it was");
    }

    /// A store of an older schema (the frozen v15 fixture, sealed segments and rows
    /// that name their updates included) is upgraded first, as every writing command
    /// upgrades it, and its backup named; a dry run refuses it, as reading commands do.
    #[test]
    fn an_older_store_is_upgraded_first_and_its_backup_named() {
        let t = TestStore::empty();
        let fixture = crate::support::fixture("v15");
        std::fs::copy(fixture.join("sessions.db"), t.db_path()).unwrap();
        let first = std::fs::read_to_string(fixture.join("session-id")).unwrap();
        let first = first.trim();
        let out = t.run(&["redact", "--dry-run"]);
        assert!(!out.status.success());
        assert!(stderr(&out).contains("migrate"), "{}", stderr(&out));

        let report = json(&ok(t.run(&["redact", "--json"])));
        assert_shape(&report);
        let backup = format!("{}.v15.bak", t.db_path().display());
        assert_eq!(report["backups"], serde_json::json!([backup]), "{report}");
        assert_eq!(
            report["sessions"],
            serde_json::json!([]),
            "nothing secret in it"
        );

        // A secret recorded as given into its long first session, then redacted: the
        // rows the fixture's binary wrote are made again and still read the same.
        let restore = |t: &TestStore| {
            crate::support::stdout(&t.run(&[
                "restore",
                "--session",
                first,
                "--format",
                "acp-updates",
            ]))
        };
        let (kind, secret, around) = &credentials()[3];
        let line = serde_json::json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": said(around)}});
        ok(t.bin()
            .args(["--redact", "off", "record", "--session", first])
            .stdin(format!("{line}\n"))
            .output());
        let with_secret = restore(&t);
        assert!(with_secret.contains(secret.as_str()));
        let report = json(&ok(t.run(&["redact", "--json"])));
        assert_eq!(report["sessions"][0]["id"], first, "{report}");
        assert_eq!(report["sessions"][0]["redacted"][kind.id()], 1, "{report}");
        assert_eq!(report["backups"], serde_json::json!([backup]));
        ok(t.run(&["verify"]));
        let marker = format!("[REDACTED:{}]", kind.id());
        assert_eq!(restore(&t), with_secret.replace(secret.as_str(), &marker));
        assert!(!holds(&written(&t.db_path()), secret));
        let hits = json(&ok(t.run(&["search", "cormorant", "--json"])));
        assert!(
            !hits.as_array().unwrap().is_empty(),
            "the sealed text is found"
        );
    }

    #[test]
    fn on_postgres_the_rows_and_events_are_rewritten() {
        let Some(t) = TestStore::postgres() else {
            return;
        };
        let credentials = credentials();
        let sid = stored_as_given(&t, &credentials);
        // And one secret split across two `record` runs of one streamed message.
        let (_, split, around) = &credentials[4];
        let text = said(around);
        let at = around.len() / 2;
        let (a, b) = text.split_at(BEFORE.len() + at);
        for part in [a, b] {
            let line = serde_json::json!({"sessionUpdate": "agent_message_chunk",
                "messageId": "split", "content": {"type": "text", "text": part}});
            let mut bin = t.bin();
            bin.args(["--redact", "off", "record", "--session", &sid])
                .stdin(format!("{line}\n"));
            ok(bin.output());
        }
        let halves = halves(split, around, at);
        assert!(!halves.is_empty());
        let dry = json(&ok(t.run(&["redact", "--dry-run", "--json"])));
        assert_eq!(dry["sessions"][0]["id"], sid.as_str());
        let kept = crate::support::stdout(&t.run(&["events", "--session", &sid]));
        assert!(
            kept.contains(credentials[2].1.as_str()),
            "the dry run changed nothing"
        );
        let report = json(&ok(t.run(&["redact", "--json"])));
        assert_shape(&report);
        assert_eq!(report["sessions"], dry["sessions"]);
        assert_eq!(report["backups"], serde_json::json!([]));
        ok(t.run(&["verify"]));
        let events = crate::support::stdout(&t.run(&["events", "--session", &sid]));
        let shown = json(&ok(t.run(&["session", "show", &sid, "--json"]))).to_string();
        let restored =
            crate::support::stdout(&t.run(&["restore", "--session", &sid, "--format", "acp"]));
        for (kind, secret, _) in &credentials {
            let line = secret.lines().next().unwrap();
            for text in [&events, &shown, &restored] {
                assert!(!text.contains(line), "{kind}");
            }
            let phrase = format!("\"{}\"", secret.lines().nth(1).unwrap_or(secret));
            let hits = json(&t.run(&["search", &phrase, "--json"]));
            assert_eq!(hits.as_array().map(Vec::len), Some(0), "{kind}: {hits}");
        }
        for half in &halves {
            for text in [&events, &shown, &restored] {
                assert!(
                    !text.contains(half.as_str()),
                    "half of a split secret: {half}"
                );
            }
        }
        assert!(restored.contains("the deploy notes say"));
    }

    #[cfg(feature = "encryption")]
    #[test]
    fn an_encrypted_store_is_redacted_with_its_key() {
        let t = TestStore::empty();
        let key = t.dir.path().join("key");
        let generated = sessionstore::config::DatabaseKey::generate().unwrap();
        std::fs::write(&key, format!("{}\n", generated.to_hex().expose())).unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let key = key.to_str().unwrap();
        let with_key = |args: &[&str]| ok(t.bin().args(args).args(["--key-file", key]).output());
        with_key(&["migrate"]);
        let sid = json(&with_key(&["session", "new", "--json"]))["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let (kind, secret, around) = &credentials()[4];
        with_key(&[
            "--redact",
            "off",
            "send",
            "--session",
            &sid,
            "--text",
            &said(around),
        ]);
        let report = json(&with_key(&["redact", "--json"]));
        // The message, and the title the untitled session took from it.
        assert_eq!(report["sessions"][0]["redacted"][kind.id()], 2, "{report}");
        with_key(&["verify"]);
        let shown = json(&with_key(&["session", "show", &sid, "--json"])).to_string();
        assert!(!shown.contains(secret.as_str()));
        assert!(shown.contains(&format!("[REDACTED:{}]", kind.id())));
    }
}
