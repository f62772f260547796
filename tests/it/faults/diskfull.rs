//! The disk filling up mid-turn: the client gets an error for the turn that could not
//! be made durable, nothing acknowledged before is lost, `verify` stays clean, and the
//! next turn works once there is room again. Twice: through the store's fault hook
//! (`SESSIONSTORE_TEST_FULL_DISK`: every commit fails as on a full disk; any machine)
//! and on a real small filesystem (a tmpfs the test mounts, where the machine lets it).

use sessionstore::store::Access;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::json;
use sessionstore::model::TurnEnd;
use sessionstore::{Config, SessionId, Store};

use super::{Proxy, prompt, verified};
use crate::support::TestStore;
use crate::support::Whole;

/// What a test does to the disk: make writes fail, and give room back.
trait Disk {
    fn fill(&self);
    fn free(&self);
}

/// One run on `t`: a turn acknowledged, the disk filled while the agent streams the
/// next, room given back, a turn acknowledged; then the store as a fresh process
/// finds it.
fn a_full_disk_mid_turn(t: &TestStore, env: &[(&str, &Path)], disk: &dyn Disk) {
    let mut proxy = Proxy::start_with(t, &[], &[], env);
    let session = proxy.new_session(t.dir.path());
    let first = proxy.request("session/prompt", prompt(&session, "stream 200"));
    assert_eq!(first.unwrap()["result"]["stopReason"], "end_turn");

    // Once the client has seen a thousand of the agent's chunks, the rest cannot be
    // recorded.
    let id = json!(
        proxy
            .send("session/prompt", prompt(&session, "stream 20000"))
            .unwrap()
    );
    let mut updates = 0;
    let refused = loop {
        let message = proxy.next().expect("the proxy answers");
        if message["method"] == "session/update" {
            updates += 1;
            if updates == 1000 {
                disk.fill();
            }
        } else if message["id"] == id && message.get("method").is_none() {
            break message;
        }
    };
    let error = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        error.contains("full"),
        "the client is told the disk is full: {refused}"
    );

    disk.free();
    let again = proxy.request("session/prompt", prompt(&session, "stream 50"));
    assert_eq!(again.unwrap()["result"]["stopReason"], "end_turn");
    assert!(proxy.finish().success());
    verified(t);

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open_as(t.config.clone(), Access::ReadOnly).await.unwrap();
        let id: SessionId = session.parse().unwrap();
        let turns = store.all_turns(id).await.unwrap();
        // The refused turn may have no turn row at all (its prompt could not be
        // stored) or one that did not end well; the acknowledged ones are whole.
        let ended = turns
            .iter()
            .filter(|t| matches!(&t.end, Some(TurnEnd::Stopped { stop_reason }) if stop_reason == "end_turn"))
            .count();
        assert_eq!(ended, 2, "{turns:?}");
        assert!(turns.iter().filter(|t| t.state() != "ended").count() <= 1, "{turns:?}");
        let text: String = store
            .all_items(id)
            .await
            .unwrap()
            .iter()
            .map(|i| format!("{:?}", i.body))
            .collect();
        for n in [0, 199] {
            assert!(text.contains(&format!("chunk {n:>8} ")), "chunk {n} of the first turn");
        }
        assert!(text.contains(&format!("chunk {:>8} ", 49)), "the last turn's chunks");
        // The refused turn kept at most a prefix: its last chunk was never recorded.
        assert!(
            !text.contains(&format!("chunk {:>8} ", 19_999)),
            "the turn that met the full disk was not recorded whole"
        );
    });
}

struct FlagFile(PathBuf);

impl Disk for FlagFile {
    fn fill(&self) {
        std::fs::write(&self.0, b"").unwrap();
    }
    fn free(&self) {
        std::fs::remove_file(&self.0).unwrap();
    }
}

#[test]
fn a_disk_full_mid_turn_through_the_fault_hook_loses_nothing_acknowledged() {
    let t = TestStore::empty();
    let flag = FlagFile(t.dir.path().join("disk-is-full"));
    a_full_disk_mid_turn(&t, &[("SESSIONSTORE_TEST_FULL_DISK", &flag.0)], &flag);
}

/// A tmpfs of a few MiB, filled by a file that takes all that is left.
struct SmallDisk {
    mount: PathBuf,
    filler: PathBuf,
}

impl Disk for SmallDisk {
    fn fill(&self) {
        let mut file = std::fs::File::create(&self.filler).unwrap();
        let block = vec![0u8; 16 * 1024];
        while file.write_all(&block).is_ok() {}
    }
    fn free(&self) {
        std::fs::remove_file(&self.filler).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

#[test]
fn a_real_full_disk_mid_turn_loses_nothing_acknowledged() {
    let mut t = TestStore::empty();
    let mount = t.dir.path().join("small");
    std::fs::create_dir(&mount).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(&mount)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!(
            "a_real_full_disk_mid_turn: this machine does not let the test mount a tmpfs; \
             the fault hook's test covers the case"
        );
        return;
    }
    let disk = SmallDisk {
        filler: mount.join("filler"),
        mount: mount.clone(),
    };
    // The database and the attachments on the small disk; the logs beside it.
    t.config = Config::in_dir(&mount);
    a_full_disk_mid_turn(&t, &[], &disk);
}
