-- Every trace context about a message (message traces, from clients with tracing on): its
-- send (Pub: producer group and host, cost, result), each consumption's start and end
-- (SubBefore, SubAfter: group, consuming host, retry, duration, success) and, for a
-- transactional message, each answer of its local transaction (EndTransaction: the first
-- and those to the broker's checks), oldest first. A batch send's one Pub names all its
-- members, so it is found by any of them.
-- params: msg_id
SELECT trace_type, trace_time, group_name, trace_born_host, client_host, store_host, topic,
       msg_id, offset_msg_id, request_id, cost_ms, success, retry_times, context_code,
       msg_type, transaction_state, from_transaction_check, broker, physical_offset,
       context_position
FROM rmq.message_traces
WHERE msg_id = :msg_id
   OR (trace_type = 'Pub' AND concat(',', msg_id, ',') LIKE concat('%,', :msg_id, ',%'))
ORDER BY trace_time, broker, physical_offset, context_position
