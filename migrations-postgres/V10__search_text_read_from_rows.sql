-- PostgreSQL twin of migrations/V10__search_text_read_from_rows.sql. PostgreSQL has no
-- FTS5 table to take text out of: `search_entries` keeps the text its `doc` is made
-- from and its headlines are cut from, as V4 made it. What the two share is the index
-- no query reads: entries are found by id or by `(entry_id, source)`, never by session.

DROP INDEX search_entries_by_session;
