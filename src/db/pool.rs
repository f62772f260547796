//! The read-write connection pool, and the promise that dropping its last handle
//! returns only once every connection is closed. It runs no SQL beyond `configure`.
//!
//! An r2d2 worker keeps a reference to the pool for a moment after it hands a new
//! connection over; a store dropped inside that moment frees the pool later, on the
//! worker, and a command that exits at once never runs SQLite's closing checkpoint,
//! leaving `-wal` and `-shm` behind. So open connections are counted, and dropping the
//! last `Pool` waits for the count to reach zero.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Condvar, Mutex};

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::Connection;

use super::SqliteFile;
use crate::error::Result;

const MAX_CONNECTIONS: u32 = 8;

/// A pool of configured read-write connections to one database file; clones share it.
#[derive(Clone)]
pub struct Pool(Arc<Shared>);

struct Shared {
    /// `Some` until the last handle's drop takes it out to free it.
    pool: Option<r2d2::Pool<Manager>>,
    open: Arc<Open>,
}

/// The number of connections open right now, whichever thread holds them.
#[derive(Default)]
struct Open {
    count: Mutex<usize>,
    all_closed: Condvar,
}

impl Open {
    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        // The count is a plain integer, consistent even if a holder panicked.
        self.count.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A connection that is counted as open until it has been closed.
pub(super) struct Counted {
    // Fields drop in order: the connection is closed before the ticket is given back.
    conn: Connection,
    _ticket: Ticket,
}

struct Ticket(Arc<Open>);

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut count = self.0.lock();
        *count -= 1;
        if *count == 0 {
            self.0.all_closed.notify_all();
        }
    }
}

impl Deref for Counted {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl DerefMut for Counted {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

pub(super) struct Manager {
    inner: SqliteConnectionManager,
    open: Arc<Open>,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Counted;
    type Error = rusqlite::Error;

    fn connect(&self) -> rusqlite::Result<Counted> {
        let conn = self.inner.connect()?;
        *self.open.lock() += 1;
        Ok(Counted {
            conn,
            _ticket: Ticket(self.open.clone()),
        })
    }

    fn is_valid(&self, conn: &mut Counted) -> rusqlite::Result<()> {
        self.inner.is_valid(&mut conn.conn)
    }

    fn has_broken(&self, conn: &mut Counted) -> bool {
        self.inner.has_broken(&mut conn.conn)
    }
}

impl Pool {
    /// A pool of connections to `db`, each keyed and set up by `configure`. The caller
    /// has already checked and migrated the file.
    pub(super) fn open(db: &SqliteFile) -> Result<Pool> {
        let open = Arc::new(Open::default());
        let key = db.key.clone();
        let manager = Manager {
            inner: SqliteConnectionManager::file(&db.path).with_init(move |c| {
                super::cipher::key(c, key.as_ref())?;
                super::configure(c)
            }),
            open: open.clone(),
        };
        // A connection to a local file does not go stale, so none is tested at checkout
        // (an empty batch each time: 5% of a one-chunk record). Connections open as first
        // needed: each parses the schema, and a one-shot command uses one.
        let pool = r2d2::Pool::builder()
            .max_size(MAX_CONNECTIONS)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .build(manager)
            .map_err(super::error::pool)?;
        Ok(Pool(Arc::new(Shared {
            pool: Some(pool),
            open,
        })))
    }

    pub(super) fn get(&self) -> Result<r2d2::PooledConnection<Manager>> {
        let pool = self
            .0
            .pool
            .as_ref()
            .expect("the r2d2 pool is only taken out by the last handle's drop");
        pool.get().map_err(super::error::pool)
    }

    /// How many connections are open now (for tests).
    #[cfg(test)]
    fn open_connections(&self) -> usize {
        *self.0.open.lock()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        drop(self.pool.take());
        // A worker finishing a connect frees the r2d2 pool within moments; the bound only
        // guards against a connection held on a thread that outlived every handle.
        let count = self.open.lock();
        let _ = self
            .open
            .all_closed
            .wait_timeout_while(count, super::BUSY_TIMEOUT, |open| *open > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 12's leftover side files: dropping the last handle returns only once every
    /// connection is closed and `-wal` and `-shm` are gone, every time.
    #[test]
    fn dropping_the_last_pool_handle_closes_every_connection_before_returning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.db");
        for round in 0..50 {
            let pool = Pool::open(&SqliteFile::plain(&path)).unwrap();
            let open = pool.0.open.clone();
            pool.get()
                .unwrap()
                .execute_batch("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
                .unwrap();
            assert!(pool.open_connections() > 0);
            let clone = pool.clone();
            drop(pool);
            assert!(*open.lock() > 0, "a clone still holds the pool");
            drop(clone);
            assert_eq!(*open.lock(), 0, "round {round}: connections left open");
            for side in ["-wal", "-shm"] {
                assert!(
                    !super::super::readonly::side_file(&path, side).exists(),
                    "round {round}: {side} left beside the database"
                );
            }
        }
    }
}
