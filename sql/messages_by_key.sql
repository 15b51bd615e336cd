-- Messages of a topic whose KEYS (or UNIQ_KEY) include a key, newest first: RocketMQ's queryMessage.
-- Same rows as store.query_by_key(topic, key, max_num, begin, end), found the same way: the index's hash slot.
--   storelib sql messages_by_key topic=OrderEvents key=order-42
-- :topic string
-- :key string
-- :begin timestamp = 0
-- :end timestamp = 253402300799000
-- :max_num int = 32
SELECT DISTINCT msg_id, topic, queue_id, queue_offset, physical_offset AS commitlog_offset, store_timestamp, tags, keys,
       uniq_key
FROM messages_by_key
WHERE topic = :topic
  AND key = :key
  AND store_timestamp BETWEEN :begin AND :end
ORDER BY commitlog_offset DESC
LIMIT least(:max_num, 64)
