-- V14 is undone: a sealed segment is indexed in the write that seals it, as on
-- PostgreSQL, and `search_waiting` goes. Measured without it, the proxy's streaming
-- figures V14 was added for hold as well or better (BENCHMARKS.md, the table of kept
-- mechanisms), so it no longer pays for the writer's idle-time scheduling it needs.
--
-- Each segment still waiting is indexed first, as the writer would have: its entry
-- under the id below the lowest (V11), its text read through `search_text` as every
-- entry's is (V10). A row naming a segment that is gone or already indexed is only
-- dropped, as the writer dropped it. No other row changes. Nothing here is a path.

DELETE FROM search_waiting
WHERE NOT EXISTS (SELECT 1 FROM item_parts p JOIN items i ON i.id = p.item_id
                  WHERE p.session_id = search_waiting.session_id
                    AND p.item_id = search_waiting.item_id
                    AND p.part = search_waiting.part AND p.sealed = 1
                    AND i.kind IN ('agent_message', 'agent_thought'))
   OR EXISTS (SELECT 1 FROM search_entries e
              WHERE e.entry_id = search_waiting.item_id || '/' || search_waiting.part);

INSERT INTO search_entries (id, session_id, entry_id, source)
    SELECT (SELECT min(coalesce(min(id), 0), 0) FROM search_entries)
               - row_number() OVER (ORDER BY w.session_id, w.item_id, w.part),
           w.session_id, w.item_id || '/' || w.part, i.kind
    FROM search_waiting w JOIN items i ON i.id = w.item_id;

INSERT INTO search (rowid, body)
    SELECT e.id, t.body
    FROM search_waiting w
    JOIN search_entries e ON e.entry_id = w.item_id || '/' || w.part
    JOIN search_text t ON t.id = e.id;

DROP TABLE search_waiting;
