-- Traced consumptions that failed (a SubAfter with success false: the listener returned
-- RECONSUME_LATER or SUSPEND, threw, or timed out; context_code says which), with the group,
-- the consuming host, the message, its retry count and when.
-- params: since
-- default: since = last 7 days of message_traces.store_date
WITH traces AS (
  SELECT * FROM rmq.message_traces WHERE store_date >= CAST(:since AS DATE)
),
topics AS (
  SELECT msg_id, min(topic) AS topic FROM traces WHERE trace_type = 'Pub' GROUP BY msg_id
)
SELECT coalesce(a.group_name, b.group_name) AS group_name, a.trace_born_host AS consumer_host,
       a.msg_id, t.topic, b.retry_times, a.context_code, a.cost_ms, b.trace_time AS started_at,
       a.trace_time AS ended_at, a.broker, a.physical_offset
FROM traces a
LEFT JOIN traces b
  ON b.trace_type = 'SubBefore' AND b.request_id = a.request_id AND b.msg_id = a.msg_id
LEFT JOIN topics t ON t.msg_id = a.msg_id
WHERE a.trace_type = 'SubAfter' AND NOT a.success
ORDER BY a.trace_time, a.broker, a.physical_offset, a.context_position
