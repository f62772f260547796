//! Connections to a PostgreSQL server: the r2d2 pool of blocking clients with their
//! prepared statements, the first connection made at once so a refusal is reported
//! with its reason, connections closed on a thread of their own, and a driver's words
//! without the password. It runs no statement of the store's.

use std::sync::Arc;
use std::time::Duration;

use postgres::Client;
use r2d2_postgres::PostgresConnectionManager;

use super::tls::{self, Connector};
use crate::config::{PostgresUrl, Tls, redact, scrub_secrets};
use crate::db::sql::Statements;
use crate::error::{Error, Result};

/// How long a caller waits for a connection (the server down, or all in use).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// r2d2_postgres's manager, with each connection's prepared statements kept beside it.
pub(super) struct Manager {
    inner: PostgresConnectionManager<Connector>,
    /// The connection `Pool::new` made to check the server, handed out first.
    first: std::sync::Mutex<Option<Client>>,
}

/// One pooled connection and the statements prepared on it.
pub(crate) struct Conn {
    pub(super) client: Client,
    pub(super) statements: Statements,
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

/// The server `url` names could not be reached: its reason, without the password.
pub fn unreachable(url: &str, e: &postgres::Error) -> Error {
    Error::Unreachable {
        url: redact(url),
        detail: scrub_secrets(url, &describe(e)),
    }
}

/// The connection pool. The blocking `postgres` client runs a runtime of its own, so a
/// connection closed on a thread driving async tasks panics: the last handle closes
/// the connections on a thread of its own, and waits for them.
#[derive(Clone)]
pub(super) struct Pool(Arc<PoolInner>);

struct PoolInner {
    pool: Option<r2d2::Pool<Manager>>,
    /// Why the latest attempt to connect failed, as the driver said it.
    last_error: LastConnectError,
    /// The connection string without its password, for messages.
    shown: Arc<str>,
    /// The connection string, whose passwords are kept out of messages.
    url: PostgresUrl,
}

/// The whole of the last failed connection's error: r2d2 keeps only its outermost
/// words ("db error") and retries until its timeout.
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

/// How every connection to `url` is made (the pool's, a claim's): the driver's
/// settings, the TLS the URL asks for and its connector.
pub(super) fn client_config(url: &PostgresUrl) -> Result<(postgres::Config, Tls, Connector)> {
    let (mut config, tls) = url.driver_config()?;
    let connector = tls::connector(url, &tls)?;
    // A server that takes the TCP connection and never answers must not hang a
    // command, and a peer that went away is noticed, unless the string says otherwise.
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT);
    }
    config.keepalives(true);
    config.keepalives_idle(Duration::from_secs(60));
    Ok((config, tls, connector))
}

impl Pool {
    /// A pool of at most `max_size` connections to `url`, opening its first.
    pub(super) fn new(url: &PostgresUrl, max_size: u32) -> Result<Pool> {
        let shown: Arc<str> = url.to_string().into();
        let (config, tls, connector) = client_config(url)?;
        // One connection first, on a thread of its own: a refusal, a missing database
        // or a wrong password is reported at once with the reason, not after the pool's
        // whole timeout. The driver times only the TCP connect; a server that never
        // answers is given up on here, the attempt's thread left to end with the process.
        let (sent, answer) = std::sync::mpsc::channel();
        let attempt = config.clone();
        let attempt_tls = connector.clone();
        // Asking the server costs a round trip, so only when the log would show it.
        let ask = tracing::enabled!(tracing::Level::INFO);
        std::thread::spawn(move || {
            let connected = attempt.connect(attempt_tls).map(|mut client| {
                let encrypted = if ask {
                    tls::encrypted(&mut client)
                } else {
                    None
                };
                (client, encrypted)
            });
            let _ = sent.send(connected.map_err(|e| describe(&e)));
        });
        let (first, encrypted) = answer
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
                detail: url.scrub(&reason),
            })?;
        log_connection(&shown, &tls, encrypted);
        let last_error = LastConnectError::default();
        let pool = r2d2::Pool::builder()
            .max_size(max_size)
            .min_idle(Some(0))
            .connection_timeout(CONNECT_TIMEOUT)
            // Failed connection attempts are kept for the caller, not logged by r2d2.
            .error_handler(Box::new(last_error.clone()))
            .build_unchecked(Manager {
                inner: PostgresConnectionManager::new(config, connector),
                first: std::sync::Mutex::new(Some(first)),
            });
        Ok(Pool(Arc::new(PoolInner {
            pool: Some(pool),
            last_error,
            shown,
            url: url.clone(),
        })))
    }

    pub(super) fn shown(&self) -> &Arc<str> {
        &self.0.shown
    }

    /// A connection, or `Error::Unreachable` saying why none could be made within
    /// `CONNECT_TIMEOUT`.
    pub(super) fn get(&self) -> Result<r2d2::PooledConnection<Manager>> {
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
                    detail: inner.url.scrub(&last.unwrap_or_else(|| e.to_string())),
                }
            })
    }
}

/// Tells the log whether the first connection is encrypted (all are made alike).
fn log_connection(shown: &str, tls: &Tls, encrypted: Option<bool>) {
    let mode = &tls.mode;
    match encrypted {
        Some(true) => tracing::info!("connected to {shown} over TLS (sslmode {mode})"),
        Some(false) => tracing::info!("connected to {shown} without TLS (sslmode {mode})"),
        None => tracing::info!(
            "connected to {shown} (sslmode {mode}); the server did not say whether the \
             connection is encrypted"
        ),
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

/// A connection string as shown (its password replaced), where an `Error` wants the
/// database's path.
pub(super) fn shown_path(shown: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(shown)
}
