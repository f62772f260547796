//! Concurrency suite: writers in several processes, several threads each, on one
//! database file; every error that reaches a caller is counted, every acknowledged
//! write is looked up afterwards, and commit latencies are reported. It never retries
//! on the writers' behalf.

use sessionstore::store::{Access, Verify};
use std::collections::HashSet;
use std::time::{Duration, Instant};

use sessionstore::store::Outgoing;
use sessionstore::{SessionId, Store};

use crate::support::Whole;
use crate::support::{Bin, TestStore, config_in, count, percentile};

const CHILD: &str = "reliability::concurrency::child";

/// One writer process: `SESSIONSTORE_WRITERS` tasks, each sending `SESSIONSTORE_WRITES`
/// messages to its session, printing `ACK <id> <micros>` per commit or `ERR <message>`.
#[test]
#[ignore = "a child process of the concurrency suite, run by it"]
fn child() {
    let Ok(dir) = std::env::var("SESSIONSTORE_CONC_DIR") else {
        return;
    };
    let var = |k: &str| std::env::var(k).expect("the parent sets every variable");
    let sessions: Vec<SessionId> = var("SESSIONSTORE_CONC_SESSIONS")
        .split(',')
        .map(|s| s.parse().expect("a session id"))
        .collect();
    let writes: usize = var("SESSIONSTORE_CONC_WRITES").parse().expect("a count");
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    rt.block_on(async {
        let store = Store::open_as(config_in(std::path::Path::new(&dir)), Access::Existing)
            .await
            .expect("the store opens");
        let tasks: Vec<_> = sessions
            .into_iter()
            .enumerate()
            .map(|(w, session)| {
                let store = store.clone();
                let uri = sessionstore::attachments::AttachmentUri::new(session, "shared.txt");
                tokio::spawn(async move {
                    let mut lines = Vec::with_capacity(writes);
                    for n in 0..writes {
                        let mut out = Outgoing::user(format!("writer {w} write {n}"));
                        if n % 10 == 0 {
                            out.attach = vec![uri.clone()];
                        }
                        let start = Instant::now();
                        match store.send(session, out).await {
                            Ok(m) => {
                                lines.push(format!("ACK {} {}", m.id, start.elapsed().as_micros()))
                            }
                            Err(e) => {
                                lines.push(format!("ERR {}", e.to_string().replace('\n', " ")))
                            }
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

/// Runs `total` writes from `writers` writers spread over `processes` processes.
fn writers_in_processes(total: usize, writers: usize, processes: usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = rt.block_on(TestStore::new());
    // Writers share sessions two by two, so sequence numbers are contended too.
    let sessions: Vec<SessionId> = (0..writers.div_ceil(2))
        .map(|_| rt.block_on(t.session()))
        .collect();
    // A reference must name its own session, so every session gets the file.
    for s in &sessions {
        assert_eq!(
            rt.block_on(t.upload(*s, "shared.txt", b"shared")).name,
            "shared.txt"
        );
    }
    let per_writer = total / writers;
    let per_process = writers / processes;
    let dir = t.dir.path().to_str().unwrap().to_owned();
    let start = Instant::now();
    let children: Vec<_> = (0..processes)
        .map(|p| {
            let mine: Vec<String> = (0..per_process)
                .map(|i| sessions[(p * per_process + i) / 2].to_string())
                .collect();
            let mut child = Bin::reexec(CHILD);
            child
                .envs([
                    ("SESSIONSTORE_CONC_DIR", dir.as_str()),
                    ("SESSIONSTORE_CONC_SESSIONS", &mine.join(",")),
                    ("SESSIONSTORE_CONC_WRITES", &per_writer.to_string()),
                ])
                .timeout(Duration::from_secs(1200));
            std::thread::spawn(move || child.bounded())
        })
        .collect();
    let outputs: Vec<_> = children.into_iter().map(|c| c.join().unwrap()).collect();
    let wall = start.elapsed();
    let (mut acked, mut errors, mut latencies) = (HashSet::new(), Vec::new(), Vec::new());
    for out in outputs {
        let out = out.expect("a writer process hung");
        assert!(out.status.success(), "a writer process failed: {out:?}");
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            // libtest prints `test <name> ... ` with no newline before the test's own
            // output, so the first line starts with that.
            let line = line
                .find("ACK ")
                .or(line.find("ERR "))
                .map_or(line, |i| &line[i..]);
            if let Some(rest) = line.strip_prefix("ACK ") {
                let (id, micros) = rest.split_once(' ').unwrap();
                acked.insert(id.to_owned());
                latencies.push(Duration::from_micros(micros.parse().unwrap()));
            } else if let Some(e) = line.strip_prefix("ERR ") {
                errors.push(e.to_owned());
            }
        }
    }
    let mut stored = HashSet::new();
    for s in &sessions {
        for m in rt.block_on(t.store().all_messages(*s)).unwrap() {
            stored.insert(m.id.to_string());
        }
    }
    let report = rt.block_on(t.store().verify(Verify::Check)).unwrap().after;
    latencies.sort();
    let lost = acked.difference(&stored).count();
    println!(
        "concurrency: {writers} writers in {processes} processes, writes {}, errors {}, lost {lost}, \
         {:.0} writes/s, commit latency p50 {:?} p99 {:?} max {:?}",
        acked.len(),
        errors.len(),
        acked.len() as f64 / wall.as_secs_f64(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default(),
    );
    assert!(
        errors.is_empty(),
        "errors reached a caller: {:?}",
        &errors[..errors.len().min(5)]
    );
    assert_eq!(
        latencies.len(),
        per_writer * writers,
        "every write was acknowledged"
    );
    assert_eq!(
        acked.len(),
        latencies.len(),
        "every acknowledged id is distinct"
    );
    assert_eq!(lost, 0, "acknowledged writes were lost");
    assert!(report.ok(), "verify: {:?}", report.problems);
}

#[test]
fn eight_writers_in_two_processes_lose_nothing_and_never_fail() {
    writers_in_processes(count("SESSIONSTORE_CONC_WRITES_TOTAL", 200, 10_000), 8, 2);
}
