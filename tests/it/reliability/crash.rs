//! Crash suite: a child process writes through the store and prints each id only after
//! its commit returned; the parent SIGKILLs it at random moments and then checks that
//! every acknowledged write survived and the database is whole. It never repairs.

use sessionstore::store::{Access, Verify};
use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sessionstore::store::Outgoing;
use sessionstore::{SessionId, Store};

use crate::support::Whole;
use crate::support::{Bin, Rng, TestStore, config_in, count};

const CHILD: &str = "reliability::crash::child";

/// The writer that gets killed. It does nothing unless the parent set
/// `SESSIONSTORE_CRASH`; its loop is bounded so a parent that died cannot leave it
/// running forever.
#[test]
#[ignore = "a child process of the crash suite, run by it"]
fn child() {
    let Ok(what) = std::env::var("SESSIONSTORE_CRASH") else {
        return;
    };
    let var = |k: &str| std::env::var(k).expect("the parent sets every crash variable");
    let dir = std::path::PathBuf::from(var("SESSIONSTORE_CRASH_DIR"));
    let session: SessionId = var("SESSIONSTORE_CRASH_SESSION")
        .parse()
        .expect("a session id");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let store = Store::open_as(config_in(&dir), Access::Existing)
            .await
            .expect("the store opens");
        for n in 0..100_000u32 {
            match what.as_str() {
                "send" => {
                    let mut out = Outgoing::user(format!("crash {n}"));
                    out.attach = vec![
                        var("SESSIONSTORE_CRASH_URI")
                            .parse()
                            .expect("the parent passes a valid uri"),
                    ];
                    let m = store.send(session, out).await.expect("a send succeeds");
                    println!("ACK {}", m.id);
                }
                "attach" => {
                    let size: usize = var("SESSIONSTORE_CRASH_SIZE").parse().expect("a size");
                    let stored = store
                        .attach_one(session, "big.bin".to_owned(), pattern(size))
                        .await
                        .expect("an upload succeeds");
                    println!("ACK {}", stored.name);
                }
                other => panic!("unknown crash child {other:?}"),
            }
        }
    });
}

/// The bytes every upload of the attach scenario holds, so any stored file can be
/// checked for being whole.
fn pattern(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i % 251) as u8).collect()
}

/// Starts `child`, kills it with SIGKILL after a random delay below `max_ms`, and
/// returns the lines it acknowledged (`ACK <x>`) before it died.
fn kill_at_random(mut child: Bin, rng: &mut Rng, max_ms: u64) -> Vec<String> {
    let mut child = child.stderr(Stdio::null()).spawn();
    let acked = Arc::new(Mutex::new(Vec::new()));
    let out = child.stdout.take().expect("piped stdout");
    let sink = acked.clone();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            // libtest prints `test <name> ... ` with no newline before the test's own
            // output, so the first acknowledgement shares its line.
            if let Some(x) = line.find("ACK ").map(|i| &line[i + 4..]) {
                sink.lock().unwrap().push(x.to_owned());
            }
        }
    });
    std::thread::sleep(Duration::from_millis(rng.below(max_ms)));
    let _ = child.kill();
    let _ = child.wait();
    reader.join().expect("the reader thread");
    Arc::try_unwrap(acked).unwrap().into_inner().unwrap()
}

fn integrity_ok(db: &Path) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

/// `values` are exactly 1..=n, in order.
fn contiguous(what: &str, values: &[i64]) {
    for (i, v) in values.iter().enumerate() {
        assert_eq!(
            *v,
            i as i64 + 1,
            "{what} has a gap or a repeat at {i}: {values:?}"
        );
    }
}

fn kills_mid_send(kills: usize) {
    let mut rng = Rng::seeded("crash/send");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = rt.block_on(TestStore::new());
    let session = rt.block_on(t.session());
    let file = rt.block_on(t.upload(session, "ref.txt", b"referenced"));
    let dir = t.dir.path().to_str().unwrap().to_owned();
    let (sid, uri) = (session.to_string(), file.uri.to_string());
    let mut acked = HashSet::new();
    for _ in 0..kills {
        let mut child = Bin::reexec(CHILD);
        child.envs([
            ("SESSIONSTORE_CRASH", "send"),
            ("SESSIONSTORE_CRASH_DIR", dir.as_str()),
            ("SESSIONSTORE_CRASH_SESSION", &sid),
            ("SESSIONSTORE_CRASH_URI", &uri),
        ]);
        acked.extend(kill_at_random(child, &mut rng, 150));
    }
    integrity_ok(&t.db_path());
    let store = rt.block_on(Store::open(t.config.clone())).unwrap();
    let report = rt.block_on(store.verify(Verify::Check)).unwrap().after;
    assert!(report.ok(), "verify after the kills: {:?}", report.problems);
    let stored: HashSet<String> = rt
        .block_on(store.all_messages(session))
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m.refs.len(), 1, "a message keeps its reference");
            m.id.to_string()
        })
        .collect();
    let lost = acked.difference(&stored).count();
    let conn = t.raw();
    let seqs = |sql: &str| -> Vec<i64> {
        let mut stmt = conn.prepare(sql).unwrap();
        stmt.query_map([&sid], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    };
    contiguous(
        "messages.seq",
        &seqs("SELECT seq FROM messages WHERE session_id = ?1 ORDER BY seq"),
    );
    contiguous(
        "events.session_seq",
        &seqs("SELECT session_seq FROM events WHERE session_id = ?1 ORDER BY session_seq"),
    );
    println!(
        "crash/send: kills {kills}, acknowledged {}, stored {}, lost {lost}",
        acked.len(),
        stored.len()
    );
    assert!(
        kills < 20 || !acked.is_empty(),
        "no kill ever landed after a commit"
    );
    assert_eq!(lost, 0, "acknowledged messages were lost");
}

fn kills_mid_attach(kills: usize, size: usize) {
    let mut rng = Rng::seeded("crash/attach");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = rt.block_on(TestStore::new());
    let session = rt.block_on(t.session());
    let dir = t.dir.path().to_str().unwrap().to_owned();
    let sid = session.to_string();
    let size_text = size.to_string();
    let mut acked = HashSet::new();
    for _ in 0..kills {
        let mut child = Bin::reexec(CHILD);
        child.envs([
            ("SESSIONSTORE_CRASH", "attach"),
            ("SESSIONSTORE_CRASH_DIR", dir.as_str()),
            ("SESSIONSTORE_CRASH_SESSION", &sid),
            ("SESSIONSTORE_CRASH_SIZE", &size_text),
        ]);
        acked.extend(kill_at_random(child, &mut rng, 250));
    }
    let folder = t.folder(session);
    let whole = pattern(size);
    let (mut stored, mut temps) = (HashSet::new(), Vec::new());
    // On a loaded machine every child can be killed before its upload made the
    // session's folder: then nothing was acknowledged and nothing is there to check.
    let entries = match std::fs::read_dir(&folder) {
        Ok(entries) => entries.collect::<Vec<_>>(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => vec![],
        Err(e) => panic!("{folder:?}: {e}"),
    };
    for entry in entries {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name.starts_with(".upload-") && name.ends_with(".partial.") {
            temps.push(entry.path());
            continue;
        }
        assert!(
            std::fs::read(entry.path()).unwrap() == whole,
            "{name} is stored but not whole"
        );
        stored.insert(name);
    }
    let lost = acked.difference(&stored).count();
    // The temporaries left by kills are fresh; aged past the grace period, the next
    // upload into the folder sweeps them all.
    let left = temps.len();
    let old = std::time::SystemTime::now() - sessionstore::attachments::UPLOAD_GRACE * 2;
    for temp in &temps {
        std::fs::File::options()
            .write(true)
            .open(temp)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    rt.block_on(t.upload(session, "after.txt", b"after"));
    let after = std::fs::read_dir(&folder)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name().into_string().unwrap();
            name.starts_with(".upload-")
        })
        .count();
    println!(
        "crash/attach: kills {kills} of {size}-byte uploads, acknowledged {}, lost {lost}, \
         partial stored files 0, temporaries left {left}, after the next upload {after}",
        acked.len()
    );
    assert_eq!(lost, 0, "acknowledged uploads were lost");
    assert_eq!(after, 0, "the next upload swept the aged temporaries");
}

/// `type name sql` of every schema object, sorted.
fn schema_of(db: &Path) -> Vec<String> {
    if !db.exists() {
        return vec![];
    }
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT type || ' ' || name || ' ' || ifnull(sql, '') FROM sqlite_master ORDER BY 1",
        )
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn kills_mid_migrate(kills: usize) {
    let mut rng = Rng::seeded("crash/migrate");
    let reference = TestStore::empty();
    // Only `--db`: a migration touches no attachment root.
    let migrate = |t: &TestStore| {
        let mut cmd = Bin::new(t.dir.path());
        cmd.arg("migrate")
            .arg("--db")
            .arg(t.db_path())
            .timeout(Duration::from_secs(60));
        cmd
    };
    let out = migrate(&reference).output();
    assert!(out.status.success());
    let after = schema_of(&reference.db_path());
    let (mut before_seen, mut after_seen) = (0, 0);
    for _ in 0..kills {
        let t = TestStore::empty();
        let db = t.db_path();
        kill_at_random(migrate(&t), &mut rng, 150);
        let schema = schema_of(&db);
        if schema.is_empty() {
            before_seen += 1;
        } else {
            assert_eq!(schema, after, "a killed migration left a schema in between");
            after_seen += 1;
            integrity_ok(&db);
        }
        let again = migrate(&t).output();
        assert!(again.status.success(), "{again:?}");
        assert_eq!(schema_of(&db), after);
    }
    println!(
        "crash/migrate: kills {kills}, schema before {before_seen}, after {after_seen}, in between 0"
    );
}

#[test]
fn kills_mid_send_lose_no_acknowledged_message() {
    kills_mid_send(count("SESSIONSTORE_CRASH_SEND_KILLS", 30, 1000));
}

#[test]
fn kills_mid_attach_leave_no_partial_file_under_a_stored_name() {
    // The tester's files were 4 MiB; the short run uses 1 MiB to stay quick.
    let size = if crate::support::long_run() {
        4 << 20
    } else {
        1 << 20
    };
    kills_mid_attach(count("SESSIONSTORE_CRASH_ATTACH_KILLS", 12, 600), size);
}

#[test]
fn kills_mid_migrate_leave_the_schema_before_or_after() {
    kills_mid_migrate(count("SESSIONSTORE_CRASH_MIGRATE_KILLS", 10, 200));
}
