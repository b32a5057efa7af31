-- Messages and bytes per topic per hour of store time (UTC), retry/DLQ/system topics included.
-- params: (none)
SELECT broker, topic, date_trunc('HOUR', store_time) AS hour,
       count(*) AS messages, sum(total_size) AS bytes
FROM rmq.messages
GROUP BY broker, topic, date_trunc('HOUR', store_time)
ORDER BY hour, broker, topic
