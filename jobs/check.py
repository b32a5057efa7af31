"""The check job: everything that judges one loaded snapshot, in order.

1. reconcile (``jobs.reconcile``): check_results and consumer_lag;
2. Great Expectations (``jobs.expectations``): the contracts' quality rules, Data Docs;
3. the nightly report (``jobs.report``): one HTML page per snapshot, linking the Data Docs;
4. the alert (``jobs.alerts``): thresholds from ``config/alerts.yaml`` -> at most one
   summarising alert, recorded in the ``alerts`` table and the log.

Delivery by e-mail and webhook belongs to the orchestrator (``dags/notifiers.py``, through
Airflow's notifiers): this job records the alert with every configured channel "pending",
and the DAG's alert task replaces that with what each channel answered.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from jobs import tables as T
from jobs.alerts import DEFAULT_CONFIG, Alert, AlertRules, evaluate, record_alert
from jobs.expectations import ExpectationsSummary, run_expectations
from jobs.reconcile import ReconcileSummary, reconcile_snapshot
from jobs.report import write_report
from jobs.tables import Registry

log = logging.getLogger(__name__)
PENDING = "pending"


@dataclass
class CheckOutcome:
    reconcile: ReconcileSummary
    expectations: ExpectationsSummary
    report: Path
    alert: Alert | None


def check_snapshot(spark: SparkSession, registry: Registry, broker: str, snapshot_id: str,
                   *, rules_path: Path = DEFAULT_CONFIG,
                   output: Path | None = None) -> CheckOutcome:
    """Run the four steps for ``snapshot_id`` of ``broker``; idempotent per snapshot.

    ``output`` holds the Data Docs (``gx/``) and the reports (``reports/``); default
    ``<warehouse>/_checks``.
    """
    rules = AlertRules.load(rules_path)  # a bad config fails before any Spark job
    output = output or Path(registry.warehouse) / "_checks"
    reconciled = reconcile_snapshot(spark, registry, broker, snapshot_id)
    expectations = run_expectations(spark, registry, broker, snapshot_id, output / "gx")
    report = write_report(spark, registry, broker, snapshot_id, output / "reports",
                          expectations.data_docs_index)
    alert = evaluate(rules, broker, snapshot_id,
                     registry.read_rows(T.CHECK_RESULTS, broker=broker, snapshot_id=snapshot_id),
                     registry.read_rows(T.CONSUMER_LAG, broker=broker, snapshot_id=snapshot_id),
                     expectations.failures)
    if alert is not None:
        record_alert(spark, registry, alert, dict.fromkeys(rules.channels.names(), PENDING))
    return CheckOutcome(reconciled, expectations, report, alert)


def format_outcome(outcome: CheckOutcome) -> str:
    """The one-screen summary the CLI prints."""
    r = outcome.reconcile
    severities = ", ".join(f"{count} {name}" for name, count in
                           sorted(r.findings_by_severity.items())) or "no findings"
    statuses = ", ".join(f"{count} {name}" for name, count in sorted(r.lag_by_status.items()))
    lines = [f"checks of {r.broker} / {r.snapshot_id}: {severities} ({r.seconds:.1f} s)",
             f"consumer lag: {r.lag_rows} queue rows ({statuses or 'none'})",
             *outcome.expectations.lines(),
             f"report: {outcome.report}"]
    if outcome.alert is None:
        lines.append("alert: none (no threshold crossed)")
    else:
        lines.append(f"alert [{outcome.alert.severity}]: {outcome.alert.title}")
        lines += [f"  - {finding}" for finding in outcome.alert.findings]
    return "\n".join(lines)
