-- PostgreSQL twin of migrations/V5__proxied_sessions.sql: sessions carried by
-- `sessionstore proxy` (the client's working directory, the agent binding), prompts in
-- the order their blocks came, turns, the client's settings, and `opaque` items.
--
-- How it differs from the SQLite file: BIGINT and TEXT COLLATE "C" columns, V1's
-- `json_valid` function, and the items kind check changed in place (PostgreSQL can drop
-- and add a check), where SQLite makes the table anew. Tables, columns, their order,
-- checks and indexes are the same.

ALTER TABLE sessions ADD COLUMN cwd TEXT COLLATE "C";
ALTER TABLE sessions ADD COLUMN agent TEXT COLLATE "C";
ALTER TABLE sessions ADD COLUMN agent_session TEXT COLLATE "C"
    CHECK ((agent IS NULL) = (agent_session IS NULL));

ALTER TABLE messages ADD COLUMN content TEXT COLLATE "C"
    CHECK (content IS NULL OR json_valid(content));

CREATE TABLE turns (
    id           TEXT COLLATE "C" PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    session_id   TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    seq          BIGINT NOT NULL CHECK (seq >= 1),
    messages     TEXT COLLATE "C" NOT NULL CHECK (json_valid(messages)),
    state        TEXT COLLATE "C" NOT NULL CHECK (state IN ('running', 'ended', 'failed')),
    stop_reason  TEXT COLLATE "C" CHECK ((state = 'ended') = (stop_reason IS NOT NULL)),
    failure      TEXT COLLATE "C" CHECK ((state = 'failed') = (failure IS NOT NULL)),
    started_at   TEXT COLLATE "C" NOT NULL,
    ended_at     TEXT COLLATE "C" CHECK ((state = 'running') = (ended_at IS NULL))
);

CREATE INDEX turns_by_session ON turns (session_id, seq);

CREATE TABLE settings (
    session_id  TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    method      TEXT COLLATE "C" NOT NULL,
    key         TEXT COLLATE "C" NOT NULL,
    params      TEXT COLLATE "C" NOT NULL CHECK (json_valid(params)),
    updated_at  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (session_id, method, key)
);

ALTER TABLE items DROP CONSTRAINT items_kind_check;
ALTER TABLE items ADD CONSTRAINT items_kind_check CHECK (kind IN (
    'agent_message', 'agent_thought', 'tool_call', 'plan',
    'available_commands_update', 'current_mode_update',
    'session_info_update', 'config_option_update', 'opaque'));
