//! Sealing a streamed agent message: its streamed parts rewritten as sealed segments
//! of about `SEGMENT_BYTES` each, cut between words, a page of parts at a time. Called
//! when a later entry follows the message, its turn ends, or enough waits unsealed.

use agent_client_protocol_schema::v1::ContentBlock;

use crate::error::{Error, Result};
use crate::ids::{ItemId, SessionId};
use crate::model::{Item, ItemBody};
use crate::turns;

use super::read::{ITEM_COLUMNS, Made, row_of};
use crate::db::error::sql;
use crate::db::sql::{DbError, Tx, args};

/// The text a sealed segment holds at least before it is cut (a few rows a megabyte).
/// A segment ends at a part that ends between words, or, past four times this, at any.
pub(super) const SEGMENT_BYTES: usize = 64 * 1024;
const SEAL_PAGE: i64 = 16;

/// Whether sealing writes what is left of a message as a last, shorter segment (it
/// ended) or leaves that streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seal {
    Whole,
    WhatIsComplete,
}

/// Seals the streamed parts of `session`'s last item, if it has any: called when a
/// later entry follows a streamed message or its turn ends. Only that item can have
/// them (parts go only to the message that ends the history, and whatever follows it
/// calls this first), so one probe tells, however long the history.
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
/// sealed segments of about [`SEGMENT_BYTES`], a page of parts at a time. A segment
/// ends where a part ends between words (no word split between two search entries) and
/// is numbered by the last part it covers, so segments and parts still streaming sort
/// as they came. `Seal::WhatIsComplete` leaves the parts after the last complete
/// segment streaming; reading folds the pieces back into the same blocks either way.
pub(super) fn seal_item(conn: &Tx<'_>, session: &SessionId, id: &ItemId, seal: Seal) -> Result<()> {
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
                segment.write(conn, session, id, *previous, previous_at)?;
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
        segment.write(conn, session, id, *part, at)?;
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
    // the latest part's time, and a row with no body (V12) now holds one.
    let body = match body {
        ItemBody::AgentThought(_) => ItemBody::AgentThought(text),
        _ => ItemBody::AgentMessage(text),
    };
    let json = body.to_json();
    conn.execute(
        "UPDATE items SET body = ?2, updated_at = ?3, streaming_from = ?4, created_at = ?5,
                          made_by_event = NULL, made_by_start = NULL, made_by_length = NULL
         WHERE id = ?1",
        args![id.to_string(), json, at, streaming_from, created_at],
    )
    .map_err(sql("seal a streamed item"))?;
    Ok(())
}

/// The blocks of a segment being made, the bytes of the JSON they came as, and the
/// streamed parts they came from (their ids, in order, with the bytes of each).
struct Segment {
    blocks: Vec<ContentBlock>,
    size: usize,
    parts: Vec<(i64, usize)>,
}

impl Segment {
    /// Whether the segment is complete before `next` (the next part's blocks): large
    /// enough, with the cut between words (or either side not text), or far too large.
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

    /// Writes the segment as sealed part `number` of item `id` in place of the
    /// streamed parts it covers (indexed for search by its trigger, V18), and starts
    /// the next one empty.
    fn write(
        &mut self,
        conn: &Tx<'_>,
        session: &SessionId,
        id: &ItemId,
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
        *self = Segment {
            blocks: Vec::new(),
            size: 0,
            parts: Vec::new(),
        };
        Ok(())
    }
}
