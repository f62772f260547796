-- PostgreSQL twin of migrations/V3__tombstones.sql: deleted sessions. `session delete`
-- erases a session's rows and event log and leaves one tombstone (the id, when, and
-- how much went, never content), which `verify` sees in place of the log.
--
-- How it differs from the SQLite file: BIGINT and TEXT COLLATE "C" columns, and the
-- triggers' conditions live in their plpgsql functions, because a PostgreSQL trigger's
-- WHEN may not hold a subquery. The functions fix their search_path when created, so
-- they find `tombstones` in the schema the migration ran in whatever the caller's
-- path. The messages and their SQLSTATE are those of V1.

CREATE TABLE tombstones (
    session_id  TEXT COLLATE "C" PRIMARY KEY NOT NULL CHECK (length(session_id) = 36),
    deleted_at  TEXT COLLATE "C" NOT NULL,
    messages    BIGINT NOT NULL CHECK (messages >= 0),
    items       BIGINT NOT NULL CHECK (items >= 0),
    events      BIGINT NOT NULL CHECK (events >= 0),
    refs        BIGINT NOT NULL CHECK (refs >= 0)
);

-- The event log stays append-only for every other operation. The store's own delete
-- writes the session's tombstone first, in the same transaction, and only then
-- deletes its events; a DELETE of events of any session without a tombstone is still
-- refused, from the store or from outside. TRUNCATE stays refused outright.
DROP TRIGGER events_no_delete ON events;

CREATE OR REPLACE FUNCTION events_no_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM tombstones WHERE session_id = OLD.session_id) THEN
        RAISE EXCEPTION 'events are append-only: delete refused'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN OLD;
END;
$$;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_no_delete();

-- A deleted session stays deleted: its id is never taken again.
CREATE FUNCTION sessions_not_after_tombstone() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM tombstones WHERE session_id = NEW.id) THEN
        RAISE EXCEPTION 'session was deleted: its id is not reused'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER sessions_not_after_tombstone BEFORE INSERT ON sessions
    FOR EACH ROW EXECUTE FUNCTION sessions_not_after_tombstone();
