-- The store writes the search index beside each message, item and sealed segment it
-- writes (db/search.rs), in place of the insert and update triggers of V4 and V6.
--
-- A statement that fires a trigger and may fail midway runs in a statement savepoint,
-- and FTS5 writes all it holds in memory to disk at every savepoint of a transaction
-- that has written to it: each message or item inserted made an index segment of its
-- own, and then merges of them. Written as statements of their own, which open no
-- savepoint, the index entries of a whole transaction reach the disk once, at its
-- commit. What the store writes is what these triggers wrote: the same entries, the
-- same text, in the same transaction as the row.
--
-- The delete triggers stay (a delete is rare, and often of many rows at once), and so
-- do the title triggers (a session is made once and seldom renamed). Nothing written
-- before this migration changes.

DROP TRIGGER search_message_insert;
DROP TRIGGER search_item_insert;
DROP TRIGGER search_item_update;
DROP TRIGGER search_part_insert;
