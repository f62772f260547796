-- PostgreSQL twin of migrations/V7__search_written_by_the_store.sql, which takes
-- SQLite's insert and update search triggers away because FTS5 flushes its index at
-- every statement savepoint. PostgreSQL has no FTS5: its triggers keep writing
-- `search_entries` in the statement of the row they follow, at no such cost, so this
-- version changes nothing here and only keeps the two engines' versions alike.

SELECT 1;
