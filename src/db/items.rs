//! Writes of recorded turn items (`items`, `item_parts`, `streaming_parts`): a batch
//! writes its items and its `turn_recorded` event in the caller's transaction. The
//! merge itself is `crate::turns`; this file loads what it needs and stores what it
//! returns. Reading is `items/read.rs`; sealing a streamed message, `items/seal.rs`.

mod read;
mod seal;

use super::sql::{Engine, Tx, args};

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::ids::{ItemId, SessionId};
use agent_client_protocol_schema::v1::ContentBlock;

use crate::model::{AgentText, CreatedItem, Item, ItemBody};
use crate::turns::{self, Slot, State, Update};

use super::append::{append_event_json, last_session_seq, next_seq, now};
use super::error::sql;
use super::queries::get_session;
use read::{ITEM_COLUMNS, one_item};
pub(crate) use read::{Made, message_texts};
pub use read::{items, items_in};
pub(crate) use seal::settle;
use seal::{SEGMENT_BYTES, Seal, seal_item};

/// What `record` stored: how many updates, and the items it created or changed, in
/// the order the batch first touched them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recorded {
    pub recorded: usize,
    pub items: Vec<ItemId>,
}

/// What of the session's history `batch` may change: the last entry when it is an
/// agent message or thought (unless the writer's memo knows it), and the tool calls
/// the batch names.
fn state_for(
    conn: &Tx<'_>,
    session: &SessionId,
    batch: &[Update],
    known: Option<&Tail>,
) -> Result<State> {
    // The items a batch made name the same event: it is read once for all of them.
    let mut made = Made::default();
    let tail = match known {
        Some(known) => known.item.clone(),
        None => {
            let last = next_seq(conn, session)? - 1;
            one_item(
                conn,
                &format!(
                    "SELECT {ITEM_COLUMNS} FROM items i WHERE i.session_id = ?1 AND i.seq = ?2
                     AND i.kind IN ('agent_message', 'agent_thought')"
                ),
                args![session.to_string(), last],
                &mut made,
            )?
            .map(|item| (item.id, empty_copy(item.body)))
        }
    };
    let mut state = State {
        tail,
        ..State::default()
    };
    for id in turns::tool_call_ids(batch) {
        if let Some(Item {
            id: item,
            body: ItemBody::ToolCall(call),
            ..
        }) = tool_call_in(conn, session, &id, &mut made)?
        {
            state.tool_calls.insert(id, (item, call));
        }
    }
    Ok(state)
}

/// An agent message or thought with none of its content: only its kind and message id
/// decide whether a chunk continues it, so the outcome then holds only what the batch
/// appends, stored as one part.
fn empty_copy(body: ItemBody) -> ItemBody {
    match body {
        ItemBody::AgentMessage(text) => ItemBody::AgentMessage(AgentText {
            message_id: text.message_id,
            content: Vec::new(),
        }),
        ItemBody::AgentThought(text) => ItemBody::AgentThought(AgentText {
            message_id: text.message_id,
            content: Vec::new(),
        }),
        other => other,
    }
}

/// What the store's writer remembers of a session it recorded for, so the next batch
/// need not read it again: good while the session's last event is still `event` (every
/// write of a session appends one, so any other write shows as a later event).
#[derive(Debug, Clone)]
pub(crate) struct Tail {
    /// The `session_seq` of the session's last event, and its `seq`.
    event: i64,
    logged: i64,
    /// The next place in the session's history.
    next_seq: i64,
    /// The streamed message a chunk may continue, as [`empty_copy`].
    item: Option<(ItemId, ItemBody)>,
    /// That message's last part and the bytes of parts waiting since its last sealed
    /// segment (`append_part`); `None`: read them.
    parts: Option<(i64, i64)>,
}

/// The writer's memo: a [`Tail`] for each session it recorded for lately.
#[derive(Debug, Default)]
pub(crate) struct Tails(HashMap<SessionId, Tail>);

/// How many sessions the memo holds at most; past that it starts again empty.
const TAILS: usize = 4096;

impl Tails {
    /// Forgets everything: a group of writes that did not commit may have left it
    /// ahead of the database.
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    /// What is remembered of `session`, when it still holds (one indexed read).
    fn take(&mut self, conn: &Tx<'_>, session: &SessionId) -> Result<Option<Tail>> {
        let Some(tail) = self.0.remove(session) else {
            return Ok(None);
        };
        // Another process may have written to the session since: any later event. The
        // read walks only the events appended since, by row id (V13).
        let later: Option<bool> = conn
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM events WHERE seq > ?1 AND session_id = ?2)",
                args![tail.logged, session.to_string()],
                |r| r.get(0),
            )
            .map_err(sql("read a session's last event"))?;
        Ok((later == Some(false)).then_some(tail))
    }

    fn put(&mut self, session: SessionId, tail: Tail) {
        if self.0.len() >= TAILS {
            self.0.clear();
        }
        self.0.insert(session, tail);
    }
}

/// [`record_batch`] through the writer's memo: what it knows of the session is not read
/// again, and what the batch leaves is remembered for the next one.
pub(crate) fn record_remembered(
    conn: &Tx<'_>,
    tails: &mut Tails,
    session: &SessionId,
    batch: &[Update],
) -> Result<Recorded> {
    let known = tails.take(conn, session)?;
    if known.is_none() {
        get_session(conn, session)?;
    }
    let (touched, tail) = record_known(conn, session, batch, known, true)?;
    if let Some(tail) = tail {
        tails.put(*session, tail);
    }
    Ok(Recorded {
        recorded: batch.len(),
        items: touched.into_iter().map(|t| t.id).collect(),
    })
}

/// The tool call item of `session` that `id` names, if any.
fn tool_call_in(
    conn: &Tx<'_>,
    session: &SessionId,
    id: &agent_client_protocol_schema::v1::ToolCallId,
    made: &mut Made,
) -> Result<Option<Item>> {
    one_item(
        conn,
        &format!(
            "SELECT {ITEM_COLUMNS} FROM items i WHERE i.session_id = ?1 AND i.tool_call_id = ?2"
        ),
        args![session.to_string(), id.to_string()],
        made,
    )
}

/// An item a batch created or changed, with what a caller recording several batches
/// in one write needs to list each item once (`crate::record`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Touched {
    pub(crate) id: ItemId,
    /// Made by this batch, rather than stored before it.
    pub(crate) created: bool,
    /// A tool call: a later batch may change it again.
    pub(crate) tool_call: bool,
}

/// Records a batch of updates for a session the caller has checked: every update is
/// checked and merged before anything is written, then the items and one
/// `turn_recorded` event (the updates as received; none for an empty batch) are written
/// in the caller's transaction. Returns the items touched, in the order the batch first
/// touched them.
pub(crate) fn record_batch(
    conn: &Tx<'_>,
    session: &SessionId,
    batch: &[Update],
) -> Result<Vec<Touched>> {
    record_known(conn, session, batch, None, false).map(|(touched, _)| touched)
}

/// [`record_batch`] from what is `known` of the session (read when `None`), giving
/// what it leaves for the next batch when `remember` asks.
fn record_known(
    conn: &Tx<'_>,
    session: &SessionId,
    batch: &[Update],
    known: Option<Tail>,
    remember: bool,
) -> Result<(Vec<Touched>, Option<Tail>)> {
    if batch.is_empty() {
        return Ok((vec![], known));
    }
    let state = state_for(conn, session, batch, known.as_ref())?;
    let stored_tail = state.tail.clone();
    let outcome = turns::apply(state, batch).map_err(|(index, refusal)| Error::UpdateRefused {
        line: index + 1,
        refusal,
    })?;
    let at = now();
    let first = match &known {
        Some(known) => known.next_seq,
        None => next_seq(conn, session)?,
    };
    // The `session_seq` of the event this batch appends.
    let event = match &known {
        Some(known) => known.event + 1,
        None => last_session_seq(conn, session)? + 1,
    };
    // PostgreSQL keeps every item's body (its V12 adds the columns only).
    let name_makers = conn.engine() == Engine::Sqlite;
    let mut parts = known.as_ref().and_then(|k| k.parts);
    // The new items' ids, in creation order, and the event that lists them, written
    // before the items so that a row can name the bytes of its update (V12, V13).
    let created: Vec<CreatedItem> = (0..outcome.created)
        .map(|n| CreatedItem {
            id: ItemId::new(),
            seq: first + n as i64,
        })
        .collect();
    let (payload, spans) = turn_recorded_json(batch, &created);
    let logged = append_event_json(conn, session, "turn_recorded", &payload, &at, Some(event))?.0;
    let mut touched = Vec::with_capacity(outcome.items.len());
    for (slot, body) in &outcome.items {
        let tool_call_id = match body {
            ItemBody::ToolCall(call) => Some(call.tool_call_id.to_string()),
            _ => None,
        };
        let tool_call = tool_call_id.is_some();
        match slot {
            Slot::New(n) => {
                let CreatedItem { id, seq } = created[*n];
                let made_by = outcome
                    .made_by
                    .get(*n)
                    .copied()
                    .flatten()
                    .and_then(|update| spans.get(update))
                    .filter(|_| name_makers);
                let int = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
                // What one update made, unchanged: the row names it, with no body and
                // no times of its own.
                let (json, named) = match made_by {
                    Some(&(start, length)) => (None, Some((logged, int(start), int(length)))),
                    None => (Some(body.to_json()), None),
                };
                let kept = json.as_deref().map(|json| (json, at.as_str()));
                conn.execute(
                    "INSERT INTO items
                       (id, session_id, seq, kind, tool_call_id, body, created_at, updated_at,
                        made_by_event, made_by_start, made_by_length)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10)",
                    args![
                        id.to_string(),
                        session.to_string(),
                        seq,
                        body.kind(),
                        tool_call_id,
                        kept.map(|(json, _)| json),
                        kept.map(|(_, at)| at),
                        named.map(|(event, ..)| event),
                        named.map(|(_, start, _)| start),
                        named.map(|(.., length)| length)
                    ],
                )
                .map_err(sql("insert an item"))?;
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
                        let (last, waiting) =
                            append_part(conn, session, id, &text.content, &at, parts)?;
                        parts = Some((last, waiting));
                        if usize::try_from(waiting).unwrap_or(usize::MAX) >= SEGMENT_BYTES {
                            seal_item(conn, session, id, Seal::WhatIsComplete)?;
                            parts = None;
                        }
                    }
                    _ => {
                        let json = body.to_json();
                        // A row that named the update that made it (V12) takes its
                        // creation time from that update's event.
                        conn.execute(
                            "UPDATE items SET body = ?2, updated_at = ?3,
                                 created_at = coalesce(created_at,
                                     (SELECT ev.created_at FROM events ev
                                      WHERE ev.seq = items.made_by_event)),
                                 made_by_event = NULL, made_by_start = NULL,
                                 made_by_length = NULL
                             WHERE id = ?1",
                            args![id.to_string(), json, at],
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
    // The session's cost and context follow its latest `usage_update` (the
    // projection takes them from this batch's event the same way).
    if turns::reports_usage(batch) {
        let mut figures = super::usage::figures(conn, session)?;
        turns::take_figures(&mut figures, batch);
        super::usage::set_figures(conn, session, &figures)?;
    }
    // A streamed message that this batch ended (something else came after it) is
    // folded into its row now, once.
    if let Some((tail, _)) = &stored_tail
        && outcome.tail != Some(Slot::Stored(*tail))
    {
        seal_item(conn, session, tail, Seal::Whole)?;
    }
    if !remember {
        return Ok((touched, None));
    }
    // What the next batch continues is what a fresh read finds (`state_for`): the
    // history's last entry when it is an agent message or thought (a
    // `tool_call_update` of an earlier call leaves the message before it last). That is
    // the last item this batch created, or else the stored tail, sealed here unless the
    // batch continued it.
    let item = match outcome.created.checked_sub(1) {
        Some(n) => {
            parts = Some((0, 0));
            outcome
                .items
                .iter()
                .find(|(slot, _)| *slot == Slot::New(n))
                .filter(|(_, body)| {
                    matches!(body, ItemBody::AgentMessage(_) | ItemBody::AgentThought(_))
                })
                .and_then(|(_, body)| created.get(n).map(|c| (c.id, empty_copy(body.clone()))))
        }
        None => {
            if outcome.tail != stored_tail.as_ref().map(|(id, _)| Slot::Stored(*id)) {
                parts = None;
            }
            stored_tail
        }
    };
    let tail = Tail {
        event,
        logged,
        next_seq: first + outcome.created as i64,
        parts: if item.is_some() { parts } else { None },
        item,
    };
    Ok((touched, Some(tail)))
}

/// The `turn_recorded` payload of `batch` as JSON, written straight from the updates:
/// the text `serde_json::to_string(&EventPayload::TurnRecorded { .. })` gives, and
/// where each update's own text is in it (first byte, length).
fn turn_recorded_json(batch: &[Update], created: &[CreatedItem]) -> (String, Vec<(usize, usize)>) {
    const ALWAYS: &str = "ACP schema values always serialize";
    let mut out: Vec<u8> = Vec::with_capacity(64 + 200 * batch.len());
    let mut spans = Vec::with_capacity(batch.len());
    out.extend_from_slice(br#"{"kind":"turn_recorded","updates":["#);
    for (i, update) in batch.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let start = out.len();
        match update {
            Update::Known(update) => serde_json::to_writer(&mut out, update),
            Update::Opaque(value) => serde_json::to_writer(&mut out, value),
        }
        .expect(ALWAYS);
        spans.push((start, out.len() - start));
    }
    out.extend_from_slice(br#"],"items":"#);
    serde_json::to_writer(&mut out, created).expect(ALWAYS);
    out.push(b'}');
    (String::from_utf8(out).expect(ALWAYS), spans)
}

/// Appends `content` to streamed item `id` as its next part; gives that part's number
/// and the bytes of parts now waiting since the last sealed segment (from `known`, the
/// writer's memo, or read). The first part to wait becomes the item's `streaming_from`.
fn append_part(
    conn: &Tx<'_>,
    session: &SessionId,
    id: &ItemId,
    content: &[ContentBlock],
    at: &str,
    known: Option<(i64, i64)>,
) -> Result<(i64, i64)> {
    let content = serde_json::to_string(content).expect("content blocks always serialize");
    let (last, waiting) = match known {
        Some(known) => known,
        None => last_part(conn, session, id)?,
    };
    let streamed = waiting + i64::try_from(content.len()).unwrap_or(i64::MAX);
    let row = conn
        .insert_id(
            "INSERT INTO streaming_parts (session_id, item_id, part, content, created_at, streamed)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            "id",
            args![
                session.to_string(),
                id.to_string(),
                last + 1,
                content,
                at,
                streamed
            ],
        )
        .map_err(sql("append to a streamed item"))?;
    if waiting == 0 {
        let row = row.ok_or(Error::OutOfRange {
            what: "an appended part's id",
        })?;
        conn.execute(
            "UPDATE items SET streaming_from = ?2 WHERE id = ?1",
            args![id.to_string(), row],
        )
        .map_err(sql("mark where a streamed item's parts start"))?;
    }
    Ok((last + 1, streamed))
}

/// A streamed item's last part and the bytes waiting since its last sealed segment: its
/// last streaming part, or else its last sealed segment, with nothing waiting.
fn last_part(conn: &Tx<'_>, session: &SessionId, id: &ItemId) -> Result<(i64, i64)> {
    let from: Option<Option<i64>> = conn
        .query_row(
            "SELECT streaming_from FROM items WHERE id = ?1",
            args![id.to_string()],
            |r| r.get(0),
        )
        .map_err(sql("read where a streamed item's parts start"))?;
    if let Some(Some(from)) = from {
        let found = conn
            .query_row(
                "SELECT part, streamed FROM streaming_parts WHERE id >= ?1 AND item_id = ?2
                 ORDER BY id DESC LIMIT 1",
                args![from, id.to_string()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map_err(sql("read a streamed item's last part"))?;
        if let Some(found) = found {
            return Ok(found);
        }
    }
    let sealed: Option<i64> = conn
        .query_row(
            "SELECT part FROM item_parts WHERE session_id = ?1 AND item_id = ?2
             ORDER BY part DESC LIMIT 1",
            args![session.to_string(), id.to_string()],
            |r| r.get(0),
        )
        .map_err(sql("read a streamed item's last segment"))?;
    Ok((sealed.unwrap_or(0), 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EventPayload;

    /// The payload written straight from the updates is the text the event's own
    /// serialization gives, for every kind of update, with and without created items,
    /// and the bytes it gives for each update are that update's.
    #[test]
    fn a_turn_recorded_payload_is_written_as_the_event_serializes() {
        let lines = [
            r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"a \"quoted\"\nline é"}}"#,
            r#"{"sessionUpdate":"agent_thought_chunk","messageId":"m1","content":{"type":"text","text":"t","annotations":{"priority":0.5}}}"#,
            r#"{"sessionUpdate":"tool_call","toolCallId":"c1","title":"Read","kind":"read","status":"pending","rawInput":{"z":1,"a":[true,null]},"_meta":{"x":{"b":2,"a":1}}}"#,
            r#"{"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"done"}}]}"#,
            r#"{"sessionUpdate":"plan","entries":[{"content":"step","priority":"high","status":"pending"}]}"#,
            r#"{"sessionUpdate":"a_kind_from_a_newer_agent","z":{"y":1},"a":[1.5,"x"]}"#,
        ];
        let batch: Vec<Update> = lines
            .iter()
            .map(|l| Update::from_value(&serde_json::from_str(l).unwrap()).unwrap())
            .collect();
        for created in [
            vec![],
            vec![
                CreatedItem {
                    id: ItemId::new(),
                    seq: 7,
                },
                CreatedItem {
                    id: ItemId::new(),
                    seq: 8,
                },
            ],
        ] {
            let event = EventPayload::TurnRecorded {
                updates: batch.iter().map(Update::to_value).collect(),
                items: created.clone(),
            };
            let (json, spans) = turn_recorded_json(&batch, &created);
            assert_eq!(json, serde_json::to_string(&event).unwrap());
            // Each update's bytes are its own text.
            assert_eq!(spans.len(), batch.len());
            for (update, (start, length)) in batch.iter().zip(spans) {
                let text: serde_json::Value =
                    serde_json::from_str(&json[start..start + length]).unwrap();
                assert_eq!(text, update.to_value(), "{update:?}");
            }
        }
    }
}
