//! Every SQL statement of the crate lives under this module: connection set-up, the
//! schema's migrations, the record reads and writes, and the integrity check. Its
//! functions are synchronous and never touch attachment files.

pub mod append;
#[cfg(any(test, feature = "probe", feature = "testkit"))]
pub mod audit;
pub mod copies;
pub mod error;
pub mod group;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod proxied;
pub mod queries;
mod readonly;
pub mod schema;
pub mod search;
pub mod sessions;
pub mod sql;
pub mod turns;
pub mod verify;

mod pool;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use crate::config::Database;
use crate::error::{Error, Result};

pub use pool::Pool;
pub use sql::Tx;

/// How long a connection waits for another writer before giving up with SQLITE_BUSY.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings every connection gets on open. `synchronous = FULL` syncs the WAL on each
/// commit: see RELIABILITY.md for what a crash and a power cut can each lose.
fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Every statement of `db` runs through the connection's cache (`Tx`); a restore
    // or a verify uses more than rusqlite's default 16 of them.
    conn.set_prepared_statement_cache_capacity(64);
    // Switching to WAL needs a moment of exclusive access; under a concurrent opener it
    // can report busy before the busy handler applies, so it is retried briefly.
    let mut tries = 0;
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Ok(_) => break,
            Err(e) if is_busy(&e) && tries < 200 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(25));
            }
            Err(e) => return Err(e),
        }
    }
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL;")
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn ensure_parent(path: &Path) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| Error::DatabaseIo {
            path: path.to_owned(),
            cause: source,
        })?;
    }
    Ok(())
}

/// Opens one configured read-write connection, creating the file if needed, after the
/// read-only checks have said the file is safe to touch: among them, that a database
/// with migrations applied has the schema they make, since switching it to WAL below
/// is already a write.
pub fn open_checked(path: &Path) -> Result<Connection> {
    open_inspected(path, &schema::inspect(path)?)
}

/// `open_checked` for a file whose `inspect` the caller has just read.
fn open_inspected(path: &Path, on_disk: &schema::OnDisk) -> Result<Connection> {
    if let schema::OnDisk::Database(applied) = on_disk
        && !applied.is_empty()
    {
        verify::require_intact_schema(path)?;
    }
    ensure_parent(path)?;
    let conn = Connection::open(path).map_err(|e| crate::db::error::not_database(path, e))?;
    configure(&conn).map_err(|e| crate::db::error::not_database(path, e))?;
    Ok(conn)
}

/// Applies pending migrations to the SQLite database at `path` (creating it when
/// missing), first copying a database that already has a schema unless told to `Skip`.
fn migrate_file(path: &Path, backup: schema::Backup) -> Result<schema::MigrationReport> {
    let mut conn = open_checked(path)?;
    schema::migrate_conn(&mut conn, path, backup)
}

/// Applies pending migrations to `db`, creating an SQLite file when missing. On
/// PostgreSQL no copy is taken: the pending migrations run in one transaction.
pub fn migrate(db: &Database, backup: schema::Backup) -> Result<schema::MigrationReport> {
    match db {
        Database::Sqlite(path) => migrate_file(path, backup),
        #[cfg(feature = "postgres")]
        Database::Postgres(url) => postgres::migrate(url),
        #[cfg(not(feature = "postgres"))]
        Database::Postgres(url) => Err(no_postgres(url)),
    }
}

/// What `migrate` would apply to `db`, read without writing anything.
pub fn migration_plan(db: &Database) -> Result<schema::MigrationReport> {
    match db {
        Database::Sqlite(path) => schema::plan(path),
        #[cfg(feature = "postgres")]
        Database::Postgres(url) => postgres::plan(url),
        #[cfg(not(feature = "postgres"))]
        Database::Postgres(url) => Err(no_postgres(url)),
    }
}

/// How a store may use its database file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read and write, creating and migrating the database as needed.
    Create,
    /// Read and write a database that exists (a missing or empty file is refused),
    /// migrating it first.
    Existing,
    /// Read only: no write, no migration, no side file. A database that is missing,
    /// empty or behind this binary's schema is refused.
    ReadOnly,
}

/// The database a store works on: a pool of read-write connections, or a file read
/// one transaction at a time through connections that leave no trace, or a
/// PostgreSQL database.
#[derive(Clone)]
pub enum Db {
    ReadWrite(Pool),
    ReadOnly(Arc<PathBuf>),
    #[cfg(feature = "postgres")]
    Postgres(postgres::PgDb),
}

/// The database is PostgreSQL, which this binary was built without.
#[cfg(not(feature = "postgres"))]
fn no_postgres(url: &crate::config::PostgresUrl) -> Error {
    Error::Unreachable {
        url: url.to_string(),
        detail: "this sessionstore was built without the `postgres` feature".to_owned(),
    }
}

impl Db {
    pub fn open(db: &Database, access: Access) -> Result<Db> {
        let path = match db {
            Database::Sqlite(path) => path.as_path(),
            #[cfg(feature = "postgres")]
            Database::Postgres(url) => return Ok(Db::Postgres(postgres::PgDb::open(url, access)?)),
            #[cfg(not(feature = "postgres"))]
            Database::Postgres(url) => return Err(no_postgres(url)),
        };
        let on_disk = schema::inspect(path)?;
        match (access, &on_disk) {
            (Access::Create, _) => {}
            // A file with no sessionstore schema yet (none, empty, or SQLite with no
            // migration applied) is made a database only by a command that creates.
            (Access::Existing, schema::OnDisk::Database(applied)) if !applied.is_empty() => {}
            (Access::Existing, _) => return Err(Error::NoDatabase(path.to_owned())),
            (Access::ReadOnly, schema::OnDisk::Missing) => {
                return Err(Error::NoDatabase(path.to_owned()));
            }
            (Access::ReadOnly, schema::OnDisk::Empty) => {
                return Err(Error::NeedsMigration {
                    path: path.to_owned(),
                    found: 0,
                    latest: schema::latest_version(),
                });
            }
            (Access::ReadOnly, schema::OnDisk::Database(applied)) => {
                schema::require_current(path, applied)?;
                return Ok(Db::ReadOnly(Arc::new(path.to_owned())));
            }
        }
        // Migrated from what was just inspected, rather than inspecting the file again.
        let mut conn = open_inspected(path, &on_disk)?;
        schema::migrate_conn(&mut conn, path, schema::Backup::Make)?;
        drop(conn);
        Ok(Db::ReadWrite(Pool::open(path)?))
    }

    /// `write` on a pooled connection; refused on a read-only database. On
    /// PostgreSQL `f` may run more than once: a transaction that lost a race with
    /// another writer is rolled back and run again.
    pub fn write<T>(&self, f: impl FnMut(&Tx<'_>) -> Result<T>) -> Result<T> {
        match self {
            Db::ReadWrite(pool) => write(&mut **pool.get()?, f),
            Db::ReadOnly(path) => Err(Error::ReadOnly(path.to_path_buf())),
            #[cfg(feature = "postgres")]
            Db::Postgres(pg) => pg.write(f),
        }
    }

    /// `write` for a closure that also touches `session`'s attachment files (send's
    /// check that its uploads are still there, gc's removal of those no message
    /// names): no two such writes of one session overlap. SQLite's write lock already
    /// excludes every other write; on PostgreSQL a per-session advisory lock is held
    /// from before the transaction's snapshot until after it commits.
    pub fn write_for<T>(
        &self,
        session: &crate::ids::SessionId,
        f: impl FnMut(&Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        match self {
            #[cfg(feature = "postgres")]
            Db::Postgres(pg) => pg.write_for(session, f),
            _ => {
                let _ = session;
                self.write(f)
            }
        }
    }

    /// `write` for a group of writes that touch the files of `sessions` (see
    /// `write_for`): on PostgreSQL every session's advisory lock is held, taken in
    /// order so that two groups cannot wait on each other.
    pub fn write_for_sessions<T>(
        &self,
        sessions: &[crate::ids::SessionId],
        f: impl FnMut(&Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        match self {
            #[cfg(feature = "postgres")]
            Db::Postgres(pg) => pg.write_for_all(sessions, f),
            _ => {
                let _ = sessions;
                self.write(f)
            }
        }
    }

    /// Whether a write that failed with `e` would be run again by this engine
    /// (PostgreSQL's lost races); never on SQLite, whose writes take the lock first.
    pub fn is_retried(&self, e: &Error) -> bool {
        match self {
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => postgres::lost_race_at_all(e),
            _ => {
                let _ = e;
                false
            }
        }
    }

    /// `write` with SQLite's `secure_delete` on, so the pages and cells it frees are
    /// zeroed instead of keeping the deleted text, then a checkpoint that copies the
    /// WAL into the main file and truncates it, so no older copy of those pages stays
    /// in the WAL either. Returns whether that checkpoint completed: a reader that
    /// keeps an old snapshot past the busy timeout leaves the WAL for a later one.
    ///
    /// On PostgreSQL the rows go in one transaction, then the tables they were in are
    /// vacuumed so their space is reclaimed; see `postgres::PgDb::erase` for what that
    /// does and does not promise.
    pub fn erase<T>(&self, f: impl FnMut(&Tx<'_>) -> Result<T>) -> Result<(T, bool)> {
        let pool = match self {
            Db::ReadWrite(pool) => pool,
            Db::ReadOnly(path) => return Err(Error::ReadOnly(path.to_path_buf())),
            #[cfg(feature = "postgres")]
            Db::Postgres(pg) => return pg.erase(f),
        };
        let mut conn = pool.get()?;
        let pragma = |conn: &Connection, on: bool| {
            conn.pragma_update(None, "secure_delete", on)
                .map_err(|e| crate::db::error::sqlite("set secure_delete", e))
        };
        pragma(&conn, true)?;
        let written = write(&mut conn, f);
        // The pooled connection goes back as every other one is: without the cost of
        // zeroing on each later write.
        let reset = pragma(&conn, false);
        let value = written?;
        reset?;
        let busy: i64 = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(|e| crate::db::error::sqlite("checkpoint the erasure", e))?;
        Ok((value, busy == 0))
    }

    /// `read` in one snapshot. On a read-only database `f` may run more than once,
    /// when a writer changed the file while it was being read.
    pub fn read<T>(&self, f: impl Fn(&Tx<'_>) -> Result<T>) -> Result<T> {
        match self {
            Db::ReadWrite(pool) => read(&mut **pool.get()?, |tx| f(&Tx::sqlite(tx))),
            Db::ReadOnly(path) => readonly::read(path, |tx| f(&Tx::sqlite(tx))),
            #[cfg(feature = "postgres")]
            Db::Postgres(pg) => pg.read(f),
        }
    }
}

/// Runs `f` in a transaction that takes the write lock up front (`BEGIN IMMEDIATE`),
/// so concurrent writers wait on the busy timeout instead of failing midway, and
/// commits only when `f` returns `Ok`: rows and their events land together or not at all.
pub fn write<T>(conn: &mut Connection, mut f: impl FnMut(&Tx<'_>) -> Result<T>) -> Result<T> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| crate::db::error::sqlite("begin a write", e))?;
    let value = f(&Tx::sqlite(&tx))?;
    tx.commit()
        .map_err(|e| crate::db::error::sqlite("commit a write", e))?;
    Ok(value)
}

/// Runs `f` in a read transaction, so multi-statement reads see one snapshot.
pub fn read<T>(
    conn: &mut Connection,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>,
) -> Result<T> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Deferred)
        .map_err(|e| crate::db::error::sqlite("begin a read", e))?;
    f(&tx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use r2d2_sqlite::SqliteConnectionManager;

    /// A panic inside a write closure unwinds through the transaction, whose drop rolls
    /// it back, so the connection goes back to the pool in autocommit mode and the
    /// next user of it neither inherits the half-done write nor finds the lock held.
    #[test]
    fn a_panic_inside_a_write_never_leaves_a_pooled_connection_mid_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let pool = r2d2::Pool::builder()
            .max_size(1)
            .build(
                SqliteConnectionManager::file(dir.path().join("p.db")).with_init(|c| configure(c)),
            )
            .unwrap();
        pool.get()
            .unwrap()
            .execute_batch("CREATE TABLE t (x INTEGER)")
            .unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut conn = pool.get().unwrap();
            let _: Result<()> = write(&mut conn, |tx| {
                tx.execute("INSERT INTO t VALUES (1)", sql::args![])
                    .unwrap();
                panic!("a bug inside a write");
            });
        }));
        assert!(result.is_err(), "the closure panicked");
        let mut conn = pool.get().unwrap();
        assert!(
            conn.is_autocommit(),
            "the pooled connection is mid-transaction"
        );
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 0, "the panicked write was rolled back");
        // Another connection can take the write lock at once.
        let other = Connection::open(dir.path().join("p.db")).unwrap();
        other.busy_timeout(Duration::ZERO).unwrap();
        other.execute("INSERT INTO t VALUES (2)", []).unwrap();
        write(&mut conn, |tx| {
            tx.execute("INSERT INTO t VALUES (3)", sql::args![])
                .map_err(|e| crate::db::error::failed("insert", e))?;
            Ok(())
        })
        .unwrap();
    }
}
