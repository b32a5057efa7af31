-- Per group and queue at each broker's latest loaded snapshot: the committed offset, the last
-- consumed message (queue offset - 1) and the oldest unconsumed one (queue offset), with their
-- store times. A side is null when that message is not in the tables (not produced yet, or
-- deleted by retention before any load).
-- params: (none)
WITH loaded AS (
  SELECT broker, snapshot_id, snapshot_seq FROM rmq.snapshots WHERE status = 'loaded'
),
latest AS (
  SELECT l.broker, l.snapshot_id
  FROM loaded l
  JOIN (SELECT broker, max(snapshot_seq) AS snapshot_seq FROM loaded GROUP BY broker) m
    ON m.broker = l.broker AND m.snapshot_seq = l.snapshot_seq
),
offsets AS (
  SELECT o.* FROM rmq.consumer_offsets o JOIN latest l USING (broker, snapshot_id)
),
units AS (
  SELECT broker, topic, queue_id, queue_offset, commitlog_offset
  FROM rmq.queue_entries WHERE kind <> 'filler'
)
SELECT o.broker, o.snapshot_id, o.group_name, o.topic, o.queue_id, o.consumer_offset,
       last_m.msg_id AS last_consumed_msg_id, last_m.store_time AS last_consumed_store_time,
       next_m.msg_id AS oldest_unconsumed_msg_id,
       next_m.store_time AS oldest_unconsumed_store_time
FROM offsets o
LEFT JOIN units last_u
  ON last_u.broker = o.broker AND last_u.topic = o.topic AND last_u.queue_id = o.queue_id
 AND last_u.queue_offset = o.consumer_offset - 1
LEFT JOIN rmq.messages last_m
  ON last_m.broker = last_u.broker AND last_m.physical_offset = last_u.commitlog_offset
LEFT JOIN units next_u
  ON next_u.broker = o.broker AND next_u.topic = o.topic AND next_u.queue_id = o.queue_id
 AND next_u.queue_offset = o.consumer_offset
LEFT JOIN rmq.messages next_m
  ON next_m.broker = next_u.broker AND next_m.physical_offset = next_u.commitlog_offset
ORDER BY o.broker, o.group_name, o.topic, o.queue_id
