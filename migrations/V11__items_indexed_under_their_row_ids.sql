-- A recorded agent message or thought is indexed for search under its own row id, and
-- `search_entries` keeps only what is not an item: titles, messages and sealed
-- segments (see BENCHMARKS.md, V11: the entries of a long session's items and their
-- `(entry_id, source)` key were about a fifth of its file).
--
-- An item's entry held its session, its id and its kind, which the item's row holds
-- already; the index now names the row itself. So that the two kinds of id never meet,
-- the entries that remain are renumbered below zero (`-id`), and every entry made from
-- now on takes the id below the lowest (`min(id) - 1`, never above zero): an id above
-- zero is an item's row id, one below zero an entry's. The view `search_text` gives
-- each the text V10 gave it: an item's text blocks from its own row, and a title's,
-- a message's and a sealed segment's from the row the entry names (a segment found by
-- its whole key, session included).
--
-- An item keeps its row id for as long as it lives (the store updates a row, never
-- moves it; a migration that rebuilds `items` must rebuild this index with it). The
-- triggers that make titles' entries give them their ids below zero (the lowest read
-- by a subquery of its own, so that a title cleared to NULL adds no entry); an item's delete
-- takes its terms out under its row id, given the text its row held. The index is made
-- again from the rows. Nothing here is a path.

DROP TRIGGER search_session_insert;
DROP TRIGGER search_session_title;
DROP TRIGGER search_item_delete;
DROP VIEW search_text;
DROP TABLE search;

DELETE FROM search_entries
    WHERE source IN ('agent_message', 'agent_thought') AND instr(entry_id, '/') = 0;
UPDATE search_entries SET id = -id;

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
               NULL AS text
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

CREATE VIRTUAL TABLE search USING fts5 (
    body,
    content = 'search_text',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO search (search) VALUES ('rebuild');

-- Titles, as V4 and V10 indexed them, with their entries' ids below zero.
CREATE TRIGGER search_session_insert AFTER INSERT ON sessions
WHEN new.title IS NOT NULL
BEGIN
    INSERT INTO search_entries (id, session_id, entry_id, source)
        SELECT (SELECT min(coalesce(min(id), 0), 0) - 1 FROM search_entries),
               new.id, new.id, 'title';
    INSERT INTO search (rowid, body)
        SELECT id, new.title FROM search_entries WHERE entry_id = new.id AND source = 'title';
END;

CREATE TRIGGER search_session_title AFTER UPDATE OF title ON sessions
BEGIN
    INSERT INTO search (search, rowid, body)
        SELECT 'delete', id, old.title FROM search_entries
        WHERE entry_id = old.id AND source = 'title' AND old.title IS NOT NULL;
    DELETE FROM search_entries WHERE entry_id = old.id AND source = 'title';
    INSERT INTO search_entries (id, session_id, entry_id, source)
        SELECT (SELECT min(coalesce(min(id), 0), 0) - 1 FROM search_entries),
               new.id, new.id, 'title'
        WHERE new.title IS NOT NULL;
    INSERT INTO search (rowid, body)
        SELECT id, new.title FROM search_entries
        WHERE entry_id = new.id AND source = 'title' AND new.title IS NOT NULL;
END;

-- An item's terms come out under its row id. Its sealed segments' entries go with the
-- segments (`search_part_delete`, unchanged).
CREATE TRIGGER search_item_delete AFTER DELETE ON items
WHEN old.kind IN ('agent_message', 'agent_thought')
BEGIN
    INSERT INTO search (search, rowid, body)
        VALUES ('delete', old.rowid, (SELECT group_concat(json_extract(value, '$.text'), char(10))
                                      FROM json_each(old.body, '$.content')
                                      WHERE json_extract(value, '$.type') = 'text'));
END;
