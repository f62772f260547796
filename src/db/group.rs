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
    // Opened at once (a read of nothing), so a daemon holds its files from its start.
    if let Err(e) = db.read(|tx| {
        tx.query_row("SELECT 1", super::sql::args![], |r| r.get::<i64>(0))
            .map_err(super::error::sql("open the database"))
    }) {
        tracing::debug!("cannot open the database yet: {e}");
    }
    while let Ok(first) = jobs.recv() {
        let mut group = vec![first];
        let deadline = std::time::Instant::now() + GATHER;
        while group.len() < MAX_MEMBERS {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(mpsc::TryRecvError::Disconnected) => break,
                Err(mpsc::TryRecvError::Empty) if group.len() >= last => break,
                Err(mpsc::TryRecvError::Empty) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    match jobs.recv_timeout(left) {
                        Ok(job) => group.push(job),
                        Err(_) => break,
                    }
                }
            }
        }
        last = group.len();
        commit(&db, group, &mut tails, stats);
    }
    // The streaming bench reads this line of the proxy's.
    tracing::info!(
        "the store's writer made {} commits for {} writes",
        stats.commits.load(Ordering::Relaxed),
        stats.writes.load(Ordering::Relaxed)
    );
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

/// Answers each member once the group committed.
fn commit(db: &Db, mut group: Vec<Job>, tails: &mut Tails, stats: &Stats) {
    if let Some(full) = disk_full_injected() {
        let full = Arc::new(full);
        for job in group {
            let _ = job.done.send(Err(Error::Shared(full.clone())));
        }
        return;
    }
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
}
