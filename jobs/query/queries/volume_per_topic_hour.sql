-- Messages and bytes per topic per hour of store time (UTC), retry/DLQ/system topics included,
-- from the day :since on: by default the last 7 days of store time loaded, so that only those
-- days' partitions are read, however many nights the lakehouse holds.
-- params: since (optional; YYYY-MM-DD)
-- default: since = last 7 days of messages.store_date
SELECT broker, topic, date_trunc('HOUR', store_time) AS hour,
       count(*) AS messages, sum(total_size) AS bytes
FROM rmq.messages
WHERE store_date >= CAST(:since AS DATE)
GROUP BY broker, topic, date_trunc('HOUR', store_time)
ORDER BY hour, broker, topic
