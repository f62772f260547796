//! Changing a database's encryption, with the database to itself: `encrypt` exports a
//! plain database into a new encrypted file that takes its name, `rekey` re-encrypts
//! in place. Each keeps its backup encrypted; neither writes a plaintext byte.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, params};

use super::{Error, SqliteFile};
use crate::config::DatabaseKey;
use crate::db::schema::{self, Backup, OnDisk, Partial};
use crate::db::verify::require_intact_schema;
use crate::error::Result;

/// How long a change of encryption waits for the database to be free: not the busy
/// timeout, since a program that has it open would still have it open then.
const WAIT_FOR_ALONE: Duration = Duration::from_millis(500);

/// What a change of encryption tells whoever still has the database open.
const ALONE: &str = "have the database to itself to change its encryption (stop every \
                     program that uses it, then run this again)";

/// Encrypts the plain database `plain` with `key`: every table is exported into a new
/// keyed file beside it, checked table by table, synced and renamed over the database.
/// With `Backup::Make` a copy of the encrypted file is kept as `<db>.v<N>.bak` first.
pub(crate) fn encrypt(
    plain: &SqliteFile,
    key: &DatabaseKey,
    backup: Backup,
) -> Result<Option<PathBuf>> {
    let path = plain.path.as_path();
    let applied = match schema::inspect(plain) {
        Ok(OnDisk::Database(applied)) => applied,
        Ok(OnDisk::Missing | OnDisk::Empty) => return Err(Error::NoDatabase(path.to_owned())),
        Err(Error::NeedsKey { path }) => return Err(Error::AlreadyEncrypted { path }),
        Err(e) => return Err(e),
    };
    if !applied.is_empty() {
        require_intact_schema(plain)?;
    }
    let conn = alone(plain)?;
    let io = io_error(path);
    let sql = |action| move |e| crate::db::error::sqlite(action, e);
    let target = Partial::create(schema::beside(path), plain.sharing).map_err(&io)?;
    let target_name = target.path.to_str().ok_or_else(|| {
        io(std::io::Error::other(
            "its folder's name is not UTF-8, which ATTACH needs",
        ))
    })?;
    // Bound, never in the statement's text; never empty, which would make it plain.
    let literal = key.sqlcipher_literal();
    conn.execute(
        "ATTACH DATABASE ?1 AS encrypted KEY ?2",
        params![target_name, literal.expose()],
    )
    .map_err(sql("attach the encrypted copy"))?;
    let exported = (|| {
        conn.query_row("SELECT sqlcipher_export('encrypted')", [], |_| Ok(()))
            .map_err(sql("export the database into its encrypted copy"))?;
        // `sqlcipher_export` copies the schema and rows, not the header's user version.
        let version: i64 = conn
            .query_row("PRAGMA main.user_version", [], |r| r.get(0))
            .map_err(sql("read the user version"))?;
        conn.execute_batch(&format!("PRAGMA encrypted.user_version = {version};"))
            .map_err(sql("copy the user version"))?;
        same_rows(&conn, path)
    })();
    let detached = conn
        .execute_batch("DETACH DATABASE encrypted;")
        .map_err(sql("detach the encrypted copy"));
    exported?;
    detached?;
    target.file.sync_all().map_err(&io)?;
    let copy = match backup {
        Backup::Make => Some(copy_file(&target, plain, schema::current(&applied))?),
        Backup::Skip => None,
    };
    // Renamed while this connection holds the plain file's lock, so no writer can slip
    // a commit in between; closing it removes the plain file's (empty) `-wal`.
    std::fs::rename(&target.path, path).map_err(&io)?;
    schema::sync_dir(schema::beside(path)).map_err(&io)?;
    drop(conn);
    Ok(copy)
}

/// Gives the encrypted database `db` the key `new`, in place and in one transaction,
/// then empties its WAL of pages under the old key. With `Backup::Make` it is first
/// copied, encrypted with `new`, to `<db>.v<N>.bak`.
pub(crate) fn rekey(db: &SqliteFile, new: &DatabaseKey, backup: Backup) -> Result<Option<PathBuf>> {
    let path = db.path.as_path();
    let applied = match schema::inspect(db)? {
        OnDisk::Database(applied) => applied,
        OnDisk::Missing | OnDisk::Empty => return Err(Error::NoDatabase(path.to_owned())),
    };
    if !applied.is_empty() {
        require_intact_schema(db)?;
    }
    let conn = alone(db)?;
    let sql = |action| move |e| crate::db::error::sqlite(action, e);
    let copy = match backup {
        Backup::Make => Some(schema::back_up_from(
            &conn,
            db,
            Some(new),
            schema::current(&applied),
        )?),
        Backup::Skip => None,
    };
    conn.pragma_update(None, "rekey", new.sqlcipher_literal().expose())
        .map_err(sql("give the database its new key"))?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .map_err(sql("empty the write-ahead log of pages under the old key"))?;
    drop(conn);
    // The new key opens it, whole, before this reports success.
    let rekeyed = SqliteFile {
        key: Some(new.clone()),
        ..db.clone()
    };
    crate::db::readonly::read(&rekeyed, |tx| {
        tx.query_row("PRAGMA quick_check", [], |r| r.get::<_, String>(0))
            .map_err(sql("check the database under its new key"))
            .and_then(|ok| match ok.as_str() {
                "ok" => Ok(()),
                _ => Err(Error::EncryptionChange {
                    path: path.to_owned(),
                    reason: format!("it does not check out under its new key: {ok}"),
                }),
            })
    })?;
    Ok(copy)
}

/// A read-write connection to `db` that has it to itself: locking mode `EXCLUSIVE`
/// keeps its first transaction's lock until it closes, and that transaction fails
/// (`Error::Busy`) while another connection has the database open. Its WAL is emptied.
fn alone(db: &SqliteFile) -> Result<Connection> {
    let opening = |e| super::opening(db, e);
    let conn = Connection::open_with_flags(
        &db.path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(opening)?;
    super::key(&conn, db.key.as_ref()).map_err(opening)?;
    conn.busy_timeout(WAIT_FOR_ALONE).map_err(opening)?;
    conn.query_row("PRAGMA locking_mode = EXCLUSIVE", [], |_| Ok(()))
        .map_err(opening)?;
    conn.execute_batch("BEGIN EXCLUSIVE; COMMIT;")
        .map_err(|e| crate::db::error::sqlite(ALONE, e))?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .map_err(|e| crate::db::error::sqlite("checkpoint the database", e))?;
    Ok(conn)
}

/// Refuses an export whose copy does not hold as many rows as the database in every
/// table with pages (the full-text index through its own tables: `sqlcipher_export`
/// writes its schema row directly, which this connection has not loaded).
fn same_rows(conn: &Connection, path: &Path) -> Result<()> {
    let sql = |e| crate::db::error::sqlite("compare the encrypted copy with the database", e);
    let mut stmt = conn
        .prepare(
            "SELECT name FROM main.sqlite_master WHERE type = 'table' AND rootpage != 0 \
             ORDER BY name",
        )
        .map_err(sql)?;
    let tables: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(sql)?;
    for table in tables {
        let quoted = format!("\"{}\"", table.replace('"', "\"\""));
        let (plain, copied): (i64, i64) = conn
            .query_row(
                &format!(
                    "SELECT (SELECT count(*) FROM main.{quoted}), \
                            (SELECT count(*) FROM encrypted.{quoted})"
                ),
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(sql)?;
        if plain != copied {
            return Err(Error::EncryptionChange {
                path: path.to_owned(),
                reason: format!(
                    "the encrypted copy of table {table} holds {copied} rows, not {plain}"
                ),
            });
        }
    }
    Ok(())
}

/// A backup of `db` at schema `version` holding the bytes of the encrypted file
/// `from`: a copy (a hard link would share the database's inode and change with it).
fn copy_file(from: &Partial, db: &SqliteFile, version: i64) -> Result<PathBuf> {
    let io = io_error(&db.path);
    let mut copy = Partial::create(schema::beside(&db.path), db.sharing).map_err(&io)?;
    let mut source = std::fs::File::open(&from.path).map_err(&io)?;
    std::io::copy(&mut source, &mut copy.file).map_err(&io)?;
    copy.file.sync_all().map_err(&io)?;
    schema::link_backup(&copy, &db.path, version)
}

fn io_error(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |cause| Error::DatabaseIo {
        path: path.to_owned(),
        cause,
    }
}
