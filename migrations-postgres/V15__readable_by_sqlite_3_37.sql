-- PostgreSQL twin of migrations/V15__readable_by_sqlite_3_37.sql. On SQLite the search
-- view and two delete triggers are made again without `concat_ws`, `->` and `->>`, so
-- that an SQLite as old as 3.37.2 can read the database. PostgreSQL has these natively
-- and its triggers are its own; this version keeps the two engines' schema versions in
-- step. Nothing here is a path.

SELECT 1;
