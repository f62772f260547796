-- Sessions carried by `sessionstore proxy`: what a session needs to find its agent side
-- again, the client's working directory, prompts kept in the order their blocks came,
-- turns with their start and end, the client's settings, and agent updates of kinds
-- this store does not know, kept as they came.
--
-- Still no column for a path of the store's own: `cwd` is the working directory the
-- client gave for the session, client content kept as given (the one documented
-- exception), and `messages.content` holds a prompt's blocks, the client's own
-- `file://` links among them, as the client sent them. Attachment paths are never
-- stored: a prompt's attachments are references, read again at every dispatch.

ALTER TABLE sessions ADD COLUMN cwd TEXT;
-- The agent a proxy ran the session with (its program's name), and the agent's own
-- id for the session; both set together or not at all.
ALTER TABLE sessions ADD COLUMN agent TEXT;
ALTER TABLE sessions ADD COLUMN agent_session TEXT
    CHECK ((agent IS NULL) = (agent_session IS NULL));

-- A prompt's blocks in the order sent, as JSON: text (with its `_meta`), references by
-- their ordinal in `message_refs` (with the client block's own `_meta`), and the
-- client's blocks kept verbatim. NULL for a message made by `send`, whose order is
-- its text, then its transcript, then its references.
ALTER TABLE messages ADD COLUMN content TEXT
    CHECK (content IS NULL OR json_valid(content));

-- One row per turn: the prompt messages it delivered, where in the history it began,
-- and how it ended. A turn still `running` that no proxy is running was interrupted.
CREATE TABLE turns (
    id           TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    session_id   TEXT NOT NULL REFERENCES sessions (id),
    seq          INTEGER NOT NULL CHECK (seq >= 1),
    messages     TEXT NOT NULL CHECK (json_valid(messages)),
    state        TEXT NOT NULL CHECK (state IN ('running', 'ended', 'failed')),
    stop_reason  TEXT CHECK ((state = 'ended') = (stop_reason IS NOT NULL)),
    failure      TEXT CHECK ((state = 'failed') = (failure IS NOT NULL)),
    started_at   TEXT NOT NULL,
    ended_at     TEXT CHECK ((state = 'running') = (ended_at IS NULL))
) STRICT;

CREATE INDEX turns_by_session ON turns (session_id, seq);

-- The client's settings (`session/set_mode`, `set_model`, `set_config_option`), the
-- latest of each, so that a fresh agent session gets them again. `key` is the config
-- option's id for `set_config_option`, and empty otherwise.
CREATE TABLE settings (
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    method      TEXT NOT NULL,
    key         TEXT NOT NULL,
    params      TEXT NOT NULL CHECK (json_valid(params)),
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (session_id, method, key)
) STRICT;

-- Items may now be `opaque`: an update kind this store does not know, kept verbatim
-- and replayed as it came. SQLite cannot change a table's CHECK, so the table is made
-- anew with the same columns, its rows copied, and its index and triggers made again.
CREATE TABLE items_v5 (
    id            TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    session_id    TEXT NOT NULL REFERENCES sessions (id),
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    kind          TEXT NOT NULL CHECK (kind IN (
                      'agent_message', 'agent_thought', 'tool_call', 'plan',
                      'available_commands_update', 'current_mode_update',
                      'session_info_update', 'config_option_update', 'opaque')),
    tool_call_id  TEXT CHECK ((kind = 'tool_call') = (tool_call_id IS NOT NULL)),
    body          TEXT NOT NULL CHECK (json_valid(body)),
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    UNIQUE (session_id, seq)
) STRICT;

INSERT INTO items_v5 (id, session_id, seq, kind, tool_call_id, body, created_at, updated_at)
    SELECT id, session_id, seq, kind, tool_call_id, body, created_at, updated_at
    FROM items ORDER BY session_id, seq;

DROP TABLE items;
ALTER TABLE items_v5 RENAME TO items;

CREATE UNIQUE INDEX items_tool_calls ON items (session_id, tool_call_id)
    WHERE tool_call_id IS NOT NULL;

CREATE TRIGGER search_item_insert AFTER INSERT ON items
WHEN new.kind IN ('agent_message', 'agent_thought')
BEGIN
    INSERT INTO search_entries (session_id, entry_id, source)
        VALUES (new.session_id, new.id, new.kind);
    INSERT INTO search (rowid, body)
        SELECT id, (SELECT group_concat(json_extract(value, '$.text'), char(10))
                    FROM json_each(new.body, '$.content')
                    WHERE json_extract(value, '$.type') = 'text')
        FROM search_entries WHERE entry_id = new.id AND source = new.kind;
END;

CREATE TRIGGER search_item_update AFTER UPDATE OF body ON items
WHEN new.kind IN ('agent_message', 'agent_thought')
BEGIN
    UPDATE search
        SET body = (SELECT group_concat(json_extract(value, '$.text'), char(10))
                    FROM json_each(new.body, '$.content')
                    WHERE json_extract(value, '$.type') = 'text')
        WHERE rowid IN
            (SELECT id FROM search_entries WHERE entry_id = new.id AND source = new.kind);
END;

CREATE TRIGGER search_item_delete AFTER DELETE ON items
BEGIN
    DELETE FROM search WHERE rowid IN
        (SELECT id FROM search_entries WHERE entry_id = old.id);
    DELETE FROM search_entries WHERE entry_id = old.id;
END;
