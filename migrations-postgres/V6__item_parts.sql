-- PostgreSQL twin of migrations/V6__item_parts.sql: the appended parts of an agent
-- message or thought that is still streaming, rewritten as sealed segments (each its
-- own search entry, `<item id>/<part>`) once a later entry follows it or its turn ends.
--
-- How it differs from the SQLite file: BIGINT and TEXT COLLATE "C" columns, V1's
-- `json_valid` function with `json_typeof` for the array check (in a CASE, so an
-- invalid text is refused rather than failing the cast), the triggers as plpgsql
-- functions (a segment's text from V4's `search_item_text`), and a statement trigger
-- that drops the segments' entries on TRUNCATE. Columns, their order, the key and the
-- checks are the same.

CREATE TABLE item_parts (
    session_id  TEXT COLLATE "C" NOT NULL REFERENCES sessions (id),
    item_id     TEXT COLLATE "C" NOT NULL REFERENCES items (id),
    part        BIGINT NOT NULL CHECK (part >= 1),
    content     TEXT COLLATE "C" NOT NULL
                CHECK (CASE WHEN json_valid(content)
                       THEN json_typeof(content::json) = 'array' ELSE false END),
    created_at  TEXT COLLATE "C" NOT NULL,
    sealed      BIGINT NOT NULL DEFAULT 0 CHECK (sealed IN (0, 1)),
    streamed    BIGINT NOT NULL DEFAULT 0 CHECK (streamed >= 0),
    PRIMARY KEY (session_id, item_id, part)
);

-- The parts still streaming, found without reading a session's sealed segments (a
-- send and a batch look for them every time).
CREATE INDEX item_parts_streaming ON item_parts (session_id, item_id, part)
    WHERE sealed = 0;

CREATE FUNCTION search_part_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO search_entries (session_id, entry_id, source, body)
        SELECT NEW.session_id, NEW.item_id || '/' || NEW.part, kind,
               search_item_text('{"content":' || NEW.content || '}')
        FROM items
        WHERE id = NEW.item_id AND kind IN ('agent_message', 'agent_thought');
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_part_insert AFTER INSERT ON item_parts
    FOR EACH ROW WHEN (NEW.sealed = 1)
    EXECUTE FUNCTION search_part_insert();

CREATE FUNCTION search_part_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM search_entries WHERE entry_id = OLD.item_id || '/' || OLD.part;
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_part_delete AFTER DELETE ON item_parts
    FOR EACH ROW WHEN (OLD.sealed = 1)
    EXECUTE FUNCTION search_part_delete();

CREATE FUNCTION search_part_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM search_entries
        WHERE source IN ('agent_message', 'agent_thought') AND entry_id LIKE '%/%';
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_part_truncate AFTER TRUNCATE ON item_parts
    FOR EACH STATEMENT EXECUTE FUNCTION search_part_truncate();
