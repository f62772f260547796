//! Reads and writes of recorded turn items (agent messages and thoughts, tool calls,
//! plans, session-level updates). A recorded batch writes its items and its
//! `turn_recorded` event in the caller's transaction; the merge itself is
//! `crate::turns`, so this file only loads what it needs and stores what it returns.

use super::sql::{DbError, Engine, Row, Tx, args};

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::ids::{ItemId, SessionId};
use agent_client_protocol_schema::v1::ContentBlock;

use crate::model::{AgentText, CreatedItem, Item, ItemBody};
use crate::turns::{self, Slot, State, Update};

use super::append::{append_event_json, last_session_seq, next_seq, now};
use super::error::sql;
use super::queries::get_session;

/// What `record` stored: how many updates, and the items it created or changed, in
/// the order the batch first touched them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Recorded {
    pub recorded: usize,
    pub items: Vec<ItemId>,
}

/// An item row's ten columns, of `items i`. A row with no body (V12) has no times
/// either: both are its event's, read with the update it names
/// ([`UnreadItem::find_maker`]), not by a join, which would walk the event's payload
/// to its last column for every row.
const ITEM_COLUMNS: &str = "i.id, i.session_id, i.seq, i.kind, i.body, i.created_at,
     i.updated_at, i.made_by_event, i.made_by_start, i.made_by_length";

/// An item row as [`ITEM_COLUMNS`] give it, its body (or, for a row with no body, its
/// update and times) not yet read.
fn row_of(row: &Row<'_>) -> Result<UnreadItem, DbError> {
    let times = |index: usize| -> Result<String, DbError> {
        row.get::<Option<String>>(index)?
            .ok_or_else(|| DbError::column(index, "an item with a body has no time"))
    };
    let (body, created_at, updated_at) = match row.get::<Option<String>>(4)? {
        Some(text) => (Body::Text(text), times(5)?, times(6)?),
        // Its times are read with its update.
        None => (
            match (row.get(7)?, row.get(8)?, row.get(9)?) {
                (Some(event), Some(start), Some(length)) => Body::MadeBy {
                    event,
                    start,
                    length,
                },
                _ => return Err(DbError::column(4, "an item with no body names no update")),
            },
            String::new(),
            String::new(),
        ),
    };
    Ok(UnreadItem {
        id: row.parsed(0)?,
        session_id: row.parsed(1)?,
        seq: row.get(2)?,
        kind: row.get(3)?,
        body,
        created_at,
        updated_at,
    })
}

/// The one item a query of [`ITEM_COLUMNS`] finds, if any, read whole (the update a row
/// with no body names read through `made`).
fn one_item(
    conn: &Tx<'_>,
    query: &str,
    args: &[super::sql::Value<'_>],
    made: &mut Made,
) -> Result<Option<Item>> {
    let Some(row) = conn
        .query_row(query, args, row_of)
        .map_err(sql("read items"))?
    else {
        return Ok(None);
    };
    row.read(conn, made).map(Some)
}

/// The agent messages and thoughts of `session` after seq `after`, at most `limit`, in
/// history order: each seq with the JSON text of its body, or of the update that made
/// it (V12, read through `made`). Both carry the ACP `messageId` at their top level.
pub(crate) fn message_texts(
    conn: &Tx<'_>,
    session: &SessionId,
    after: i64,
    limit: i64,
    made: &mut Made,
) -> Result<Vec<(i64, String)>> {
    let rows = conn
        .query_map(
            &format!(
                "SELECT {ITEM_COLUMNS} FROM items i WHERE i.session_id = ?1 AND i.seq > ?2
                 AND i.kind IN ('agent_message', 'agent_thought') ORDER BY i.seq LIMIT ?3"
            ),
            args![session.to_string(), after, limit],
            row_of,
        )
        .map_err(sql("read items"))?;
    let mut texts = Vec::with_capacity(rows.len());
    for mut row in rows {
        row.find_maker(conn, made)?;
        if let Body::Text(text) | Body::Update(text) = row.body {
            texts.push((row.seq, text));
        }
    }
    Ok(texts)
}

/// A session's items in history order, each with its appended parts folded in (V6:
/// an agent message that is still streaming keeps what each batch appended as a part
/// of its own until it ends).
pub fn items(conn: &Tx<'_>, session: &SessionId) -> Result<Vec<Item>> {
    items_in(conn, session, 1..i64::MAX, &mut Made::default())
}

/// What an item row holds for its body.
#[derive(Debug)]
enum Body {
    /// The body's JSON text.
    Text(String),
    /// No body (V12): the item is what the update whose text is `length` bytes from
    /// byte `start` of the payload of the session's event `event` (its `seq`, V13)
    /// makes, not yet read.
    MadeBy { event: i64, start: i64, length: i64 },
    /// That update's JSON text, read from its event.
    Update(String),
}

/// An item row, its body kept as the JSON text the row holds, or as the text of the
/// update that made it, until it is read.
#[derive(Debug)]
pub(crate) struct UnreadItem {
    pub(crate) id: ItemId,
    session_id: SessionId,
    seq: i64,
    kind: String,
    body: Body,
    created_at: String,
    updated_at: String,
}

impl UnreadItem {
    /// Reads the update a row with no body names, and the time of its event, which
    /// is both of the item's times (one read of each event for a run of rows, `made`).
    pub(crate) fn find_maker(&mut self, conn: &Tx<'_>, made: &mut Made) -> Result<()> {
        if let Body::MadeBy {
            event,
            start,
            length,
        } = self.body
        {
            let text = made
                .update(conn, &self.session_id, event, start, length)
                .map_err(sql("read items"))?;
            self.body = Body::Update(text);
            self.created_at = made.created_at.clone();
            self.updated_at = made.created_at.clone();
        }
        Ok(())
    }

    /// The row read as the item it holds (a row with no body reads its update
    /// through `made`).
    pub(crate) fn read(mut self, conn: &Tx<'_>, made: &mut Made) -> Result<Item> {
        self.find_maker(conn, made)?;
        let body = self.body().map_err(sql("read items"))?;
        Ok(self.with(body))
    }

    fn body(&self) -> Result<ItemBody, DbError> {
        let body = match &self.body {
            Body::Text(text) => {
                return ItemBody::from_json(&self.kind, text).map_err(|e| DbError::column(4, e));
            }
            Body::Update(text) => Update::from_text(text)
                .ok()
                .and_then(|update| turns::made_by(&update)),
            Body::MadeBy { .. } => None,
        };
        match body {
            Some(body) if body.kind() == self.kind => Ok(body),
            Some(body) => Err(DbError::column(
                4,
                format!(
                    "an item row of kind {} names an update that makes an item of kind {}",
                    self.kind,
                    body.kind()
                ),
            )),
            None => Err(DbError::column(
                4,
                format!(
                    "an item row of kind {} names an update that makes no item",
                    self.kind
                ),
            )),
        }
    }

    fn with(self, body: ItemBody) -> Item {
        Item {
            id: self.id,
            session_id: self.session_id,
            seq: self.seq,
            body,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// The payload and time of one `turn_recorded` event, read for the item rows that name
/// one of its updates (V12) and kept while the next rows name the same event: a page
/// of a long history reads each event once, and cuts each update out of it by the
/// bytes its row names, without parsing the rest.
#[derive(Debug, Default)]
pub(crate) struct Made {
    event: Option<(SessionId, i64)>,
    created_at: String,
    payload: String,
}

impl Made {
    /// The JSON text of the update that is `length` bytes from byte `start` of the
    /// payload of `session`'s event `event`. Bytes that are not an update's make an
    /// error when the text is read as one, or an item that is not the log's.
    fn update(
        &mut self,
        conn: &Tx<'_>,
        session: &SessionId,
        event: i64,
        start: i64,
        length: i64,
    ) -> Result<String, DbError> {
        let missing = || {
            DbError::column(
                4,
                format!(
                    "the item names bytes {start} to {} of event {event}, which has no such \
                     update",
                    start.saturating_add(length)
                ),
            )
        };
        if self.event != Some((*session, event)) {
            self.event = None;
            let (payload, created_at): (String, String) = conn
                .query_row(
                    "SELECT payload, created_at FROM events
                     WHERE seq = ?2 AND session_id = ?1 AND kind = 'turn_recorded'",
                    args![session.to_string(), event],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?
                .ok_or_else(missing)?;
            self.payload = payload;
            self.created_at = created_at;
            self.event = Some((*session, event));
        }
        let from = usize::try_from(start).map_err(|_| missing())?;
        let to = usize::try_from(length)
            .ok()
            .and_then(|length| from.checked_add(length))
            .ok_or_else(missing)?;
        self.payload
            .get(from..to)
            .map(str::to_owned)
            .ok_or_else(missing)
    }
}

/// [`items`] whose seq is in `seqs`: one page of a long history. The updates rows
/// with no body name are read through `made`, which a caller reading page after page
/// keeps, so an event whose updates span pages is read once.
pub fn items_in(
    conn: &Tx<'_>,
    session: &SessionId,
    seqs: std::ops::Range<i64>,
    made: &mut Made,
) -> Result<Vec<Item>> {
    // The page's rows, each with its sealed parts (content and time) and where its
    // streaming parts start; read whole first, since the update a row with no body
    // names is read by a statement of its own.
    type PageRow = (UnreadItem, Vec<(String, String)>, Option<i64>);
    let mut rows: Vec<PageRow> = Vec::new();
    conn.for_each(
        &format!(
            "SELECT {ITEM_COLUMNS}, p.content, p.created_at, i.streaming_from FROM items i
             LEFT JOIN item_parts p ON p.session_id = i.session_id AND p.item_id = i.id
             WHERE i.session_id = ?1 AND i.seq >= ?2 AND i.seq < ?3 ORDER BY i.seq, p.part"
        ),
        args![session.to_string(), seqs.start, seqs.end],
        |row: &Row<'_>| {
            let id: ItemId = row.parsed(0)?;
            let part: Option<String> = row.get(10)?;
            // (An item with no sealed part has one row, with no part.)
            if !matches!(rows.last(), Some((last, ..)) if last.id == id) {
                rows.push((row_of(row)?, Vec::new(), row.get(12)?));
            }
            if let (Some(part), Some((_, parts, _))) = (part, rows.last_mut()) {
                parts.push((part, row.get(11)?));
            }
            Ok(())
        },
    )
    .map_err(sql("read items"))?;
    let mut items = Vec::with_capacity(rows.len());
    for (row, parts, streaming_from) in rows {
        let mut item = row.read(conn, made)?;
        for (part, at) in parts {
            fold_part(&mut item, &part, at)
                .map_err(|e| DbError::column(10, e))
                .map_err(sql("read items"))?;
        }
        // The streaming parts follow every sealed segment (V9).
        if let Some(from) = streaming_from {
            let id = item.id.to_string();
            conn.for_each(
                "SELECT content, created_at FROM streaming_parts
                 WHERE id >= ?1 AND item_id = ?2 ORDER BY id",
                args![from, id],
                |row: &Row<'_>| {
                    let part: String = row.get(0)?;
                    fold_part(&mut item, &part, row.get(1)?).map_err(|e| DbError::column(0, e))
                },
            )
            .map_err(sql("read an item's streaming parts"))?;
        }
        items.push(item);
    }
    Ok(items)
}

/// Folds one appended part (a JSON array of content blocks) onto `item` the way chunks
/// coalesce, so the item reads as the whole message a single row would hold.
fn fold_part(item: &mut Item, part: &str, at: String) -> Result<(), String> {
    let blocks = crate::model::content_blocks(part)
        .map_err(|e| format!("an item part is not content: {e}"))?;
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

/// The text a sealed segment holds at least before it is cut: large enough that a
/// long answer is a few rows a megabyte, small enough that sealing and indexing hold
/// little. A segment ends at a part that ends between words, or, past four times this
/// with no such part, at any part.
const SEGMENT_BYTES: usize = 64 * 1024;
/// How many streamed parts sealing reads at a time.
const SEAL_PAGE: i64 = 16;

/// Whether sealing writes what is left of a message as a last, shorter segment (its
/// end: a later entry follows it, or its turn ended) or leaves that streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seal {
    Whole,
    WhatIsComplete,
}

/// Seals the streamed parts of `session`'s last item, if it has any (see
/// [`seal_item`]): called when a later entry follows a streamed message or its turn
/// ends. Only that item can have them: a batch appends parts only to the message that
/// ends the history, and whatever follows it calls this first. So one probe of the
/// session's last item (its `streaming_from`) tells whether there is anything to
/// seal, however long the history.
pub(crate) fn settle(conn: &Tx<'_>, session: &SessionId) -> Result<()> {
    let last: Option<(String, Option<i64>)> = conn
        .query_row(
            "SELECT id, streaming_from FROM items WHERE session_id = ?1
             ORDER BY seq DESC LIMIT 1",
            args![session.to_string()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(sql("read a session's last item"))?;
    let Some((id, Some(_))) = last else {
        return Ok(());
    };
    let id: ItemId = id.parse().map_err(|_| Error::OutOfRange {
        what: "an item's id",
    })?;
    seal_item(conn, session, &id, Seal::Whole)
}

/// Rewrites a streamed message's row content and its streamed parts, in order, as
/// sealed segments of about [`SEGMENT_BYTES`] each (each indexed for search once
/// the writer is idle),
/// reading a page of parts at a time, so no step holds the whole message. Each
/// segment ends where a part ends between words, so no word is split between two
/// search entries, and is numbered by the last part it covers (deleted first), so
/// segments and the parts still streaming sort as they came. `Seal::WhatIsComplete`
/// leaves the parts after the last complete segment streaming; reading folds the
/// pieces back into the same blocks either way.
fn seal_item(conn: &Tx<'_>, session: &SessionId, id: &ItemId, seal: Seal) -> Result<()> {
    let head = conn
        .query_row(
            &format!(
                "SELECT {ITEM_COLUMNS}, i.streaming_from FROM items i
                 WHERE i.id = ?1 AND i.session_id = ?2"
            ),
            args![id.to_string(), session.to_string()],
            |row| Ok((row_of(row)?, row.get::<Option<i64>>(10)?)),
        )
        .map_err(sql("read a streamed item"))?;
    let Some((head, Some(from))) = head else {
        return Ok(()); // no such item, or nothing of it streaming
    };
    let Item {
        body, created_at, ..
    } = head.read(conn, &mut Made::default())?;
    let (ItemBody::AgentMessage(mut text) | ItemBody::AgentThought(mut text)) = body.clone() else {
        return Ok(());
    };
    let kind = body.kind();
    let mut segment = Segment {
        size: serde_json::to_string(&text.content).map_or(0, |json| json.len()),
        blocks: std::mem::take(&mut text.content),
        parts: Vec::new(),
    };
    let mut sealed_at = None;
    // The last streaming part read: its number and time.
    let mut last: Option<(i64, String)> = None;
    // The item's parts are the rows from `from` on that name it, in id order.
    let mut after = from - 1;
    loop {
        let page: Vec<(i64, i64, Vec<ContentBlock>, String, usize)> = conn
            .query_map(
                "SELECT id, part, content, created_at FROM streaming_parts
                 WHERE id > ?1 AND item_id = ?2 ORDER BY id LIMIT ?3",
                args![after, id.to_string(), SEAL_PAGE],
                |r| {
                    let content: String = r.get(2)?;
                    let blocks = crate::model::content_blocks(&content)
                        .map_err(|e| DbError::column(2, format!("not content blocks: {e}")))?;
                    Ok((r.get(0)?, r.get(1)?, blocks, r.get(3)?, content.len()))
                },
            )
            .map_err(sql("read an item's streamed parts"))?;
        let Some((page_end, ..)) = page.last() else {
            break;
        };
        after = *page_end;
        for (row, part, blocks, at, size) in page {
            // The segment so far ends before this part: there if it is large enough
            // and the cut falls between words.
            if let Some((previous, previous_at)) = &last
                && !segment.parts.is_empty()
                && segment.complete_before(&blocks)
            {
                segment.write(conn, session, id, kind, *previous, previous_at)?;
                sealed_at = Some(previous_at.clone());
            }
            segment.size += size;
            segment.parts.push((row, size));
            for block in blocks {
                turns::push_content(&mut segment.blocks, block);
            }
            last = Some((part, at));
        }
    }
    if seal == Seal::Whole
        && let Some((part, at)) = &last
        && !segment.parts.is_empty()
    {
        segment.write(conn, session, id, kind, *part, at)?;
        sealed_at = Some(at.clone());
    }
    let Some(at) = sealed_at else {
        return Ok(()); // nothing sealed: the row keeps its content
    };
    // What still streams now waits since the segment just sealed, and starts at the
    // first part not sealed.
    let mut waiting = 0;
    for (row, size) in &segment.parts {
        waiting += size;
        conn.execute(
            "UPDATE streaming_parts SET streamed = ?2 WHERE id = ?1",
            args![*row, i64::try_from(waiting).unwrap_or(i64::MAX)],
        )
        .map_err(sql("count what still streams"))?;
    }
    let streaming_from = segment.parts.first().map(|(row, _)| *row);
    // The row's content went into the first segment; the row keeps the message id and
    // the time of the latest part sealed, and a row that named the update that made
    // it (V12) now holds its body and times.
    let body = match body {
        ItemBody::AgentThought(_) => ItemBody::AgentThought(text),
        _ => ItemBody::AgentMessage(text),
    };
    let json = body.to_json();
    super::search::reindex_item(conn, id, body.kind(), &json)?;
    conn.execute(
        "UPDATE items SET body = ?2, updated_at = ?3, streaming_from = ?4, created_at = ?5,
                          made_by_event = NULL, made_by_start = NULL, made_by_length = NULL
         WHERE id = ?1",
        args![id.to_string(), json, at, streaming_from, created_at],
    )
    .map_err(sql("seal a streamed item"))?;
    Ok(())
}

/// The blocks of a segment being made, the bytes of the JSON they came as (the
/// measure `streamed_bytes` takes too), and the streamed parts they came from (none
/// while they are only the row's content).
struct Segment {
    blocks: Vec<ContentBlock>,
    size: usize,
    /// The streamed parts it holds (their `streaming_parts` ids, in order), with the
    /// bytes of each.
    parts: Vec<(i64, usize)>,
}

impl Segment {
    /// Whether the segment is complete before `next` (the blocks of the part after
    /// it): large enough, with the cut between words (its text ends in whitespace,
    /// or the next begins with some, or either side is not text), or far too large to
    /// wait for that.
    fn complete_before(&self, next: &[ContentBlock]) -> bool {
        let ends = match self.blocks.last() {
            Some(ContentBlock::Text(text)) => text.text.ends_with(char::is_whitespace),
            _ => true,
        };
        let begins = match next.first() {
            Some(ContentBlock::Text(text)) => text.text.starts_with(char::is_whitespace),
            _ => true,
        };
        self.size >= SEGMENT_BYTES && (ends || begins || self.size >= 4 * SEGMENT_BYTES)
    }

    /// Writes the segment as sealed part `number` of item `id` (of `kind`) in place of
    /// the streamed parts it covers, left to be indexed for search when the writer is
    /// idle (V14), and starts the next one empty.
    fn write(
        &mut self,
        conn: &Tx<'_>,
        session: &SessionId,
        id: &ItemId,
        kind: &str,
        number: i64,
        at: &str,
    ) -> Result<()> {
        if let (Some((first, _)), Some((through, _))) = (self.parts.first(), self.parts.last()) {
            conn.execute(
                "DELETE FROM streaming_parts WHERE id BETWEEN ?1 AND ?2 AND item_id = ?3",
                args![*first, *through, id.to_string()],
            )
            .map_err(sql("delete streamed parts"))?;
        }
        let content = serde_json::to_string(&self.blocks).expect("content blocks always serialize");
        conn.execute(
            "INSERT INTO item_parts (session_id, item_id, part, content, created_at, sealed)
             VALUES (?1, ?2, ?3, ?4, ?5, 1)",
            args![session.to_string(), id.to_string(), number, content, at],
        )
        .map_err(sql("write a sealed segment"))?;
        super::search::defer_segment(conn, session, id, number, kind)?;
        *self = Segment {
            blocks: Vec::new(),
            size: 0,
            parts: Vec::new(),
        };
        Ok(())
    }
}

/// What of the session's history `batch` may change: the last entry when it is an
/// agent message or thought, and the tool calls the batch names. The last entry is
/// read unless the writer's memo knows it (`known`).
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
/// decide whether a chunk continues it, so a batch starts from this copy of the tail
/// and what the outcome holds for it is then only what the batch appends, stored as
/// one part (`record_batch`).
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
/// write of a session appends one, so another process's write, or a write of this one
/// that went another way, shows as a later event and the memo is dropped).
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

/// How many sessions the memo holds at most (a few hundred bytes each); past that it
/// starts again empty.
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
        // Another process may have written to the session since: any event of the
        // session after the one remembered. The read walks only the events appended
        // since then, by row id (the log's index by session lags, V13).
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

/// [`record`] through the writer's memo: what it knows of the session is not read
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

/// The tool call item of `session` that `id` names, if any, the update a row with no
/// body names read through `made`.
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
    record_known(conn, session, batch, None, false).map(|(touched, _)| touched)
}

/// [`record_batch`] from what is `known` of the session (read when `None`), giving
/// what it leaves for the next batch when `remember` asks (`None` for an empty batch).
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
    // first so that a row can name the bytes of the update that made it.
    let created: Vec<CreatedItem> = (0..outcome.created)
        .map(|n| CreatedItem {
            id: ItemId::new(),
            seq: first + n as i64,
        })
        .collect();
    let (payload, spans) = turn_recorded_json(batch, &created);
    // Appended before the items, so that a row one of its updates made names it by
    // its `seq` (V12, V13).
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
                let json = body.to_json();
                let made_by = outcome
                    .made_by
                    .get(*n)
                    .copied()
                    .flatten()
                    .and_then(|update| spans.get(update))
                    .filter(|_| name_makers);
                let int = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
                // What one update made, and nothing changed: the row names it, with no
                // body and no times of its own; any other row holds both.
                let (kept, named) = match made_by {
                    Some(&(start, length)) => (None, Some((logged, int(start), int(length)))),
                    None => (Some((json.as_str(), at.as_str())), None),
                };
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
                super::search::index_item(conn, body.kind(), &json)?;
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
                        super::search::reindex_item(conn, id, body.kind(), &json)?;
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
    // last entry of the history when it is an agent message or thought, whatever
    // the batch ended with (a `tool_call_update` of an earlier call leaves the
    // message before it last). That is the last item this batch created, or, when
    // it created none, the stored tail, sealed here unless the batch continued it.
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

/// The `turn_recorded` payload of `batch` as JSON, written straight from the updates
/// rather than through a `serde_json::Value` of each: the same text
/// `serde_json::to_string(&EventPayload::TurnRecorded { .. })` gives. With it, where
/// each update's own text is in it (its first byte and length), in the batch's order.
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

/// Appends `content` to streamed item `id` as its next part, and gives that part's
/// number and how many bytes of streamed parts now wait since the last sealed segment
/// (its `streamed`), read unless `known` (the writer's memo). The first part to wait
/// (none did) becomes the item's `streaming_from`.
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

/// A streamed item's last part and the bytes waiting since its last sealed segment:
/// the last of its streaming parts (read back from the table's end to its
/// `streaming_from`), or else its last sealed segment, with nothing waiting.
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
    /// serialization gives, for every kind of update (known ones with optional fields
    /// and `_meta`, opaque ones) and with and without created items; and the bytes it
    /// gives for each update (what a row with no body names, V12) are that update's.
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
