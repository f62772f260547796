//! Group commit: every write a store makes for its sessions (sends, recorded updates,
//! turns, settings, renames) goes through one writer thread, which runs all the writes
//! that gathered while the previous commit was being made in one transaction and
//! commits them together, so the cost of a commit (an fsync) is shared by every
//! session writing at once. Each write is a member of its group: a write that is
//! refused (a send whose file is gone, a record with an update the store will not
//! take) is rolled back alone and the others commit (the group is run again with each
//! member in a savepoint of its own, which a group with no refusal does without); a
//! PostgreSQL transaction that lost a race to another host's runs every member again,
//! as one write's retry does. A caller's future resolves once its group
//! committed: what it wrote is durable.
//!
//! A write that arrives while nothing is being committed starts a group at once, so a
//! lone writer waits for nothing but its own commit, and writes that arrive during a
//! commit wait for at most that one commit before theirs. When the last group held
//! more writers than have arrived, the group waits up to [`GATHER`] for them (they
//! heard back a moment ago and are likely to write again), so a busy daemon's groups
//! stay whole instead of alternating small and large. The commit window is one
//! commit's time, a few milliseconds with one fsync, plus at most that.
//!
//! The writer also keeps a memo of where each session's history ends
//! (`turns::Tails`), handed to the writes that record; a group that did not commit
//! clears it.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use tokio::sync::oneshot;

use super::turns::Tails;
use super::{Db, Tx};
use crate::error::{Error, Result};
use crate::ids::SessionId;

/// How many writes one group takes at most: enough to share a commit among every
/// session of a busy daemon, few enough that one transaction stays short.
const MAX_MEMBERS: usize = 256;

/// How long a group waits at most for the writers of the last group to write again
/// (they heard back from it a moment ago) before it commits with fewer: far less than
/// a commit, so a writer waits for at most one commit window and this.
const GATHER: std::time::Duration = std::time::Duration::from_micros(300);

type Work = Box<dyn FnMut(&Tx<'_>, &mut Tails) -> Result<Box<dyn Any + Send>> + Send>;

struct Job {
    /// The session whose files the write also touches (a send), whose writes must not
    /// overlap across processes on PostgreSQL (see `Db::write_for`).
    session: Option<SessionId>,
    work: Work,
    done: oneshot::Sender<Result<Box<dyn Any + Send>>>,
}

/// What the writer has done: how many groups it committed and how many writes they
/// held, for a daemon (and the benches) to see how well commits are shared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    pub commits: u64,
    pub writes: u64,
}

/// The writer of one store: a thread that owns the commits. Dropping the last handle
/// stops the thread after the writes already queued, and waits for it, so the
/// database is closed on the thread that dropped the store.
pub(crate) struct GroupWriter {
    queue: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    stats: Arc<Stats>,
    /// Whether the writer yields the CPU to every other thread ([`Priority`]).
    yielding: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Default)]
struct Stats {
    commits: AtomicU64,
    writes: AtomicU64,
}

impl GroupWriter {
    pub fn start(db: Db) -> std::io::Result<GroupWriter> {
        let (queue, jobs) = mpsc::channel::<Job>();
        let stats = Arc::new(Stats::default());
        let counted = stats.clone();
        let yielding = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let asked = yielding.clone();
        let thread = std::thread::Builder::new()
            .name("sessionstore-writer".to_owned())
            .spawn(move || run(db, jobs, &counted, &asked))?;
        Ok(GroupWriter {
            queue: Some(queue),
            thread: Some(thread),
            stats,
            yielding,
        })
    }

    /// From its next group on, the writer thread yields the CPU to every other thread
    /// while it is not starved ([`Priority`]).
    pub fn yield_cpu(&self) {
        self.yielding.store(true, Ordering::Relaxed);
    }

    /// Runs `work` as a member of the next group; resolves once that group
    /// committed (or `work` was refused). `work` may run more than once (a PostgreSQL
    /// group that lost a race runs again), so it borrows what it writes.
    pub async fn write<T: Send + 'static>(
        &self,
        session: Option<SessionId>,
        mut work: impl FnMut(&Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        self.write_remembering(session, move |tx, _| work(tx)).await
    }

    /// [`GroupWriter::write`] of a write that also reads and keeps the writer's memo of
    /// the sessions it recorded for (`turns::Tails`).
    pub async fn write_remembering<T: Send + 'static>(
        &self,
        session: Option<SessionId>,
        mut work: impl FnMut(&Tx<'_>, &mut Tails) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (done, answer) = oneshot::channel();
        let job = Job {
            session,
            work: Box::new(move |tx, tails| {
                work(tx, tails).map(|v| Box::new(v) as Box<dyn Any + Send>)
            }),
            done,
        };
        let stopped = || Error::Task("the store's writer has stopped".to_owned());
        self.queue
            .as_ref()
            .ok_or_else(stopped)?
            .send(job)
            .map_err(|_| stopped())?;
        let value = answer.await.map_err(|_| stopped())??;
        Ok(*value
            .downcast::<T>()
            .expect("a member's answer has the type its write returns"))
    }

    pub fn stats(&self) -> WriteStats {
        WriteStats {
            commits: self.stats.commits.load(Ordering::Relaxed),
            writes: self.stats.writes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for GroupWriter {
    fn drop(&mut self) {
        self.queue.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(db: Db, jobs: mpsc::Receiver<Job>, stats: &Stats, yielding: &std::sync::atomic::AtomicBool) {
    // How many writes the last group held: that many writers were waiting on it,
    // and each is likely to write again as soon as it hears back.
    let mut last = 1;
    let mut tails = Tails::default();
    let mut priority = Priority::default();
    let mut delay = RunDelay::open();
    let mut search = Waiting::default();
    search.look(&db);
    loop {
        let next = search.next(&jobs);
        let yields = yielding.load(Ordering::Relaxed);
        let before = if yields { delay.read() } else { None };
        match next {
            Next::Closed => break,
            // A step of indexing runs as a group does: its wait for the CPU counts.
            Next::Index => search.index(&db, Some(SEARCH_STEP)),
            Next::Job(first) => {
                let mut group = vec![first];
                let deadline = std::time::Instant::now() + GATHER;
                while group.len() < MAX_MEMBERS {
                    match jobs.try_recv() {
                        Ok(job) => group.push(job),
                        Err(mpsc::TryRecvError::Disconnected) => break,
                        Err(mpsc::TryRecvError::Empty) if group.len() >= last => break,
                        Err(mpsc::TryRecvError::Empty) => {
                            let left =
                                deadline.saturating_duration_since(std::time::Instant::now());
                            match jobs.recv_timeout(left) {
                                Ok(job) => group.push(job),
                                Err(_) => break,
                            }
                        }
                    }
                }
                last = group.len();
                match commit(&db, group, &mut tails, stats) {
                    Some(waiting) => search.saw(waiting),
                    None => search.look(&db),
                }
            }
        }
        if yields {
            let spent = before
                .zip(delay.read())
                .map_or(Spent::default(), |(b, a)| a.since(b));
            let was = priority.idle;
            priority.after_group(spent, std::time::Instant::now(), set_idle);
            match (was, priority.idle) {
                (false, true) => tracing::debug!("the store's writer yields the CPU"),
                (true, false) => tracing::debug!(
                    "the store's writer waited {:?} for the CPU within {LOOKED_AT:?}, in \
                     which it ran {:?}: it runs as a normal thread for {CALM:?}",
                    priority.spent.waited,
                    priority.spent.ran
                ),
                _ => {}
            }
        }
    }
    // The store is closing: what waits is indexed now, so a search in the next process
    // finds it, whether or not that process writes. Looked up first, for rows this
    // writer never saw (another process's, killed before its writer indexed them).
    search.look(&db);
    search.index(&db, None);
}

/// How long the writer has had no write to make before it indexes sealed segments
/// that wait (V14): longer than the gaps between a streaming turn's groups (the
/// proxy gathers updates for 5 ms), so a stream is recorded before its text is
/// indexed, and short enough that a search after the turn ends rarely waits for it.
const SEARCH_IDLE: std::time::Duration = std::time::Duration::from_millis(50);

/// How long a segment waits at most while the writer is never idle that long (a
/// daemon that streams without pause): from then on the writer indexes a step at a
/// time between its groups until nothing waits.
const SEARCH_LAG: std::time::Duration = std::time::Duration::from_secs(60);

/// How many segments one indexing transaction takes: about half a megabyte of text,
/// a few milliseconds of a write that arrives meanwhile waiting.
const SEARCH_STEP: usize = 8;

/// What the writer knows of the segments waiting to be indexed: since when some have
/// waited, as it last looked (after each group), and when it may try again after an
/// indexing transaction failed (a full disk).
#[derive(Debug, Default)]
struct Waiting {
    since: Option<std::time::Instant>,
    retry_at: Option<std::time::Instant>,
    /// Indexing step after step while no write arrives (the writer was idle).
    stepping: bool,
    /// The last thing done was a step made because a segment waited too long: a
    /// write that waits goes next, so the two take turns.
    lagged: bool,
}

/// What the writer does next.
enum Next {
    Job(Job),
    Index,
    Closed,
}

impl Waiting {
    /// Looks whether anything waits (a single probe of a small table), in a read of
    /// its own; after a group, the group's own transaction tells ([`commit`]).
    fn look(&mut self, db: &Db) {
        if !db.defers_search() {
            return;
        }
        match db.read(super::search::anything_waiting) {
            Ok(waiting) => self.saw(waiting),
            // Background work: a damaged or full database is the foreground write's to
            // report, in its one line; this says it only in the debug log.
            Err(e) => tracing::debug!("cannot look for segments to index for search: {e}"),
        }
    }

    /// Whether anything waits, as the writer last saw.
    fn saw(&mut self, waiting: bool) {
        if waiting {
            self.since.get_or_insert_with(std::time::Instant::now);
        } else {
            self.since = None;
        }
    }

    /// What the writer does next: a write that has arrived, first; else, while
    /// segments wait, a step of indexing once no write has arrived for
    /// [`SEARCH_IDLE`], and step after step until one does; once a segment has waited
    /// [`SEARCH_LAG`], steps and groups in turn; `Closed` once every handle of the
    /// store is gone.
    fn next(&mut self, jobs: &mpsc::Receiver<Job>) -> Next {
        let next = self.choose(jobs);
        if matches!(next, Next::Job(_)) {
            // A write ends the idle steps.
            self.stepping = false;
        }
        next
    }

    fn choose(&mut self, jobs: &mpsc::Receiver<Job>) -> Next {
        let received = |r: std::result::Result<Job, mpsc::RecvTimeoutError>| match r {
            Ok(job) => Some(Next::Job(job)),
            Err(mpsc::RecvTimeoutError::Disconnected) => Some(Next::Closed),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
        };
        loop {
            let Some(since) = self.since else {
                self.stepping = false;
                return jobs.recv().map_or(Next::Closed, Next::Job);
            };
            // A step that failed (a full disk) is tried again a second later.
            if let Some(at) = self.retry_at {
                let now = std::time::Instant::now();
                if now < at {
                    match received(jobs.recv_timeout(at - now)) {
                        Some(next) => return next,
                        None => continue,
                    }
                }
                self.retry_at = None;
            }
            // Too long a wait: a step, then a write if one waits, and so on in turn,
            // however busy the writer.
            if since.elapsed() >= SEARCH_LAG && !self.lagged {
                self.lagged = true;
                return Next::Index;
            }
            self.lagged = false;
            match jobs.try_recv() {
                Ok(job) => return Next::Job(job),
                Err(mpsc::TryRecvError::Disconnected) => return Next::Closed,
                Err(mpsc::TryRecvError::Empty) => {}
            }
            if self.stepping {
                return Next::Index;
            }
            if let Some(next) = received(jobs.recv_timeout(SEARCH_IDLE)) {
                return next;
            }
            self.stepping = true;
            return Next::Index;
        }
    }

    /// Indexes up to `most` waiting segments (every one with `None`) in one
    /// transaction, then looks again.
    fn index(&mut self, db: &Db, most: Option<usize>) {
        if self.since.is_none() {
            return;
        }
        match db.write(|tx| super::search::index_waiting(tx, None, most)) {
            // A step that took fewer than it could took the last.
            Ok(took) if most.is_some_and(|most| took < most) => self.since = None,
            Ok(_) => self.look(db),
            Err(e) => {
                tracing::debug!("cannot index sealed text for search yet: {e}");
                self.retry_at = Some(std::time::Instant::now() + std::time::Duration::from_secs(1));
            }
        }
    }
}

/// How the writer thread is scheduled once asked to yield the CPU
/// ([`GroupWriter::yield_cpu`]): in Linux's idle class (`SCHED_IDLE`), where any
/// other thread that wakes takes the CPU from it at once and it runs on what they
/// leave, so a process's latency-bound threads (the proxy's relay) never wait behind
/// its writes. When the process's own threads, or a machine busy with other work,
/// keep it from the CPU (it waited [`STARVED`] or more to run, and longer than it
/// ran, within [`LOOKED_AT`]), its callers would wait on it, and the proxy's relay
/// behind them: it runs as a normal thread again for [`CALM`], then yields again.
#[derive(Debug, Default)]
struct Priority {
    /// In the idle class now.
    idle: bool,
    /// When it last left the idle class because it was starved.
    raised: Option<std::time::Instant>,
    /// What the idle writer's groups have spent since `since`, the start of the
    /// window looked at.
    spent: Spent,
    since: Option<std::time::Instant>,
}

/// How long a yielding writer may wait for the CPU within [`LOOKED_AT`], if it also
/// waited longer than it ran there, before it counts as starved. A writer the relay
/// keeps from the CPU in a flat-out stream (the `streaming` bench, one session: about
/// 1.8 ms of waiting against 1.1 ms of running in each group, a group every 6 ms) is
/// found out in its first groups; a writer that counted as starved only when a write
/// waited 50 ms to be taken made 59 commits a second where a normal one made 107, and
/// recording ran at 0.76x the relay alone. A writer a paced stream only interrupts
/// now and then (16 sessions at 125 chunks a second: a single wait of 1-3 ms in a
/// short group, or a long group of sealing) is not starved: that is what yielding is
/// for, and made a normal thread for [`CALM`] on such a wait it held up the relay
/// (p99 1.88x and 1.73x the relay alone's in two runs).
const STARVED: std::time::Duration = std::time::Duration::from_millis(10);

/// The window a yielding writer's waits are added up over.
const LOOKED_AT: std::time::Duration = std::time::Duration::from_millis(100);

/// How long a starved writer runs as a normal thread before it yields again.
const CALM: std::time::Duration = std::time::Duration::from_secs(10);

impl Priority {
    /// After a group in which the thread ran and waited for the CPU as `spent` says,
    /// at `now`: moves it in or out of the idle class through `set` (given whether to
    /// be idle; it says whether that took).
    fn after_group(
        &mut self,
        spent: Spent,
        now: std::time::Instant,
        set: impl FnOnce(bool) -> bool,
    ) {
        let idle = if self.idle {
            if self
                .since
                .is_none_or(|since| now.saturating_duration_since(since) >= LOOKED_AT)
            {
                self.since = Some(now);
                self.spent = Spent::default();
            }
            self.spent = self.spent.plus(spent);
            if self.spent.waited < STARVED || self.spent.waited <= self.spent.ran {
                return;
            }
            self.raised = Some(now);
            self.since = None;
            false
        } else {
            if self
                .raised
                .is_some_and(|at| now.saturating_duration_since(at) < CALM)
            {
                return;
            }
            true
        };
        if set(idle) {
            self.idle = idle;
        }
    }
}

/// How long a thread ran on a CPU, and how long it waited, runnable, for one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Spent {
    ran: std::time::Duration,
    waited: std::time::Duration,
}

impl Spent {
    fn plus(self, other: Spent) -> Spent {
        Spent {
            ran: self.ran + other.ran,
            waited: self.waited + other.waited,
        }
    }

    /// What was spent between `before` and this.
    fn since(self, before: Spent) -> Spent {
        Spent {
            ran: self.ran.saturating_sub(before.ran),
            waited: self.waited.saturating_sub(before.waited),
        }
    }
}

/// What the calling thread has spent since it started: the first two figures of
/// Linux's `/proc/thread-self/schedstat`, read through a file kept open (nothing
/// elsewhere, or where the file cannot be read).
struct RunDelay(Option<std::fs::File>);

impl RunDelay {
    fn open() -> RunDelay {
        RunDelay(std::fs::File::open("/proc/thread-self/schedstat").ok())
    }

    fn read(&mut self) -> Option<Spent> {
        use std::os::unix::fs::FileExt;
        let file = self.0.as_ref()?;
        let mut buf = [0u8; 96];
        let n = file.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let mut figures = text.split_whitespace();
        let ran: u64 = figures.next()?.parse().ok()?;
        let waited: u64 = figures.next()?.parse().ok()?;
        Some(Spent {
            ran: std::time::Duration::from_nanos(ran),
            waited: std::time::Duration::from_nanos(waited),
        })
    }
}

/// Puts the calling thread in the idle scheduling class, or back in the normal one
/// (Linux; elsewhere nothing changes). Says whether it took.
fn set_idle(idle: bool) -> bool {
    #[cfg(target_os = "linux")]
    {
        let policy = if idle {
            libc::SCHED_IDLE
        } else {
            libc::SCHED_OTHER
        };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` outlives the call, which reads it; 0 names the calling thread.
        unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = idle;
        false
    }
}

/// The fault-injection hook of the tests (feature `testkit` only): while the file
/// named by `SESSIONSTORE_TEST_FULL_DISK` exists, every group fails as SQLite fails
/// a commit on a full disk (`SQLITE_FULL`), so a test can fill and free "the disk" of
/// a store it runs in a child process, on either engine.
#[cfg(feature = "testkit")]
fn disk_full_injected() -> Option<Error> {
    // The variable is read once per process; the flag file is looked at per commit.
    static FLAG: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let flag = FLAG
        .get_or_init(|| std::env::var_os("SESSIONSTORE_TEST_FULL_DISK").map(Into::into))
        .as_ref()?;
    flag.exists().then(|| {
        super::error::sqlite(
            "commit a group of writes",
            rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
                Some("database or disk is full".to_owned()),
            ),
        )
    })
}

#[cfg(not(feature = "testkit"))]
fn disk_full_injected() -> Option<Error> {
    None
}

/// Runs one group in one transaction, each member in a savepoint, and hands each
/// member its answer once the transaction committed. Returns whether sealed text
/// waits to be indexed as the committed group left it (`None` if it did not commit),
/// looked up in its own transaction rather than in a read of its own.
fn commit(db: &Db, mut group: Vec<Job>, tails: &mut Tails, stats: &Stats) -> Option<bool> {
    if let Some(full) = disk_full_injected() {
        let full = Arc::new(full);
        for job in group {
            let _ = job.done.send(Err(Error::Shared(full.clone())));
        }
        return None;
    }
    let waiting = std::cell::Cell::new(None);
    let mut sessions: Vec<SessionId> = group.iter().filter_map(|j| j.session).collect();
    sessions.sort();
    sessions.dedup();
    let mut answers: Vec<Option<Result<Box<dyn Any + Send>>>> = Vec::new();
    // Each member runs in a savepoint of its own only when one of them is refused:
    // savepoints cost (FTS5 flushes its pending terms at every one), and refusals are
    // rare. So the group runs first without them; a refused member rolls that whole
    // attempt back, and the group runs again, carefully, each member in its savepoint
    // (every write may run more than once: a PostgreSQL group that lost a race runs
    // again too).
    let refused = std::cell::Cell::new(false);
    let mut careful = false;
    // Every run of the group after its first follows one that was rolled back.
    let mut runs = 0u32;
    let outcome = loop {
        refused.set(false);
        // A panic in a member must not take the writer down with every later write:
        // the transaction is rolled back (its drop), and every member is told.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            db.write_for_sessions(&sessions, |tx| {
                // Run again from the start when PostgreSQL retries the group, and with
                // nothing remembered of an attempt that was rolled back.
                runs += 1;
                if runs > 1 {
                    tails.clear();
                }
                answers.clear();
                for job in &mut group {
                    if careful {
                        tx.batch("SAVEPOINT member")
                            .map_err(super::error::sql("begin a write of a group"))?;
                    }
                    match (job.work)(tx, tails) {
                        Ok(value) => {
                            if careful {
                                tx.batch("RELEASE SAVEPOINT member")
                                    .map_err(super::error::sql("end a write of a group"))?;
                            }
                            answers.push(Some(Ok(value)));
                        }
                        // The whole group runs again: this member lost a race.
                        Err(e) if db.is_retried(&e) => return Err(e),
                        Err(e) if !careful => {
                            refused.set(true);
                            return Err(e);
                        }
                        Err(e) => {
                            tx.batch("ROLLBACK TO SAVEPOINT member; RELEASE SAVEPOINT member")
                                .map_err(super::error::sql("undo a refused write of a group"))?;
                            answers.push(Some(Err(e)));
                        }
                    }
                }
                // Never the group's failure: what the probe cannot read, `look` tries
                // again after the commit.
                waiting.set(super::search::anything_waiting(tx).ok());
                Ok(())
            })
        }));
        if refused.get() && !careful {
            careful = true;
            continue;
        }
        break outcome;
    };
    let failure = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(Arc::new(e)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Some(Arc::new(Error::Task(format!(
                "a write panicked, and its group was rolled back: {what}"
            ))))
        }
    };
    if failure.is_some() {
        tails.clear();
    }
    if failure.is_none() {
        stats.commits.fetch_add(1, Ordering::Relaxed);
        stats
            .writes
            .fetch_add(group.len() as u64, Ordering::Relaxed);
    }
    for (i, job) in group.into_iter().enumerate() {
        let answer = match &failure {
            // Nothing of the group was written: each member gets why.
            Some(e) => Err(Error::Shared(e.clone())),
            None => answers
                .get_mut(i)
                .and_then(Option::take)
                .unwrap_or_else(|| Err(Error::Task("a write of a group was not run".to_owned()))),
        };
        let _ = job.done.send(answer);
    }
    if failure.is_some() {
        None
    } else {
        waiting.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn job() -> Job {
        let (done, _) = oneshot::channel();
        Job {
            session: None,
            work: Box::new(|_, _| Ok(Box::new(()) as Box<dyn Any + Send>)),
            done,
        }
    }

    fn named(next: &Next) -> &'static str {
        match next {
            Next::Job(_) => "write",
            Next::Index => "index",
            Next::Closed => "closed",
        }
    }

    /// With nothing to index the writer takes writes as they come; with segments
    /// waiting, a write that has arrived goes first, a step of indexing follows
    /// [`SEARCH_IDLE`] without one, and steps follow each other until one arrives;
    /// once a segment has waited [`SEARCH_LAG`], steps and writes take turns however
    /// many writes wait; with every handle gone it is closed.
    #[test]
    fn the_writer_indexes_when_idle_and_in_turn_with_writes_once_text_waited_too_long() {
        let (queue, jobs) = mpsc::channel();
        let mut w = Waiting::default();
        queue.send(job()).unwrap();
        assert_eq!(named(&w.next(&jobs)), "write");

        w.since = Some(Instant::now());
        queue.send(job()).unwrap();
        assert_eq!(named(&w.next(&jobs)), "write");
        let t = Instant::now();
        assert_eq!(named(&w.next(&jobs)), "index");
        assert!(t.elapsed() >= SEARCH_IDLE, "{:?}", t.elapsed());
        assert!(w.stepping);
        assert_eq!(named(&w.next(&jobs)), "index");
        queue.send(job()).unwrap();
        assert_eq!(named(&w.next(&jobs)), "write");
        assert!(!w.stepping, "a write ends the idle steps");

        w.since = Instant::now().checked_sub(SEARCH_LAG + Duration::from_secs(1));
        assert!(w.since.is_some(), "the clock goes back a minute");
        for _ in 0..3 {
            queue.send(job()).unwrap();
        }
        let order: Vec<&str> = (0..6).map(|_| named(&w.next(&jobs))).collect();
        assert_eq!(
            order,
            ["index", "write", "index", "write", "index", "write"]
        );

        // A failed step waits a second before the next; a write still goes at once.
        w.retry_at = Some(Instant::now() + Duration::from_secs(1));
        w.stepping = true;
        queue.send(job()).unwrap();
        assert_eq!(named(&w.next(&jobs)), "write");
        assert!(!w.stepping, "a write ends the idle steps");

        w.since = None;
        drop(queue);
        assert_eq!(named(&w.next(&jobs)), "closed");
    }

    /// A yielding writer goes idle after its first group; waits for the CPU that add
    /// up to [`STARVED`] within [`LOOKED_AT`], longer than it ran, make it a normal
    /// thread, which it stays for [`CALM`] however short the waits, and then it
    /// yields again; a change the kernel refused leaves it where it was.
    #[test]
    fn a_yielding_writer_is_idle_unless_starved_then_normal_for_a_while() {
        let mut p = Priority::default();
        let t0 = Instant::now();
        let asked = std::cell::RefCell::new(Vec::new());
        let set = |took: bool| {
            let asked = &asked;
            move |idle: bool| {
                asked.borrow_mut().push(idle);
                took
            }
        };
        let waited = |waited: Duration| Spent {
            ran: Duration::ZERO,
            waited,
        };
        // Refused: still normal, and asked again next time.
        p.after_group(waited(Duration::ZERO), t0, set(false));
        assert!(!p.idle);
        p.after_group(waited(Duration::ZERO), t0, set(true));
        assert!(p.idle);
        // Waits short of STARVED within a window leave it idle, asking nothing.
        p.after_group(waited(STARVED - Duration::from_micros(1)), t0, set(true));
        assert!(p.idle);
        // So does a window in which it waited less than it ran (sealing, interrupted).
        let interrupted = Spent {
            ran: Duration::from_millis(80),
            waited: Duration::from_millis(79),
        };
        p.after_group(interrupted, t0 + LOOKED_AT, set(true));
        assert!(p.idle);
        // Waits that add up to STARVED within one window, running less: starved, and
        // normal for CALM.
        let window = t0 + LOOKED_AT * 2;
        p.after_group(waited(STARVED / 2), window, set(true));
        assert!(p.idle);
        let starved = window + LOOKED_AT / 2;
        p.after_group(waited(STARVED / 2), starved, set(true));
        assert!(!p.idle);
        p.after_group(
            waited(Duration::ZERO),
            starved + CALM - Duration::from_millis(1),
            set(true),
        );
        assert!(!p.idle);
        p.after_group(waited(Duration::ZERO), starved + CALM, set(true));
        assert!(p.idle);
        // The same waits spread over two windows are not starvation.
        let later = starved + CALM + LOOKED_AT;
        p.after_group(waited(STARVED / 2), later, set(true));
        p.after_group(waited(STARVED / 2), later + LOOKED_AT, set(true));
        assert!(p.idle);
        assert_eq!(*asked.borrow(), [true, true, false, true]);
    }

    /// The thread's wait for the CPU reads (Linux), and only grows.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_run_delay_reads_and_grows() {
        let mut delay = RunDelay::open();
        let first = delay.read().expect("schedstat reads");
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        std::thread::yield_now();
        let then = delay.read().unwrap();
        assert!(then.waited >= first.waited);
        assert!(then.ran > first.ran, "{first:?} then {then:?}");
    }
}
