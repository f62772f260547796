-- PostgreSQL twin of migrations/V2__turn_items.sql: whole turns, one row per coalesced
-- agent message or thought, merged tool call, plan or session-level update, kept as
-- the ACP JSON the agent sent and sharing the per-session `seq` with messages. No
-- path column: what an agent said stays verbatim inside `body`.
--
-- How it differs from the SQLite file: BIGINT and TEXT COLLATE "C" columns, and the
-- body check calls V1's `json_valid` (the text casts to jsonb) in place of SQLite's
-- function of that name. Tables, columns, their order, checks and indexes are the same.

CREATE TABLE items (
    id            TEXT COLLATE "C" PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    session_id    TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    seq           BIGINT NOT NULL CHECK (seq >= 1),
    kind          TEXT COLLATE "C" NOT NULL CHECK (kind IN (
                      'agent_message', 'agent_thought', 'tool_call', 'plan',
                      'available_commands_update', 'current_mode_update',
                      'session_info_update', 'config_option_update')),
    tool_call_id  TEXT COLLATE "C" CHECK ((kind = 'tool_call') = (tool_call_id IS NOT NULL)),
    body          TEXT COLLATE "C" NOT NULL CHECK (json_valid(body)),
    created_at    TEXT COLLATE "C" NOT NULL,
    updated_at    TEXT COLLATE "C" NOT NULL,
    UNIQUE (session_id, seq)
);

-- A tool_call_update names its call by id within the session.
CREATE UNIQUE INDEX items_tool_calls ON items (session_id, tool_call_id)
    WHERE tool_call_id IS NOT NULL;
