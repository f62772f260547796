-- The log's index by session is written a batch at a time, not with every event (see
-- BENCHMARKS.md, V13: with many sessions streaming at once, the leaf of
-- `UNIQUE (session_id, session_seq)` that each session's new event went into was two
-- thirds of every commit's pages, and a commit's cost grows with its pages).
--
-- `events` keeps its rows, its row ids (`seq`, which only grows: the AUTOINCREMENT
-- counter is carried over) and its append-only triggers, and loses that constraint and
-- its reference to `sessions` (with no index on `session_id`, each deleted session
-- would scan the table; the store deletes a session's events itself, and `verify`
-- reports an event of no session). The index is now the table `event_keys`: the
-- `(session_id, session_seq)` of every event up to `event_keys_upto.upto`, and the
-- event's `seq`. The store adds the keys of the events above `upto` all at once, in
-- the write that takes the unkeyed part of the log past a bound (`db::append`), so a
-- session's key goes in with those of the other sessions' events beside it rather
-- than on a page of its own in every commit. Every event above `upto` is unkeyed;
-- every event at or below it has its key.
--
-- `session_events` is the log as its readers see it: the keyed events found through
-- their keys, then the few unkeyed ones, found by scanning what follows `upto`. A
-- session's keyed events all come before its unkeyed ones, so a query on the view in
-- `session_seq` order reads the keys in order and merges in the unkeyed part, sorted
-- by itself (SQLite flattens the view into a merge of the two).
--
-- An item that names the update that made it (V12) now names the event by its `seq`,
-- found by its row id, instead of its `session_seq`, which would need the index; the
-- search view and the delete trigger that read those events are made again to match.
-- Nothing here is a path.

DROP TRIGGER search_item_delete;
DROP VIEW search_text;

-- Before the old index goes: each row that names its update takes the event's `seq`.
UPDATE items SET made_by_event =
    (SELECT ev.seq FROM events ev
     WHERE ev.session_id = items.session_id AND ev.session_seq = items.made_by_event)
    WHERE made_by_event IS NOT NULL;

CREATE TABLE events_v13 (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id   TEXT NOT NULL,
    session_seq  INTEGER NOT NULL CHECK (session_seq >= 1),
    kind         TEXT NOT NULL,
    payload      TEXT NOT NULL CHECK (json_valid(payload)),
    created_at   TEXT NOT NULL
) STRICT;

INSERT INTO events_v13 (seq, session_id, session_seq, kind, payload, created_at)
    SELECT seq, session_id, session_seq, kind, payload, created_at FROM events ORDER BY seq;

-- The counter goes on from where the old table's stopped (past the events of deleted
-- sessions too), not from the highest `seq` that is left.
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'events_v13', 0 WHERE NOT EXISTS
        (SELECT 1 FROM sqlite_sequence WHERE name = 'events_v13');
UPDATE sqlite_sequence SET seq = max(seq,
        coalesce((SELECT s.seq FROM sqlite_sequence s WHERE s.name = 'events'), 0))
    WHERE name = 'events_v13';

DROP TABLE events;
ALTER TABLE events_v13 RENAME TO events;

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: update refused');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE session_id = OLD.session_id)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: delete refused');
END;

CREATE TABLE event_keys (
    session_id   TEXT NOT NULL,
    session_seq  INTEGER NOT NULL CHECK (session_seq >= 1),
    seq          INTEGER NOT NULL,
    PRIMARY KEY (session_id, session_seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE event_keys_upto (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    upto  INTEGER NOT NULL CHECK (upto >= 0)
) STRICT;

INSERT INTO event_keys (session_id, session_seq, seq)
    SELECT session_id, session_seq, seq FROM events ORDER BY session_id, session_seq;
INSERT INTO event_keys_upto (id, upto) SELECT 1, coalesce(max(seq), 0) FROM events;

CREATE VIEW session_events (seq, session_id, session_seq, kind, payload, created_at) AS
    SELECT ev.seq, k.session_id, k.session_seq, ev.kind, ev.payload, ev.created_at
    FROM event_keys k JOIN events ev ON ev.seq = k.seq
    UNION ALL
    SELECT ev.seq, ev.session_id, ev.session_seq, ev.kind, ev.payload, ev.created_at
    FROM events ev WHERE ev.seq > (SELECT upto FROM event_keys_upto);

-- As V12's, with the update's event found by its `seq`.
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
                          FROM events ev WHERE ev.seq = i.made_by_event))
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

-- As V12's, with the update's event found by its `seq`.
CREATE TRIGGER search_item_delete AFTER DELETE ON items
WHEN old.kind IN ('agent_message', 'agent_thought')
BEGIN
    INSERT INTO search (search, rowid, body)
        VALUES ('delete', old.rowid, CASE WHEN old.body IS NULL THEN
                    (SELECT CASE WHEN block ->> '$.type' = 'text' THEN block ->> '$.text' END
                     FROM (SELECT CAST(substr(CAST(ev.payload AS BLOB), old.made_by_start + 1,
                                              old.made_by_length) AS TEXT) -> '$.content'
                                  AS block
                           FROM events ev WHERE ev.seq = old.made_by_event))
                ELSE (SELECT group_concat(json_extract(value, '$.text'), char(10))
                      FROM json_each(old.body, '$.content')
                      WHERE json_extract(value, '$.type') = 'text') END);
END;
