//! The engines a conformance test runs on: an SQLite file in a temporary folder, or a
//! fresh schema of its own on the PostgreSQL server named by
//! `SESSIONSTORE_TEST_POSTGRES` (dropped when the test ends). Without that variable
//! the PostgreSQL half of each conformance test passes without running, and the run
//! says so once on stderr.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sessionstore::attachments::Roots;
use sessionstore::{Config, Store};
use tempfile::TempDir;

/// The variable that names the server the PostgreSQL suite runs on.
pub const POSTGRES_VAR: &str = "SESSIONSTORE_TEST_POSTGRES";

/// Where one test's store lives: its `--db`, and a folder for attachment roots.
pub struct Backend {
    pub dir: TempDir,
    db: String,
    schema: Option<Schema>,
}

impl Backend {
    pub fn sqlite() -> Backend {
        let dir = tempfile::tempdir().expect("a temp dir");
        let db = dir.path().join("sessions.db").display().to_string();
        Backend {
            dir,
            db,
            schema: None,
        }
    }

    /// A fresh, empty schema on the test server, or `None` when no server is named.
    pub fn postgres() -> Option<Backend> {
        let Some(admin) = postgres_url() else {
            skipped_notice();
            return None;
        };
        let schema = Schema::create(&admin);
        let dir = tempfile::tempdir().expect("a temp dir");
        Some(Backend {
            dir,
            db: schema.url(),
            schema: Some(schema),
        })
    }

    pub fn is_postgres(&self) -> bool {
        self.schema.is_some()
    }

    /// What `--db` (or `Config::db_path`) is for this store.
    pub fn db(&self) -> &str {
        &self.db
    }

    /// Another store of the same engine, empty: a second SQLite file, or a second
    /// schema on the same server.
    pub fn another(&self) -> Backend {
        if self.is_postgres() {
            Backend::postgres().expect("the server named for this backend")
        } else {
            Backend::sqlite()
        }
    }

    pub fn configured_root(&self) -> PathBuf {
        self.dir.path().join("attachments")
    }

    /// The one legacy root every store here reads after the configured root (the
    /// store never writes there; a test puts files in it by hand).
    pub fn legacy_root(&self) -> PathBuf {
        self.dir.path().join("legacy")
    }

    pub fn config(&self) -> Config {
        Config {
            database: self.db.as_str().into(),
            roots: Roots {
                configured: self.configured_root(),
                legacy: vec![self.legacy_root()],
            },
            host: "test-host".to_owned(),
        }
    }

    pub async fn open(&self) -> Store {
        Store::open(self.config()).await.expect("the store opens")
    }

    /// The real binary on this store, with its environment cleared as `support::bin`
    /// clears it.
    pub fn command(&self, args: &[&str]) -> Command {
        super::support::bin_on(
            self.dir.path(),
            args,
            &self.db,
            &self.configured_root(),
            &self.legacy_root(),
        )
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("the binary runs")
    }

    /// Runs statements on this store's database behind the store's back (a test
    /// that damages a row on purpose), on either engine; the engine's error text
    /// when it refuses them.
    pub fn raw_execute(&self, sql: &str) -> Result<(), String> {
        match &self.schema {
            None => rusqlite::Connection::open(Path::new(&self.db))
                .and_then(|c| c.execute_batch(sql))
                .map_err(|e| e.to_string()),
            Some(schema) => schema.execute(sql),
        }
    }

    /// The rows of a query run behind the store's back, each column as text (`None`
    /// for NULL), so that a test can compare what the database holds on either engine.
    pub fn raw_query(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        match &self.schema {
            None => {
                use rusqlite::types::ValueRef;
                // Read-write (it runs only what it is given), never creating the file:
                // a read-only connection to a WAL database would leave `-wal` and
                // `-shm` behind, which tests of "nothing changed" look for.
                let conn = rusqlite::Connection::open_with_flags(
                    Path::new(&self.db),
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map_err(|e| e.to_string())?;
                let mut stmt = conn.prepare(sql).map_err(|e| e.to_string())?;
                let columns = stmt.column_count();
                stmt.query_map([], |row| {
                    (0..columns)
                        .map(|i| {
                            Ok(match row.get_ref(i)? {
                                ValueRef::Null => None,
                                ValueRef::Integer(n) => Some(n.to_string()),
                                ValueRef::Real(r) => Some(r.to_string()),
                                ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
                                ValueRef::Blob(b) => Some(format!("{b:02x?}")),
                            })
                        })
                        .collect()
                })
                .and_then(|rows| rows.collect())
                .map_err(|e| e.to_string())
            }
            Some(schema) => schema.query(sql),
        }
    }
}

/// The server named for the PostgreSQL suite, if any.
pub fn postgres_url() -> Option<String> {
    std::env::var(POSTGRES_VAR).ok().filter(|v| !v.is_empty())
}

fn skipped_notice() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Straight to the process's stderr, past the test harness's capture, so the
        // skip is seen in every run and not only in a failing one.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "note: the PostgreSQL conformance suite was skipped: set {POSTGRES_VAR}=postgres://user@host:port/db \
             (a server the tests may create schemas on), or run `bash .ci/run`, which starts one"
        );
    });
}

/// A schema of one test's own. Each test gets one so that tests running at once on
/// one server never see each other's rows; it is dropped with this (off the async
/// runtime: the library's helper runs its blocking client on a thread of its own).
struct Schema(sessionstore::oracle::ScratchSchema);

impl Schema {
    fn create(admin: &str) -> Schema {
        sessionstore::oracle::ScratchSchema::create(admin, "t")
            .map(Schema)
            .expect("the test server lets the tests create schemas")
    }

    /// The server's URL with this schema first on the search path.
    fn url(&self) -> String {
        self.0.url()
    }

    /// Runs `sql` on a client of its own, on a thread of its own.
    fn execute(&self, sql: &str) -> Result<(), String> {
        self.on_client(sql, |client, sql| client.batch_execute(sql).map(drop))
    }

    /// `sql`'s rows in PostgreSQL's text form, through the simple query protocol.
    fn query(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        self.on_client(sql, |client, sql| {
            Ok(client
                .simple_query(sql)?
                .into_iter()
                .filter_map(|m| match m {
                    postgres::SimpleQueryMessage::Row(row) => Some(
                        (0..row.len())
                            .map(|i| row.get(i).map(str::to_owned))
                            .collect(),
                    ),
                    _ => None,
                })
                .collect())
        })
    }

    /// `f` on a new client of this schema, on a thread of its own; the server's own
    /// words when it refuses.
    fn on_client<T: Send + 'static>(
        &self,
        sql: &str,
        f: impl FnOnce(&mut postgres::Client, &str) -> Result<T, postgres::Error> + Send + 'static,
    ) -> Result<T, String> {
        let url = self.url();
        let sql = sql.to_owned();
        std::thread::spawn(move || {
            let mut client =
                postgres::Client::connect(&url, postgres::NoTls).expect("the test server answers");
            f(&mut client, &sql).map_err(|e| match e.as_db_error() {
                Some(db) => db.message().to_owned(),
                None => e.to_string(),
            })
        })
        .join()
        .expect("the statement's thread ends")
    }
}

/// Runs one conformance test body on SQLite and on PostgreSQL, as two tests named
/// `sqlite::<name>` and `postgres::<name>` inside the module that invokes it.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $name() {
                    super::$name($crate::backend::Backend::sqlite()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $name() {
                    if let Some(backend) = $crate::backend::Backend::postgres() {
                        super::$name(backend).await;
                    }
                }
            )*
        }
    };
}
pub(crate) use conformance;
