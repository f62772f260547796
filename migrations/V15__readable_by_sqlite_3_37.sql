-- The schema asks nothing of SQLite newer than 3.37.2 (Ubuntu 22.04's), so that the
-- database can be read, and its messages deleted, with the SQLite of common tools:
-- Python's `sqlite3` module, Debian's and Ubuntu's `sqlite3` (3.40, 3.37). V4 to V13
-- wrote `concat_ws` (SQLite 3.44) and the `->` and `->>` operators (3.38) into the
-- search view and two of its delete triggers, which such an SQLite cannot even parse:
-- reading `search_text`, or deleting a message or an item, failed there.
--
-- The three are made again with what older versions have, and give exactly what they
-- gave (the text a delete hands FTS5 must be byte for byte the text it indexed):
-- `concat_ws(char(10), a, b, c)`, which skips NULLs and makes '' of three, is spelled
-- out with `||` and a CASE on which comes first (not `substr`, which stops at a NUL
-- character); and `x -> '$.content'` read with `->> '$.type'` is
-- `json_extract(x, '$.content.type')`, NULL or an error for the same inputs.
-- `db::schema`'s tests scan the stored schema for anything newer, and compare the old
-- and new expressions on NULLs, empty strings and newlines. Nothing here is a path.

DROP TRIGGER search_item_delete;
DROP TRIGGER search_message_delete;
DROP VIEW search_text;

-- As V13's.
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
                   (SELECT CASE WHEN json_extract(u.update_json, '$.content.type') = 'text'
                           THEN json_extract(u.update_json, '$.content.text') END
                    FROM (SELECT CAST(substr(CAST(ev.payload AS BLOB), i.made_by_start + 1,
                                             i.made_by_length) AS TEXT) AS update_json
                          FROM events ev WHERE ev.seq = i.made_by_event) u)
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
                       (SELECT CASE
                               WHEN m.display_text IS NOT NULL THEN m.display_text
                                    || coalesce(char(10) || m.model_text, '')
                                    || coalesce(char(10) || m.transcript, '')
                               WHEN m.model_text IS NOT NULL THEN m.model_text
                                    || coalesce(char(10) || m.transcript, '')
                               ELSE coalesce(m.transcript, '') END
                        FROM messages m WHERE m.id = e.entry_id)
               END
        FROM search_entries e);

-- As V10's.
CREATE TRIGGER search_message_delete AFTER DELETE ON messages
BEGIN
    INSERT INTO search (search, rowid, body)
        SELECT 'delete', id, CASE
                   WHEN old.display_text IS NOT NULL THEN old.display_text
                        || coalesce(char(10) || old.model_text, '')
                        || coalesce(char(10) || old.transcript, '')
                   WHEN old.model_text IS NOT NULL THEN old.model_text
                        || coalesce(char(10) || old.transcript, '')
                   ELSE coalesce(old.transcript, '') END
        FROM search_entries WHERE entry_id = old.id AND source = 'message';
    DELETE FROM search_entries WHERE entry_id = old.id AND source = 'message';
END;

-- As V13's.
CREATE TRIGGER search_item_delete AFTER DELETE ON items
WHEN old.kind IN ('agent_message', 'agent_thought')
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
END;
