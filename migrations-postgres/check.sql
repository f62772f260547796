-- Checks of the PostgreSQL schema's triggers and search, against a database that
-- has V1..V4 applied (refinery ignores this file: its name is not a migration's).
-- `cargo test` runs it on a freshly migrated schema whenever SESSIONSTORE_TEST_POSTGRES
-- names a server (`db::postgres::tests::the_hand_written_checks_of_the_triggers_and_
-- search_pass`); it can also be run by hand. Everything happens in one transaction
-- that is rolled back, so the database is left as it was; each check raises on
-- failure and says `ok` otherwise.
--
--   psql -X -q -v ON_ERROR_STOP=1 -d DB -f migrations-postgres/check.sql

BEGIN;

-- Fails unless `statement` is refused with exactly `message` and SQLSTATE `code`.
CREATE PROCEDURE pg_temp.refused(statement TEXT, message TEXT, code TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    got TEXT;
    got_code TEXT;
BEGIN
    BEGIN
        EXECUTE statement;
    EXCEPTION WHEN OTHERS THEN
        got := SQLERRM;
        got_code := SQLSTATE;
    END;
    IF got IS NULL THEN
        RAISE EXCEPTION 'check failed: "%" was not refused', statement;
    ELSIF got <> message OR got_code <> code THEN
        RAISE EXCEPTION 'check failed: "%" gave % "%", not % "%"',
            statement, got_code, got, code, message;
    END IF;
    RAISE NOTICE 'ok: % -> %', statement, message;
END;
$$;

-- Fails unless the one-value `query` gives true.
CREATE PROCEDURE pg_temp.expect(query TEXT, what TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    holds BOOLEAN;
BEGIN
    EXECUTE query INTO holds;
    IF holds IS NOT TRUE THEN
        RAISE EXCEPTION 'check failed: %', what;
    END IF;
    RAISE NOTICE 'ok: %', what;
END;
$$;

-- The search text of one row, or NULL when it has no entry.
CREATE FUNCTION pg_temp.indexed(entry TEXT, kind TEXT) RETURNS TEXT
LANGUAGE sql AS $$
    SELECT body FROM search_entries WHERE entry_id = entry AND source = kind
$$;

-- Two sessions: one that is deleted below and one that stays.
INSERT INTO sessions (id, title, created_at, updated_at) VALUES
    ('00000000-0000-4000-8000-000000000001', 'Quarterly budget review',
     '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z'),
    ('00000000-0000-4000-8000-000000000002', NULL,
     '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z');

INSERT INTO messages (id, session_id, seq, role, display_text, model_text, transcript,
                      state, created_at) VALUES
    ('00000000-0000-4000-8000-0000000000a1', '00000000-0000-4000-8000-000000000001', 1,
     'user', 'Please chart the numbers', 'Please chart the numbers [expanded]', NULL,
     'delivered', '2025-01-01T00:00:01Z'),
    ('00000000-0000-4000-8000-0000000000a2', '00000000-0000-4000-8000-000000000002', 1,
     'user', 'Unrelated question about lunch', NULL, 'spoken transcript here',
     'delivered', '2025-01-01T00:00:01Z');

INSERT INTO message_refs VALUES
    ('00000000-0000-4000-8000-0000000000a1', 0,
     'attachment:///00000000-0000-4000-8000-000000000001/numbers.csv', 'numbers.csv',
     'text/csv', 12);

INSERT INTO items (id, session_id, seq, kind, tool_call_id, body, created_at, updated_at)
VALUES
    ('00000000-0000-4000-8000-0000000000b1', '00000000-0000-4000-8000-000000000001', 2,
     'agent_message', NULL,
     '{"content":[{"type":"text","text":"Here is the chart"},{"type":"image","mimeType":"image/png","data":"AA=="},{"type":"text","text":"with the totals"}]}',
     '2025-01-01T00:00:02Z', '2025-01-01T00:00:02Z'),
    ('00000000-0000-4000-8000-0000000000b2', '00000000-0000-4000-8000-000000000001', 3,
     'tool_call', 'call-1', '{"toolCallId":"call-1","title":"read numbers"}',
     '2025-01-01T00:00:03Z', '2025-01-01T00:00:03Z');

INSERT INTO events (session_id, session_seq, kind, payload, created_at) VALUES
    ('00000000-0000-4000-8000-000000000001', 1, 'message_added', '{"n":1}', '2025-01-01T00:00:01Z'),
    ('00000000-0000-4000-8000-000000000001', 2, 'items_recorded', '{"n":2}', '2025-01-01T00:00:02Z'),
    ('00000000-0000-4000-8000-000000000002', 1, 'message_added', '{"n":3}', '2025-01-01T00:00:01Z');

-- The event log is append-only.
CALL pg_temp.refused($$UPDATE events SET kind = 'edited'$$,
    'events are append-only: update refused', '23000');
CALL pg_temp.refused($$DELETE FROM events$$,
    'events are append-only: delete refused', '23000');
CALL pg_temp.refused($$TRUNCATE events$$,
    'events are append-only: truncate refused', '23000');
-- `TRUNCATE sessions CASCADE` no longer reaches the log, since V17 dropped the
-- reference from `events` to `sessions` (as SQLite's V13 did): what it empties is not
-- the log's, which keeps every row. Run in a block that is rolled back.
DO $$
DECLARE
    logged BIGINT := (SELECT count(*) FROM events);
BEGIN
    TRUNCATE sessions CASCADE;
    IF (SELECT count(*) FROM events) <> logged THEN
        RAISE EXCEPTION 'check failed: TRUNCATE sessions CASCADE reached the log';
    END IF;
    RAISE SQLSTATE 'SSUND';
EXCEPTION WHEN SQLSTATE 'SSUND' THEN
    RAISE NOTICE 'ok: TRUNCATE sessions CASCADE leaves the log whole';
END;
$$;
CALL pg_temp.refused(
    $$INSERT INTO events (seq, session_id, session_seq, kind, payload, created_at)
      VALUES (99, '00000000-0000-4000-8000-000000000002', 2, 'x', '{}', 'now')$$,
    'cannot insert a non-DEFAULT value into column "seq"', '428C9');
CALL pg_temp.refused(
    $$INSERT INTO events (session_id, session_seq, kind, payload, created_at)
      VALUES ('00000000-0000-4000-8000-000000000002', 2, 'x', '{"a":1', 'now')$$,
    'new row for relation "events" violates check constraint "events_payload_check"',
    '23514');
CALL pg_temp.expect(
    $q$SELECT array_agg(payload ORDER BY seq) = ARRAY['{"n":1}', '{"n":2}', '{"n":3}']
       FROM events$q$,
    'events.seq follows the order of insertion');

-- What was written is indexed.
CALL pg_temp.expect(
    $q$SELECT pg_temp.indexed('00000000-0000-4000-8000-000000000001', 'title')
              = 'Quarterly budget review'$q$,
    'a title is indexed');
CALL pg_temp.expect(
    $q$SELECT NOT EXISTS (SELECT 1 FROM search_entries
                          WHERE entry_id = '00000000-0000-4000-8000-000000000002'
                            AND source = 'title')$q$,
    'a session without a title has no title entry');
CALL pg_temp.expect(
    $q$SELECT pg_temp.indexed('00000000-0000-4000-8000-0000000000a1', 'message')
              = E'Please chart the numbers\nPlease chart the numbers [expanded]'$q$,
    'a message is indexed as its texts joined by newlines, NULLs skipped');
CALL pg_temp.expect(
    $q$SELECT pg_temp.indexed('00000000-0000-4000-8000-0000000000b1', 'agent_message')
              = E'Here is the chart\nwith the totals'$q$,
    'an agent message is indexed as its text blocks joined by newlines');
CALL pg_temp.expect(
    $q$SELECT NOT EXISTS (SELECT 1 FROM search_entries
                          WHERE entry_id = '00000000-0000-4000-8000-0000000000b2')$q$,
    'a tool call is not indexed');

-- Renames, body updates and deletes are followed.
UPDATE sessions SET title = 'Annual forecast' WHERE id = '00000000-0000-4000-8000-000000000001';
CALL pg_temp.expect(
    $q$SELECT pg_temp.indexed('00000000-0000-4000-8000-000000000001', 'title')
              = 'Annual forecast'$q$,
    'a renamed title is indexed under its new text');
UPDATE sessions SET title = 'Lunch' WHERE id = '00000000-0000-4000-8000-000000000002';
UPDATE sessions SET title = NULL WHERE id = '00000000-0000-4000-8000-000000000002';
CALL pg_temp.expect(
    $q$SELECT pg_temp.indexed('00000000-0000-4000-8000-000000000002', 'title') IS NULL$q$,
    'a title set and then cleared leaves no entry');
UPDATE items SET body = '{"content":[{"type":"text","text":"Here is the revised chart"}]}'
    WHERE id = '00000000-0000-4000-8000-0000000000b1';
CALL pg_temp.expect(
    $q$SELECT pg_temp.indexed('00000000-0000-4000-8000-0000000000b1', 'agent_message')
              = 'Here is the revised chart'$q$,
    'an item body update replaces its text');

-- Search and snippets.
CALL pg_temp.expect(
    $q$SELECT array_agg(entry_id || ' ' || source ORDER BY id)
              = ARRAY['00000000-0000-4000-8000-0000000000a1 message',
                      '00000000-0000-4000-8000-0000000000b1 agent_message']
       FROM search_entries
       WHERE doc @@ websearch_to_tsquery('simple', 'chart -lunch')$q$,
    'websearch_to_tsquery finds the entries that say chart');
CALL pg_temp.expect(
    $q$SELECT count(*) = 2 FROM search_entries
       WHERE doc @@ websearch_to_tsquery('simple', '"revised chart" OR forecast')$q$,
    'a phrase and OR find the rewritten item and the renamed title');
CALL pg_temp.expect(
    $q$SELECT count(*) = 0 FROM search_entries
       WHERE doc @@ websearch_to_tsquery('simple', 'quarterly')$q$,
    'the old title is no longer found');
CALL pg_temp.expect(
    $q$SELECT ts_headline('simple', body, websearch_to_tsquery('simple', 'chart'),
                          'StartSel=[, StopSel=]') = 'Here is the revised [chart]'
       FROM search_entries WHERE entry_id = '00000000-0000-4000-8000-0000000000b1'$q$,
    'ts_headline marks a match with [ and ]');

-- A content object is read as SQLite's json_each reads it: its members' values.
INSERT INTO items (id, session_id, seq, kind, body, created_at, updated_at) VALUES
    ('00000000-0000-4000-8000-0000000000b3', '00000000-0000-4000-8000-000000000002', 2,
     'agent_thought',
     '{"content":{"first":{"type":"text","text":"thinking"},"second":{"type":"text","text":"harder"}}}',
     'now', 'now');
CALL pg_temp.expect(
    $q$SELECT pg_temp.indexed('00000000-0000-4000-8000-0000000000b3', 'agent_thought')
              = E'thinking\nharder'$q$,
    'an object content gives the text of its member blocks in document order');
CALL pg_temp.refused(
    $$INSERT INTO items (id, session_id, seq, kind, body, created_at, updated_at) VALUES
      ('00000000-0000-4000-8000-0000000000b4', '00000000-0000-4000-8000-000000000002', 3,
       'agent_message', '{"content":{"type":"text","text":"hi"}}', 'now', 'now')$$,
    'malformed JSON', '22032');

-- Deleting a session: tombstone first, then its events, rows and entries.
CALL pg_temp.refused(
    $$DELETE FROM events WHERE session_id = '00000000-0000-4000-8000-000000000001'$$,
    'events are append-only: delete refused', '23000');
INSERT INTO tombstones VALUES
    ('00000000-0000-4000-8000-000000000001', '2025-01-02T00:00:00Z', 1, 2, 2, 1);
DELETE FROM events WHERE session_id = '00000000-0000-4000-8000-000000000001';
DELETE FROM message_refs WHERE message_id = '00000000-0000-4000-8000-0000000000a1';
DELETE FROM messages WHERE session_id = '00000000-0000-4000-8000-000000000001';
DELETE FROM items WHERE session_id = '00000000-0000-4000-8000-000000000001';
DELETE FROM sessions WHERE id = '00000000-0000-4000-8000-000000000001';
CALL pg_temp.expect(
    $q$SELECT count(*) = 1 FROM events$q$,
    'a tombstoned session''s events can be deleted, and only those went');
CALL pg_temp.expect(
    $q$SELECT NOT EXISTS (SELECT 1 FROM search_entries
                          WHERE session_id = '00000000-0000-4000-8000-000000000001')$q$,
    'a deleted session leaves no search entry');
CALL pg_temp.refused(
    $$DELETE FROM events$$,
    'events are append-only: delete refused', '23000');
CALL pg_temp.refused(
    $$INSERT INTO sessions (id, created_at, updated_at)
      VALUES ('00000000-0000-4000-8000-000000000001', 'now', 'now')$$,
    'session was deleted: its id is not reused', '23000');

-- TRUNCATE of messages or items takes their entries along.
TRUNCATE item_parts, items;
CALL pg_temp.expect(
    $q$SELECT NOT EXISTS (SELECT 1 FROM search_entries
                          WHERE source IN ('agent_message', 'agent_thought'))$q$,
    'TRUNCATE items drops the agent entries');
TRUNCATE message_refs, messages;
CALL pg_temp.expect(
    $q$SELECT NOT EXISTS (SELECT 1 FROM search_entries WHERE source = 'message')$q$,
    'TRUNCATE messages drops the message entries');

-- Text compares byte by byte, as in SQLite, whatever the database's own collation.
CALL pg_temp.expect(
    $q$SELECT NOT EXISTS (SELECT 1 FROM information_schema.columns
                          WHERE table_schema = current_schema() AND data_type = 'text'
                            AND collation_name IS DISTINCT FROM 'C')$q$,
    'every text column has COLLATE "C"');
INSERT INTO sessions (id, title, created_at, updated_at)
    SELECT '00000000-0000-4000-8000-0000000000c' || n, t, 'now', 'now'
    FROM unnest(ARRAY['b', 'B', 'a', 'é', 'A']) WITH ORDINALITY AS x (t, n);
CALL pg_temp.expect(
    $q$SELECT array_agg(title ORDER BY title) = ARRAY['A', 'B', 'a', 'b', 'é']
       FROM sessions WHERE title IS NOT NULL$q$,
    'titles sort in byte order');

ROLLBACK;
