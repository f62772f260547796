//! The `redact` group (not criterion, and only when named: it builds a million items):
//! `sessionstore redact` of a session recorded with redaction off, as the release
//! binary in a child process (issue 48, item 5): its wall time and peak resident
//! memory (`wait4`) for a session of `SESSIONSTORE_REDACT_ITEMS` items (default
//! 1,000,000) against one of a tenth of that, both of `longhist`'s shape (separate
//! agent messages of about 80 bytes under a `messageId` each, a user message every
//! 1,000), an AWS access key id in every 1,000th item and in every user message. Each
//! store is redacted once (a second run would find nothing); the targets are a peak of
//! at most 64 MiB and a time at most 12 times the small session's.

use std::process::{Command, Stdio};
use std::time::Instant;

use sessionstore::config::Redaction;
use sessionstore::model::{NewSession, Role};
use tokio::runtime::Runtime;

use crate::workload::{Fixture, MIB, config_in};
use crate::{Report, run_measured};

/// A user message comes before every this many recorded items.
const TURN: usize = 1000;

/// A credential of its issuer's format (an AWS access key id) made from `i`.
fn key(i: usize) -> String {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let tail: String = (0..16)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            alphabet[(x % 32) as usize] as char
        })
        .collect();
    format!("AKIA{tail}")
}

/// The `i`-th agent message's line: `longhist`'s, with a key in every [`TURN`]th.
fn line(i: usize) -> String {
    let text: String = if i % TURN == TURN / 2 {
        format!("export AWS_ACCESS_KEY_ID={} word{i:07}", key(i))
    } else {
        format!("word{i:07} ").repeat(8).chars().take(80).collect()
    };
    serde_json::json!({"sessionUpdate": "agent_message_chunk",
        "messageId": format!("m-{i:09}"),
        "content": {"type": "text", "text": text}})
    .to_string()
}

/// A store in `dir` that keeps text as given, with one session of `items` items.
fn build(rt: &Runtime, dir: &std::path::Path, items: usize) -> Fixture {
    let store = rt
        .block_on(sessionstore::Store::open(sessionstore::Config {
            redaction: Redaction::Off,
            ..config_in(dir)
        }))
        .expect("the store opens with redaction off");
    let session = rt
        .block_on(store.create_session(NewSession::default()))
        .expect("a session")
        .id;
    let f = Fixture {
        dir: dir.to_owned(),
        store,
        session,
    };
    for start in (0..items).step_by(TURN) {
        let text = format!("turn {} with {}", start / TURN, key(items + start));
        f.send(rt, Role::User, &text, &[]);
        let batch: Vec<sessionstore::turns::Update> = (start..items.min(start + TURN))
            .map(|i| {
                sessionstore::turns::Update::Known(
                    serde_json::from_str(&line(i)).expect("an update"),
                )
            })
            .collect();
        rt.block_on(
            f.store
                .record(f.session, sessionstore::record::Batches(batch)),
        )
        .expect("record");
    }
    f
}

/// `redact` of `f`'s store by the release binary: wall seconds and peak bytes.
fn redact(f: &Fixture) -> (f64, u64) {
    let (took, peak) = run_measured(
        Command::new(env!("CARGO_BIN_EXE_sessionstore"))
            .arg("--db")
            .arg(f.dir.join("sessions.db"))
            .arg("--attachments-root")
            .arg(f.dir.join("attachments"))
            .args(["redact", "--json"])
            .env_remove("SESSIONSTORE_LEGACY_ROOTS")
            .stdout(Stdio::null()),
    );
    (took.as_secs_f64(), peak)
}

pub fn redact_group(report: &mut Report, rt: &Runtime) {
    let items: usize = std::env::var("SESSIONSTORE_REDACT_ITEMS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let small_items = items / 10;
    let mib = |b: u64| b as f64 / MIB as f64;
    let judged = |met: bool| if met { "met" } else { "not met" };
    let large_dir = tempfile::tempdir().expect("a temp dir");
    let small_dir = tempfile::tempdir().expect("a temp dir");
    let start = Instant::now();
    let large = build(rt, large_dir.path(), items);
    let small = build(rt, small_dir.path(), small_items);
    report.0.push(format!(
        "redact: built {items} and {small_items} items with a key in every {TURN}th and \
         in every user message in {:.0} s",
        start.elapsed().as_secs_f64()
    ));
    let (small_took, small_peak) = redact(&small);
    let (large_took, large_peak) = redact(&large);
    let ratio = large_took / small_took;
    report.0.push(format!(
        "redact: {items} items in {large_took:.1} s, peak RSS {:.0} MiB (target <= 64 MiB: \
         {}); {small_items} items in {small_took:.1} s, peak RSS {:.0} MiB; time {ratio:.2}x \
         (target <= 12x: {})",
        mib(large_peak),
        judged(large_peak <= 64 * MIB as u64),
        mib(small_peak),
        judged(ratio <= 12.0)
    ));
}
