-- PostgreSQL twin of migrations/V14__sealed_text_indexed_when_the_writer_is_idle.sql.
-- On SQLite a sealed segment is indexed for search once the store's writer is idle.
-- PostgreSQL's triggers index each segment as it is written, in a transaction whose
-- cost does not grow with FTS5's flushes, so nothing waits and no table is needed;
-- this version keeps the two engines' schema versions in step. Nothing here is a path.

SELECT 1;
