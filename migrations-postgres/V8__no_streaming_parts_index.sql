-- PostgreSQL twin of migrations/V8__no_streaming_parts_index.sql: the partial index
-- of streaming parts cost a page per streaming session in every commit and no query
-- needs it (the store finds those parts through the primary key). No row changes.

DROP INDEX item_parts_streaming;
