-- PostgreSQL twin of migrations/V1__initial_schema.sql: sessions, messages, attachment
-- references and the append-only event log, with the same tables, columns, column
-- order and checks, so the store can send the same SQL text to either engine. No
-- column holds a filesystem path, a root or a directory: an attachment is known by
-- its URI and stored name, and the resolver finds the file when it is read.
--
-- How it differs from the SQLite file:
-- * Integers are BIGINT (SQLite's INTEGER is 64-bit). Text is TEXT COLLATE "C", so
--   comparisons and the (updated_at, id) order that cursors page on are byte order,
--   as in SQLite, whatever the database's own locale.
-- * `events.seq` is an identity column instead of AUTOINCREMENT: it only grows, the
--   store never supplies it and reads it back with RETURNING.
-- * SQLite's json_valid() has no PostgreSQL counterpart, so `json_valid` below says
--   whether the text casts to jsonb. jsonb is stricter than SQLite in two corners:
--   it refuses \u0000 and unpaired surrogate escapes, and numbers too large for
--   `numeric`; none of these is anything serde_json writes for the store.
-- * SQLite's LIKE ignores the case of ASCII letters; ILIKE says the same here.
-- * The append-only triggers are plpgsql functions raising the same message text,
--   with SQLSTATE 23000 (integrity_constraint_violation) where SQLite reports
--   SQLITE_CONSTRAINT. PostgreSQL can also empty a table with TRUNCATE, which fires
--   no row trigger, so a statement trigger refuses that as well.

CREATE FUNCTION json_valid(doc TEXT) RETURNS BOOLEAN
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
BEGIN
    PERFORM doc::jsonb;
    RETURN TRUE;
EXCEPTION WHEN data_exception THEN
    -- Every way a text can fail to be jsonb is in class 22: bad syntax, an escape
    -- text cannot hold, a number out of range.
    RETURN FALSE;
END;
$$;

CREATE TABLE sessions (
    id          TEXT COLLATE "C" PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    title       TEXT COLLATE "C",
    tools_host  TEXT COLLATE "C" NOT NULL DEFAULT 'local'
                CHECK (tools_host IN ('local', 'ssh', 'managed')),
    created_at  TEXT COLLATE "C" NOT NULL,
    updated_at  TEXT COLLATE "C" NOT NULL
);

CREATE INDEX sessions_by_updated ON sessions (updated_at, id);

CREATE TABLE messages (
    id            TEXT COLLATE "C" PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    session_id    TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    seq           BIGINT NOT NULL CHECK (seq >= 1),
    role          TEXT COLLATE "C" NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
    display_text  TEXT COLLATE "C" NOT NULL,
    model_text    TEXT COLLATE "C",
    transcript    TEXT COLLATE "C",
    state         TEXT COLLATE "C" NOT NULL CHECK (state IN ('delivered', 'queued')),
    created_at    TEXT COLLATE "C" NOT NULL,
    UNIQUE (session_id, seq)
);

-- The UNIQUE (session_id, seq) index serves the foreign key and the ordered reads.
CREATE INDEX messages_queued ON messages (session_id, seq) WHERE state = 'queued';

CREATE TABLE message_refs (
    message_id   TEXT COLLATE "C" NOT NULL REFERENCES messages (id),
    ordinal      BIGINT NOT NULL CHECK (ordinal >= 0),
    uri          TEXT COLLATE "C" NOT NULL CHECK (uri ILIKE 'attachment:///%'),
    stored_name  TEXT COLLATE "C" NOT NULL CHECK (length(stored_name) BETWEEN 1 AND 255),
    mime_type    TEXT COLLATE "C" NOT NULL,
    size         BIGINT NOT NULL CHECK (size >= 0),
    PRIMARY KEY (message_id, ordinal)
);

CREATE TABLE events (
    seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id   TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    session_seq  BIGINT NOT NULL CHECK (session_seq >= 1),
    kind         TEXT COLLATE "C" NOT NULL,
    payload      TEXT COLLATE "C" NOT NULL CHECK (json_valid(payload)),
    created_at   TEXT COLLATE "C" NOT NULL,
    UNIQUE (session_id, session_seq)
);

CREATE FUNCTION events_no_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only: update refused'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION events_no_update();

CREATE FUNCTION events_no_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only: delete refused'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION events_no_delete();

-- TRUNCATE also comes through `TRUNCATE sessions CASCADE`, which reaches events by
-- their foreign key; the trigger fires for that too.
CREATE FUNCTION events_no_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are append-only: truncate refused'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_no_truncate();
