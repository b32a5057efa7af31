"""The reconcile job: check one loaded snapshot and compute its consumer lag.

Reads only the Delta tables (never the store), runs every check of :mod:`jobs.check.checks` and
the lag of :mod:`jobs.check.lag` as Spark SQL over the snapshot's views
(:mod:`jobs.check.views`), and replaces that snapshot's rows of ``check_results`` and
``consumer_lag`` (replaced where broker and snapshot match: re-running gives the same
tables). Only the findings' counts per severity come back to the driver.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.check.checks import CHECKS, DERIVED_VIEWS, FINDING_COLUMNS, SQL_FRAGMENTS
from jobs.check.lag import consumer_lag
from jobs.check.views import SnapshotScope, create_views, drop_views, snapshot_scope
from jobs.lakehouse import tables as T
from jobs.lakehouse.delta_io import conform
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


def findings(spark: SparkSession, scope: SnapshotScope) -> DataFrame:
    """Every check's findings for ``scope`` as one DataFrame of ``check_results`` rows."""
    parts = [spark.sql(check.query(scope)).select(*FINDING_COLUMNS) for check in CHECKS]
    union = reduce(DataFrame.unionByName, parts)
    return union.select(
        F.lit(scope.broker).alias("broker"), F.lit(scope.snapshot_id).alias("snapshot_id"),
        *FINDING_COLUMNS, F.current_timestamp().alias("checked_at"))


def reconcile_snapshot(spark: SparkSession, registry: Registry, broker: str,
                       snapshot_id: str) -> ReconcileSummary:
    """Check ``snapshot_id`` of ``broker`` and write its findings and consumer lag."""
    clock = time.monotonic()
    scope = snapshot_scope(registry, broker, snapshot_id)
    create_views(spark, registry, scope)
    lag = consumer_lag(spark, scope).localCheckpoint()  # computed once, used twice
    lag.createOrReplaceTempView("rc_lag")
    derived = []
    for name, query in DERIVED_VIEWS.items():
        frame = spark.sql(query.format(cl_max=scope.commitlog_max_offset,
                                         **SQL_FRAGMENTS)).persist()
        frame.createOrReplaceTempView(name)
        derived.append(frame)
    # A few rows per queue and per finding: written from the driver (delta-rs), not as
    # two more Spark writes.
    for table, frame in ((T.CONSUMER_LAG, lag), (T.CHECK_RESULTS, findings(spark, scope))):
        registry.replace_rows(table, conform(frame, registry[table].contract).toArrow(),
                              broker=broker, snapshot_id=snapshot_id)
    drop_views(spark)
    for frame in [lag, *derived]:
        frame.unpersist()
    summary = ReconcileSummary(broker, snapshot_id)
    written = registry.read_rows(T.CHECK_RESULTS, broker=broker, snapshot_id=snapshot_id)
    for row in written:
        severity = str(row["severity"])
        summary.findings_by_severity[severity] = summary.findings_by_severity.get(severity,
                                                                                  0) + 1
    lag_rows = registry.read_rows(T.CONSUMER_LAG, broker=broker, snapshot_id=snapshot_id)
    summary.lag_rows = len(lag_rows)
    for row in lag_rows:
        status = str(row["status"])
        summary.lag_by_status[status] = summary.lag_by_status.get(status, 0) + 1
    summary.seconds = time.monotonic() - clock
    log.info("reconciled %s/%s at %s: findings %s, lag rows %s in %.1f s", broker,
             snapshot_id, datetime.now(UTC).isoformat(timespec="seconds"),
             summary.findings_by_severity, summary.lag_by_status, summary.seconds)
    return summary
