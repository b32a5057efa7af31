"""The table registry: every Delta table of the lakehouse, where it lives, how it is made.

Tables are created from their data contract (``data_contracts/<table>.yaml``) and live at
``<warehouse>/rmq.db/<table>``. They are addressed by path for writes (so a job never
depends on a metastore being shared) and registered by name in the session's catalog for
SQL (``rmq.messages``), which costs one ``CREATE TABLE IF NOT EXISTS`` per table.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.lakehouse import driver_rows
from jobs.lakehouse.contracts import Contract, load_contracts, schema_drift
from jobs.lakehouse.history import ALL_ROWS_SUFFIX, OFFSET_COLUMNS, current_rows_sql
from jobs.lakehouse.jars import REPO_ROOT
from jobs.lakehouse.locations import Location, open_delta_table, warehouse_location
from jobs.lakehouse.table_ddl import create_table, evolve_table
from jobs.lakehouse.table_versions import (
    MIGRATE_COMMAND,
    Action,
    ContractVersionError,
    decide,
    inspect_table,
    new_columns,
)

if TYPE_CHECKING:  # the DAG imports the table names while parsing: no pyspark for that
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

DATABASE = "rmq"
DEFAULT_WAREHOUSE = REPO_ROOT / ".cache" / "warehouse"

# Facts: rows appended once per record/unit/entry, keyed by their position in the store.
MESSAGES = "messages"
QUEUE_ENTRIES = "queue_entries"
INDEX_ENTRIES = "index_entries"
MESSAGE_TRACES = "message_traces"  # the trace topics' contexts, cut by the commitlog tasks
# Derived from messages by the load: msgId, key and queue position -> message row.
MESSAGE_LOOKUP = "message_lookup"
# State: one row set per (broker, snapshot).
TOPICS = "topics"
SUBSCRIPTION_GROUPS = "subscription_groups"
CONSUMER_OFFSETS = "consumer_offsets"
DELAY_OFFSETS = "delay_offsets"
PENDING_TIMERS = "pending_timers"
COMPACTED_ENTRIES = "compacted_entries"
BROKER_EPOCHS = "broker_epochs"
POP_IN_FLIGHT = "pop_in_flight"
TRANSACTIONS = "transactions"  # folded from the previous snapshot's and the new messages
SNAPSHOTS = "snapshots"
# Bookkeeping.
QUARANTINE = "quarantine"
RETENTION_GAPS = "retention_gaps"
LOAD_STATE = "load_state"
# A store that no longer held what was loaded (jobs.load.rewrites), and the rows it replaced.
HISTORY_REWRITES = "history_rewrites"
SUPERSEDED_MESSAGES = "superseded_messages"
LOAD_RUNS = "load_runs"
MAINTENANCE_RUNS = "maintenance_runs"
# Checks: written per snapshot by the reconcile job and the alerts.
CHECK_RESULTS = "check_results"
CONSUMER_LAG = "consumer_lag"
QUEUE_BOUNDS = "queue_bounds"
CONSUMER_STATUS = "consumer_status"
ALERTS = "alerts"
# Clusters: written per night by the cluster stage, after every broker of the cluster.
CLUSTER_LAG = "cluster_lag"
REPLICA_STATUS = "replica_status"

TABLES = (MESSAGES, QUEUE_ENTRIES, INDEX_ENTRIES, MESSAGE_TRACES, MESSAGE_LOOKUP, TOPICS,
          SUBSCRIPTION_GROUPS, CONSUMER_OFFSETS, DELAY_OFFSETS, PENDING_TIMERS,
          COMPACTED_ENTRIES, BROKER_EPOCHS, POP_IN_FLIGHT, TRANSACTIONS, SNAPSHOTS, QUARANTINE,
          RETENTION_GAPS, LOAD_STATE, HISTORY_REWRITES, SUPERSEDED_MESSAGES, LOAD_RUNS,
          MAINTENANCE_RUNS, CHECK_RESULTS, CONSUMER_LAG, QUEUE_BOUNDS, CONSUMER_STATUS, ALERTS,
          CLUSTER_LAG, REPLICA_STATUS)
# Written by a cluster's stage of the night, never by a broker's load or check.
CLUSTER_TABLES = (CLUSTER_LAG, REPLICA_STATUS)
# Audit logs: a row per attempt (load, maintenance), so they grow on every re-run; every
# other table is unchanged by re-running a night.
AUDIT_LOGS = frozenset({LOAD_RUNS, MAINTENANCE_RUNS})


log = logging.getLogger(__name__)

# How long the loser of a table-creation race waits for the winner's table.
RACE_WAIT_S = 60.0

# {id(SparkContext): {qualified name: location}} of the names this process registered.
_REGISTERED: dict[int, dict[str, str]] = {}


def default_warehouse() -> Location:
    """The warehouse when none is given: ``$RMQ_WAREHOUSE`` (a local directory or an
    ``s3://`` URI: jobs.lakehouse.locations), else ``.cache/warehouse``."""
    return warehouse_location(os.environ.get("RMQ_WAREHOUSE") or DEFAULT_WAREHOUSE,
                              "RMQ_WAREHOUSE")


def table_location(warehouse: str | Path | Location, name: str) -> str:
    """Where table ``name`` lives in a warehouse (the registry's layout): a local path or
    an ``s3://`` URI, as delta-rs takes it."""
    return str(warehouse_location(warehouse, "warehouse") / f"{DATABASE}.db" / name)


def on_disk_schema(location: str) -> StructType:
    """The table's schema as Spark sees it, read from the Delta log by delta-rs (a Delta
    schema is Spark's StructType JSON): no Spark job and no log replay in the JVM."""
    import json

    from pyspark.sql.types import StructType

    return StructType.fromJson(json.loads(open_delta_table(location).schema().to_json()))


class TableDriftError(RuntimeError):
    """A table on disk no longer matches its data contract."""


@dataclass(frozen=True)
class Table:
    """One lakehouse table: its contract and its location."""

    name: str
    contract: Contract
    location: str

    @property
    def qualified_name(self) -> str:
        return f"{DATABASE}.{self.name}"


#: The session's warehouse (jobs.lakehouse.spark_session): Spark's own warehouse directory
#: is local (its catalog's), while the tables may be in a bucket.
WAREHOUSE_CONF = "spark.rmq.warehouse"


def session_warehouse(spark: SparkSession) -> str:
    """The warehouse a SparkSession was built for."""
    return spark.conf.get(WAREHOUSE_CONF, None) or spark.conf.get("spark.sql.warehouse.dir")


class Registry:
    """All tables of one warehouse, created on first use from their contracts."""

    def __init__(self, spark: SparkSession | None,
                 warehouse: str | Path | None = None) -> None:
        """``spark`` None: a registry for driver-side reads and writes only (delta-rs),
        e.g. the DAG's alert task, which need not start a JVM; its tables must exist."""
        self.spark = spark
        root = warehouse or (session_warehouse(spark) if spark else None)
        if root is None:
            raise ValueError("a registry without Spark needs its warehouse")
        self.warehouse = warehouse_location(str(root).removeprefix("file:"), "warehouse").uri
        contracts = load_contracts()
        missing = sorted(set(TABLES) - set(contracts))
        if missing:
            raise TableDriftError(f"no data contract for table(s): {', '.join(missing)}")
        self.tables = {
            name: Table(name, contracts[name], table_location(self.warehouse, name))
            for name in TABLES
        }
        self._ready = False
        self._named = False

    def __getitem__(self, name: str) -> Table:
        return self.tables[name]

    def ensure(self, *, names: bool = True) -> Registry:
        """Bring every table to its contract; point ``rmq.<table>`` at it.

        A missing table is created, a table one minor contract version behind is evolved
        (:mod:`jobs.lakehouse.table_ddl`, with delta-rs: no Spark needed), a table of
        another major version is refused with the migration command. Creation and
        evolution are safe to race: the loser of a race finds the table made by the
        winner and uses it.

        Names exist only in a Spark session: its catalog is in memory, so names are
        (re)registered per process, and a session that switches warehouses re-points
        them at the new one. Loads address tables by path and pass ``names=False``.
        """
        if not self._ready:
            # Each creation is a Delta commit of its own, mostly waiting: a few at once.
            with ThreadPoolExecutor(max_workers=4) as pool:
                for future in [pool.submit(self.bring_to_contract, t)
                               for t in self.tables.values()]:
                    future.result()
            self._ready = True
        if names and self.spark is not None and not self._named:
            self._register_names()
            self._named = True
        return self

    def _register_names(self) -> None:
        registered = _REGISTERED.setdefault(id(self.spark.sparkContext), {})
        unregistered = [t for t in self.tables.values()
                        if registered.get(t.qualified_name) != t.location]
        with ThreadPoolExecutor(max_workers=4) as pool:
            for future in [pool.submit(self.register_name, t) for t in unregistered]:
                future.result()
        if any(t.name in OFFSET_COLUMNS or t.name == HISTORY_REWRITES for t in unregistered):
            self._register_current_views()
        registered.update({t.qualified_name: t.location for t in unregistered})

    def register_name(self, table: Table) -> None:
        """Point ``rmq.<table>`` at the table as it is on disk now (the session catalog
        keeps its own copy of an external table's schema and layout, so a table whose
        layout changed must be registered again). A fact table with a history is
        registered as ``rmq.<table>_all``: ``rmq.<table>`` is its current history."""
        name = table.qualified_name + (ALL_ROWS_SUFFIX if table.name in OFFSET_COLUMNS
                                       else "")
        self.spark.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")  # metadata only
        self._drop_name(name)
        self.spark.sql(f"CREATE TABLE {name} USING DELTA LOCATION '{table.location}'")

    def _register_current_views(self) -> None:
        """``rmq.messages``, ``rmq.queue_entries``, ``rmq.index_entries``: every row no
        rewrite of its broker's history superseded (:mod:`jobs.lakehouse.history`)."""
        for name in OFFSET_COLUMNS:
            view = f"{DATABASE}.{name}"
            self._drop_name(view)
            self.spark.sql(f"CREATE VIEW {view} AS " + current_rows_sql(
                name, f"{view}{ALL_ROWS_SUFFIX}", f"{DATABASE}.{HISTORY_REWRITES}"))

    def _drop_name(self, name: str) -> None:
        if self.spark.catalog.tableExists(name):
            kind = self.spark.catalog.getTable(name).tableType
            self.spark.sql(f"DROP {'VIEW' if kind == 'VIEW' else 'TABLE'} {name}")

    def bring_to_contract(self, table: Table) -> bool:
        """Create or evolve ``table`` as its contract says; True when this call created it.

        Raises :class:`ContractVersionError` when only a migration (or newer code) can
        make the table writable.
        """
        found = inspect_table(table.location)
        action, reason = decide(table.contract, found)
        if action is Action.CREATE:
            return self._race_safely(table, f"create {table.qualified_name}", lambda: (
                create_table(table.contract, table.location)))
        if action is Action.EVOLVE:
            new = new_columns(table.contract, found)  # refuses a new NOT NULL column
            log.info("%s; evolving the table in place", reason)
            self._race_safely(table, f"evolve {table.qualified_name}", lambda: (
                evolve_table(table.contract, table.location, new)))
        elif action is Action.MIGRATE:
            raise ContractVersionError(f"{reason}. Run `{MIGRATE_COMMAND} --warehouse "
                                       f"{self.warehouse}` once, with no load or check running")
        elif action is Action.TOO_NEW:
            raise ContractVersionError(reason)
        return False

    def _race_safely(self, table: Table, what: str, change: Callable[[], None]) -> bool:
        """Make a table change a concurrent process may be making too; True when ours won.

        The Delta log takes one commit per version, put-if-absent: of two processes
        creating (or evolving) a table at once, one commits and the other fails. A loser
        waits, bounded, until the table is ready and uses it; if it never becomes ready,
        the original error is raised.
        """
        try:
            change()
            return True
        except Exception as error:
            deadline = time.monotonic() + RACE_WAIT_S
            while time.monotonic() < deadline:
                if decide(table.contract, inspect_table(table.location))[0] is Action.READY:
                    log.info("%s: a concurrent process did it first (%s); using its table",
                             what, str(error).strip().splitlines()[0][:200])
                    return False
                time.sleep(0.2)
            raise

    def read(self, name: str) -> DataFrame:
        """The current version of a table, by path."""
        return self.spark.read.format("delta").load(self.ensure(names=False)[name].location)

    def read_rows(self, name: str, **equal: object) -> list[dict[str, object]]:
        """Rows of a small bookkeeping table matching ``column=value`` filters, read on
        the driver with delta-rs: no Spark job, milliseconds instead of seconds."""
        return driver_rows.read_rows(self[name].location, **equal)

    def read_arrow(self, name: str, **equal: object) -> pa.Table:
        """Like :meth:`read_rows`, as an Arrow table (the table must exist)."""
        return driver_rows.read_arrow(self[name].location, **equal)

    def append_rows(self, name: str, rows: driver_rows.Rows) -> None:
        """Append rows to an audit log from the driver (:mod:`driver_rows`)."""
        table = self.ensure(names=False)[name]
        driver_rows.append_rows(table.location, table.contract, rows)

    def append_rows_once(self, name: str, rows: driver_rows.Rows, app_id: str,
                         version: int) -> bool:
        """Append rows once per ``(app_id, version)`` from the driver."""
        table = self.ensure(names=False)[name]
        return driver_rows.append_rows_once(table.location, table.contract, rows, app_id,
                                            version)

    def replace_rows(self, name: str, rows: driver_rows.Rows, **equal: str) -> None:
        """Replace the rows where every ``column = value`` holds, from the driver."""
        table = self.ensure(names=False)[name]
        driver_rows.replace_rows(table.location, table.contract, rows, **equal)

    def drift(self, name: str) -> list[str]:
        """Differences between the table on disk and its contract (empty when none)."""
        table = self.ensure(names=False)[name]
        return schema_drift(table.contract, on_disk_schema(table.location))

    def check_drift(self) -> None:
        """Refuse to load into tables whose schema drifted from their contracts."""
        problems = {name: self.drift(name) for name in self.tables}
        problems = {name: diff for name, diff in problems.items() if diff}
        if problems:
            lines = [f"{name}: {'; '.join(diff)}" for name, diff in problems.items()]
            raise TableDriftError("tables differ from their data contracts:\n"
                                  + "\n".join(lines))
