//! The proxy under faults: the real `sessionstore proxy` binary in front of the test
//! agent, driven over its standard input and output as an editor would, then killed,
//! starved, flooded or abandoned; each test ends with the store checked (`verify`) and
//! what was acknowledged still there. It never mocks the agent's transport or the
//! store.

mod agent;
mod busy;
mod client;
mod diskfull;
mod frames;
mod kills;
mod owners;

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Bin, TestStore, db_arg};

/// How long a test waits for any one answer of the proxy.
const ANSWER: Duration = Duration::from_secs(60);

/// A running proxy and the client's ends of its standard input and output.
pub struct Proxy {
    child: Child,
    to: Option<ChildStdin>,
    from: mpsc::Receiver<Value>,
    next_id: u64,
    /// Notifications and requests the proxy sent, in order, as they were read.
    pub seen: Vec<Value>,
}

/// The test agent's path.
fn test_agent() -> &'static str {
    env!("CARGO_BIN_EXE_sessionstore-test-agent")
}

impl Proxy {
    /// `sessionstore proxy [flags] -- sessionstore-test-agent [agent]` on the store of
    /// `t`, in its folder; its standard error goes to `proxy-<n>.log` there.
    pub fn start(t: &TestStore, flags: &[&str], agent: &[&str]) -> Proxy {
        Proxy::start_with(t, flags, agent, &[])
    }

    /// [`Proxy::start`] with `env` set for the proxy (a fault hook's variable).
    pub fn start_with(
        t: &TestStore,
        flags: &[&str],
        agent: &[&str],
        env: &[(&str, &std::path::Path)],
    ) -> Proxy {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = std::fs::File::create(t.dir.path().join(format!("proxy-{n}.log")))
            .expect("the log file opens");
        let db = db_arg(&t.config.database);
        let mut bin = Bin::new(t.dir.path());
        bin.arg("proxy")
            .arg("--db")
            .arg(db)
            .arg("--attachments-root")
            .arg(&t.config.roots.configured)
            .args(flags)
            .arg("--")
            .arg(test_agent())
            .args(agent)
            .current_dir(t.dir.path())
            .env("RUST_LOG", "warn")
            .stderr(Stdio::from(log));
        for (key, value) in env {
            bin.env(key, value);
        }
        let mut child = bin.spawn();
        let to = child.stdin.take();
        let out = child.stdout.take().expect("piped stdout");
        let (sent, from) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let message = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("the proxy wrote a line that is not JSON ({e}): {line}")
                });
                if sent.send(message).is_err() {
                    break;
                }
            }
        });
        Proxy {
            child,
            to,
            from,
            next_id: 0,
            seen: Vec::new(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes `bytes` to the proxy's standard input as they are; false when it is gone.
    pub fn write_raw(&mut self, bytes: &[u8]) -> bool {
        let Some(to) = self.to.as_mut() else {
            return false;
        };
        to.write_all(bytes).and_then(|()| to.flush()).is_ok()
    }

    pub fn notify(&mut self, method: &str, params: Value) -> bool {
        let line = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.write_raw(format!("{line}\n").as_bytes())
    }

    /// Sends a request and returns its id, without waiting for the answer.
    pub fn send(&mut self, method: &str, params: Value) -> Option<u64> {
        self.next_id += 1;
        let id = self.next_id;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.write_raw(format!("{line}\n").as_bytes()).then_some(id)
    }

    /// The next message the proxy writes, within `ANSWER`; `None` once it is gone.
    /// A request of the agent's is answered as an editor would: a permission allowed,
    /// anything else refused as unknown.
    pub fn next(&mut self) -> Option<Value> {
        let message = self.from.recv_timeout(ANSWER).ok()?;
        self.seen.push(message.clone());
        if let (Some(id), Some(method)) = (message.get("id"), message["method"].as_str()) {
            let answer = if method == "session/request_permission" {
                json!({"jsonrpc": "2.0", "id": id,
                       "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}})
            } else {
                json!({"jsonrpc": "2.0", "id": id,
                       "error": {"code": -32601, "message": "not an editor's"}})
            };
            self.write_raw(format!("{answer}\n").as_bytes());
        }
        Some(message)
    }

    /// The answer to request `id` (a result or an error), skipping what comes
    /// before it; `None` when the proxy went away first.
    pub fn answer(&mut self, id: &Value) -> Option<Value> {
        loop {
            let message = self.next()?;
            if &message["id"] == id && message.get("method").is_none() {
                return Some(message);
            }
        }
    }

    /// A request and its answer; `None` when the proxy went away first.
    pub fn request(&mut self, method: &str, params: Value) -> Option<Value> {
        let id = self.send(method, params)?;
        self.answer(&json!(id))
    }

    /// A request that must succeed: its result.
    pub fn ok(&mut self, method: &str, params: Value) -> Value {
        let answer = self
            .request(method, params)
            .unwrap_or_else(|| panic!("{method}: the proxy went away"));
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    /// `initialize`, then `session/new` in `cwd`: the new session's id.
    pub fn new_session(&mut self, cwd: &std::path::Path) -> String {
        self.ok("initialize", json!({"protocolVersion": 1}));
        let created = self.ok("session/new", json!({"cwd": cwd, "mcpServers": []}));
        created["sessionId"]
            .as_str()
            .expect("a session id")
            .to_owned()
    }

    /// Closes the proxy's standard input (the client goes) and waits for it to end.
    pub fn finish(mut self) -> std::process::ExitStatus {
        drop(self.to.take());
        let deadline = std::time::Instant::now() + ANSWER;
        loop {
            if let Some(status) = self.child.try_wait().expect("the proxy's status") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the proxy did not end when its client went"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The proxy's peak resident memory so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the proxy's /proc status reads");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("a VmHWM line");
        kib * 1024
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A prompt of one text block.
pub fn prompt(session: &str, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

/// `sessionstore verify` on the store of `t` succeeds.
pub fn verified(t: &TestStore) {
    let out = t.run(&["verify"]);
    assert!(
        out.status.success(),
        "verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
