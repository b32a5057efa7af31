"""The nightly pipeline's steps for one broker, as plain functions the DAG calls.

Each step takes and returns small JSON-able dicts (Airflow passes them between tasks as
XComs) and raises :class:`StepError` naming the broker, the step, the file and the
reason when it cannot go on. ``StepError.permanent`` says whether a retry can help (a
store that went backwards stays that way; a dropped SSH connection may not). Nothing here
imports Airflow: the DAG (``dags/rmq_nightly.py``) owns connections, retries and Assets.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.lakehouse import tables as T
from jobs.lakehouse.disk_space import (
    BOOKKEEPING_ROOM,
    DiskFullError,
    disk_full_said,
    disk_of,
    ensure_room,
)
from jobs.lakehouse.tables import Registry
from jobs.pipeline_config import SLAVE, BrokerSource, PipelineConfig
from jobs.snapshot.copier import SnapshotError, SnapshotInPastError
from jobs.snapshot.roots import snapshots_at
from jobs.snapshot.sources import LocalSource, SourceError, StoreSource

if TYPE_CHECKING:  # the DAG file imports this module while parsing: keep pyspark out
    from pyspark.sql import SparkSession

    from jobs.alerts.evaluation import Alert, AlertRules

log = logging.getLogger(__name__)


class StepError(RuntimeError):
    """A step failed for one broker; ``permanent`` when retrying cannot help."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class StepSkipped(StepError):
    """Nothing to do, and nothing wrong: e.g. a backfill of a date whose store state is
    gone (a newer snapshot exists)."""


class _LogLines:
    """A text stream whose lines go to the log, prefixed with the broker: the load's
    progress display (steps, Spark tasks done, bytes and rate) in the task log."""

    def __init__(self, broker: str) -> None:
        self.broker = broker

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                log.info("%s: %s", self.broker, line.strip())
        return len(text)

    def flush(self) -> None:
        pass


def _say(broker: str) -> Callable[[str], None]:
    return lambda message: log.info("%s", message if message.startswith(broker)
                                    else f"{broker}: {message}")


# --------------------------------------------------------------------------- snapshot


def snapshot_broker(config: PipelineConfig, broker: BrokerSource, snapshot_id: str,
                    source: StoreSource | None = None) -> dict[str, Any]:
    """Take (or find) the broker's snapshot ``snapshot_id``; ``source`` defaults to the
    local store path (the DAG passes an SFTP source for brokers on other hosts)."""
    source = source or LocalSource(resolve_store(broker.store))
    snapshots = snapshots_at(config.snapshot_root)
    try:
        manifest = snapshots.take(
            source, broker.name, snapshot_id, progress=_say(broker.name),
            make_room=lambda: snapshots.clean_up(broker.name, snapshot_id,
                                                 config.retention_days))
    except SnapshotInPastError as error:
        raise StepSkipped(str(error), permanent=True) from error
    except DiskFullError as error:
        raise StepError(str(error)) from error
    except (SnapshotError, SourceError) as error:
        raise StepError(f"{broker.name}: snapshot {snapshot_id}: {error}") from error
    finally:
        source.close()
    log.info("%s", manifest.summary())
    return {
        "broker": broker.name, "snapshot_id": snapshot_id,
        "cluster": broker.cluster_name, "role": broker.role, "master": broker.master,
        "store": snapshots_at(config.snapshot_root).describe(broker.name, snapshot_id),
        "taken_at": manifest.started_at, "existing": manifest.existing,
        "files": len(manifest.files), "from_broker_bytes": manifest.from_broker,
        "reused_bytes": manifest.reused, "linked_files": manifest.count("linked"),
        "zero_tail_bytes": manifest.zero_tail_bytes, "notes": manifest.notes,
    }


def snapshot_store_of(config: PipelineConfig, snapshot: dict[str, Any]) -> Path:
    """The local directory of a snapshot step's snapshot: where it was taken, or (in a
    bucket) this host's mirror of it, downloaded as needed (jobs.snapshot.bucket)."""
    try:
        return snapshots_at(config.snapshot_root).local_store(
            snapshot["broker"], snapshot["snapshot_id"], progress=_say(snapshot["broker"]))
    except SnapshotError as error:
        raise StepError(str(error)) from error


@contextmanager
def _full_disk_said(step: str, config: PipelineConfig) -> Iterator[None]:
    """A step that runs out of disk space fails in one line naming it, the path and the
    space (jobs.lakehouse.disk_space); its writes under the warehouse's directory, or for a
    bucket the temporary directory of its local scratch files."""
    try:
        with disk_full_said(step, disk_of(config.warehouse) or Path(tempfile.gettempdir())):
            yield
    except DiskFullError as error:
        raise StepError(str(error)) from error


def resolve_store(store: str) -> Path:
    from jobs.lakehouse.jars import REPO_ROOT

    path = Path(store).expanduser()
    return path if path.is_absolute() else REPO_ROOT / path


# --------------------------------------------------------------------------- load


def load_broker(start_spark: Callable[[], SparkSession], config: PipelineConfig,
                snapshot: dict[str, Any], *, lookup: bool = True) -> dict[str, Any]:
    """Load the snapshot into the Delta tables (nothing when it is already loaded); with
    ``lookup=False`` its message_lookup rows are left to :func:`lookup_broker`."""
    from jobs.lakehouse.progress import ConsoleProgress
    from jobs.lakehouse.spark_session import SparkOnDemand
    from jobs.load.job import LoadOptions, LoadRefusedError, load_snapshot
    from rmqlib.errors import StoreError

    broker, snapshot_id = snapshot["broker"], snapshot["snapshot_id"]
    options = LoadOptions(taken_at=datetime.fromisoformat(snapshot["taken_at"]),
                          engine=config.load_engine,
                          local_up_to_mib=config.local_load_up_to_mib,
                          trace_topics=config.trace_topics,
                          replica=snapshot.get("role") == SLAVE, lookup=lookup)
    spark = SparkOnDemand(start_spark)  # started only if the load needs Spark
    try:
        with ConsoleProgress(spark, stream=_LogLines(broker)) as progress, \
                _full_disk_said(f"{broker}: load of snapshot {snapshot_id}", config):
            summary = load_snapshot(spark, broker, snapshot_id,
                                    snapshot_store_of(config, snapshot), options,
                                    registry=registry_for(None, config), progress=progress)
    except LoadRefusedError as error:
        raise StepError(f"{broker}: load of snapshot {snapshot_id} refused: {error}",
                        permanent=True) from error
    except StoreError as error:
        raise StepError(f"{broker}: load of snapshot {snapshot_id}: {error}") from error
    rows = {name: result.rows for name, result in summary.results.items()}
    log.info("%s: snapshot %s %s: %d bytes read, rows %s", broker, snapshot_id,
             "already loaded, nothing read" if summary.skipped else "loaded",
             summary.bytes_read, rows)
    return {**_ids(snapshot), **_roles(snapshot), "skipped": summary.skipped,
            "snapshot_seq": summary.snapshot_seq, "bytes_read": summary.bytes_read, "rows": rows,
            "quarantined_bytes": summary.quarantined_bytes, "seconds": round(summary.seconds, 1)}


def lookup_broker(config: PipelineConfig, loaded: dict[str, Any]) -> dict[str, Any]:
    """The message_lookup rows of every snapshot of the broker up to the one just loaded
    that has none yet (jobs/load/lookup_rows.py; nothing for a slave, whose messages are
    its master's). DuckDB and delta-rs in this process: in the DAG this runs beside the
    check instead of at the end of the load, whose Spark application and pool slot it
    does not need. Until it has run, lookups read the unindexed snapshot's messages.

    It holds the broker's load lock, as a load deriving the same rows does: a load of the
    broker started by hand meanwhile makes it fail, to be retried, rather than both
    appending the same snapshot's rows."""
    from jobs.load.broker_lock import BrokerBusyError, broker_load_lock
    from jobs.load.lookup_rows import write_lookup_rows

    broker, snapshot_id = loaded["broker"], loaded["snapshot_id"]
    if loaded.get("role") == SLAVE:
        return {**_ids(loaded), "rows": 0, "snapshots": []}
    step = f"{broker}: message_lookup of snapshot {snapshot_id}"
    clock = time.monotonic()
    try:
        with _full_disk_said(step, config), \
                broker_load_lock(config.warehouse, broker, snapshot_id):
            written = write_lookup_rows(registry_for(None, config), broker,
                                        loaded["snapshot_seq"])
    except BrokerBusyError as error:
        raise StepError(f"{step}: {error}") from error
    log.info("%s: message_lookup: %d row(s) for snapshot(s) %s in %.1f s", broker,
             written.rows, ", ".join(written.snapshots) or "none (all indexed)",
             time.monotonic() - clock)
    return {**_ids(loaded), "rows": written.rows, "snapshots": written.snapshots}


def registry_for(spark: SparkSession | None, config: PipelineConfig) -> Registry:
    """The warehouse's tables; without ``spark`` for driver-side reads and writes only."""
    return Registry(spark, config.warehouse)


def _ids(step: dict[str, Any]) -> dict[str, Any]:
    return {"broker": step["broker"], "snapshot_id": step["snapshot_id"]}


def _roles(step: dict[str, Any]) -> dict[str, Any]:
    """The broker's place in its cluster, passed along from the snapshot step."""
    return {key: step.get(key) for key in ("cluster", "role", "master")}


# --------------------------------------------------------------------------- check


def report_page(config: PipelineConfig, broker: str, snapshot_id: str) -> Path:
    from jobs.report.pages import report_path

    return report_path(config.checks_output / "reports", broker, snapshot_id)


def check_broker(start_spark: Callable[[], SparkSession], config: PipelineConfig,
                 loaded: dict[str, Any], rules_path: Path) -> dict[str, Any]:
    """Reconcile, Great Expectations, report and alert evaluation for the snapshot, on the
    config's check engine (``start_spark`` is called only when that is Spark).

    Skipped when the load added nothing and the snapshot's report exists: a re-run of the
    same logical date then changes nothing (the report is the check's last artefact)."""
    from jobs.check_job import check_snapshot, format_outcome

    broker, snapshot_id = loaded["broker"], loaded["snapshot_id"]
    if loaded.get("role") == SLAVE:
        log.info("%s: snapshot %s is a slave's: checked against its master %s by the "
                 "cluster stage", broker, snapshot_id, loaded.get("master"))
        return {**_ids(loaded), "skipped": True, "replica_of": loaded.get("master"),
                "findings": {}, "alert": None, "alert_severity": None}
    page = report_page(config, broker, snapshot_id)
    if loaded["skipped"] and page.is_file():
        log.info("%s: snapshot %s already checked (%s): nothing to do", broker, snapshot_id,
                 page)
        return {**_ids(loaded), "skipped": True, "report": str(page), **_recorded(
            registry_for(None, config), broker, snapshot_id)}
    with _full_disk_said(f"{broker}: check of snapshot {snapshot_id}", config):
        outcome = check_snapshot(lambda: registry_for(start_spark(), config),
                                 config.warehouse, broker, snapshot_id, rules_path=rules_path,
                                 output=config.checks_output, engine=config.check_engine,
                                 local_up_to_mib=config.local_checks_up_to_mib)
    reconcile = outcome.reconcile
    for line in format_outcome(outcome).splitlines():  # the check CLI's one-screen summary
        log.info("%s: %s", broker, line)
    return {**_ids(loaded), "skipped": False, "report": str(outcome.report),
            "findings": dict(reconcile.findings_by_severity),
            "alert": outcome.alert.title if outcome.alert else None,
            "alert_severity": outcome.alert.severity if outcome.alert else None}


def _recorded(registry: Registry, broker: str, snapshot_id: str) -> dict[str, Any]:
    rows = registry.read_rows(T.CHECK_RESULTS, broker=broker, snapshot_id=snapshot_id)
    findings: dict[str, int] = {}
    for row in rows:
        findings[row["severity"]] = findings.get(row["severity"], 0) + 1
    alerts = registry.read_rows(T.ALERTS, broker=broker, snapshot_id=snapshot_id)
    return {"findings": findings, "alert": alerts[0]["title"] if alerts else None,
            "alert_severity": alerts[0]["severity"] if alerts else None}


# --------------------------------------------------------------------------- alert


#: Sends an alert on the named channels: ``(alert, rules, channels) -> {channel: answer}``,
#: "sent" or the error (the DAG passes Airflow's notifiers, dags/notifiers.py).
SendAlert = Callable[["Alert", "AlertRules", list[str]], dict[str, str]]


def deliver_alert(config: PipelineConfig, checked: dict[str, Any],
                  send: SendAlert) -> dict[str, Any]:
    """Send the snapshot's recorded alert on the channels that have not had it yet and
    record what each answered; a channel that failed fails the step, so it is retried.

    A channel's answer is recorded after it was sent: a task killed in between sends it
    again on its retry (at least once; never twice for an answer already recorded)."""
    from jobs.alerts.evaluation import SENT, AlertRules, record_alert, recorded_alert

    broker, snapshot_id = checked["broker"], checked["snapshot_id"]
    registry = registry_for(None, config)  # a few rows: delta-rs, no JVM
    recorded = recorded_alert(registry, broker, snapshot_id)
    if recorded is None:
        log.info("%s: snapshot %s: no alert (no threshold crossed)", broker, snapshot_id)
        return {"broker": broker, "snapshot_id": snapshot_id, "alert": None, "delivery": {}}
    alert, delivery = recorded
    pending = [channel for channel, status in delivery.items() if status != SENT]
    if pending and not config.deliver_alerts:
        log.warning("%s: snapshot %s: alert recorded, not sent (deliver_alerts is false in "
                    "%s): %s", broker, snapshot_id, config.source, alert.title)
    elif pending:
        # the answers must be recordable before anything is sent: a send whose record
        # fails for want of space is sent again by the retry
        step = f"{broker}: alert of snapshot {snapshot_id}"
        with _full_disk_said(step, config):
            ensure_room(step, disk_of(config.warehouse), BOOKKEEPING_ROOM)
            delivery.update(send(alert, AlertRules.load(config.alerts_config), pending))
            record_alert(registry, alert, delivery)
    else:
        log.info("%s: snapshot %s: alert already delivered (%s)", broker, snapshot_id,
                 ", ".join(delivery))
    failed = {channel: status for channel, status in delivery.items()
              if status != SENT} if config.deliver_alerts else {}
    if failed:
        raise StepError(f"{broker}: alert of snapshot {snapshot_id} not delivered: "
                        + "; ".join(f"{c}: {s}" for c, s in failed.items()))
    return {"broker": broker, "snapshot_id": snapshot_id, "alert": alert.title,
            "severity": alert.severity, "delivery": delivery}


# --------------------------------------------------------------------------- cluster


def check_cluster(config: PipelineConfig, cluster: str, brokers: list[dict[str, Any]],
                  snapshot_id: str) -> dict[str, Any]:
    """Cluster lag and status, replica checks, the cluster page and the cluster alert of
    one night (no Spark); runs after every broker of the cluster was checked."""
    from jobs.alerts.cluster_alerts import alert_name
    from jobs.cluster_job import check_cluster_night, format_cluster_outcome

    outcome = check_cluster_night(config.warehouse, cluster, [BrokerSource(**b) for b in brokers],
                    snapshot_id, config.snapshot_root, rules_path=config.alerts_config,
                    output=config.checks_output)
    for line in format_cluster_outcome(outcome).splitlines():
        log.info("cluster %s: %s", cluster, line)
    return {"broker": alert_name(cluster), "snapshot_id": snapshot_id, "cluster": cluster,
            "statuses": outcome.statuses, "diff_totals": outcome.diff_totals,
            "replicas": {name: r.state for name, r in outcome.replicas.items()},
            "report": str(outcome.report) if outcome.report else None,
            "alert": outcome.alert.title if outcome.alert else None,
            "alert_severity": outcome.alert.severity if outcome.alert else None}


# --------------------------------------------------------------------------- maintenance


def maintain_broker(config: PipelineConfig, checked: dict[str, Any]) -> dict[str, Any]:
    """Compact, vacuum and checkpoint the tables after the broker's checks (no Spark)."""
    from jobs.maintain.maintenance import maintain_tables

    broker = checked["broker"]
    with _full_disk_said(f"{broker}: maintenance", config):
        rows = maintain_tables(config.warehouse, broker,
                               time_travel_days=config.time_travel_days, progress=_say(broker))
    return {**_ids(checked),
            "files_before": sum(r["files_before"] for r in rows),
            "files_after": sum(r["files_after"] for r in rows),
            "files_vacuumed": sum(r["files_vacuumed"] for r in rows)}


# --------------------------------------------------------------------------- cleanup


def clean_up_broker(config: PipelineConfig, broker: str, snapshot_id: str) -> dict[str, Any]:
    result = snapshots_at(config.snapshot_root).clean_up(broker, snapshot_id,
                                                         config.retention_days)
    log.info("%s: snapshots removed (older than %g days): %s; kept: %s", broker,
             config.retention_days, ", ".join(result.removed) or "none",
             ", ".join(result.kept) or "none")
    if result.objects_removed:
        log.info("%s: %d object(s) no kept snapshot names deleted from the bucket", broker,
                 result.objects_removed)
    return {"broker": broker, "snapshot_id": snapshot_id, "removed": result.removed,
            "kept": result.kept, "partials_removed": result.partials_removed,
            "objects_removed": result.objects_removed}
