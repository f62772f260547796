//! The store on a PostgreSQL server: the connection pool, transactions that serialize
//! concurrent writers (serializable isolation, retried when PostgreSQL reports that a
//! transaction lost a race), read-only transactions for commands that only read, and
//! the schema's migrations from `migrations-postgres/` with the same versions, names
//! and refusals as the SQLite ones. It never touches attachment files.

use std::sync::Arc;
use std::time::Duration;

use postgres::error::SqlState;
use postgres::{Client, IsolationLevel, NoTls};
use r2d2_postgres::PostgresConnectionManager;
use refinery::Migration;

use super::Access;
use super::schema::{Applied, MigrationReport, current};
use super::sql::{DbError, Tx, args};
use crate::error::{Error, Result};

mod embedded {
    refinery::embed_migrations!("migrations-postgres");
}

/// How many connections one store keeps at most; a daemon per host each has its own.
const MAX_CONNECTIONS: u32 = 8;
/// How long a caller waits for a connection (the server down, or all in use).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a write keeps retrying after losing races to other writers.
const RETRY_FOR: Duration = Duration::from_secs(30);
/// A key for the advisory lock that makes concurrent `migrate` runs take turns.
const MIGRATION_LOCK: i64 = 0x5e55_1075_70e0_0001;

/// r2d2_postgres's manager, with each connection's prepared statements kept beside it.
struct Manager {
    inner: PostgresConnectionManager<NoTls>,
    /// The connection `Pool::new` made to check the server, handed out as the pool's
    /// first so that opening a store costs one handshake, not two.
    first: std::sync::Mutex<Option<Client>>,
}

/// One pooled connection and the statements prepared on it.
pub(crate) struct Conn {
    client: Client,
    statements: super::sql::Statements,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager").finish_non_exhaustive()
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = postgres::Error;

    fn connect(&self) -> std::result::Result<Conn, postgres::Error> {
        let first = self.first.lock().unwrap_or_else(|e| e.into_inner()).take();
        let client = match first {
            Some(client) => client,
            None => self.inner.connect()?,
        };
        Ok(Conn {
            client,
            statements: Default::default(),
        })
    }

    fn is_valid(&self, conn: &mut Conn) -> std::result::Result<(), postgres::Error> {
        self.inner.is_valid(&mut conn.client)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        self.inner.has_broken(&mut conn.client)
    }
}

/// A PostgreSQL database: a pool of connections, and whether this store may write.
#[derive(Clone)]
pub struct PgDb {
    pool: Pool,
    /// Per-session locks of this process, taken before a connection (see
    /// `write_locked`).
    locks: Arc<std::sync::Mutex<std::collections::HashMap<i64, Arc<std::sync::Mutex<()>>>>>,
    /// The connection string without its password, for messages.
    shown: Arc<str>,
    read_only: bool,
}

/// The migrations for PostgreSQL compiled into this binary, in version order.
fn migrations() -> Vec<Migration> {
    let mut all = embedded::migrations::runner().get_migrations().clone();
    all.sort_by_key(|m| m.version());
    all
}

/// The connection string as it may be printed: the password, if any, replaced.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (creds, after) = credentials(rest);
    let creds = match creds {
        Some(creds) => match creds.split_once(':') {
            Some((name, _password)) => format!("{name}:***@"),
            None => format!("{creds}@"),
        },
        None => String::new(),
    };
    // A password can also come as a query parameter.
    let after = match after.split_once('?') {
        Some((host, query)) => {
            let query = query
                .split('&')
                .map(|part| match part.split_once('=') {
                    Some(("password", _)) => "password=***".to_owned(),
                    _ => part.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("&");
            format!("{host}?{query}")
        }
        None => after.to_owned(),
    };
    format!("{scheme}://{creds}{after}")
}

/// A URL's `user[:password]` part and what follows it, split where the driver splits
/// them: at the first `@` (a password may hold `/`, `?` or `:`; the driver ends it only
/// at an `@`).
fn credentials(rest: &str) -> (Option<&str>, &str) {
    match rest.split_once('@') {
        Some((creds, after)) => (Some(creds), after),
        None => (None, rest),
    }
}

/// `url` with `schema` first on its search path (`options=-c search_path=…`), added to
/// the options the URL already has, which a second `options` parameter would replace.
/// `schema` must be a plain identifier; the probe's and the tests' are.
#[cfg(any(test, feature = "probe", feature = "testkit"))]
pub fn with_search_path(url: &str, schema: &str) -> String {
    let setting = format!("-c%20search_path%3D{schema}");
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let Some(query) = query else {
        return format!("{base}?options={setting}");
    };
    let mut found = false;
    let params: Vec<String> = query
        .split('&')
        .map(|param| match param.strip_prefix("options=") {
            Some(options) if !found => {
                found = true;
                format!("options={options}%20{setting}")
            }
            _ => param.to_owned(),
        })
        .collect();
    let mut query = params.join("&");
    if !found {
        query.push_str(&format!("&options={setting}"));
    }
    format!("{base}?{query}")
}

/// Runs `f`, which uses a blocking client, on a thread of its own: the client runs a
/// runtime of its own, which cannot start on a thread that drives async tasks.
#[cfg(any(test, feature = "probe", feature = "testkit"))]
pub fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| match scope.spawn(f).join() {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

/// Runs `sql` on a connection of its own to the server `url` names, outside any
/// store: making and removing a scratch schema.
#[cfg(any(test, feature = "probe", feature = "testkit"))]
fn on_server(url: &str, sql: &str, action: &'static str) -> Result<()> {
    off_runtime(|| {
        let mut client = Client::connect(url, NoTls).map_err(|e| unreachable(url, &e))?;
        client.batch_execute(sql).map_err(pg(action))
    })
}

/// The server `url` names could not be reached: its reason, as a store's pool
/// reports one, without the password.
#[cfg(any(test, feature = "probe", feature = "testkit"))]
pub fn unreachable(url: &str, e: &postgres::Error) -> Error {
    Error::Unreachable {
        url: redact(url),
        detail: scrub(&describe(e), &secrets(url)),
    }
}

/// Makes the schema `name` (a plain identifier) on the server `url` names.
#[cfg(any(test, feature = "probe", feature = "testkit"))]
pub fn create_schema(url: &str, name: &str) -> Result<()> {
    on_server(url, &format!("CREATE SCHEMA {name}"), "create a schema")
}

/// Removes the schema `name` and everything in it, if it is there.
#[cfg(any(test, feature = "probe", feature = "testkit"))]
pub fn drop_schema(url: &str, name: &str) -> Result<()> {
    on_server(
        url,
        &format!("DROP SCHEMA IF EXISTS {name} CASCADE"),
        "drop a schema",
    )
}

/// A schema of its own on a PostgreSQL server, for a store that must not see any other
/// (the probe's run, a test, a benchmark), removed by `remove` or, at the latest, when
/// this is dropped, a panic included. A test hook (the probe's, and `testkit`'s).
#[cfg(any(test, feature = "probe", feature = "testkit"))]
pub struct ScratchSchema {
    server: String,
    name: String,
    removed: bool,
}

#[cfg(any(test, feature = "probe", feature = "testkit"))]
impl ScratchSchema {
    /// A new empty schema `<prefix>_<uuid>` on `server`.
    pub fn create(server: &str, prefix: &str) -> Result<ScratchSchema> {
        let name = format!("{prefix}_{}", uuid::Uuid::now_v7().simple());
        create_schema(server, &name)?;
        Ok(ScratchSchema {
            server: server.to_owned(),
            name,
            removed: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server's connection string with this schema first on the search path:
    /// what a store is opened on.
    pub fn url(&self) -> String {
        with_search_path(&self.server, &self.name)
    }

    /// Drops the schema and everything in it now, saying whether that worked.
    pub fn remove(mut self) -> Result<()> {
        self.removed = true;
        drop_schema(&self.server, &self.name)
    }
}

/// The server the unit tests that need PostgreSQL run on, named by
/// `SESSIONSTORE_TEST_POSTGRES`; without it they pass without running.
#[cfg(test)]
pub(crate) fn test_server() -> Option<String> {
    std::env::var("SESSIONSTORE_TEST_POSTGRES")
        .ok()
        .filter(|v| !v.is_empty())
}

#[cfg(any(test, feature = "probe", feature = "testkit"))]
impl Drop for ScratchSchema {
    fn drop(&mut self) {
        if !self.removed {
            let _ = drop_schema(&self.server, &self.name);
        }
    }
}

/// The passwords a connection string carries (in its user part, or as a
/// `password=` parameter), as written.
fn secrets(url: &str) -> Vec<String> {
    let Some((_, rest)) = url.split_once("://") else {
        return vec![];
    };
    let (creds, after) = credentials(rest);
    let mut out = vec![];
    if let Some((_, password)) = creds.and_then(|c| c.split_once(':')) {
        out.push(password.to_owned());
        // The driver decodes it, and could repeat either form.
        if let Ok(decoded) = percent_encoding::percent_decode_str(password).decode_utf8() {
            out.push(decoded.into_owned());
        }
    }
    if let Some((_, query)) = after.split_once('?') {
        for part in query.split('&') {
            if let Some(password) = part.strip_prefix("password=") {
                out.push(password.to_owned());
            }
        }
    }
    out.retain(|p| !p.is_empty());
    // Longest first, so that a secret inside another is not replaced piecemeal.
    out.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

/// `text` with every one of `secrets` replaced, should a driver's message ever
/// repeat what it was given.
fn scrub(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_owned(), |text, secret| {
        text.replace(secret.as_str(), "***")
    })
}

/// The connection pool. The `postgres` client is blocking and runs a small runtime of
/// its own, which it cannot do on a thread that is already driving async tasks: a
/// connection closed there panics. A store is often dropped on such a thread (the end
/// of an async command), so the last handle closes the connections on a thread of
/// its own, and waits for them to close before its drop returns.
#[derive(Clone)]
struct Pool(Arc<PoolInner>);

struct PoolInner {
    pool: Option<r2d2::Pool<Manager>>,
    /// Why the latest attempt to connect failed, as the driver said it.
    last_error: LastConnectError,
    /// The connection string without its password, for messages.
    shown: Arc<str>,
    /// The password the connection string carries, if any, kept out of messages.
    secrets: Vec<String>,
}

/// r2d2 keeps only the outermost words of a failed connection ("error connecting to
/// server", "db error") and retries until its timeout; this keeps the whole of the
/// last one (the system's reason, or the server's message) so the caller is told why.
#[derive(Debug, Clone, Default)]
struct LastConnectError(Arc<std::sync::Mutex<Option<String>>>);

impl r2d2::HandleError<postgres::Error> for LastConnectError {
    fn handle_error(&self, error: postgres::Error) {
        if let Ok(mut last) = self.0.lock() {
            *last = Some(describe(&error));
        }
    }
}

/// A driver error in one line: the server's own message, or each cause in turn.
fn describe(error: &postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return db.message().to_owned();
    }
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

impl Pool {
    /// A pool of at most `max_size` connections to `url`, none opened yet. A string
    /// that does not parse is refused here, before any connection is tried.
    fn new(url: &str, max_size: u32) -> Result<Pool> {
        let shown: Arc<str> = redact(url).into();
        let secrets = secrets(url);
        let mut config: postgres::Config = url.parse().map_err(|e| Error::ConnectionString {
            url: shown.to_string(),
            detail: scrub(&describe_parse(&e), &secrets),
        })?;
        // A server that takes the TCP connection and never answers (a stuck proxy, a
        // wrong port) must not hang a command: connecting gives up in time, and a
        // connection whose peer went away is noticed, unless the string says otherwise.
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(60));
        // One connection first, on a thread of its own (the blocking client cannot
        // run on an async one): a server that refuses it, a missing database or a
        // wrong password is reported at once with the reason, not after the pool has
        // retried for its whole timeout. The driver times only the TCP connect; a
        // server that accepts and then never answers is given up on here, and the
        // attempt's thread is left to end with the process. The connection made is
        // the pool's first.
        let (sent, answer) = std::sync::mpsc::channel();
        let attempt = config.clone();
        std::thread::spawn(move || {
            let _ = sent.send(attempt.connect(NoTls).map_err(|e| describe(&e)));
        });
        let first = answer
            .recv_timeout(CONNECT_TIMEOUT)
            .unwrap_or_else(|e| match e {
                std::sync::mpsc::RecvTimeoutError::Timeout => Err(format!(
                    "the server did not answer within {} s",
                    CONNECT_TIMEOUT.as_secs()
                )),
                std::sync::mpsc::RecvTimeoutError::Disconnected => {
                    Err("the connection attempt panicked".to_owned())
                }
            })
            .map_err(|reason| Error::Unreachable {
                url: shown.to_string(),
                detail: scrub(&reason, &secrets),
            })?;
        let last_error = LastConnectError::default();
        let pool = r2d2::Pool::builder()
            .max_size(max_size)
            .min_idle(Some(0))
            .connection_timeout(CONNECT_TIMEOUT)
            // Failed connection attempts are kept for the caller, not logged by r2d2.
            .error_handler(Box::new(last_error.clone()))
            .build_unchecked(Manager {
                inner: PostgresConnectionManager::new(config, NoTls),
                first: std::sync::Mutex::new(Some(first)),
            });
        Ok(Pool(Arc::new(PoolInner {
            pool: Some(pool),
            last_error,
            shown,
            secrets,
        })))
    }

    fn shown(&self) -> &Arc<str> {
        &self.0.shown
    }

    /// A connection, or `Error::Unreachable` saying why none could be made within
    /// `CONNECT_TIMEOUT`.
    fn get(&self) -> Result<r2d2::PooledConnection<Manager>> {
        let inner = &self.0;
        inner
            .pool
            .as_ref()
            .expect("taken only on drop")
            .get()
            .map_err(|e| {
                let last = inner.last_error.0.lock().ok().and_then(|mut l| l.take());
                Error::Unreachable {
                    url: inner.shown.to_string(),
                    detail: scrub(&last.unwrap_or_else(|| e.to_string()), &inner.secrets),
                }
            })
    }
}

/// The words of a connection string that does not parse, after the driver's own
/// "invalid connection string", which the message already says.
fn describe_parse(error: &postgres::Error) -> String {
    match std::error::Error::source(error) {
        Some(cause) => cause.to_string(),
        None => error.to_string(),
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                let _ = std::thread::spawn(move || drop(pool)).join();
            } else {
                drop(pool);
            }
        }
    }
}

fn shown_path(shown: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(shown)
}

fn pg(action: &'static str) -> impl FnOnce(postgres::Error) -> Error {
    move |e| Error::db(action, DbError::Postgres(e))
}

/// Whether a failed transaction lost a race that running it again can win, given
/// how many times it has already run again.
fn lost_race(e: &Error, attempt: u32) -> bool {
    let Error::Postgres { cause, .. } = e else {
        return false;
    };
    match cause.code() {
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE => true,
        Some(c) if *c == SqlState::T_R_DEADLOCK_DETECTED => true,
        // Two writers that both computed the next sequence number of one session can
        // also meet at its unique index; that is retried a few times like a race,
        // while a key that is truly taken fails the same way every time.
        Some(c) if *c == SqlState::UNIQUE_VIOLATION => attempt < 8,
        _ => false,
    }
}

impl PgDb {
    /// Connects, then brings the schema up to date (`Create`, `Existing`) or checks
    /// that it already is (`ReadOnly`), refusing a schema newer than this binary.
    pub fn open(url: &str, access: Access) -> Result<PgDb> {
        let pool = Pool::new(url, MAX_CONNECTIONS)?;
        let db = PgDb {
            shown: pool.shown().clone(),
            pool,
            read_only: access == Access::ReadOnly,
            locks: Default::default(),
        };
        let mut conn = db.client()?;
        let client = &mut conn.client;
        let applied = read_history(client)?;
        refuse_unknown(&db.shown, applied.as_deref().unwrap_or(&[]))?;
        match (access, applied) {
            (Access::ReadOnly, applied) => {
                let applied = applied.unwrap_or_default();
                let latest = latest_version();
                if current(&applied) < latest {
                    return Err(Error::NeedsMigration {
                        path: shown_path(&db.shown),
                        found: current(&applied),
                        latest,
                    });
                }
            }
            (Access::Existing, None) => return Err(Error::NoDatabase(shown_path(&db.shown))),
            // Nothing pending: no statement that needs the right to create runs, so
            // a role that may only read and write rows can still write.
            (Access::Existing | Access::Create, Some(applied))
                if current(&applied) >= latest_version() => {}
            (Access::Existing, Some(_)) | (Access::Create, _) => {
                migrate_client(client, &db.shown)?;
            }
        }
        drop(conn);
        // As on SQLite, a store that writes first checks that the schema is the one
        // its migrations make: a dropped trigger or a rewritten trigger function would
        // let the next write skip a guarantee.
        if access != Access::ReadOnly {
            let problems = db.read(schema_problems)?;
            if !problems.is_empty() {
                return Err(Error::SchemaDamaged {
                    path: shown_path(&db.shown),
                    problems: problems
                        .into_iter()
                        .map(|p| p.strip_prefix("schema: ").map(str::to_owned).unwrap_or(p))
                        .collect(),
                });
            }
        }
        Ok(db)
    }

    fn client(&self) -> Result<r2d2::PooledConnection<Manager>> {
        self.pool.get()
    }

    /// Runs `f` in a serializable transaction and commits it. PostgreSQL rolls back
    /// a transaction whose outcome would differ from some serial order of the
    /// transactions around it (two writers appending to one session, say); that one
    /// is run again, from a fresh snapshot, until it commits or `RETRY_FOR` passes.
    pub fn write<T>(&self, f: impl FnMut(&Tx<'_>) -> Result<T>) -> Result<T> {
        self.write_locked(None, f)
    }

    /// `write_locked` under the advisory lock of `session`: a key folded from its id.
    pub fn write_for<T>(
        &self,
        session: &crate::ids::SessionId,
        f: impl FnMut(&Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        let id = session.as_uuid().as_u128();
        self.write_locked(Some((id ^ (id >> 64)) as i64), f)
    }

    /// `write` holding the advisory lock `key` from before its snapshot is taken
    /// until after it commits, so two writes with the same key never overlap, and the
    /// later one sees what the earlier one committed. For writes whose closure also
    /// touches files (a send's check that its uploads are still there, gc's removal
    /// of unreferenced ones): a serializable transaction that loses its race is rolled
    /// back, but a file it removed stays removed.
    pub fn write_locked<T>(
        &self,
        key: Option<i64>,
        mut f: impl FnMut(&Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        if self.read_only {
            return Err(Error::ReadOnly(shown_path(&self.shown)));
        }
        // Writers of one session in this process queue here, each without a
        // connection, so that they cannot fill the pool waiting on the server's lock
        // while every other session's work waits for a connection.
        let local = key.map(|key| self.local_lock(key));
        let _queued = local
            .as_ref()
            .map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
        let mut conn = self.client()?;
        if let Some(key) = key {
            conn.client
                .execute("SELECT pg_advisory_lock($1)", &[&key])
                .map_err(pg("take a session's lock"))?;
        }
        // A panic inside `f` must not return the connection to the pool still holding
        // the session's lock: every later writer of the session would wait on it.
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Self::write_on(&mut conn, &mut f)
        }));
        if let Some(key) = key {
            // A connection that fails here is broken and leaves the pool, and the
            // server lets go of a closed session's locks.
            let _ = conn
                .client
                .execute("SELECT pg_advisory_unlock($1)", &[&key]);
        }
        drop(_queued);
        if let (Some(key), Some(local)) = (key, local) {
            self.forget_local_lock(key, local);
        }
        match written {
            Ok(written) => written,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// This process's lock for `key`, made on first use.
    fn local_lock(&self, key: i64) -> Arc<std::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(key).or_default().clone()
    }

    /// Drops the entry for `key` once no writer holds or waits for it.
    fn forget_local_lock(&self, key: i64, local: Arc<std::sync::Mutex<()>>) {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        // The map's reference and `local` are the only two left.
        if Arc::strong_count(&local) == 2 {
            locks.remove(&key);
        }
    }

    fn write_on<T>(conn: &mut Conn, f: &mut impl FnMut(&Tx<'_>) -> Result<T>) -> Result<T> {
        let started = std::time::Instant::now();
        let mut attempt: u32 = 0;
        loop {
            let Conn { client, statements } = &mut *conn;
            let outcome = (|| {
                let tx = client
                    .build_transaction()
                    .isolation_level(IsolationLevel::Serializable)
                    .start()
                    .map_err(pg("begin a write"))?;
                let tx = Tx::postgres(tx, statements);
                let value = f(&tx)?;
                tx.into_postgres()
                    .expect("made from a PostgreSQL transaction")
                    .commit()
                    .map_err(pg("commit a write"))?;
                Ok(value)
            })();
            match outcome {
                Err(e)
                    if lost_race(&e, attempt) && started.elapsed() < RETRY_FOR && attempt < 200 =>
                {
                    attempt += 1;
                    tracing::debug!("write lost a race (attempt {attempt}), running it again");
                    // Back off a little, more each time, with jitter so that two
                    // writers that collided do not collide again in step.
                    let jitter = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.subsec_micros() % 3_000);
                    std::thread::sleep(
                        Duration::from_millis(u64::from(attempt.min(20)))
                            + Duration::from_micros(u64::from(jitter)),
                    );
                }
                other => return other,
            }
        }
    }

    /// Runs `f` in one read-only snapshot (`REPEATABLE READ`, `READ ONLY`): it sees
    /// one moment of the database and cannot write, whatever `f` runs.
    pub fn read<T>(&self, f: impl Fn(&Tx<'_>) -> Result<T>) -> Result<T> {
        let mut conn = self.client()?;
        let Conn { client, statements } = &mut *conn;
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(pg("begin a read"))?;
        let tx = Tx::postgres(tx, statements);
        f(&tx)
        // Dropping the transaction rolls it back: it changed nothing to commit.
    }

    /// `write`, then a plain `VACUUM` of the tables a session's rows live in, so the
    /// space of the deleted rows is reclaimed rather than left for autovacuum. Unlike
    /// SQLite's `secure_delete`, PostgreSQL does not zero freed space: the bytes stay
    /// in the data files and the write-ahead log until they are overwritten. Returns
    /// whether the vacuum ran.
    pub fn erase<T>(&self, f: impl FnMut(&Tx<'_>) -> Result<T>) -> Result<(T, bool)> {
        let value = self.write(f)?;
        let mut conn = self.client()?;
        let vacuumed = conn
            .client
            .batch_execute("VACUUM sessions, messages, message_refs, items, events, search_entries")
            .is_ok();
        Ok((value, vacuumed))
    }
}

/// The newest schema version this binary knows for PostgreSQL.
pub fn latest_version() -> i64 {
    migrations()
        .iter()
        .map(|m| i64::from(m.version()))
        .max()
        .unwrap_or(0)
}

/// refinery's history in the connection's schema, or `None` when there is none.
fn read_history(client: &mut Client) -> Result<Option<Vec<Applied>>> {
    let exists: bool = client
        .query_one(
            "SELECT to_regclass('refinery_schema_history') IS NOT NULL",
            &[],
        )
        .map_err(pg("read the schema history"))?
        .get(0);
    if !exists {
        return Ok(None);
    }
    let rows = client
        .query(
            "SELECT version, name FROM refinery_schema_history ORDER BY version",
            &[],
        )
        .map_err(pg("read the schema history"))?;
    Ok(Some(
        rows.iter()
            .map(|r| Applied {
                version: i64::from(r.get::<_, i32>(0)),
                name: r.get(1),
            })
            .collect(),
    ))
}

/// `schema::refuse_unknown` with this binary's PostgreSQL migrations.
fn refuse_unknown(shown: &str, applied: &[Applied]) -> Result<()> {
    super::schema::refuse_unknown(&shown_path(shown), applied, &migrations())
}

/// Applies what is pending in one transaction (PostgreSQL's DDL is transactional, so
/// a failed migration leaves the schema as it was), under an advisory lock so that
/// two hosts starting at once take turns.
fn migrate_client(client: &mut Client, shown: &str) -> Result<MigrationReport> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .map_err(pg("take the migration lock"))?;
    let result = (|| {
        let before = read_history(client)?.unwrap_or_default();
        refuse_unknown(shown, &before)?;
        let report = embedded::migrations::runner()
            .set_grouped(true)
            .set_abort_divergent(true)
            .set_abort_missing(true)
            .run(client)
            .map_err(|e| {
                // refinery's own words, then the server's reason ("permission
                // denied for schema public"), which it keeps as the cause.
                let mut text = e.to_string();
                let mut cause = std::error::Error::source(&e);
                while let Some(c) = cause {
                    text.push_str(": ");
                    text.push_str(&c.to_string());
                    if let Some(pg) = c.downcast_ref::<postgres::Error>()
                        && let Some(db) = pg.as_db_error()
                    {
                        text.push_str(": ");
                        text.push_str(db.message());
                    }
                    cause = c.source();
                }
                Error::Migration(text)
            })?;
        let applied: Vec<String> = report
            .applied_migrations()
            .iter()
            .map(|m| format!("V{}__{}", m.version(), m.name()))
            .collect();
        let after = read_history(client)?.unwrap_or_default();
        Ok(MigrationReport {
            applied,
            pending: vec![],
            current: current(&after),
            backup: None,
        })
    })();
    // The lock is the session's: released here, or when the connection closes.
    let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]);
    result
}

/// `sessionstore migrate --db postgres://…`: connects and applies what is pending.
/// No copy is taken first: the migrations run in one transaction and either all
/// apply or none does.
pub fn migrate(url: &str) -> Result<MigrationReport> {
    let pool = Pool::new(url, 1)?;
    let mut conn = pool.get()?;
    migrate_client(&mut conn.client, pool.shown())
}

/// What `migrate` would apply, read without changing anything.
pub fn plan(url: &str) -> Result<MigrationReport> {
    let pool = Pool::new(url, 1)?;
    let shown = pool.shown().clone();
    let mut client = pool.get()?;
    let applied = read_history(&mut client.client)?.unwrap_or_default();
    refuse_unknown(&shown, &applied)?;
    let pending = migrations()
        .iter()
        .filter(|m| !applied.iter().any(|a| a.version == i64::from(m.version())))
        .map(|m| format!("V{}__{}", m.version(), m.name()))
        .collect();
    Ok(MigrationReport {
        applied: vec![],
        pending,
        current: current(&applied),
        backup: None,
    })
}

/// The tables and triggers the applied migrations make, read from their own text,
/// against what the connection's schema has: a dropped trigger would let the
/// append-only log be edited with no row out of place.
pub fn schema_problems(tx: &Tx<'_>) -> Result<Vec<String>> {
    let version: i64 = tx
        .query_row(
            "SELECT coalesce(max(version), 0) FROM refinery_schema_history",
            args![],
            |r| r.get(0),
        )
        .map_err(super::queries::sql("read the schema history"))?
        .unwrap_or(0);
    let mut tables = std::collections::BTreeSet::new();
    let mut triggers = std::collections::BTreeSet::new();
    let mut functions = std::collections::BTreeMap::new();
    for m in migrations()
        .iter()
        .filter(|m| i64::from(m.version()) <= version)
    {
        let sql = m.sql().unwrap_or_default();
        functions.extend(function_bodies(sql));
        for (verb, name) in created_names(sql) {
            match verb {
                Named::Table(true) => tables.insert(name),
                Named::Table(false) => tables.remove(&name),
                Named::Trigger(true) => triggers.insert(name),
                Named::Trigger(false) => triggers.remove(&name),
            };
        }
    }
    let have_tables: std::collections::BTreeSet<String> = tx
        .query_map(
            "SELECT table_name FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
               AND table_name <> 'refinery_schema_history'",
            args![],
            |r| r.get(0),
        )
        .map_err(super::queries::sql("list tables"))?
        .into_iter()
        .collect();
    let have_triggers: std::collections::BTreeSet<String> = tx
        .query_map(
            "SELECT t.tgname::text FROM pg_trigger t
               JOIN pg_class c ON c.oid = t.tgrelid
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = current_schema() AND NOT t.tgisinternal AND t.tgenabled <> 'D'",
            args![],
            |r| r.get(0),
        )
        .map_err(super::queries::sql("list triggers"))?
        .into_iter()
        .collect();
    // A trigger can stay in place with its function rewritten to let every change
    // through: each function's body is compared with the one its migration made.
    let have_functions: std::collections::BTreeMap<String, String> = tx
        .query_map(
            "SELECT p.proname::text, p.prosrc FROM pg_proc p
               JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = current_schema()",
            args![],
            |r| Ok((r.get::<String>(0)?, squeeze(&r.get::<String>(1)?))),
        )
        .map_err(super::queries::sql("list functions"))?
        .into_iter()
        .collect();
    let mut problems = Vec::new();
    for (name, body) in &functions {
        match have_functions.get(name) {
            None => problems.push(format!(
                "schema: function {name} is missing; the version-{version} schema has it"
            )),
            Some(found) if found != body => problems.push(format!(
                "schema: function {name} differs from the version-{version} schema"
            )),
            Some(_) => {}
        }
    }
    for name in have_functions.keys() {
        if !functions.contains_key(name) {
            problems.push(format!(
                "schema: function {name} is not in the version-{version} schema"
            ));
        }
    }
    for (kind, want, have) in [
        ("table", &tables, &have_tables),
        ("trigger", &triggers, &have_triggers),
    ] {
        for name in want.difference(have) {
            problems.push(format!(
                "schema: {kind} {name} is missing (or disabled); the version-{version} schema has it"
            ));
        }
        for name in have.difference(want) {
            problems.push(format!(
                "schema: {kind} {name} is not in the version-{version} schema"
            ));
        }
    }
    Ok(problems)
}

/// Runs of whitespace made one space: layout is not a difference.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Each `CREATE [OR REPLACE] FUNCTION name(…) … AS $$ body $$` of a migration, as
/// (name, body with its whitespace squeezed); a later one of the same name replaces
/// an earlier one.
fn function_bodies(sql: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = sql;
    while let Some(at) = rest.find("FUNCTION ") {
        let before = &rest[..at];
        rest = &rest[at + "FUNCTION ".len()..];
        // Only a definition: `EXECUTE FUNCTION f()` in a trigger names one.
        let defines = before
            .trim_end()
            .rsplit(char::is_whitespace)
            .next()
            .is_some_and(|w| w == "CREATE" || w == "REPLACE");
        if !defines {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let Some(open) = rest.find("$$") else { break };
        let body_and_rest = &rest[open + 2..];
        let Some(close) = body_and_rest.find("$$") else {
            break;
        };
        out.push((name, squeeze(&body_and_rest[..close])));
        rest = &body_and_rest[close + 2..];
    }
    out
}

enum Named {
    /// `true` when made, `false` when dropped.
    Table(bool),
    Trigger(bool),
}

/// `CREATE TABLE x`, `CREATE TRIGGER x`, `DROP TRIGGER x` and the like in a
/// migration's text, in order, comments skipped.
fn created_names(sql: &str) -> Vec<(Named, String)> {
    let words: Vec<String> = sql
        .lines()
        .map(|l| l.split("--").next().unwrap_or(""))
        .flat_map(|l| l.split(|c: char| c.is_whitespace() || c == '(' || c == ';'))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect();
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let verb = w.to_ascii_uppercase();
        let make = match verb.as_str() {
            "CREATE" => true,
            "DROP" => false,
            _ => continue,
        };
        let mut j = i + 1;
        // CREATE OR REPLACE / CREATE CONSTRAINT TRIGGER
        while j < words.len()
            && matches!(
                words[j].to_ascii_uppercase().as_str(),
                "OR" | "REPLACE" | "CONSTRAINT"
            )
        {
            j += 1;
        }
        let Some(kind) = words.get(j).map(|k| k.to_ascii_uppercase()) else {
            continue;
        };
        j += 1;
        while j < words.len()
            && matches!(
                words[j].to_ascii_uppercase().as_str(),
                "IF" | "NOT" | "EXISTS"
            )
        {
            j += 1;
        }
        let Some(name) = words.get(j) else { continue };
        let name = name.trim_matches('"').to_owned();
        match kind.as_str() {
            "TABLE" => out.push((Named::Table(make), name)),
            "TRIGGER" => out.push((Named::Trigger(make), name)),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_with_a_slash_or_a_question_mark_is_still_redacted() {
        // The driver ends the password at the first `@`, whatever it holds.
        let url = "postgres://u:Xy/9+kq?Z@host:5432/db?application_name=x";
        let config: postgres::Config = url.parse().unwrap();
        assert_eq!(config.get_password(), Some(&b"Xy/9+kq?Z"[..]));
        let shown = redact(url);
        assert_eq!(shown, "postgres://u:***@host:5432/db?application_name=x");
        assert!(secrets(url).contains(&"Xy/9+kq?Z".to_owned()));
        assert!(!scrub(&format!("failed for {url}"), &secrets(url)).contains("Xy/9"));
    }

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            redact("postgres://alice:s3cret@db.example:5432/sessions?sslmode=disable"),
            "postgres://alice:***@db.example:5432/sessions?sslmode=disable"
        );
        assert_eq!(
            redact("postgresql://bob@host/db?password=hunter2&application_name=x"),
            "postgresql://bob@host/db?password=***&application_name=x"
        );
        assert_eq!(redact("postgres://host/db"), "postgres://host/db");
    }

    #[test]
    fn the_search_path_joins_the_options_a_url_has() {
        assert_eq!(
            with_search_path("postgres://h/db", "s1"),
            "postgres://h/db?options=-c%20search_path%3Ds1"
        );
        assert_eq!(
            with_search_path("postgres://h/db?sslmode=disable", "s1"),
            "postgres://h/db?sslmode=disable&options=-c%20search_path%3Ds1"
        );
        assert_eq!(
            with_search_path("postgres://h/db?options=-c%20work_mem%3D8MB&x=1", "s1"),
            "postgres://h/db?options=-c%20work_mem%3D8MB%20-c%20search_path%3Ds1&x=1"
        );
        for url in [
            with_search_path("postgres://h/db", "s1"),
            with_search_path("postgres://h/db?options=-c%20work_mem%3D8MB", "s1"),
        ] {
            let config: postgres::Config = url.parse().unwrap();
            assert!(
                config.get_options().unwrap().ends_with("-c search_path=s1"),
                "{url}"
            );
        }
    }

    #[test]
    fn a_drivers_words_lose_any_password_the_string_carried() {
        let url = "postgres://alice:s3cret@host/db?password=other&sslmode=disable";
        assert_eq!(secrets(url), ["s3cret", "other"]);
        assert_eq!(
            scrub("got `s3cret` and other things", &secrets(url)),
            "got `***` and *** things"
        );
        assert!(secrets("postgres://alice@host/db").is_empty());
        assert!(secrets("postgres://alice:@host/db?password=").is_empty());
    }

    #[test]
    fn the_migrations_name_what_they_make_and_drop() {
        let names: Vec<String> = created_names(
            "CREATE TABLE a (x BIGINT);\n-- CREATE TABLE ignored\nCREATE TRIGGER t BEFORE \
             UPDATE ON a;\nDROP TRIGGER IF EXISTS t ON a;\nCREATE OR REPLACE FUNCTION f()",
        )
        .into_iter()
        .map(|(named, name)| match named {
            Named::Table(m) => format!("table {m} {name}"),
            Named::Trigger(m) => format!("trigger {m} {name}"),
        })
        .collect();
        assert_eq!(names, ["table true a", "trigger true t", "trigger false t"]);
    }

    /// A panic inside a locked write must not send the connection back to the pool
    /// still holding the session's lock: every later writer of that session, on any
    /// host, would wait on it.
    #[test]
    fn a_panic_inside_a_locked_write_lets_go_of_the_lock() {
        let Some(server) = test_server() else {
            return;
        };
        let schema = ScratchSchema::create(&server, "lock").unwrap();
        let db = PgDb::open(&schema.url(), Access::Create).unwrap();
        let key = 0x5e55_1075_0000_0042_i64;
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _: Result<()> = db.write_locked(Some(key), |_| panic!("a bug inside a write"));
        }));
        assert!(panicked.is_err());
        let free: bool = Client::connect(&server, NoTls)
            .unwrap()
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .unwrap()
            .get(0);
        drop(db);
        schema.remove().unwrap();
        assert!(free, "the session's lock is still held after the panic");
    }
}
