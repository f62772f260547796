//! Schema versions: embedded migrations, refusing files not ours to touch, the backup
//! before an upgrade, and applying pending migrations under one write lock. A refused
//! database is never written.

use std::path::{Path, PathBuf};

use refinery::{Migration, Runner};
use refinery_core::traits::sync::{Migrate, Query, Transaction};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{SqliteFile, cipher, readonly};
use crate::config::{DatabaseKey, Sharing};
use crate::error::{Error, Result};

mod embedded {
    refinery::embed_migrations!("migrations");
}

/// refinery's own history table; its presence is how an older or newer schema is told.
pub const HISTORY_TABLE: &str = "refinery_schema_history";

/// What `migrate` did, or with `dry_run` would do.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MigrationReport {
    /// Applied by this call, as `V<N>__<name>`; empty for a dry run.
    pub applied: Vec<String>,
    /// Still pending after this call (only a dry run leaves any).
    pub pending: Vec<String>,
    pub current: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<PathBuf>,
    /// The change of encryption made first (`migrate --encrypt`, `--rekey`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encryption: Option<KeyChange>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyChange {
    Encrypted,
    Rekeyed,
}

/// Whether an upgrade first copies a database that has a schema to `<db>.v<N>.bak`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backup {
    Make,
    /// `migrate --no-backup`.
    Skip,
}

/// The migrations compiled into this binary, in version order.
pub(crate) fn embedded() -> Vec<Migration> {
    let mut migrations = embedded::migrations::runner().get_migrations().clone();
    migrations.sort_by_key(|m| m.version());
    migrations
}

pub(crate) fn label(m: &Migration) -> String {
    format!("V{}__{}", m.version(), m.name())
}

pub(crate) fn latest(migrations: &[Migration]) -> i64 {
    migrations
        .iter()
        .map(|m| i64::from(m.version()))
        .max()
        .unwrap_or(0)
}

pub fn latest_version() -> i64 {
    latest(&embedded())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) version: i64,
    pub(crate) name: String,
}

/// 0 for no history.
pub(crate) fn current(applied: &[Applied]) -> i64 {
    applied.iter().map(|a| a.version).max().unwrap_or(0)
}

pub(crate) fn pending<'m>(migrations: &'m [Migration], applied: &[Applied]) -> Vec<&'m Migration> {
    migrations
        .iter()
        .filter(|m| !applied.iter().any(|a| a.version == i64::from(m.version())))
        .collect()
}

/// Reads the history without writing. `None` when the table does not exist.
pub(crate) fn read_history(conn: &Connection) -> rusqlite::Result<Option<Vec<Applied>>> {
    let exists: Option<i64> = conn
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
            [HISTORY_TABLE],
            |row| row.get(0),
        )
        .optional()?;
    if exists.is_none() {
        return Ok(None);
    }
    let mut stmt = conn.prepare(&format!(
        "SELECT version, name FROM {HISTORY_TABLE} ORDER BY version"
    ))?;
    let rows = stmt.query_map([], |row| {
        Ok(Applied {
            version: row.get(0)?,
            name: row.get(1)?,
        })
    })?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map(Some)
}

#[derive(Debug)]
pub(crate) enum OnDisk {
    Missing,
    /// No bytes: SQLite would make it a database on first write.
    Empty,
    /// The migrations applied so far (none for a database with no tables).
    Database(Vec<Applied>),
}

/// Every command passes here first. Without writing a byte or making a side file,
/// refuses what is not a regular SQLite file of ours at most this binary's version,
/// truncated, or keyed wrongly (SQLite would take a 1-byte file as empty and overwrite
/// it), and any `-wal`/`-shm`/`-journal` beside it that is not a regular file.
pub(crate) fn inspect(db: &SqliteFile) -> Result<OnDisk> {
    let path = db.path.as_path();
    let refuse = |detail: &str| Error::NotDatabase {
        path: path.to_owned(),
        detail: detail.to_owned(),
    };
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A new database would be made beside them, and its WAL opened.
            readonly::check_side_files(path)?;
            return Ok(OnDisk::Missing);
        }
        Err(cause) => {
            return Err(Error::DatabaseIo {
                path: path.to_owned(),
                cause,
            });
        }
    };
    if meta.is_dir() {
        return Err(refuse("it is a directory, not a database file"));
    }
    if !meta.is_file() {
        return Err(refuse("it is not a regular file"));
    }
    readonly::check_side_files(path)?;
    if meta.len() == 0 {
        return Ok(OnDisk::Empty);
    }
    check_header(db, meta.len())?;
    let (history, objects) = readonly::read(db, |conn| {
        let inspect = || {
            let history = read_history(conn)?;
            let objects: i64 =
                conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
            Ok((history, objects))
        };
        inspect().map_err(|e| cipher::opening(db, e))
    })?;
    match (history, objects) {
        (Some(history), _) => {
            refuse_unknown(path, &history, &embedded())?;
            Ok(OnDisk::Database(history))
        }
        (None, 0) => Ok(OnDisk::Database(vec![])),
        (None, _) => Err(refuse(
            "it is a sqlite database of something else (it has tables but no sessionstore \
             schema history), so sessionstore leaves it alone",
        )),
    }
}

/// Refuses a file without SQLite's header or shorter than its header's page count; the
/// length only while no writer is present (a live file may be mid-checkpoint). With a
/// key, a headerless file is left to SQLCipher, whose truncated file fails its first read.
fn check_header(db: &SqliteFile, len: u64) -> Result<()> {
    use std::io::Read;
    let path = db.path.as_path();
    let mut header = Vec::with_capacity(100);
    std::fs::File::open(path)
        .and_then(|file| file.take(100).read_to_end(&mut header))
        .map_err(|cause| Error::DatabaseIo {
            path: path.to_owned(),
            cause,
        })?;
    if !header.starts_with(cipher::MAGIC) {
        return match cipher::without_header(db, len) {
            Some(refusal) => Err(refusal),
            None => Ok(()),
        };
    }
    if let Some(refusal) = cipher::with_header(db) {
        return Err(refusal);
    }
    if header.len() < 100 {
        return Err(Error::NotDatabase {
            path: path.to_owned(),
            detail: "it does not begin with a sqlite database header".to_owned(),
        });
    }
    let be32 = |at: usize| {
        u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
    };
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        n => u64::from(n),
    };
    let pages = u64::from(be32(28));
    // SQLite trusts the header's page count only when this "valid for" number matches
    // the change counter; otherwise it counts pages from the file size itself.
    let count_valid = be32(92) == be32(24);
    let expected = pages * page_size;
    if count_valid && !readonly::writer_present(path) && len < expected {
        return Err(Error::NotDatabase {
            path: path.to_owned(),
            detail: format!(
                "it is {len} bytes long but its header says {expected}: it looks truncated"
            ),
        });
    }
    Ok(())
}

/// For reading commands, which never migrate: refuses any schema but the latest.
pub(crate) fn require_current(path: &Path, applied: &[Applied]) -> Result<()> {
    let migrations = embedded();
    if pending(&migrations, applied).is_empty() {
        return Ok(());
    }
    Err(Error::NeedsMigration {
        path: path.to_owned(),
        found: current(applied),
        latest: latest(&migrations),
    })
}

/// Refuses a history with a migration (version and name) not in `migrations`.
pub(crate) fn refuse_unknown(
    path: &Path,
    applied: &[Applied],
    migrations: &[Migration],
) -> Result<()> {
    let unknown: Vec<String> = applied
        .iter()
        .filter(|a| {
            !migrations
                .iter()
                .any(|m| i64::from(m.version()) == a.version && m.name() == a.name)
        })
        .map(|a| format!("V{}__{}", a.version, a.name))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(Error::NewerSchema {
        path: path.to_owned(),
        found: current(applied),
        known: latest(migrations),
        unknown,
    })
}

/// refinery's rusqlite driver opens a transaction per step; this adapter instead runs
/// every step inside the caller's `BEGIN IMMEDIATE`, so checking what is applied and
/// applying the rest happen under one write lock and commit or roll back together.
struct Locked<'a>(&'a Connection);

impl Transaction for Locked<'_> {
    type Error = rusqlite::Error;

    fn execute<'a, T: Iterator<Item = &'a str>>(&mut self, queries: T) -> rusqlite::Result<usize> {
        let mut count = 0;
        for query in queries {
            self.0.execute_batch(query)?;
            count += 1;
        }
        Ok(count)
    }
}

impl Query<Vec<Migration>> for Locked<'_> {
    fn query(&mut self, query: &str) -> rusqlite::Result<Vec<Migration>> {
        let mut stmt = self.0.prepare(query)?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let applied_on: String = row.get(2)?;
            let checksum: String = row.get(3)?;
            let bad = |what: &str| {
                rusqlite::Error::InvalidColumnType(2, what.to_owned(), rusqlite::types::Type::Text)
            };
            out.push(Migration::applied(
                row.get(0)?,
                row.get(1)?,
                OffsetDateTime::parse(&applied_on, &Rfc3339).map_err(|_| bad("applied_on"))?,
                checksum.parse().map_err(|_| bad("checksum"))?,
            ));
        }
        Ok(out)
    }
}

impl Migrate for Locked<'_> {}

/// What a migration run would apply, without writing a byte.
pub(crate) fn plan(db: &SqliteFile) -> Result<MigrationReport> {
    let applied = match inspect(db)? {
        OnDisk::Database(applied) => applied,
        OnDisk::Missing | OnDisk::Empty => vec![],
    };
    let migrations = embedded();
    Ok(MigrationReport {
        applied: vec![],
        pending: pending(&migrations, &applied)
            .into_iter()
            .map(label)
            .collect(),
        current: current(&applied),
        backup: None,
        encryption: None,
    })
}

/// Applies pending migrations and their history rows in one transaction. Concurrent
/// callers queue on the write lock; the second finds nothing left to apply.
pub(crate) fn migrate_conn(
    conn: &mut Connection,
    db: &SqliteFile,
    backup: Backup,
) -> Result<MigrationReport> {
    migrate_with(conn, db, &embedded(), backup)
}

/// `migrate_conn` with the migrations given: tests add one the binary does not have.
pub(crate) fn migrate_with(
    conn: &mut Connection,
    db: &SqliteFile,
    migrations: &[Migration],
    backup: Backup,
) -> Result<MigrationReport> {
    // A migration that remakes a table (V5, V12) drops the old one while other rows
    // still refer to it; enforced keys would call them broken, and the pragma cannot
    // change inside a transaction. So keys are off, and `migrate_locked` checks them.
    conn.execute_batch("PRAGMA foreign_keys = OFF")
        .map_err(|e| crate::db::error::sqlite("prepare to migrate", e))?;
    let migrated = migrate_locked(conn, db, migrations, backup);
    let enforced = conn
        .execute_batch("PRAGMA foreign_keys = ON")
        .map_err(|e| crate::db::error::sqlite("enforce foreign keys again", e));
    let report = migrated?;
    enforced?;
    Ok(report)
}

fn broken_keys(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
        r.get(0)
    })
}

/// Refuses, with nothing applied, migrations that leave more broken foreign keys
/// than there were before.
fn migrate_locked(
    conn: &mut Connection,
    db: &SqliteFile,
    migrations: &[Migration],
    backup: Backup,
) -> Result<MigrationReport> {
    let path = db.path.as_path();
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| crate::db::error::sqlite("take the write lock for migrate", e))?;
    // Checked again under the lock: another process may have upgraded in between.
    let applied = read_history(&tx)
        .map_err(|e| crate::db::error::sqlite("read schema history", e))?
        .unwrap_or_default();
    refuse_unknown(path, &applied, migrations)?;
    let before = current(&applied);
    // Each key check scans tables: only when there is something to apply.
    let check = !pending(migrations, &applied).is_empty();
    let copy = if backup == Backup::Make && !applied.is_empty() && check {
        Some(back_up(db, before)?)
    } else {
        None
    };
    let keys = |tx: &rusqlite::Transaction<'_>| {
        broken_keys(tx).map_err(|e| crate::db::error::sqlite("check foreign keys", e))
    };
    let broken_before = if check && !applied.is_empty() {
        keys(&tx)?
    } else {
        0
    };
    let report = Runner::new(migrations)
        .set_grouped(true)
        .run(&mut Locked(&tx))
        .map_err(|e| Error::Migration(e.to_string()))?;
    let broken = if check { keys(&tx)? } else { 0 };
    if broken > broken_before {
        return Err(Error::Migration(format!(
            "the migrations would leave rows referring to rows that are not there \
             ({} more than before)",
            broken - broken_before
        )));
    }
    tx.commit()
        .map_err(|e| crate::db::error::sqlite("commit migrations", e))?;
    Ok(MigrationReport {
        current: latest(migrations).max(before),
        applied: report.applied_migrations().iter().map(label).collect(),
        pending: vec![],
        backup: copy,
        encryption: None,
    })
}

/// Copies `db` to a new `<db>.v<version>[.<n>].bak` (never overwritten), keyed like
/// it. The caller holds the write lock, so the copy is the database as the upgrade
/// found it; a second connection reads it, as SQLite will not back up from a
/// connection inside a write transaction.
pub(crate) fn back_up(db: &SqliteFile, version: i64) -> Result<PathBuf> {
    let failed = |e| crate::db::error::sqlite("back up the database", e);
    let source = Connection::open_with_flags(
        &db.path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(failed)?;
    cipher::key(&source, db.key.as_ref()).map_err(failed)?;
    source.busy_timeout(super::BUSY_TIMEOUT).map_err(failed)?;
    back_up_from(&source, db, db.key.as_ref(), version)
}

/// Writes what `source` reads into a synced temporary file, and only then names it,
/// so a crash leaves no half-written backup under a backup's name.
pub(crate) fn back_up_from(
    source: &Connection,
    db: &SqliteFile,
    key: Option<&DatabaseKey>,
    version: i64,
) -> Result<PathBuf> {
    let io = |cause: std::io::Error| Error::DatabaseIo {
        path: db.path.clone(),
        cause,
    };
    let failed = |e| crate::db::error::sqlite("back up the database", e);
    let temp = Partial::create(beside(&db.path), db.sharing).map_err(io)?;
    {
        let mut copy = Connection::open(&temp.path).map_err(failed)?;
        cipher::key(&copy, key).map_err(failed)?;
        let backup = rusqlite::backup::Backup::new(source, &mut copy).map_err(failed)?;
        // One step; the caller's lock means no writer can make the source busy.
        loop {
            match backup.step(-1).map_err(failed)? {
                rusqlite::backup::StepResult::Done => break,
                rusqlite::backup::StepResult::More => {}
                _ => {
                    let busy = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY);
                    return Err(failed(rusqlite::Error::SqliteFailure(busy, None)));
                }
            }
        }
    }
    temp.file.sync_all().map_err(io)?;
    link_backup(&temp, &db.path, version)
}

/// Every `<db>.*.bak` beside `path`, sorted (none when the folder cannot be read):
/// what `redact` names as still holding what it removed.
pub(crate) fn backups(path: &Path) -> Vec<PathBuf> {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    let prefix = format!("{name}.");
    let Ok(entries) = std::fs::read_dir(beside(path)) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".bak"))
        })
        .map(|e| path.with_file_name(e.file_name()))
        .collect();
    found.sort();
    found
}

pub(crate) fn beside(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Links `temp` to the first free `<db>.v<version>[.<n>].bak`: a hard link never
/// replaces what is there.
pub(crate) fn link_backup(temp: &Partial, path: &Path, version: i64) -> Result<PathBuf> {
    let io = |cause: std::io::Error| Error::DatabaseIo {
        path: path.to_owned(),
        cause,
    };
    for n in 0u32.. {
        let suffix = if n == 0 {
            format!(".v{version}.bak")
        } else {
            format!(".v{version}.{n}.bak")
        };
        let target = readonly::side_file(path, &suffix);
        match std::fs::hard_link(&temp.path, &target) {
            Ok(()) => {
                sync_dir(beside(path)).map_err(io)?;
                return Ok(target);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
    }
    unreachable!("some numbered backup name is free")
}

pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all())
}

/// A backup being written, made with `O_EXCL` and the sharing's mode whatever the
/// umask (SQLite keeps an existing file's mode for its side files); removed on drop.
pub(crate) struct Partial {
    pub(crate) path: PathBuf,
    pub(crate) file: std::fs::File,
}

impl Partial {
    pub(crate) fn create(dir: &Path, sharing: Sharing) -> std::io::Result<Partial> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        loop {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!(
                ".sessionstore-backup-{}-{nanos:08x}-{n}.partial",
                std::process::id()
            );
            let path = dir.join(name);
            match crate::permissions::create_new(&path, sharing) {
                Ok(file) => return Ok(Partial { path, file }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for Partial {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Builds in `conn` the schema up to `version`, which `verify` compares against.
pub(crate) fn build_reference(conn: &mut Connection, version: i64) -> Result<()> {
    let migrations: Vec<Migration> = embedded()
        .into_iter()
        .filter(|m| i64::from(m.version()) <= version)
        .collect();
    let tx = conn
        .transaction()
        .map_err(|e| crate::db::error::sqlite("build the reference schema", e))?;
    Runner::new(&migrations)
        .set_grouped(true)
        .run(&mut Locked(&tx))
        .map_err(|e| Error::Migration(e.to_string()))?;
    tx.commit()
        .map_err(|e| crate::db::error::sqlite("build the reference schema", e))
}

#[cfg(test)]
mod tests;
