//! Reads and writes of recorded turn items (agent messages and thoughts, tool calls,
//! plans, session-level updates). A recorded batch writes its items and its
//! `turn_recorded` event in the caller's transaction; the merge itself is
//! `crate::turns`, so this file only loads what it needs and stores what it returns.

use super::sql::{DbError, Row, Tx, args};

use crate::error::{Error, Result};
use crate::ids::{ItemId, SessionId};
use agent_client_protocol_schema::v1::ContentBlock;

use crate::model::{AgentText, CreatedItem, EventPayload, Item, ItemBody};
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
/// [`ITEM_COLUMNS`] of `items i`, for reads that join its parts.
const PREFIXED_COLUMNS: &str =
    "i.id, i.session_id, i.seq, i.kind, i.body, i.created_at, i.updated_at";

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

/// A session's items in history order, each with its appended parts folded in (V6:
/// an agent message that is still streaming keeps what each batch appended as a part
/// of its own until it ends).
pub fn items(conn: &Tx<'_>, session: &SessionId) -> Result<Vec<Item>> {
    let mut items: Vec<Item> = Vec::new();
    conn.for_each(
        &format!(
            "SELECT {PREFIXED_COLUMNS}, p.content, p.created_at FROM items i
             LEFT JOIN item_parts p ON p.session_id = i.session_id AND p.item_id = i.id
             WHERE i.session_id = ?1 ORDER BY i.seq, p.part"
        ),
        args![session.to_string()],
        |row: &Row<'_>| {
            let id: ItemId = row.parsed(0)?;
            let part: Option<String> = row.get(7)?;
            match items.last_mut() {
                Some(last) if last.id == id => {}
                _ => items.push(item_from_row(row)?),
            }
            if let (Some(part), Some(item)) = (part, items.last_mut()) {
                fold_part(item, &part, row.get(8)?).map_err(|e| DbError::column(7, e))?;
            }
            Ok(())
        },
    )
    .map_err(sql("read items"))?;
    Ok(items)
}

/// Folds one appended part (a JSON array of content blocks) onto `item` the way chunks
/// coalesce, so the item reads as the whole message a single row would hold.
fn fold_part(item: &mut Item, part: &str, at: String) -> Result<(), String> {
    let blocks: Vec<ContentBlock> =
        serde_json::from_str(part).map_err(|e| format!("an item part is not content: {e}"))?;
    let (ItemBody::AgentMessage(text) | ItemBody::AgentThought(text)) = &mut item.body else {
        return Err(format!(
            "item {} of kind {} has parts",
            item.id,
            item.body.kind()
        ));
    };
    for block in blocks {
        turns::push_content(&mut text.content, block);
    }
    item.updated_at = at;
    Ok(())
}

/// One item of `session`, parts folded in.
fn item_whole(conn: &Tx<'_>, session: &SessionId, id: &ItemId) -> Result<Option<Item>> {
    let mut item: Option<Item> = None;
    conn.for_each(
        &format!(
            "SELECT {PREFIXED_COLUMNS}, p.content, p.created_at FROM items i
             LEFT JOIN item_parts p ON p.session_id = i.session_id AND p.item_id = i.id
             WHERE i.session_id = ?1 AND i.id = ?2 ORDER BY p.part"
        ),
        args![session.to_string(), id.to_string()],
        |row: &Row<'_>| {
            if item.is_none() {
                item = Some(item_from_row(row)?);
            }
            let part: Option<String> = row.get(7)?;
            if let (Some(part), Some(item)) = (part, item.as_mut()) {
                fold_part(item, &part, row.get(8)?).map_err(|e| DbError::column(7, e))?;
            }
            Ok(())
        },
    )
    .map_err(sql("read an item"))?;
    Ok(item)
}

/// Folds the parts of every item of `session` that has some into the item's row, once:
/// called when a later entry follows a streamed message or its turn ends, so a message
/// is rewritten (and re-indexed for search, by V4's trigger) once rather than on every
/// batch. Costs one indexed probe when there is nothing to fold.
pub(crate) fn settle(conn: &Tx<'_>, session: &SessionId) -> Result<()> {
    let pending: Vec<String> = conn
        .query_map(
            "SELECT DISTINCT item_id FROM item_parts WHERE session_id = ?1",
            args![session.to_string()],
            |r| r.get(0),
        )
        .map_err(sql("read the items still streaming"))?;
    for id in pending {
        let id: ItemId = id.parse().map_err(|_| Error::OutOfRange {
            what: "an item part's item id",
        })?;
        settle_item(conn, session, &id)?;
    }
    Ok(())
}

fn settle_item(conn: &Tx<'_>, session: &SessionId, id: &ItemId) -> Result<()> {
    let Some(item) = item_whole(conn, session, id)? else {
        return Ok(());
    };
    conn.execute(
        "UPDATE items SET body = ?2, updated_at = ?3 WHERE id = ?1",
        args![id.to_string(), item.body.to_json(), item.updated_at],
    )
    .map_err(sql("fold an item's parts"))?;
    conn.execute(
        "DELETE FROM item_parts WHERE session_id = ?1 AND item_id = ?2",
        args![session.to_string(), id.to_string()],
    )
    .map_err(sql("delete an item's folded parts"))?;
    Ok(())
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
    // Only the tail's kind and message id decide whether a chunk continues it, so the
    // batch starts from an empty copy of it: what the outcome holds for the tail is
    // then only what this batch appends, stored as one part (`record_batch`).
    state.tail = tail.map(|item| {
        let body = match item.body {
            ItemBody::AgentMessage(text) => ItemBody::AgentMessage(AgentText {
                message_id: text.message_id,
                content: Vec::new(),
            }),
            ItemBody::AgentThought(text) => ItemBody::AgentThought(AgentText {
                message_id: text.message_id,
                content: Vec::new(),
            }),
            other => other,
        };
        (item.id, body)
    });
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
    let stored_tail = state.tail.as_ref().map(|(id, _)| *id);
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
                match body {
                    // What this batch appended to the streamed message (`state_for`).
                    ItemBody::AgentMessage(text) | ItemBody::AgentThought(text) => {
                        append_part(conn, session, id, &text.content, &at)?;
                    }
                    _ => {
                        conn.execute(
                            "UPDATE items SET body = ?2, updated_at = ?3 WHERE id = ?1",
                            args![id.to_string(), body.to_json(), at],
                        )
                        .map_err(sql("update an item"))?;
                    }
                }
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
    // A streamed message that this batch ended (something else came after it) is
    // folded into its row now, once.
    if let Some(tail) = stored_tail
        && outcome.tail != Some(Slot::Stored(tail))
    {
        settle_item(conn, session, &tail)?;
    }
    Ok(touched)
}

/// Appends `content` to streamed item `id` as its next part.
fn append_part(
    conn: &Tx<'_>,
    session: &SessionId,
    id: &ItemId,
    content: &[ContentBlock],
    at: &str,
) -> Result<()> {
    let content = serde_json::to_string(content).expect("content blocks always serialize");
    conn.execute(
        "INSERT INTO item_parts (session_id, item_id, part, content, created_at)
         VALUES (?1, ?2,
                 (SELECT coalesce(max(part), 0) + 1 FROM item_parts
                  WHERE session_id = ?1 AND item_id = ?2),
                 ?3, ?4)",
        args![session.to_string(), id.to_string(), content, at],
    )
    .map_err(sql("append to a streamed item"))?;
    Ok(())
}
