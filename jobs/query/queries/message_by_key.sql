-- Messages carrying a key (the KEYS property), newest first: what `mqadmin queryMsgByKey` finds.
-- params: key
-- lookup: key :key
SELECT broker, topic, queue_id, queue_offset, physical_offset, msg_id, offset_msg_id,
       tags, keys, store_time, body_size
FROM rmq.messages
WHERE array_contains(keys, :key)
ORDER BY store_time DESC, broker, physical_offset
