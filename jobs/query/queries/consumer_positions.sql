-- Per group and queue at each broker's latest loaded snapshot: the committed offset, the last
-- consumed message (queue offset - 1) and the oldest unconsumed one (queue offset), with their
-- store times. A side is null when that message is not in the tables (not produced yet, or
-- deleted by retention before any load).
-- params: (none)
-- narrow: consumer_offsets by latest
-- narrow: messages by pointed
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
),
positions AS (  -- each offset with where its two messages sit in the commitlog
  SELECT o.broker, o.snapshot_id, o.group_name, o.topic, o.queue_id, o.consumer_offset,
         last_u.commitlog_offset AS last_consumed_at,
         next_u.commitlog_offset AS oldest_unconsumed_at
  FROM offsets o
  LEFT JOIN units last_u
    ON last_u.broker = o.broker AND last_u.topic = o.topic AND last_u.queue_id = o.queue_id
   AND last_u.queue_offset = o.consumer_offset - 1
  LEFT JOIN units next_u
    ON next_u.broker = o.broker AND next_u.topic = o.topic AND next_u.queue_id = o.queue_id
   AND next_u.queue_offset = o.consumer_offset
),
wanted AS (  -- the queue positions the answer names
  SELECT broker, topic, queue_id, consumer_offset - 1 AS queue_offset FROM offsets
  UNION ALL
  SELECT broker, topic, queue_id, consumer_offset AS queue_offset FROM offsets
),
pointed AS (  -- their messages' commitlog offsets (listed first by jobs/query/narrowing.py)
  SELECT u.broker, u.commitlog_offset AS physical_offset
  FROM wanted w
  JOIN units u
    ON u.broker = w.broker AND u.topic = w.topic AND u.queue_id = w.queue_id
   AND u.queue_offset = w.queue_offset
)
SELECT p.broker, p.snapshot_id, p.group_name, p.topic, p.queue_id, p.consumer_offset,
       last_m.msg_id AS last_consumed_msg_id, last_m.store_time AS last_consumed_store_time,
       next_m.msg_id AS oldest_unconsumed_msg_id,
       next_m.store_time AS oldest_unconsumed_store_time
FROM positions p
LEFT JOIN rmq.messages last_m
  ON last_m.broker = p.broker AND last_m.physical_offset = p.last_consumed_at
LEFT JOIN rmq.messages next_m
  ON next_m.broker = p.broker AND next_m.physical_offset = p.oldest_unconsumed_at
ORDER BY p.broker, p.group_name, p.topic, p.queue_id
