//! The disk filling up under the proxy, mid-turn: the client gets an error for the
//! turn that could not be made durable, nothing acknowledged before is lost, `verify`
//! stays clean, and the next turn works once there is room again. Twice: through the
//! store's fault-injection hook (`SESSIONSTORE_TEST_FULL_DISK`, every commit failing
//! as on a full disk; any machine) and on a real small filesystem (a tmpfs mounted
//! for the test, where the machine lets the test mount one).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use sessionstore::model::TurnEnd;
use sessionstore::{Config, SessionId, Store};

use crate::support::Bin;

/// The real proxy in front of the test agent, driven line by line over its stdio.
struct Proxy {
    child: Child,
    input: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    next_id: u64,
}

impl Proxy {
    fn start(db: &Path, root: &Path, home: &Path, env: &[(&str, &Path)]) -> Proxy {
        let mut bin = Bin::new(home);
        bin.arg("--db")
            .arg(db)
            .arg("--attachments-root")
            .arg(root)
            .args(["proxy", "--"])
            .arg(env!("CARGO_BIN_EXE_sessionstore-test-agent"))
            .current_dir(home);
        for (key, value) in env {
            bin.env(key, value);
        }
        // stdin and stdout piped; the proxy's log goes where the test's does.
        let mut child = bin.stderr(Stdio::inherit()).spawn();
        let stdout = child.stdout.take().expect("piped");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let Ok(value) = serde_json::from_str(&line) else {
                    panic!("the proxy wrote a line that is not JSON: {line}");
                };
                if send.send(value).is_err() {
                    break;
                }
            }
        });
        Proxy {
            input: child.stdin.take(),
            child,
            lines,
            next_id: 0,
        }
    }

    /// Sends a request and waits (60 s at most) for its answer, the whole message.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.request_seeing(method, params, |_| {})
    }

    /// `request`, calling `seen` with the number of `session/update`s read so far as
    /// each arrives.
    fn request_seeing(
        &mut self,
        method: &str,
        params: Value,
        mut seen: impl FnMut(usize),
    ) -> Value {
        let mut updates = 0;
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let input = self.input.as_mut().expect("the proxy's stdin is open");
        writeln!(input, "{line}").expect("the proxy reads its stdin");
        loop {
            let message = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("no answer to {method} within 60 s"));
            if message["id"] == json!(id) && message.get("method").is_none() {
                return message;
            }
            if message["method"] == "session/update" {
                updates += 1;
                seen(updates);
            }
        }
    }

    fn ok(&mut self, method: &str, params: Value) -> Value {
        let answer = self.request(method, params);
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    fn prompt(&mut self, session: &Value, text: &str) -> Value {
        self.request(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
        )
    }

    /// Closes the proxy's stdin, as a client that goes, and waits for it to end.
    fn finish(mut self) {
        self.input.take();
        let status = self.child.wait().expect("the proxy ends");
        assert!(status.success(), "the proxy ended with {status}");
    }
}

/// What a test does to the disk: make writes fail, and give room back.
trait Disk {
    fn fill(&self);
    fn free(&self);
}

/// One run: a turn acknowledged, the disk filled, a turn refused, room given back, a
/// turn acknowledged; then the store as a fresh process finds it.
fn a_full_disk_mid_turn(folder: &Path, home: &Path, env: &[(&str, &Path)], disk: &dyn Disk) {
    let db = folder.join("sessions.db");
    let root = folder.join("attachments");
    let mut proxy = Proxy::start(&db, &root, home, env);
    proxy.ok("initialize", json!({"protocolVersion": 1}));
    let created = proxy.ok("session/new", json!({"cwd": home, "mcpServers": []}));
    let session = created["sessionId"].clone();
    let first = proxy.prompt(&session, "stream 200");
    assert_eq!(first["result"]["stopReason"], "end_turn", "{first}");

    // The disk fills while the agent streams: once the client has seen a thousand
    // of its chunks, the rest cannot be recorded.
    let refused = proxy.request_seeing(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "stream 20000"}]}),
        |n| {
            if n == 1000 {
                disk.fill();
            }
        },
    );
    let error = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        error.contains("full"),
        "the client is told the disk is full: {refused}"
    );

    disk.free();
    let again = proxy.prompt(&session, "stream 50");
    assert_eq!(again["result"]["stopReason"], "end_turn", "{again}");
    proxy.finish();

    let verified = Bin::new(home)
        .arg("--db")
        .arg(&db)
        .arg("--attachments-root")
        .arg(&root)
        .arg("verify")
        .output();
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open_read_only(Config::in_dir(folder)).await.unwrap();
        let id: SessionId = session.as_str().unwrap().parse().unwrap();
        let turns = store.turns(id).await.unwrap();
        // The refused turn may have no turn row at all (its prompt could not be
        // stored) or one that did not end well; the acknowledged ones are whole.
        let ended: Vec<&TurnEnd> = turns.iter().filter_map(|t| t.end.as_ref()).collect();
        assert!(
            ended
                .iter()
                .filter(
                    |e| matches!(e, TurnEnd::Stopped { stop_reason } if stop_reason == "end_turn")
                )
                .count()
                == 2,
            "{turns:?}"
        );
        let items = store.items(id).await.unwrap();
        let text: String = items.iter().map(|i| format!("{:?}", i.body)).collect();
        for n in [0, 199] {
            assert!(
                text.contains(&format!("chunk {n:>8} ")),
                "chunk {n} of the first turn"
            );
        }
        assert!(
            text.contains(&format!("chunk {:>8} ", 49)),
            "the last turn's chunks"
        );
        // The refused turn kept at most a prefix: its last chunk was never recorded.
        assert!(
            !text.contains(&format!("chunk {:>8} ", 19_999)),
            "the turn that met the full disk was not recorded whole"
        );
        let refused_turns = turns.iter().filter(|t| t.state() != "ended").count();
        assert!(refused_turns <= 1, "{turns:?}");
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
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("disk-is-full");
    a_full_disk_mid_turn(
        dir.path(),
        dir.path(),
        &[("SESSIONSTORE_TEST_FULL_DISK", &flag)],
        &FlagFile(flag.clone()),
    );
}

/// A tmpfs of a few MiB, filled by a file that takes what is left but a little.
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
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("small");
    std::fs::create_dir(&mount).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=8m", "tmpfs"])
        .arg(&mount)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!(
            "a_real_full_disk_mid_turn: this machine does not let the test mount a tmpfs; the fault hook's test covers the case"
        );
        return;
    }
    let disk = SmallDisk {
        filler: mount.join("filler"),
        mount: mount.clone(),
    };
    a_full_disk_mid_turn(&mount, dir.path(), &[], &disk);
}
