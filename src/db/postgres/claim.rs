//! One owner per session on PostgreSQL: a claim is a session-level advisory lock on a
//! key derived from the schema and the session id, held on a connection of its own,
//! which the server drops when that connection ends (its process gone: a closed socket
//! or the keepalives). It writes no row. The blocking client lives on a thread of its
//! own, since it cannot be dropped on an async one (see `pool.rs`).

use std::sync::mpsc;
use std::time::Duration;

use super::pool::{client_config, unreachable};
use crate::config::PostgresUrl;
use crate::db::error::postgres as pg;
use crate::error::{Error, Result};
use crate::ids::SessionId;

/// The advisory lock's key: the same session in two schemas (two stores on one
/// server, or the tests' scratch schemas) is two different claims.
const TRY_LOCK: &str = "SELECT pg_try_advisory_lock(hashtextextended(\
     'sessionstore session ' || current_schema() || ' ' || $1, 0))";

/// The release, said before the connection closes: the server drops a closed
/// connection's locks only once it has seen it go, so a claim taken again at once
/// could be refused.
const UNLOCK: &str = "SELECT pg_advisory_unlock(hashtextextended(\
     'sessionstore session ' || current_schema() || ' ' || $1, 0))";

/// How long dropping a claim waits for the server to confirm the release (then the
/// lock ends with the connection).
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// A session claimed on a PostgreSQL database; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct PgClaim {
    /// Dropped to tell the thread to release the lock and close its connection.
    release: Option<mpsc::Sender<()>>,
    /// Closed by the thread once the server has released the lock (or failed to).
    released: mpsc::Receiver<()>,
}

/// Claims `session` on the database of `url`, on a new connection.
pub(crate) fn claim(url: &PostgresUrl, session: SessionId) -> Result<PgClaim> {
    let (config, _, connector) = client_config(url)?;
    let shown = url.to_string();
    let (answer, answered) = mpsc::channel::<Result<bool>>();
    let (release, release_asked) = mpsc::channel::<()>();
    let (done, released) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        let mut client = match config.connect(connector) {
            Ok(client) => client,
            Err(e) => {
                let _ = answer.send(Err(unreachable(&shown, &e)));
                return;
            }
        };
        let taken = client
            .query_one(TRY_LOCK, &[&session.to_string()])
            .map_err(pg("claim a session"))
            .map(|row| row.get::<_, bool>(0));
        let held = matches!(taken, Ok(true));
        let _ = answer.send(taken);
        if held {
            // Until the claim is dropped (its sender with it), or the process ends.
            let _ = release_asked.recv();
            if let Err(e) = client.query_one(UNLOCK, &[&session.to_string()]) {
                // The connection's end releases it then, a moment later.
                tracing::warn!("cannot release the claim on session {session}: {e}");
            }
        }
        drop(done);
        drop(client);
    });
    let taken = answered
        .recv()
        .map_err(|_| Error::Task("the session claim's connection thread ended".to_owned()))
        .and_then(|taken| taken);
    let claim = PgClaim {
        release: Some(release),
        released,
    };
    match taken {
        Ok(true) => Ok(claim),
        Ok(false) => Err(Error::SessionOpenElsewhere { session }),
        Err(e) => Err(e),
    }
}

/// Whether `session` is claimed, by any process: the claim's advisory lock among the
/// granted locks of this database, looked at without taking it.
pub(crate) fn is_claimed(url: &PostgresUrl, session: SessionId) -> Result<bool> {
    let (config, _, connector) = client_config(url)?;
    let mut client = config
        .connect(connector)
        .map_err(|e| unreachable(&url.to_string(), &e))?;
    client
        .query_one(HELD, &[&session.to_string()])
        .map_err(pg("look for a session's claim"))
        .map(|row| row.get::<_, bool>(0))
}

/// A bigint advisory lock shows in `pg_locks` as its high half in `classid` and its
/// low half in `objid`, with `objsubid` 1.
const HELD: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks \
     WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
       AND ((classid::bigint << 32) | objid::bigint) = hashtextextended(\
     'sessionstore session ' || current_schema() || ' ' || $1, 0))";

impl Drop for PgClaim {
    fn drop(&mut self) {
        drop(self.release.take());
        // Waited for, so the session can be claimed again as soon as this returns.
        let _ = self.released.recv_timeout(RELEASE_WAIT);
    }
}
