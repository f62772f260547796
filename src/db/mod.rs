//! Every SQL statement of the crate lives under this module: connection set-up, the
//! schema's migrations, the record reads and writes, and the integrity check. Its
//! functions are synchronous and never touch attachment files.

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

/// An SQLite database file as the store opens it: where it is, the key it is encrypted
/// with (`None` for a plain file), and who may read the files made for it (SQLite gives
/// its side files the main file's own mode, so that is the mode to get right).
#[derive(Debug, Clone)]
pub(crate) struct SqliteFile {
    pub(crate) path: PathBuf,
    pub(crate) key: Option<DatabaseKey>,
    pub(crate) sharing: Sharing,
}

impl SqliteFile {
    /// The file at `path` with `config`'s key and sharing, refusing a key this build
    /// cannot use.
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

/// The database `config` names, as an SQLite file, or `None` for PostgreSQL, which
/// takes no key.
pub(crate) fn sqlite_file(config: &Config) -> Result<Option<SqliteFile>> {
    match &config.database {
        Database::Sqlite(path) => SqliteFile::of(path, config).map(Some),
        Database::Postgres(_) if config.key.is_some() => Err(Error::EncryptionUnavailable {
            reason: "the database is on a PostgreSQL server, whose files the server keeps",
        }),
        Database::Postgres(_) => Ok(None),
    }
}

/// Makes the folders above the database, with the sharing's folder mode, and the file
/// itself when it is missing, with its file mode: SQLite would make it `0644` less the
/// umask, and its `-wal`, `-shm` and `-journal` copy that mode.
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

/// Opens one configured read-write connection, creating the file if needed, after the
/// read-only checks have said the file is safe to touch: among them, that a database
/// with migrations applied has the schema they make, since switching it to WAL below
/// is already a write.
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

/// Applies pending migrations to the SQLite database `db` (creating it when missing),
/// first copying a database that already has a schema unless told to `Skip`.
fn migrate_file(db: &SqliteFile, backup: schema::Backup) -> Result<schema::MigrationReport> {
    let mut conn = open_checked(db)?;
    schema::migrate_conn(&mut conn, db, backup)
}

/// Applies pending migrations to the database `config` names, creating an SQLite file
/// when missing. On PostgreSQL no copy is taken: the pending migrations run in one
/// transaction.
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

/// What `migrate` would apply to the database `config` names, read without writing
/// anything.
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

/// Encrypts the plain SQLite database `config` names with `config.key` (a copy
/// encrypted first, which then takes the file's place, and kept as a backup unless
/// told to `Skip`), then applies pending migrations without a second copy. Returns the
/// migrations' report, with the backup and the change it made.
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

/// Changes the key of the encrypted SQLite database `config` names (and keys) to
/// `new`, first copying it, encrypted with `new`, unless told to `Skip`; then applies
/// pending migrations without a second copy.
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

/// The database a store works on: a pool of read-write connections, or a file read
/// one transaction at a time through connections that leave no trace, or a
/// PostgreSQL database.
#[derive(Clone)]
pub enum Db {
    ReadWrite(Pool),
    ReadOnly(Arc<SqliteFile>),
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
        // Migrated from what was just inspected, rather than inspecting the file again.
        let mut conn = open_inspected(&db, &on_disk)?;
        schema::migrate_conn(&mut conn, &db, schema::Backup::Make)?;
        drop(conn);
        Ok(Db::ReadWrite(Pool::open(&db)?))
    }

    /// Whether sealed segments wait to be indexed by this database's writer (V14): an
    /// SQLite file open for writing. PostgreSQL indexes each as it is written.
    pub fn defers_search(&self) -> bool {
        matches!(self, Db::ReadWrite(_))
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

    /// After a rewrite in place (`redact`): SQLite's `VACUUM`, which writes every
    /// table into fresh pages, then a checkpoint that truncates the WAL. `secure_delete`
    /// zeroes what a write frees, but not what earlier writes left in a page's unused
    /// space (a page that split or became an interior page keeps the bytes of the
    /// cells it moved), so a text rewritten in place can still sit there. `VACUUM`
    /// keeps every row id (its copy goes row by row into empty tables), which the
    /// search index's documents are keyed by. Returns whether the checkpoint
    /// completed. PostgreSQL's `erase` vacuumed already: nothing to do.
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
        let busy: i64 = conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            .map_err(|e| crate::db::error::sqlite("checkpoint the vacuum", e))?;
        Ok(busy == 0)
    }

    /// `read` in one snapshot. On a read-only database `f` may run more than once,
    /// when a writer changed the file while it was being read.
    pub fn read<T>(&self, f: impl Fn(&Tx<'_>) -> Result<T>) -> Result<T> {
        match self {
            Db::ReadWrite(pool) => read(&mut **pool.get()?, |tx| f(&Tx::sqlite(tx))),
            Db::ReadOnly(db) => readonly::read(db, |tx| f(&Tx::sqlite(tx))),
            #[cfg(feature = "postgres")]
            Db::Postgres(pg) => pg.read(f),
        }
    }

    /// [`Db::read`] for a reader that hands on what it reads before it ends (a
    /// streamed restore), so it is never run twice: one snapshot, read once.
    pub fn read_once<T>(&self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        match self {
            Db::ReadWrite(pool) => read(&mut **pool.get()?, |tx| f(&Tx::sqlite(tx))),
            Db::ReadOnly(db) => readonly::read_once(db, |tx| f(&Tx::sqlite(tx))),
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
