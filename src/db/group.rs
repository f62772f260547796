//! Group commit: one writer thread runs every write that gathered during the previous
//! commit in one transaction, so a commit's fsync is shared. A refused member is rolled
//! back alone (the group reruns with savepoints); a PostgreSQL group that lost a race
//! reruns whole. A caller's future resolves once its group committed: it is durable.
//!
//! A write arriving while nothing commits starts a group at once; one arriving during a
//! commit waits for at most that commit. When the last group held more writers than
//! have arrived, the group waits up to [`GATHER`] for them, so a busy daemon's groups
//! stay whole. The writer's memo of each session's tail (`items::Tails`) is cleared by
//! a group that did not commit.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use tokio::sync::oneshot;

use super::items::Tails;
use super::{Db, Tx};
use crate::error::{Error, Result};
use crate::ids::SessionId;

/// Enough to share a commit across a busy daemon, few enough to keep a transaction short.
const MAX_MEMBERS: usize = 256;

/// How long a group waits for the last group's writers to write again: far less than
/// a commit, so a writer waits at most one commit window and this.
const GATHER: std::time::Duration = std::time::Duration::from_micros(300);

type Work = Box<dyn FnMut(&Tx<'_>, &mut Tails) -> Result<Box<dyn Any + Send>> + Send>;

struct Job {
    /// A send's session, whose writes must not overlap across processes on PostgreSQL
    /// (see `Db::write_for`).
    session: Option<SessionId>,
    work: Work,
    done: oneshot::Sender<Result<Box<dyn Any + Send>>>,
}

/// For tests and benches: how well commits are shared.
#[cfg(feature = "testkit")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteStats {
    pub commits: u64,
    pub writes: u64,
}

/// Dropping the last handle stops the thread after the queued writes and joins it, so
/// the database is closed on the thread that dropped the store.
pub(crate) struct GroupWriter {
    queue: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    #[cfg_attr(not(feature = "testkit"), allow(dead_code))]
    stats: Arc<Stats>,
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
        let thread = std::thread::Builder::new()
            .name("sessionstore-writer".to_owned())
            .spawn(move || run(db, jobs, &counted))?;
        Ok(GroupWriter {
            queue: Some(queue),
            thread: Some(thread),
            stats,
        })
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

    /// [`GroupWriter::write`] with the writer's memo of session tails (`items::Tails`).
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

    #[cfg(feature = "testkit")]
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

fn run(db: Db, jobs: mpsc::Receiver<Job>, stats: &Stats) {
    // The last group's writers are likely to write again as soon as they hear back.
    let mut last = 1;
    let mut tails = Tails::default();
    let mut search = Waiting::default();
    search.look(&db);
    loop {
        match search.next(&jobs) {
            Next::Closed => break,
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
    }
    // The store is closing: what waits is indexed now, so a search in the next process
    // finds it, whether or not that process writes. Looked up first, for rows this
    // writer never saw (another process's, killed before its writer indexed them).
    search.look(&db);
    search.index(&db, None);
    // The streaming bench reads this line of the proxy's.
    tracing::info!(
        "the store's writer made {} commits for {} writes",
        stats.commits.load(Ordering::Relaxed),
        stats.writes.load(Ordering::Relaxed)
    );
}

/// Idle time before waiting segments are indexed (V14): longer than a streaming turn's
/// gaps (5 ms), short enough that a search after the turn rarely waits.
const SEARCH_IDLE: std::time::Duration = std::time::Duration::from_millis(50);

/// The longest a segment waits on a never-idle writer; then steps alternate with groups.
const SEARCH_LAG: std::time::Duration = std::time::Duration::from_secs(60);

/// About half a megabyte: a write arriving meanwhile waits a few milliseconds.
const SEARCH_STEP: usize = 8;

/// Segments waiting to be indexed, as last looked, and when to retry a failed step.
#[derive(Debug, Default)]
struct Waiting {
    since: Option<std::time::Instant>,
    retry_at: Option<std::time::Instant>,
    /// Indexing step after step while no write arrives (the writer was idle).
    stepping: bool,
    /// The last step was for a segment that waited too long: a write goes next.
    lagged: bool,
}

enum Next {
    Job(Job),
    Index,
    Closed,
}

impl Waiting {
    /// One probe of a small table; after a group, its own transaction tells ([`commit`]).
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

    /// A write that has arrived first; while segments wait, index steps after
    /// [`SEARCH_IDLE`] without a write, or in turn with groups once one waited
    /// [`SEARCH_LAG`]; `Closed` once every handle is gone.
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

    /// Indexes up to `most` waiting segments in one transaction, then looks again.
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

/// Test hook: while `SESSIONSTORE_TEST_FULL_DISK`'s file exists, every group fails
/// with `SQLITE_FULL`, on either engine.
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

/// Answers each member once the group committed. Returns whether sealed text waits,
/// read in the group's own transaction (`None` if it did not commit).
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
    // Savepoints cost (FTS5 flushes its terms at each) and refusals are rare: the
    // group runs without them first; a refusal rolls it back and it reruns with a
    // savepoint per member (a write may run more than once anyway: PostgreSQL retries).
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
}
