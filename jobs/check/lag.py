"""Consumer lag of one snapshot, computed from the store the way the broker computes it.

RocketMQ's ``consumerProgress`` (spec §8, "Consumer lag as reported by the broker"): for
every topic that has a ``topic@group`` entry in the offset table, every queue id in
0..readQueueNums-1; broker offset = the queue's max offset, Diff = broker offset - consumer
offset, LastTime = store time of the message at consumer offset - 1. On top of that the
files say what the broker's numbers hide, each kept visible as a status and never summed
into a negative lag:

  ok          min_offset <= consumer_offset <= max_offset
  no_offset   the group has offsets for the topic but none for this queue
  below_min   retention deleted messages before the group consumed them (lost_messages)
  above_max   the offset is past the last message written
  no_queue    an offset for a queue the store has no units for and topics.json does not list

One Spark SQL query over the views of :mod:`jobs.check.views`, run by a check engine
(:mod:`jobs.check.engines`).
"""

from __future__ import annotations

from jobs.check.checks import SYSTEM_TOPIC
from jobs.check.views import SnapshotScope

TOPIC_KIND_SQL = """
    CASE WHEN left({t}, 7) = '%RETRY%' THEN 'retry'
         WHEN left({t}, 5) = '%DLQ%' THEN 'dlq'
         WHEN {system} THEN 'system'
         ELSE 'normal' END"""


TOPIC_KIND = TOPIC_KIND_SQL.format(t="m.topic", system=SYSTEM_TOPIC.format(t="m.topic"))


def consumer_lag_sql(scope: SnapshotScope) -> str:
    """The query of the ``consumer_lag`` rows of ``scope`` (contract column order)."""
    taken_at = (f"TIMESTAMP '{scope.taken_at.isoformat(sep=' ')}'" if scope.taken_at
                else "CAST(NULL AS TIMESTAMP)")
    return f"""
        WITH offsets AS (
            SELECT group_name, topic, queue_id, consumer_offset, pull_offset FROM rc_offsets),
        listed AS (  -- queue ids the broker iterates for a topic: 0 .. readQueueNums - 1
            SELECT topic, read_queue_nums, explode(sequence(0, read_queue_nums - 1)) AS queue_id
            FROM rc_topics WHERE read_queue_nums > 0),
        keys AS (
            SELECT DISTINCT o.group_name, l.topic, l.queue_id
            FROM (SELECT DISTINCT group_name, topic FROM offsets) o
            JOIN listed l ON l.topic = o.topic
            UNION
            SELECT group_name, topic, queue_id FROM offsets),
        positioned AS (
            SELECT k.group_name, k.topic, k.queue_id, o.consumer_offset, o.pull_offset,
                   b.queue_type,
                   CASE WHEN b.topic IS NOT NULL THEN b.min_offset
                        WHEN l.topic IS NOT NULL THEN 0 END AS min_offset,
                   CASE WHEN b.topic IS NOT NULL THEN b.max_offset
                        WHEN l.topic IS NOT NULL THEN 0 END AS max_offset
            FROM keys k
            LEFT JOIN offsets o USING (group_name, topic, queue_id)
            LEFT JOIN rc_bounds b USING (topic, queue_id)
            LEFT JOIN listed l USING (topic, queue_id)),
        classified AS (
            SELECT *,
                   CASE WHEN max_offset IS NULL THEN 'no_queue'
                        WHEN consumer_offset IS NULL THEN 'no_offset'
                        WHEN consumer_offset < min_offset THEN 'below_min'
                        WHEN consumer_offset > max_offset THEN 'above_max'
                        ELSE 'ok' END AS status,
                   greatest(consumer_offset, min_offset) AS first_unconsumed
            FROM positioned),
        measured AS (
            SELECT c.*,
                   CASE WHEN status IN ('ok', 'below_min')
                        THEN max_offset - first_unconsumed
                        WHEN status = 'above_max' THEN 0 END AS lag_messages,
                   CASE WHEN status = 'below_min' THEN min_offset - consumer_offset
                        ELSE 0 END AS lost_messages
            FROM classified c),
        unconsumed AS (  -- the units still to consume: bytes, and the oldest one
            SELECT m.group_name, m.topic, m.queue_id, sum(u.size) AS lag_bytes,
                   min_by(u.commitlog_offset, u.queue_offset) AS oldest_offset
            FROM measured m
            JOIN rc_units u ON u.topic = m.topic AND u.queue_id = m.queue_id
             AND u.queue_offset + coalesce(u.batch_size, 1) > m.first_unconsumed
             AND u.queue_offset < m.max_offset
            WHERE m.lag_messages > 0
            GROUP BY m.group_name, m.topic, m.queue_id),
        last_consumed AS (  -- the unit of the message at consumer_offset - 1
            SELECT m.group_name, m.topic, m.queue_id, u.commitlog_offset AS last_offset
            FROM measured m
            JOIN rc_units u ON u.topic = m.topic AND u.queue_id = m.queue_id
             AND u.queue_offset <= m.consumer_offset - 1
             AND m.consumer_offset - 1 < u.queue_offset + coalesce(u.batch_size, 1)
            WHERE m.status IN ('ok', 'above_max') AND m.consumer_offset > m.min_offset),
        popped AS (  -- pop consumers' messages taken and neither acked nor back yet
            SELECT group_name, topic, queue_id, count(*) AS popped_messages
            FROM rc_pop GROUP BY group_name, topic, queue_id)
        SELECT {scope.broker_sql} AS broker, {scope.snapshot_sql} AS snapshot_id,
               m.group_name, m.topic, m.queue_id,
               {TOPIC_KIND} AS topic_kind,
               m.status, m.min_offset, m.max_offset, m.consumer_offset,
               m.max_offset - coalesce(m.consumer_offset, 0) AS broker_diff,
               m.lag_messages, m.lost_messages,
               CASE WHEN m.lag_messages IS NULL THEN NULL
                    ELSE coalesce(x.lag_bytes, 0) END AS lag_bytes,
               oldest.store_time AS oldest_unconsumed_store_time,
               CAST(unix_micros({taken_at}) - unix_micros(oldest.store_time) AS DOUBLE) / 1e6
                   AS lag_seconds,
               last.store_time AS last_consumed_store_time,
               {taken_at} AS snapshot_taken_at,
               CASE WHEN m.pull_offset IS NOT NULL AND m.consumer_offset IS NOT NULL
                    THEN greatest(m.pull_offset, m.consumer_offset, 0)
                         - greatest(m.consumer_offset, 0) END AS inflight_messages,
               coalesce(p.popped_messages, 0) AS popped_messages
        FROM measured m
        LEFT JOIN unconsumed x USING (group_name, topic, queue_id)
        LEFT JOIN last_consumed lc USING (group_name, topic, queue_id)
        LEFT JOIN popped p USING (group_name, topic, queue_id)
        LEFT JOIN rc_msg oldest ON oldest.physical_offset = x.oldest_offset
        LEFT JOIN rc_msg last ON last.physical_offset = lc.last_offset
    """
