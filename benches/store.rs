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
//!   `Store::restore_stream` written by the ACP writer into a sink, against a SELECT
//!   plus one read and one base64 encoding per distinct file.
//! - `dispatch`: one message with four 16 MiB images, written as JSON by the block
//!   writer, against reading and base64-encoding the same files.
//! - `list`: one page of 50 of 10,000 sessions (`Store::list_sessions_page`, from the
//!   start and from a cursor halfway), against a hand-written SELECT with the same
//!   ORDER BY and LIMIT on a raw connection.
//! - `restore-rss` (not criterion): a 200-turn session with a different 1 MiB PNG per
//!   turn, restored by the release binary in a child process for each format: wall
//!   time and peak resident memory (`wait4`'s `ru_maxrss`), against the files' size.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use base64::Engine;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode};
use rusqlite::{Connection, params};
use sessionstore::attachments::{AttachmentUri, Roots};
use sessionstore::dispatch::{DEFAULT_MEMO_BUDGET, Memo, Mode};
use sessionstore::format::{Format, StreamWriter};
use sessionstore::model::{Role, ToolsHost};
use sessionstore::store::Outgoing;
use sessionstore::{Config, SessionId, Store};
use tokio::runtime::Runtime;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

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

/// The lines printed at the end, after criterion's own output.
#[derive(Default)]
struct Report(Vec<String>);

impl Report {
    /// `baseline / measured`: ≥ 1 means the measured code is as fast as the baseline.
    fn ratio(&mut self, what: &str, baseline: &Samples, measured: &Samples, target: f64) {
        let (Some(b), Some(m)) = (baseline.median(), measured.median()) else {
            return; // filtered out on the command line
        };
        let ratio = b / m;
        self.0.push(format!(
            "{what}: {ratio:.3}x (target >= {target}x: {}; baseline {}, measured {})",
            if ratio >= target { "met" } else { "not met" },
            ms(b),
            ms(m)
        ));
    }
}

fn ms(seconds: f64) -> String {
    format!("{:.3} ms", seconds * 1e3)
}

fn config_in(dir: &Path) -> Config {
    Config {
        db_path: dir.join("sessions.db"),
        roots: Roots {
            configured: dir.join("attachments"),
            legacy: vec![],
        },
        host: "bench".into(),
    }
}

/// Bytes that differ per `seed` and do not compress to nothing.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A file that starts like a PNG (so it is sent as an image), `len` bytes long.
fn fake_png(len: usize, seed: u64) -> Vec<u8> {
    let mut bytes = noise(len, seed);
    bytes[..8].copy_from_slice(b"\x89PNG\r\n\x1a\n");
    bytes
}

struct Fixture {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    store: Store,
    session: SessionId,
}

impl Fixture {
    fn new(rt: &Runtime) -> Fixture {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().to_owned();
        let store = rt
            .block_on(Store::open(config_in(&path)))
            .expect("store opens");
        let session = rt
            .block_on(store.create_session(None, ToolsHost::Local))
            .expect("a session")
            .id;
        Fixture {
            _dir: dir,
            dir: path,
            store,
            session,
        }
    }

    fn attach(&self, rt: &Runtime, name: &str, bytes: Vec<u8>) -> AttachmentUri {
        rt.block_on(self.store.attach(self.session, name.to_owned(), bytes))
            .expect("attach")
            .uri
    }

    fn send(&self, rt: &Runtime, role: Role, text: &str, attach: &[AttachmentUri]) {
        let out = Outgoing {
            role,
            attach: attach.to_vec(),
            ..Outgoing::user(text)
        };
        rt.block_on(self.store.send(self.session, out))
            .expect("send");
    }

    fn folder(&self) -> PathBuf {
        self.dir.join("attachments").join(self.session.to_string())
    }
}

/// A connection set up as the store sets up its own.
fn raw_connection(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("raw connection");
    conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0))
        .expect("wal");
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;")
        .expect("pragmas");
    conn
}

/// What `send` writes for a text-only user message, by hand: the session check, the
/// message row, its event, and the session's new `updated_at`, in one transaction.
fn raw_append(conn: &mut Connection, session: &str, text: &str) {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("begin");
    let at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("a timestamp");
    let id = uuid::Uuid::now_v7().to_string();
    tx.prepare_cached("SELECT id, title FROM sessions WHERE id = ?1")
        .and_then(|mut s| {
            s.query_row([session], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?))
            })
        })
        .expect("the session");
    let seq: i64 = tx
        .prepare_cached("SELECT coalesce(max(seq), 0) + 1 FROM messages WHERE session_id = ?1")
        .and_then(|mut s| s.query_row([session], |r| r.get(0)))
        .expect("seq");
    tx.prepare_cached(
        "INSERT INTO messages (id, session_id, seq, role, display_text, state, created_at)
         VALUES (?1, ?2, ?3, 'user', ?4, 'delivered', ?5)",
    )
    .and_then(|mut s| s.execute(params![id, session, seq, text, at]))
    .expect("insert a message");
    let payload = serde_json::json!({
        "kind": "message_appended",
        "message": {"id": id, "seq": seq, "role": "user", "displayText": text,
                    "modelText": null, "transcript": null, "state": "delivered", "refs": []}
    })
    .to_string();
    tx.prepare_cached(
        "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
         VALUES (?1, (SELECT coalesce(max(session_seq), 0) + 1 FROM events
                      WHERE session_id = ?1), 'message_appended', ?2, ?3)",
    )
    .and_then(|mut s| s.execute(params![session, payload, at]))
    .expect("insert an event");
    tx.prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")
        .and_then(|mut s| s.execute(params![session, at]))
        .expect("touch the session");
    tx.commit().expect("commit");
}

fn append(c: &mut Criterion, rt: &Runtime, report: &mut Report) {
    let store_side = Fixture::new(rt);
    let refs: Vec<AttachmentUri> = (0..2)
        .map(|i| store_side.attach(rt, &format!("ref{i}.bin"), noise(256 * KIB, i)))
        .collect();
    // The baseline writes into a database of its own, made by the store so the schema
    // is the same, through a plain connection.
    let raw_side = Fixture::new(rt);
    let raw_session = raw_side.session.to_string();
    let mut conn = raw_connection(&raw_side.dir.join("sessions.db"));

    let mut group = c.benchmark_group("append");
    group.sample_size(10);
    group.warm_up_time(Duration::from_millis(300));
    group.measurement_time(Duration::from_secs(2));
    let raw = timed(&mut group, "raw rusqlite", || {
        raw_append(&mut conn, &raw_session, "hello")
    });
    let text = timed(&mut group, "send text", || {
        store_side.send(rt, Role::User, "hello", &[])
    });
    let two = timed(&mut group, "send 2x256KiB refs", || {
        store_side.send(rt, Role::User, "hello", &refs)
    });
    group.finish();
    report.ratio("append: text-only send vs raw rusqlite", &raw, &text, 0.9);
    report.ratio(
        "append: send with two 256 KiB references vs text-only send",
        &text,
        &two,
        0.9,
    );
}

/// A message row joined with one of its references: id, role, text, URI, stored name.
type Row = (String, String, String, Option<String>, Option<String>);

fn restore(c: &mut Criterion, rt: &Runtime, report: &mut Report) {
    let f = Fixture::new(rt);
    let uris: Vec<AttachmentUri> = (0..8u64)
        .map(|i| f.attach(rt, &format!("file{i}.bin"), noise(256 * KIB, 100 + i)))
        .collect();
    for i in 0..1000 {
        let pair = [uris[i % 8].clone(), uris[(i * 3 + 1) % 8].clone()];
        f.send(rt, Role::User, &format!("message {i}"), &pair);
    }
    let conn = raw_connection(&f.dir.join("sessions.db"));
    let folder = f.folder();
    let session = f.session.to_string();

    let mut group = c.benchmark_group("restore");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(Duration::from_millis(100));
    group.measurement_time(Duration::from_secs(5));
    let baseline = timed(&mut group, "select + read + base64 per file", || {
        let mut stmt = conn
            .prepare_cached(
                "SELECT m.id, m.role, m.display_text, r.uri, r.stored_name
                 FROM messages m LEFT JOIN message_refs r ON r.message_id = m.id
                 WHERE m.session_id = ?1 AND m.state = 'delivered'
                 ORDER BY m.seq, r.ordinal",
            )
            .expect("prepare");
        let rows: Vec<Row> = stmt
            .query_map([&session], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows");
        let mut encoded = std::collections::HashMap::new();
        for (_, _, _, uri, name) in &rows {
            if let (Some(uri), Some(name)) = (uri, name) {
                encoded.entry(uri.clone()).or_insert_with(|| {
                    let bytes = std::fs::read(folder.join(name)).expect("read");
                    base64::engine::general_purpose::STANDARD.encode(&bytes)
                });
            }
        }
        std::hint::black_box((rows, encoded));
    });
    let restored = timed(&mut group, "Store::restore_stream to JSON", || {
        rt.block_on(async {
            let mut stream = f
                .store
                .restore_stream(f.session, DEFAULT_MEMO_BUDGET)
                .await
                .expect("restore");
            let mut out =
                StreamWriter::begin(std::io::sink(), Format::AcpRestore, f.session, "gpt-4o")
                    .expect("write");
            while let Some(item) = stream.next().await {
                out.item(&item.expect("an item")).expect("write");
            }
            out.finish().expect("write");
        })
    });
    group.finish();
    report.ratio(
        "restore: 1,000 messages x 2 refs over 8 files vs select + read + base64",
        &baseline,
        &restored,
        0.7,
    );
}

fn dispatch(c: &mut Criterion, rt: &Runtime, report: &mut Report) {
    let f = Fixture::new(rt);
    let uris: Vec<AttachmentUri> = (0..4u64)
        .map(|i| f.attach(rt, &format!("big{i}.png"), fake_png(16 * MIB, 200 + i)))
        .collect();
    f.send(rt, Role::User, "four big images", &uris);
    let paths: Vec<PathBuf> = (0..4)
        .map(|i| f.folder().join(format!("big{i}.png")))
        .collect();

    let mut group = c.benchmark_group("dispatch");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.warm_up_time(Duration::from_millis(100));
    group.measurement_time(Duration::from_secs(5));
    let baseline = timed(&mut group, "read + base64", || {
        for path in &paths {
            let bytes = std::fs::read(path).expect("read");
            std::hint::black_box(base64::engine::general_purpose::STANDARD.encode(&bytes));
        }
    });
    let dispatched = timed(&mut group, "Store::dispatch_parts to JSON", || {
        let d = rt
            .block_on(
                f.store
                    .dispatch_parts(f.session, None, Mode::Strict, Memo::new()),
            )
            .expect("dispatch");
        let mut out =
            StreamWriter::begin(std::io::sink(), Format::AcpBlocks, f.session, "").expect("write");
        out.message(&d).expect("write");
        out.finish().expect("write");
    });
    group.finish();
    report.ratio(
        "dispatch: four 16 MiB images to JSON vs read + base64",
        &baseline,
        &dispatched,
        0.8,
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
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

fn restore_rss(report: &mut Report, rt: &Runtime) {
    let f = Fixture::new(rt);
    let mut total = 0u64;
    for i in 0..200u64 {
        let png = fake_png(MIB, 1000 + i);
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

/// 10,000 sessions, every tenth with a message, written in one transaction by hand
/// (10,000 store writes would be 10,000 fsyncs), each with its creation event.
fn list(c: &mut Criterion, rt: &Runtime, report: &mut Report) {
    let fx = Fixture::new(rt);
    let db = fx.dir.join("sessions.db");
    {
        let mut conn = raw_connection(&db);
        let tx = conn.transaction().expect("begin");
        for i in 0..10_000u32 {
            let id = uuid::Uuid::now_v7().to_string();
            let at = format!("2026-01-01T00:00:{:02}.{:09}Z", i % 60, i);
            tx.execute(
                "INSERT INTO sessions (id, title, tools_host, created_at, updated_at)
                 VALUES (?1, ?2, 'local', ?3, ?3)",
                params![id, format!("session {i}"), at],
            )
            .expect("a session");
            tx.execute(
                "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
                 VALUES (?1, 1, 'session_created', '{}', ?2)",
                params![id, at],
            )
            .expect("its event");
            if i % 10 == 0 {
                tx.execute(
                    "INSERT INTO messages (id, session_id, seq, role, display_text, state, created_at)
                     VALUES (?1, ?2, 1, 'user', 'hello', 'delivered', ?3)",
                    params![uuid::Uuid::now_v7().to_string(), id, at],
                )
                .expect("a message");
            }
        }
        tx.commit().expect("commit");
    }
    let store = fx.store.clone();
    let halfway = rt
        .block_on(async {
            let mut cursor = None;
            for _ in 0..100 {
                cursor = store.list_sessions_page(50, cursor).await?.next_cursor;
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
            .block_on(store.list_sessions_page(50, None))
            .expect("a page");
        assert_eq!(page.sessions.len(), 50);
    });
    let middle = timed(&mut group, "page from a cursor", || {
        let page = rt
            .block_on(store.list_sessions_page(50, halfway.clone()))
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

fn main() {
    let rt = Runtime::new().expect("a runtime");
    let mut c = Criterion::default().configure_from_args();
    let mut report = Report::default();
    let test_mode = std::env::args().any(|a| a == "--test" || a == "--list");
    // First, while this process is small: its own peak is the floor of what a
    // child's peak can be measured as.
    if wanted("restore-rss") && !test_mode {
        restore_rss(&mut report, &rt);
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
    c.final_summary();
    println!("\nratios (baseline time / measured time; >= 1 is as fast as the baseline):");
    for line in &report.0 {
        println!("  {line}");
    }
}
