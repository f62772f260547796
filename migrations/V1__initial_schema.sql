-- Sessions, messages, attachment references and the append-only event log.
-- No column anywhere holds a filesystem path, a root or a directory: attachments are
-- named by URI and stored name only, and the resolver finds them at read time.

CREATE TABLE sessions (
    id          TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    title       TEXT,
    tools_host  TEXT NOT NULL DEFAULT 'local'
                CHECK (tools_host IN ('local', 'ssh', 'managed')),
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL
) STRICT;

CREATE INDEX sessions_by_updated ON sessions (updated_at, id);

CREATE TABLE messages (
    id            TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    session_id    TEXT NOT NULL REFERENCES sessions (id),
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    role          TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'system')),
    display_text  TEXT NOT NULL,
    model_text    TEXT,
    transcript    TEXT,
    state         TEXT NOT NULL CHECK (state IN ('delivered', 'queued')),
    created_at    TEXT NOT NULL,
    UNIQUE (session_id, seq)
) STRICT;

-- The UNIQUE (session_id, seq) index serves the foreign key and the ordered reads.
CREATE INDEX messages_queued ON messages (session_id, seq) WHERE state = 'queued';

CREATE TABLE message_refs (
    message_id   TEXT NOT NULL REFERENCES messages (id),
    ordinal      INTEGER NOT NULL CHECK (ordinal >= 0),
    uri          TEXT NOT NULL CHECK (uri LIKE 'attachment:///%'),
    stored_name  TEXT NOT NULL CHECK (length(stored_name) BETWEEN 1 AND 255),
    mime_type    TEXT NOT NULL,
    size         INTEGER NOT NULL CHECK (size >= 0),
    PRIMARY KEY (message_id, ordinal)
) STRICT;

CREATE TABLE events (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id   TEXT NOT NULL REFERENCES sessions (id),
    session_seq  INTEGER NOT NULL CHECK (session_seq >= 1),
    kind         TEXT NOT NULL,
    payload      TEXT NOT NULL CHECK (json_valid(payload)),
    created_at   TEXT NOT NULL,
    UNIQUE (session_id, session_seq)
) STRICT;

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: update refused');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only: delete refused');
END;
