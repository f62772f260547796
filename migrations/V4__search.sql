-- Full-text search over what people and agents wrote: session titles, messages'
-- display text, model text and transcripts, and recorded agent messages and thoughts.
-- Triggers keep the index in the same transaction as the rows they follow, so nothing
-- that writes a row can forget it. Nothing here holds a path, a URI or a stored name:
-- only text a user typed or an agent said, verbatim.
--
-- `search_entries` names what each indexed text belongs to; its `id` is the rowid of
-- the text in `search`, so a row's entry is found (and removed) through an index
-- rather than by scanning the full-text table.

CREATE TABLE search_entries (
    id          INTEGER PRIMARY KEY,
    session_id  TEXT NOT NULL,
    entry_id    TEXT NOT NULL,
    source      TEXT NOT NULL
                CHECK (source IN ('title', 'message', 'agent_message', 'agent_thought')),
    UNIQUE (entry_id, source)
) STRICT;

CREATE INDEX search_entries_by_session ON search_entries (session_id);

CREATE VIRTUAL TABLE search USING fts5 (body, tokenize = 'unicode61 remove_diacritics 2');

-- Titles.
CREATE TRIGGER search_session_insert AFTER INSERT ON sessions
WHEN new.title IS NOT NULL
BEGIN
    INSERT INTO search_entries (session_id, entry_id, source) VALUES (new.id, new.id, 'title');
    INSERT INTO search (rowid, body)
        SELECT id, new.title FROM search_entries WHERE entry_id = new.id AND source = 'title';
END;

CREATE TRIGGER search_session_title AFTER UPDATE OF title ON sessions
BEGIN
    DELETE FROM search WHERE rowid IN
        (SELECT id FROM search_entries WHERE entry_id = old.id AND source = 'title');
    DELETE FROM search_entries WHERE entry_id = old.id AND source = 'title';
    INSERT INTO search_entries (session_id, entry_id, source)
        SELECT new.id, new.id, 'title' WHERE new.title IS NOT NULL;
    INSERT INTO search (rowid, body)
        SELECT id, new.title FROM search_entries
        WHERE entry_id = new.id AND source = 'title' AND new.title IS NOT NULL;
END;

CREATE TRIGGER search_session_delete AFTER DELETE ON sessions
BEGIN
    DELETE FROM search WHERE rowid IN
        (SELECT id FROM search_entries WHERE entry_id = old.id AND source = 'title');
    DELETE FROM search_entries WHERE entry_id = old.id AND source = 'title';
END;

-- Messages: what was typed, the expansion the model got, and the transcript. Only a
-- message's state ever changes after it is written, and that is not indexed.
CREATE TRIGGER search_message_insert AFTER INSERT ON messages
BEGIN
    INSERT INTO search_entries (session_id, entry_id, source)
        VALUES (new.session_id, new.id, 'message');
    INSERT INTO search (rowid, body)
        SELECT id, concat_ws(char(10), new.display_text, new.model_text, new.transcript)
        FROM search_entries WHERE entry_id = new.id AND source = 'message';
END;

CREATE TRIGGER search_message_delete AFTER DELETE ON messages
BEGIN
    DELETE FROM search WHERE rowid IN
        (SELECT id FROM search_entries WHERE entry_id = old.id AND source = 'message');
    DELETE FROM search_entries WHERE entry_id = old.id AND source = 'message';
END;

-- Recorded agent messages and thoughts: the text blocks of the item's ACP content.
-- A continued chunk rewrites the body, so the text is replaced on every update.
CREATE TRIGGER search_item_insert AFTER INSERT ON items
WHEN new.kind IN ('agent_message', 'agent_thought')
BEGIN
    INSERT INTO search_entries (session_id, entry_id, source)
        VALUES (new.session_id, new.id, new.kind);
    INSERT INTO search (rowid, body)
        SELECT id, (SELECT group_concat(json_extract(value, '$.text'), char(10))
                    FROM json_each(new.body, '$.content')
                    WHERE json_extract(value, '$.type') = 'text')
        FROM search_entries WHERE entry_id = new.id AND source = new.kind;
END;

CREATE TRIGGER search_item_update AFTER UPDATE OF body ON items
WHEN new.kind IN ('agent_message', 'agent_thought')
BEGIN
    UPDATE search
        SET body = (SELECT group_concat(json_extract(value, '$.text'), char(10))
                    FROM json_each(new.body, '$.content')
                    WHERE json_extract(value, '$.type') = 'text')
        WHERE rowid IN
            (SELECT id FROM search_entries WHERE entry_id = new.id AND source = new.kind);
END;

CREATE TRIGGER search_item_delete AFTER DELETE ON items
BEGIN
    DELETE FROM search WHERE rowid IN
        (SELECT id FROM search_entries WHERE entry_id = old.id);
    DELETE FROM search_entries WHERE entry_id = old.id;
END;

-- What was written before this migration.
INSERT INTO search_entries (session_id, entry_id, source)
    SELECT id, id, 'title' FROM sessions WHERE title IS NOT NULL ORDER BY id;
INSERT INTO search_entries (session_id, entry_id, source)
    SELECT session_id, id, 'message' FROM messages ORDER BY session_id, seq;
INSERT INTO search_entries (session_id, entry_id, source)
    SELECT session_id, id, kind FROM items
    WHERE kind IN ('agent_message', 'agent_thought') ORDER BY session_id, seq;

INSERT INTO search (rowid, body)
    SELECT e.id, s.title FROM search_entries e JOIN sessions s ON s.id = e.entry_id
    WHERE e.source = 'title';
INSERT INTO search (rowid, body)
    SELECT e.id, concat_ws(char(10), m.display_text, m.model_text, m.transcript)
    FROM search_entries e JOIN messages m ON m.id = e.entry_id
    WHERE e.source = 'message';
INSERT INTO search (rowid, body)
    SELECT e.id, (SELECT group_concat(json_extract(value, '$.text'), char(10))
                  FROM json_each(i.body, '$.content')
                  WHERE json_extract(value, '$.type') = 'text')
    FROM search_entries e JOIN items i ON i.id = e.entry_id
    WHERE e.source IN ('agent_message', 'agent_thought');
