//! The schema's versions: embedded refinery migrations, the newer-schema and
//! not-a-database refusals, and applying pending migrations under one write lock.
//! It never edits a migration and never writes to a database it has refused.

use std::path::Path;

use refinery::{Migration, Runner};
use refinery_core::traits::sync::{Migrate, Query, Transaction};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::error::{Error, Result};

mod embedded {
    refinery::embed_migrations!("migrations");
}

/// refinery's own history table; its presence is how an older or newer schema is told.
pub const HISTORY_TABLE: &str = "refinery_schema_history";

/// What `migrate` did, or with `dry_run` would do.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MigrationReport {
    /// Migrations applied by this call, as `V<N>__<name>`; empty for a dry run.
    pub applied: Vec<String>,
    /// Migrations still pending after this call (only a dry run leaves any).
    pub pending: Vec<String>,
    /// The schema version the database is at after this call.
    pub current: i64,
}

fn runner() -> Runner {
    embedded::migrations::runner()
}

fn label(m: &Migration) -> String {
    format!("V{}__{}", m.version(), m.name())
}

/// The newest schema version this binary knows.
pub fn latest_version() -> i64 {
    runner()
        .get_migrations()
        .iter()
        .map(|m| i64::from(m.version()))
        .max()
        .unwrap_or(0)
}

/// One applied row of refinery's history table.
struct Applied {
    version: i64,
    name: String,
}

/// Reads the history without writing anything. `None` when the table does not exist.
fn read_history(conn: &Connection) -> rusqlite::Result<Option<Vec<Applied>>> {
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

/// Refuses, without writing a byte, a file that is not SQLite or whose schema is newer
/// than this binary. Opening read-only is what keeps the file byte-for-byte unchanged.
pub fn check_readable(path: &Path) -> Result<()> {
    let is_empty_or_missing = match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            return Err(Error::NotDatabase {
                path: path.to_owned(),
                detail: "it is a directory, not a database file".to_owned(),
            });
        }
        Ok(meta) => meta.len() == 0,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(source) => {
            return Err(Error::DatabaseIo {
                path: path.to_owned(),
                cause: source,
            });
        }
    };
    if is_empty_or_missing {
        return Ok(());
    }
    let applied = read_only(path, |conn| {
        let history = read_history(conn)?;
        let objects: i64 =
            conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        Ok((history, objects))
    })?;
    match applied {
        (Some(history), _) => refuse_unknown(path, &history),
        (None, 0) => Ok(()),
        (None, _) => Err(Error::NotDatabase {
            path: path.to_owned(),
            detail: "it is a sqlite database of something else (it has tables but no \
                     sessionstore schema history), so sessionstore leaves it alone"
                .to_owned(),
        }),
    }
}

/// Runs `f` on a read-only connection that leaves no trace. A WAL database opened
/// read-only normally gets `-wal` and `-shm` files beside it; when it has no `-wal`
/// file, its main file is the whole database, so it is opened `immutable` instead,
/// which takes no locks and creates nothing. (With a `-wal` file present, another
/// process has it open or crashed with it open, and that file must be read.)
fn read_only<T>(path: &Path, f: impl Fn(&Connection) -> rusqlite::Result<T>) -> Result<T> {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let locked = || Connection::open_with_flags(path, flags).and_then(|conn| f(&conn));
    let result = if Path::new(&wal).exists() {
        locked()
    } else {
        // An immutable read takes no lock, so it can catch another process halfway
        // through creating the file; before calling the file unusable, read it again
        // the ordinary way, which waits for that process.
        Connection::open_with_flags(immutable_uri(path)?, flags | OpenFlags::SQLITE_OPEN_URI)
            .and_then(|conn| f(&conn))
            .or_else(|_| locked())
    };
    result.map_err(|e| Error::not_database(path, e))
}

/// `file:<absolute path>?immutable=1`, the path percent-encoded as SQLite's URI
/// parser expects.
fn immutable_uri(path: &Path) -> Result<String> {
    const PATH: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'/')
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    let absolute = std::path::absolute(path).map_err(|source| Error::DatabaseIo {
        path: path.to_owned(),
        cause: source,
    })?;
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(absolute.as_os_str());
    Ok(format!(
        "file:{}?immutable=1",
        percent_encoding::percent_encode(bytes, PATH)
    ))
}

fn refuse_unknown(path: &Path, applied: &[Applied]) -> Result<()> {
    let known = runner();
    let known = known.get_migrations();
    let unknown: Vec<String> = applied
        .iter()
        .filter(|a| {
            !known
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
        found: applied.iter().map(|a| a.version).max().unwrap_or(0),
        known: latest_version(),
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

/// What a migration run would apply, read without writing a byte (a missing file is
/// not created).
pub fn plan(path: &Path) -> Result<MigrationReport> {
    check_readable(path)?;
    let applied = match std::fs::metadata(path) {
        Ok(meta) if meta.len() > 0 => read_only(path, read_history)?.unwrap_or_default(),
        _ => vec![],
    };
    let runner = runner();
    let mut pending: Vec<&Migration> = runner
        .get_migrations()
        .iter()
        .filter(|m| !applied.iter().any(|a| a.version == i64::from(m.version())))
        .collect();
    pending.sort_by_key(|m| m.version());
    Ok(MigrationReport {
        applied: vec![],
        pending: pending.iter().map(|m| label(m)).collect(),
        current: applied.iter().map(|a| a.version).max().unwrap_or(0),
    })
}

/// Applies pending migrations on an open read-write connection, atomically: all of
/// them and their history rows commit together, or nothing does. Concurrent callers
/// queue on the write lock; the second finds nothing left to apply.
pub fn migrate_conn(conn: &mut Connection, path: &Path) -> Result<MigrationReport> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| Error::sqlite("take the write lock for migrate", e))?;
    // Checked again under the lock: another process may have upgraded in between.
    let applied = read_history(&tx)
        .map_err(|e| Error::sqlite("read schema history", e))?
        .unwrap_or_default();
    refuse_unknown(path, &applied)?;
    let before = applied.iter().map(|a| a.version).max().unwrap_or(0);
    let report = runner()
        .set_grouped(true)
        .run(&mut Locked(&tx))
        .map_err(|e| Error::Migration(e.to_string()))?;
    tx.commit()
        .map_err(|e| Error::sqlite("commit migrations", e))?;
    Ok(MigrationReport {
        current: latest_version().max(before),
        applied: report.applied_migrations().iter().map(label).collect(),
        pending: vec![],
    })
}
