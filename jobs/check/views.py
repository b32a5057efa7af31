"""One snapshot of one broker as views over the Delta tables, in a check engine.

The fact tables keep every row any load ever saw (history beyond the broker's retention),
so "the store at snapshot S" has to be cut out of them: rows first seen in S or an earlier
snapshot of the broker, and for the commitlog only offsets the store still held at S
([commitlog_min_offset, commitlog_max_offset) of the snapshot row). State tables are
simply the rows of S. The checks (``jobs.check.checks``) and the lag
(``jobs.check.lag``) are SQL over these views, in Spark or DuckDB
(``jobs.check.engines``).

Views (``rc_`` = reconcile):
  rc_msg      records in the store at S
  rc_qe       consume-queue and batch-consume-queue units loaded up to S (all kinds; the
              columns of positions, sizes and tags only)
  rc_units    those units (every column) but fillers whose record is still in the
              commitlog at S
  rc_bounds   per queue: min_offset / max_offset as the broker computes them (spec §4.2)
  rc_idx      index entries loaded up to S that point into the commitlog at S
  rc_topics, rc_groups, rc_offsets, rc_delay, rc_quarantine, rc_gaps: rows of S
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobs.check.engines import CheckEngine
from jobs.lakehouse import tables as T
from jobs.lakehouse.delta_io import sql_string
from jobs.lakehouse.history import SUPERSEDED_SQL
from jobs.lakehouse.tables import Registry


class SnapshotNotLoadedError(LookupError):
    """The snapshot to check was never loaded (or its load did not finish)."""


@dataclass(frozen=True)
class SnapshotScope:
    """What the reconcile job needs to know about the snapshot before any Spark job."""

    broker: str
    snapshot_id: str
    seq: int
    taken_at: datetime | None
    commitlog_min_offset: int
    commitlog_max_offset: int
    abort_present: bool
    checkpoint_physic_msg_time: datetime | None
    visible_snapshot_ids: tuple[str, ...]  # this snapshot and the broker's earlier ones
    # The consume queue is a RocksDB database (storeType=defaultRocksDB): see rc_bounds.
    rocksdb_queues: bool = False
    # Its config is configManagerVersion=v2's (config/rdb), which holds only the topics and
    # groups the admin API created: a group the broker auto-created has offsets, no config.
    config_v2: bool = False

    @property
    def commitlog_bytes(self) -> int:
        """How much commitlog the store held at the snapshot."""
        return self.commitlog_max_offset - self.commitlog_min_offset

    @property
    def broker_sql(self) -> str:
        return sql_string(self.broker)

    @property
    def snapshot_sql(self) -> str:
        return sql_string(self.snapshot_id)

    @property
    def visible_sql(self) -> str:
        return ", ".join(sql_string(s) for s in self.visible_snapshot_ids)


def snapshot_scope(registry: Registry, broker: str, snapshot_id: str) -> SnapshotScope:
    """Read the broker's snapshot rows (delta-rs, milliseconds) and describe ``snapshot_id``."""
    rows = registry.read_rows(T.SNAPSHOTS, broker=broker)
    mine = next((row for row in rows if row["snapshot_id"] == snapshot_id), None)
    if mine is None or mine["status"] != "loaded":
        state = "was never loaded" if mine is None else f"is {mine['status']!r}"
        raise SnapshotNotLoadedError(
            f"snapshot {snapshot_id!r} of broker {broker!r} {state}: load it first")
    visible = tuple(sorted(row["snapshot_id"] for row in rows
                           if row["snapshot_seq"] <= mine["snapshot_seq"]))
    return SnapshotScope(
        broker, snapshot_id, mine["snapshot_seq"], mine["taken_at"],
        mine["commitlog_min_offset"] or 0, mine["commitlog_max_offset"] or 0,
        bool(mine["abort_present"]), mine["checkpoint_physic_msg_time"], visible,
        ROCKSDB_QUEUES in (mine["features"] or ()), CONFIG_V2 in (mine["features"] or ()))


# --------------------------------------------------------------------------- views


# The snapshot's features (rmqlib inventory).
ROCKSDB_QUEUES, CONFIG_V2 = "rocksdb_consume_queue", "rocksdb_config_v2"


def _bounds_sql(scope: SnapshotScope, cl_min: int) -> str:
    """Each queue's min and max offset as the broker has them.

    A RocksDB consume queue is written without the write-ahead log, so the copy of a
    running broker lacks the units since the last flush, which the broker holds (and
    reports) in memory: there the bounds also count the queue's records in the commitlog
    (every one of them is still there, so each is a live offset).
    """
    units = f"""
        SELECT topic, queue_id, queue_type, queue_offset + coalesce(batch_size, 1) AS next,
               CASE WHEN kind <> 'filler' AND commitlog_offset >= {cl_min}
                    THEN queue_offset END AS live
        FROM rc_qe"""
    if scope.rocksdb_queues:
        units += """
        UNION ALL
        SELECT topic, queue_id, 'consumequeue' AS queue_type, queue_offset + 1 AS next,
               queue_offset AS live
        FROM rc_msg WHERE transaction_type IN ('NOT', 'COMMIT')"""
    return f"""
        SELECT topic, queue_id, first(queue_type) AS queue_type, max(next) AS max_offset,
               coalesce(min(live), max(next)) AS min_offset
        FROM ({units}) q GROUP BY topic, queue_id"""


# The tables the views read, each as ``rc_all_<table>``.
SOURCES = (T.MESSAGES, T.QUEUE_ENTRIES, T.INDEX_ENTRIES, T.TOPICS, T.SUBSCRIPTION_GROUPS,
           T.CONSUMER_OFFSETS, T.DELAY_OFFSETS, T.PENDING_TIMERS, T.COMPACTED_ENTRIES,
           T.BROKER_EPOCHS, T.POP_IN_FLIGHT, T.QUARANTINE, T.RETENTION_GAPS,
           T.HISTORY_REWRITES, T.SUPERSEDED_MESSAGES)


def _current(table: str, offset: str) -> str:
    """A fact row no rewrite superseded (jobs.load.rewrites): the store's history now."""
    return "NOT " + SUPERSEDED_SQL.format(r="rc_all_history_rewrites", t=table,
                                          offset=offset)


def create_views(engine: CheckEngine, scope: SnapshotScope) -> None:
    """(Re)create the ``rc_*`` views of ``scope`` in ``engine``."""
    for name in SOURCES:
        engine.register(f"rc_all_{name}", name)
    b, s, visible = scope.broker_sql, scope.snapshot_sql, scope.visible_sql
    cl_min, cl_max = scope.commitlog_min_offset, scope.commitlog_max_offset
    loaded_units = f"""rc_all_queue_entries q
            WHERE broker = {b} AND first_snapshot_id IN ({visible})
              AND {_current("q", "commitlog_offset")}"""
    views = {
        # One row per commitlog record (an inner batch's first member stands for it, with
        # the record's own tags, keys and UNIQ_KEY): what queues and the index point at.
        "rc_msg": f"""
            SELECT {MESSAGE_COLUMNS} FROM rc_all_messages m
            WHERE broker = {b} AND first_snapshot_id IN ({visible}) AND inner_index = 0
              AND physical_offset >= {cl_min} AND physical_offset < {cl_max}
              AND {_current("m", "physical_offset")}""",
        # Every unit loaded up to S, for the queues' bounds and gaps: the one view that
        # reads the broker's whole queue history (an idle queue's max offset is its last
        # unit, however old), so it keeps only the columns those need.
        "rc_qe": f"SELECT {QUEUE_UNIT_COLUMNS} FROM {loaded_units}",
        # Read from the table, not from rc_qe: the commitlog range leaves out the files of
        # older nights (their statistics), so this read does not grow with history.
        "rc_units": f"""
            SELECT * FROM {loaded_units}
              AND kind <> 'filler' AND commitlog_offset >= {cl_min}""",
        # max: next offset to be written (fillers count); min: first unit whose record is
        # still in the commitlog (the broker's correctMinOffset), = max when none is.
        "rc_bounds": _bounds_sql(scope, cl_min),
        # Entries pointing below the commitlog's start are left out: every check of the
        # index asks about records the store still holds (a window, not the history).
        "rc_idx": f"""
            SELECT * FROM rc_all_index_entries i
            WHERE broker = {b} AND first_snapshot_id IN ({visible})
              AND commitlog_offset >= {cl_min}
              AND {_current("i", "commitlog_offset")}""",
        "rc_topics": f"SELECT * FROM rc_all_topics WHERE broker = {b} AND snapshot_id = {s}",
        "rc_groups": f"""
            SELECT * FROM rc_all_subscription_groups WHERE broker = {b} AND snapshot_id = {s}""",
        "rc_offsets": f"""
            SELECT * FROM rc_all_consumer_offsets WHERE broker = {b} AND snapshot_id = {s}""",
        "rc_delay": f"""
            SELECT * FROM rc_all_delay_offsets WHERE broker = {b} AND snapshot_id = {s}""",
        "rc_timers": f"""
            SELECT * FROM rc_all_pending_timers WHERE broker = {b} AND snapshot_id = {s}""",
        "rc_compacted": f"""
            SELECT * FROM rc_all_compacted_entries WHERE broker = {b} AND snapshot_id = {s}""",
        "rc_epochs": f"""
            SELECT * FROM rc_all_broker_epochs WHERE broker = {b} AND snapshot_id = {s}""",
        # The broker's epochs at its earlier snapshots (for a failover since then).
        "rc_epochs_before": f"""
            SELECT * FROM rc_all_broker_epochs
            WHERE broker = {b} AND snapshot_id IN ({visible}) AND snapshot_id <> {s}""",
        "rc_pop": f"""
            SELECT * FROM rc_all_pop_in_flight WHERE broker = {b} AND snapshot_id = {s}""",
        "rc_quarantine": f"""
            SELECT * FROM rc_all_quarantine WHERE broker = {b} AND snapshot_id = {s}""",
        "rc_gaps": f"""
            SELECT * FROM rc_all_retention_gaps WHERE broker = {b} AND snapshot_id = {s}""",
        "rc_rewrites": f"""
            SELECT * FROM rc_all_history_rewrites WHERE broker = {b} AND snapshot_id = {s}""",
        "rc_superseded": f"""
            SELECT broker, physical_offset, inner_index, msg_id, topic, acknowledged
            FROM rc_all_superseded_messages
            WHERE broker = {b} AND superseded_in_snapshot_id = {s}""",
    }
    for name, query in views.items():
        engine.create_view(name, query, cached=name in CACHED)


# Read by most checks: kept in memory for the run (rc_msg without bodies: small).
CACHED = ("rc_msg", "rc_qe", "rc_units")
QUEUE_UNIT_COLUMNS = ("topic, queue_id, queue_type, queue_offset, batch_size, kind, "
                      "commitlog_offset, size, tags_code")
MESSAGE_COLUMNS = ", ".join((
    "physical_offset", "total_size", "topic", "queue_id", "queue_offset", "transaction_type",
    "store_time",
    "CASE WHEN inner_num IS NULL THEN tags ELSE batch_properties['TAGS'] END AS tags",
    "CASE WHEN inner_num IS NULL THEN keys ELSE filter(split(coalesce("
    "batch_properties['KEYS'], ''), ' '), k -> k <> '') END AS keys",
    "coalesce(batch_properties, properties)['UNIQ_KEY'] AS uniq_key",
    "coalesce(inner_num, 1) AS width", "body_crc_ok", "property_crc_ok", "source_file"))
