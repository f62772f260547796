//! Every SQL statement of the crate lives under this module: connection set-up,
//! migrations, record reads and writes, the integrity check. Its functions are
//! synchronous and never touch attachment files.

pub mod append;
#[cfg(any(test, feature = "probe", feature = "testkit"))]
pub mod audit;
pub mod cipher;
pub(crate) mod claim;
#[cfg(test)]
mod compat;
pub mod copies;
pub mod entries;
pub mod error;
pub mod group;
pub mod items;
pub mod pages;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod proxied;
pub mod queries;
mod readonly;
pub mod redact;
mod reference;
pub mod repair;
pub mod schema;
pub mod search;
pub mod sessions;
pub mod sql;
pub mod usage;
pub mod verify;

mod pool;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use crate::config::{Config, Database, DatabaseKey, Sharing};
use crate::error::{Error, Result};

pub use pool::Pool;
pub use sql::Tx;

/// How long a connection waits for another writer before giving up with SQLITE_BUSY.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings every connection gets on open. `synchronous = FULL` syncs the WAL on each
/// commit (RELIABILITY.md says what a crash and a power cut can each lose).
fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Every statement runs through the cache (`Tx`); a restore uses more than 16.
    conn.set_prepared_statement_cache_capacity(64);
    // Switching to WAL can report busy under a concurrent opener before the busy
    // handler applies, so it is retried briefly.
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

/// An SQLite database file as the store opens it: its key (`None`: plain), and who may
/// read the files made for it (SQLite gives side files the main file's mode).
#[derive(Debug, Clone)]
pub(crate) struct SqliteFile {
    pub(crate) path: PathBuf,
    pub(crate) key: Option<DatabaseKey>,
    pub(crate) sharing: Sharing,
}

impl SqliteFile {
    /// The file at `path` with `config`'s key and sharing; a key this build cannot use
    /// is refused.
    pub(crate) fn of(path: &Path, config: &Config) -> Result<SqliteFile> {
        if config.key.is_some() && !cfg!(feature = "encryption") {
            return Err(Error::EncryptionUnavailable {
                reason: "this sessionstore was built without the `encryption` feature",
            });
        }
        Ok(SqliteFile {
            path: path.to_owned(),
            key: config.key.clone(),
            sharing: config.sharing,
        })
    }

    /// A plain file, owner-only: the unit tests' database.
    #[cfg(test)]
    pub(crate) fn plain(path: impl Into<PathBuf>) -> SqliteFile {
        SqliteFile {
            path: path.into(),
            key: None,
            sharing: Sharing::Owner,
        }
    }
}

/// The SQLite file `config` names, or `None` for PostgreSQL (which takes no key).
pub(crate) fn sqlite_file(config: &Config) -> Result<Option<SqliteFile>> {
    match &config.database {
        Database::Sqlite(path) => SqliteFile::of(path, config).map(Some),
        Database::Postgres(_) if config.key.is_some() => Err(Error::EncryptionUnavailable {
            reason: "the database is on a PostgreSQL server, whose files the server keeps",
        }),
        Database::Postgres(_) => Ok(None),
    }
}

/// Makes the folders above the database and the missing file with the sharing's
/// modes: SQLite would make it `0644` less the umask, and its side files copy that.
fn ensure_file(db: &SqliteFile) -> Result<()> {
    let io = |cause| Error::DatabaseIo {
        path: db.path.clone(),
        cause,
    };
    if let Some(parent) = db.path.parent() {
        crate::permissions::create_dir_all(parent, db.sharing).map_err(io)?;
    }
    match crate::permissions::create_new(&db.path, db.sharing) {
        Ok(_) => Ok(()),
        // Another opener made it first (or it was there): theirs, left as it is.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// Opens one configured read-write connection, creating the file if needed, once the
/// read-only checks said the file is safe to touch (a migrated database must have the
/// schema its migrations make: switching it to WAL is already a write).
pub(crate) fn open_checked(db: &SqliteFile) -> Result<Connection> {
    open_inspected(db, &schema::inspect(db)?)
}

/// `open_checked` for a file whose `inspect` the caller has just read.
fn open_inspected(db: &SqliteFile, on_disk: &schema::OnDisk) -> Result<Connection> {
    if let schema::OnDisk::Database(applied) = on_disk
        && !applied.is_empty()
    {
        verify::require_intact_schema(db)?;
    }
    if let schema::OnDisk::Missing = on_disk {
        ensure_file(db)?;
    }
    let conn = Connection::open(&db.path).map_err(|e| cipher::opening(db, e))?;
    cipher::key(&conn, db.key.as_ref()).map_err(|e| cipher::opening(db, e))?;
    configure(&conn).map_err(|e| cipher::opening(db, e))?;
    Ok(conn)
}

/// Applies pending migrations to `db` (created when missing), first copying a database
/// that has a schema unless told to `Skip`.
fn migrate_file(db: &SqliteFile, backup: schema::Backup) -> Result<schema::MigrationReport> {
    let mut conn = open_checked(db)?;
    schema::migrate_conn(&mut conn, db, backup)
}

/// Applies pending migrations to the database `config` names. On PostgreSQL no copy
/// is taken: the pending migrations run in one transaction.
pub fn migrate(config: &Config, backup: schema::Backup) -> Result<schema::MigrationReport> {
    match (sqlite_file(config)?, &config.database) {
        (Some(db), _) => migrate_file(&db, backup),
        #[cfg(feature = "postgres")]
        (None, Database::Postgres(url)) => postgres::migrate(url),
        #[cfg(not(feature = "postgres"))]
        (None, Database::Postgres(url)) => Err(no_postgres(url)),
        (None, Database::Sqlite(_)) => unreachable!("an SQLite database is a file"),
    }
}

/// What `migrate` would apply, read without writing anything.
pub fn migration_plan(config: &Config) -> Result<schema::MigrationReport> {
    match (sqlite_file(config)?, &config.database) {
        (Some(db), _) => schema::plan(&db),
        #[cfg(feature = "postgres")]
        (None, Database::Postgres(url)) => postgres::plan(url),
        #[cfg(not(feature = "postgres"))]
        (None, Database::Postgres(url)) => Err(no_postgres(url)),
        (None, Database::Sqlite(_)) => unreachable!("an SQLite database is a file"),
    }
}

/// Encrypts the plain SQLite database `config` names with `config.key` (an encrypted
/// copy takes the file's place, kept as a backup unless told to `Skip`), then applies
/// pending migrations without a second copy.
#[cfg(feature = "encryption")]
pub fn encrypt(config: &Config, backup: schema::Backup) -> Result<schema::MigrationReport> {
    let (db, key) = keyed(config)?;
    let copy = cipher::encrypt(
        &SqliteFile {
            key: None,
            ..db.clone()
        },
        &key,
        backup,
    )?;
    finish_key_change(&db, copy, schema::KeyChange::Encrypted, backup)
}

/// Changes the key of the encrypted database `config` names to `new` (first copying
/// it, encrypted with `new`, unless told to `Skip`), then applies pending migrations.
#[cfg(feature = "encryption")]
pub fn rekey(
    config: &Config,
    new: &DatabaseKey,
    backup: schema::Backup,
) -> Result<schema::MigrationReport> {
    let (db, _) = keyed(config)?;
    let copy = cipher::rekey(&db, new, backup)?;
    let db = SqliteFile {
        key: Some(new.clone()),
        ..db
    };
    finish_key_change(&db, copy, schema::KeyChange::Rekeyed, backup)
}

/// The SQLite file and the key of a change of encryption.
#[cfg(feature = "encryption")]
fn keyed(config: &Config) -> Result<(SqliteFile, DatabaseKey)> {
    let (Some(db), Some(key)) = (sqlite_file(config)?, config.key.clone()) else {
        return Err(Error::EncryptionUnavailable {
            reason: match config.database {
                Database::Postgres(_) => {
                    "the database is on a PostgreSQL server, whose files the server keeps"
                }
                Database::Sqlite(_) => "no key was given (--key-file)",
            },
        });
    };
    Ok((db, key))
}

/// The migrations after a change of encryption, which took the copy an upgrade would.
#[cfg(feature = "encryption")]
fn finish_key_change(
    db: &SqliteFile,
    copy: Option<PathBuf>,
    change: schema::KeyChange,
    backup: schema::Backup,
) -> Result<schema::MigrationReport> {
    let after = if copy.is_some() {
        schema::Backup::Skip
    } else {
        backup
    };
    let mut report = migrate_file(db, after)?;
    report.backup = report.backup.or(copy);
    report.encryption = Some(change);
    Ok(report)
}

/// How a store may use its database file (`Store::open_as`); `Create` by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Access {
    /// Read and write, creating and migrating the database as needed.
    #[default]
    Create,
    /// Read and write a database that exists (a missing or empty file is refused),
    /// migrating it first.
    Existing,
    /// Read only: no write, no migration, no side file. A database that is missing,
    /// empty or behind this binary's schema is refused.
    ReadOnly,
}

/// The database a store works on: a read-write pool, a file read through connections
/// that leave no trace, or PostgreSQL.
#[derive(Clone)]
pub enum Db {
    ReadWrite(Pool),
    ReadOnly(Arc<SqliteFile>),
    #[cfg(feature = "postgres")]
    Postgres(postgres::PgDb),
}

/// The database is PostgreSQL, which this binary was built without.
#[cfg(not(feature = "postgres"))]
pub(crate) fn no_postgres(url: &crate::config::PostgresUrl) -> Error {
    Error::Unreachable {
        url: url.to_string(),
        detail: "this sessionstore was built without the `postgres` feature".to_owned(),
    }
}

impl Db {
    /// Opens the database `config` names for `access`.
    pub fn open(config: &Config, access: Access) -> Result<Db> {
        let db = match (sqlite_file(config)?, &config.database) {
            (Some(db), _) => db,
            #[cfg(feature = "postgres")]
            (None, Database::Postgres(url)) => {
                return Ok(Db::Postgres(postgres::PgDb::open(url, access)?));
            }
            #[cfg(not(feature = "postgres"))]
            (None, Database::Postgres(url)) => return Err(no_postgres(url)),
            (None, Database::Sqlite(_)) => unreachable!("an SQLite database is a file"),
        };
        let path = db.path.as_path();
        let on_disk = schema::inspect(&db)?;
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
                return Ok(Db::ReadOnly(Arc::new(db)));
            }
        }
        let mut conn = open_inspected(&db, &on_disk)?;
        schema::migrate_conn(&mut conn, &db, schema::Backup::Make)?;
        drop(conn);
        Ok(Db::ReadWrite(Pool::open(&db)?))
    }

    /// `write` on a pooled connection; refused on a read-only database. On
    /// PostgreSQL `f` may run more than once: a transaction that lost a race with
    /// another writer is rolled back and run again.
    pub fn write<T>(&self, f: impl FnMut(&Tx<'_>) -> Result<T>) -> Result<T> {
        match self {
            Db::ReadWrite(pool) => write(&mut **pool.get()?, f),
            Db::ReadOnly(db) => Err(Error::ReadOnly(db.path.clone())),
            #[cfg(feature = "postgres")]
            Db::Postgres(pg) => pg.write(f),
        }
    }

    /// `write` for a closure that also touches `session`'s attachment files (send's
    /// check of its uploads, gc's removals): no two such writes of one session overlap.
    /// SQLite's write lock excludes every other write; on PostgreSQL a per-session
    /// advisory lock is held from before the snapshot until after the commit.
    pub fn write_for<T>(
        &self,
        session: &crate::ids::SessionId,
        f: impl FnMut(&Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        self.write_for_sessions(std::slice::from_ref(session), f)
    }

    /// [`Db::write_for`] of several sessions (a group commit's), their locks taken in
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
            Db::Postgres(_) => postgres::lost_race(e, 0),
            _ => {
                let _ = e;
                false
            }
        }
    }

    /// `write` with SQLite's `secure_delete` on, so freed pages and cells are zeroed,
    /// then a truncating checkpoint, so no older copy stays in the WAL. Returns whether
    /// the checkpoint completed (a reader past the busy timeout leaves it for later).
    /// On PostgreSQL, see `postgres::PgDb::erase`.
    pub fn erase<T>(&self, f: impl FnMut(&Tx<'_>) -> Result<T>) -> Result<(T, bool)> {
        let pool = match self {
            Db::ReadWrite(pool) => pool,
            Db::ReadOnly(db) => return Err(Error::ReadOnly(db.path.clone())),
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
        // The connection goes back to the pool without the cost of zeroing.
        let reset = pragma(&conn, false);
        let value = written?;
        reset?;
        Ok((value, checkpoint(&conn, "checkpoint the erasure")?))
    }

    /// After a rewrite in place (`redact`): SQLite's `VACUUM`, then a truncating
    /// checkpoint. `secure_delete` does not zero what earlier writes left in a page's
    /// unused space (a split page keeps the bytes of the cells it moved); `VACUUM`
    /// rewrites every page and keeps every row id, which the search index is keyed by.
    /// Returns whether the checkpoint completed. PostgreSQL's `erase` vacuumed already.
    pub fn rewrite_pages(&self) -> Result<bool> {
        let pool = match self {
            Db::ReadWrite(pool) => pool,
            Db::ReadOnly(db) => return Err(Error::ReadOnly(db.path.clone())),
            #[cfg(feature = "postgres")]
            Db::Postgres(_) => return Ok(true),
        };
        let conn = pool.get()?;
        conn.execute_batch("VACUUM")
            .map_err(|e| crate::db::error::sqlite("vacuum the database", e))?;
        checkpoint(&conn, "checkpoint the vacuum")
    }

    /// `read` in one snapshot. On a read-only database `f` may run more than once.
    pub fn read<T>(&self, f: impl Fn(&Tx<'_>) -> Result<T>) -> Result<T> {
        match self {
            Db::ReadWrite(pool) => read(&mut **pool.get()?, |tx| f(&Tx::sqlite(tx))),
            Db::ReadOnly(db) => readonly::read(db, |tx| f(&Tx::sqlite(tx))),
            #[cfg(feature = "postgres")]
            Db::Postgres(pg) => pg.read(f),
        }
    }

    /// [`Db::read`] for a reader that hands on what it reads before it ends (a
    /// streamed restore): never run twice.
    pub fn read_once<T>(&self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        match self {
            Db::ReadWrite(pool) => read(&mut **pool.get()?, |tx| f(&Tx::sqlite(tx))),
            Db::ReadOnly(db) => readonly::read_once(db, |tx| f(&Tx::sqlite(tx))),
            #[cfg(feature = "postgres")]
            Db::Postgres(pg) => pg.read(f),
        }
    }
}

/// A truncating checkpoint: whether it completed.
fn checkpoint(conn: &Connection, action: &'static str) -> Result<bool> {
    let busy: i64 = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
        .map_err(|e| crate::db::error::sqlite(action, e))?;
    Ok(busy == 0)
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

    /// A panic inside a write closure rolls the transaction back as it unwinds: the
    /// pooled connection is in autocommit mode again and the lock is free.
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
