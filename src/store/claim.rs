//! `Store::claim_session`: one owner per session, held by an engine lock that ends
//! with its holder's process (`db::claim` on SQLite, `db::postgres::claim` on
//! PostgreSQL). A claim writes nothing; the store's own writes do not need one.

use super::{Store, blocking};
use crate::config::Database;
use crate::error::{Error, Result};
use crate::ids::SessionId;

/// A session this process holds: while it lives, another process's
/// [`Store::claim_session`] for the same session (and another claim in this process)
/// fails with [`Error::SessionOpenElsewhere`]. Dropping it releases the session, and so
/// does the end of the process, however it ends.
#[derive(Debug)]
pub struct SessionClaim {
    session: SessionId,
    _held: Held,
}

#[derive(Debug)]
enum Held {
    Sqlite(#[allow(dead_code)] crate::db::claim::SqliteClaim),
    #[cfg(feature = "postgres")]
    Postgres(#[allow(dead_code)] crate::db::postgres::claim::PgClaim),
}

impl SessionClaim {
    /// The session held.
    pub fn session(&self) -> SessionId {
        self.session
    }
}

impl Store {
    /// Claims `session` for this process: the one owner of a session a proxy carries.
    /// Refused with [`Error::SessionOpenElsewhere`] while another claim holds it, and
    /// with [`Error::ReadOnly`] on a store opened for reading (a claim is for a
    /// writer). It does not look the session up: a caller claims the session it is
    /// about to open or has just made.
    pub async fn claim_session(&self, session: SessionId) -> Result<SessionClaim> {
        let database = self.config().database.clone();
        // A store opened for reading has no writer.
        let read_only = self.writer.is_none();
        let held = blocking(move || match &database {
            Database::Sqlite(path) if read_only => Err(Error::ReadOnly(path.clone())),
            Database::Sqlite(path) => crate::db::claim::claim(path, session).map(Held::Sqlite),
            #[cfg(feature = "postgres")]
            Database::Postgres(url) if read_only => Err(Error::ReadOnly(url.to_string().into())),
            #[cfg(feature = "postgres")]
            Database::Postgres(url) => {
                crate::db::postgres::claim::claim(url, session).map(Held::Postgres)
            }
            #[cfg(not(feature = "postgres"))]
            Database::Postgres(url) => Err(Error::ReadOnly(url.to_string().into())),
        })
        .await?;
        Ok(SessionClaim {
            session,
            _held: held,
        })
    }

    /// Whether a claim holds `session` now, in this process or another (a proxy has
    /// it open): a probe that takes nothing and writes nothing. A snapshot: the
    /// holder may let go a moment later.
    pub async fn session_claimed(&self, session: SessionId) -> Result<bool> {
        let database = self.config().database.clone();
        blocking(move || match &database {
            Database::Sqlite(path) => crate::db::claim::is_claimed(path, session),
            #[cfg(feature = "postgres")]
            Database::Postgres(url) => crate::db::postgres::claim::is_claimed(url, session),
            #[cfg(not(feature = "postgres"))]
            Database::Postgres(_) => Ok(false),
        })
        .await
    }
}
