-- PostgreSQL twin of migrations/V11__items_indexed_under_their_row_ids.sql, which
-- changes nothing here. On SQLite, FTS5 names an item's text by the item's row id in
-- place of an entry of its own; PostgreSQL's `search_entries` row is where its index
-- keeps the text and the `doc` made from it (V4), so an item keeps its entry. The
-- version is taken so that both engines count their schemas alike.
SELECT 1;
