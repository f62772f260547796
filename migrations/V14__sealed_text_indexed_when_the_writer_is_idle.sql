-- A sealed segment of a streamed agent message or thought is indexed for search when
-- the store's writer has nothing else to do, not in the write that seals it (see
-- BENCHMARKS.md, V14: indexing and flushing FTS5's terms for a 64 KiB segment was
-- about half of what recording a fast stream cost, on the CPU the agent and the relay
-- need while the stream runs).
--
-- `search_waiting` names each sealed segment not indexed yet. The write that seals a
-- segment adds its row; the writer indexes what waits, and takes the rows out, in
-- the same transaction, once it has been idle a moment, or when the oldest has waited
-- too long, or as its store closes, or before a search that store runs (`db::group`,
-- `db::search`). A segment is in the index or waiting, never both. Deleting a session
-- deletes its rows. Every segment already sealed is indexed, so the table starts
-- empty. Nothing here is a path.

CREATE TABLE search_waiting (
    session_id  TEXT NOT NULL,
    item_id     TEXT NOT NULL,
    part        INTEGER NOT NULL,
    PRIMARY KEY (session_id, item_id, part)
) STRICT, WITHOUT ROWID;
