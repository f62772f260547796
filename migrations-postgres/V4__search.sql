-- PostgreSQL twin of migrations/V4__search.sql: full-text search over what people and
-- agents wrote (session titles, messages' display text, model text and transcripts,
-- recorded agent messages and thoughts). Triggers keep the index in the transaction
-- of the rows they follow. Nothing here holds a path, a URI or a stored name: only
-- text a user typed or an agent said, verbatim.
--
-- How it differs from the SQLite file:
-- * No FTS5. `search_entries` holds the text itself in `body`, and `doc` is its
--   tsvector, generated with the 'simple' configuration (lower case, no stemming, no
--   stop words) and GIN-indexed; queries use `doc @@ websearch_to_tsquery('simple',
--   ...)` and ts_headline for snippets. 'simple' does not fold diacritics as FTS5's
--   `remove_diacritics 2` does, and PostgreSQL's parser splits words differently
--   (it keeps e-mail addresses, URLs and hyphenated words whole as well).
-- * `id` is an identity column: an entry's id never comes back after it is deleted,
--   where SQLite's rowid may hand out the largest one again.
-- * The triggers are plpgsql functions that fix their search_path when created. A
--   trigger's WHEN keeps the same conditions as SQLite's.
-- * The text of an agent message or thought comes from `search_item_text`, written to
--   give what SQLite's json_each(body, '$.content') / json_extract gives: the `text`
--   of each element whose `type` is "text", joined by newlines in document order.
--   Like SQLite it walks the members of `content` when that is an object, takes a
--   scalar `content` as a list of one, takes the first of duplicate keys, reads an
--   element that is a string as the JSON it spells, and refuses the write with
--   "malformed JSON" when such a string is not JSON (so a one-block object such as
--   {"type":"text","text":"hi"} is refused on both engines). The store's text blocks
--   hold strings; a `text` of another JSON type keeps the spelling it has in the
--   body, but for true and false, which SQLite writes as 1 and 0.
-- * A tsvector holds at most 1 MB, and a long text of distinct words (a log, a dump)
--   would make its row fail to write. Only the first 200,000 characters of an
--   entry's text are indexed, which keeps any text under that limit; the text itself
--   is kept whole, and what lies past that point is not found by a search.
-- * TRUNCATE of messages or items fires no row trigger, so statement triggers drop
--   their entries. (Truncating sessions needs events to go too, which V1 refuses.)

CREATE TABLE search_entries (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id  TEXT COLLATE "C" NOT NULL,
    entry_id    TEXT COLLATE "C" NOT NULL,
    source      TEXT COLLATE "C" NOT NULL
                CHECK (source IN ('title', 'message', 'agent_message', 'agent_thought')),
    body        TEXT COLLATE "C",
    doc         tsvector GENERATED ALWAYS AS
                    (to_tsvector('simple', left(coalesce(body, ''), 200000))) STORED,
    UNIQUE (entry_id, source)
);

CREATE INDEX search_entries_by_session ON search_entries (session_id);

CREATE INDEX search_entries_doc ON search_entries USING gin (doc);

-- The value of the first member called `name` of an object, as SQLite's JSON paths
-- read it (PostgreSQL's own -> takes the last of duplicate keys); NULL for anything
-- that is not an object.
CREATE FUNCTION json_member(doc JSON, name TEXT) RETURNS JSON
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT m.value
    FROM json_each(CASE WHEN json_typeof(doc) = 'object' THEN doc END)
        WITH ORDINALITY AS m (key, value, n)
    WHERE m.key = name
    ORDER BY m.n
    LIMIT 1
$$;

CREATE FUNCTION search_item_text(body TEXT) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE STRICT SET search_path FROM CURRENT AS $$
DECLARE
    content JSON := json_member(body::json, 'content');
    element JSON;
    block JSON;
    piece JSON;
    parts TEXT[] := '{}';
BEGIN
    IF content IS NULL THEN
        RETURN NULL;
    END IF;
    -- Only one branch yields rows, so the ordinal orders the elements as written.
    FOR element IN
        SELECT x.value FROM (
            SELECT e.value, e.n FROM json_array_elements(
                    CASE WHEN json_typeof(content) = 'array' THEN content END)
                WITH ORDINALITY AS e (value, n)
            UNION ALL
            SELECT m.value, m.n FROM json_each(
                    CASE WHEN json_typeof(content) = 'object' THEN content END)
                WITH ORDINALITY AS m (key, value, n)
            UNION ALL
            SELECT content, 1 WHERE json_typeof(content) NOT IN ('array', 'object')
        ) AS x
        ORDER BY x.n
    LOOP
        block := element;
        IF json_typeof(element) = 'string' THEN
            BEGIN
                block := (element #>> '{}')::json;
            EXCEPTION WHEN data_exception THEN
                RAISE EXCEPTION 'malformed JSON' USING ERRCODE = 'invalid_json_text';
            END;
        END IF;
        -- Only a JSON string reads as the bare word text.
        CONTINUE WHEN (json_member(block, 'type') #>> '{}') IS DISTINCT FROM 'text';
        piece := json_member(block, 'text');
        CONTINUE WHEN piece IS NULL OR json_typeof(piece) = 'null';
        parts := parts || CASE json_typeof(piece)
            WHEN 'string' THEN piece #>> '{}'
            WHEN 'boolean' THEN CASE WHEN piece::text = 'true' THEN '1' ELSE '0' END
            ELSE piece::text
        END;
    END LOOP;
    IF cardinality(parts) = 0 THEN
        RETURN NULL;
    END IF;
    RETURN array_to_string(parts, E'\n');
END;
$$;

-- Titles.
CREATE FUNCTION search_session_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO search_entries (session_id, entry_id, source, body)
        VALUES (NEW.id, NEW.id, 'title', NEW.title);
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_session_insert AFTER INSERT ON sessions
    FOR EACH ROW WHEN (NEW.title IS NOT NULL)
    EXECUTE FUNCTION search_session_insert();

-- A rename drops the old entry and writes a new one, as in SQLite.
CREATE FUNCTION search_session_title() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM search_entries WHERE entry_id = OLD.id AND source = 'title';
    INSERT INTO search_entries (session_id, entry_id, source, body)
        SELECT NEW.id, NEW.id, 'title', NEW.title WHERE NEW.title IS NOT NULL;
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_session_title AFTER UPDATE OF title ON sessions
    FOR EACH ROW EXECUTE FUNCTION search_session_title();

CREATE FUNCTION search_session_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM search_entries WHERE entry_id = OLD.id AND source = 'title';
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_session_delete AFTER DELETE ON sessions
    FOR EACH ROW EXECUTE FUNCTION search_session_delete();

-- Messages: what was typed, the expansion the model got, and the transcript. Only a
-- message's state ever changes after it is written, and that is not indexed.
CREATE FUNCTION search_message_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO search_entries (session_id, entry_id, source, body)
        VALUES (NEW.session_id, NEW.id, 'message',
                concat_ws(E'\n', NEW.display_text, NEW.model_text, NEW.transcript));
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_message_insert AFTER INSERT ON messages
    FOR EACH ROW EXECUTE FUNCTION search_message_insert();

CREATE FUNCTION search_message_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM search_entries WHERE entry_id = OLD.id AND source = 'message';
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_message_delete AFTER DELETE ON messages
    FOR EACH ROW EXECUTE FUNCTION search_message_delete();

CREATE FUNCTION search_message_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM search_entries WHERE source = 'message';
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_message_truncate AFTER TRUNCATE ON messages
    FOR EACH STATEMENT EXECUTE FUNCTION search_message_truncate();

-- Recorded agent messages and thoughts: the text blocks of the item's ACP content.
-- A continued chunk rewrites the body, so the text is replaced on every update.
CREATE FUNCTION search_item_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO search_entries (session_id, entry_id, source, body)
        VALUES (NEW.session_id, NEW.id, NEW.kind, search_item_text(NEW.body));
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_item_insert AFTER INSERT ON items
    FOR EACH ROW WHEN (NEW.kind IN ('agent_message', 'agent_thought'))
    EXECUTE FUNCTION search_item_insert();

CREATE FUNCTION search_item_update() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE search_entries SET body = search_item_text(NEW.body)
        WHERE entry_id = NEW.id AND source = NEW.kind;
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_item_update AFTER UPDATE OF body ON items
    FOR EACH ROW WHEN (NEW.kind IN ('agent_message', 'agent_thought'))
    EXECUTE FUNCTION search_item_update();

CREATE FUNCTION search_item_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM search_entries WHERE entry_id = OLD.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_item_delete AFTER DELETE ON items
    FOR EACH ROW EXECUTE FUNCTION search_item_delete();

CREATE FUNCTION search_item_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM search_entries WHERE source IN ('agent_message', 'agent_thought');
    RETURN NULL;
END;
$$;

CREATE TRIGGER search_item_truncate AFTER TRUNCATE ON items
    FOR EACH STATEMENT EXECUTE FUNCTION search_item_truncate();

-- What was written before this migration, in SQLite's order: titles, then messages,
-- then agent messages and thoughts.
INSERT INTO search_entries (session_id, entry_id, source, body)
    SELECT id, id, 'title', title FROM sessions WHERE title IS NOT NULL ORDER BY id;
INSERT INTO search_entries (session_id, entry_id, source, body)
    SELECT session_id, id, 'message', concat_ws(E'\n', display_text, model_text, transcript)
    FROM messages ORDER BY session_id, seq;
INSERT INTO search_entries (session_id, entry_id, source, body)
    SELECT session_id, id, kind, search_item_text(body) FROM items
    WHERE kind IN ('agent_message', 'agent_thought') ORDER BY session_id, seq;
