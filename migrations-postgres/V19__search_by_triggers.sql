-- PostgreSQL twin of migrations/V19__search_by_triggers.sql (a measurement variant):
-- this engine's triggers have written its search entries all along (V7 took only
-- SQLite's away), so nothing changes here; the two engines' versions stay alike.

SELECT 1;
