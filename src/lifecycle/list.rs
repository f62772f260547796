//! Sessions a page at a time, most recently updated first, with an opaque cursor that
//! names the last session shown by its `(updated_at, id)` key. It never holds the
//! whole list and never reads attachment files.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;

use crate::error::Result;
use crate::ids::SessionId;
use crate::model::SessionSummary;
use crate::store::Store;

/// How many sessions a page holds when the caller does not say.
pub const DEFAULT_PAGE: usize = 50;
/// The most a page may hold.
pub const MAX_PAGE: usize = 1000;

/// One page, and the cursor of the next one (`None` on the last page).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionPage {
    pub sessions: Vec<SessionSummary>,
    pub next_cursor: Option<SessionCursor>,
}

/// Where the next page starts: just after the session with this key in the order
/// `updated_at DESC, id DESC`. Keyed on values rather than on a position, so a session
/// added (or updated, which moves it to the front) between two pages neither shifts
/// the later pages nor shows twice. Printed as URL-safe base64 of `updated_at|id`;
/// callers treat it as opaque.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCursor {
    pub(crate) updated_at: String,
    pub(crate) id: SessionId,
}

/// A cursor that this store did not print.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed cursor {input:?}: pass a nextCursor value exactly as `session list` printed it")]
pub struct CursorError {
    pub input: String,
}

impl SessionCursor {
    pub(crate) fn after(summary: &SessionSummary) -> SessionCursor {
        SessionCursor {
            updated_at: summary.updated_at.clone(),
            id: summary.id,
        }
    }
}

impl std::fmt::Display for SessionCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let raw = format!("{}|{}", self.updated_at, self.id);
        f.write_str(&URL_SAFE_NO_PAD.encode(raw))
    }
}

impl std::str::FromStr for SessionCursor {
    type Err = CursorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || CursorError {
            input: s.to_owned(),
        };
        let bytes = URL_SAFE_NO_PAD.decode(s).map_err(|_| err())?;
        let raw = String::from_utf8(bytes).map_err(|_| err())?;
        // The id has no `|`, so the last one separates it from the timestamp.
        let (updated_at, id) = raw.rsplit_once('|').ok_or_else(err)?;
        if updated_at.is_empty() {
            return Err(err());
        }
        Ok(SessionCursor {
            updated_at: updated_at.to_owned(),
            id: id.parse().map_err(|_| err())?,
        })
    }
}

impl Serialize for SessionCursor {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Lifecycle: listing sessions a page at a time.
impl Store {
    /// One page of at most `limit` sessions (clamped to 1..=[`MAX_PAGE`]), most recently
    /// updated first, starting after `cursor` (from the start when `None`). Recorded
    /// turns and every other event move a session's `updated_at`, so a session with
    /// news comes first. Reading only: works on a store opened read-only.
    pub async fn list_sessions_page(
        &self,
        limit: usize,
        cursor: Option<SessionCursor>,
    ) -> Result<SessionPage> {
        self.list_sessions_in(limit, cursor, None).await
    }

    /// [`Store::list_sessions_page`] of the sessions in one working directory (an ACP
    /// client's `session/list` with a `cwd`): those whose client gave `cwd`, and, when
    /// `filter.unset_too`, those that have none.
    pub async fn list_sessions_in(
        &self,
        limit: usize,
        cursor: Option<SessionCursor>,
        filter: Option<CwdFilter>,
    ) -> Result<SessionPage> {
        let limit = limit.clamp(1, MAX_PAGE);
        let db = self.db().clone();
        // One row past the page says whether another page follows, so the last page
        // never hands out a cursor that leads to an empty one.
        let mut sessions = crate::store::blocking(move || {
            db.read(|tx| {
                let after = cursor.as_ref().map(|c| (c.updated_at.as_str(), &c.id));
                let cwd = filter.as_ref().map(|f| crate::db::sessions::CwdFilter {
                    cwd: &f.cwd,
                    unset_too: f.unset_too,
                });
                crate::db::sessions::page(tx, limit + 1, after, cwd)
            })
        })
        .await?;
        let more = sessions.len() > limit;
        sessions.truncate(limit);
        let next_cursor = if more {
            sessions.last().map(SessionCursor::after)
        } else {
            None
        };
        Ok(SessionPage {
            sessions,
            next_cursor,
        })
    }
}

/// Which sessions a listing takes by the working directory their client gave: those
/// with `cwd`, and, when `unset_too`, those that have none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CwdFilter {
    pub cwd: String,
    pub unset_too: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_a_foreign_one_is_refused() {
        let cursor = SessionCursor {
            updated_at: "2026-01-02T03:04:05.000000006Z".into(),
            id: SessionId::new(),
        };
        let text = cursor.to_string();
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "{text}"
        );
        assert_eq!(text.parse::<SessionCursor>().unwrap(), cursor);
        let no_id = URL_SAFE_NO_PAD.encode("2026-01-01|not-an-id");
        let no_time = URL_SAFE_NO_PAD.encode(format!("|{}", SessionId::new()));
        for bad in ["", "!!", "abc", no_id.as_str(), no_time.as_str(), "a b"] {
            let e = bad.parse::<SessionCursor>().unwrap_err();
            assert_eq!(e.input, bad);
            assert!(!e.to_string().contains('\n'));
        }
    }
}
