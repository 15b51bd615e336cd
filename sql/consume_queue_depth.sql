-- Messages and offset range per queue, from the consume_queue table.
-- No parameters. Register the views first (storelib.sql.register_views), or run (the store: $STORELIB_STORE):
--   storelib sql consume_queue_depth
SELECT topic,
       queue_id,
       count(*)          AS messages,
       min(queue_offset) AS min_offset,
       max(queue_offset) + 1 AS max_offset
FROM consume_queue
GROUP BY topic, queue_id
ORDER BY topic, queue_id
