-- Whole turns: what an agent said, thought and did, recorded from ACP session updates.
-- Each row is one coalesced agent message or thought, one tool call in its merged
-- state, one plan, or one session-level update, as the ACP JSON the agent sent.
-- Items share the per-session `seq` with messages, so a session's history is one
-- sequence; `verify` checks both against the event log. Still no path column: what
-- an agent said is kept verbatim inside `body`, never as a column of its own.

CREATE TABLE items (
    id            TEXT PRIMARY KEY NOT NULL CHECK (length(id) = 36),
    session_id    TEXT NOT NULL REFERENCES sessions (id),
    seq           INTEGER NOT NULL CHECK (seq >= 1),
    kind          TEXT NOT NULL CHECK (kind IN (
                      'agent_message', 'agent_thought', 'tool_call', 'plan',
                      'available_commands_update', 'current_mode_update',
                      'session_info_update', 'config_option_update')),
    tool_call_id  TEXT CHECK ((kind = 'tool_call') = (tool_call_id IS NOT NULL)),
    body          TEXT NOT NULL CHECK (json_valid(body)),
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    UNIQUE (session_id, seq)
) STRICT;

-- A tool_call_update names its call by id within the session.
CREATE UNIQUE INDEX items_tool_calls ON items (session_id, tool_call_id)
    WHERE tool_call_id IS NOT NULL;
