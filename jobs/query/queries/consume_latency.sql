-- Consume latency per consumer group and hour, from message traces: for every traced
-- consumption, the milliseconds from the send (its Pub context's time) to the end of the
-- consumption (its SubAfter's), as p50, p95 and p99, with the number of consumptions and of
-- failed ones. The hour is the consumption's end (UTC). Trace rows of every broker are joined
-- by msgId (a trace topic may live on another broker than the message it traces);
-- consumptions whose send was not traced, or whose client wrote no end time, are left out.
-- Percentiles are rounded at two decimals: of whole milliseconds they are exact there, so
-- every engine gives the same value (at one decimal, ties fall each engine's own way).
-- params: since
-- default: since = last 7 days of message_traces.store_date
WITH traces AS (
  SELECT * FROM rmq.message_traces WHERE store_date >= CAST(:since AS DATE)
),
sends AS (
  SELECT msg_id, min(trace_epoch_ms) AS sent_ms
  FROM traces WHERE trace_type = 'Pub' AND success GROUP BY msg_id
),
consumptions AS (  -- a SubAfter, its group from its SubBefore when it names none
  SELECT coalesce(a.group_name, b.group_name) AS group_name, a.msg_id,
         a.trace_time AS ended_at, a.trace_epoch_ms AS ended_ms, a.success
  FROM traces a
  LEFT JOIN traces b
    ON b.trace_type = 'SubBefore' AND b.request_id = a.request_id AND b.msg_id = a.msg_id
  WHERE a.trace_type = 'SubAfter' AND a.trace_time IS NOT NULL
),
latencies AS (
  SELECT c.group_name, date_trunc('HOUR', c.ended_at) AS hour, c.success,
         c.ended_ms - s.sent_ms AS latency_ms
  FROM consumptions c JOIN sends s ON s.msg_id = c.msg_id
)
SELECT group_name, hour, count(*) AS consumptions,
       sum(CASE WHEN success THEN 0 ELSE 1 END) AS failed,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms), 2) AS p50_ms,
       round(percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms), 2) AS p95_ms,
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY latency_ms), 2) AS p99_ms,
       max(latency_ms) AS max_ms
FROM latencies
GROUP BY group_name, hour
ORDER BY group_name, hour
