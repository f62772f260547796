-- Archived sessions, where a session's title came from, and what each turn cost.
--
-- `archived` (0 or 1): an archived session keeps everything and is left out of the
-- default listing; `session_archived` and `session_unarchived` events set it. The
-- index serves a listing of one archive state in the listing's order
-- (`updated_at DESC, id DESC`), so the first page of either costs what a page of the
-- whole list does; a listing of both keeps `sessions_by_updated`.
--
-- `title_source`: who gave the title in force. `explicit` (a client's
-- `session/set_title`, `session rename`, `session new --title`) stays until the next
-- explicit one; `agent` (a `session_info_update`) and `message` (the first user
-- message) give way to it. NULL is a title written before this version, whose source
-- no event says: it is kept as if explicit. Set by `session_renamed` events (their
-- `source`).
--
-- Usage, for the `usage` command: per turn, the tokens the agent reported for it by
-- kind (NULL where it reported none), and per session the latest cost and context
-- window the agent reported. Written by the usage work; nothing here is a path.

ALTER TABLE sessions ADD COLUMN archived INTEGER NOT NULL DEFAULT 0
    CHECK (archived IN (0, 1));
ALTER TABLE sessions ADD COLUMN title_source TEXT
    CHECK (title_source IN ('explicit', 'agent', 'message'));
ALTER TABLE sessions ADD COLUMN cost_amount REAL;
ALTER TABLE sessions ADD COLUMN cost_currency TEXT
    CHECK ((cost_amount IS NULL) = (cost_currency IS NULL));
ALTER TABLE sessions ADD COLUMN context_used INTEGER CHECK (context_used >= 0);
ALTER TABLE sessions ADD COLUMN context_size INTEGER
    CHECK (context_size >= 0 AND (context_used IS NULL) = (context_size IS NULL));

CREATE INDEX sessions_by_archived ON sessions (archived, updated_at, id);

ALTER TABLE turns ADD COLUMN input_tokens INTEGER CHECK (input_tokens >= 0);
ALTER TABLE turns ADD COLUMN output_tokens INTEGER CHECK (output_tokens >= 0);
ALTER TABLE turns ADD COLUMN thought_tokens INTEGER CHECK (thought_tokens >= 0);
ALTER TABLE turns ADD COLUMN cached_read_tokens INTEGER CHECK (cached_read_tokens >= 0);
ALTER TABLE turns ADD COLUMN cached_write_tokens INTEGER CHECK (cached_write_tokens >= 0);
ALTER TABLE turns ADD COLUMN total_tokens INTEGER CHECK (total_tokens >= 0);
