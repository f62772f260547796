//! The store on a PostgreSQL server: serializable write transactions, run again when
//! one lost a race, and read-only ones, here; the pool (`pool`), the migrations of
//! `migrations-postgres/` and the schema check (`schema`), scratch schemas (`scratch`).
//! It never touches attachment files.

pub(crate) mod claim;
mod pool;
mod schema;
#[cfg(any(test, feature = "probe", feature = "testkit"))]
mod scratch;
#[cfg(test)]
mod tests;
mod tls;

use std::sync::Arc;
use std::time::Duration;

use postgres::IsolationLevel;
use postgres::error::SqlState;

use self::pool::{Conn, Pool, shown_path};
use self::schema::{latest_version, migrate_client, read_history, refuse_unknown};
use super::Access;
use super::error::postgres as pg;
use super::schema::current;
use super::sql::Tx;
use crate::config::PostgresUrl;
use crate::error::{Error, Result};

pub use self::pool::unreachable;
pub use self::schema::{migrate, plan, schema_problems};
#[cfg(any(test, feature = "probe", feature = "testkit"))]
pub use self::scratch::{ScratchSchema, off_runtime};
pub(crate) use self::tls::connect;
#[cfg(test)]
pub(crate) use super::sql::test_server;

/// How many connections one store keeps at most; a daemon per host each has its own.
const MAX_CONNECTIONS: u32 = 8;
/// How long a write keeps retrying after losing races to other writers.
const RETRY_FOR: Duration = Duration::from_secs(30);

/// A PostgreSQL database: a pool of connections, and whether this store may write.
#[derive(Clone)]
pub struct PgDb {
    pool: Pool,
    /// Per-session locks of this process, taken before a connection (`write_locked`).
    locks: Arc<std::sync::Mutex<std::collections::HashMap<i64, Arc<std::sync::Mutex<()>>>>>,
    /// The connection string without its password, for messages.
    shown: Arc<str>,
    read_only: bool,
}

/// Whether a failed transaction lost a race that running it again (after `attempt`
/// runs) can win.
pub(crate) fn lost_race(e: &Error, attempt: u32) -> bool {
    let Error::Database { cause, .. } = e else {
        return false;
    };
    match cause
        .downcast_ref::<postgres::Error>()
        .and_then(|e| e.code())
    {
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE => true,
        Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED => true,
        // Two writers that both computed the next sequence number of one session can
        // also meet at its unique index; that is retried a few times like a race,
        // while a key that is truly taken fails the same way every time.
        Some(c) if *c == SqlState::UNIQUE_VIOLATION => attempt < 8,
        _ => false,
    }
}

impl PgDb {
    /// Connects, then brings the schema up to date (`Create`, `Existing`) or checks
    /// that it already is (`ReadOnly`), refusing a schema newer than this binary.
    pub fn open(url: &PostgresUrl, access: Access) -> Result<PgDb> {
        let pool = Pool::new(url, MAX_CONNECTIONS)?;
        let db = PgDb {
            shown: pool.shown().clone(),
            pool,
            read_only: access == Access::ReadOnly,
            locks: Default::default(),
        };
        let mut conn = db.pool.get()?;
        let client = &mut conn.client;
        let applied = read_history(client)?;
        refuse_unknown(&db.shown, applied.as_deref().unwrap_or(&[]))?;
        match (access, applied) {
            (Access::ReadOnly, applied) => {
                let applied = applied.unwrap_or_default();
                let latest = latest_version();
                if current(&applied) < latest {
                    return Err(Error::NeedsMigration {
                        path: shown_path(&db.shown),
                        found: current(&applied),
                        latest,
                    });
                }
            }
            (Access::Existing, None) => return Err(Error::NoDatabase(shown_path(&db.shown))),
            // Nothing pending: no statement that needs the right to create runs, so
            // a role that may only read and write rows can still write.
            (Access::Existing | Access::Create, Some(applied))
                if current(&applied) >= latest_version() => {}
            (Access::Existing, Some(_)) | (Access::Create, _) => {
                migrate_client(client, &db.shown)?;
            }
        }
        drop(conn);
        // As on SQLite, a store that writes first checks its schema: a dropped trigger
        // or a rewritten trigger function would let the next write skip a guarantee.
        if access != Access::ReadOnly {
            let problems = db.read(schema_problems)?;
            if !problems.is_empty() {
                return Err(Error::SchemaDamaged {
                    path: shown_path(&db.shown),
                    problems,
                });
            }
        }
        Ok(db)
    }

    /// Whether the store was opened only to read.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Runs `f` in a serializable transaction and commits it. PostgreSQL rolls back
    /// a transaction whose outcome would differ from some serial order of those around
    /// it (two writers appending to one session, say); that one is run again, from a
    /// fresh snapshot, until it commits or `RETRY_FOR` passes.
    pub fn write<T>(&self, f: impl FnMut(&Tx<'_>) -> Result<T>) -> Result<T> {
        self.write_locked(&[], f)
    }

    /// `write_locked` under the advisory lock of each of `sessions` (a key folded from
    /// its id).
    pub fn write_for_all<T>(
        &self,
        sessions: &[crate::ids::SessionId],
        f: impl FnMut(&Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut keys: Vec<i64> = sessions
            .iter()
            .map(|s| {
                let id = s.as_uuid().as_u128();
                (id ^ (id >> 64)) as i64
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        self.write_locked(&keys, f)
    }

    /// `write` holding the advisory locks `keys` (sorted, without repeats, so two
    /// writers cannot wait on each other) from before its snapshot until after it
    /// commits: two writes with a key in common never overlap, and the later sees what
    /// the earlier committed. For writes whose closure also touches files: a
    /// transaction that loses its race is rolled back, but a file it removed stays
    /// removed.
    pub fn write_locked<T>(
        &self,
        keys: &[i64],
        mut f: impl FnMut(&Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        if self.read_only {
            return Err(Error::ReadOnly(shown_path(&self.shown)));
        }
        // Writers of one session in this process queue here, without a connection, so
        // they cannot fill the pool waiting on the server's lock.
        let locals: Vec<(i64, Arc<std::sync::Mutex<()>>)> =
            keys.iter().map(|k| (*k, self.local_lock(*k))).collect();
        let queued: Vec<_> = locals
            .iter()
            .map(|(_, l)| l.lock().unwrap_or_else(|e| e.into_inner()))
            .collect();
        let mut conn = self.pool.get()?;
        for key in keys {
            conn.client
                .execute("SELECT pg_advisory_lock($1)", &[key])
                .map_err(pg("take a session's lock"))?;
        }
        // A panic inside `f` must not return the connection to the pool still locked.
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Self::write_on(&mut conn, &mut f)
        }));
        for key in keys {
            // A connection that fails here is broken: it leaves the pool, and the server
            // lets go of a closed session's locks.
            let _ = conn.client.execute("SELECT pg_advisory_unlock($1)", &[key]);
        }
        drop(queued);
        for (key, local) in locals {
            self.forget_local_lock(key, local);
        }
        match written {
            Ok(written) => written,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// This process's lock for `key`, made on first use.
    fn local_lock(&self, key: i64) -> Arc<std::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(key).or_default().clone()
    }

    /// Drops the entry for `key` once no writer holds or waits for it.
    fn forget_local_lock(&self, key: i64, local: Arc<std::sync::Mutex<()>>) {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        // The map's reference and `local` are the only two left.
        if Arc::strong_count(&local) == 2 {
            locks.remove(&key);
        }
    }

    fn write_on<T>(conn: &mut Conn, f: &mut impl FnMut(&Tx<'_>) -> Result<T>) -> Result<T> {
        let started = std::time::Instant::now();
        let mut attempt: u32 = 0;
        loop {
            let Conn { client, statements } = &mut *conn;
            let outcome = (|| {
                let tx = client
                    .build_transaction()
                    .isolation_level(IsolationLevel::Serializable)
                    .start()
                    .map_err(pg("begin a write"))?;
                let tx = Tx::postgres(tx, statements);
                let value = f(&tx)?;
                tx.into_postgres()
                    .expect("made from a PostgreSQL transaction")
                    .commit()
                    .map_err(pg("commit a write"))?;
                Ok(value)
            })();
            match outcome {
                Err(e)
                    if lost_race(&e, attempt) && started.elapsed() < RETRY_FOR && attempt < 200 =>
                {
                    attempt += 1;
                    tracing::debug!("write lost a race (attempt {attempt}: {e}), running it again");
                    // Back off more each time, with jitter so that two writers that
                    // collided do not collide again in step.
                    let jitter = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.subsec_micros() % 3_000);
                    std::thread::sleep(
                        Duration::from_millis(u64::from(attempt.min(20)))
                            + Duration::from_micros(u64::from(jitter)),
                    );
                }
                other => return other,
            }
        }
    }

    /// Runs `f` in one read-only snapshot (`REPEATABLE READ`, `READ ONLY`).
    pub fn read<T>(&self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.pool.get()?;
        let Conn { client, statements } = &mut *conn;
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(pg("begin a read"))?;
        let tx = Tx::postgres(tx, statements);
        f(&tx)
        // Dropping the transaction rolls it back: it changed nothing to commit.
    }

    /// `write`, then a `VACUUM` of the tables a session's rows live in, so their space
    /// is reclaimed now. Unlike SQLite's `secure_delete`, PostgreSQL does not zero freed
    /// space: the bytes stay in the data files and the WAL until overwritten. Returns
    /// whether the vacuum ran.
    pub fn erase<T>(&self, f: impl FnMut(&Tx<'_>) -> Result<T>) -> Result<(T, bool)> {
        let value = self.write(f)?;
        let mut conn = self.pool.get()?;
        let vacuumed = conn
            .client
            .batch_execute("VACUUM sessions, messages, message_refs, items, events, search_entries")
            .is_ok();
        Ok((value, vacuumed))
    }
}
