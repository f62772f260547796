-- One schema for the store's data on both engines (issue 46): after this version
-- SQLite and PostgreSQL hold the same tables, columns and constraints for it, but for
-- what each engine keeps for itself: its search index (with, here, V14's
-- `search_waiting`) and its index of the log by session (here V13's `event_keys` and
-- `event_keys_upto`, written a batch at a time; PostgreSQL's `events` keeps its
-- `UNIQUE (session_id, session_seq)`). `db::postgres::tests` compares the two.
--
-- SQLite has nothing to change: PostgreSQL's twin gives its `items` the checks of V12
-- here, and drops the reference from `events` to `sessions` that V13 dropped here
-- (see there for why the store, not that reference, keeps each event's session
-- there). Nothing here is a path.

SELECT 1;
