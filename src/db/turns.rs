//! Reads and writes of recorded turn items (agent messages and thoughts, tool calls,
//! plans, session-level updates). A recorded batch writes its items and its
//! `turn_recorded` event in the caller's transaction; the merge itself is
//! `crate::turns`, so this file only loads what it needs and stores what it returns.

use super::sql::{DbError, Row, Tx, args};

use crate::error::{Error, Result};
use crate::ids::{ItemId, SessionId};
use crate::model::{CreatedItem, EventPayload, Item, ItemBody};
use crate::turns::{self, Slot, State, Update};

use super::append::{append_event, next_seq, now};
use super::error::sql;
use super::queries::get_session;

/// What `record` stored: how many updates, and the items it created or changed, in
/// the order the batch first touched them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recorded {
    pub recorded: usize,
    pub items: Vec<ItemId>,
}

const ITEM_COLUMNS: &str = "id, session_id, seq, kind, body, created_at, updated_at";

fn item_from_row(row: &Row<'_>) -> Result<Item, DbError> {
    let kind: String = row.get(3)?;
    let body: String = row.get(4)?;
    Ok(Item {
        id: row.parsed(0)?,
        session_id: row.parsed(1)?,
        seq: row.get(2)?,
        body: ItemBody::from_json(&kind, &body).map_err(|e| DbError::column(4, e))?,
        created_at: row.get(5)?,
        updated_at: row.get(6)?,
    })
}

/// A session's items in history order.
pub fn items(conn: &Tx<'_>, session: &SessionId) -> Result<Vec<Item>> {
    conn.query_map(
        &format!("SELECT {ITEM_COLUMNS} FROM items WHERE session_id = ?1 ORDER BY seq"),
        args![session.to_string()],
        item_from_row,
    )
    .map_err(sql("read items"))
}

/// What of the session's history `batch` may change: the last entry when it is an
/// agent message or thought, and the tool calls the batch names.
fn state_for(conn: &Tx<'_>, session: &SessionId, batch: &[Update]) -> Result<State> {
    let mut state = State::default();
    let last = next_seq(conn, session)? - 1;
    let tail = conn
        .query_row(
            &format!(
                "SELECT {ITEM_COLUMNS} FROM items WHERE session_id = ?1 AND seq = ?2
                 AND kind IN ('agent_message', 'agent_thought')"
            ),
            args![session.to_string(), last],
            item_from_row,
        )
        .map_err(sql("read the last item"))?;
    state.tail = tail.map(|item| (item.id, item.body));
    let by_call =
        format!("SELECT {ITEM_COLUMNS} FROM items WHERE session_id = ?1 AND tool_call_id = ?2");
    for id in turns::tool_call_ids(batch) {
        let found = conn
            .query_row(
                &by_call,
                args![session.to_string(), id.to_string()],
                item_from_row,
            )
            .map_err(sql("read a tool call"))?;
        if let Some(Item {
            id: item,
            body: ItemBody::ToolCall(call),
            ..
        }) = found
        {
            state.tool_calls.insert(id, (item, call));
        }
    }
    Ok(state)
}

/// Records a batch of updates for `session`: every update is checked and merged before
/// anything is written, then the items and one `turn_recorded` event (holding the
/// updates as received) are written through `conn`, the caller's transaction.
pub fn record(conn: &Tx<'_>, session: &SessionId, batch: &[Update]) -> Result<Recorded> {
    get_session(conn, session)?;
    let touched = record_batch(conn, session, batch)?;
    Ok(Recorded {
        recorded: batch.len(),
        items: touched.into_iter().map(|t| t.id).collect(),
    })
}

/// An item a batch created or changed, and what a caller that records several
/// batches in one write needs to list each item once (`crate::history`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Touched {
    pub(crate) id: ItemId,
    /// Made by this batch, rather than stored before it.
    pub(crate) created: bool,
    /// A tool call: a later batch may change it again.
    pub(crate) tool_call: bool,
}

/// [`record`] of one batch, for a session the caller has checked: its items and its
/// one `turn_recorded` event, nothing for an empty batch. Returns the items touched,
/// in the order the batch first touched them.
pub(crate) fn record_batch(
    conn: &Tx<'_>,
    session: &SessionId,
    batch: &[Update],
) -> Result<Vec<Touched>> {
    if batch.is_empty() {
        return Ok(vec![]);
    }
    let state = state_for(conn, session, batch)?;
    let outcome = turns::apply(state, batch).map_err(|(index, refusal)| Error::UpdateRefused {
        line: index + 1,
        refusal,
    })?;
    let at = now();
    let first = next_seq(conn, session)?;
    let mut created = Vec::with_capacity(outcome.created);
    let mut touched = Vec::with_capacity(outcome.items.len());
    for (slot, body) in &outcome.items {
        let tool_call_id = match body {
            ItemBody::ToolCall(call) => Some(call.tool_call_id.to_string()),
            _ => None,
        };
        let tool_call = tool_call_id.is_some();
        match slot {
            Slot::New(n) => {
                let id = ItemId::new();
                let seq = first + *n as i64;
                conn.execute(
                    "INSERT INTO items
                       (id, session_id, seq, kind, tool_call_id, body, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
                    args![
                        id.to_string(),
                        session.to_string(),
                        seq,
                        body.kind(),
                        tool_call_id,
                        body.to_json(),
                        at
                    ],
                )
                .map_err(sql("insert an item"))?;
                created.push(CreatedItem { id, seq });
                touched.push(Touched {
                    id,
                    created: true,
                    tool_call,
                });
            }
            Slot::Stored(id) => {
                conn.execute(
                    "UPDATE items SET body = ?2, updated_at = ?3 WHERE id = ?1",
                    args![id.to_string(), body.to_json(), at],
                )
                .map_err(sql("update an item"))?;
                touched.push(Touched {
                    id: *id,
                    created: false,
                    tool_call,
                });
            }
        }
    }
    let updates = batch.iter().map(Update::to_value).collect();
    let payload = EventPayload::TurnRecorded {
        updates,
        items: created,
    };
    append_event(conn, session, &payload, &at)?;
    Ok(touched)
}
