-- A streamed agent message or thought grows by appended parts instead of being
-- rewritten whole on every recorded batch. Rewriting made a long turn quadratic: each
-- batch read, re-encoded and wrote the whole coalesced message, and V4's search
-- trigger re-indexed all of it again.
--
-- While a message is the last entry of its session (a later chunk may still continue
-- it), each batch that continues it adds one row here holding only the content blocks
-- that batch appended, in the order they came (`sealed` = 0). A reader folds the parts
-- onto the item's row in `part` order the way chunks coalesce (adjacent text with the
-- same annotations and `_meta` joins into one block), so what it reads is the same
-- message a whole row would hold. `streamed` counts the bytes of a streamed part and
-- the streamed parts before it back to the last sealed segment, so a batch knows in
-- one lookup when enough waits to seal.
--
-- Once a later entry follows the message or its turn ends, the row's content and its
-- parts are rewritten once as sealed segments of a bounded size (text cut at a
-- whitespace, numbered by the last part each covers) and the row keeps none of the
-- content, so no step holds the whole message. Each sealed segment is indexed for
-- search as an entry of its own, `<item id>/<part>`; a message that is still streaming
-- is found by search only by what its row holds.
--
-- Nothing here is a path: only blocks an agent sent, as `items.body` holds them.

CREATE TABLE item_parts (
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    item_id     TEXT NOT NULL REFERENCES items (id),
    part        INTEGER NOT NULL CHECK (part >= 1),
    content     TEXT NOT NULL CHECK (CASE WHEN json_valid(content)
                            THEN json_type(content) = 'array' ELSE 0 END),
    created_at  TEXT NOT NULL,
    sealed      INTEGER NOT NULL DEFAULT 0 CHECK (sealed IN (0, 1)),
    streamed    INTEGER NOT NULL DEFAULT 0 CHECK (streamed >= 0),
    PRIMARY KEY (session_id, item_id, part)
) STRICT;

-- The parts still streaming, found without reading a session's sealed segments (a
-- send and a batch look for them every time).
CREATE INDEX item_parts_streaming ON item_parts (session_id, item_id, part)
    WHERE sealed = 0;

CREATE TRIGGER search_part_insert AFTER INSERT ON item_parts
WHEN new.sealed = 1
BEGIN
    INSERT INTO search_entries (session_id, entry_id, source)
        SELECT new.session_id, new.item_id || '/' || new.part, kind FROM items
        WHERE id = new.item_id AND kind IN ('agent_message', 'agent_thought');
    INSERT INTO search (rowid, body)
        SELECT id, (SELECT group_concat(json_extract(value, '$.text'), char(10))
                    FROM json_each(new.content)
                    WHERE json_extract(value, '$.type') = 'text')
        FROM search_entries WHERE entry_id = new.item_id || '/' || new.part;
END;

CREATE TRIGGER search_part_delete AFTER DELETE ON item_parts
WHEN old.sealed = 1
BEGIN
    DELETE FROM search WHERE rowid IN
        (SELECT id FROM search_entries WHERE entry_id = old.item_id || '/' || old.part);
    DELETE FROM search_entries WHERE entry_id = old.item_id || '/' || old.part;
END;
