"""Helpers shared by the Spark load tests: load into a warehouse, read tables back."""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path

from jobs.lakehouse.tables import AUDIT_LOGS, TABLES, Registry
from jobs.load.job import LoadOptions, LoadSummary, load_snapshot

# Small splits so that the 1 MiB segments of the harness stores become several tasks.
TEST_OPTIONS = LoadOptions(split_bytes=256 * 1024, queue_split_bytes=2000)


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
