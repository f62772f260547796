-- The parts of a message still streaming move out of `item_parts` into a table of
-- their own with no index but its row id, so that what every session streaming at
-- once appends lands on one shared last page instead of a page of each session's in
-- `item_parts`' key (see BENCHMARKS.md, V9). `item_parts` keeps the sealed segments.
--
-- A part is found from its item: `items.streaming_from` holds the id of the item's
-- first part still streaming (NULL when none waits), set when a part follows the
-- item's row or its last sealed segment and moved on when a segment is sealed. An
-- item's parts are the rows from that id on that name it, in id order, which is the
-- order they came; only the last item of a session has any, so what lies between
-- is what the sessions streaming at the same time appended since.
--
-- No foreign keys: with no index on `item_id` or `session_id` each deleted item or
-- session would scan the table; the store deletes a session's parts itself, from its
-- items' `streaming_from` on. Nothing here is a path.

CREATE TABLE streaming_parts (
    id          INTEGER PRIMARY KEY,
    session_id  TEXT NOT NULL,
    item_id     TEXT NOT NULL,
    part        INTEGER NOT NULL CHECK (part >= 1),
    content     TEXT NOT NULL CHECK (CASE WHEN json_valid(content)
                            THEN json_type(content) = 'array' ELSE 0 END),
    created_at  TEXT NOT NULL,
    streamed    INTEGER NOT NULL CHECK (streamed >= 0)
) STRICT;

ALTER TABLE items ADD COLUMN streaming_from INTEGER;

INSERT INTO streaming_parts (session_id, item_id, part, content, created_at, streamed)
    SELECT session_id, item_id, part, content, created_at, streamed FROM item_parts
    WHERE sealed = 0 ORDER BY session_id, item_id, part;

-- One pass over the moved parts, whatever their number (a query per item would read
-- the whole table for each).
UPDATE items SET streaming_from = waiting.first
    FROM (SELECT item_id, min(id) AS first FROM streaming_parts GROUP BY item_id) AS waiting
    WHERE items.id = waiting.item_id;

DELETE FROM item_parts WHERE sealed = 0;
