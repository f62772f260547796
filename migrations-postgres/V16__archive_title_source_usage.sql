-- PostgreSQL twin of migrations/V16__archive_title_source_usage.sql: archived
-- sessions (and the index that lists one archive state in the listing's order), where
-- a session's title came from, and the usage columns (tokens per turn by kind; the
-- latest cost and context per session). See there for what each means.

ALTER TABLE sessions ADD COLUMN archived SMALLINT NOT NULL DEFAULT 0
    CHECK (archived IN (0, 1));
ALTER TABLE sessions ADD COLUMN title_source TEXT COLLATE "C"
    CHECK (title_source IN ('explicit', 'agent', 'message'));
ALTER TABLE sessions ADD COLUMN cost_amount DOUBLE PRECISION;
ALTER TABLE sessions ADD COLUMN cost_currency TEXT COLLATE "C"
    CHECK ((cost_amount IS NULL) = (cost_currency IS NULL));
ALTER TABLE sessions ADD COLUMN context_used BIGINT CHECK (context_used >= 0);
ALTER TABLE sessions ADD COLUMN context_size BIGINT
    CHECK (context_size >= 0 AND (context_used IS NULL) = (context_size IS NULL));

CREATE INDEX sessions_by_archived ON sessions (archived, updated_at, id);

ALTER TABLE turns ADD COLUMN input_tokens BIGINT CHECK (input_tokens >= 0);
ALTER TABLE turns ADD COLUMN output_tokens BIGINT CHECK (output_tokens >= 0);
ALTER TABLE turns ADD COLUMN thought_tokens BIGINT CHECK (thought_tokens >= 0);
ALTER TABLE turns ADD COLUMN cached_read_tokens BIGINT CHECK (cached_read_tokens >= 0);
ALTER TABLE turns ADD COLUMN cached_write_tokens BIGINT CHECK (cached_write_tokens >= 0);
ALTER TABLE turns ADD COLUMN total_tokens BIGINT CHECK (total_tokens >= 0);
