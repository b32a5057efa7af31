-- A message by the id clients see (UNIQ_KEY) or by its offsetMsgId (store host + offset).
-- params: msg_id
-- lookup: msg_id :msg_id
SELECT broker, topic, queue_id, queue_offset, physical_offset, msg_id, offset_msg_id,
       transaction_type, tags, keys, born_time, store_time, reconsume_times, body_size,
       properties
FROM rmq.messages
WHERE msg_id = :msg_id OR offset_msg_id = upper(:msg_id)
ORDER BY broker, physical_offset
