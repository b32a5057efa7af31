-- A message's journey, from the tables alone: every copy the broker stored under its msgId
-- (UNIQ_KEY; an offsetMsgId of any copy finds it too), oldest first: the record as sent (or
-- its transaction half), each delay or timer re-put (REAL_TOPIC says where it goes next),
-- each retry (%RETRY%<group>, with its reconsume times and ORIGIN_MESSAGE_ID), its
-- dead-letter copy (%DLQ%<group>); and, at each snapshot, every consumer group's committed
-- offset on the copy's queue (for a delay copy, its delay level's offset) and whether it had
-- passed the copy. A copy no offset covers has one row with no group.
-- params: msg_id
-- lookup: msg_id :msg_id
WITH copies AS (
  SELECT broker, physical_offset, store_time, topic, queue_id, queue_offset,
         CASE WHEN substr(topic, 1, 5) = '%DLQ%' THEN 'dead letter'
              WHEN substr(topic, 1, 7) = '%RETRY%' THEN 'retry'
              WHEN topic IN ('SCHEDULE_TOPIC_XXXX', 'rmq_sys_wheel_timer') THEN 'delay'
              WHEN topic = 'RMQ_SYS_TRANS_HALF_TOPIC' THEN 'transaction half'
              ELSE 'stored' END AS step,
         reconsume_times, properties['REAL_TOPIC'] AS real_topic,
         properties['RETRY_TOPIC'] AS retry_topic,
         properties['ORIGIN_MESSAGE_ID'] AS origin_message_id, msg_id, offset_msg_id
  FROM rmq.messages
  WHERE msg_id IN (SELECT msg_id FROM rmq.messages
                   WHERE msg_id = :msg_id OR offset_msg_id = upper(:msg_id))
),
positions AS (
  SELECT broker, snapshot_id, group_name, topic, queue_id, consumer_offset AS committed
  FROM rmq.consumer_offsets
  UNION ALL
  SELECT broker, snapshot_id, concat('delay level ', delay_level), 'SCHEDULE_TOPIC_XXXX',
         queue_id, delay_offset
  FROM rmq.delay_offsets
),
at_snapshots AS (
  SELECT p.*, s.snapshot_seq
  FROM positions p JOIN rmq.snapshots s ON s.broker = p.broker AND s.snapshot_id = p.snapshot_id
  WHERE s.status = 'loaded'
)
SELECT c.broker, c.store_time, c.step, c.topic, c.queue_id, c.queue_offset, c.physical_offset,
       c.reconsume_times, c.real_topic, c.retry_topic, c.origin_message_id, c.msg_id,
       c.offset_msg_id, a.snapshot_id, a.group_name, a.committed,
       a.committed > c.queue_offset AS passed
FROM copies c
LEFT JOIN at_snapshots a
  ON a.broker = c.broker AND a.topic = c.topic AND a.queue_id = c.queue_id
ORDER BY c.broker, c.store_time, c.physical_offset, a.snapshot_seq, a.group_name
