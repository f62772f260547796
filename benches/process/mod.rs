//! The `process` group: the release binary's `send`, `attach` (256 KiB) and `record`
//! (10 lines) run as whole processes, against a small raw-rusqlite program making the
//! same writes on one connection with the same pragmas (this bench binary run again
//! with `--raw-process`, so both sides pay for starting a process). Each is timed one
//! process at a time and as 8 processes started at once, alternated with the raw side
//! in the same run; the figure is raw time / store time (issue 45: at least 0.3x).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};

use super::Report;
use crate::workload::{self, KIB};

/// How many rounds each comparison alternates, one store run and one raw run a round.
const ROUNDS: usize = 15;
/// How many processes run at once in the concurrent comparison.
const AT_ONCE: usize = 8;
/// The figure issue 45 asks of every comparison here.
const TARGET: f64 = 0.3;

/// The argument that makes this binary the raw program.
pub const RAW: &str = "--raw-process";

/// What each side writes.
#[derive(Clone, Copy)]
enum Op {
    Send,
    Attach,
    Record,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Attach => "attach 256 KiB",
            Op::Record => "record 10 lines",
        }
    }
}

/// The folder both sides write in: a database made by the binary, with one session.
struct Place {
    _dir: tempfile::TempDir,
    db: PathBuf,
    root: PathBuf,
    session: String,
    upload: PathBuf,
    updates: PathBuf,
}

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessionstore"));
    cmd.env_remove("SESSIONSTORE_LEGACY_ROOTS")
        .env_remove("SESSIONSTORE_DB")
        .env_remove("SESSIONSTORE_ATTACHMENTS_ROOT");
    cmd
}

fn place() -> Place {
    let dir = tempfile::tempdir().expect("a temp dir");
    let db = dir.path().join("sessions.db");
    let root = dir.path().join("attachments");
    let out = bin()
        .args(["session", "new", "--json", "--db"])
        .arg(&db)
        .arg("--attachments-root")
        .arg(&root)
        .output()
        .expect("the binary runs");
    assert!(out.status.success(), "session new: {out:?}");
    let id: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let session = id["id"].as_str().expect("an id").to_owned();
    let upload = dir.path().join("upload.bin");
    std::fs::write(&upload, workload::noise(256 * KIB, 7)).expect("the upload");
    let updates = dir.path().join("updates.jsonl");
    let mut lines = std::fs::File::create(&updates).expect("the updates");
    for i in 0..10 {
        let update = serde_json::json!({"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": format!("part {i} of the answer ")}});
        writeln!(lines, "{update}").expect("a line");
    }
    Place {
        _dir: dir,
        db,
        root,
        session,
        upload,
        updates,
    }
}

/// A fresh name for each attach, so neither side de-duplicates.
fn fresh_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("upload {}.bin", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The store's process for `op`, ready to spawn.
fn store_cmd(p: &Place, op: Op) -> Command {
    let mut cmd = bin();
    cmd.arg("--db")
        .arg(&p.db)
        .arg("--attachments-root")
        .arg(&p.root);
    match op {
        Op::Send => {
            cmd.args(["send", "--session", &p.session, "--text", "hello"]);
        }
        Op::Attach => {
            cmd.args(["attach", "--session", &p.session, "--name", &fresh_name()])
                .arg(&p.upload);
        }
        Op::Record => {
            cmd.args(["record", "--session", &p.session])
                .stdin(std::fs::File::open(&p.updates).expect("the updates"));
        }
    }
    cmd.stdout(Stdio::null());
    cmd
}

/// The raw program's process for `op`.
fn raw_cmd(p: &Place, op: Op) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("this bench's path"));
    let what = match op {
        Op::Send => "send",
        Op::Attach => "attach",
        Op::Record => "record",
    };
    cmd.args([RAW, what, &p.session])
        .arg(&p.db)
        .arg(&p.root)
        .arg(&p.upload)
        .arg(&p.updates)
        .arg(fresh_name());
    cmd.stdout(Stdio::null());
    cmd
}

/// Runs `n` processes made by `make` at once and waits for them all.
fn run(n: usize, mut make: impl FnMut() -> Command) -> Duration {
    let start = Instant::now();
    let children: Vec<_> = (0..n)
        .map(|_| make().spawn().expect("a process starts"))
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("a process ends");
        assert!(out.status.success(), "a process failed: {out:?}");
    }
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub fn process(report: &mut Report) {
    let p = place();
    for op in [Op::Send, Op::Attach, Op::Record] {
        for n in [1, AT_ONCE] {
            let (mut store, mut raw) = (Vec::new(), Vec::new());
            // One round of each first, unmeasured: the page cache and the files.
            run(n, || store_cmd(&p, op));
            run(n, || raw_cmd(&p, op));
            for _ in 0..ROUNDS {
                store.push(run(n, || store_cmd(&p, op)));
                raw.push(run(n, || raw_cmd(&p, op)));
            }
            let (s, r) = (median(store), median(raw));
            let ratio = r.as_secs_f64() / s.as_secs_f64();
            let how = if n == 1 {
                "one process".to_owned()
            } else {
                format!("{n} processes at once")
            };
            report.0.push(format!(
                "process: {} ({how}), alternated: {ratio:.3}x (median of {ROUNDS}; raw \
                 {:.1} ms, store {:.1} ms; target >= {TARGET}x: {})",
                op.name(),
                r.as_secs_f64() * 1e3,
                s.as_secs_f64() * 1e3,
                if ratio >= TARGET { "met" } else { "not met" }
            ));
        }
    }
}

/// The raw program: `--raw-process OP SESSION DB ROOT UPLOAD UPDATES NAME`, the same
/// writes as the store's command on one connection with the store's pragmas.
pub fn raw_main(args: &[String]) {
    let [op, session, db, root, upload, updates, name] = args else {
        panic!("usage: {RAW} OP SESSION DB ROOT UPLOAD UPDATES NAME");
    };
    let mut conn = workload::raw_connection(Path::new(db));
    match op.as_str() {
        "send" => workload::raw_append(&mut conn, session, "hello"),
        "attach" => raw_attach(&conn, session, Path::new(root), Path::new(upload), name),
        "record" => raw_record(&mut conn, session, Path::new(updates)),
        other => panic!("no raw op {other}"),
    }
}

/// The session is looked up, then the file is written owner-only into its folder and
/// made durable with the folder's entry.
fn raw_attach(conn: &Connection, session: &str, root: &Path, upload: &Path, name: &str) {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    conn.query_row("SELECT id FROM sessions WHERE id = ?1", [session], |r| {
        r.get::<_, String>(0)
    })
    .expect("the session");
    let folder = root.join(session);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&folder)
        .expect("the folder");
    let bytes = std::fs::read(upload).expect("the upload");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(folder.join(name))
        .expect("a new file");
    file.write_all(&bytes).expect("written");
    file.sync_all().expect("synced");
    std::fs::File::open(&folder)
        .and_then(|d| d.sync_all())
        .expect("the folder synced");
}

/// One transaction: the session, the event holding the updates, the merged agent
/// message's row (indexed by its trigger, V18), and the session's new `updated_at`.
fn raw_record(conn: &mut Connection, session: &str, updates: &Path) {
    let lines = std::fs::read_to_string(updates).expect("the updates");
    let updates: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).expect("an update"))
        .collect();
    let text: String = updates
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    let at = time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .expect("a timestamp");
    let id = uuid::Uuid::now_v7().to_string();
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("begin");
    tx.query_row("SELECT id FROM sessions WHERE id = ?1", [session], |r| {
        r.get::<_, String>(0)
    })
    .expect("the session");
    let seq: i64 = tx
        .query_row(
            "SELECT max(coalesce((SELECT max(seq) FROM messages WHERE session_id = ?1), 0),
                        coalesce((SELECT max(seq) FROM items WHERE session_id = ?1), 0)) + 1",
            [session],
            |r| r.get(0),
        )
        .expect("seq");
    let payload = serde_json::json!({"kind": "turn_recorded", "updates": updates,
        "items": [{"id": id, "seq": seq}]})
    .to_string();
    tx.execute(
        "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
         VALUES (?1, coalesce((SELECT max(session_seq) FROM session_events
                               WHERE session_id = ?1), 0) + 1, 'turn_recorded', ?2, ?3)",
        params![session, payload, at],
    )
    .expect("the event");
    let body = serde_json::json!({"content": [{"type": "text", "text": text}]}).to_string();
    tx.execute(
        "INSERT INTO items (id, session_id, seq, kind, body, created_at, updated_at)
         VALUES (?1, ?2, ?3, 'agent_message', ?4, ?5, ?5)",
        params![id, session, seq, body, at],
    )
    .expect("the item");
    tx.execute(
        "UPDATE sessions SET updated_at = ?2 WHERE id = ?1",
        params![session, at],
    )
    .expect("touch the session");
    tx.commit().expect("commit");
}
