-- Two mechanisms added for benchmark ratios go, each measured without it on a quiet
-- machine (BENCHMARKS.md, the table of kept mechanisms), with no figure it met lost:
--
-- V14: a sealed segment is indexed in the write that seals it, as on PostgreSQL, and
-- `search_waiting` goes. Each segment still waiting is indexed first, as the writer
-- would have: its entry under the id below the lowest (V11), its text read through
-- `search_text` as every entry's is (V10). A row naming a segment that is gone or
-- already indexed is only dropped, as the writer dropped it.
--
-- V7: triggers write the search index again for each message, item, item update and
-- sealed segment, in place of the statements the store wrote beside each row, so
-- nothing that writes a row can forget its entry. They write what those statements
-- wrote: the same entries (a message's and a segment's below zero, the lowest less
-- one, V11; an item under its row id), the same text (a message's three texts joined
-- as V15 spells `concat_ws`; an item's text blocks, or for a row with no body the one
-- block of the update it names, V12, read as V15's delete trigger reads it; a
-- segment's text blocks), and an item's body rewritten is taken out with the text it
-- held before and indexed with its new one. Titles and deletes were triggers already.
--
-- No row of the store's data changes. Nothing here is a path.

DELETE FROM search_waiting
WHERE NOT EXISTS (SELECT 1 FROM item_parts p JOIN items i ON i.id = p.item_id
                  WHERE p.session_id = search_waiting.session_id
                    AND p.item_id = search_waiting.item_id
                    AND p.part = search_waiting.part AND p.sealed = 1
                    AND i.kind IN ('agent_message', 'agent_thought'))
   OR EXISTS (SELECT 1 FROM search_entries e
              WHERE e.entry_id = search_waiting.item_id || '/' || search_waiting.part);

INSERT INTO search_entries (id, session_id, entry_id, source)
    SELECT (SELECT min(coalesce(min(id), 0), 0) FROM search_entries)
               - row_number() OVER (ORDER BY w.session_id, w.item_id, w.part),
           w.session_id, w.item_id || '/' || w.part, i.kind
    FROM search_waiting w JOIN items i ON i.id = w.item_id;

INSERT INTO search (rowid, body)
    SELECT e.id, t.body
    FROM search_waiting w
    JOIN search_entries e ON e.entry_id = w.item_id || '/' || w.part
    JOIN search_text t ON t.id = e.id;

DROP TABLE search_waiting;

CREATE TRIGGER search_message_insert AFTER INSERT ON messages
BEGIN
    INSERT INTO search_entries (id, session_id, entry_id, source)
        SELECT (SELECT min(coalesce(min(id), 0), 0) - 1 FROM search_entries),
               new.session_id, new.id, 'message';
    INSERT INTO search (rowid, body)
        SELECT id, CASE
                   WHEN new.display_text IS NOT NULL THEN new.display_text
                        || coalesce(char(10) || new.model_text, '')
                        || coalesce(char(10) || new.transcript, '')
                   WHEN new.model_text IS NOT NULL THEN new.model_text
                        || coalesce(char(10) || new.transcript, '')
                   ELSE coalesce(new.transcript, '') END
        FROM search_entries WHERE entry_id = new.id AND source = 'message';
END;

CREATE TRIGGER search_item_insert AFTER INSERT ON items
WHEN new.kind IN ('agent_message', 'agent_thought')
BEGIN
    INSERT INTO search (rowid, body)
        VALUES (new.rowid, CASE WHEN new.body IS NULL THEN
                    (SELECT CASE WHEN json_extract(u.update_json, '$.content.type') = 'text'
                            THEN json_extract(u.update_json, '$.content.text') END
                     FROM (SELECT CAST(substr(CAST(ev.payload AS BLOB), new.made_by_start + 1,
                                              new.made_by_length) AS TEXT) AS update_json
                           FROM events ev WHERE ev.seq = new.made_by_event) u)
                ELSE (SELECT group_concat(json_extract(value, '$.text'), char(10))
                      FROM json_each(new.body, '$.content')
                      WHERE json_extract(value, '$.type') = 'text') END);
END;

CREATE TRIGGER search_item_update AFTER UPDATE OF body ON items
WHEN new.kind IN ('agent_message', 'agent_thought')
BEGIN
    INSERT INTO search (search, rowid, body)
        VALUES ('delete', old.rowid, CASE WHEN old.body IS NULL THEN
                    (SELECT CASE WHEN json_extract(u.update_json, '$.content.type') = 'text'
                            THEN json_extract(u.update_json, '$.content.text') END
                     FROM (SELECT CAST(substr(CAST(ev.payload AS BLOB), old.made_by_start + 1,
                                              old.made_by_length) AS TEXT) AS update_json
                           FROM events ev WHERE ev.seq = old.made_by_event) u)
                ELSE (SELECT group_concat(json_extract(value, '$.text'), char(10))
                      FROM json_each(old.body, '$.content')
                      WHERE json_extract(value, '$.type') = 'text') END);
    INSERT INTO search (rowid, body)
        VALUES (new.rowid, (SELECT group_concat(json_extract(value, '$.text'), char(10))
                            FROM json_each(new.body, '$.content')
                            WHERE json_extract(value, '$.type') = 'text'));
END;

-- A sealed segment of an agent message or thought, as V6's trigger made its entry,
-- with its id below zero (V11).
CREATE TRIGGER search_part_insert AFTER INSERT ON item_parts
WHEN new.sealed = 1
BEGIN
    INSERT INTO search_entries (id, session_id, entry_id, source)
        SELECT (SELECT min(coalesce(min(id), 0), 0) - 1 FROM search_entries),
               new.session_id, new.item_id || '/' || new.part, kind
        FROM items WHERE id = new.item_id AND kind IN ('agent_message', 'agent_thought');
    INSERT INTO search (rowid, body)
        SELECT id, (SELECT group_concat(json_extract(value, '$.text'), char(10))
                    FROM json_each(new.content)
                    WHERE json_extract(value, '$.type') = 'text')
        FROM search_entries WHERE entry_id = new.item_id || '/' || new.part
                              AND source IN ('agent_message', 'agent_thought');
END;
