//! `cargo bench`: the store against hand-written baselines run on the same data in the
//! same process, printed as speed ratios (baseline time / store time, so ≥ 1 means as
//! fast as the baseline), plus the peak memory of a restore in a child process. It
//! measures and prints; it never fails on a slow result. See BENCHMARKS.md.
//!
//! Groups (each builds its data in a temporary folder once):
//! - `append`: a text-only `Store::send` against raw rusqlite writing the same rows and
//!   event with the same pragmas; and a send with two 256 KiB references against a
//!   text-only send.
//! - `restore`: 1,000 messages, 2 references each over 8 distinct 256 KiB files,
//!   `Store::restore` written by the ACP writer into a sink, against a SELECT
//!   plus one read and one base64 encoding per distinct file.
//! - `dispatch`: one message with four 16 MiB images, written as JSON by the block
//!   writer, against reading and base64-encoding the same files; then on the same
//!   message `Store::dispatch`'s typed blocks against the writer path (into a sink and
//!   into a `Vec<u8>`, and with a memo the caller keeps), the typed `PromptRequest`
//!   sent the ACP SDK's way (through a `serde_json::Value`) against one string of its
//!   size the same way, and `format::prompt_frame` against the SDK's way.
//! - `list`: one page of 50 of 10,000 sessions (`Store::list_sessions`, from the
//!   start and from a cursor halfway), against a hand-written SELECT with the same
//!   ORDER BY and LIMIT on a raw connection.
//! - `backends`: the same store calls on SQLite and on PostgreSQL (a fresh schema on
//!   the server named by `SESSIONSTORE_BENCH_POSTGRES`; skipped without it): a
//!   text-only send, a restore of 200 messages with a 64 KiB reference each, and a
//!   page of 50 sessions, printed as PostgreSQL's speed relative to SQLite's.
//! - `process` (not criterion): the release binary's `send`, `attach` and `record` as
//!   processes against a raw-rusqlite program making the same writes, one at a time
//!   and 8 at once (`process/mod.rs`).
//! - `restore-rss` (not criterion): a 200-turn session with a different 1 MiB PNG per
//!   turn, restored by the release binary in a child process for each format: wall
//!   time and peak resident memory (`wait4`'s `ru_maxrss`), against the files' size.
//! - `longhist` (not criterion, and only when named: it builds a million items): a
//!   long session's time to the first replayed line, peak memory of restore and
//!   record, replay throughput, a tail's cost and bytes on disk (`longhist.rs`).
//! - `streaming` (not criterion, and only when named): group commit against raw
//!   commits, the proxy recording against the relay alone, and the proxy's memory
//!   with a slow client (`streaming/mod.rs`).
//! - `redact` (not criterion, and only when named: it builds a million items):
//!   `sessionstore redact` of a million-item session kept with redaction off against
//!   a 100,000-item one: time and peak memory (`redact/mod.rs`).
//! - `scale` (not criterion, and only when named: it builds a million items): the first
//!   page of 100,000 sessions against that of 100, and a search for a word in 100 items
//!   of a million-item session against the same in a 1,000-item one (`scale/mod.rs`).

/// The command line's allocator, so the store measured here runs as the binary does;
/// the baselines run on it too.
#[cfg(feature = "cli")]
#[path = "../src/cli/allocator.rs"]
mod allocator;

mod longhist;
mod process;
mod redact;
mod scale;
mod streaming;
mod workload;

use std::cell::RefCell;
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode};
use sessionstore::lifecycle::ListQuery;
use sessionstore::model::{NewSession, Role};
use sessionstore::store::Upload;
use tokio::runtime::Runtime;
use workload::{Fixture, MIB, raw_connection};

/// Per-iteration times a benchmark recorded, so a ratio can be printed afterwards.
#[derive(Clone, Default)]
struct Samples(Rc<RefCell<Vec<f64>>>);

impl Samples {
    fn median(&self) -> Option<f64> {
        let mut v = self.0.borrow().clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(v[v.len() / 2])
    }
}

/// Registers `f` as one benchmark of `group`, recording each sample's time per call.
fn timed(group: &mut BenchmarkGroup<'_, WallTime>, name: &str, mut f: impl FnMut()) -> Samples {
    let samples = Samples::default();
    let record = samples.clone();
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            let took = start.elapsed();
            record
                .0
                .borrow_mut()
                .push(took.as_secs_f64() / iters.max(1) as f64);
            took
        })
    });
    samples
}

/// The speed ratio (baseline time / measured time) with the two sides alternated:
/// each round times `calls` calls of one side and then of the other, the order
/// swapped every round, and the result is the median of the rounds' ratios. A change
/// in the machine's load between criterion's two benchmarks moves their medians
/// apart; here it falls on both sides of a round alike.
struct Paired {
    rounds: usize,
    calls: u32,
}

impl Paired {
    fn ratio(&self, mut baseline: impl FnMut(), mut measured: impl FnMut()) -> f64 {
        let time = |f: &mut dyn FnMut()| {
            let start = Instant::now();
            for _ in 0..self.calls {
                f();
            }
            start.elapsed().as_secs_f64()
        };
        let mut ratios: Vec<f64> = (0..self.rounds)
            .map(|round| {
                if round % 2 == 0 {
                    let b = time(&mut baseline);
                    b / time(&mut measured)
                } else {
                    let m = time(&mut measured);
                    time(&mut baseline) / m
                }
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        ratios[ratios.len() / 2]
    }
}

/// One comparison: the two sides timed by criterion in `group`, then alternated,
/// both ratios reported against `target` (or as figures, without one).
struct Comparison<'a> {
    what: &'a str,
    baseline: &'a str,
    measured: &'a str,
    target: Option<f64>,
    paired: Paired,
}

impl Comparison<'_> {
    fn run(
        &self,
        mut group: BenchmarkGroup<'_, WallTime>,
        report: &mut Report,
        mut by_hand: impl FnMut(),
        mut by_store: impl FnMut(),
    ) {
        let baseline = timed(&mut group, self.baseline, &mut by_hand);
        let measured = timed(&mut group, self.measured, &mut by_store);
        group.finish();
        if measured.median().is_none() {
            return; // filtered out on the command line
        }
        report.ratio(self.what, &baseline, &measured, self.target);
        let ratio = self.paired.ratio(by_hand, by_store);
        report.paired(self.what, &self.paired, ratio, self.target);
    }
}

/// The lines printed at the end, after criterion's own output.
#[derive(Default)]
struct Report(Vec<String>);

impl Report {
    /// `baseline / measured`: ≥ 1 means the measured code is as fast as the baseline.
    fn ratio(
        &mut self,
        what: &str,
        baseline: &Samples,
        measured: &Samples,
        target: impl Into<Option<f64>>,
    ) {
        let (Some(b), Some(m)) = (baseline.median(), measured.median()) else {
            return; // filtered out on the command line
        };
        let ratio = b / m;
        self.0.push(format!(
            "{what}: {ratio:.3}x ({}; baseline {}, measured {})",
            judged(ratio, target.into()),
            ms(b),
            ms(m)
        ));
    }

    /// The same comparison from a [`Paired`] run, which judges the target.
    fn paired(&mut self, what: &str, paired: &Paired, ratio: f64, target: impl Into<Option<f64>>) {
        self.0.push(format!(
            "{what}, alternated: {ratio:.3}x (median of {} rounds of {} calls a side; {})",
            paired.rounds,
            paired.calls,
            judged(ratio, target.into()),
        ));
    }
}

impl Report {
    /// `baseline / measured`, for a comparison that has no target.
    #[cfg(feature = "postgres")]
    fn relative(&mut self, what: &str, baseline: &Samples, measured: &Samples) {
        let (Some(b), Some(m)) = (baseline.median(), measured.median()) else {
            return;
        };
        self.0.push(format!(
            "{what}: {:.3}x (baseline {}, measured {})",
            b / m,
            ms(b),
            ms(m)
        ));
    }
}

fn judged(ratio: f64, target: Option<f64>) -> String {
    match target {
        Some(target) if ratio >= target => format!("target >= {target}x: met"),
        Some(target) => format!("target >= {target}x: not met"),
        None => "no target".to_owned(),
    }
}

fn ms(seconds: f64) -> String {
    format!("{:.3} ms", seconds * 1e3)
}

/// A fixture in a temporary folder, kept for as long as the fixture is used.
fn fixture(rt: &Runtime) -> (tempfile::TempDir, Fixture) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let f = Fixture::create(rt, dir.path());
    (dir, f)
}

fn append(c: &mut Criterion, rt: &Runtime, report: &mut Report) {
    let (_store_dir, store_side) = fixture(rt);
    let refs = workload::append_refs(rt, &store_side);
    // The baseline writes into a database of its own, made by the store so the schema
    // is the same, through a plain connection.
    let (_raw_dir, raw_side) = fixture(rt);
    let raw_session = raw_side.session.to_string();
    let mut conn = workload::raw_connection(&raw_side.dir.join("sessions.db"));

    let mut group = c.benchmark_group("append");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_secs(2));
    let mut raw_send = || workload::raw_append(&mut conn, &raw_session, "hello");
    let text_send = || store_side.send(rt, Role::User, "hello", &[]);
    let refs_send = || store_side.send(rt, Role::User, "hello", &refs);
    let raw = timed(&mut group, "raw rusqlite", &mut raw_send);
    let text = timed(&mut group, "send text", text_send);
    let two = timed(&mut group, "send 2x256KiB refs", refs_send);
    group.finish();
    if text.median().is_none() {
        return; // filtered out on the command line
    }
    let text_only = "append: text-only send vs raw rusqlite";
    let with_refs = "append: send with two 256 KiB references vs text-only send";
    report.ratio(text_only, &raw, &text, 0.9);
    report.ratio(with_refs, &text, &two, 0.9);
    let paired = Paired {
        rounds: 31,
        calls: 20,
    };
    let ratio = paired.ratio(&mut raw_send, text_send);
    report.paired(text_only, &paired, ratio, 0.9);
    let ratio = paired.ratio(text_send, refs_send);
    report.paired(with_refs, &paired, ratio, 0.9);
}

fn restore(c: &mut Criterion, rt: &Runtime, report: &mut Report) {
    let (_dir, f) = fixture(rt);
    workload::build_restore(rt, &f);
    let conn = workload::raw_connection(&f.dir.join("sessions.db"));
    let folder = f.folder();
    let session = f.session.to_string();

    let mut group = c.benchmark_group("restore");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(Duration::from_millis(100));
    group.measurement_time(Duration::from_secs(5));
    Comparison {
        what: "restore: 1,000 messages x 2 refs over 8 files vs select + read + base64",
        baseline: "select + read + base64 per file",
        measured: "Store::restore to JSON",
        target: Some(0.8),
        paired: Paired {
            rounds: 31,
            calls: 5,
        },
    }
    .run(
        group,
        report,
        || workload::restore_baseline(&conn, &session, &folder),
        || workload::restore_store(rt, &f),
    );
}

/// A group of slow calls (tens of milliseconds each): few flat samples.
fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name.to_owned());
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(Duration::from_millis(100));
    group.measurement_time(Duration::from_secs(5));
    group
}

fn dispatch(c: &mut Criterion, rt: &Runtime, report: &mut Report) {
    let (_dir, f) = fixture(rt);
    let paths = workload::build_dispatch(rt, &f);
    let paired = || Paired {
        rounds: 21,
        calls: 1,
    };
    Comparison {
        what: "dispatch: four 16 MiB images to JSON vs read + base64",
        baseline: "read + base64",
        measured: "Store::dispatch (parts) to JSON",
        target: Some(0.8),
        paired: paired(),
    }
    .run(
        group(c, "dispatch"),
        report,
        || workload::dispatch_baseline(&paths),
        || workload::dispatch_store(rt, &f),
    );
    // The typed blocks a library caller gets, not serialized, against the writer path.
    Comparison {
        what: "dispatch-typed: Store::dispatch into blocks vs its parts written into a sink",
        baseline: "Store::dispatch parts to a sink",
        measured: "Store::dispatch into blocks",
        target: Some(0.8),
        paired: paired(),
    }
    .run(
        group(c, "dispatch-typed"),
        report,
        || workload::dispatch_store(rt, &f),
        || drop(std::hint::black_box(workload::dispatch_typed(rt, &f))),
    );
    Comparison {
        what: "dispatch-typed: Store::dispatch into blocks vs its parts written into a Vec<u8>",
        baseline: "Store::dispatch parts to a Vec",
        measured: "Store::dispatch into blocks",
        target: Some(0.8),
        paired: paired(),
    }
    .run(
        group(c, "dispatch-typed-vec"),
        report,
        || drop(std::hint::black_box(workload::dispatch_store_vec(rt, &f))),
        || drop(std::hint::black_box(workload::dispatch_typed(rt, &f))),
    );
    Comparison {
        what: "dispatch-typed: Store::dispatch into blocks, the caller keeping the memo, vs its parts into a sink",
        baseline: "Store::dispatch parts to a sink",
        measured: "Store::dispatch into blocks, memo kept",
        target: Some(0.8),
        paired: paired(),
    }
    .run(
        group(c, "dispatch-typed-kept"),
        report,
        || workload::dispatch_store(rt, &f),
        || drop(std::hint::black_box(workload::dispatch_typed_kept(rt, &f))),
    );

    // Serialization alone, from blocks and parts made once: the SDK's way (through a
    // `serde_json::Value`) against one string of the same size the same way, and the
    // frame writer against the SDK's way.
    let typed = workload::dispatch_typed(rt, &f);
    let request =
        agent_client_protocol_schema::v1::PromptRequest::new(f.session.to_string(), typed.blocks);
    let parts = workload::dispatch_parts(rt, &f);
    let size = workload::frame(&f, &parts.parts).len();
    let prebuilt = "A".repeat(size);
    Comparison {
        what: "dispatch-sdk: a PromptRequest of the four images sent the SDK's way vs one string of its size the same way",
        baseline: "a string through Value",
        measured: "PromptRequest through Value",
        target: None,
        paired: paired(),
    }
    .run(
        group(c, "dispatch-sdk"),
        report,
        || drop(std::hint::black_box(workload::value_baseline(&prebuilt))),
        || drop(std::hint::black_box(workload::sdk_send(&request))),
    );
    Comparison {
        what: "dispatch-frame: format::prompt_frame from the parts vs the SDK's way from the typed request",
        baseline: "PromptRequest through Value",
        measured: "prompt_frame into a Vec",
        target: None,
        paired: paired(),
    }
    .run(
        group(c, "dispatch-frame"),
        report,
        || drop(std::hint::black_box(workload::sdk_send(&request))),
        || drop(std::hint::black_box(workload::frame(&f, &parts.parts))),
    );
}

/// Runs the release binary to completion and returns its wall time and peak resident
/// memory in bytes, from `wait4`. Linux carries the parent's own peak into a child's
/// `ru_maxrss` when the child execs, so the figure is at least this process's peak:
/// `main` runs this group first, while that is small, and the report prints it.
fn run_measured(cmd: &mut Command) -> (Duration, u64) {
    let start = Instant::now();
    let child = cmd.spawn().expect("the binary starts");
    let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
    let mut status = 0;
    // SAFETY: rusage is plain data, all-zero is a valid value, and wait4 only writes
    // to the two pointers it is given, which outlive the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let took = start.elapsed();
    assert_eq!(waited, pid, "wait4 reaps the child");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the restore failed: status {status}"
    );
    drop(child);
    // Linux reports ru_maxrss in KiB.
    (took, u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024)
}

/// This process's peak resident memory so far (`VmHWM`), in bytes.
fn own_peak() -> u64 {
    peak_of("self")
}

/// The peak resident memory so far (`VmHWM`) of the process `/proc/<pid>` names,
/// in bytes; 0 when it cannot be read.
fn peak_of(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

fn restore_rss(report: &mut Report, rt: &Runtime) {
    let (_dir, f) = fixture(rt);
    let mut total = 0u64;
    for i in 0..200u64 {
        let png = workload::fake_png(MIB, 1000 + i);
        total += png.len() as u64;
        let uri = f.attach(rt, &format!("turn {i}.png"), png);
        f.send(rt, Role::User, &format!("look at image {i}"), &[uri]);
        f.send(rt, Role::Assistant, &format!("I see image {i}"), &[]);
    }
    for format in ["acp", "acp-updates", "openai", "openai-responses"] {
        let mut runs: Vec<(Duration, u64)> = (0..3)
            .map(|_| {
                run_measured(
                    Command::new(env!("CARGO_BIN_EXE_sessionstore"))
                        .args(["restore", "--session", &f.session.to_string()])
                        .args(["--format", format])
                        .arg("--db")
                        .arg(f.dir.join("sessions.db"))
                        .arg("--attachments-root")
                        .arg(f.dir.join("attachments"))
                        .env_remove("SESSIONSTORE_LEGACY_ROOTS")
                        .stdout(Stdio::null()),
                )
            })
            .collect();
        runs.sort();
        let (time, _) = runs[runs.len() / 2];
        let floor = own_peak();
        let peak = runs.iter().map(|r| r.1).max().unwrap_or(0);
        let mib = |b: u64| b as f64 / MIB as f64;
        report.0.push(format!(
            "restore-rss --format {format}: 200 x 1 MiB PNG turns in {:.0} ms, peak RSS {:.0} MiB \
             (floor {:.0} MiB; {:.2}x the files' {:.0} MiB; target <= 128 MiB: {})",
            time.as_secs_f64() * 1e3,
            mib(peak),
            mib(floor),
            peak as f64 / total as f64,
            mib(total),
            if peak <= 128 * MIB as u64 {
                "met"
            } else {
                "not met"
            },
        ));
    }
}

/// Whether a group runs: with no filter on the command line every group does, as
/// criterion decides for its own benchmarks.
fn wanted(group: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    filters.is_empty() || filters.iter().any(|f| group.contains(f.as_str()))
}

/// Whether a group that runs only when asked for was named on the command line.
fn named(group: &str) -> bool {
    std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && group.contains(a.as_str()))
}

/// 10,000 sessions, every tenth with a message, written in one transaction by hand
/// (10,000 store writes would be 10,000 fsyncs), each with its creation event.
fn list(c: &mut Criterion, rt: &Runtime, report: &mut Report) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let fx = Fixture::create(rt, dir.path());
    let db = fx.dir.join("sessions.db");
    crate::workload::write_sessions(&db, 10_000);
    let store = fx.store.clone();
    let halfway = rt
        .block_on(async {
            let mut cursor = None;
            for _ in 0..100 {
                cursor = store
                    .list_sessions(ListQuery {
                        limit: 50,
                        cursor,
                        ..ListQuery::default()
                    })
                    .await?
                    .next_cursor;
            }
            Ok::<_, sessionstore::Error>(cursor)
        })
        .expect("pages");
    let raw = raw_connection(&db);
    let mut group = c.benchmark_group("list");
    group.sample_size(20);
    let baseline = timed(&mut group, "select", || {
        let mut stmt = raw
            .prepare_cached(
                "SELECT id, title, tools_host, created_at, updated_at FROM sessions
                 ORDER BY updated_at DESC, id DESC LIMIT 51",
            )
            .expect("prepare");
        let rows: Vec<(String, Option<String>, String, String, String)> = stmt
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .and_then(|rows| rows.collect())
            .expect("rows");
        assert_eq!(rows.len(), 51);
    });
    let first = timed(&mut group, "first page", || {
        let page = rt
            .block_on(store.list_sessions(ListQuery {
                limit: 50,
                ..ListQuery::default()
            }))
            .expect("a page");
        assert_eq!(page.sessions.len(), 50);
    });
    let middle = timed(&mut group, "page from a cursor", || {
        let page = rt
            .block_on(store.list_sessions(ListQuery {
                limit: 50,
                cursor: halfway.clone(),
                ..ListQuery::default()
            }))
            .expect("a page");
        assert_eq!(page.sessions.len(), 50);
    });
    group.finish();
    report.ratio(
        "list: first page of 50 of 10,000 vs SELECT",
        &baseline,
        &first,
        0.5,
    );
    report.ratio("list: page 101 of 50 vs SELECT", &baseline, &middle, 0.5);
}

/// One engine's side of `backends`: a store with a session of 200 messages, and the
/// samples of each call.
#[cfg(feature = "postgres")]
fn backend_side(
    c: &mut Criterion,
    rt: &Runtime,
    name: &str,
    dir: &std::path::Path,
    db: std::path::PathBuf,
) -> [Samples; 3] {
    let config = sessionstore::Config {
        database: db.into(),
        ..workload::config_in(dir)
    };
    let store = rt
        .block_on(sessionstore::Store::open(config))
        .expect("the store opens");
    let session = rt
        .block_on(store.create_session(NewSession::default()))
        .expect("a session")
        .id;
    let files: Vec<_> = (0..4)
        .map(|i| {
            let upload = Upload::new(format!("f{i}.bin"), workload::noise(64 * 1024, i));
            rt.block_on(store.attach(session, vec![upload]))
                .expect("attach")
                .remove(0)
                .uri
        })
        .collect();
    for i in 0..200 {
        let out = sessionstore::store::Outgoing {
            attach: vec![files[i % files.len()].clone()],
            ..sessionstore::store::Outgoing::user(format!("message {i}"))
        };
        rt.block_on(store.send(session, out)).expect("send");
    }
    let listed = rt
        .block_on(store.create_session(NewSession::default()))
        .expect("a session for sends")
        .id;
    for _ in 0..60 {
        rt.block_on(store.create_session(NewSession::default()))
            .expect("a session to list");
    }
    let mut group = c.benchmark_group(format!("backends/{name}"));
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_secs(2));
    let send = timed(&mut group, "send text", || {
        rt.block_on(store.send(listed, sessionstore::store::Outgoing::user("hello")))
            .expect("send");
    });
    let restore = timed(&mut group, "restore 200 messages", || {
        let items = rt.block_on(async {
            let mut stream = store
                .restore(
                    session,
                    sessionstore::dispatch::DEFAULT_MEMO_BUDGET,
                    sessionstore::restore::Replay::Whole,
                )
                .await
                .expect("restore");
            let mut items = 0;
            while let Some(item) = stream.next().await {
                std::hint::black_box(item.expect("an item"));
                items += 1;
            }
            items
        });
        assert_eq!(items, 200);
    });
    let page = timed(&mut group, "list a page of 50", || {
        let page = rt
            .block_on(store.list_sessions(ListQuery {
                limit: 50,
                ..ListQuery::default()
            }))
            .expect("a page");
        assert_eq!(page.sessions.len(), 50);
    });
    group.finish();
    [send, restore, page]
}

#[cfg(feature = "postgres")]
fn backends(c: &mut Criterion, rt: &Runtime, report: &mut Report) {
    let Some(admin) = std::env::var("SESSIONSTORE_BENCH_POSTGRES")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        report.0.push(
            "backends: skipped (set SESSIONSTORE_BENCH_POSTGRES=postgres://… to compare)"
                .to_owned(),
        );
        return;
    };
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = backend_side(
        c,
        rt,
        "sqlite",
        &dir.path().join("sqlite"),
        dir.path().join("sqlite/sessions.db"),
    );
    let schema = sessionstore::oracle::ScratchSchema::create(&admin, "bench")
        .expect("the bench server lets the bench create a schema");
    let postgres = backend_side(
        c,
        rt,
        "postgres",
        &dir.path().join("postgres"),
        std::path::PathBuf::from(schema.url()),
    );
    for (what, i) in [
        ("send text", 0),
        ("restore 200 messages", 1),
        ("list a page of 50", 2),
    ] {
        report.relative(
            &format!("backends: {what}, PostgreSQL vs SQLite"),
            &sqlite[i],
            &postgres[i],
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(process::RAW) {
        process::raw_main(&args[2..]);
        return;
    }
    let rt = Runtime::new().expect("a runtime");
    let mut c = Criterion::default().configure_from_args();
    let mut report = Report::default();
    let test_mode = std::env::args().any(|a| a == "--test" || a == "--list");
    // First, while this process is small: its own peak is the floor of what a
    // child's peak can be measured as.
    if wanted("restore-rss") && !test_mode {
        restore_rss(&mut report, &rt);
    }
    if wanted("process") && !test_mode {
        process::process(&mut report);
    }
    if named("longhist") && !test_mode {
        longhist::longhist(&mut report, &rt);
    }
    if named("streaming") && !test_mode {
        streaming::streaming(&mut report, &rt);
    }
    if named("redact") && !test_mode {
        redact::redact_group(&mut report, &rt);
    }
    if named("scale") && !test_mode {
        scale::scale(&mut report, &rt);
    } else if named("archived") && !test_mode {
        scale::list_archived(&mut report, &rt);
    }
    if wanted("append") {
        append(&mut c, &rt, &mut report);
    }
    if wanted("restore") && !test_mode {
        restore(&mut c, &rt, &mut report);
    }
    if wanted("dispatch") && !test_mode {
        dispatch(&mut c, &rt, &mut report);
    }
    if wanted("list") {
        list(&mut c, &rt, &mut report);
    }
    #[cfg(feature = "postgres")]
    if wanted("backends") && !test_mode {
        backends(&mut c, &rt, &mut report);
    }
    c.final_summary();
    println!("\nratios (baseline time / measured time; >= 1 is as fast as the baseline):");
    for line in &report.0 {
        println!("  {line}");
    }
}
