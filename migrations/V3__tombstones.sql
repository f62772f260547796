-- Deleted sessions. `session delete` erases a session's rows and its event log and
-- leaves one tombstone: the id, when, and how much went, never any content. The
-- tombstone is what `verify` sees in place of the log; a tombstone whose session still
-- has rows or events is a problem it reports.

CREATE TABLE tombstones (
    session_id  TEXT PRIMARY KEY NOT NULL CHECK (length(session_id) = 36),
    deleted_at  TEXT NOT NULL,
    messages    INTEGER NOT NULL CHECK (messages >= 0),
    items       INTEGER NOT NULL CHECK (items >= 0),
    events      INTEGER NOT NULL CHECK (events >= 0),
    refs        INTEGER NOT NULL CHECK (refs >= 0)
) STRICT;

-- The event log stays append-only for every other operation. The store's own delete
-- writes the session's tombstone first, in the same transaction, and only then
-- deletes its events; a DELETE of events of any session without a tombstone is still
-- refused, from the store or from outside.
DROP TRIGGER events_no_delete;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE session_id = OLD.session_id)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: delete refused');
END;

-- A deleted session stays deleted: its id is never taken again.
CREATE TRIGGER sessions_not_after_tombstone BEFORE INSERT ON sessions
WHEN EXISTS (SELECT 1 FROM tombstones WHERE session_id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'session was deleted: its id is not reused');
END;
