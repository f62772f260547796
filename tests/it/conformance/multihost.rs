//! Several hosts on one database, on one machine: store processes (the real binary,
//! or this test binary re-executed) sharing one database and one attachment root, as
//! daemons behind a load balancer share a PostgreSQL server and a mounted folder.
//! It never retries on a writer's behalf: any error a writer sees is counted.

use sessionstore::store::{Access, Verify};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sessionstore::attachments::{AttachmentUri, Roots};
use sessionstore::model::NewSession;
use sessionstore::store::Outgoing;
use sessionstore::{Config, SessionId, Store};

use crate::support::Whole;
use crate::support::{
    Bin, Expect, PNG, TestStore, check_attachment, conformance, count, json, percentile, stderr,
    stdout,
};

conformance!(eight_writers_in_two_processes_lose_nothing_and_never_fail);

const WRITER: &str = "conformance::multihost::writer_process";
/// Writers per process, and processes.
const WRITERS: usize = 4;
const PROCESSES: usize = 2;
/// Messages each writer sends: 50, or 500 in the long run (`SESSIONSTORE_LONG=1`),
/// or `SESSIONSTORE_MH_WRITES_EACH`.
fn writes_each() -> usize {
    count("SESSIONSTORE_MH_WRITES_EACH", 50, 500)
}
/// Sessions the writers share: every session gets writers from both processes.
const SESSIONS: usize = 2;

/// The binary as one host: its own `--attachments-root`, which may be another path to
/// the shared folder (each host mounts it where it likes).
fn host(b: &TestStore, root: &Path, args: &[&str]) -> std::process::Output {
    let mut host = b.config.clone();
    host.roots = Roots {
        configured: root.to_owned(),
        legacy: vec![],
    };
    Bin::new(b.dir.path()).args(args).on(&host).output()
}

/// Host A writes sessions with attachments; host B, a separate process that sees the
/// shared folder under another path, restores them, and every path it hands the model
/// reads back the uploaded bytes on B's side. Then the other way round.
#[test]
fn a_session_written_on_one_host_restores_on_another() {
    let Some(b) = TestStore::postgres() else {
        return;
    };
    let shared = b.configured().to_path_buf();
    std::fs::create_dir_all(&shared).unwrap();
    // Host B reaches the same folder through a mount point of its own.
    let mount_b = b.dir.path().join("host-b-mount");
    std::os::unix::fs::symlink(&shared, &mount_b).unwrap();
    let migrated = host(&b, &shared, &["migrate"]);
    assert!(migrated.status.success(), "{}", stderr(&migrated));

    let files: [(&str, &[u8]); 3] = [
        ("café chart.png", PNG),
        ("notes 日本.txt", "soba 蕎麦\n".as_bytes()),
        ("data blob.bin", &[0, 0xff, 0xfe, 0x80, 0x7f]),
    ];
    let uploads = b.dir.path().join("uploads");
    std::fs::create_dir_all(&uploads).unwrap();
    for (name, bytes) in files {
        std::fs::write(uploads.join(name), bytes).unwrap();
    }

    for (writer, reader) in [(&shared, &mount_b), (&mount_b, &shared)] {
        let title = format!("written through {}", writer.display());
        let id = json(&host(
            &b,
            writer,
            &["session", "new", "--title", &title, "--json"],
        ))["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut attach = vec!["attach", "--session", &id, "--json"];
        let paths: Vec<String> = files
            .iter()
            .map(|(n, _)| uploads.join(n).display().to_string())
            .collect();
        attach.extend(paths.iter().map(String::as_str));
        let stored = json(&host(&b, writer, &attach));
        let uris: Vec<&str> = stored
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["uri"].as_str().unwrap())
            .collect();
        let mut send = vec!["send", "--session", &id, "--text", "what is in these?"];
        for uri in &uris {
            send.extend(["--attach", uri]);
        }
        let sent = host(&b, writer, &send);
        assert!(sent.status.success(), "{}", stderr(&sent));

        let listed = host(&b, reader, &["session", "list"]);
        assert!(stdout(&listed).contains(&title), "{}", stdout(&listed));
        let restored = host(
            &b,
            reader,
            &["restore", "--session", &id, "--format", "acp"],
        );
        let restored = json(&restored);
        let messages = restored["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 1, "{restored}");
        let content = messages[0]["content"].as_array().unwrap();
        assert_eq!(content.len(), 1 + files.len(), "{restored}");
        for ((name, bytes), block) in files.iter().zip(&content[1..]) {
            let expect = Expect {
                name: (*name).to_owned(),
                uri: sessionstore::oracle::expected_uri(id.parse().unwrap(), name),
                bytes: bytes.to_vec(),
                // The binary names the machine it runs on; both hosts are this one.
                host: sessionstore::config::host_name(),
            };
            let (_, path) = check_attachment(block, &expect);
            assert!(
                path.starts_with(reader),
                "the path is the reading host's own: {path:?}"
            );
        }
    }
    let verified = host(&b, &shared, &["verify"]);
    assert!(verified.status.success(), "{}", stdout(&verified));
}

/// One writer process: `WRITERS` tasks on one store, writer `w` appending
/// `SESSIONSTORE_MH_WRITES` messages to the session it is given; prints `ACK <session> <message>` per commit
/// and `ERR <message>` per error a caller saw.
#[test]
#[ignore = "a child process of the multi-host test, run by it"]
fn writer_process() {
    let Ok(db) = std::env::var("SESSIONSTORE_MH_DB") else {
        return;
    };
    let var = |k: &str| std::env::var(k).expect("the parent sets every variable");
    let config = Config {
        database: db.into(),
        roots: Roots {
            configured: PathBuf::from(var("SESSIONSTORE_MH_ROOT")),
            legacy: vec![],
        },
        host: format!("host-{}", var("SESSIONSTORE_MH_HOST")),
        sharing: Default::default(),
        key: None,
        redaction: Default::default(),
    };
    let sessions: Vec<SessionId> = var("SESSIONSTORE_MH_SESSIONS")
        .split(',')
        .map(|s| s.parse().expect("a session id"))
        .collect();
    let writes: usize = var("SESSIONSTORE_MH_WRITES").parse().expect("a count");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let store = Store::open_as(config, Access::Existing)
            .await
            .expect("the store opens");
        let tasks: Vec<_> = sessions
            .into_iter()
            .enumerate()
            .map(|(w, session)| {
                let store = store.clone();
                let uri = AttachmentUri::new(session, "shared.txt");
                let host = var("SESSIONSTORE_MH_HOST");
                tokio::spawn(async move {
                    let mut lines = Vec::with_capacity(writes);
                    for n in 0..writes {
                        let mut out = Outgoing::user(format!("host {host} writer {w} write {n}"));
                        if n % 10 == 0 {
                            out.attach = vec![uri.clone()];
                        }
                        let start = std::time::Instant::now();
                        match store.send(session, out).await {
                            Ok(m) => lines.push(format!(
                                "ACK {session} {} {}",
                                m.id,
                                start.elapsed().as_micros()
                            )),
                            Err(e) => lines.push(format!("ERR {}", chain(&e))),
                        }
                    }
                    lines
                })
            })
            .collect();
        for task in tasks {
            for line in task.await.expect("a writer task") {
                println!("{line}");
            }
        }
    });
}

/// An error with its causes, on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text.replace('\n', " ")
}

/// Eight writers, four in each of two processes, append to two sessions at once (each
/// session written from both processes). Afterwards every acknowledged message is
/// stored exactly once, each session's history runs 1..n with no gap or repeat, the
/// event log agrees, `verify` is clean, and no writer saw an error.
async fn eight_writers_in_two_processes_lose_nothing_and_never_fail(b: TestStore) {
    let store = b.open().await;
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let s = store.create_session(NewSession::default()).await.unwrap();
        store
            .attach_one(s.id, "shared.txt".into(), b"shared".to_vec())
            .await
            .unwrap();
        sessions.push(s.id);
    }
    let root = b.configured().display().to_string();
    let writes = writes_each();
    let started = std::time::Instant::now();
    let children: Vec<_> = (0..PROCESSES)
        .map(|p| {
            // Writer w of every process goes to session w % SESSIONS.
            let mine: Vec<String> = (0..WRITERS)
                .map(|w| sessions[w % SESSIONS].to_string())
                .collect();
            let mut writer = Bin::reexec(WRITER);
            writer
                .envs([
                    ("SESSIONSTORE_MH_DB", b.db()),
                    ("SESSIONSTORE_MH_ROOT", &root),
                    ("SESSIONSTORE_MH_HOST", &p.to_string()),
                    ("SESSIONSTORE_MH_SESSIONS", &mine.join(",")),
                    ("SESSIONSTORE_MH_WRITES", &writes.to_string()),
                ])
                .timeout(Duration::from_secs(600));
            std::thread::spawn(move || writer.bounded())
        })
        .collect();
    let outputs: Vec<_> = children.into_iter().map(|c| c.join().unwrap()).collect();

    let mut acked: HashMap<SessionId, Vec<String>> = HashMap::new();
    let mut errors = Vec::new();
    let mut latencies = Vec::new();
    for out in outputs {
        let out = out.expect("a writer process hung");
        assert!(out.status.success(), "a writer process failed: {out:?}");
        for line in stdout(&out).lines() {
            // libtest prints `test <name> ... ` with no newline before the test's own
            // output, so the first line starts with that.
            let line = line
                .find("ACK ")
                .or(line.find("ERR "))
                .map_or(line, |i| &line[i..]);
            if let Some(rest) = line.strip_prefix("ACK ") {
                let mut words = rest.split(' ');
                let (session, id) = (words.next().unwrap(), words.next().unwrap());
                latencies.push(Duration::from_micros(
                    words.next().unwrap().parse().unwrap(),
                ));
                acked
                    .entry(session.parse().unwrap())
                    .or_default()
                    .push(id.to_owned());
            } else if let Some(e) = line.strip_prefix("ERR ") {
                errors.push(e.to_owned());
            }
        }
    }
    latencies.sort();
    println!(
        "multihost ({}): {} writes, {} errors, {:.0} writes/s, latency p50 {:?} p99 {:?} max {:?}",
        if b.is_postgres() {
            "postgres"
        } else {
            "sqlite"
        },
        latencies.len(),
        errors.len(),
        latencies.len() as f64 / started.elapsed().as_secs_f64(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default(),
    );
    assert!(
        errors.is_empty(),
        "{} errors reached a caller, first: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    let per_session = writes * WRITERS * PROCESSES / SESSIONS;
    for s in &sessions {
        let acked = acked.get(s).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(acked.len(), per_session, "every write was acknowledged");
        let messages = store.all_messages(*s).await.unwrap();
        let stored: Vec<String> = messages.iter().map(|m| m.id.to_string()).collect();
        let distinct: HashSet<&String> = stored.iter().collect();
        assert_eq!(distinct.len(), stored.len(), "a message is stored twice");
        assert_eq!(
            distinct,
            acked.iter().collect::<HashSet<_>>(),
            "the stored messages are exactly the acknowledged ones"
        );
        let seqs: Vec<i64> = messages.iter().map(|m| m.seq).collect();
        let want: Vec<i64> = (1..=per_session as i64).collect();
        assert_eq!(seqs, want, "the history runs 1..n with no gap or repeat");
        // The session's own event numbers run 1..n as well, with one append per
        // message among them.
        let events = store.all_events(*s).await.unwrap();
        let event_seqs: Vec<i64> = events.iter().map(|e| e.session_seq).collect();
        let want: Vec<i64> = (1..=events.len() as i64).collect();
        assert_eq!(event_seqs, want);
        let appended = events
            .iter()
            .filter(|e| e.kind == "message_appended")
            .count();
        assert_eq!(appended, per_session);
        // Each writer's messages are in the order it sent them.
        for host in 0..PROCESSES {
            for w in 0..WRITERS {
                let prefix = format!("host {host} writer {w} write ");
                let ns: Vec<usize> = messages
                    .iter()
                    .filter_map(|m| m.display_text.strip_prefix(&prefix))
                    .map(|n| n.parse().unwrap())
                    .collect();
                if sessions[w % SESSIONS] == *s {
                    assert_eq!(ns, (0..writes).collect::<Vec<_>>(), "{prefix}");
                }
            }
        }
    }
    let report = store.verify(Verify::Check).await.unwrap().after;
    assert!(report.ok(), "verify: {:?}", report.problems);
    assert_eq!(report.messages, per_session * SESSIONS);
    drop(store);
    // The binary's own verify, on the same database, agrees.
    let verified = b.run(&["verify"]);
    assert!(verified.status.success(), "{}", stdout(&verified));
}
