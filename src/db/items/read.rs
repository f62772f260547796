//! Reads of recorded turn items: a row with no body (V12) read through the update it
//! names (`Made`), a page of items with their parts folded in, the texts of agent
//! messages. Never writes.

use crate::error::Result;
use crate::ids::{ItemId, SessionId};
use crate::model::{Item, ItemBody};
use crate::turns::{self, Update};

use crate::db::error::sql;
use crate::db::sql::{DbError, Row, Tx, args};

/// An item row's ten columns, of `items i`. A row with no body (V12) has no times
/// either: both are its event's, read with its update ([`UnreadItem::find_maker`]), not
/// by a join, which would walk the event's payload for every row.
pub(super) const ITEM_COLUMNS: &str = "i.id, i.session_id, i.seq, i.kind, i.body, i.created_at,
     i.updated_at, i.made_by_event, i.made_by_start, i.made_by_length";

/// An item row as [`ITEM_COLUMNS`] give it, its body not yet read.
pub(super) fn row_of(row: &Row<'_>) -> Result<UnreadItem, DbError> {
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

/// The one item a query of [`ITEM_COLUMNS`] finds, if any, read whole.
pub(super) fn one_item(
    conn: &Tx<'_>,
    query: &str,
    args: &[crate::db::sql::Value<'_>],
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

/// The agent messages and thoughts of `session` after seq `after`, at most `limit`:
/// each seq with the JSON text of its body or of the update that made it (both carry
/// the ACP `messageId` at their top level).
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

/// A session's items in history order, each with its appended parts folded in.
pub fn items(conn: &Tx<'_>, session: &SessionId) -> Result<Vec<Item>> {
    items_in(conn, session, 1..i64::MAX, &mut Made::default())
}

/// What an item row holds for its body.
#[derive(Debug)]
enum Body {
    /// The body's JSON text.
    Text(String),
    /// No body (V12): the item is what the update at bytes `start..start + length` of
    /// the payload of event `event` (its `seq`) makes, not yet read.
    MadeBy { event: i64, start: i64, length: i64 },
    /// That update's JSON text, read from its event.
    Update(String),
}

/// An item row, its body kept as JSON text until it is read.
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
    /// Reads the update a row with no body names, and its event's time, which is both
    /// of the item's times.
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

    /// The row read as the item it holds.
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

/// The payload and time of one `turn_recorded` event, kept while the next item rows
/// name the same event: a page reads each event once and cuts each update out of it
/// by the bytes its row names, without parsing the rest.
#[derive(Debug, Default)]
pub(crate) struct Made {
    event: Option<(SessionId, i64)>,
    created_at: String,
    payload: String,
}

impl Made {
    /// The JSON text at bytes `start..start + length` of the payload of `session`'s
    /// event `event`.
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

/// [`items`] whose seq is in `seqs`: one page of a long history. A caller reading page
/// after page keeps `made`, so an event whose updates span pages is read once.
pub fn items_in(
    conn: &Tx<'_>,
    session: &SessionId,
    seqs: std::ops::Range<i64>,
    made: &mut Made,
) -> Result<Vec<Item>> {
    // The page's rows, each with its sealed parts and where its streaming parts start;
    // read whole first, since a row's update is read by a statement of its own.
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
/// coalesce.
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
