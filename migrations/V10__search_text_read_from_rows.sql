-- The full-text index stops keeping a copy of the text it indexes, and an index no
-- query reads goes (see BENCHMARKS.md, V10: together about 14% of a long session's
-- file).
--
-- `search` becomes an FTS5 table with external content: its terms and ranks are kept
-- as before, under the same row ids, but the text a snippet is cut from is read from
-- the row the entry names, through the view `search_text`, rather than from a third
-- copy of it (the row and the event log hold the other two). The view gives each
-- entry the text V4's expressions indexed: a title; a message's display text, model
-- text and transcript; the text blocks of a recorded agent message's or thought's
-- content; the text blocks of a sealed segment (`<item id>/<part>`). It walks a
-- content array by index rather than with `json_each`: FTS5 reads its content for a
-- `rebuild` or an `integrity-check` with statements that may not use a virtual table,
-- and those two must work on this index as on any other.
--
-- FTS5 removes an entry's terms given the text it indexed, which it can no longer read
-- for itself once the row has changed or gone. So every trigger that takes text out
-- of the index now hands it the text the row held (`old.*`), and a rewritten item is
-- taken out of the index before its row changes (db/search.rs). The triggers that add
-- text are unchanged. A row edited behind the store's back (which `verify` reports as
-- differing from the log) is taken out with the text it holds then, so the terms of
-- what it held before stay in the index under its entry's id, which names nothing
-- once the row is gone (unless it was the newest entry and a later one takes the id).
--
-- `search_entries_by_session` goes: entries are found by their own id or by
-- `(entry_id, source)`, never by session, so each entry was written to an index
-- nothing read.
--
-- The index is made again from the rows, under the entries' ids. Nothing here is a
-- path.

DROP INDEX search_entries_by_session;

DROP TRIGGER search_session_title;
DROP TRIGGER search_session_delete;
DROP TRIGGER search_message_delete;
DROP TRIGGER search_item_delete;
DROP TRIGGER search_part_delete;

DROP TABLE search;

CREATE VIEW search_text (id, body) AS
    SELECT e.id, CASE
        WHEN e.source = 'title' THEN
            (SELECT s.title FROM sessions s WHERE s.id = e.entry_id)
        WHEN e.source = 'message' THEN
            (SELECT concat_ws(char(10), m.display_text, m.model_text, m.transcript)
             FROM messages m WHERE m.id = e.entry_id)
        -- An item's content blocks, or a sealed segment's: the text blocks of the
        -- array, walked by index and joined by newlines.
        ELSE
            (WITH RECURSIVE block (n, blocks, text) AS (
                 SELECT 0,
                        CASE WHEN length(e.entry_id) = 36
                        THEN (SELECT json_extract(i.body, '$.content')
                              FROM items i WHERE i.id = e.entry_id
                                AND json_type(i.body, '$.content') = 'array')
                        ELSE (SELECT p.content FROM item_parts p
                              WHERE p.item_id = substr(e.entry_id, 1, 36)
                                AND p.part = CAST(substr(e.entry_id, 38) AS INTEGER))
                        END,
                        NULL
                 UNION ALL
                 SELECT n + 1, blocks,
                        CASE WHEN json_extract(blocks, '$[' || n || '].type') = 'text'
                        THEN json_extract(blocks, '$[' || n || '].text') END
                 FROM block WHERE n < json_array_length(blocks))
             SELECT group_concat(text, char(10)) FROM block)
    END
    FROM search_entries e;

CREATE VIRTUAL TABLE search USING fts5 (
    body,
    content = 'search_text',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

INSERT INTO search (search) VALUES ('rebuild');

-- Titles: a renamed session's old title is taken out, given as it was.
CREATE TRIGGER search_session_title AFTER UPDATE OF title ON sessions
BEGIN
    INSERT INTO search (search, rowid, body)
        SELECT 'delete', id, old.title FROM search_entries
        WHERE entry_id = old.id AND source = 'title' AND old.title IS NOT NULL;
    DELETE FROM search_entries WHERE entry_id = old.id AND source = 'title';
    INSERT INTO search_entries (session_id, entry_id, source)
        SELECT new.id, new.id, 'title' WHERE new.title IS NOT NULL;
    INSERT INTO search (rowid, body)
        SELECT id, new.title FROM search_entries
        WHERE entry_id = new.id AND source = 'title' AND new.title IS NOT NULL;
END;

CREATE TRIGGER search_session_delete AFTER DELETE ON sessions
BEGIN
    INSERT INTO search (search, rowid, body)
        SELECT 'delete', id, old.title FROM search_entries
        WHERE entry_id = old.id AND source = 'title' AND old.title IS NOT NULL;
    DELETE FROM search_entries WHERE entry_id = old.id AND source = 'title';
END;

CREATE TRIGGER search_message_delete AFTER DELETE ON messages
BEGIN
    INSERT INTO search (search, rowid, body)
        SELECT 'delete', id, concat_ws(char(10), old.display_text, old.model_text, old.transcript)
        FROM search_entries WHERE entry_id = old.id AND source = 'message';
    DELETE FROM search_entries WHERE entry_id = old.id AND source = 'message';
END;

CREATE TRIGGER search_item_delete AFTER DELETE ON items
BEGIN
    INSERT INTO search (search, rowid, body)
        SELECT 'delete', id, (SELECT group_concat(json_extract(value, '$.text'), char(10))
                              FROM json_each(old.body, '$.content')
                              WHERE json_extract(value, '$.type') = 'text')
        FROM search_entries WHERE entry_id = old.id;
    DELETE FROM search_entries WHERE entry_id = old.id;
END;

CREATE TRIGGER search_part_delete AFTER DELETE ON item_parts
WHEN old.sealed = 1
BEGIN
    INSERT INTO search (search, rowid, body)
        SELECT 'delete', id, (SELECT group_concat(json_extract(value, '$.text'), char(10))
                              FROM json_each(old.content)
                              WHERE json_extract(value, '$.type') = 'text')
        FROM search_entries WHERE entry_id = old.item_id || '/' || old.part;
    DELETE FROM search_entries WHERE entry_id = old.item_id || '/' || old.part;
END;
