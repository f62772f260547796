//! Full-text search and its merge for an erasure. Triggers write the index entries on
//! both engines (SQLite's again since V18, which undid V7). SQLite's index reads text
//! from the rows via `search_text` (V10); items are indexed under their row id (> 0),
//! other entries below zero (V11).

use serde::Serialize;

use super::sql::{DbError, Engine, Tx, args};
use crate::error::{Error, Result};
use crate::ids::SessionId;

/// Marks put around each matched term in a snippet: visible, and not HTML.
pub const MATCH_START: &str = "[";
pub const MATCH_END: &str = "]";

/// `rank` is bm25's: lower is better.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hit {
    pub session_id: SessionId,
    /// A message id, or a recorded item's id for agent text; `None` for a title.
    pub message_id: Option<String>,
    /// `title`, `message`, `agent_message` or `agent_thought`.
    pub source: String,
    pub snippet: String,
    pub rank: f64,
}

/// Best-ranked first. A query FTS5 cannot parse is `Error::SearchQuery`, one line in
/// FTS5's words, never the SQL around it.
pub fn search(
    conn: &Tx<'_>,
    query: &str,
    session: Option<&SessionId>,
    limit: u32,
) -> Result<Vec<Hit>> {
    if query.trim().is_empty() {
        return Err(Error::SearchQuery {
            query: query.to_owned(),
            reason: "the query is empty".to_owned(),
        });
    }
    let statement = match conn.engine() {
        Engine::Sqlite => {
            // One hit per item: its best segment's (SQLite takes bare columns from the
            // row `min` chose). Snippets, far dearer than ranking, are made only for
            // the hits kept, in one pass filtered by `+rowid` (a lookup per hit would
            // reopen every segment). A hit whose row is gone (V10) is dropped. Equal
            // ranks go oldest first by the UUIDv7 they name, on both engines.
            "WITH hits AS MATERIALIZED (
                 SELECT coalesce(i.session_id, e.session_id) AS session_id,
                        coalesce(i.id, substr(e.entry_id, 1, 36)) AS entry,
                        coalesce(i.kind, e.source) AS source,
                        search.rank AS rank, search.rowid AS id
                 FROM search
                 LEFT JOIN items i ON i.rowid = search.rowid
                      AND i.kind IN ('agent_message', 'agent_thought')
                 LEFT JOIN search_entries e ON e.id = search.rowid
                 WHERE search MATCH ?1
                   AND coalesce(i.session_id, e.session_id) IS NOT NULL
                   AND (?2 IS NULL OR coalesce(i.session_id, e.session_id) = ?2)),
             best AS MATERIALIZED (
                 SELECT session_id, entry, source, min(rank) AS best, id FROM hits
                 GROUP BY entry, source ORDER BY best, entry, source LIMIT ?3)
             SELECT b.session_id, b.entry, b.source, s.snip, b.best, b.id
             FROM best b JOIN (
                 SELECT rowid AS id, snippet(search, 0, ?4, ?5, '…', 16) AS snip
                 FROM search WHERE search MATCH ?1 AND +rowid IN (SELECT id FROM best)
             ) AS s ON s.id = b.id
             ORDER BY b.best, b.entry, b.source"
        }
        // PostgreSQL's own full-text search over the text the V4 triggers keep beside
        // each entry: web-search syntax ("phrases", or, -word), ranked by ts_rank
        // negated so that, as with bm25, lower is better.
        Engine::Postgres => {
            "SELECT session_id, entry, source,
                    ts_headline('simple', body, q,
                        'StartSel=' || CAST(?4 AS TEXT) || ', StopSel=' || CAST(?5 AS TEXT)
                        || ', MaxWords=16, MinWords=4, HighlightAll=false'),
                    rank, id
             FROM (
                 SELECT DISTINCT ON (left(e.entry_id, 36), e.source)
                        e.session_id, left(e.entry_id, 36) AS entry, e.source, e.body, q,
                        CAST(-ts_rank(e.doc, q) AS DOUBLE PRECISION) AS rank, e.id
                 FROM search_entries e,
                      websearch_to_tsquery('simple', CAST(?1 AS TEXT)) AS q
                 WHERE e.doc @@ q AND (CAST(?2 AS TEXT) IS NULL OR e.session_id = ?2)
                 ORDER BY left(e.entry_id, 36), e.source, rank, e.id) AS best
             ORDER BY rank, entry, source LIMIT ?3"
        }
    };
    let fail = |e: DbError| query_error(query, e);
    let rows = conn
        .query_map(
            statement,
            args![
                query,
                session.map(|s| s.to_string()),
                limit,
                MATCH_START,
                MATCH_END
            ],
            |row| {
                let source: String = row.get(2)?;
                Ok(Hit {
                    session_id: row.parsed(0)?,
                    message_id: if source == "title" {
                        None
                    } else {
                        Some(row.get(1)?)
                    },
                    source,
                    snippet: row.get(3)?,
                    rank: row.get(4)?,
                })
            },
        )
        .map_err(fail)?;
    Ok(rows)
}

/// The statement was prepared before the query ran, so a plain `SQLITE_ERROR` while
/// stepping it is FTS5 refusing the query (`fts5: syntax error near ...`,
/// `unterminated string`, `no such column: x` for `x:word`): the caller's query, told
/// in FTS5's words. Anything else (busy, I/O, corruption) is the database's.
fn query_error(query: &str, e: DbError) -> Error {
    match &e {
        DbError::Sqlite(rusqlite::Error::SqliteFailure(f, Some(text))) if f.extended_code == 1 => {
            Error::SearchQuery {
                query: query.to_owned(),
                // FTS5 names the offending token after a colon; for an empty one
                // (a bare `*`) that leaves a dangling ": ".
                reason: text
                    .strip_prefix("fts5: ")
                    .unwrap_or(text)
                    .trim_end_matches([':', ' '])
                    .to_owned(),
            }
        }
        _ => crate::db::error::failed("search", e),
    }
}

/// FTS5's `optimize`: deleted or replaced text stays in old segments (and their
/// delete markers) until a merge. An erasure runs it with `secure_delete` on, so the
/// freed pages are zeroed.
pub fn purge_deleted(conn: &Tx<'_>) -> Result<()> {
    if conn.engine() == Engine::Sqlite {
        conn.execute("INSERT INTO search (search) VALUES ('optimize')", args![])
            .map_err(super::error::sql("merge the search index"))?;
    }
    Ok(())
}

/// Under the id below the lowest, never above zero (V11: those are items' row ids).
pub(crate) const NEW_ENTRY: &str = "INSERT INTO search_entries (id, session_id, entry_id, source)
     VALUES ((SELECT min(coalesce(min(id), 0), 0) - 1 FROM search_entries), ?1, ?2, ?3)";
