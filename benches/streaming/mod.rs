//! The `streaming` group (not criterion, and only when named: it streams millions of
//! updates): what a daemon does while agents stream, measured against baselines in the
//! same run.
//!
//! - Group commit: 1 to 16 sessions appending at once through one `Store` (each an
//!   awaited `record` of one chunk at a time), against raw rusqlite committing each
//!   append on its own (WAL, `synchronous = FULL`), measured just before each figure:
//!   writes and commits a second, and the p99 of one write's latency; 16 sessions the
//!   median of several alternated runs.
//! - Through the proxy: the release binary `sessionstore proxy -- sessionstore-test-agent`,
//!   one turn of 100,000 `agent_message_chunk`s (about 60 bytes each), then 16 sessions
//!   streaming 20,000 each at once, recording everything, against the same proxy with
//!   recording off (`--relay-only`, the relay alone): throughput, the median over
//!   several runs, and the database's commits a second; the one-session turn again with
//!   the client on a socket for each stream (as Node's `spawn` starts a child) rather
//!   than pipes.
//!   Then the p99 of the time from the agent writing a chunk to the client reading it
//!   (each chunk carries when it was written), with the agent streaming at a pace (`stream N at R`: one session at
//!   2,000 chunks a second, 16 at 125 each), since flat out its chunks wait in its own
//!   queue and the latency measures that queue.
//! - The proxy's peak resident memory while the client reads at a tenth of the agent's
//!   rate through a 100,000-update turn.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use sessionstore::Store;
use sessionstore::model::NewSession;
use tokio::runtime::Runtime;

use crate::Report;
use crate::workload::{self, MIB};

pub fn streaming(report: &mut Report, rt: &Runtime) {
    // `SESSIONSTORE_BENCH_PROXY=0` stops after group commit (the proxy part takes
    // minutes); `=latency` runs the proxy's latency part alone.
    let only = std::env::var("SESSIONSTORE_BENCH_PROXY").unwrap_or_default();
    if only == "latency" {
        latency(report, runs());
        return;
    }
    group_commit(report, rt);
    if only != "0" {
        proxied(report);
    }
}

/// The runs behind each of the proxy's medians (`SESSIONSTORE_BENCH_RUNS`, 3).
fn runs() -> usize {
    std::env::var("SESSIONSTORE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1)
}

/// A figure, printed as soon as it is measured (this group runs for minutes) and
/// kept for the report at the end.
fn say(report: &mut Report, line: String) {
    eprintln!("streaming: {line}");
    report.0.push(line);
}

fn chunk(text: &str) -> serde_json::Value {
    json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}})
}

fn p99(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Writes a second of raw rusqlite, one transaction (and fsync) per append, on a fresh
/// database each time, so that every measurement starts from the same file.
fn raw_commit_rate(rt: &Runtime) -> f64 {
    let dir = tempfile::tempdir().expect("a temp dir");
    let f = workload::Fixture::create(rt, dir.path());
    let mut conn = workload::raw_connection(&dir.path().join("sessions.db"));
    let session = f.session.to_string();
    let n = 1_000;
    let start = Instant::now();
    for i in 0..n {
        workload::raw_append(&mut conn, &session, &format!("append {i}"));
    }
    f64::from(n) / start.elapsed().as_secs_f64()
}

struct Appended {
    writes_per_s: f64,
    commits_per_s: f64,
    p99_ms: f64,
}

/// `sessions` sessions, each recording `each` chunks one awaited write at a time, all
/// at once through one store.
fn appending(store: &Store, rt: &Runtime, sessions: usize, each: usize) -> Appended {
    rt.block_on(async {
        let mut ids = Vec::new();
        for _ in 0..sessions {
            ids.push(
                store
                    .create_session(NewSession::default())
                    .await
                    .unwrap()
                    .id,
            );
        }
        let before = sessionstore::testkit::write_stats(store);
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for id in ids {
            let store = store.clone();
            tasks.spawn(async move {
                let mut latencies = Vec::with_capacity(each);
                for i in 0..each {
                    let at = Instant::now();
                    store
                        .record(
                            id,
                            sessionstore::record::Values(vec![chunk(&format!("piece {i} "))]),
                        )
                        .await
                        .expect("recorded");
                    latencies.push(at.elapsed().as_secs_f64());
                }
                latencies
            });
        }
        let mut latencies = Vec::new();
        while let Some(done) = tasks.join_next().await {
            latencies.extend(done.unwrap());
        }
        let took = start.elapsed().as_secs_f64();
        let after = sessionstore::testkit::write_stats(store);
        Appended {
            writes_per_s: (after.writes - before.writes) as f64 / took,
            commits_per_s: (after.commits - before.commits) as f64 / took,
            p99_ms: p99(latencies) * 1e3,
        }
    })
}

/// Each figure against raw commits measured just before it; 16 sessions `runs` times,
/// raw and grouped alternately, for the median of the ratios (this machine's raw
/// commit rate has moved more than fourfold between runs, 693 to 3,035 commits a second
/// in one morning). Each raw run starts from a fresh file; the grouped runs share one
/// store, which grows by 4,800 chunks a run, as a daemon's would.
fn group_commit(report: &mut Report, rt: &Runtime) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store = rt
        .block_on(Store::open(workload::config_in(dir.path())))
        .expect("a store");
    let mut one_commits = f64::NAN;
    for sessions in [1usize, 2, 4, 8, 16] {
        let pairs = if sessions == 16 { runs() } else { 1 };
        let mut measured: Vec<(f64, Appended)> = (0..pairs)
            .map(|_| {
                let raw = raw_commit_rate(rt);
                (raw, appending(&store, rt, sessions, 300))
            })
            .collect();
        let ratios: Vec<String> = measured
            .iter()
            .map(|(raw, a)| format!("{:.2}x", a.writes_per_s / raw))
            .collect();
        measured.sort_by(|(r1, a1), (r2, a2)| {
            (a1.writes_per_s / r1).total_cmp(&(a2.writes_per_s / r2))
        });
        // The median as `median` takes it: the upper middle of an even count.
        let (raw, a) = measured.swap_remove(pairs / 2);
        if sessions == 1 {
            one_commits = a.commits_per_s;
        }
        let target = if sessions == 16 {
            format!(
                "; target >= 8x: {}; median of {pairs} alternated runs ({})",
                met(a.writes_per_s >= 8.0 * raw),
                ratios.join(", ")
            )
        } else {
            String::new()
        };
        say(
            report,
            format!(
                "streaming group commit, {sessions:>2} sessions appending: {:.0} writes/s = {:.2}x raw \
             rusqlite's {:.0} commits/s; {:.0} commits/s ({:.2}x one session's); p99 of a \
             write {:.2} ms{target}",
                a.writes_per_s,
                a.writes_per_s / raw,
                raw,
                a.commits_per_s,
                a.commits_per_s / one_commits,
                a.p99_ms,
            ),
        );
    }
}

/// The release proxy in front of the test agent, spoken to line by line.
struct Proxy {
    child: Child,
    input: Box<dyn Write>,
    output: BufReader<Box<dyn Read>>,
    next_id: u64,
    _dir: tempfile::TempDir,
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

impl Proxy {
    fn start(relay_only: bool) -> Proxy {
        Proxy::start_on(relay_only, false)
    }

    /// [`Proxy::start`], its standard input and output a socket each when `socket`
    /// (as Node's `spawn` gives a child: a socket pair for each stream).
    fn start_on(relay_only: bool, socket: bool) -> Proxy {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessionstore"));
        cmd.arg("-v")
            .arg("--db")
            .arg(dir.path().join("sessions.db"))
            .arg("--attachments-root")
            .arg(dir.path().join("attachments"))
            .arg("proxy");
        if relay_only {
            cmd.arg("--relay-only");
        }
        let pair = || UnixStream::pair().expect("a socket pair");
        let pairs = socket.then(|| (pair(), pair()));
        let (stdin, stdout) = match &pairs {
            Some(((_, input), (_, output))) => (
                Stdio::from(OwnedFd::from(input.try_clone().expect("a duplicate"))),
                Stdio::from(OwnedFd::from(output.try_clone().expect("a duplicate"))),
            ),
            None => (Stdio::piped(), Stdio::piped()),
        };
        let mut child = cmd
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_sessionstore-test-agent"))
            .current_dir(dir.path())
            .env_remove("SESSIONSTORE_DB")
            .stdin(stdin)
            .stdout(stdout)
            .stderr(std::fs::File::create(dir.path().join("stderr")).expect("a log file"))
            .spawn()
            .expect("the proxy starts");
        // The command keeps the child's ends of the sockets; gone, only the child holds
        // them, so a proxy that ends is an end of file here rather than a read that
        // never returns.
        drop(cmd);
        // (The child's ends, `_theirs`, go at the end of this match.)
        let (input, output): (Box<dyn Write>, Box<dyn Read>) = match pairs {
            Some(((ours_in, _theirs_in), (ours_out, _theirs_out))) => {
                (Box::new(ours_in), Box::new(ours_out))
            }
            None => (
                Box::new(child.stdin.take().expect("piped")),
                Box::new(child.stdout.take().expect("piped")),
            ),
        };
        let output = BufReader::with_capacity(1 << 16, output);
        let mut proxy = Proxy {
            child,
            input,
            output,
            next_id: 0,
            _dir: dir,
        };
        // `SESSIONSTORE_BENCH_CURSORS=1`: a client that announces ACP 1.20's session
        // cursors, so every chunk the agent sends without a `messageId` is given one.
        let mut initialize = json!({"protocolVersion": 1});
        if std::env::var("SESSIONSTORE_BENCH_CURSORS").is_ok_and(|v| v == "1") {
            initialize["clientCapabilities"] = json!({"session": {"cursors": {}}});
        }
        proxy.call("initialize", initialize);
        proxy
    }

    fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next_id += 1;
        let line =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        writeln!(self.input, "{line}").expect("the proxy reads");
        self.next_id
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.output.read_line(&mut line).expect("a line") > 0,
                "the proxy ended"
            );
            let v: Value = serde_json::from_str(&line).expect("JSON");
            if v["id"] == json!(id) && v.get("method").is_none() {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    fn session(&mut self) -> Value {
        let cwd = self._dir.path().to_path_buf();
        self.call("session/new", json!({"cwd": cwd, "mcpServers": []}))["sessionId"].clone()
    }

    /// Prompts every session with `stream N` (`stream N at R` with a `rate`: R chunks
    /// a second) at once and reads until every answer came, pausing `pace` per chunk
    /// read (a slow client). Gives the time from the prompts to the last answer, the
    /// chunk latencies, and the proxy's peak RSS.
    fn stream(
        &mut self,
        sessions: &[Value],
        n: u64,
        rate: Option<f64>,
        pace: Option<Duration>,
    ) -> Streamed {
        let text = match rate {
            Some(rate) => format!("stream {n} at {rate}"),
            None => format!("stream {n}"),
        };
        let start = Instant::now();
        let mut waiting: Vec<u64> = sessions
            .iter()
            .map(|s| {
                self.send(
                    "session/prompt",
                    json!({"sessionId": s, "prompt": [{"type": "text", "text": text}]}),
                )
            })
            .collect();
        let mut latencies = Vec::with_capacity((n as usize) * sessions.len());
        let mut line = String::new();
        while !waiting.is_empty() {
            line.clear();
            assert!(
                self.output.read_line(&mut line).expect("a line") > 0,
                "the proxy ended"
            );
            let read = now_ns();
            // The chunk's text starts with when it was written: no need to parse the
            // whole line for it.
            if let Some(at) = line.find("\"text\":\"") {
                let digits = &line[at + 8..];
                if let Some(sent) = digits.get(..20).and_then(|d| d.parse::<u128>().ok()) {
                    latencies.push(read.saturating_sub(sent) as f64 / 1e9);
                    if let Some(pace) = pace {
                        std::thread::sleep(pace);
                    }
                    continue;
                }
            }
            let v: Value = serde_json::from_str(&line).expect("JSON");
            if v.get("method").is_none()
                && let Some(id) = v["id"].as_u64()
            {
                assert_eq!(v["result"]["stopReason"], "end_turn", "{v}");
                waiting.retain(|w| *w != id);
            }
        }
        Streamed {
            seconds: start.elapsed().as_secs_f64(),
            chunks: latencies.len(),
            p99: p99(latencies),
            peak_rss: crate::peak_of(&self.child.id().to_string()),
        }
    }

    /// Ends the proxy (its client goes) and gives the commits its store's writer made,
    /// from the line it logs as it ends.
    fn finish(mut self) -> u64 {
        drop(self.input);
        let _ = self.child.wait();
        let log = std::fs::read_to_string(self._dir.path().join("stderr")).unwrap_or_default();
        log.lines()
            .find_map(|l| {
                let (_, rest) = l.split_once("the store's writer made ")?;
                rest.split_whitespace().next()?.parse().ok()
            })
            .unwrap_or(0)
    }
}

struct Streamed {
    seconds: f64,
    chunks: usize,
    p99: f64,
    peak_rss: u64,
}

/// Medians over the runs of one shape, recording and relaying alone in turn.
struct Compared {
    recorded_rate: f64,
    relayed_rate: f64,
    recorded_p99: f64,
    relayed_p99: f64,
    commits_per_s: f64,
}

/// `sessions` sessions streaming `n` chunks each (at `rate` chunks a second each, or
/// as fast as the agent's queue takes them), through the proxy recording and through
/// the relay alone, alternately, `runs` times.
fn compare(sessions: usize, n: u64, rate: Option<f64>, runs: usize, socket: bool) -> Compared {
    let mut recorded = (Vec::new(), Vec::new());
    let mut relayed = (Vec::new(), Vec::new());
    let mut commit_rates = Vec::new();
    for _ in 0..runs {
        for relay_only in [true, false] {
            let mut proxy = Proxy::start_on(relay_only, socket);
            let ids: Vec<Value> = (0..sessions).map(|_| proxy.session()).collect();
            let s = proxy.stream(&ids, n, rate, None);
            assert_eq!(s.chunks as u64, n * sessions as u64, "every chunk arrived");
            let side = if relay_only {
                &mut relayed
            } else {
                &mut recorded
            };
            side.0.push(s.chunks as f64 / s.seconds);
            side.1.push(s.p99);
            let commits = proxy.finish();
            if !relay_only {
                commit_rates.push(commits as f64 / s.seconds);
            }
        }
    }
    Compared {
        recorded_rate: median(recorded.0),
        relayed_rate: median(relayed.0),
        recorded_p99: median(recorded.1),
        relayed_p99: median(relayed.1),
        commits_per_s: median(commit_rates),
    }
}

fn met(yes: bool) -> &'static str {
    if yes { "met" } else { "not met" }
}

/// The proxy recording against the relay alone, then a slow client. Throughput is
/// measured with the agent streaming as fast as it can; latency with it streaming at
/// an agent's pace, below what either side can carry, because flat out the agent's
/// chunks wait in its own unbounded queue (the SDK's) and a chunk's latency is mostly
/// how far into the turn it came.
fn proxied(report: &mut Report) {
    let runs = runs();
    let mut one_session_commits = f64::NAN;
    for (label, sessions, n, socket) in [
        ("1 x 100,000 chunks", 1usize, 100_000u64, false),
        ("16 x 20,000 chunks", 16, 20_000, false),
        (
            "1 x 100,000 chunks to a client on a socket",
            1,
            100_000,
            true,
        ),
    ] {
        let c = compare(sessions, n, None, runs, socket);
        if sessions == 1 && !socket {
            one_session_commits = c.commits_per_s;
        }
        say(
            report,
            format!(
                "streaming through the proxy, {label}: {:.0} chunks/s recorded vs {:.0} \
                 relayed alone = {:.2}x (target >= 0.8x: {}); {:.0} commits/s ({:.2}x one \
                 session's); median of {runs} runs",
                c.recorded_rate,
                c.relayed_rate,
                c.recorded_rate / c.relayed_rate,
                met(c.recorded_rate >= 0.8 * c.relayed_rate),
                c.commits_per_s,
                c.commits_per_s / one_session_commits,
            ),
        );
    }
    latency(report, runs);
    slow_client(report);
}

/// The p99 of a chunk's way through the proxy recording against the relay alone, with
/// the agent streaming at a pace.
fn latency(report: &mut Report, runs: usize) {
    for (label, sessions, n, rate) in [
        ("1 x 10,000 at 2,000/s", 1usize, 10_000u64, 2_000.0),
        ("16 x 1,250 at 125/s each", 16, 1_250, 125.0),
    ] {
        let c = compare(sessions, n, Some(rate), runs, false);
        say(
            report,
            format!(
                "latency through the proxy, {label}: p99 agent-to-client {:.2} ms recorded vs \
                 {:.2} ms relayed alone = {:.2}x (target <= 1.5x: {}); {:.0} vs {:.0} chunks/s; \
                 median of {runs} runs",
                c.recorded_p99 * 1e3,
                c.relayed_p99 * 1e3,
                c.recorded_p99 / c.relayed_p99,
                met(c.recorded_p99 <= 1.5 * c.relayed_p99),
                c.recorded_rate,
                c.relayed_rate,
            ),
        );
    }
}

/// The proxy's peak resident memory while its client reads slowly.
fn slow_client(report: &mut Report) {
    // A client reading at a tenth of the agent's rate (the rate of the recorded run
    // above, measured again here on one session).
    let mut proxy = Proxy::start(false);
    let id = proxy.session();
    let fast = proxy.stream(std::slice::from_ref(&id), 20_000, None, None);
    let rate = fast.chunks as f64 / fast.seconds;
    let pace = Duration::from_secs_f64(10.0 / rate);
    let slow = proxy.stream(std::slice::from_ref(&id), 100_000, None, Some(pace));
    proxy.finish();
    say(
        report,
        format!(
            "streaming to a slow client (reading {:.0} chunks/s, a tenth of {:.0}): 100,000 updates \
         in {:.1} s, proxy peak RSS {:.1} MiB (target <= 64 MiB: {})",
            rate / 10.0,
            rate,
            slow.seconds,
            slow.peak_rss as f64 / MIB as f64,
            met(slow.peak_rss <= 64 * MIB as u64)
        ),
    );
}
