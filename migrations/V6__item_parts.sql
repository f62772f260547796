-- A streamed agent message or thought grows by appended parts instead of being
-- rewritten whole on every recorded batch. Rewriting made a long turn quadratic: each
-- batch read, re-encoded and wrote the whole coalesced message, and V4's search
-- trigger re-indexed all of it again.
--
-- While a message is the last entry of its session (a later chunk may still continue
-- it), each batch that continues it adds one row here holding only the content blocks
-- that batch appended, in the order they came. A reader folds the parts onto the
-- item's row the way chunks coalesce (adjacent text with the same annotations and
-- `_meta` joins into one block), so what it reads is the same message a whole row
-- would hold. Once a later entry follows the message or its turn ends, the parts are
-- folded into the row once, deleted, and the row's search entry re-indexed once: a
-- message that is still streaming is found by search only by its first part.
--
-- Nothing here is a path: only blocks an agent sent, as `items.body` holds them.

CREATE TABLE item_parts (
    session_id  TEXT NOT NULL REFERENCES sessions (id),
    item_id     TEXT NOT NULL REFERENCES items (id),
    part        INTEGER NOT NULL CHECK (part >= 1),
    content     TEXT NOT NULL CHECK (CASE WHEN json_valid(content)
                            THEN json_type(content) = 'array' ELSE 0 END),
    created_at  TEXT NOT NULL,
    PRIMARY KEY (session_id, item_id, part)
) STRICT;
