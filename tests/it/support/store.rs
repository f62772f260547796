//! `TestStore`, the one store fixture: a database of its own (an SQLite file in a
//! temporary folder, or a fresh schema on the PostgreSQL server named by
//! `SESSIONSTORE_TEST_POSTGRES`, dropped at the end), a configured root and, when
//! asked, a legacy root beside it, and, when asked, the fixture's own store opened on
//! them, counting its reads or not. It hands out more stores on the same database,
//! the binary on it (`bin`), and statements run behind the store's back; it checks
//! nothing itself.
//!
//! Without the variable, or in a build without the `postgres` feature, there is no
//! PostgreSQL fixture: the PostgreSQL half of each conformance test passes without
//! running, and the run says so once on stderr. `SESSIONSTORE_TEST_POSTGRES_TLS` names
//! a server reached through `sslmode=verify-full` (`.ci/postgres tls-url`), for the
//! conformance tests run once more over TLS (`over_tls!`), skipped the same way.

use std::path::{Path, PathBuf};
use std::process::Output;

use sessionstore::attachments::{Roots, StoredAttachment};
use sessionstore::config::Database;
use sessionstore::dispatch::{Memo, Mode};
use sessionstore::model::{Message, NewSession, ToolsHost};
use sessionstore::oracle::ReadCounter;
use sessionstore::store::{Dispatched, Outgoing};
use sessionstore::{Config, SessionId, Store};
use tempfile::TempDir;

use super::{Bin, Expect, parse_uri};
use crate::support::Whole;

/// The variable that names the server the PostgreSQL suite runs on.
const POSTGRES_VAR: &str = "SESSIONSTORE_TEST_POSTGRES";

/// The variable that names a server reached over TLS with its certificate checked: a
/// connection string with `sslmode=verify-full` and `sslrootcert`.
const POSTGRES_TLS_VAR: &str = "SESSIONSTORE_TEST_POSTGRES_TLS";

/// The host name every fixture's store gives in its contexts.
pub const HOST: &str = "test-host";

/// One test's store; see the module's comment.
pub struct TestStore {
    pub dir: TempDir,
    /// `db_path` is the SQLite file `<dir>/sessions.db` or the schema's URL; the
    /// configured root is `<dir>/attachments`, the legacy root (if any) `<dir>/legacy`.
    pub config: Config,
    engine: Engine,
    opened: Option<Opened>,
}

enum Engine {
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres(Schema),
}

struct Opened {
    store: Store,
    reads: Option<ReadCounter>,
}

impl TestStore {
    /// An SQLite store's place in a new temporary folder, with no legacy root and
    /// nothing on disk yet.
    pub fn empty() -> TestStore {
        let dir = tempfile::tempdir().expect("a temp dir");
        let config = config_in(dir.path());
        TestStore {
            dir,
            config,
            engine: Engine::Sqlite,
            opened: None,
        }
    }

    /// This fixture with `<dir>/legacy` as its one legacy root (which the store never
    /// writes; a test puts files there by hand).
    pub fn with_legacy(mut self) -> TestStore {
        self.config.roots.legacy = vec![self.dir.path().join("legacy")];
        self
    }

    /// The SQLite half of a conformance test: [`empty`](Self::empty) with a legacy
    /// root.
    pub fn sqlite() -> TestStore {
        TestStore::empty().with_legacy()
    }

    /// The PostgreSQL half: a fresh, empty schema on the test server, with a legacy
    /// root, or `None` when no server is named (or this build cannot reach one).
    pub fn postgres() -> Option<TestStore> {
        #[cfg(feature = "postgres")]
        {
            let Some(admin) = postgres_url() else {
                skipped_notice(&format!(
                    "set {POSTGRES_VAR}=postgres://user@host:port/db (a server the tests \
                     may create schemas on), or run `bash .ci/run`, which starts one"
                ));
                return None;
            };
            let schema = Schema::create(&admin);
            let mut t = TestStore::sqlite();
            t.config.database = Database::parse(schema.url());
            t.engine = Engine::Postgres(schema);
            Some(t)
        }
        #[cfg(not(feature = "postgres"))]
        {
            skipped_notice("this build has no `postgres` feature (cargo test --features postgres)");
            None
        }
    }

    /// The PostgreSQL half once more, through `sslmode=verify-full`: a fresh schema on
    /// the server `SESSIONSTORE_TEST_POSTGRES_TLS` names, or `None` when none is named.
    pub fn postgres_tls() -> Option<TestStore> {
        #[cfg(feature = "postgres")]
        {
            let Some(admin) = postgres_tls_url() else {
                skipped_tls_notice();
                return None;
            };
            let schema = Schema::create(&admin);
            let mut t = TestStore::sqlite();
            t.config.database = Database::parse(schema.url());
            t.engine = Engine::Postgres(schema);
            Some(t)
        }
        #[cfg(not(feature = "postgres"))]
        {
            skipped_tls_notice();
            None
        }
    }

    /// Another empty fixture of the same engine: a second SQLite file, or a second
    /// schema on the same server (reached the same way).
    pub fn another(&self) -> TestStore {
        if self.db().contains("sslmode=verify-full") {
            TestStore::postgres_tls().expect("the server named for this fixture")
        } else if self.is_postgres() {
            TestStore::postgres().expect("the server named for this fixture")
        } else {
            TestStore::sqlite()
        }
    }

    /// This fixture with its own store opened (creating and migrating the database).
    pub async fn opened(mut self) -> TestStore {
        let store = self.open().await;
        self.opened = Some(Opened { store, reads: None });
        self
    }

    /// This fixture with its own store opened through a read counter.
    pub async fn counted(mut self) -> TestStore {
        let (store, reads) = self.open_counting().await;
        self.opened = Some(Opened {
            store,
            reads: Some(reads),
        });
        self
    }

    /// An opened SQLite store with no legacy root: the usual library test's.
    pub async fn new() -> TestStore {
        TestStore::empty().opened().await
    }

    /// An opened SQLite store with a legacy root, counting its reads.
    pub async fn counting() -> TestStore {
        TestStore::sqlite().counted().await
    }

    /// The store this fixture opened.
    pub fn store(&self) -> &Store {
        &self
            .opened
            .as_ref()
            .expect("the fixture's store is opened (`opened` or `counted`)")
            .store
    }

    /// What the fixture's store read, per URI.
    pub fn reads(&self) -> &ReadCounter {
        self.opened
            .as_ref()
            .and_then(|o| o.reads.as_ref())
            .expect("the fixture's store counts its reads (`counted`)")
    }

    /// A new store on this fixture's database and roots, as another process opens it.
    pub async fn open(&self) -> Store {
        Store::open(self.config.clone())
            .await
            .expect("the store opens")
    }

    /// A new store on this fixture's database and roots that counts every attachment
    /// read it makes, per URI, through the store's own read observer (the probe's
    /// counter).
    pub async fn open_counting(&self) -> (Store, ReadCounter) {
        ReadCounter::open(self.config.clone())
            .await
            .expect("a store that counts reads opens")
    }

    pub fn is_postgres(&self) -> bool {
        !matches!(self.engine, Engine::Sqlite)
    }

    /// What `--db` is for this store: a file's path or the schema's URL.
    pub fn db(&self) -> &str {
        match &self.config.database {
            Database::Sqlite(path) => path.to_str().expect("a UTF-8 database"),
            Database::Postgres(url) => url.as_str(),
        }
    }

    pub fn db_path(&self) -> PathBuf {
        match &self.config.database {
            Database::Sqlite(path) => path.clone(),
            Database::Postgres(url) => panic!("{url} is no SQLite file"),
        }
    }

    pub fn configured(&self) -> &Path {
        &self.config.roots.configured
    }

    /// The legacy root (`with_legacy`).
    pub fn legacy(&self) -> &Path {
        self.config
            .roots
            .legacy
            .first()
            .expect("the fixture has a legacy root (`with_legacy`)")
    }

    /// `<configured root>/<session>`.
    pub fn folder(&self, session: SessionId) -> PathBuf {
        self.folder_in(self.configured(), session)
    }

    /// `<root>/<session>`: where a session's files live under `root`.
    pub fn folder_in(&self, root: &Path, session: SessionId) -> PathBuf {
        root.join(session.to_string())
    }

    /// The binary on this store: its database and roots given after the arguments.
    pub fn bin(&self) -> Bin {
        let mut bin = Bin::new(self.dir.path());
        bin.on(&self.config);
        bin
    }

    /// The binary on this store with `args`, run to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.bin().args(args).output()
    }

    /// Appends to `session`'s log, behind the store's back, an event delivering a
    /// message that was never appended: a log that no longer replays, damaged at its
    /// end.
    pub fn deliver_a_stranger(&self, session: sessionstore::SessionId) {
        self.raw()
            .execute(
                "INSERT INTO events (session_id, session_seq, kind, payload, created_at)
                 SELECT session_id, max(session_seq) + 1, 'message_delivered', ?1, 'now'
                 FROM events WHERE session_id = ?2 GROUP BY session_id",
                [
                    format!(
                        r#"{{"kind":"message_delivered","id":"{}"}}"#,
                        sessionstore::MessageId::new()
                    ),
                    session.to_string(),
                ],
            )
            .unwrap();
    }

    /// Gives each item row of `session` that names the update that made it (V12) the
    /// body and times such a row held before V12 (`ItemBody::to_json`, the event's
    /// time), for a test that edits bodies as text; a row with parts is left as it is.
    /// Returns how many rows changed.
    pub async fn write_out_bodies(&self, session: SessionId) -> usize {
        let items = self.store().all_items(session).await.unwrap();
        let conn = self.raw();
        let mut changed = 0;
        for item in items {
            changed += conn
                .execute(
                    "UPDATE items SET body = ?2, created_at = ?3, updated_at = ?4,
                         made_by_event = NULL, made_by_start = NULL, made_by_length = NULL
                     WHERE id = ?1 AND body IS NULL AND streaming_from IS NULL
                       AND NOT EXISTS (SELECT 1 FROM item_parts p WHERE p.item_id = items.id)",
                    rusqlite::params![
                        item.id.to_string(),
                        item.body.to_json(),
                        item.created_at,
                        item.updated_at
                    ],
                )
                .unwrap();
        }
        changed
    }

    /// A plain connection to the SQLite file, for poking at it behind the store's back.
    pub fn raw(&self) -> rusqlite::Connection {
        assert!(!self.is_postgres(), "raw() is an SQLite connection");
        rusqlite::Connection::open(self.db_path()).expect("the test database opens")
    }

    /// Runs statements on this store's database behind the store's back (a test
    /// that damages a row on purpose), on either engine; the engine's error text
    /// when it refuses them.
    pub fn raw_execute(&self, sql: &str) -> Result<(), String> {
        match &self.engine {
            Engine::Sqlite => rusqlite::Connection::open(self.db_path())
                .and_then(|c| c.execute_batch(sql))
                .map_err(|e| e.to_string()),
            #[cfg(feature = "postgres")]
            Engine::Postgres(schema) => schema.execute(sql),
        }
    }

    /// The rows of a query run behind the store's back, each column as text (`None`
    /// for NULL), so that a test can compare what the database holds on either engine.
    pub fn raw_query(&self, sql: &str) -> Result<Vec<Vec<Option<String>>>, String> {
        match &self.engine {
            Engine::Sqlite => {
                use rusqlite::types::ValueRef;
                // Read-write (it runs only what it is given), never creating the file:
                // a read-only connection to a WAL database would leave `-wal` and
                // `-shm` behind, which tests of "nothing changed" look for.
                let conn = rusqlite::Connection::open_with_flags(
                    self.db_path(),
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
            #[cfg(feature = "postgres")]
            Engine::Postgres(schema) => schema.query(sql),
        }
    }

    /// A new local session's id.
    pub async fn session(&self) -> SessionId {
        self.session_with(ToolsHost::Local).await
    }

    /// A new session whose tools run on `tools`; its id.
    pub async fn session_with(&self, tools: ToolsHost) -> SessionId {
        self.store()
            .create_session(NewSession {
                tools_host: tools,
                ..NewSession::default()
            })
            .await
            .expect("a session is created")
            .id
    }

    pub async fn upload(&self, session: SessionId, name: &str, bytes: &[u8]) -> StoredAttachment {
        self.store()
            .attach_one(session, name.to_owned(), bytes.to_vec())
            .await
            .expect("the upload is stored")
    }

    /// Uploads `bytes` as `name` and returns what an attachment block for it must hold.
    pub async fn attach(&self, session: SessionId, name: &str, bytes: &[u8]) -> Expect {
        let stored = self.upload(session, name, bytes).await;
        Expect {
            name: stored.name,
            uri: stored.uri.to_string(),
            bytes: bytes.to_vec(),
            host: self.config.host.clone(),
        }
    }

    pub async fn send(&self, session: SessionId, message: Outgoing) -> Message {
        self.store()
            .send(session, message)
            .await
            .expect("the message is sent")
    }

    /// Sends a delivered user message with `text` and references to `files`, in order.
    pub async fn send_files(&self, session: SessionId, text: &str, files: &[&Expect]) -> Message {
        let mut out = Outgoing::user(text);
        out.attach = files.iter().map(|f| parse_uri(&f.uri)).collect();
        self.send(session, out).await
    }

    /// Dispatches the latest user message through a fresh memo.
    pub async fn dispatch(
        &self,
        session: SessionId,
        mode: Mode,
    ) -> sessionstore::Result<Dispatched> {
        self.store()
            .dispatch(session, None, mode, Memo::new())
            .await
            .map(Dispatched::from)
    }
}

/// A store's configuration under `dir` as every fixture lays it out: `sessions.db`,
/// the configured root `attachments`, no legacy root, the host [`HOST`]. For a store
/// in a folder a test made itself (a copied fixture tree, a moved store).
pub fn config_in(dir: &Path) -> Config {
    Config {
        database: dir.join("sessions.db").into(),
        roots: Roots {
            configured: dir.join("attachments"),
            legacy: vec![],
        },
        host: HOST.to_owned(),
        sharing: Default::default(),
        key: None,
        redaction: Default::default(),
    }
}

/// The server named for the PostgreSQL suite, if any.
pub fn postgres_url() -> Option<String> {
    std::env::var(POSTGRES_VAR).ok().filter(|v| !v.is_empty())
}

/// The server named for the suite over TLS (`sslmode=verify-full`), if any.
pub fn postgres_tls_url() -> Option<String> {
    std::env::var(POSTGRES_TLS_VAR)
        .ok()
        .filter(|v| !v.is_empty())
}

/// Says once, on stderr, that the tests over TLS did not run.
pub fn skipped_tls_notice() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "note: the PostgreSQL tests over TLS were skipped: set {POSTGRES_TLS_VAR} to a \
             sslmode=verify-full connection string (`.ci/postgres tls-url`), or run \
             `bash .ci/run`, which starts such a server"
        );
    });
}

/// `url` without its `sslmode` and `sslrootcert`, which the driver alone cannot read:
/// for the tests' own clients behind the store's back, which need no TLS on the
/// loopback.
#[cfg(feature = "postgres")]
fn without_tls(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|p| !p.starts_with("sslmode=") && !p.starts_with("sslrootcert="))
        .collect();
    if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

fn skipped_notice(why: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Straight to the process's stderr, past the test harness's capture, so the
        // skip is seen in every run and not only in a failing one.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "note: the PostgreSQL conformance suite was skipped: {why}"
        );
    });
}

/// A schema of one test's own. Each test gets one so that tests running at once on
/// one server never see each other's rows; it is dropped with this (off the async
/// runtime: the library's helper runs its blocking client on a thread of its own).
#[cfg(feature = "postgres")]
struct Schema(sessionstore::oracle::ScratchSchema);

#[cfg(feature = "postgres")]
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
        let url = without_tls(&self.url());
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
/// `sqlite::<name>` and `postgres::<name>` inside the module that invokes it; each
/// body takes the fixture (`TestStore::sqlite()` or `TestStore::postgres()`, nothing
/// opened yet).
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $name() {
                    super::$name($crate::support::TestStore::sqlite()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $name() {
                    if let Some(t) = $crate::support::TestStore::postgres() {
                        super::$name(t).await;
                    }
                }
            )*
        }
    };
}
pub(crate) use conformance;

/// Runs conformance test bodies once more, on PostgreSQL through `sslmode=verify-full`
/// (`TestStore::postgres_tls`), as tests named `postgres_tls::<name>` inside the module that
/// invokes it: a representative part of the suite, over TLS with the server's
/// certificate and name checked.
macro_rules! over_tls {
    ($($name:ident),* $(,)?) => {
        mod postgres_tls {
            $(
                #[tokio::test(flavor = "multi_thread")]
                async fn $name() {
                    if let Some(t) = $crate::support::TestStore::postgres_tls() {
                        super::$name(t).await;
                    }
                }
            )*
        }
    };
}
pub(crate) use over_tls;
