-- PostgreSQL twin of migrations/V17__one_schema_on_both_engines.sql (issue 46): after
-- it both engines hold the same tables, columns and constraints for the store's data.
-- Each keeps its own search index and its own index of the log by session (SQLite's
-- `event_keys`, V13; here `UNIQUE (session_id, session_seq)` on `events`).
--
-- `items` takes SQLite's V12 checks: a row may name the update that made it in place
-- of a body and times of its own. This engine still writes every item's body (its
-- search triggers index an item from its row), which the checks allow.
--
-- `events` loses its reference to `sessions`, as SQLite's did in V13, where it would
-- scan the whole log for each deleted session (no index there starts with
-- `session_id`). The store keeps it true itself: its writes are serializable on both
-- engines (SQLite's one writer; SERIALIZABLE here), an event is appended only to a
-- session read in the same write, a session's delete takes its events (found through
-- the unique key, never by a cascade) before its row, and `verify` reports events of
-- no session on both engines. `TRUNCATE sessions CASCADE`, which reached the log
-- through that reference (V1), now leaves it whole, and `TRUNCATE events` is still
-- refused (`check.sql`). Nothing here is a path.

ALTER TABLE events DROP CONSTRAINT events_session_id_fkey;

ALTER TABLE items DROP CONSTRAINT items_keep_their_bodies;
ALTER TABLE items ALTER COLUMN body DROP NOT NULL;
ALTER TABLE items ALTER COLUMN created_at DROP NOT NULL;
ALTER TABLE items ALTER COLUMN updated_at DROP NOT NULL;
ALTER TABLE items ADD CONSTRAINT items_made_by_event_check CHECK (made_by_event >= 1);
ALTER TABLE items ADD CONSTRAINT items_made_by_start_check CHECK (made_by_start >= 0);
ALTER TABLE items ADD CONSTRAINT items_made_by_length_check CHECK (made_by_length >= 1);
ALTER TABLE items ADD CONSTRAINT items_made_by_names_its_update
    CHECK ((body IS NULL) = (made_by_event IS NOT NULL));
ALTER TABLE items ADD CONSTRAINT items_made_by_start_with_event
    CHECK ((made_by_event IS NULL) = (made_by_start IS NULL));
ALTER TABLE items ADD CONSTRAINT items_made_by_length_with_event
    CHECK ((made_by_event IS NULL) = (made_by_length IS NULL));
ALTER TABLE items ADD CONSTRAINT items_created_with_body
    CHECK ((body IS NULL) = (created_at IS NULL));
ALTER TABLE items ADD CONSTRAINT items_updated_with_body
    CHECK ((body IS NULL) = (updated_at IS NULL));
