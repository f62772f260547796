//! Sessions a page at a time, most recently updated first, with an opaque cursor.

use base64_simd::URL_SAFE_NO_PAD;
use serde::Serialize;

use crate::error::Result;
use crate::ids::SessionId;
use crate::model::{ArchiveFilter, SessionSummary};
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

/// Where the next page starts: after this `(updated_at, id)` key, so a session added or
/// updated between pages neither shifts them nor shows twice; it carries the archive
/// filter. Printed as URL-safe base64 of `updated_at|id[|filter]`; opaque to callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionCursor {
    pub(crate) updated_at: String,
    pub(crate) id: SessionId,
    pub(crate) archived: ArchiveFilter,
}

/// A cursor that this store did not print.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed cursor {input:?}: pass a nextCursor value exactly as `session list` printed it")]
pub struct CursorError {
    pub input: String,
}

impl SessionCursor {
    pub(crate) fn after(summary: &SessionSummary, archived: ArchiveFilter) -> SessionCursor {
        SessionCursor {
            updated_at: summary.updated_at.clone(),
            id: summary.id,
            archived,
        }
    }

    /// The archive filter of the listing this cursor continues.
    pub fn archived(&self) -> ArchiveFilter {
        self.archived
    }
}

impl std::fmt::Display for SessionCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let raw = match self.archived {
            ArchiveFilter::Exclude => format!("{}|{}", self.updated_at, self.id),
            other => format!("{}|{}|{other}", self.updated_at, self.id),
        };
        f.write_str(&URL_SAFE_NO_PAD.encode_to_string(raw))
    }
}

impl std::str::FromStr for SessionCursor {
    type Err = CursorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || CursorError {
            input: s.to_owned(),
        };
        let bytes = URL_SAFE_NO_PAD.decode_to_vec(s).map_err(|_| err())?;
        let raw = String::from_utf8(bytes).map_err(|_| err())?;
        // Neither the id nor the filter has a `|`, so the last one or two separate
        // them from the timestamp; a filter's name is no id.
        let (rest, last) = raw.rsplit_once('|').ok_or_else(err)?;
        let (updated_at, id, archived) = match last.parse::<ArchiveFilter>() {
            Ok(archived) => {
                let (updated_at, id) = rest.rsplit_once('|').ok_or_else(err)?;
                (updated_at, id, archived)
            }
            Err(_) => (rest, last, ArchiveFilter::Exclude),
        };
        if updated_at.is_empty() {
            return Err(err());
        }
        Ok(SessionCursor {
            updated_at: updated_at.to_owned(),
            id: id.parse().map_err(|_| err())?,
            archived,
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

/// What [`Store::list_sessions`] lists (`Default`: the first page of [`DEFAULT_PAGE`],
/// every working directory, archived sessions left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub limit: usize,
    /// Where the page starts (from the start when `None`).
    pub cursor: Option<SessionCursor>,
    /// Only the sessions in one working directory; all when `None`.
    pub cwd: Option<CwdFilter>,
    /// Which archive state: this, else the cursor's, else [`ArchiveFilter::Exclude`].
    pub archived: Option<ArchiveFilter>,
}

impl Default for ListQuery {
    fn default() -> ListQuery {
        ListQuery {
            limit: DEFAULT_PAGE,
            cursor: None,
            cwd: None,
            archived: None,
        }
    }
}

/// Lifecycle: listing sessions a page at a time.
impl Store {
    /// One page of the sessions `query` takes, most recently updated (by any event)
    /// first, at most `query.limit` (clamped to 1..=[`MAX_PAGE`]); follow `next_cursor`
    /// until `None`. Reads only.
    pub async fn list_sessions(&self, query: ListQuery) -> Result<SessionPage> {
        let ListQuery {
            limit,
            cursor,
            cwd: filter,
            archived,
        } = query;
        let archived = archived
            .or(cursor.as_ref().map(|c| c.archived))
            .unwrap_or_default();
        let limit = limit.clamp(1, MAX_PAGE);
        let db = self.db().clone();
        // One row past the page says whether another follows: no cursor to an empty page.
        let mut sessions = crate::store::blocking(move || {
            db.read(|tx| {
                let after = cursor.as_ref().map(|c| (c.updated_at.as_str(), &c.id));
                let cwd = filter.as_ref().map(|f| crate::db::sessions::CwdFilter {
                    cwd: &f.cwd,
                    unset_too: f.unset_too,
                });
                crate::db::sessions::page(tx, limit + 1, after, cwd, archived)
            })
        })
        .await?;
        let more = sessions.len() > limit;
        sessions.truncate(limit);
        let next_cursor = if more {
            sessions.last().map(|s| SessionCursor::after(s, archived))
        } else {
            None
        };
        Ok(SessionPage {
            sessions,
            next_cursor,
        })
    }
}

/// The sessions with `cwd`, and, when `unset_too`, those with none.
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
            archived: ArchiveFilter::Exclude,
        };
        for archived in [ArchiveFilter::Include, ArchiveFilter::Only] {
            let other = SessionCursor {
                archived,
                ..cursor.clone()
            };
            assert_eq!(other.to_string().parse::<SessionCursor>().unwrap(), other);
        }
        let text = cursor.to_string();
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "{text}"
        );
        assert_eq!(text.parse::<SessionCursor>().unwrap(), cursor);
        let no_id = URL_SAFE_NO_PAD.encode_to_string("2026-01-01|not-an-id");
        let no_time = URL_SAFE_NO_PAD.encode_to_string(format!("|{}", SessionId::new()));
        for bad in ["", "!!", "abc", no_id.as_str(), no_time.as_str(), "a b"] {
            let e = bad.parse::<SessionCursor>().unwrap_err();
            assert_eq!(e.input, bad);
            assert!(!e.to_string().contains('\n'));
        }
    }
}
