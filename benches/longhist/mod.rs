//! The `longhist` group (not criterion: each figure is a few long runs): one session
//! of `SESSIONSTORE_LONG_ITEMS` recorded items (default 1,000,000 separate agent
//! messages of about 80 bytes) with a user message every 1,000, built once in a
//! temporary folder, against a 1,000-item and a 100-item session of the same shape.
//! It prints, as ratios in the same run: the time to the first replayed line of the
//! release binary's `restore --format acp-updates`; peak resident memory of `restore`
//! in every format and of `record` of the whole input in a child process; full replay
//! against a baseline that selects the same events and writes their payloads to a
//! sink, and against one that also parses each update and writes it back (the fair
//! baseline proposed for that target); `--tail 100` against the whole restore of the 100-item session; the
//! database's bytes per byte of recorded JSON; and peak resident memory of `export`,
//! `import`, `session fork` and `session delete` of the long session.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sessionstore::dispatch::DEFAULT_MEMO_BUDGET;
use sessionstore::format::{Format, StreamWriter};
use sessionstore::model::Role;
use sessionstore::restore::Replay;
use tokio::runtime::Runtime;

use crate::workload::{Fixture, MIB, raw_connection};
use crate::{Report, run_measured};

/// A user message comes before every this many recorded items.
const TURN: usize = 1000;

/// The `i`-th agent message's line, as `record` reads it: about 80 bytes of text
/// under a `messageId` of its own.
fn line(i: usize) -> String {
    let text: String = format!("word{i:07} ").repeat(8).chars().take(80).collect();
    serde_json::json!({"sessionUpdate": "agent_message_chunk",
        "messageId": format!("m-{i:09}"),
        "content": {"type": "text", "text": text}})
    .to_string()
}

/// `items` agent messages with a user message before every [`TURN`], recorded
/// through the library into `f`'s session; returns the recorded JSON's bytes.
fn build(rt: &Runtime, f: &Fixture, items: usize) -> u64 {
    let mut bytes = 0u64;
    for start in (0..items).step_by(TURN) {
        f.send(rt, Role::User, &format!("turn {}", start / TURN), &[]);
        let batch: Vec<sessionstore::turns::Update> = (start..items.min(start + TURN))
            .map(|i| {
                let l = line(i);
                bytes += l.len() as u64 + 1;
                sessionstore::turns::Update::Known(serde_json::from_str(&l).expect("an update"))
            })
            .collect();
        rt.block_on(
            f.store
                .record(f.session, sessionstore::record::Batches(batch)),
        )
        .expect("record");
    }
    bytes
}

fn session_args(f: &Fixture) -> Vec<String> {
    vec![
        "--session".into(),
        f.session.to_string(),
        "--db".into(),
        f.dir.join("sessions.db").display().to_string(),
        "--attachments-root".into(),
        f.dir.join("attachments").display().to_string(),
    ]
}

/// How long the release binary's restore of `f` takes to print its first line.
fn first_line(f: &Fixture, format: &str) -> Duration {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sessionstore"))
        .arg("restore")
        .args(session_args(f))
        .args(["--format", format])
        .env_remove("SESSIONSTORE_LEGACY_ROOTS")
        .stdout(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut first = Vec::new();
    out.read_until(b'\n', &mut first).expect("a first line");
    let took = start.elapsed();
    // The rest is read to the end: the figure is the first line's, not a kill's.
    std::io::copy(&mut out, &mut std::io::sink()).expect("the rest");
    assert!(
        child.wait().expect("waited").success(),
        "the restore failed"
    );
    took
}

fn median(mut runs: Vec<Duration>) -> Duration {
    runs.sort();
    runs[runs.len() / 2]
}

/// A restore of `f` from `replay`, written as `acp-updates` into a sink.
fn replay_store(rt: &Runtime, f: &Fixture, replay: Replay) {
    rt.block_on(async {
        let mut stream = f
            .store
            .restore(f.session, DEFAULT_MEMO_BUDGET, replay)
            .await
            .expect("restore");
        let mut out = StreamWriter::begin_replay(
            std::io::sink(),
            Format::AcpUpdates,
            f.session,
            "gpt-4o",
            stream.partial(),
        )
        .expect("write");
        while let Some(item) = stream.next().await {
            out.item(&item.expect("an item")).expect("write");
        }
        out.finish().expect("write");
    })
}

/// The session's event payloads, selected in order on a raw connection, each handed
/// to `each` with a sink to write to: what both baselines share.
fn each_payload(db: &Path, session: &str, mut each: impl FnMut(&str, &mut std::io::Sink)) {
    let conn = raw_connection(db);
    let mut stmt = conn
        .prepare("SELECT payload FROM session_events WHERE session_id = ?1 ORDER BY session_seq")
        .expect("prepare");
    let mut rows = stmt.query([session]).expect("query");
    let mut sink = std::io::sink();
    while let Some(row) = rows.next().expect("a row") {
        each(
            row.get_ref(0).expect("payload").as_str().expect("text"),
            &mut sink,
        );
    }
}

/// The hand-written baseline: the session's events, selected in order on a raw
/// connection, each payload written to a sink.
fn replay_baseline(db: &Path, session: &str) {
    each_payload(db, session, |payload, sink| {
        sink.write_all(payload.as_bytes()).expect("write");
    });
}

/// The baseline proposed as the fair one for a replay that reads the log: the same
/// events, each payload parsed into what it holds (every update as an ACP
/// `SessionUpdate`, read as `record` reads it) and each update written back as one
/// JSON line to a sink. No check of the rows, no merge.
fn replay_parsing_baseline(db: &Path, session: &str) {
    use sessionstore::model::EventPayload;
    use sessionstore::turns::Update;
    each_payload(db, session, |payload, sink| {
        let event: EventPayload = serde_json::from_str(payload).expect("an event payload");
        if let EventPayload::TurnRecorded { updates, .. } = event {
            for value in &updates {
                let update = Update::from_value(value).expect("an update");
                serde_json::to_writer(&mut *sink, &update.to_value()).expect("write");
                sink.write_all(b"\n").expect("write");
            }
        }
    });
}

fn timed(runs: usize, mut f: impl FnMut()) -> Duration {
    median(
        (0..runs)
            .map(|_| {
                let start = Instant::now();
                f();
                start.elapsed()
            })
            .collect(),
    )
}

fn fixture(rt: &Runtime) -> (tempfile::TempDir, Fixture) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let f = Fixture::create(rt, dir.path());
    (dir, f)
}

fn judged(met: bool) -> &'static str {
    if met { "met" } else { "not met" }
}

pub fn longhist(report: &mut Report, rt: &Runtime) {
    let items: usize = std::env::var("SESSIONSTORE_LONG_ITEMS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mib = |b: u64| b as f64 / MIB as f64;

    let (_long_dir, long) = fixture(rt);
    let start = Instant::now();
    let json_bytes = build(rt, &long, items);
    report.0.push(format!(
        "longhist: built {items} items with a user message every {TURN} in {:.0} s",
        start.elapsed().as_secs_f64()
    ));
    let (_small_dir, small) = fixture(rt);
    build(rt, &small, 1000);
    let (_tiny_dir, tiny) = fixture(rt);
    build(rt, &tiny, 100);

    // Time to the first line, against the 1,000-item session.
    let long_first = median((0..3).map(|_| first_line(&long, "acp-updates")).collect());
    let small_first = median((0..3).map(|_| first_line(&small, "acp-updates")).collect());
    let ratio = ms(long_first) / ms(small_first);
    report.0.push(format!(
        "longhist: first acp-updates line after {:.1} ms for {items} items, {:.1} ms for \
         1,000: {ratio:.2}x (target <= 2x: {})",
        ms(long_first),
        ms(small_first),
        judged(ratio <= 2.0)
    ));

    // Peak memory of a whole restore in every format.
    for format in ["acp", "acp-updates", "openai", "openai-responses"] {
        let (took, peak) = run_measured(
            Command::new(env!("CARGO_BIN_EXE_sessionstore"))
                .arg("restore")
                .args(session_args(&long))
                .args(["--format", format])
                .env_remove("SESSIONSTORE_LEGACY_ROOTS")
                .stdout(Stdio::null()),
        );
        report.0.push(format!(
            "longhist: restore --format {format} of {items} items in {:.1} s, peak RSS {:.0} MiB \
             (target <= 64 MiB: {})",
            took.as_secs_f64(),
            mib(peak),
            judged(peak <= 64 * MIB as u64)
        ));
    }

    // Peak memory of `record` of the whole input, into a session of its own.
    let (_record_dir, target) = fixture(rt);
    let input: PathBuf = target.dir.join("input.jsonl");
    {
        let mut file = std::io::BufWriter::new(std::fs::File::create(&input).expect("input"));
        for i in 0..items {
            writeln!(file, "{}", line(i)).expect("write the input");
        }
        file.flush().expect("write the input");
    }
    let (took, peak) = run_measured(
        Command::new(env!("CARGO_BIN_EXE_sessionstore"))
            .arg("record")
            .args(session_args(&target))
            .env_remove("SESSIONSTORE_LEGACY_ROOTS")
            .stdin(std::fs::File::open(&input).expect("input"))
            .stdout(Stdio::null()),
    );
    report.0.push(format!(
        "longhist: record of {items} lines in {:.1} s, peak RSS {:.0} MiB (target <= 64 MiB: {})",
        took.as_secs_f64(),
        mib(peak),
        judged(peak <= 64 * MIB as u64)
    ));
    let _ = std::fs::remove_file(&input);

    // Full replay against the baseline that copies the same events' payloads.
    let db = long.dir.join("sessions.db");
    let sid = long.session.to_string();
    let baseline = timed(3, || replay_baseline(&db, &sid));
    let measured = timed(3, || replay_store(rt, &long, Replay::Whole));
    let ratio = baseline.as_secs_f64() / measured.as_secs_f64();
    report.0.push(format!(
        "longhist: full replay {:.0} ms vs the events' payloads to a sink {:.0} ms: {ratio:.2}x \
         (target >= 0.7x: {})",
        ms(measured),
        ms(baseline),
        judged(ratio >= 0.7)
    ));
    let parsing = timed(3, || replay_parsing_baseline(&db, &sid));
    report.0.push(format!(
        "longhist: full replay {:.0} ms vs the same payloads parsed into ACP updates and \
         written back {:.0} ms: {:.2}x (the baseline proposed for the target; no target of \
         its own)",
        ms(measured),
        ms(parsing),
        parsing.as_secs_f64() / measured.as_secs_f64()
    ));

    // A tail of 100 against the whole restore of a 100-item session.
    let tail = timed(5, || replay_store(rt, &long, Replay::Tail(100)));
    let whole_tiny = timed(5, || replay_store(rt, &tiny, Replay::Whole));
    let ratio = ms(tail) / ms(whole_tiny);
    report.0.push(format!(
        "longhist: --tail 100 of {items} items {:.1} ms vs the whole 100-item session {:.1} ms: \
         {ratio:.1}x (target <= 2x: {})",
        ms(tail),
        ms(whole_tiny),
        judged(ratio <= 2.0)
    ));

    // Bytes on disk per byte of recorded JSON, the WAL checkpointed into the file.
    let conn = raw_connection(&db);
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    let mut size = 0u64;
    for suffix in ["", "-wal"] {
        let mut name = db.clone().into_os_string();
        name.push(suffix);
        size += std::fs::metadata(&name).map_or(0, |m| m.len());
    }
    let ratio = size as f64 / json_bytes as f64;
    report.0.push(format!(
        "longhist: database {:.0} MiB for {:.0} MiB of recorded JSON: {ratio:.2}x \
         (target <= 3x: {})",
        mib(size),
        mib(json_bytes),
        judged(ratio <= 3.0)
    ));

    // Peak memory of the whole-session operations, in child processes, last: the
    // fork and the import grow the database that the figure above measured.
    let store_args = |f: &Fixture| {
        vec![
            "--db".to_owned(),
            f.dir.join("sessions.db").display().to_string(),
            "--attachments-root".to_owned(),
            f.dir.join("attachments").display().to_string(),
        ]
    };
    let archive = target.dir.join("long.tar");
    let measured = |what: &str, args: Vec<String>, report: &mut Report| {
        let (took, peak) = run_measured(
            Command::new(env!("CARGO_BIN_EXE_sessionstore"))
                .args(&args)
                .env_remove("SESSIONSTORE_LEGACY_ROOTS")
                .stdout(Stdio::null()),
        );
        report.0.push(format!(
            "longhist: {what} of {items} items in {:.1} s, peak RSS {:.0} MiB (target <= 64 MiB: {})",
            took.as_secs_f64(),
            mib(peak),
            judged(peak <= 64 * MIB as u64)
        ));
    };
    let sid = long.session.to_string();
    let mut export = vec!["export".to_owned(), "--session".into(), sid.clone()];
    export.extend(["--out".to_owned(), archive.display().to_string()]);
    export.extend(store_args(&long));
    measured("export", export, report);
    report.0.push(format!(
        "longhist: the archive is {:.0} MiB",
        mib(std::fs::metadata(&archive).map_or(0, |m| m.len()))
    ));
    let mut import = vec!["import".to_owned(), archive.display().to_string()];
    import.extend(store_args(&target));
    measured("import", import, report);
    let _ = std::fs::remove_file(&archive);
    let mut fork = vec!["session".to_owned(), "fork".into(), sid.clone()];
    fork.extend(store_args(&long));
    measured("session fork", fork, report);
    let mut delete = vec!["session".to_owned(), "delete".into(), sid];
    delete.extend(store_args(&long));
    measured("session delete", delete, report);
}
