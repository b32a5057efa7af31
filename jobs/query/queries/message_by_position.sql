-- The message at a queue position (topic, queue id, queue offset) on each broker: what a
-- consumer pulling that offset receives (an inner batch member has its own offset).
-- params: topic, queue_id, queue_offset
-- lookup: position :topic :queue_id :queue_offset
SELECT broker, topic, queue_id, queue_offset, physical_offset, inner_index, msg_id,
       offset_msg_id, tags, keys, store_time, body_size
FROM rmq.messages
WHERE topic = :topic AND queue_id = CAST(:queue_id AS INT)
  AND queue_offset = CAST(:queue_offset AS BIGINT) AND transaction_type IN ('NOT', 'COMMIT')
ORDER BY broker, physical_offset, inner_index
