-- Transactional messages still undecided at each broker's latest loaded snapshot: neither
-- committed nor rolled back nor discarded, with the producer group the broker checks back,
-- how many checks it has made, and when its half message was stored and the snapshot taken
-- (the wait between them is what transaction_pending_too_long measures). Longest waiting first.
-- params: (none)
-- narrow: transactions by latest
WITH loaded AS (
  SELECT broker, snapshot_id, snapshot_seq, taken_at FROM rmq.snapshots WHERE status = 'loaded'
),
latest AS (
  SELECT l.broker, l.snapshot_id
  FROM loaded l
  JOIN (SELECT broker, max(snapshot_seq) AS snapshot_seq FROM loaded GROUP BY broker) m
    ON m.broker = l.broker AND m.snapshot_seq = l.snapshot_seq
)
SELECT t.broker, t.snapshot_id, t.producer_group, t.topic, t.msg_id, t.transaction_id,
       t.half_time, s.taken_at AS snapshot_taken_at, t.checks, t.last_check_time
FROM rmq.transactions t
JOIN latest l USING (broker, snapshot_id)
JOIN loaded s USING (broker, snapshot_id)
WHERE t.state = 'pending'
ORDER BY t.half_time, t.broker, t.msg_id
