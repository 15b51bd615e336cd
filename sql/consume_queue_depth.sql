-- Messages and offset range per queue, from the consume_queue table.
-- Parameters: none. Run after registering the store's tables as views, e.g. in pyspark:
--   spark.read.format("delta").load("<store>/consume_queue").createOrReplaceTempView("consume_queue")
-- or, without the Delta jar: store.table("consume_queue").createOrReplaceTempView("consume_queue")
SELECT topic,
       queue_id,
       count(*)          AS messages,
       min(queue_offset) AS min_offset,
       max(queue_offset) + 1 AS max_offset
FROM consume_queue
GROUP BY topic, queue_id
ORDER BY topic, queue_id
