//! The path audit: reads a database behind the store's back (read-only, leaving no
//! trace) and the files beside it, and reports every column named like a path and
//! every stored value or file that holds one of the given strings. It judges nothing
//! and writes nothing. On PostgreSQL it reads the tables of the connection's schema
//! (the files there are the server's).

use std::path::{Path, PathBuf};

use rusqlite::Transaction;
use rusqlite::types::ValueRef;

use crate::config::{Config, Database};
use crate::db::{SqliteFile, readonly};
use crate::error::{Error, Result};

/// Words that make a column look like it stores a location on disk.
pub const PATH_WORDS: [&str; 7] = ["path", "root", "dir", "folder", "location", "file", "cwd"];

/// The one column named like a path that may hold one: the working directory an ACP
/// client gave (`sessions.cwd`), the client's words kept as given. The store's own
/// roots and attachment paths are never stored.
pub const CLIENT_CONTENT_COLUMNS: [&str; 1] = ["sessions.cwd"];

/// What [`audit`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathAudit {
    pub tables: Vec<String>,
    /// Every column as `table.column`.
    pub columns: Vec<String>,
    /// The columns whose names hold one of [`PATH_WORDS`].
    pub path_columns: Vec<String>,
    /// Text and blob values looked at.
    pub values: usize,
    /// `(table, needle)` for each value that holds a needle.
    pub value_hits: Vec<(String, String)>,
    /// The database file and every file beside it whose name begins with its name
    /// (`-wal`, `-journal`, `-shm`, backups): whatever is not checkpointed yet too.
    pub files: Vec<PathBuf>,
    pub file_bytes: usize,
    /// `(file, needle)` for each file whose bytes hold a needle.
    pub file_hits: Vec<(PathBuf, String)>,
}

/// Audits the database `config` names for `needles` (empty needles match nothing): an
/// SQLite file (keyed with `config.key`, so its tables read as the store reads them)
/// and the bytes of the files beside it, or the schema a `postgres://` URL puts first
/// on its search path.
pub fn audit(config: &Config, needles: &[String]) -> Result<PathAudit> {
    let db = match &config.database {
        Database::Sqlite(path) => SqliteFile::of(path, config)?,
        #[cfg(feature = "postgres")]
        Database::Postgres(url) => return postgres::audit(url, needles),
        #[cfg(not(feature = "postgres"))]
        Database::Postgres(url) => return Err(crate::db::no_postgres(url)),
    };
    let mut audit = readonly::read(&db, |tx| scan_tables(tx, needles))?;
    scan_files(&db.path, needles, &mut audit)?;
    Ok(audit)
}

#[cfg(feature = "postgres")]
mod postgres {
    use std::collections::BTreeMap;

    use super::{PathAudit, find_needle, quoted};
    use crate::config::PostgresUrl;
    use crate::db::postgres::{connect, off_runtime};
    use crate::db::sql::DbError;
    use crate::error::Result;

    /// Types whose values are numbers or truth values, which cannot hold a path; every
    /// other column is read as text.
    const NOT_TEXT: [&str; 7] = [
        "smallint",
        "integer",
        "bigint",
        "real",
        "double precision",
        "numeric",
        "boolean",
    ];

    /// The tables of the URL's current schema, each text value read through
    /// `CAST(… AS TEXT)`, in one read-only transaction on a connection of its own.
    pub fn audit(url: &PostgresUrl, needles: &[String]) -> Result<PathAudit> {
        off_runtime(|| {
            let mut client = connect(url)?;
            let failed =
                |e| crate::db::error::failed("audit the database for paths", DbError::Postgres(e));
            let mut tx = client
                .build_transaction()
                .read_only(true)
                .start()
                .map_err(failed)?;
            let mut audit = PathAudit::default();
            let mut tables: BTreeMap<String, Vec<(String, bool)>> = tx
                .query(
                    "SELECT table_name::text FROM information_schema.tables
                      WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
                    &[],
                )
                .map_err(failed)?
                .iter()
                .map(|r| (r.get(0), Vec::new()))
                .collect();
            for row in tx
                .query(
                    "SELECT table_name::text, column_name::text, data_type::text
                       FROM information_schema.columns
                      WHERE table_schema = current_schema()
                      ORDER BY table_name, ordinal_position",
                    &[],
                )
                .map_err(failed)?
            {
                let (table, column, ty): (String, String, String) =
                    (row.get(0), row.get(1), row.get(2));
                if let Some(columns) = tables.get_mut(&table) {
                    columns.push((column, !NOT_TEXT.contains(&ty.as_str())));
                }
            }
            for (table, columns) in &tables {
                audit.tables.push(table.clone());
                let mut text = Vec::new();
                for (name, is_text) in columns {
                    audit.add_column(table, name);
                    if *is_text {
                        text.push(format!("CAST({} AS TEXT)", quoted(name)));
                    }
                }
                if text.is_empty() {
                    continue;
                }
                let sql = format!("SELECT {} FROM {}", text.join(", "), quoted(table));
                for row in tx.query(sql.as_str(), &[]).map_err(failed)? {
                    for i in 0..text.len() {
                        let Some(value) = row.get::<_, Option<&str>>(i) else {
                            continue;
                        };
                        audit.values += 1;
                        if let Some(needle) = find_needle(value.as_bytes(), needles) {
                            audit.value_hits.push((table.clone(), needle.to_owned()));
                        }
                    }
                }
            }
            tx.rollback().map_err(failed)?;
            Ok(audit)
        })
    }
}

impl PathAudit {
    /// Lists `table.name`, and among the path columns when it is named like one.
    fn add_column(&mut self, table: &str, name: &str) {
        let column = format!("{table}.{name}");
        let lower = name.to_lowercase();
        if PATH_WORDS.iter().any(|w| lower.contains(w))
            && !CLIENT_CONTENT_COLUMNS.contains(&column.as_str())
        {
            self.path_columns.push(column.clone());
        }
        self.columns.push(column);
    }
}

/// A table's or column's name as a quoted SQL identifier.
fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn scan_tables(tx: &Transaction<'_>, needles: &[String]) -> Result<PathAudit> {
    let failed = |e| crate::db::error::sqlite("audit the database for paths", e);
    let mut audit = PathAudit::default();
    let mut stmt = tx
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .map_err(failed)?;
    let tables: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .and_then(|rows| rows.collect())
        .map_err(failed)?;
    for table in &tables {
        let mut stmt = tx
            .prepare("SELECT name FROM pragma_table_info(?1)")
            .map_err(failed)?;
        let names: Vec<String> = stmt
            .query_map([table], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .map_err(failed)?;
        for name in names {
            audit.add_column(table, &name);
        }
        let mut stmt = tx
            .prepare(&format!("SELECT * FROM {}", quoted(table)))
            .map_err(failed)?;
        let width = stmt.column_count();
        let mut rows = stmt.query([]).map_err(failed)?;
        while let Some(row) = rows.next().map_err(failed)? {
            for i in 0..width {
                let (ValueRef::Text(bytes) | ValueRef::Blob(bytes)) =
                    row.get_ref(i).map_err(failed)?
                else {
                    continue;
                };
                audit.values += 1;
                if let Some(needle) = find_needle(bytes, needles) {
                    audit.value_hits.push((table.clone(), needle.to_owned()));
                }
            }
        }
    }
    audit.tables = tables;
    Ok(audit)
}

fn scan_files(db: &Path, needles: &[String], audit: &mut PathAudit) -> Result<()> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |cause| Error::DatabaseIo { path, cause }
    };
    let dir = match db.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let prefix = db.file_name().unwrap_or_default().as_encoded_bytes();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let is_file = entry.file_type().map_err(io(dir))?.is_file();
        if is_file && entry.file_name().as_encoded_bytes().starts_with(prefix) {
            files.push(entry.path());
        }
    }
    files.sort();
    for path in files {
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            // A side file a checkpoint removed since the listing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && path != db => continue,
            Err(e) => return Err(io(&path)(e)),
        };
        if let Some(needle) = find_needle(&bytes, needles) {
            audit.file_hits.push((path.clone(), needle.to_owned()));
        }
        audit.file_bytes += bytes.len();
        audit.files.push(path);
    }
    Ok(())
}

fn find_needle<'n>(haystack: &[u8], needles: &'n [String]) -> Option<&'n str> {
    needles
        .iter()
        .map(String::as_str)
        .find(|n| !n.is_empty() && haystack.windows(n.len()).any(|w| w == n.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(database: Database) -> Config {
        Config {
            database,
            ..Config::in_dir(Path::new("/nowhere"))
        }
    }

    #[test]
    fn the_audit_finds_path_columns_and_stored_paths_in_tables_and_side_files() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "CREATE TABLE refs (uri TEXT, note TEXT);
             INSERT INTO refs VALUES ('attachment:///s/a.txt', 'fine');",
        )
        .unwrap();
        let needles = vec!["/tmp/sessionstore-probe-x".to_owned()];
        let clean = audit(&on(Database::Sqlite(db.clone())), &needles).unwrap();
        assert_eq!(clean.tables, ["refs"]);
        assert_eq!(clean.columns, ["refs.uri", "refs.note"]);
        assert!(clean.path_columns.is_empty() && clean.value_hits.is_empty());
        assert_eq!(clean.values, 2);
        assert_eq!(clean.files, std::slice::from_ref(&db));
        assert!(clean.file_hits.is_empty());

        conn.execute_batch(
            "INSERT INTO refs VALUES ('u', 'read /tmp/sessionstore-probe-x/attachments/a.txt');
             CREATE TABLE cache (file_path TEXT);",
        )
        .unwrap();
        drop(conn);
        let found = audit(&on(Database::Sqlite(db.clone())), &needles).unwrap();
        assert_eq!(found.path_columns, ["cache.file_path"]);
        assert_eq!(found.value_hits, [("refs".to_owned(), needles[0].clone())]);
        assert_eq!(found.file_hits.len(), 1, "the file holds the value too");

        // Bytes not yet checkpointed count too (scanned alone: SQLite would not
        // open beside a made-up WAL).
        let wal = dir.path().join("x.db-wal");
        std::fs::write(&wal, b"..../tmp/sessionstore-probe-x/a..").unwrap();
        let mut files = PathAudit::default();
        scan_files(&db, &needles, &mut files).unwrap();
        assert_eq!(files.files, [db.clone(), wal.clone()]);
        assert!(files.file_hits.iter().any(|(p, _)| *p == wal), "{files:?}");
    }

    /// On PostgreSQL the audit reads the tables of the URL's schema: a column named
    /// like a path, and a needle in a text or JSON value, are found; numbers are not
    /// read as text. Runs on the server named by `SESSIONSTORE_TEST_POSTGRES`.
    #[cfg(feature = "postgres")]
    #[test]
    fn the_audit_reads_a_postgres_schema() {
        let Some(server) = crate::db::sql::test_server() else {
            return;
        };
        // Dropped with the schema when the test ends, a failed assertion included.
        let schema = crate::db::postgres::ScratchSchema::create(&server, "audit").unwrap();
        let url = schema.url();
        // The client is closed before the schema is dropped.
        {
            let mut client = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
            client
                .batch_execute(
                    "CREATE TABLE refs (uri TEXT, n BIGINT, body JSONB);
                     INSERT INTO refs VALUES ('attachment:///s/a.txt', 7, '{\"a\": 1}');",
                )
                .unwrap();
            let needles = vec!["/tmp/sessionstore-probe-x".to_owned()];
            let clean = audit(&on(Database::parse(&url)), &needles).unwrap();
            assert_eq!(clean.tables, ["refs"]);
            assert_eq!(clean.columns, ["refs.uri", "refs.n", "refs.body"]);
            assert_eq!(clean.values, 2, "the text and the JSON, not the number");
            assert!(clean.path_columns.is_empty() && clean.value_hits.is_empty());
            assert!(clean.files.is_empty(), "a server's files are not read");
            client
                .batch_execute(
                    "INSERT INTO refs VALUES ('u', 1, '{\"p\": \"/tmp/sessionstore-probe-x/a\"}');
                     CREATE TABLE cache (file_path TEXT);",
                )
                .unwrap();
            let found = audit(&on(Database::parse(&url)), &needles).unwrap();
            assert_eq!(found.path_columns, ["cache.file_path"]);
            assert_eq!(found.value_hits, [("refs".to_owned(), needles[0].clone())]);
        }
        schema.remove().unwrap();
    }
}
