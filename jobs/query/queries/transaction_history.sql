-- A transactional message's state at each snapshot that saw it change or still pending
-- (rmq.transactions): pending, then committed, rolled back or discarded after the broker's
-- last check; with its producer group, checks and the seconds its decision took.
-- params: msg_id
SELECT t.broker, t.snapshot_id, s.snapshot_seq, t.state, t.producer_group, t.topic,
       t.half_time, t.checks, t.last_check_time, t.decided_time, t.seconds_to_decision,
       t.committed_offset
FROM rmq.transactions t JOIN rmq.snapshots s USING (broker, snapshot_id)
WHERE t.msg_id = :msg_id
ORDER BY t.broker, s.snapshot_seq
