//! Every SQL statement of the crate lives under this module: connection set-up, the
//! schema's migrations, the record reads and writes, and the integrity check. Its
//! functions are synchronous and never touch attachment files.

pub mod queries;
pub mod schema;
pub mod verify;

use std::path::Path;
use std::time::Duration;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, TransactionBehavior};

use crate::error::{Error, Result};

pub type Pool = r2d2::Pool<SqliteConnectionManager>;

/// How long a connection waits for another writer before giving up with SQLITE_BUSY.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings every connection gets on open. `synchronous = FULL` syncs the WAL on each
/// commit: see ARCHITECTURE.md for what a crash and a power cut can each lose.
fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
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
/// read-only checks have said the file is safe to touch.
pub fn open_checked(path: &Path) -> Result<Connection> {
    schema::check_readable(path)?;
    ensure_parent(path)?;
    let conn = Connection::open(path).map_err(|e| Error::not_database(path, e))?;
    configure(&conn).map_err(|e| Error::not_database(path, e))?;
    Ok(conn)
}

/// Applies pending migrations to the database at `path`; the same logic runs when a
/// store is opened, so nothing ever works on an unmigrated database.
pub fn migrate(path: &Path) -> Result<schema::MigrationReport> {
    let mut conn = open_checked(path)?;
    schema::migrate_conn(&mut conn, path)
}

/// Migrates, then builds the pool. Every pooled connection is configured on open.
pub fn open_pool(path: &Path) -> Result<Pool> {
    migrate(path)?;
    let manager = SqliteConnectionManager::file(path).with_init(|c| configure(c));
    Ok(r2d2::Pool::builder().max_size(8).build(manager)?)
}

/// Runs `f` in a transaction that takes the write lock up front (`BEGIN IMMEDIATE`),
/// so concurrent writers wait on the busy timeout instead of failing midway, and
/// commits only when `f` returns `Ok`: rows and their events land together or not at all.
pub fn write<T>(
    conn: &mut Connection,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>,
) -> Result<T> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| Error::sqlite("begin a write", e))?;
    let value = f(&tx)?;
    tx.commit()
        .map_err(|e| Error::sqlite("commit a write", e))?;
    Ok(value)
}

/// Runs `f` in a read transaction, so multi-statement reads see one snapshot.
pub fn read<T>(
    conn: &mut Connection,
    f: impl FnOnce(&rusqlite::Transaction<'_>) -> Result<T>,
) -> Result<T> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Deferred)
        .map_err(|e| Error::sqlite("begin a read", e))?;
    f(&tx)
}

#[cfg(test)]
mod tests {
    use super::*;

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
                tx.execute("INSERT INTO t VALUES (1)", []).unwrap();
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
            tx.execute("INSERT INTO t VALUES (3)", [])
                .map_err(|e| Error::sqlite("insert", e))?;
            Ok(())
        })
        .unwrap();
    }
}
