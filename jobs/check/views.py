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
  rc_units    consume-queue and batch-consume-queue units loaded up to S, but fillers,
              whose record is still in the commitlog at S
  rc_bounds   per queue: min_offset / max_offset as the broker computes them (spec §4.2);
              max_offset from the previous snapshot's ``queue_bounds`` and the units first
              seen in S, or from every unit of history when those cannot be trusted
  rc_gap_units, rc_compacted_units  rc_units and, for the few queues that need them,
              older units (see _older_units_sql)
  rc_idx      index entries loaded up to S that point into the commitlog at S
  rc_topics, rc_groups, rc_offsets, rc_delay, rc_quarantine, rc_gaps: rows of S
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from jobs.check.engines import CheckEngine
from jobs.lakehouse import tables as T
from jobs.lakehouse.delta_io import sql_string
from jobs.lakehouse.driver_rows import exists, sql_text
from jobs.lakehouse.history import HISTORY_KINDS, SUPERSEDED_SQL
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
    # The snapshot whose queue_bounds rows rc_bounds starts from, and its commitlog start
    # (see bounds_start).
    bounds_start: str | None = None
    bounds_start_commitlog_min: int = 0
    # config/alerts.yaml transactions: a transaction pending longer than this at the
    # snapshot is a transaction_pending_too_long finding of this severity.
    max_pending_transaction_seconds: int = 600
    pending_transaction_severity: str = "warning"

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
    earlier = sorted((row for row in rows if row["snapshot_seq"] < mine["snapshot_seq"]),
                     key=lambda row: row["snapshot_seq"])
    visible = tuple(sorted([snapshot_id, *(row["snapshot_id"] for row in earlier)]))
    cl_min = mine["commitlog_min_offset"] or 0
    start = bounds_start(registry, mine, earlier[-1] if earlier else None,
                         set(visible) - {snapshot_id})
    return SnapshotScope(
        broker, snapshot_id, mine["snapshot_seq"], mine["taken_at"],
        cl_min, mine["commitlog_max_offset"] or 0,
        bool(mine["abort_present"]), mine["checkpoint_physic_msg_time"], visible,
        ROCKSDB_QUEUES in (mine["features"] or ()), CONFIG_V2 in (mine["features"] or ()),
        start and start["snapshot_id"], (start and start["commitlog_min_offset"]) or 0)


def bounds_start(registry: Registry, mine: dict, previous: dict | None,
                 before: set[str]) -> dict | None:
    """The snapshot row whose ``queue_bounds`` this check's bounds can start from.

    A queue's max offset is its last unit's end over every unit loaded so far, however
    old (an idle queue's last unit is), and the gap check needs to know whether any unit
    that no longer points into the commitlog sits at or past the min offset. Reading that
    history every night made the check grow with it; instead the check starts from the
    bounds it wrote for the previous snapshot and adds what changed since: the units first
    seen in this snapshot, and those whose records the commitlog's start passed since.
    That equals the whole history's answer while the previous bounds describe the same
    history: they exist (that snapshot was checked), no history rewrite was recorded after
    it (a rewrite supersedes units they counted), and the commitlog's start did not move
    back. Otherwise None: read the history, as the first check does.
    """
    if previous is None:
        return None
    if (mine["commitlog_min_offset"] or 0) < (previous["commitlog_min_offset"] or 0):
        return None
    broker = mine["broker"]
    if any(row["snapshot_id"] not in before and row["kind"] in HISTORY_KINDS
           for row in registry.read_rows(T.HISTORY_REWRITES, broker=broker)):
        return None
    if not exists(registry[T.QUEUE_BOUNDS].location):  # a warehouse of an older release
        return None
    checked = registry.read_arrow(T.QUEUE_BOUNDS, broker=broker,
                                  snapshot_id=previous["snapshot_id"])
    return previous if checked.num_rows else None


# --------------------------------------------------------------------------- views


# The snapshot's features (rmqlib inventory).
ROCKSDB_QUEUES, CONFIG_V2 = "rocksdb_consume_queue", "rocksdb_config_v2"


def _bounds_sql(scope: SnapshotScope, loaded_units: str) -> str:
    """Each queue's min and max offset as the broker has them, and its last expired unit.

    max: the next offset to be written (fillers count). min: the first unit whose record
    is still in the commitlog (rc_units), = max when none is. last_expired_offset: the
    highest queue offset of a unit that does not point into the commitlog (a filler, or
    its record deleted). max and last_expired come from the previous snapshot's bounds and
    the units that changed since, when :func:`bounds_start` found them, else from every
    unit loaded up to S.

    A RocksDB consume queue is written without the write-ahead log, so the copy of a
    running broker lacks the units since the last flush, which the broker holds (and
    reports) in memory: there the bounds also count the queue's records in the commitlog
    (every one of them is still there, so each is a live offset).
    """
    cl_min = scope.commitlog_min_offset
    end = "queue_offset + coalesce(batch_size, 1)"
    expired = f"CASE WHEN {_expired(cl_min)} THEN queue_offset END"
    if scope.bounds_start is not None:
        changes = f"""
        SELECT topic, queue_id, queue_type, max_offset AS next, CAST(NULL AS BIGINT) AS live,
               last_expired_offset AS expired
        FROM rc_all_queue_bounds
        WHERE broker = {scope.broker_sql} AND snapshot_id = {sql_string(scope.bounds_start)}
        UNION ALL
        SELECT topic, queue_id, queue_type, {end} AS next, CAST(NULL AS BIGINT) AS live,
               {expired} AS expired
        FROM {loaded_units} AND first_snapshot_id = {scope.snapshot_sql}
        UNION ALL
        SELECT topic, queue_id, queue_type, {end} AS next, CAST(NULL AS BIGINT) AS live,
               queue_offset AS expired
        FROM {loaded_units} AND kind <> 'filler'
          AND commitlog_offset >= {scope.bounds_start_commitlog_min}
          AND commitlog_offset < {cl_min}"""
    else:
        changes = f"""
        SELECT topic, queue_id, queue_type, {end} AS next, CAST(NULL AS BIGINT) AS live,
               {expired} AS expired
        FROM {loaded_units}"""
    units = f"""{changes}
        UNION ALL
        SELECT topic, queue_id, queue_type, {end} AS next, queue_offset AS live,
               CAST(NULL AS BIGINT) AS expired
        FROM rc_units"""
    if scope.rocksdb_queues:
        units += """
        UNION ALL
        SELECT topic, queue_id, 'consumequeue' AS queue_type, queue_offset + 1 AS next,
               queue_offset AS live, CAST(NULL AS BIGINT) AS expired
        FROM rc_msg WHERE transaction_type IN ('NOT', 'COMMIT')"""
    return f"""
        SELECT topic, queue_id, first(queue_type) AS queue_type, max(next) AS max_offset,
               coalesce(min(live), max(next)) AS min_offset,
               max(expired) AS last_expired_offset
        FROM ({units}) q GROUP BY topic, queue_id"""


def _expired(cl_min: int) -> str:
    """A unit that does not point into the commitlog: a filler, or its record deleted."""
    return f"(kind = 'filler' OR commitlog_offset < {cl_min})"


def _older_units_sql(engine: CheckEngine, scope: SnapshotScope, loaded_units: str) -> dict:
    """The views that read queue units older than the commitlog, only where they matter.

    rc_gap_units: the units the gap check follows from each queue's min offset: rc_units,
    and where a queue has a unit not pointing into the commitlog at or past its min offset
    (a damaged or rebuilt queue: rc_bounds.last_expired_offset says so) those units too.
    rc_compacted_units: the original units of the compacted queues' kept messages, however
    old. Each reads history for a few named topics, or not at all.
    """
    def units_of_topics(columns: str, topics_sql: str, condition: str = "TRUE") -> str:
        """Units of the topics ``topics_sql`` names, or none without reading the table
        (an empty list would still scan the whole history)."""
        named = engine.arrow(topics_sql).column(0).to_pylist()
        if not named:
            return f"SELECT {columns} FROM rc_units WHERE FALSE"
        listed = ", ".join(sql_string(topic) for topic in named)
        return (f"SELECT {columns} FROM {loaded_units} AND topic IN ({listed}) "
                f"AND {condition}")

    gap_columns = "topic, queue_id, queue_offset, batch_size"
    return {
        "rc_gap_units": f"""
            SELECT {gap_columns} FROM rc_units
            UNION ALL
            {units_of_topics(
                gap_columns,
                "SELECT DISTINCT topic FROM rc_bounds WHERE last_expired_offset >= min_offset",
                _expired(scope.commitlog_min_offset))}""",
        "rc_compacted_units": units_of_topics(QUEUE_UNIT_COLUMNS,
                                              "SELECT DISTINCT topic FROM rc_compacted"),
    }


# The tables the views read, each as ``rc_all_<table>``.
SOURCES = (T.MESSAGES, T.QUEUE_ENTRIES, T.INDEX_ENTRIES, T.TOPICS, T.SUBSCRIPTION_GROUPS,
           T.CONSUMER_OFFSETS, T.DELAY_OFFSETS, T.PENDING_TIMERS, T.COMPACTED_ENTRIES,
           T.BROKER_EPOCHS, T.POP_IN_FLIGHT, T.TRANSACTIONS, T.QUARANTINE, T.RETENTION_GAPS,
           T.HISTORY_REWRITES, T.SUPERSEDED_MESSAGES)


# The state tables the views read only the snapshot's rows of.
OF_THE_SNAPSHOT = (T.TOPICS, T.SUBSCRIPTION_GROUPS, T.CONSUMER_OFFSETS, T.DELAY_OFFSETS,
                   T.PENDING_TIMERS, T.COMPACTED_ENTRIES, T.POP_IN_FLIGHT, T.TRANSACTIONS,
                   T.QUARANTINE, T.RETENTION_GAPS)


def source_files(scope: SnapshotScope) -> dict[str, str]:
    """Each table the views read, with a predicate true of every row they read: the
    engine leaves the other files out before opening any (a state table has a partition
    per night, so without it opening the table grows with history)."""
    b, s = sql_text(scope.broker), sql_text(scope.snapshot_id)  # the Delta log's dialect
    sources = {name: f"broker = {b}" for name in SOURCES}
    sources |= {name: f"broker = {b} AND snapshot_id = {s}" for name in OF_THE_SNAPSHOT}
    sources[T.SUPERSEDED_MESSAGES] = f"broker = {b} AND superseded_in_snapshot_id = {s}"
    if scope.bounds_start is not None:
        sources[T.QUEUE_BOUNDS] = (f"broker = {b} AND snapshot_id = "
                                   f"{sql_text(scope.bounds_start)}")
    return sources


def _current(table: str, offset: str) -> str:
    """A fact row no rewrite superseded (jobs.load.rewrites): the store's history now."""
    return "NOT " + SUPERSEDED_SQL.format(r="rc_all_history_rewrites", t=table,
                                          offset=offset)


def create_views(engine: CheckEngine, scope: SnapshotScope) -> None:
    """(Re)create the ``rc_*`` views of ``scope`` in ``engine``."""
    for name, files_where in source_files(scope).items():
        engine.register(f"rc_all_{name}", name, files_where)
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
        # The commitlog range leaves out the files of older nights (their statistics), so
        # this read does not grow with history.
        "rc_units": f"""
            SELECT * FROM {loaded_units}
              AND kind <> 'filler' AND commitlog_offset >= {cl_min}""",
        # max: next offset to be written (fillers count); min: first unit whose record is
        # still in the commitlog (the broker's correctMinOffset), = max when none is.
        "rc_bounds": _bounds_sql(scope, loaded_units),
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
        "rc_transactions": f"""
            SELECT * FROM rc_all_transactions WHERE broker = {b} AND snapshot_id = {s}""",
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
    for name, query in _older_units_sql(engine, scope, loaded_units).items():
        engine.create_view(name, query, cached=name in CACHED)


# Read by most checks: kept in memory for the run (rc_msg without bodies: small).
CACHED = ("rc_msg", "rc_units", "rc_bounds", "rc_gap_units")
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
