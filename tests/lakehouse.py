"""Helpers shared by the Spark load tests: load into a warehouse, read tables back."""

from __future__ import annotations

import dataclasses
import json
from datetime import date, datetime
from pathlib import Path

from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import read_arrow
from jobs.lakehouse.tables import AUDIT_LOGS, TABLES, Registry
from jobs.load.job import LoadOptions, LoadSummary, load_snapshot

# Small splits so that the 1 MiB segments of the harness stores become several tasks, on
# Spark's executors (the default engine choice would decode these small stores in process;
# tests/test_load_engines.py holds that path to the same rows).
TEST_OPTIONS = LoadOptions(split_bytes=256 * 1024, queue_split_bytes=2000, engine="spark")
IN_PROCESS_OPTIONS = dataclasses.replace(TEST_OPTIONS, engine="local")
# What a load writes: every table but the checks' and the audit logs.
LOADED_TABLES = (T.MESSAGES, T.QUEUE_ENTRIES, T.INDEX_ENTRIES, T.MESSAGE_TRACES, T.TOPICS,
                 T.SUBSCRIPTION_GROUPS, T.CONSUMER_OFFSETS, T.DELAY_OFFSETS, T.PENDING_TIMERS,
                 T.COMPACTED_ENTRIES, T.BROKER_EPOCHS, T.POP_IN_FLIGHT, T.TRANSACTIONS, T.SNAPSHOTS,
                 T.QUARANTINE, T.RETENTION_GAPS, T.LOAD_STATE)


def load(spark, warehouse: Path, broker: str, snapshot_id: str, store: Path,  # type: ignore[no-untyped-def]
         options: LoadOptions = TEST_OPTIONS) -> tuple[Registry, LoadSummary]:
    registry = Registry(spark, warehouse)
    summary = load_snapshot(spark, broker, snapshot_id, store, options, registry=registry)
    return registry, summary


def canonical(value: object) -> object:
    """A JSON-able, order-independent form of a cell (maps sorted, bytes as hex)."""
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, dict):
        return sorted((str(k), canonical(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        items = [canonical(v) for v in value]
        # Arrow maps arrive as lists of (key, value) pairs: order-independent too.
        if items and all(isinstance(v, list) and len(v) == 2 for v in items):
            return sorted(items)
        return items
    return value


def table_content(registry: Registry, name: str, broker: str | None = None) -> list[str]:
    """Every row of a table (of one broker) as canonical JSON, sorted: equal lists = equal
    tables."""
    frame = registry.read(name)
    rows = (frame.where(frame.broker == broker) if broker else frame).collect()
    return sorted(json.dumps([canonical(v) for v in row], sort_keys=True, default=str)
                  for row in rows)


def broker_rows(registry: Registry, name: str, broker: str) -> list[str]:
    """Every row of one broker in a table as sorted canonical JSON, read with delta-rs."""
    rows = read_arrow(registry[name].location, broker=broker).to_pylist()
    return sorted(json.dumps({k: canonical(v) for k, v in row.items()}, sort_keys=True,
                             default=str) for row in rows)


def all_content(registry: Registry, broker: str | None = None,
                tables: tuple[str, ...] = TABLES) -> dict[str, list[str]]:
    """Content of every table except the audit logs (which grow with every attempt)."""
    return {name: table_content(registry, name, broker) for name in tables
            if name not in AUDIT_LOGS}


def delta_rows(location: str | Path, version: int | None = None,
               leave_out: frozenset[str] = frozenset()) -> list[str]:
    """Every row of a Delta table (at ``version``) as sorted canonical JSON, read with
    delta-rs, a reader independent of Spark; ``leave_out`` names columns to ignore."""
    from deltalake import DeltaTable

    table = DeltaTable(str(location), version=version)
    return sorted(json.dumps({k: canonical(v) for k, v in row.items() if k not in leave_out},
                             sort_keys=True, default=str)
                  for row in table.to_pyarrow_table().to_pylist())


#: Columns that say when (or where) a check ran, not what it found.
RUN_COLUMNS = frozenset({"checked_at", "raised_at", "report_url"})


def warehouse_content(warehouse: str | Path) -> dict[str, list[str]]:
    """Every table's rows but the audit logs', run columns left out, by delta-rs: what two
    warehouses of the same nights must agree on, whoever wrote them and wherever."""
    return {name: delta_rows(T.table_location(str(warehouse), name), leave_out=RUN_COLUMNS)
            for name in TABLES if name not in AUDIT_LOGS}


def reconcile_on_both_engines(spark, registry: Registry, broker: str, snapshot_id: str):  # type: ignore[no-untyped-def]
    """Reconcile with the local engine (DuckDB), then with Spark, and require the very same
    findings and lag rows (all but the time of the check) and summary; Spark's is returned
    and its rows stay in the tables."""
    from jobs.check.engines import DuckDbEngine, SparkEngine
    from jobs.check.reconcile import reconcile_snapshot
    from jobs.lakehouse import tables as T

    def written() -> dict[str, list[str]]:
        return {name: delta_rows(registry[name].location, leave_out=frozenset({"checked_at"}))
                for name in (T.CHECK_RESULTS, T.CONSUMER_LAG)}

    local = reconcile_snapshot(DuckDbEngine(registry.warehouse), registry, broker, snapshot_id)
    local_rows = written()
    on_spark = reconcile_snapshot(SparkEngine(spark, registry), registry, broker, snapshot_id)
    spark_rows = written()
    for name, rows in local_rows.items():
        only = sorted(set(rows) ^ set(spark_rows[name]))
        assert rows == spark_rows[name], f"{name}: " + "\n".join(
            ("local " if row in rows else "spark ") + row for row in only)
    assert (local.findings_by_severity, local.lag_by_status) == (
        on_spark.findings_by_severity, on_spark.lag_by_status)
    return on_spark
