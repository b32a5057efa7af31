-- The slowest traced consumptions: how long each consumer's listener took (SubAfter's cost),
-- with the group, the consuming host, the message (topic from its Pub when traced), the
-- retry and whether it succeeded. Slowest first, the 100 slowest since the date.
-- params: since
-- default: since = last 7 days of message_traces.store_date
WITH traces AS (
  SELECT * FROM rmq.message_traces WHERE store_date >= CAST(:since AS DATE)
),
topics AS (
  SELECT msg_id, min(topic) AS topic FROM traces WHERE trace_type = 'Pub' GROUP BY msg_id
)
SELECT coalesce(a.group_name, b.group_name) AS group_name, a.trace_born_host AS consumer_host,
       a.msg_id, t.topic, b.retry_times, a.cost_ms, a.success, b.trace_time AS started_at,
       a.trace_time AS ended_at, a.broker, a.physical_offset
FROM traces a
LEFT JOIN traces b
  ON b.trace_type = 'SubBefore' AND b.request_id = a.request_id AND b.msg_id = a.msg_id
LEFT JOIN topics t ON t.msg_id = a.msg_id
WHERE a.trace_type = 'SubAfter'
ORDER BY a.cost_ms DESC, a.broker, a.physical_offset, a.context_position
LIMIT 100
