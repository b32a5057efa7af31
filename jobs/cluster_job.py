"""The cluster job: what one night's snapshots of a whole cluster say together.

Runs after every broker of the cluster was loaded and checked (the DAG's ``cluster`` task),
in this process (a few rows per group and a byte comparison per slave: no Spark):

1. cluster lag and status (:mod:`jobs.check.cluster_lag`): ``cluster_lag`` from the masters'
   ``consumer_lag``, each group judged across every master;
2. replica checks (:mod:`jobs.check.replica`): each slave's snapshot against its master's,
   ``replica_status`` and the slave's ``check_results``;
3. the cluster page of the nightly report (:mod:`jobs.report.cluster_page`);
4. the cluster alert (:mod:`jobs.alerts.cluster_alerts`), recorded in ``alerts`` as
   ``cluster:<name>`` with every channel pending, for the DAG to deliver.

Every step replaces the night's rows of its cluster or slave: running it again changes
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from jobs.alerts.cluster_alerts import (
    cluster_findings,
    cluster_history,
    evaluate_cluster,
    member_rows,
)
from jobs.alerts.evaluation import (
    DEFAULT_CONFIG,
    Alert,
    AlertRules,
    alert_lines,
    keep_delivered,
    record_alert,
)
from jobs.check.cluster_lag import judge_cluster
from jobs.check.replica import ReplicaOutcome, ReplicaPair, check_replica
from jobs.lakehouse import tables as T
from jobs.lakehouse.locations import Location, checks_directory, warehouse_location
from jobs.lakehouse.tables import Registry
from jobs.pipeline_config import BrokerSource
from jobs.report.cluster_page import ClusterBroker, write_cluster_report
from jobs.snapshot.manifest import MANIFEST, Manifest
from jobs.snapshot.roots import snapshots_at

log = logging.getLogger(__name__)
OFFSETS_FILE = "config/consumerOffset.json"


@dataclass
class ClusterOutcome:
    cluster: str
    snapshot_id: str
    statuses: dict[str, str]                       # group -> cluster status
    diff_totals: dict[str, int]                    # group -> Diff Total
    replicas: dict[str, ReplicaOutcome] = field(default_factory=dict)
    report: Path | None = None
    alert: Alert | None = None


def check_cluster_night(warehouse: Path | Location, cluster: str, brokers: Sequence[BrokerSource],
                  snapshot_id: str, snapshot_root: Path | Location, *,
                  rules_path: Path = DEFAULT_CONFIG, output: Path | None = None,
                  now: datetime | None = None) -> ClusterOutcome:
    """Judge the cluster's night ``snapshot_id``; idempotent per night."""
    rules = AlertRules.load(rules_path)
    registry = Registry(None, warehouse).ensure(names=False)
    masters = [b.name for b in brokers if not b.is_slave]
    slaves = [b for b in brokers if b.is_slave]
    rows = judge_cluster(registry, cluster, masters, snapshot_id, rules.status.settings)
    groups = [r for r in rows if r["level"] == "group"]
    outcome = ClusterOutcome(cluster, snapshot_id,
                             {r["group_name"]: r["status"] for r in groups},
                             {r["group_name"]: r["diff_total"] for r in groups})
    loaded = _loaded(registry, [b.name for b in brokers], snapshot_id)
    for slave in slaves:
        if slave.name not in loaded:
            log.warning("cluster %s: slave %s has no loaded snapshot %s: not compared",
                        cluster, slave.name, snapshot_id)
            continue
        pair = replica_pair(snapshot_root, cluster, slave, snapshot_id, loaded)
        outcome.replicas[slave.name] = check_replica(registry, pair, rules.replica, now)
    out = output or checks_directory(warehouse_location(warehouse, "warehouse"))
    outcome.report = write_cluster_report(
        registry, cluster, [ClusterBroker(b.name, b.role, b.master) for b in brokers],
        snapshot_id, out / "reports")
    outcome.alert = _alert(registry, rules, cluster, masters, [s.name for s in slaves],
                           snapshot_id, rows, now)
    return outcome


def replica_pair(snapshot_root: Path | Location, cluster: str, slave: BrokerSource,
                 snapshot_id: str, loaded: dict[str, dict]) -> ReplicaPair:
    """The slave's and its master's snapshot directories of the night (local, or this
    host's mirror of a bucket's), and when the slave's consumer offsets were last written
    (from its snapshot manifest)."""
    snapshots = snapshots_at(snapshot_root)
    master = slave.master or ""
    master_store = snapshots.local_store(master, snapshot_id) \
        if master in loaded and snapshots.manifest(master, snapshot_id) else None
    slave_store = snapshots.local_store(slave.name, snapshot_id)
    return ReplicaPair(cluster, slave.name, master, snapshot_id, slave_store, master_store,
                       loaded[slave.name].get("taken_at"),
                       _written_at(Manifest.load(slave_store.parent / MANIFEST), OFFSETS_FILE))


def _written_at(manifest: Manifest, relative: str) -> datetime | None:
    entry = next((f for f in manifest.files if f.path == relative), None)
    return datetime.fromtimestamp(entry.mtime_ns / 1e9, UTC) if entry else None


def _loaded(registry: Registry, brokers: Sequence[str], snapshot_id: str) -> dict[str, dict]:
    """The brokers' loaded snapshot rows of the night, by broker."""
    found = {}
    for broker in brokers:
        rows = registry.read_rows(T.SNAPSHOTS, broker=broker, snapshot_id=snapshot_id)
        if rows and rows[0]["status"] == "loaded":
            found[broker] = rows[0]
    return found


def _alert(registry: Registry, rules: AlertRules, cluster: str, masters: list[str],
           slaves: list[str], snapshot_id: str, rows: list[dict],
           now: datetime | None) -> Alert | None:
    lag_rows, replica_rows = member_rows(registry, masters, slaves, snapshot_id)
    taken_at = max((r["snapshot_taken_at"] for r in rows if r["snapshot_taken_at"]),
                   default=None)
    alert = evaluate_cluster(
        rules, cluster, snapshot_id, cluster_findings(rules, rows, lag_rows, replica_rows),
        taken_at=taken_at, now=now,
        history=cluster_history(registry, rules, cluster, masters, slaves, snapshot_id,
                                taken_at))
    if alert is not None:
        alert, delivery = keep_delivered(registry, rules, alert)
        record_alert(registry, alert, delivery)
    return alert


def format_cluster_outcome(outcome: ClusterOutcome) -> str:
    """The one-screen summary the CLI and the task log print."""
    lines = [f"cluster {outcome.cluster} / {outcome.snapshot_id}:",
             "groups: " + (", ".join(f"{g} {s} (Diff Total {outcome.diff_totals[g]:,})"
                                     for g, s in sorted(outcome.statuses.items())) or "none")]
    for slave, replica in sorted(outcome.replicas.items()):
        status = replica.status
        lines.append(f"replica {slave} of {status['master']}: {replica.state}, "
                     f"{status.get('lag_bytes') or 0:,} bytes behind, "
                     f"{len(replica.findings)} finding(s)")
    if outcome.report:
        lines.append(f"report: {outcome.report}")
    lines += alert_lines(outcome.alert)
    return "\n".join(lines)
