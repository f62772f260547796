//! What a proxied session keeps beside its history: its turns and the client's latest
//! settings. Each write appends its event in the caller's transaction.

use super::append::{append_event, now};
use super::error::sql;
use super::sql::{DbError, Row, Tx, args};

use crate::error::{Error, Result};
use crate::ids::{MessageId, SessionId, TurnId};
use crate::model::{EventPayload, Setting, Turn, TurnEnd, TurnUsage};

/// Begins a turn delivering `messages` (the first one's place in the history is the
/// turn's).
pub fn begin_turn(conn: &Tx<'_>, session: &SessionId, messages: &[MessageId]) -> Result<Turn> {
    let Some(first) = messages.first() else {
        return Err(Error::EmptyTurn { session: *session });
    };
    let seq: i64 = conn
        .query_row(
            "SELECT seq FROM messages WHERE id = ?1 AND session_id = ?2",
            args![first.to_string(), session.to_string()],
            |r| r.get(0),
        )
        .map_err(sql("read a turn's first message"))?
        .ok_or(Error::MessageNotFound(*first))?;
    let id = TurnId::new();
    let at = now();
    let ids = serde_json::to_string(messages).expect("message ids always serialize");
    conn.execute(
        "INSERT INTO turns (id, session_id, seq, messages, state, started_at)
         VALUES (?1, ?2, ?3, ?4, 'running', ?5)",
        args![id.to_string(), session.to_string(), seq, ids, at],
    )
    .map_err(sql("begin a turn"))?;
    let payload = EventPayload::TurnStarted {
        id,
        seq,
        messages: messages.to_vec(),
    };
    append_event(conn, session, &payload, &at)?;
    Ok(Turn {
        id,
        session_id: *session,
        seq,
        messages: messages.to_vec(),
        end: None,
        started_at: at,
        ended_at: None,
        usage: None,
    })
}

/// Ends a running turn of `session`, with the tokens the agent reported for it.
pub fn end_turn(
    conn: &Tx<'_>,
    session: &SessionId,
    turn: &TurnId,
    end: &TurnEnd,
    usage: Option<&TurnUsage>,
) -> Result<()> {
    let at = now();
    let (state, stop_reason, failure) = match end {
        TurnEnd::Stopped { stop_reason } => ("ended", Some(stop_reason.as_str()), None),
        TurnEnd::Failed { reason } => ("failed", None, Some(reason.as_str())),
    };
    let k = token_columns(usage)?;
    let changed = conn
        .execute(
            "UPDATE turns SET state = ?3, stop_reason = ?4, failure = ?5, ended_at = ?6,
                    input_tokens = ?7, output_tokens = ?8, thought_tokens = ?9,
                    cached_read_tokens = ?10, cached_write_tokens = ?11, total_tokens = ?12
             WHERE id = ?1 AND session_id = ?2 AND state = 'running'",
            args![
                turn.to_string(),
                session.to_string(),
                state,
                stop_reason,
                failure,
                at,
                k[0],
                k[1],
                k[2],
                k[3],
                k[4],
                k[5]
            ],
        )
        .map_err(sql("end a turn"))?;
    if changed == 0 {
        return Err(Error::TurnNotRunning {
            turn: *turn,
            session: *session,
        });
    }
    let payload = EventPayload::TurnEnded {
        id: *turn,
        end: end.clone(),
        usage: usage.copied(),
    };
    append_event(conn, session, &payload, &at)?;
    // The turn's last agent message is done streaming: fold its parts into its row.
    super::items::settle(conn, session)?;
    Ok(())
}

/// A turn's tokens by kind as the `turns` columns take them (SQL integers).
pub(crate) fn token_columns(usage: Option<&TurnUsage>) -> Result<[Option<i64>; 6]> {
    let mut out = [None; 6];
    if let Some(usage) = usage {
        for (column, kind) in out.iter_mut().zip(usage.kinds()) {
            *column = kind
                .map(i64::try_from)
                .transpose()
                .map_err(|_| Error::OutOfRange {
                    what: "a turn's token count",
                })?;
        }
    }
    Ok(out)
}

pub(super) fn turn_from_row(row: &Row<'_>) -> Result<Turn, DbError> {
    let messages: String = row.get(3)?;
    let state: String = row.get(4)?;
    let stop_reason: Option<String> = row.get(5)?;
    let failure: Option<String> = row.get(6)?;
    let end = match (state.as_str(), stop_reason, failure) {
        ("running", None, None) => None,
        ("ended", Some(stop_reason), None) => Some(TurnEnd::Stopped { stop_reason }),
        ("failed", None, Some(reason)) => Some(TurnEnd::Failed { reason }),
        _ => return Err(DbError::column(4, format!("a turn in state {state:?}"))),
    };
    Ok(Turn {
        id: row.parsed(0)?,
        session_id: row.parsed(1)?,
        seq: row.get(2)?,
        messages: serde_json::from_str(&messages).map_err(|e| DbError::column(3, e))?,
        end,
        started_at: row.get(7)?,
        ended_at: row.get(8)?,
        usage: usage_from_row(row, 9)?,
    })
}

/// The six token columns from `at` on: `None` when all are NULL.
fn usage_from_row(row: &Row<'_>, at: usize) -> Result<Option<TurnUsage>, DbError> {
    let mut kinds = [None; 6];
    for (i, kind) in kinds.iter_mut().enumerate() {
        *kind = row.get(at + i)?;
    }
    let usage = TurnUsage::from_kinds(kinds);
    Ok((usage != TurnUsage::default()).then_some(usage))
}

/// The columns `turn_from_row` reads, in its order.
pub(super) const TURN_COLUMNS: &str = "id, session_id, seq, messages, state, stop_reason, \
    failure, started_at, ended_at, input_tokens, output_tokens, thought_tokens, \
    cached_read_tokens, cached_write_tokens, total_tokens";

/// A session's turns, in history order (two turns from one message by when they began).
pub fn turns(conn: &Tx<'_>, session: &SessionId) -> Result<Vec<Turn>> {
    conn.query_map(
        &format!(
            "SELECT {TURN_COLUMNS} FROM turns WHERE session_id = ?1 ORDER BY seq, started_at, id"
        ),
        args![session.to_string()],
        turn_from_row,
    )
    .map_err(sql("read turns"))
}

/// Records a setting the agent took, replacing the earlier one of its kind.
pub fn record_setting(conn: &Tx<'_>, session: &SessionId, setting: &Setting) -> Result<()> {
    let at = now();
    let params = serde_json::to_string(&setting.params).expect("JSON values always serialize");
    conn.execute(
        "INSERT INTO settings (session_id, method, key, params, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (session_id, method, key) DO UPDATE
         SET params = excluded.params, updated_at = excluded.updated_at",
        args![session.to_string(), setting.method, setting.key, params, at],
    )
    .map_err(sql("record a setting"))?;
    let payload = EventPayload::SettingRecorded {
        setting: setting.clone(),
    };
    append_event(conn, session, &payload, &at)?;
    Ok(())
}

/// A session's settings, by method and key.
pub fn settings(conn: &Tx<'_>, session: &SessionId) -> Result<Vec<Setting>> {
    conn.query_map(
        "SELECT method, key, params FROM settings WHERE session_id = ?1
         ORDER BY method, key",
        args![session.to_string()],
        |row| {
            let params: String = row.get(2)?;
            Ok(Setting {
                method: row.get(0)?,
                key: row.get(1)?,
                params: serde_json::from_str(&params).map_err(|e| DbError::column(2, e))?,
            })
        },
    )
    .map_err(sql("read settings"))
}
