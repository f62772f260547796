//! What `usage` reads: each session's turns and tokens summed in SQL (no history is
//! read), with the latest cost and context its row holds. A turn counts in the session
//! it ran in: a fork's copied history brings no turns, so nothing of its origin's.

use super::error::sql;
use super::sql::{DbError, Row, Tx, args};
use crate::error::{Error, Result};
use crate::ids::SessionId;
use crate::model::{Context, Cost, SessionFigures, SessionUsage, TokenSums};

/// One row a session: its turns begun at or after `since` (all when `None`), the sums
/// of their token columns (NULL where none reported a kind), and the session's figures.
/// `{filter}` is a condition on `s`.
const USAGE: &str = "
    SELECT s.id, s.title, count(t.id),
           CAST(sum(t.input_tokens) AS BIGINT), CAST(sum(t.output_tokens) AS BIGINT),
           CAST(sum(t.thought_tokens) AS BIGINT), CAST(sum(t.cached_read_tokens) AS BIGINT),
           CAST(sum(t.cached_write_tokens) AS BIGINT), CAST(sum(t.total_tokens) AS BIGINT),
           s.cost_amount, s.cost_currency, s.context_used, s.context_size
      FROM sessions s
      LEFT JOIN turns t
        ON t.session_id = s.id AND (CAST(?1 AS TEXT) IS NULL OR t.started_at >= ?1)
     WHERE {filter}
     GROUP BY s.id, s.title, s.updated_at, s.cost_amount, s.cost_currency, s.context_used,
              s.context_size
     ORDER BY s.updated_at DESC, s.id DESC";

fn usage_from_row(row: &Row<'_>) -> Result<SessionUsage, DbError> {
    let mut kinds = [None; 6];
    for (i, kind) in kinds.iter_mut().enumerate() {
        *kind = row.get(3 + i)?;
    }
    let SessionFigures { cost, context } = figures_from_row(row, 9)?;
    Ok(SessionUsage {
        id: row.parsed(0)?,
        title: row.get(1)?,
        turns: row.get(2)?,
        tokens: TokenSums::from_kinds(kinds),
        cost,
        context,
    })
}

/// The usage of `sessions` (every session, archived ones too, when empty), in the
/// listing's order (most recently updated first); `since` is a timestamp as the store
/// writes them. A session that is not there is refused.
pub fn usage(
    conn: &Tx<'_>,
    sessions: &[SessionId],
    since: Option<&str>,
) -> Result<Vec<SessionUsage>> {
    if sessions.is_empty() {
        return conn
            .query_map(
                &USAGE.replace("{filter}", "1 = 1"),
                args![since],
                usage_from_row,
            )
            .map_err(sql("sum the sessions' usage"));
    }
    let one = USAGE.replace("{filter}", "s.id = ?2");
    let mut out: Vec<SessionUsage> = Vec::with_capacity(sessions.len());
    for session in sessions {
        if out.iter().any(|u| u.id == *session) {
            continue;
        }
        let row = conn
            .query_row(&one, args![since, session.to_string()], usage_from_row)
            .map_err(sql("sum a session's usage"))?
            .ok_or(Error::SessionNotFound(*session))?;
        out.push(row);
    }
    Ok(out)
}

/// A session's figures as its row holds them (`cost_*`, `context_*`).
pub fn figures(conn: &Tx<'_>, session: &SessionId) -> Result<SessionFigures> {
    conn.query_row(
        "SELECT cost_amount, cost_currency, context_used, context_size
         FROM sessions WHERE id = ?1",
        args![session.to_string()],
        |row| figures_from_row(row, 0),
    )
    .map_err(sql("read a session's usage figures"))?
    .ok_or(Error::SessionNotFound(*session))
}

/// A session's figures from its four columns from `at` on, in the order above.
fn figures_from_row(row: &Row<'_>, at: usize) -> Result<SessionFigures, DbError> {
    let cost = match (row.get(at)?, row.get(at + 1)?) {
        (Some(amount), Some(currency)) => Some(Cost { amount, currency }),
        _ => None,
    };
    let context = match (row.get(at + 2)?, row.get(at + 3)?) {
        (Some(used), Some(size)) => Some(Context { used, size }),
        _ => None,
    };
    Ok(SessionFigures { cost, context })
}

/// Writes a session's figures into its row (no event: the `turn_recorded` event of the
/// `usage_update` that gave them is theirs).
pub fn set_figures(conn: &Tx<'_>, session: &SessionId, figures: &SessionFigures) -> Result<()> {
    let too_big = |_| Error::OutOfRange {
        what: "a session's context size",
    };
    let (used, size) = match figures.context {
        Some(c) => (
            Some(i64::try_from(c.used).map_err(too_big)?),
            Some(i64::try_from(c.size).map_err(too_big)?),
        ),
        None => (None, None),
    };
    let (amount, currency) = match &figures.cost {
        Some(c) => (Some(c.amount), Some(c.currency.as_str())),
        None => (None, None),
    };
    conn.execute(
        "UPDATE sessions SET cost_amount = ?2, cost_currency = ?3, context_used = ?4,
                context_size = ?5
         WHERE id = ?1",
        args![session.to_string(), amount, currency, used, size],
    )
    .map_err(sql("record a session's usage figures"))?;
    Ok(())
}
