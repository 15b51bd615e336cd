-- Messages of a topic stored within a time range (both ends included), in store order.
-- The first row of each queue is at store.search_offset(topic, queue_id, begin).
--   storelib sql messages_by_time topic=OrderEvents begin=2026-11-22T00:00:00+00:00 end=2026-11-23T00:00:00+00:00
-- :topic string
-- :begin timestamp
-- :end timestamp
SELECT msg_id, topic, queue_id, queue_offset, physical_offset AS commitlog_offset, store_timestamp, tags, keys
FROM messages
WHERE topic = :topic
  AND store_timestamp BETWEEN :begin AND :end
ORDER BY physical_offset
