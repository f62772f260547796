-- PostgreSQL twin of migrations/V6__item_parts.sql: the appended parts of an agent
-- message or thought that is still streaming, folded into its item's row once a later
-- entry follows it or its turn ends.
--
-- How it differs from the SQLite file: BIGINT and TEXT COLLATE "C" columns, and V1's
-- `json_valid` function with `json_typeof` for the array check (in a CASE, so an
-- invalid text is refused rather than failing the cast). Columns, their order,
-- the key and the checks are the same.

CREATE TABLE item_parts (
    session_id  TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    item_id     TEXT COLLATE "C" NOT NULL REFERENCES items (id),
    part        BIGINT NOT NULL CHECK (part >= 1),
    content     TEXT COLLATE "C" NOT NULL
                CHECK (CASE WHEN json_valid(content)
                       THEN json_typeof(content::json) = 'array' ELSE false END),
    created_at  TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (session_id, item_id, part)
);
