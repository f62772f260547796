//! Runs one bench workload a given number of times, for `valgrind --tool=callgrind`:
//! instruction counts repeat from run to run where wall-clock times on a busy machine
//! do not. It builds its data in a folder first (`setup`), so a counted run only opens
//! the store and repeats the workload; the count of a run with 0 repetitions is the
//! fixed cost to subtract. It prints nothing and times nothing. See BENCHMARKS.md.
//!
//! ```text
//! cargo build --release --example callgrind
//! target/release/examples/callgrind setup DIR
//! valgrind --tool=callgrind target/release/examples/callgrind restore DIR 3
//! ```

#[path = "../benches/workload/mod.rs"]
mod workload;

use std::path::Path;

use sessionstore::attachments::AttachmentUri;
use sessionstore::model::Role;
use tokio::runtime::Runtime;
use workload::Fixture;

const USAGE: &str = "usage: callgrind setup DIR | callgrind WORKLOAD DIR N, where WORKLOAD is \
                     restore, restore-baseline, dispatch, dispatch-baseline, dispatch-typed, \
                     dispatch-typed-kept, dispatch-vec, sdk-send, sdk-baseline, frame, \
                     send-text, send-refs, record-chunk, raw-append or restore-text";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = Runtime::new().expect("a runtime");
    match args.as_slice() {
        [setup, dir] if setup == "setup" => self::setup(&rt, Path::new(dir)),
        [workload, dir, n] => {
            let n: usize = n.parse().expect("N is a count");
            run(&rt, workload, Path::new(dir), n);
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
}

/// One store per group, in `dir/<group>`, plus a second, empty one for the raw
/// append baseline so that it writes into a database of the same schema.
fn setup(rt: &Runtime, dir: &Path) {
    let folder = |name: &str| {
        let path = dir.join(name);
        std::fs::create_dir_all(&path).expect("a fixture folder");
        path
    };
    let append = Fixture::create(rt, &folder("append"));
    workload::append_refs(rt, &append);
    Fixture::create(rt, &folder("raw"));
    workload::build_restore(rt, &Fixture::create(rt, &folder("restore")));
    workload::build_dispatch(rt, &Fixture::create(rt, &folder("dispatch")));
    build_text(rt, &Fixture::create(rt, &folder("text")));
}

/// The `restore-text` history, recorded text only: 10,000 agent messages of about 80
/// bytes under a `messageId` each (`longhist`'s shape, a user message every 1,000),
/// then one message streamed in 2,000 chunks of 100 at a time, ended by a user message.
fn build_text(rt: &Runtime, f: &Fixture) {
    let record = |batch: Vec<serde_json::Value>| {
        rt.block_on(
            f.store
                .record(f.session, sessionstore::record::Values(batch)),
        )
        .expect("record");
    };
    for turn in 0..10 {
        f.send(rt, Role::User, &format!("turn {turn}"), &[]);
        record(
            (turn * 1000..(turn + 1) * 1000)
                .map(|i| {
                    let text: String = format!("word{i:07} ").repeat(8).chars().take(80).collect();
                    serde_json::json!({"sessionUpdate": "agent_message_chunk",
                        "messageId": format!("m-{i:09}"),
                        "content": {"type": "text", "text": text}})
                })
                .collect(),
        );
    }
    f.send(rt, Role::User, "stream", &[]);
    for start in (0..2000).step_by(100) {
        record(
            (start..start + 100)
                .map(|i| {
                    serde_json::json!({"sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": format!("{i:020} chunk of a streamed answer. ")}})
                })
                .collect(),
        );
    }
    f.send(rt, Role::User, "done", &[]);
}

fn run(rt: &Runtime, workload: &str, dir: &Path, n: usize) {
    match workload {
        "restore" => {
            let f = Fixture::open(rt, &dir.join("restore"));
            for _ in 0..n {
                workload::restore_store(rt, &f);
            }
        }
        // A restore of recorded text only: the rows' bodies, parts and updates read back.
        "restore-text" => {
            let f = Fixture::open(rt, &dir.join("text"));
            for _ in 0..n {
                workload::restore_store(rt, &f);
            }
        }
        "restore-baseline" => {
            let f = Fixture::open(rt, &dir.join("restore"));
            let conn = workload::raw_connection(&f.dir.join("sessions.db"));
            let session = f.session.to_string();
            for _ in 0..n {
                workload::restore_baseline(&conn, &session, &f.folder());
            }
        }
        "dispatch" => {
            let f = Fixture::open(rt, &dir.join("dispatch"));
            for _ in 0..n {
                workload::dispatch_store(rt, &f);
            }
        }
        "dispatch-typed" | "dispatch-typed-kept" | "dispatch-vec" => {
            let f = Fixture::open(rt, &dir.join("dispatch"));
            for _ in 0..n {
                match workload {
                    "dispatch-typed" => drop(workload::dispatch_typed(rt, &f)),
                    "dispatch-typed-kept" => drop(workload::dispatch_typed_kept(rt, &f)),
                    _ => drop(workload::dispatch_store_vec(rt, &f)),
                }
            }
        }
        // The serialization workloads build their blocks and parts once, outside the
        // repetitions: subtract the count of a run with 0 repetitions.
        "sdk-send" | "sdk-baseline" | "frame" => {
            let f = Fixture::open(rt, &dir.join("dispatch"));
            let typed = workload::dispatch_typed(rt, &f);
            let request = agent_client_protocol_schema::v1::PromptRequest::new(
                f.session.to_string(),
                typed.blocks,
            );
            let parts = workload::dispatch_parts(rt, &f);
            let prebuilt = "A".repeat(workload::frame(&f, &parts.parts).len());
            for _ in 0..n {
                match workload {
                    "sdk-send" => drop(workload::sdk_send(&request)),
                    "sdk-baseline" => drop(workload::value_baseline(&prebuilt)),
                    _ => drop(workload::frame(&f, &parts.parts)),
                }
            }
        }
        "dispatch-baseline" => {
            let f = Fixture::open(rt, &dir.join("dispatch"));
            let paths = workload::dispatch_paths(&f);
            for _ in 0..n {
                workload::dispatch_baseline(&paths);
            }
        }
        "send-text" | "send-refs" => {
            let f = Fixture::open(rt, &dir.join("append"));
            let refs = if workload == "send-refs" {
                (0..2)
                    .map(|i| AttachmentUri::new(f.session, &format!("ref{i}.bin")))
                    .collect()
            } else {
                vec![]
            };
            for _ in 0..n {
                f.send(rt, Role::User, "hello", &refs);
            }
        }
        // One chunk of a streamed answer a write, as a session streaming at an agent's
        // pace is recorded: what one write costs beyond its update.
        "record-chunk" => {
            let f = Fixture::open(rt, &dir.join("append"));
            for i in 0..n {
                let chunk = serde_json::json!({"sessionUpdate": "agent_message_chunk",
                    "content": {"type": "text", "text": format!("{i:020} chunk of a streamed answer. ")}});
                rt.block_on(
                    f.store
                        .record(f.session, sessionstore::record::Values(vec![chunk])),
                )
                .expect("record");
            }
        }
        "raw-append" => {
            let f = Fixture::open(rt, &dir.join("raw"));
            let mut conn = workload::raw_connection(&f.dir.join("sessions.db"));
            let session = f.session.to_string();
            for _ in 0..n {
                workload::raw_append(&mut conn, &session, "hello");
            }
        }
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    }
}
