-- PostgreSQL twin of migrations/V12__items_made_by_their_update.sql. On SQLite an item
-- that one recorded update made, and that nothing changed since, names that update
-- (`made_by_event`, `made_by_start`, `made_by_length`) in place of a body and times of
-- its own. The target of that change is SQLite's file; PostgreSQL keeps every item's
-- body, as before. The three columns are added so that both engines read items with the same
-- statements; here they are always NULL, which the check keeps true.

ALTER TABLE items ADD COLUMN made_by_event BIGINT;
ALTER TABLE items ADD COLUMN made_by_start BIGINT;
ALTER TABLE items ADD COLUMN made_by_length BIGINT;
ALTER TABLE items ADD CONSTRAINT items_keep_their_bodies
    CHECK (made_by_event IS NULL AND made_by_start IS NULL AND made_by_length IS NULL);
