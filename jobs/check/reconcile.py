"""The reconcile job: check one loaded snapshot and compute its consumer lag.

Reads only the Delta tables (never the store), runs every check of :mod:`jobs.check.checks` and
the lag of :mod:`jobs.check.lag` as SQL over the snapshot's views (:mod:`jobs.check.views`)
in a check engine (:mod:`jobs.check.engines`: Spark, or DuckDB in this process), and
replaces that snapshot's rows of ``check_results``, ``consumer_lag`` and ``queue_bounds``
(replaced where broker and snapshot match: re-running gives the same tables).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import pyarrow as pa

from jobs.check.checks import (
    CHECKS,
    DERIVED_VIEWS,
    FINDING_COLUMNS,
    TransactionRules,
    sql_fragments,
)
from jobs.check.engines import CheckEngine
from jobs.check.lag import consumer_lag_sql
from jobs.check.views import SnapshotScope, create_views, snapshot_scope
from jobs.lakehouse import tables as T
from jobs.lakehouse.tables import Registry

log = logging.getLogger(__name__)


@dataclass
class ReconcileSummary:
    broker: str
    snapshot_id: str
    findings_by_severity: dict[str, int] = field(default_factory=dict)
    lag_rows: int = 0
    lag_by_status: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def errors(self) -> int:
        return self.findings_by_severity.get("error", 0)


def findings_sql(scope: SnapshotScope) -> str:
    """Every check's findings for ``scope`` in one query (``FINDING_COLUMNS``)."""
    columns = ", ".join(FINDING_COLUMNS)
    return "\nUNION ALL\n".join(f"SELECT {columns} FROM ({check.query(scope)}) {check.name}"
                                 for check in CHECKS)


def reconcile_snapshot(engine: CheckEngine, registry: Registry, broker: str,
                       snapshot_id: str, transactions: TransactionRules | None = None
                       ) -> ReconcileSummary:
    """Check ``snapshot_id`` of ``broker`` in ``engine`` and write its findings and lag
    (``transactions``: the thresholds of the transaction checks)."""
    clock = time.monotonic()
    transactions = transactions or TransactionRules()
    scope = replace(snapshot_scope(registry, broker, snapshot_id),
                    max_pending_transaction_seconds=round(transactions.max_pending_minutes * 60),
                    pending_transaction_severity=transactions.severity)
    create_views(engine, scope)
    engine.create_view("rc_lag", consumer_lag_sql(scope), cached=True)  # used twice
    fragments = sql_fragments(engine.java_hash)
    for name, query in DERIVED_VIEWS.items():
        engine.create_view(name, query.format(cl_max=scope.commitlog_max_offset, **fragments),
                           cached=True)
    lag = engine.arrow("SELECT * FROM rc_lag")
    found = engine.arrow(findings_sql(scope))
    bounds = engine.arrow("SELECT * FROM rc_bounds")
    engine.close()
    checked_at = pa.array([datetime.now(UTC)] * found.num_rows, pa.timestamp("us", "UTC"))
    found = _of_snapshot(found, broker, snapshot_id).append_column("checked_at", checked_at)
    # A few rows per queue and per finding: written from the driver (delta-rs).
    for table, rows in ((T.CONSUMER_LAG, lag), (T.CHECK_RESULTS, found),
                        (T.QUEUE_BOUNDS, _of_snapshot(bounds, broker, snapshot_id))):
        registry.replace_rows(table, rows, broker=broker, snapshot_id=snapshot_id)
    summary = ReconcileSummary(broker, snapshot_id)
    for severity in found["severity"].to_pylist():
        summary.findings_by_severity[severity] = summary.findings_by_severity.get(severity, 0) + 1
    summary.lag_rows = lag.num_rows
    for status in lag["status"].to_pylist():
        summary.lag_by_status[status] = summary.lag_by_status.get(status, 0) + 1
    summary.seconds = time.monotonic() - clock
    log.info("reconciled %s/%s at %s with %s: findings %s, lag rows %s in %.1f s", broker,
             snapshot_id, datetime.now(UTC).isoformat(timespec="seconds"), engine.name,
             summary.findings_by_severity, summary.lag_by_status, summary.seconds)
    return summary


def _of_snapshot(rows: pa.Table, broker: str, snapshot_id: str) -> pa.Table:
    """``rows`` with the broker and snapshot columns their tables key them by."""
    return (rows.append_column("broker", pa.array([broker] * rows.num_rows, pa.string()))
            .append_column("snapshot_id", pa.array([snapshot_id] * rows.num_rows, pa.string())))
