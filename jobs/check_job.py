"""The check job: everything that judges one loaded snapshot, in order.

Reconcile and Great Expectations run on the snapshot's check engine (``jobs.check.engines``):
in this process for a small broker (no JVM is started), on Spark for a big one.

1. reconcile (``jobs.check.reconcile``): check_results and consumer_lag;
2. consumer status (``jobs.check.consumer_status``): each group's status over the last N
   snapshots and its catch-up estimate, in consumer_status;
3. Great Expectations (``jobs.check.expectations``): the contracts' quality rules, Data Docs;
4. the nightly report (``jobs.report.pages``): one HTML page per snapshot, linking the Data Docs;
5. the alert (``jobs.alerts.evaluation``): thresholds from ``config/alerts.yaml``, compared with the
   earlier snapshots' conditions -> at most one summarising alert of what changed,
   recorded in the ``alerts`` table and the log.

Delivery by e-mail and webhook belongs to the orchestrator (``dags/notifiers.py``, through
Airflow's notifiers): this job records the alert with every configured channel "pending",
and the DAG's alert task replaces that with what each channel answered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from jobs.alerts.evaluation import (
    DEFAULT_CONFIG,
    Alert,
    AlertRules,
    alert_lines,
    condition_history,
    evaluate,
    keep_delivered,
    record_alert,
)
from jobs.check.consumer_status import judge_snapshot
from jobs.check.engines import AUTO, CheckEngine, engine_for
from jobs.check.expectations import ExpectationsSummary, run_expectations
from jobs.check.reconcile import ReconcileSummary, reconcile_snapshot
from jobs.check.views import snapshot_scope
from jobs.lakehouse import tables as T
from jobs.lakehouse.disk_space import BOOKKEEPING_ROOM, disk_of, ensure_room
from jobs.lakehouse.engine_choice import LOCAL_CHECKS_UP_TO_MIB
from jobs.lakehouse.locations import (
    Location,
    checks_directory,
    shared_table_handles,
    warehouse_location,
)
from jobs.lakehouse.tables import Registry
from jobs.report.pages import write_report

log = logging.getLogger(__name__)


@dataclass
class CheckOutcome:
    reconcile: ReconcileSummary
    statuses: dict[str, str]          # group -> status at this snapshot
    expectations: ExpectationsSummary
    report: Path
    alert: Alert | None


#: What a check writes beside the tables, per snapshot: its report page and its Data Docs
#: (the growing store's nights: 7.1 MiB each, the first 16.2 MiB with GX's project).
CHECK_OUTPUT_ROOM = 8 << 20


@shared_table_handles()
def check_snapshot(spark_registry: Callable[[], Registry], warehouse: Path | Location, broker: str,
                   snapshot_id: str, *, rules_path: Path = DEFAULT_CONFIG,
                   output: Path | None = None, engine: str = AUTO,
                   local_up_to_mib: int = LOCAL_CHECKS_UP_TO_MIB) -> CheckOutcome:
    """Run the five steps for ``snapshot_id`` of ``broker``; idempotent per snapshot.

    ``spark_registry`` gives the warehouse's Spark registry, called only if the check ``engine``
    (auto, local or spark; see jobs.check.engines.engine_for) is Spark. ``output`` holds the
    Data Docs (``gx/<broker>/``) and the reports (``reports/``); default
    ``<warehouse>/_checks`` (jobs.lakehouse.locations.checks_directory).
    """
    rules = AlertRules.load(rules_path)  # a bad config fails before any Spark job
    output = output or checks_directory(warehouse_location(warehouse, "warehouse"))
    step = f"{broker}: check of snapshot {snapshot_id}"
    ensure_room(step, disk_of(warehouse), BOOKKEEPING_ROOM)
    ensure_room(step, disk_of(output), CHECK_OUTPUT_ROOM)
    registry = Registry(None, warehouse)  # driver-side reads and writes (delta-rs)
    scope = snapshot_scope(registry, broker, snapshot_id)
    checks: CheckEngine = engine_for(engine, scope.commitlog_bytes, local_up_to_mib,
                                     registry, spark_registry)
    reconciled = reconcile_snapshot(checks, registry, broker, snapshot_id, rules.transactions)
    statuses = judge_snapshot(registry, broker, snapshot_id, rules.status.settings)
    # One GX project per broker: checks of different brokers run at once, and GX's
    # file-backed project (config, suites, Data Docs index) is not safe to share then.
    expectations = run_expectations(checks, registry, broker, snapshot_id,
                                    output / "gx" / broker)
    report = write_report(registry, broker, snapshot_id, output / "reports",
                          expectations.data_docs_index)
    lag_rows = registry.read_rows(T.CONSUMER_LAG, broker=broker, snapshot_id=snapshot_id)
    alert = evaluate(rules, broker, snapshot_id,
                     registry.read_rows(T.CHECK_RESULTS, broker=broker, snapshot_id=snapshot_id),
                     lag_rows, expectations.failures, status_rows=statuses,
                     taken_at=_taken_at(lag_rows, statuses),
                     history=condition_history(registry, rules, broker, snapshot_id))
    if alert is not None:
        alert, delivery = keep_delivered(registry, rules, alert)
        record_alert(registry, alert, delivery)
    return CheckOutcome(reconciled, {r["group_name"]: r["status"] for r in statuses
                                     if r["level"] == "group"}, expectations, report, alert)


def _taken_at(lag_rows: list[dict], statuses: list[dict]) -> datetime | None:
    """The snapshot's time, which reminders count days in."""
    for row in (*statuses, *lag_rows):
        if row.get("snapshot_taken_at") is not None:
            return row["snapshot_taken_at"]
    return None


def format_outcome(outcome: CheckOutcome) -> str:
    """The one-screen summary the CLI prints."""
    r = outcome.reconcile
    severities = ", ".join(f"{count} {name}" for name, count in
                           sorted(r.findings_by_severity.items())) or "no findings"
    statuses = ", ".join(f"{count} {name}" for name, count in sorted(r.lag_by_status.items()))
    lines = [f"checks of {r.broker} / {r.snapshot_id}: {severities} ({r.seconds:.1f} s)",
             f"consumer lag: {r.lag_rows} queue rows ({statuses or 'none'})",
             "consumer status: " + (", ".join(f"{group} {status}" for group, status in
                                              outcome.statuses.items()) or "no groups"),
             *outcome.expectations.lines(),
             f"report: {outcome.report}"]
    lines += alert_lines(outcome.alert)
    return "\n".join(lines)
