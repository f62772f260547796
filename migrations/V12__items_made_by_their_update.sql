-- An item that one recorded update made, and that nothing has changed since, names
-- that update instead of holding a copy of it (see BENCHMARKS.md, V12: the items'
-- bodies and times were about two fifths of a long session's file, and each was
-- already in the log).
--
-- Such a row has no `body`, `created_at` or `updated_at`. `made_by_event` is the
-- `session_seq` of the session's `turn_recorded` event that holds the update, and the
-- update's JSON text is the `made_by_length` bytes of the event's payload from byte
-- `made_by_start` (from 0): found without parsing the payload, which holds the whole
-- batch. The item's body is what that update makes of a new item
-- (`crate::turns::apply` of the update alone), and both of its times are the event's
-- `created_at`. The store writes such a row for an item a batch created from one
-- update and did not touch again; the first write that changes the item (a tool
-- call's update, the sealing of a streamed message) gives it a body and its times and
-- clears the three. A message continued by streamed parts keeps naming its first
-- update: the parts fold onto it as onto a body. Rows written before this version
-- keep their bodies.
--
-- SQLite cannot change a column's NOT NULL, so the table is made anew with the same
-- rows under the same row ids (the search index names an item by its row id, V11),
-- and its index and trigger are made again. `item_parts` refers to `items` by name,
-- so its rows refer to the new table once it has the old one's name (the store runs
-- migrations with foreign keys off and checks them all before they commit).
-- `search_text` and the delete trigger read the text of a row with no body from the
-- update it names, as the store indexed it (an item's delete runs before its events
-- go), its bytes cut from the event's payload. The index itself is unchanged. Nothing
-- here is a path.

DROP TRIGGER search_item_delete;
DROP VIEW search_text;

CREATE TABLE items_v12 (
    id              TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    session_id      TEXT NOT NULL REFERENCES sessions (id),
    seq             INTEGER NOT NULL CHECK (seq >= 1),
    kind            TEXT NOT NULL CHECK (kind IN (
                        'agent_message', 'agent_thought', 'tool_call', 'plan',
                        'available_commands_update', 'current_mode_update',
                        'session_info_update', 'config_option_update', 'opaque')),
    tool_call_id    TEXT CHECK ((kind = 'tool_call') = (tool_call_id IS NOT NULL)),
    body            TEXT CHECK (json_valid(body)),
    created_at      TEXT,
    updated_at      TEXT,
    streaming_from  INTEGER,
    made_by_event   INTEGER CHECK (made_by_event >= 1),
    made_by_start   INTEGER CHECK (made_by_start >= 0),
    made_by_length  INTEGER CHECK (made_by_length >= 1),
    CHECK ((body IS NULL) = (made_by_event IS NOT NULL)),
    CHECK ((made_by_event IS NULL) = (made_by_start IS NULL)),
    CHECK ((made_by_event IS NULL) = (made_by_length IS NULL)),
    CHECK ((body IS NULL) = (created_at IS NULL)),
    CHECK ((body IS NULL) = (updated_at IS NULL)),
    UNIQUE (session_id, seq)
) STRICT;

INSERT INTO items_v12
    (rowid, id, session_id, seq, kind, tool_call_id, body, created_at, updated_at,
     streaming_from)
    SELECT rowid, id, session_id, seq, kind, tool_call_id, body, created_at, updated_at,
           streaming_from
    FROM items ORDER BY rowid;

DROP TABLE items;
ALTER TABLE items_v12 RENAME TO items;

CREATE UNIQUE INDEX items_tool_calls ON items (session_id, tool_call_id)
    WHERE tool_call_id IS NOT NULL;

-- As V11's, with an item of no body given the text of the one content block of the
-- update that made it.
CREATE VIEW search_text (id, body) AS
    SELECT id, coalesce(text,
        (WITH RECURSIVE block (n, blocks, text) AS (
             SELECT 0, blocks, NULL
             UNION ALL
             SELECT n + 1, blocks,
                    CASE WHEN json_extract(blocks, '$[' || n || '].type') = 'text'
                    THEN json_extract(blocks, '$[' || n || '].text') END
             FROM block WHERE n < json_array_length(blocks))
         SELECT group_concat(text, char(10)) FROM block))
    FROM (
        SELECT i.rowid AS id,
               CASE WHEN json_type(i.body, '$.content') = 'array'
               THEN json_extract(i.body, '$.content') END AS blocks,
               CASE WHEN i.body IS NULL THEN
                   (SELECT CASE WHEN block ->> '$.type' = 'text' THEN block ->> '$.text' END
                    FROM (SELECT CAST(substr(CAST(ev.payload AS BLOB), i.made_by_start + 1,
                                             i.made_by_length) AS TEXT) -> '$.content' AS block
                          FROM events ev
                          WHERE ev.session_id = i.session_id
                            AND ev.session_seq = i.made_by_event))
               END AS text
        FROM items i WHERE i.kind IN ('agent_message', 'agent_thought')
        UNION ALL
        SELECT e.id,
               CASE WHEN e.source NOT IN ('title', 'message') THEN
                   (SELECT p.content FROM item_parts p
                    WHERE p.session_id = e.session_id
                      AND p.item_id = substr(e.entry_id, 1, 36)
                      AND p.part = CAST(substr(e.entry_id, 38) AS INTEGER)) END,
               CASE e.source
                   WHEN 'title' THEN (SELECT s.title FROM sessions s WHERE s.id = e.entry_id)
                   WHEN 'message' THEN
                       (SELECT concat_ws(char(10), m.display_text, m.model_text, m.transcript)
                        FROM messages m WHERE m.id = e.entry_id)
               END
        FROM search_entries e);

-- An item's terms come out under its row id, given the text its row held, or, for a
-- row with no body, the text of the update it names.
CREATE TRIGGER search_item_delete AFTER DELETE ON items
WHEN old.kind IN ('agent_message', 'agent_thought')
BEGIN
    INSERT INTO search (search, rowid, body)
        VALUES ('delete', old.rowid, CASE WHEN old.body IS NULL THEN
                    (SELECT CASE WHEN block ->> '$.type' = 'text' THEN block ->> '$.text' END
                     FROM (SELECT CAST(substr(CAST(ev.payload AS BLOB), old.made_by_start + 1,
                                              old.made_by_length) AS TEXT) -> '$.content'
                                  AS block
                           FROM events ev
                           WHERE ev.session_id = old.session_id
                             AND ev.session_seq = old.made_by_event))
                ELSE (SELECT group_concat(json_extract(value, '$.text'), char(10))
                      FROM json_each(old.body, '$.content')
                      WHERE json_extract(value, '$.type') = 'text') END);
END;
