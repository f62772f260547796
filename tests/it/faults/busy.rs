//! The store schedules no thread: the proxy's writer runs as the ordinary thread it was
//! started as, beside the relay's (issue 45: a plain writer; the idle scheduling class
//! it once moved into is gone).

use super::Proxy;
use crate::support::TestStore;

/// The scheduling policy of each thread of process `pid` named `name` (Linux: field
/// 41 of `/proc/<pid>/task/<tid>/stat`; 0 is `SCHED_OTHER`, 5 `SCHED_IDLE`).
fn policies(pid: u32, name: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let task = task.unwrap().path();
        let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.join("stat")).unwrap();
        // The fields after the command name, which may hold spaces, in parentheses.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        out.push(after.split(' ').nth(41 - 3).unwrap().parse().unwrap());
    }
    out
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread")]
async fn the_proxys_writer_and_relay_are_ordinary_threads() {
    let t = TestStore::new().await;
    let mut p = Proxy::start_with(&t, &[], &[], &[]);
    p.ok("initialize", serde_json::json!({"protocolVersion": 1}));
    // A write, so the writer has run a group.
    let session = p.new_session(t.dir.path());
    assert!(!session.is_empty());
    let writer = policies(p.pid(), "sessionstore-wr");
    assert_eq!(writer, [0], "the writer's scheduling policy");
    let relay = policies(p.pid(), "tokio-rt-worker");
    assert!(
        !relay.is_empty() && relay.iter().all(|&p| p == 0),
        "{relay:?}"
    );
    p.finish();
}
