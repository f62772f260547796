-- PostgreSQL twin of migrations/V18__search_indexed_as_written.sql: this engine always
-- indexed each sealed segment as it was written and never had `search_waiting`, so
-- it has nothing to change; the version keeps both engines' numbers in step.

SELECT 1;
