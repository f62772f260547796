//! The proxy's relay comes before its writes: the store's writer thread yields the CPU
//! to every other thread (Linux's idle scheduling class) while it is not kept from
//! it, so an update is relayed without waiting behind a commit's work
//! (`db::group::Priority`; its unit test covers the return to a normal thread when the
//! writer waited for the CPU, which a loaded machine may make it do at any time).

use std::path::Path;

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
async fn the_proxys_writer_yields_the_cpu_to_the_relay() {
    let t = TestStore::new().await;
    let log = [("RUST_LOG", Path::new("sessionstore=debug"))];
    let mut p = Proxy::start_with(&t, &[], &[], &log);
    p.ok("initialize", serde_json::json!({"protocolVersion": 1}));
    // A write, so the writer has run a group since it was asked to yield.
    let session = p.new_session(t.dir.path());
    assert!(!session.is_empty());
    // Idle, or (on a machine busy enough to keep it waiting) normal again for a while.
    let writer = policies(p.pid(), "sessionstore-wr");
    assert!(writer == [5] || writer == [0], "{writer:?}");
    // The relay's own threads stay normal.
    let relay = policies(p.pid(), "tokio-rt-worker");
    assert!(
        !relay.is_empty() && relay.iter().all(|&p| p == 0),
        "{relay:?}"
    );
    p.finish();
    let logged: String = std::fs::read_dir(t.dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("proxy-")
        })
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert!(
        logged.contains("the store's writer yields the CPU"),
        "{logged}"
    );
}
