-- One message by its store message id (store host, port, commitlog offset): RocketMQ's viewMessageById.
-- Same row as store.query_by_id(msg_id) for an id of this store; reads the one commitlog file holding it.
--   storelib sql message_by_id msg_id=7F00000100002A9F0000000000000000
-- :msg_id string
SELECT msg_id, topic, queue_id, queue_offset, physical_offset AS commitlog_offset, size, store_timestamp,
       born_timestamp, born_host, store_host, tags, keys, uniq_key, properties, body
FROM messages
WHERE msg_id = upper(:msg_id)
