"""The consistency checks: one SQL query each over a snapshot's views (jobs.check.views).

Every check is explainable from the spec (store-format.md §8, numbers in brackets) and
returns *findings*: one row per scope (a queue, a group's queue, a file, the broker) with
how many items it covers, what should hold, what holds instead, a few offsets to start
from, and a one-line explanation. A check that finds nothing returns no row.

Each query yields the columns of ``FINDING_COLUMNS``; :mod:`jobs.check.reconcile` adds broker,
snapshot and time and writes them to ``check_results``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from jobs.check.views import SnapshotScope
from jobs.lakehouse.delta_io import sql_string
from rmqlib.common import races

FINDING_COLUMNS = ("check_name", "severity", "scope", "topic", "queue_id", "group_name",
                   "affected", "expected", "observed", "sample_offsets", "explanation")

# Groups every broker creates for itself (subscriptionGroup.json on 5.x; 4.9.x does not
# list CID_RMQ_SYS_TRANS, the transaction checker's group, though it commits offsets).
BUILTIN_GROUPS = ("CID_ONS-HTTP-PROXY", "CID_ONSAPI_OWNER", "CID_ONSAPI_PERMISSION",
                  "CID_ONSAPI_PULL", "CID_RMQ_SYS_TRANS", "FILTERSRV_CONSUMER",
                  "SELF_TEST_C_GROUP", "TOOLS_CONSUMER")

# The one rule of rmqlib.common.races, over a file's quarantine rows: a race of a hot copy
# (a torn tail at the write position, a hot-copy state) warns in a store whose abort file
# is present (the broker was running or was killed) and is an error in a cleanly stopped
# one; RACES selects those rows (the rest is damage: quarantined_region).
RACE_SEVERITY = races.severity_sql("min(f.reason)", "{abort}")
RACES = " OR ".join(f"f.reason LIKE '{prefix}%'" for prefix in races.RACE_PREFIXES)

# Broker-internal topics: 4.9.x keeps some (RMQ_SYS_TRANS_OP_HALF_TOPIC) out of topics.json.
SYSTEM_TOPIC = "({t} = 'SCHEDULE_TOPIC_XXXX' OR lower(left({t}, 8)) = 'rmq_sys_')"
# The scope columns of a finding about the broker or a file: no topic, queue or group.
NO_SCOPE = ("CAST(NULL AS STRING) AS topic, CAST(NULL AS INT) AS queue_id, "
            "CAST(NULL AS STRING) AS group_name")
QUEUE_SCOPE = "concat('topic=', {t}.topic, ' queue=', {t}.queue_id)"
GROUP_QUEUE_SCOPE = ("concat('group=', {t}.group_name, ' topic=', {t}.topic, ' queue=', "
                     "{t}.queue_id)")
SAMPLES = "slice(array_sort(collect_list({c})), 1, 5)"
# A timestamp as text, the same on both check engines (a cast to string is not: Spark
# writes "10:05:41.467", DuckDB "10:05:41.467+00"); in UTC, the engines' session zone.
TIME_TEXT = "date_format({t}, 'yyyy-MM-dd HH:mm:ss')"


@dataclass(frozen=True)
class TransactionRules:
    """``transactions`` in config/alerts.yaml: how long a transaction may stay pending
    before transaction_pending_too_long reports it, and at which severity."""

    max_pending_minutes: float = 10.0
    severity: str = "warning"


@dataclass(frozen=True)
class Check:
    """A named check: its SQL (formatted with the scope), the spec rule behind it and the
    one-line explanation an operator reads."""

    name: str
    rule: str  # where in the spec the invariant comes from
    sql: str
    explanation: str = ""

    def query(self, scope: SnapshotScope) -> str:
        checkpoint = (f"TIMESTAMP '{scope.checkpoint_physic_msg_time.isoformat(sep=' ')}'"
                      if scope.checkpoint_physic_msg_time else "CAST(NULL AS TIMESTAMP)")
        return self.sql.format(
            name=self.name, explanation=sql_string(self.explanation),
            cl_min=scope.commitlog_min_offset, cl_max=scope.commitlog_max_offset,
            queue_scope=QUEUE_SCOPE.format(t="f"), samples_q=SAMPLES.format(c="f.queue_offset"),
            samples_cl=SAMPLES.format(c="f.commitlog_offset"),
            samples_pos=SAMPLES.format(c="f.physical_offset"),
            builtin=", ".join(f"'{g}'" for g in BUILTIN_GROUPS),
            system_topic=SYSTEM_TOPIC.format(t="f.topic"), no_scope=NO_SCOPE,
            group_queue_scope=GROUP_QUEUE_SCOPE.format(t="f"),
            checkpoint=checkpoint,
            checkpoint_text=TIME_TEXT.format(t=checkpoint),
            newest_text=TIME_TEXT.format(t="max(f.store_time)"),
            min_delivery=TIME_TEXT.format(t="min(f.delivery_time)"),
            max_delivery=TIME_TEXT.format(t="max(f.delivery_time)"),
            abort="true" if scope.abort_present else "false",
            max_pending_s=scope.max_pending_transaction_seconds,
            oldest_half=TIME_TEXT.format(t="min(f.half_time)"),
            pending_severity=scope.pending_transaction_severity,
            config_v2="true" if scope.config_v2 else "false",
            taken_at=(f"TIMESTAMP '{scope.taken_at.isoformat(sep=' ')}'" if scope.taken_at
                      else "current_timestamp()"))


def stream_check(name: str, rule: str, stream: str, expected: str, observed: str,
                 explanation: str) -> Check:
    """An error per file with quarantine rows of ``stream``: the load's findings of a kind
    that are no unreadable bytes (a DLedger index unit, a compacted queue, a controller
    file that disagrees with what it describes), each file's positions sampled; a file
    whose only rows are races of a hot copy (the unit being written) warns in a hot store
    (rmqlib.common.races)."""
    severity = (f"CASE WHEN min(f.reason) = max(f.reason) THEN "
                f"{races.severity_sql('min(f.reason)', '{abort}', after_label=True)} "
                "ELSE 'error' END")
    return Check(name, rule, f"""
        SELECT '{{name}}' AS check_name, {severity} AS severity,
               concat('file=', f.file) AS scope,
               {{no_scope}}, count(*) AS affected,
               {sql_string(expected)} AS expected,
               concat(count(*), {sql_string(' ' + observed + ': ')},
                      substring(first(f.reason), 1, 160)) AS observed,
               slice(array_sort(collect_list(f.offset)), 1, 5) AS sample_offsets,
               {{explanation}} AS explanation
        FROM rc_quarantine f WHERE f.stream = {sql_string(stream)} GROUP BY f.file""",
                 explanation)


def race_check(name: str, rule: str, prefix: str, affected: str, expected: str,
               observed: str, explanation: str) -> Check:
    """A finding per file with quarantine rows of a race of a hot copy (reasons starting
    with ``prefix``), its severity by the one rule of rmqlib.common.races."""
    return Check(name, rule, f"""
        SELECT '{{name}}' AS check_name, {RACE_SEVERITY} AS severity,
               concat('file=', f.file) AS scope,
               {{no_scope}}, {affected} AS affected,
               {sql_string(expected)} AS expected,
               {observed} AS observed,
               slice(array_sort(collect_list(f.offset)), 1, 5) AS sample_offsets,
               {{explanation}} AS explanation
        FROM rc_quarantine f WHERE f.reason LIKE '{prefix}%' GROUP BY f.file""", explanation)


CHECKS: tuple[Check, ...] = (
    Check("cq_unit_without_record", "§8.7", """
        SELECT '{name}' AS check_name, 'error' AS severity, {queue_scope} AS scope,
               f.topic, f.queue_id, CAST(NULL AS STRING) AS group_name,
               count(*) AS affected,
               'every unit points at the start of a record in the commitlog' AS expected,
               concat(count(*), ' unit(s) point at commitlog offsets where no record starts')
                   AS observed,
               {samples_q} AS sample_offsets,
               {explanation} AS explanation
        FROM rc_unit_vs_record f WHERE f.missing
        GROUP BY f.topic, f.queue_id""",
        (
          "consume-queue units pointing nowhere: the commitlog lost or damaged these records "
          "(see quarantine), or the queue file was written by another store; queue offsets "
          "listed"
        )),
    Check("cq_unit_mismatch", "§8.7, §8.9", """
        SELECT '{name}' AS check_name, 'error' AS severity, {queue_scope} AS scope,
               f.topic, f.queue_id, CAST(NULL AS STRING) AS group_name,
               count(*) AS affected,
               concat('unit size = record TOTALSIZE, same topic, queue id and queue offset, ',
                      'tagsCode = hash(TAGS)') AS expected,
               concat_ws(', ',
                   concat(count_if(f.size <> f.total_size), ' size'),
                   concat(count_if(NOT f.lmq AND (f.record_topic <> f.topic
                                   OR f.record_queue_id <> f.queue_id)), ' topic/queue'),
                   concat(count_if(NOT f.lmq AND f.record_queue_offset <> f.queue_offset),
                          ' queue offset'),
                   concat(count_if(f.topic <> 'SCHEDULE_TOPIC_XXXX' AND NOT f.lmq
                                   AND f.effective_tags_code <> f.record_tags_code),
                          ' tagsCode')) AS observed,
               {samples_q} AS sample_offsets,
               {explanation} AS explanation
        FROM rc_unit_vs_record f
        WHERE NOT f.missing AND (f.size <> f.total_size
           OR (NOT f.lmq AND (f.record_topic <> f.topic OR f.record_queue_id <> f.queue_id
                              OR f.record_queue_offset <> f.queue_offset))
           OR (f.topic <> 'SCHEDULE_TOPIC_XXXX' AND NOT f.lmq
               AND f.effective_tags_code <> f.record_tags_code))
        GROUP BY f.topic, f.queue_id""",
        (
          "units disagree with the records they point at: the queue was rebuilt from another "
          "commitlog or the files are damaged; queue offsets listed"
        )),
    Check("ext_address_unresolved", "§4.4", """
        SELECT '{name}' AS check_name, 'error' AS severity, {queue_scope} AS scope,
               f.topic, f.queue_id, CAST(NULL AS STRING) AS group_name,
               count(*) AS affected,
               'every ext address in a consume queue names a unit of consumequeue_ext'
                   AS expected,
               concat(count(*), ' unit(s) with an ext address no ext unit answers')
                   AS observed,
               {samples_q} AS sample_offsets,
               {explanation} AS explanation
        FROM rc_units f WHERE f.kind = 'ext_address' AND f.ext_tags_code IS NULL
        GROUP BY f.topic, f.queue_id""",
        (
          "consumers filtering by tag or SQL92 cannot read these units' tags: the ext files "
          "were lost, cut or belong to another store; queue offsets listed"
        )),
    Check("timers_pending", "§6.4", """
        SELECT '{name}' AS check_name, 'info' AS severity, 'broker' AS scope,
               {no_scope}, count(*) AS affected,
               'timer messages wait in the wheel until their delivery time' AS expected,
               concat(count(*), ' timer message(s) pending, the next due ',
                      {min_delivery}, ' UTC, the last ', {max_delivery}, ' UTC') AS observed,
               slice(array_sort(collect_list(f.commitlog_offset)), 1, 5) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_timers f HAVING count(*) > 0""",
        (
          "5.x timer messages not delivered yet at the snapshot (table pending_timers); "
          "commitlog offsets of their rmq_sys_wheel_timer records listed"
        )),
    Check("timer_overdue", "§6.4", """
        SELECT '{name}' AS check_name, 'warning' AS severity, 'broker' AS scope,
               {no_scope}, count(*) AS affected,
               'no pending timer message is due more than a minute before the snapshot'
                   AS expected,
               concat(count(*), ' timer message(s) overdue, the oldest due ',
                      {min_delivery}, ' UTC') AS observed,
               slice(array_sort(collect_list(f.commitlog_offset)), 1, 5) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_timers f
        WHERE f.state = 'pending' AND NOT f.roll
          AND f.delivery_time < {taken_at} - INTERVAL 60 SECONDS
        HAVING count(*) > 0""",
        (
          "the timer wheel is behind: its dequeue service stalled, or the broker was down "
          "when these were due; they are delivered late once it runs"
        )),
    Check("timer_record_missing", "§6.4", """
        SELECT '{name}' AS check_name, 'error' AS severity, 'broker' AS scope,
               {no_scope}, count(*) AS affected,
               'every pending timer names a record of rmq_sys_wheel_timer with its size'
                   AS expected,
               concat(count(*), ' pending timer(s) without their record') AS observed,
               slice(array_sort(collect_list(f.commitlog_offset)), 1, 5) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_timers f LEFT JOIN rc_msg m ON m.physical_offset = f.commitlog_offset
        WHERE f.commitlog_offset >= {cl_min}
          AND (m.physical_offset IS NULL OR m.topic <> 'rmq_sys_wheel_timer'
               OR m.total_size <> f.commitlog_size)
        HAVING count(*) > 0""",
        (
          "timer messages the broker would deliver from a record that is not there: the "
          "commitlog lost it or the timer files belong to another store"
        )),
    Check("transaction_pending_too_long", "docs/traces-and-transactions.md", """
        SELECT '{name}' AS check_name, '{pending_severity}' AS severity,
               concat('producer_group=', coalesce(f.producer_group, '?')) AS scope,
               {no_scope}, count(*) AS affected,
               'no transaction pending longer than {max_pending_s} s' AS expected,
               concat(count(*), ' transaction(s) pending, the oldest since ',
                      {oldest_half}, ' UTC after ',
                      max(f.checks), ' check(s)') AS observed,
               slice(array_sort(collect_list(f.half_offset)), 1, 5) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_transactions f
        WHERE f.state = 'pending' AND f.half_time < {taken_at} - INTERVAL {max_pending_s} SECONDS
        GROUP BY f.producer_group""",
        (
          "half messages neither committed nor rolled back: the producer's local transactions "
          "hang or its checker does not answer (commitlog offsets of the half messages; "
          "msgIds: python -m jobs sql --saved undecided_transactions)"
        )),
    Check("transaction_discarded", "docs/traces-and-transactions.md", """
        SELECT '{name}' AS check_name, 'error' AS severity,
               concat('producer_group=', coalesce(f.producer_group, '?')) AS scope,
               {no_scope}, count(*) AS affected,
               'every transaction is committed or rolled back' AS expected,
               concat(count(*), ' transaction(s) discarded after ', max(f.checks),
                      ' check(s) without an answer') AS observed,
               slice(array_sort(collect_list(f.half_offset)), 1, 5) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_transactions f WHERE f.state = 'discarded' AND f.changed
        GROUP BY f.producer_group""",
        (
          "the broker gave up checking these transactions (transactionCheckMax) and moved "
          "them to TRANS_CHECK_MAX_TIME_TOPIC: their messages were never delivered, whatever "
          "the producer's local transaction did (commitlog offsets of the half messages)"
        )),
    Check("schedule_delivery_time", "§4.3, §8.9", """
        SELECT '{name}' AS check_name, 'warning' AS severity, {queue_scope} AS scope,
               f.topic, f.queue_id, CAST(NULL AS STRING) AS group_name,
               count(*) AS affected,
               'tagsCode = store time + the delay of the level, one delay per level' AS expected,
               concat(count(DISTINCT f.delay_ms), ' different delays (ms): ',
                      array_join(slice(array_sort(collect_set(f.delay_ms)), 1, 5), ', '))
                   AS observed,
               {samples_q} AS sample_offsets,
               {explanation} AS explanation
        FROM (SELECT *, effective_tags_code - unix_millis(store_time) AS delay_ms
              FROM rc_unit_vs_record WHERE topic = 'SCHEDULE_TOPIC_XXXX'
                AND NOT missing) f
        GROUP BY f.topic, f.queue_id
        HAVING count(DISTINCT f.delay_ms) > 1 OR min(f.delay_ms) < 0""",
        (
          "delayed-message units whose delivery times do not follow one delay per level: "
          "messageDelayLevel changed while messages waited, or the units are damaged"
        )),
    Check("record_without_unit", "§3, §8.10", """
        SELECT '{name}' AS check_name, 'error' AS severity, {queue_scope} AS scope,
               f.topic, f.queue_id, CAST(NULL AS STRING) AS group_name,
               count(*) AS affected,
               'every dispatched record (transaction type NOT or COMMIT) has its consume-queue unit'
                   AS expected,
               concat(count(*), ' record(s) before the dispatch point have no unit') AS observed,
               {samples_pos} AS sample_offsets,
               {explanation} AS explanation
        FROM rc_undispatched f WHERE NOT f.at_tail
        GROUP BY f.topic, f.queue_id""",
        (
          "messages consumers of this queue will never receive: consume-queue units were lost "
          "(deleted or damaged queue file); commitlog offsets listed"
        )),
    Check("dispatch_lag", "§8 recovery", """
        SELECT '{name}' AS check_name, 'info' AS severity, 'broker' AS scope,
               {no_scope}, count(*) AS affected,
               'consume queues reach the end of the commitlog' AS expected,
               concat(count(*), ' record(s), ', sum(f.total_size),
                      ' bytes past the last dispatched record') AS observed,
               {samples_pos} AS sample_offsets,
               {explanation} AS explanation
        FROM rc_undispatched f WHERE f.at_tail HAVING count(*) > 0""",
        (
          "the newest records were not dispatched to their queues yet when the copy was taken "
          "(the broker dispatches asynchronously; recovery re-dispatches them): lag, not loss"
        )),
    Check("transaction_records_excluded", "§3", """
        SELECT '{name}' AS check_name, 'info' AS severity, 'broker' AS scope,
               {no_scope}, count(*) AS affected,
               'PREPARED and ROLLBACK records are never dispatched' AS expected,
               concat(count(*), ' PREPARED/ROLLBACK record(s) excluded from the queue checks')
                   AS observed,
               {samples_pos} AS sample_offsets,
               {explanation} AS explanation
        FROM rc_msg f WHERE f.transaction_type IN ('PREPARED', 'ROLLBACK')
        HAVING count(*) > 0""",
        (
          "records with transaction type PREPARED or ROLLBACK in SYSFLAG have no consume-queue "
          "unit by design"
        )),
    Check("queue_offset_gap", "§8.8, §8.12", """
        SELECT '{name}' AS check_name, 'error' AS severity, {queue_scope} AS scope,
               f.topic, f.queue_id, CAST(NULL AS STRING) AS group_name,
               sum(f.next_offset - f.expected_next) AS affected,
               'queue offsets contiguous from min to max' AS expected,
               concat(count(*), ' gap(s), ', sum(f.next_offset - f.expected_next),
                      ' offset(s) missing') AS observed,
               slice(array_sort(collect_list(f.expected_next)), 1, 5) AS sample_offsets,
               {explanation} AS explanation
        FROM (SELECT topic, queue_id, queue_offset + coalesce(batch_size, 1) AS expected_next,
                     lead(queue_offset) OVER (PARTITION BY topic, queue_id
                                              ORDER BY queue_offset) AS next_offset
              FROM rc_gap_units q JOIN rc_bounds b USING (topic, queue_id)
              WHERE q.queue_offset >= b.min_offset) f
        WHERE f.next_offset > f.expected_next
        GROUP BY f.topic, f.queue_id""",
        (
          "queue offsets missing between units: units were deleted or zeroed inside the queue "
          "file; first missing queue offsets listed"
        )),
    Check("queue_commitlog_order", "§8.8", """
        SELECT '{name}' AS check_name, 'error' AS severity, {queue_scope} AS scope,
               f.topic, f.queue_id, CAST(NULL AS STRING) AS group_name,
               count(*) AS affected,
               'commitlog offsets strictly increase with the queue offset' AS expected,
               concat(count(*), ' unit(s) point at or before the previous unit\\'s record')
                   AS observed,
               {samples_q} AS sample_offsets,
               {explanation} AS explanation
        FROM (SELECT topic, queue_id, queue_offset, commitlog_offset,
                     lag(commitlog_offset) OVER (PARTITION BY topic, queue_id
                                                 ORDER BY queue_offset) AS previous
              FROM rc_units WHERE left(topic, 5) <> '%LMQ%') f
        WHERE f.commitlog_offset <= f.previous
        GROUP BY f.topic, f.queue_id""",
        (
          "units out of commitlog order: the queue mixes units of two commitlogs (a rebuilt or "
          "copied queue); queue offsets listed"
        )),
    Check("consumer_offset_below_min", "§8.14", """
        SELECT '{name}' AS check_name, 'warning' AS severity, {group_queue_scope} AS scope,
               f.topic, f.queue_id, f.group_name, f.lost_messages AS affected,
               concat('offset >= queue min ', f.min_offset) AS expected,
               concat('offset ', f.consumer_offset, ': ', f.lost_messages,
                      ' message(s) deleted before the group consumed them') AS observed,
               array(f.consumer_offset, f.min_offset) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_lag f WHERE f.status = 'below_min'""",
        (
          "retention deleted messages this group had not consumed yet: they are lost for it "
          "(the broker will move it to the minimum on its next pull)"
        )),
    Check("consumer_offset_above_max", "§8.14", """
        SELECT '{name}' AS check_name, 'warning' AS severity, {group_queue_scope} AS scope,
               f.topic, f.queue_id, f.group_name, f.consumer_offset - f.max_offset AS affected,
               concat('offset <= queue max ', f.max_offset) AS expected,
               concat('offset ', f.consumer_offset, ', ', f.consumer_offset - f.max_offset,
                      ' past the last message') AS observed,
               array(f.max_offset, f.consumer_offset) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_lag f WHERE f.status = 'above_max'""",
        (
          "the committed offset is ahead of the queue: the queue lost units at its end "
          "(truncated or restored from an older copy) or the offset was reset by hand"
        )),
    Check("offset_for_unknown_topic", "§7", """
        SELECT '{name}' AS check_name, 'warning' AS severity,
               concat('group=', f.group_name, ' topic=', f.topic) AS scope,
               f.topic, CAST(NULL AS INT) AS queue_id, f.group_name, count(*) AS affected,
               'offsets only for topics in topics.json' AS expected,
               concat(count(*), ' queue offset(s) for a topic topics.json does not list')
                   AS observed,
               slice(array_sort(collect_list(CAST(f.queue_id AS BIGINT))), 1, 5)
                   AS sample_offsets,
               {explanation} AS explanation
        FROM rc_offsets f LEFT ANTI JOIN rc_topics t ON t.topic = f.topic
        WHERE NOT f.is_lmq AND NOT {system_topic}
        GROUP BY f.group_name, f.topic""",
        (
          "consumerOffset.json has offsets for a topic missing from topics.json: the topic was "
          "deleted (offsets left behind) or topics.json lost it; queue ids listed"
        )),
    Check("offset_for_unknown_group", "§7", """
        SELECT '{name}' AS check_name, 'warning' AS severity,
               concat('group=', f.group_name) AS scope,
               CAST(NULL AS STRING) AS topic, CAST(NULL AS INT) AS queue_id, f.group_name,
               count(*) AS affected,
               'offsets only for groups in subscriptionGroup.json' AS expected,
               concat(count(*), ' offset(s) of a group subscriptionGroup.json does not list')
                   AS observed,
               CAST(array() AS ARRAY<BIGINT>) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_offsets f LEFT ANTI JOIN rc_groups g ON g.group_name = f.group_name
        WHERE NOT f.is_lmq AND f.group_name NOT IN ({builtin}) AND NOT {config_v2}
        GROUP BY f.group_name""",
        (
          "offsets of a group the broker has no subscription config for: the group was deleted, "
          "or auto-creation of groups is off (not checked on a configManagerVersion=v2 broker, "
          "which never writes the groups it creates itself)"
        )),
    Check("group_without_offsets", "§7", """
        SELECT '{name}' AS check_name, 'info' AS severity,
               concat('group=', f.group_name) AS scope,
               CAST(NULL AS STRING) AS topic, CAST(NULL AS INT) AS queue_id, f.group_name,
               1 AS affected, 'a subscribed group commits offsets' AS expected,
               'no offset in consumerOffset.json' AS observed,
               CAST(array() AS ARRAY<BIGINT>) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_groups f LEFT ANTI JOIN rc_offsets o ON o.group_name = f.group_name
        WHERE f.group_name NOT IN ({builtin})""",
        (
          "the group is configured but has never committed an offset: its consumers never "
          "consumed, or they are broadcast consumers that keep offsets locally"
        )),
    Check("queue_without_topic_config", "§7", """
        SELECT '{name}' AS check_name, 'warning' AS severity,
               concat('topic=', f.topic) AS scope, f.topic, CAST(NULL AS INT) AS queue_id,
               CAST(NULL AS STRING) AS group_name, count(*) AS affected,
               'every queue on disk belongs to a topic in topics.json' AS expected,
               concat(count(*), ' queue(s) on disk, topic not in topics.json') AS observed,
               slice(array_sort(collect_list(CAST(f.queue_id AS BIGINT))), 1, 5)
                   AS sample_offsets,
               {explanation} AS explanation
        FROM rc_bounds f LEFT ANTI JOIN rc_topics t ON t.topic = f.topic
        WHERE left(f.topic, 5) <> '%LMQ%' AND NOT {system_topic}
        GROUP BY f.topic""",
        (
          "consume queues of a topic topics.json does not list: the topic was deleted without "
          "its files, or topics.json lost it (the broker will not serve these queues); queue "
          "ids listed"
        )),
    Check("queue_beyond_topic_config", "§7", """
        SELECT '{name}' AS check_name, 'warning' AS severity,
               concat('topic=', f.topic) AS scope, f.topic, CAST(NULL AS INT) AS queue_id,
               CAST(NULL AS STRING) AS group_name, count(*) AS affected,
               concat('queue ids < readQueueNums ', first(t.read_queue_nums)) AS expected,
               concat(count(*), ' queue(s) on disk with a higher id') AS observed,
               slice(array_sort(collect_list(CAST(f.queue_id AS BIGINT))), 1, 5)
                   AS sample_offsets,
               {explanation} AS explanation
        FROM rc_bounds f JOIN rc_topics t ON t.topic = f.topic
        WHERE f.queue_id >= t.read_queue_nums
        GROUP BY f.topic""",
        (
          "queues on disk that topics.json does not count: the topic was shrunk; consumers no "
          "longer read these queues"
        )),
    Check("delay_offset_beyond_schedule_queue", "§8.13", """
        SELECT '{name}' AS check_name, 'error' AS severity,
               concat('topic=SCHEDULE_TOPIC_XXXX queue=', f.queue_id) AS scope,
               'SCHEDULE_TOPIC_XXXX' AS topic, f.queue_id, CAST(NULL AS STRING) AS group_name,
               f.delay_offset - coalesce(b.max_offset, 0) AS affected,
               concat('delay offset <= schedule queue max ', coalesce(b.max_offset, 0))
                   AS expected,
               concat('delay offset ', f.delay_offset, ' of level ', f.delay_level) AS observed,
               array(coalesce(b.max_offset, 0), f.delay_offset) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_delay f LEFT JOIN rc_bounds b
          ON b.topic = 'SCHEDULE_TOPIC_XXXX' AND b.queue_id = f.queue_id
        WHERE f.delay_offset > coalesce(b.max_offset, 0)""",
        (
          "delayOffset.json says delayed messages were delivered that the schedule queue does "
          "not hold: the queue lost units or delayOffset.json comes from another store"
        )),
    Check("index_entry_without_record", "§8.11", """
        SELECT '{name}' AS check_name, 'error' AS severity,
               concat('file=index/', f.index_file) AS scope, {no_scope},
               count(*) AS affected, 'every index entry points at a record' AS expected,
               concat(count(*), ' entries point where no record starts') AS observed,
               {samples_cl} AS sample_offsets,
               {explanation} AS explanation
        FROM rc_idx f LEFT ANTI JOIN rc_msg m ON m.physical_offset = f.commitlog_offset
        WHERE f.commitlog_offset >= {cl_min} AND f.commitlog_offset < {cl_max}
        GROUP BY f.index_file""",
        (
          "index entries pointing nowhere: the commitlog lost these records, or the index file "
          "belongs to another store; commitlog offsets listed"
        )),
    Check("index_entry_key_mismatch", "§5, §8.11", """
        SELECT '{name}' AS check_name, 'error' AS severity,
               concat('file=index/', f.index_file) AS scope, {no_scope},
               count(*) AS affected,
               'keyHash = hash(topic#key) of a key or the UNIQ_KEY of the record' AS expected,
               concat(count(*), ' entries whose hash matches no key of their record')
                   AS observed,
               {samples_cl} AS sample_offsets,
               {explanation} AS explanation
        FROM rc_idx f JOIN (SELECT DISTINCT physical_offset FROM rc_msg) m
          ON m.physical_offset = f.commitlog_offset
        LEFT ANTI JOIN rc_record_keys k
          ON k.physical_offset = f.commitlog_offset AND k.key_hash = f.key_hash
        GROUP BY f.index_file""",
        (
          "index entries whose key hash is not one of their record's keys: lookups by key would "
          "return the wrong message; commitlog offsets listed"
        )),
    Check("record_without_index_entry", "§5, §8.11", """
        SELECT '{name}' AS check_name, 'warning' AS severity, 'broker' AS scope,
               {no_scope}, count(DISTINCT f.physical_offset) AS affected,
               'every key and UNIQ_KEY of a record up to the index\\'s newest entry is indexed'
                   AS expected,
               concat(count(DISTINCT f.physical_offset), ' record(s) with ', count(*),
                      ' key(s) missing from the index') AS observed,
               slice(array_sort(collect_set(f.physical_offset)), 1, 5) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_record_keys f
        LEFT ANTI JOIN rc_idx i
          ON i.commitlog_offset = f.physical_offset AND i.key_hash = f.key_hash
        CROSS JOIN (SELECT max(commitlog_offset) AS newest FROM rc_idx) n
        WHERE NOT f.is_tag
          AND (f.physical_offset < n.newest OR (f.physical_offset = n.newest AND NOT {abort}))
        HAVING count(*) > 0""",
        (
          "records the index cannot find by key: an index file was deleted or damaged (queries "
          "by key and msgId miss them); commitlog offsets listed. The broker indexes a "
          "record's keys one after another, so after a kill (abort file present) the record "
          "of the newest entry may be half indexed: that one is not counted"
        )),
    Check("crc_failure", "§2.4, §8.4", """
        SELECT '{name}' AS check_name, 'error' AS severity,
               concat('file=', f.source_file) AS scope, {no_scope},
               count(*) AS affected, 'BODYCRC (and the CRC32 property) match' AS expected,
               concat(count(*), ' record(s) fail their CRC') AS observed,
               {samples_pos} AS sample_offsets,
               {explanation} AS explanation
        FROM rc_msg f WHERE f.body_crc_ok = false OR f.property_crc_ok = false
        GROUP BY f.source_file""",
        (
          "bytes changed after the broker wrote them (disk or copy damage): these bodies are "
          "not what the producer sent; commitlog offsets listed"
        )),
    race_check("torn_tail", "§2.2, §8.3", races.TORN_TAIL, "sum(f.length)",
               "written data ends with a whole record",
               "concat(count(*), ' region(s), ', sum(f.length), ' byte(s) cut at the end')",
               ("the record, unit or entry the broker was writing at the write position, cut "
                "(copy taken while the broker wrote, or a kill): it is read again from the "
                "next snapshot; an error when the broker had stopped cleanly (no abort file), "
                "where no write was in progress; file positions listed")),
    race_check("hot_copy_race", "§4, §5, §7", races.HOT_COPY, "count(*)",
               "every counter and partner file caught up with its data",
               "concat(count(*), ' state(s): ', substring(min(f.reason), 1, 200))",
               ("data the copy read before the counter or partner file that describes it "
                "(index entries beyond the header's indexCount, queue units ahead of the copied "
                "commitlog, a config file read mid-rewrite): decoded, or read again from the "
                "next snapshot; an error when the broker had stopped cleanly (no abort file); "
                "file positions listed")),
    Check("quarantined_region", "§2.2, §8.2", """
        SELECT '{name}' AS check_name, 'error' AS severity, concat('file=', f.file) AS scope,
               {no_scope}, sum(f.length) AS affected,
               'every byte decodes' AS expected,
               concat(count(*), ' region(s), ', sum(f.length), ' byte(s): ',
                      substring(first(f.reason), 1, 160)) AS observed,
               slice(array_sort(collect_list(f.offset)), 1, 5) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_quarantine f
        WHERE NOT ({RACES})
          AND f.stream NOT IN ('dledger_index', 'compaction', 'controller')
        GROUP BY f.file""".replace("{RACES}", RACES),
        ("bytes that do not decode (damage inside the file): the records or units in them "
         "are missing from the tables; file positions listed")),
    stream_check(
        "dledger_index_mismatch", "docs/dledger.md", "dledger_index",
        "every DLedger entry has its index unit (position, size, index, term)",
        "unit(s) disagree",
        "the DLedger index does not describe the log's entries: the broker's recovery checks the "
        "two against each other and a Raft follower reads entries through the index; file "
        "positions of the units listed"),
    stream_check(
        "compaction_mismatch", "docs/compaction.md", "compaction",
        "every unit of a compacted queue points at its record in the compaction log",
        "problem(s)",
        "a compacted queue's files disagree (a unit without its record, a record without its "
        "unit, a file without its partner, a key kept twice): consumers of the topic are served "
        "what the queue says, so they may miss or repeat messages; file positions listed"),
    stream_check(
        "epoch_file_unreadable", "docs/controller.md", "controller",
        "epochFileCheckpoint and brokerIdentity read as the broker reads them", "problem(s)",
        "a controller-mode file the broker cannot use as it is: an epoch file it falls back from "
        "(to the .bak, losing the terms written since), one it cannot start with, or an identity "
        "it discards (it then registers as a new replica); positions listed"),
    Check("compacted_entry_differs", "docs/compaction.md", """
        SELECT '{name}' AS check_name, 'error' AS severity, {queue_scope} AS scope,
               f.topic, f.queue_id, CAST(NULL AS STRING) AS group_name,
               count(*) AS affected,
               'a kept message has the size and tags of its original queue unit' AS expected,
               concat(count(*), ' kept message(s) differ from their original') AS observed,
               {samples_q} AS sample_offsets,
               {explanation} AS explanation
        FROM rc_compacted f JOIN rc_compacted_units q
          ON q.topic = f.topic AND q.queue_id = f.queue_id AND q.queue_offset = f.queue_offset
        WHERE q.size <> f.size OR q.tags_code <> f.tags_code
        GROUP BY f.topic, f.queue_id""",
        ("compaction copies a record byte for byte (only its position changes): a kept message "
         "whose size or tags differ from the queue unit of the same queue offset is not the "
         "message that was sent there; queue offsets listed")),
    Check("epoch_history_broken", "docs/controller.md", """
        SELECT '{name}' AS check_name, 'error' AS severity, 'broker' AS scope,
               {no_scope}, count(*) AS affected,
               'epochs and their start offsets increase, and no term starts past the commitlog'
                   AS expected,
               concat(count(*), ' term(s) out of order or past the commitlog end') AS observed,
               slice(array_sort(collect_list(CAST(f.epoch AS BIGINT))), 1, 5)
                   AS sample_offsets,
               {explanation} AS explanation
        FROM (SELECT e.*, lag(e.epoch) OVER (ORDER BY e.epoch) AS previous_epoch,
                     lag(e.start_offset) OVER (ORDER BY e.epoch) AS previous_start
              FROM rc_epochs e) f
        WHERE f.start_offset <= f.previous_start OR f.start_offset > {cl_max}
        HAVING count(*) > 0""",
        ("the epoch history does not describe this commitlog: a master that truncates by it "
         "(or a slave that follows it) would cut or keep the wrong bytes; epochs listed")),
    Check("master_term_changed", "docs/controller.md", """
        SELECT '{name}' AS check_name, 'info' AS severity, 'broker' AS scope,
               {no_scope}, 1 AS affected,
               concat('master term ', max(b.epoch), ' as at the previous snapshot') AS expected,
               concat('master term ', (SELECT max(epoch) FROM rc_epochs)) AS observed,
               CAST(array() AS ARRAY<BIGINT>) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_epochs_before b
        HAVING max(b.epoch) < (SELECT max(epoch) FROM rc_epochs)""",
        ("the broker set elected a master again since the previous snapshot (a failover, or "
         "a restart of its master): the terms since then are in broker_epochs")),
    Check("unclean_shutdown", "§6.2", """
        SELECT '{name}' AS check_name, 'warning' AS severity, 'broker' AS scope,
               {no_scope}, 1 AS affected,
               'no abort file (clean shutdown)' AS expected, 'abort file present' AS observed,
               CAST(array() AS ARRAY<BIGINT>) AS sample_offsets,
               {explanation} AS explanation
        FROM (SELECT 1) WHERE {abort}""",
        (
          "the broker was running when the copy was taken, or it crashed: the commitlog tail "
          "may be torn and queues may trail it until the broker recovers"
        )),
    Check("checkpoint_ahead_of_data", "§6.1, §8 recovery", """
        SELECT '{name}' AS check_name, 'error' AS severity, 'broker' AS scope,
               {no_scope},
               CAST(greatest(1, (unix_millis({checkpoint}) - unix_millis(max(f.store_time)))
                            DIV 1000) AS BIGINT) AS affected,
               concat('newest record stored at or after the checkpoint time ',
                      {checkpoint_text}, ' UTC') AS expected,
               concat('newest record stored at ', {newest_text}, ' UTC, ',
                      CAST((unix_millis({checkpoint}) - unix_millis(max(f.store_time))) / 1000.0
                           AS DECIMAL(20, 3)),
                      ' s earlier') AS observed,
               array(max(f.physical_offset)) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_msg f
        HAVING {checkpoint} IS NOT NULL AND count(*) > 0
           AND unix_millis({checkpoint}) > unix_millis(max(f.store_time))""",
        (
          "the checkpoint says the broker flushed messages newer than any in the commitlog: the "
          "commitlog was truncated or restored from an older copy (seconds missing in affected)"
        )),
    Check("history_rewritten", "docs/nightly-dag.md", """
        SELECT '{name}' AS check_name, 'warning' AS severity,
               concat('broker incarnation=', f.incarnation) AS scope, {no_scope},
               f.records_superseded AS affected,
               concat('the records loaded up to commitlog offset ', f.to_offset,
                      ' still in the store') AS expected,
               concat(f.kind, ' from commitlog offset ', f.from_offset, ': ',
                      f.records_superseded, ' loaded record(s) superseded (rows kept in ',
                      'superseded_messages)') AS observed,
               array(f.from_offset) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_rewrites f WHERE f.kind <> 'file'""",
        (
          "the broker's store no longer holds records that were loaded (a failover's "
          "truncation, a power loss, a restored backup; reset: a new store under this name): "
          "the new history was loaded, the superseded records are kept apart"
        )),
    Check("messages_lost_in_rewrite", "docs/changing-stores.md", """
        SELECT '{name}' AS check_name, 'error' AS severity, 'broker' AS scope, {no_scope},
               count(*) AS affected,
               'every record the broker stored is still in its history' AS expected,
               concat(count(*), ' record(s) discarded by the ', first(w.kind),
                      ' from commitlog offset ', first(w.from_offset),
                      ' and stored nowhere else on this broker; msgIds ',
                      array_join(slice(array_sort(collect_list(f.msg_id)), 1, 5), ', '))
                   AS observed,
               {samples_pos} AS sample_offsets,
               {explanation} AS explanation
        FROM rc_superseded f
        CROSS JOIN (SELECT kind, from_offset FROM rc_rewrites
                    WHERE kind IN ('truncated', 'rewritten')) w
        WHERE f.inner_index = 0 AND coalesce(f.acknowledged, true) AND (f.msg_id IS NULL
              OR NOT EXISTS (SELECT 1 FROM rc_msg m WHERE m.uniq_key = f.msg_id))
        HAVING count(*) > 0""",
        (
          "messages the broker had stored (and may have acknowledged to their producers) are "
          "gone from its store after a truncation (a failover's, or a power loss's), and no "
          "record of this broker's history now carries their msgId: the rows are kept in "
          "superseded_messages (a DLedger entry its ledger never committed is left out: no "
          "producer was answered for it); physical offsets listed"
        )),
    Check("file_rewritten", "docs/nightly-dag.md", """
        SELECT '{name}' AS check_name, 'info' AS severity, concat('file=', f.file) AS scope,
               {no_scope}, f.to_offset - f.from_offset AS affected,
               concat('the first ', f.to_offset, ' bytes as in snapshot ',
                      coalesce(f.previous_snapshot_id, '?')) AS expected,
               concat('differs from byte ', f.from_offset) AS observed,
               array(f.from_offset) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_rewrites f WHERE f.kind = 'file'""",
        (
          "the snapshot copier found this file changed below what the previous snapshot "
          "held and copied it whole (never a mix of the two)"
        )),
    Check("retention_gap", "§1.1", """
        SELECT '{name}' AS check_name, 'warning' AS severity,
               CASE WHEN f.topic IS NULL THEN concat('stream=', f.stream)
                    ELSE concat('topic=', f.topic, ' queue=', f.queue_id) END AS scope,
               f.topic, f.queue_id, CAST(NULL AS STRING) AS group_name,
               sum(f.to_offset - f.from_offset) AS affected,
               'every offset was loaded before the broker deleted it' AS expected,
               concat(sum(f.to_offset - f.from_offset), ' offset(s) deleted unseen, from ',
                      min(f.from_offset), ' to ', max(f.to_offset)) AS observed,
               slice(array_sort(collect_list(f.from_offset)), 1, 5) AS sample_offsets,
               {explanation} AS explanation
        FROM rc_gaps f GROUP BY f.stream, f.topic, f.queue_id""",
        (
          "the broker's retention deleted data before any load saw it (first load of an old "
          "broker, or loads too rare for its fileReservedTime): history starts later there; "
          "commitlog bytes or queue offsets"
        )),
)

# The consume queue's tagsCode of TAGS (spec §4.3, 0 without tags) and the IndexFile keyHash
# of "topic#key" (§5: the absolute value of Java's String.hashCode, 0 for
# Integer.MIN_VALUE), given the engine's SQL for String.hashCode (CheckEngine.java_hash;
# tests/test_javahash.py holds both engines to rmqlib.common.javahash).
def tags_code_sql(tags: str, java_hash: Callable[[str], str]) -> str:
    no_tags = "''"
    return f"CAST({java_hash(f'coalesce({tags}, {no_tags})')} AS BIGINT)"


def index_key_hash_sql(key: str, java_hash: Callable[[str], str]) -> str:
    hashed = java_hash(key)
    return f"CASE WHEN {hashed} = -2147483648 THEN 0 ELSE abs({hashed}) END"


def sql_fragments(java_hash: Callable[[str], str]) -> dict[str, str]:
    """The engine-specific pieces DERIVED_VIEWS are formatted with."""
    return {"record_tags_code": tags_code_sql("m.tags", java_hash),
            "index_key_hash": index_key_hash_sql("concat(topic, '#', key)", java_hash)}


# Derived views the checks share (created and cached by jobs.check.reconcile after jobs.check.lag's
# rc_lag): each is computed once although several checks read it. Formatted with cl_max and
# sql_fragments().
DERIVED_VIEWS = {
    # units joined with the records they point at, and what each should be
    "rc_unit_vs_record": """
    SELECT u.topic, u.queue_id, u.queue_offset, u.commitlog_offset, u.size, u.tags_code,
           u.kind, m.physical_offset IS NULL AS missing,
           CASE u.kind WHEN 'normal' THEN u.tags_code
                       WHEN 'ext_address' THEN u.ext_tags_code END AS effective_tags_code,
           left(u.topic, 5) = '%LMQ%' AS lmq,
           m.total_size, m.topic AS record_topic, m.queue_id AS record_queue_id,
           m.queue_offset AS record_queue_offset, m.store_time,
           {record_tags_code} AS record_tags_code
    FROM rc_units u LEFT JOIN rc_msg m ON m.physical_offset = u.commitlog_offset
    WHERE u.commitlog_offset < {cl_max}""",
    # dispatchable records without a unit in their queue; at_tail: past the dispatch point
    "rc_undispatched": """
        SELECT m.topic, m.queue_id, m.physical_offset, m.total_size,
               m.physical_offset >= (SELECT coalesce(max(commitlog_offset + size), 0)
                                     FROM rc_units) AS at_tail
        FROM rc_msg m
        LEFT ANTI JOIN rc_units u ON u.topic = m.topic AND u.queue_id = m.queue_id
                                 AND u.commitlog_offset = m.physical_offset
        WHERE m.transaction_type IN ('NOT', 'COMMIT')""",
    # the records up to the newest the index files hold (none without index files):
    # older ones must be indexed too, newer ones may still wait for the index dispatcher
    "rc_indexed": """
        SELECT m.* FROM rc_msg m
        JOIN (SELECT max(commitlog_offset) AS high FROM rc_idx) r
          ON m.physical_offset <= r.high""",
    # every key the broker indexes for a record: each KEYS entry and the UNIQ_KEY (§5),
    # and from 5.5.0 topic#T#TAGS (found in real 5.5.0 stores, rmqlib.indexfile);
    # ROLLBACK records are not indexed
    "rc_record_keys": """
        SELECT physical_offset, is_tag, {index_key_hash} AS key_hash
        FROM (SELECT physical_offset, topic, false AS is_tag,
                     explode(array_distinct(filter(
                         concat(keys, array(uniq_key)),
                         k -> k IS NOT NULL AND k <> ''))) AS key
              FROM rc_indexed WHERE transaction_type <> 'ROLLBACK'
              UNION ALL
              SELECT physical_offset, topic, true AS is_tag, concat('T#', tags) AS key
              FROM rc_indexed WHERE transaction_type <> 'ROLLBACK' AND tags <> '')""",
}
