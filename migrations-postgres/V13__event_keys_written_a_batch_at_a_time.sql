-- PostgreSQL twin of migrations/V13__event_keys_written_a_batch_at_a_time.sql. On
-- SQLite the log's index by session is written a batch at a time, and its readers read
-- the log through the view `session_events`: the keyed events, then the few unkeyed
-- ones. PostgreSQL's commits are not paid for by the page, and `events` keeps its
-- `UNIQUE (session_id, session_seq)`; the view is the whole table, so that both
-- engines read the log with the same statements. An item never names its update here
-- (V12), so nothing else changes. Nothing here is a path.

CREATE VIEW session_events (seq, session_id, session_seq, kind, payload, created_at) AS
    SELECT seq, session_id, session_seq, kind, payload, created_at FROM events;
