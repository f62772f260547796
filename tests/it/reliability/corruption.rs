//! Corruption suite: variants of a real database made through the binary (truncated,
//! bytes flipped, pages zeroed, a wrong page size, a damaged or missing WAL or SHM,
//! semantic damage) run through every reading and writing command that takes a
//! database. It counts panics, hangs and multi-line errors, and checks refused files
//! are left alone with nothing new beside them; it never expects a damaged file to be
//! repaired.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use crate::support::{Bin, Rng, TestStore, count, json};

/// A variant: the database bytes, and its WAL and SHM files when it has them.
struct Variant {
    name: String,
    db: Vec<u8>,
    wal: Option<Vec<u8>>,
    shm: Option<Vec<u8>>,
}

/// The base database, made through the binary: a session with an attachment, a
/// delivered message that references it, a reply and a queued message, exported as
/// `base.tar` beside it (what `import` gets, made before any damage). Returns its
/// store, the session id, and a copy of the database with data still in its WAL.
fn base() -> (TestStore, String, Variant) {
    let t = TestStore::empty();
    let d = t.dir.path();
    json(&t.run(&["migrate", "--json"]));
    let s = json(&t.run(&["session", "new", "--title", "base", "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(d.join("notes.txt"), b"some notes").unwrap();
    let uri = json(&t.run(&[
        "attach",
        "--session",
        &s,
        "--json",
        d.join("notes.txt").to_str().unwrap(),
    ]))[0]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    json(&t.run(&[
        "send",
        "--session",
        &s,
        "--text",
        "look",
        "--attach",
        &uri,
        "--json",
    ]));
    json(&t.run(&[
        "send",
        "--session",
        &s,
        "--text",
        "ok",
        "--role",
        "assistant",
        "--json",
    ]));
    json(&t.run(&[
        "send",
        "--session",
        &s,
        "--text",
        "later",
        "--mid-turn",
        "--json",
    ]));
    json(&t.run(&[
        "export",
        "--session",
        &s,
        "--out",
        d.join("base.tar").to_str().unwrap(),
        "--json",
    ]));
    // A copy taken while a connection holds un-checkpointed frames in the WAL.
    let conn = rusqlite::Connection::open(d.join("sessions.db")).unwrap();
    conn.execute_batch("PRAGMA wal_autocheckpoint = 0; UPDATE sessions SET title = title;")
        .unwrap();
    let read = |ext: &str| std::fs::read(d.join(format!("sessions.db{ext}"))).ok();
    let with_wal = Variant {
        name: "with-wal".into(),
        db: read("").unwrap(),
        wal: read("-wal"),
        shm: read("-shm"),
    };
    drop(conn);
    (t, s, with_wal)
}

/// Applies SQL to a copy of `db` and returns the damaged bytes.
fn semantic(db: &[u8], sql: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.db");
    std::fs::write(&path, db).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode = DELETE;")
        .unwrap();
    drop(conn);
    std::fs::read(&path).unwrap()
}

fn variants(db: &[u8], with_wal: &Variant, rng: &mut Rng) -> Vec<Variant> {
    let plain = |name: String, db: Vec<u8>| Variant {
        name,
        db,
        wal: None,
        shm: None,
    };
    let page = u16::from_be_bytes([db[16], db[17]]) as usize;
    let pages = db.len() / page;
    let mut out = Vec::new();
    let mut cuts: Vec<usize> = vec![1, 2, 15, 16, 17, 50, 99, 100, 101, 512, 1024];
    for p in 1..pages {
        cuts.extend([p * page - 1, p * page, p * page + 1, p * page + page / 2]);
    }
    for cut in cuts.into_iter().filter(|&c| c < db.len()) {
        out.push(plain(format!("truncated at {cut}"), db[..cut].to_vec()));
    }
    for at in 0..100 {
        let mut d = db.to_vec();
        d[at] ^= 0xff;
        out.push(plain(format!("header byte {at} flipped"), d));
    }
    for _ in 0..60 {
        let at = page + rng.below((db.len() - page) as u64) as usize;
        let mut d = db.to_vec();
        d[at] ^= 1 << rng.below(8);
        out.push(plain(format!("byte {at} flipped"), d));
    }
    for p in 0..pages {
        let mut d = db.to_vec();
        d[p * page..(p + 1) * page].fill(0);
        out.push(plain(format!("page {} zeroed", p + 1), d));
    }
    for size in [0u16, 1, 512, 1024, 2048, 8192, 32768, 3000] {
        let mut d = db.to_vec();
        d[16..18].copy_from_slice(&size.to_be_bytes());
        out.push(plain(format!("page size {size}"), d));
    }
    let wal = with_wal.wal.clone().unwrap_or_default();
    out.push(Variant {
        name: "wal intact".into(),
        db: with_wal.db.clone(),
        wal: Some(wal.clone()),
        shm: with_wal.shm.clone(),
    });
    out.push(plain("wal missing".into(), with_wal.db.clone()));
    for cut in [
        0,
        1,
        31,
        32,
        33,
        100,
        wal.len() / 2,
        wal.len().saturating_sub(1),
    ] {
        out.push(Variant {
            name: format!("wal truncated at {cut}"),
            db: with_wal.db.clone(),
            wal: Some(wal[..cut.min(wal.len())].to_vec()),
            shm: None,
        });
    }
    for at in [0, 4, 8, 12, 16, 24, 28, 32, 40, 48, 60, wal.len() / 2] {
        let mut w = wal.clone();
        if at < w.len() {
            w[at] ^= 0xff;
        }
        out.push(Variant {
            name: format!("wal byte {at} flipped"),
            db: with_wal.db.clone(),
            wal: Some(w),
            shm: None,
        });
    }
    for (name, shm) in [
        ("shm empty", vec![]),
        ("shm garbage", vec![0xa5; 32768]),
        ("shm zeroed", vec![0; 32768]),
    ] {
        out.push(Variant {
            name: name.into(),
            db: with_wal.db.clone(),
            wal: Some(wal.clone()),
            shm: Some(shm),
        });
    }
    let off = "PRAGMA ignore_check_constraints = 1; PRAGMA foreign_keys = OFF;";
    for (name, sql) in [
        ("triggers dropped", "DROP TRIGGER events_no_update; DROP TRIGGER events_no_delete;".to_owned()),
        ("events dropped", "DROP TRIGGER events_no_update; DROP TRIGGER events_no_delete; DROP TABLE events;".to_owned()),
        ("schema history dropped", "DROP TABLE refinery_schema_history;".to_owned()),
        ("newer schema", "INSERT INTO refinery_schema_history (version, name, applied_on, checksum) VALUES (99, 'future', '', '0');".to_owned()),
        ("session id not a uuid", format!("{off} UPDATE sessions SET id = 'zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz'; UPDATE messages SET session_id = 'zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz';")),
        ("message id not a uuid", format!("{off} UPDATE messages SET id = '!!!!!!!!-!!!!-!!!!-!!!!-!!!!!!!!!!!!' WHERE seq = 1;")),
        ("payload not json", format!("{off} DROP TRIGGER events_no_update; UPDATE events SET payload = '{{not json';")),
        ("payload wrong shape", format!("{off} DROP TRIGGER events_no_update; UPDATE events SET payload = '[1,2,3]';")),
        ("negative size", format!("{off} UPDATE message_refs SET size = -5;")),
        ("bad role", format!("{off} UPDATE messages SET role = 'wizard';")),
        ("bad state", format!("{off} UPDATE messages SET state = 'lost';")),
        ("bad uri", format!("{off} UPDATE message_refs SET uri = 'attachment:///../../etc/passwd';")),
        ("seq gap", format!("{off} UPDATE messages SET seq = seq + 10 WHERE seq > 1;")),
        ("bad tools host", format!("{off} UPDATE sessions SET tools_host = 'mars';")),
        ("event deleted", format!("{off} DROP TRIGGER events_no_delete; DELETE FROM events WHERE session_seq = 2;")),
    ] {
        out.push(plain(name.into(), semantic(db, &sql)));
    }
    out
}

/// One command a variant goes through: its words, what it reads on stdin, and whether
/// it opens the database for writing.
struct Cmd {
    args: Vec<String>,
    stdin: Option<&'static [u8]>,
    writes: bool,
}

/// One valid update for `record`: an agent's text chunk.
const RECORD_LINE: &[u8] =
    br#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"after damage"}}
"#;

/// The reading and writing commands every variant goes through: `file` is an upload,
/// `archive` a valid export of the undamaged base, `out` where `export` writes.
fn commands(s: &str, file: &str, archive: &str, out: &str) -> Vec<Cmd> {
    let read = |a: &[&str]| Cmd {
        args: a.iter().map(|x| x.to_string()).collect(),
        stdin: None,
        writes: false,
    };
    let write = |a: &[&str]| Cmd {
        writes: true,
        ..read(a)
    };
    vec![
        read(&["session", "list", "--json"]),
        read(&["session", "show", s]),
        read(&["events", "--session", s]),
        read(&["verify"]),
        read(&["dispatch", "--session", s]),
        read(&["restore", "--session", s]),
        read(&["search", "look", "--json"]),
        read(&["export", "--session", s, "--out", out]),
        read(&["attachment", "list", "--session", s]),
        write(&["drain", "--session", s]),
        write(&["send", "--session", s, "--text", "after damage"]),
        write(&["attach", "--session", s, file]),
        write(&["migrate"]),
        write(&["session", "new"]),
        write(&["session", "rename", s, "x"]),
        write(&["session", "fork", s]),
        Cmd {
            stdin: Some(RECORD_LINE),
            ..write(&["record", "--session", s])
        },
        write(&["import", archive, "--json"]),
        write(&["session", "delete", s, "--dry-run"]),
        write(&["session", "delete", s]),
        write(&["gc", "--dry-run"]),
        write(&["gc"]),
    ]
}

/// Whether `after` differs from `before` only in the header fields a switch of the
/// journal mode to WAL rewrites: the file format versions (bytes 18-19), the change
/// counter (24-27) and the version-valid-for number and SQLite version (92-99).
fn only_journal_mode_changed(before: &[u8], after: &[u8]) -> bool {
    before.len() == after.len()
        && before.len() >= 100
        && before
            .iter()
            .zip(after)
            .enumerate()
            .all(|(i, (a, b))| a == b || matches!(i, 18 | 19 | 24..=27 | 92..=99))
        && after[18] == 2
        && after[19] == 2
}

#[derive(Default)]
struct Tally {
    runs: usize,
    refused: usize,
    panics: Vec<String>,
    hangs: Vec<String>,
    multiline: Vec<String>,
    touched: Vec<String>,
    /// Commands that failed on the undamaged database: they would make every refusal
    /// above meaningless.
    control: Vec<String>,
}

fn lay_out(dir: &Path, v: &Variant) -> PathBuf {
    let db = dir.join("sessions.db");
    std::fs::write(&db, &v.db).unwrap();
    for (ext, bytes) in [("-wal", &v.wal), ("-shm", &v.shm)] {
        if let Some(bytes) = bytes {
            std::fs::write(dir.join(format!("sessions.db{ext}")), bytes).unwrap();
        }
    }
    db
}

/// The names in a run's folder: the database, its side files, and anything a command
/// left there (a `-journal`, a half-written export).
fn entries(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

fn run_variants(sample: usize) -> Tally {
    let start = std::time::Instant::now();
    let mut rng = Rng::seeded("corruption");
    let (base, s, with_wal) = base();
    let db = std::fs::read(base.db_path()).unwrap();
    let mut all = variants(&db, &with_wal, &mut rng);
    // A sample keeps every kind of damage in view: a random, evenly spread choice.
    while all.len() > sample {
        let i = rng.below(all.len() as u64) as usize;
        all.swap_remove(i);
    }
    // First the undamaged file, on which every command must succeed.
    all.insert(
        0,
        Variant {
            name: "undamaged".into(),
            db: db.clone(),
            wal: None,
            shm: None,
        },
    );
    let upload = base.dir.path().join("notes.txt");
    let archive = base.dir.path().join("base.tar");
    let mut tally = Tally::default();
    let per_variant = commands("", "", "", "").len();
    for v in &all {
        for i in 0..per_variant {
            // Each run gets a folder of its own, and `export` writes into it.
            let dir = tempfile::tempdir().unwrap();
            let out_file = dir.path().join("export.tar");
            let command = commands(
                &s,
                upload.to_str().unwrap(),
                archive.to_str().unwrap(),
                out_file.to_str().unwrap(),
            )
            .swap_remove(i);
            let args = &command.args;
            let path = lay_out(dir.path(), v);
            let before = entries(dir.path());
            let what = format!("{} / {}", v.name, args.join(" "));
            let mut config = base.config.clone();
            config.database = sessionstore::config::Database::Sqlite(path.clone());
            let mut cmd = Bin::new(dir.path());
            cmd.args(args).on(&config).timeout(Duration::from_secs(30));
            if let Some(input) = command.stdin {
                cmd.stdin(input);
            }
            let ran = cmd.bounded();
            if v.name == "undamaged" {
                if !ran.as_ref().is_some_and(|o| o.status.success()) {
                    tally.control.push(format!("{what}: {ran:?}"));
                }
                continue;
            }
            tally.runs += 1;
            let Some(out) = ran else {
                tally.hangs.push(what);
                continue;
            };
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if out.status.code() == Some(101) || err.contains("panicked") {
                tally.panics.push(format!("{what}: {err}"));
            }
            // `verify` exits non-zero with its report on stdout when it finds problems:
            // that is its answer, not a refusal of the file.
            if out.status.success()
                || (err.is_empty() && args[0] == "verify" && !out.stdout.is_empty())
            {
                continue;
            }
            tally.refused += 1;
            // Under `--json` the one line is the error as a JSON object.
            let one_error = if args.iter().any(|a| a == "--json") {
                serde_json::from_str::<serde_json::Value>(err.trim_end())
                    .is_ok_and(|v| v["error"]["kind"].is_string())
            } else {
                err.starts_with("error: ")
            };
            if err.trim_end().lines().count() != 1 || !one_error {
                tally.multiline.push(format!("{what}: {err:?}"));
            }
            let now = std::fs::read(&path).unwrap_or_default();
            let after = entries(dir.path());
            // A writing command opens a database it does not refuse in WAL mode, which
            // rewrites the header of one kept with a rollback journal; when its write
            // then fails (exit 1, not a refusal), that switch is the only change allowed.
            let switched_to_wal = command.writes
                && out.status.code() == Some(1)
                && only_journal_mode_changed(&v.db, &now);
            if (now != v.db && !switched_to_wal) || after != before {
                let new: Vec<_> = after.difference(&before).collect();
                tally
                    .touched
                    .push(format!("{what}: {err:?} new files {new:?}"));
            }
        }
    }
    println!(
        "corruption: variants {}, commands {per_variant}, runs {}, refused {}, panics {}, hangs {}, multi-line errors {}, refused files touched {}",
        all.len() - 1,
        tally.runs,
        tally.refused,
        tally.panics.len(),
        tally.hangs.len(),
        tally.multiline.len(),
        tally.touched.len()
    );
    println!("corruption: {:.0} s", start.elapsed().as_secs_f64());
    tally
}

/// The one run both checks read: the commands are many, so they share it.
fn shared_run() -> &'static Tally {
    static TALLY: OnceLock<Tally> = OnceLock::new();
    TALLY.get_or_init(|| run_variants(count("SESSIONSTORE_CORRUPT_VARIANTS", 24, 10_000)))
}

fn first(list: &[String]) -> &[String] {
    &list[..list.len().min(5)]
}

#[test]
fn damaged_databases_never_panic_hang_or_print_more_than_one_line() {
    let tally = shared_run();
    assert!(
        tally.control.is_empty(),
        "failed on the undamaged database: {:?}",
        first(&tally.control)
    );
    assert!(
        tally.panics.is_empty(),
        "panics: {:?}",
        first(&tally.panics)
    );
    assert!(tally.hangs.is_empty(), "hangs: {:?}", first(&tally.hangs));
    assert!(
        tally.multiline.is_empty(),
        "errors: {:?}",
        first(&tally.multiline)
    );
}

#[test]
fn refused_damaged_databases_are_left_byte_for_byte_with_no_side_files() {
    let tally = shared_run();
    assert!(
        tally.touched.is_empty(),
        "touched: {:?}",
        first(&tally.touched)
    );
}

#[test]
fn verify_names_dropped_append_only_triggers() {
    let (t, _, _) = base();
    let db = t.db_path();
    let damaged = semantic(
        &std::fs::read(&db).unwrap(),
        "DROP TRIGGER events_no_update;",
    );
    std::fs::write(&db, damaged).unwrap();
    let out = t.run(&["verify"]);
    assert!(
        !out.status.success(),
        "verify passed with a trigger dropped"
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("events_no_update"), "{text}");
}

/// Found by the long run: `session rename` on a row whose tools host does not read
/// renamed it, then failed reading it back, so the file changed under an error.
#[test]
fn rename_refused_on_a_session_row_that_does_not_read_changes_nothing() {
    let (t, s, _) = base();
    let db = t.db_path();
    let damaged = semantic(
        &std::fs::read(&db).unwrap(),
        "PRAGMA ignore_check_constraints = 1; UPDATE sessions SET tools_host = 'mars';",
    );
    std::fs::write(&db, damaged).unwrap();
    let state = || -> (String, i64) {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.query_row(
            "SELECT title, (SELECT count(*) FROM events) FROM sessions",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    };
    let before = state();
    let out = t.run(&["session", "rename", &s, "renamed"]);
    crate::support::assert_one_line_error(&out);
    assert_eq!(state(), before, "the title and the event log are unchanged");
}
