"""One summarising alert per (cluster, night): the cluster's groups and its replicas.

The brokers' own alerts (:mod:`jobs.alerts.evaluation`) stay: each says what one broker's
store shows. The cluster alert says what only the cluster shows:

* lag thresholds of ``config/alerts.yaml`` applied to each group's lag summed over every
  master (what ``consumerProgress`` shows), instead of to one broker's share of it;
* each group's cluster status (``cluster_lag``, judged across every master) when it enters
  ``status.alert_from`` or worse;
* the replica findings of the cluster's slaves (``check_results`` rows ``replica_*``): an
  error always alerts, the others at ``replica.severity``.

It follows transitions like a broker's alert (raised, changed, one reminder, recovered),
is recorded in ``alerts`` under the name ``cluster:<cluster>`` (broker names cannot hold a
colon, so it never collides with a broker) and is delivered by the DAG like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobs.alerts.evaluation import (
    ALERT_RANK,
    ERROR,
    MAX_HISTORY,
    STATUS_SEVERITY,
    Alert,
    AlertRules,
    Conditions,
    Finding,
    by_key,
    check_line,
    lag_findings,
    one_line,
    plural,
    title,
    transitions,
)

if TYPE_CHECKING:
    from jobs.lakehouse.tables import Registry

Row = Mapping[str, Any]
PREFIX = "cluster:"


def alert_name(cluster: str) -> str:
    """The ``broker`` value of a cluster's rows in ``alerts`` (and of its report page)."""
    return f"{PREFIX}{cluster}"


def cluster_findings(rules: AlertRules, cluster_rows: Sequence[Row], lag_rows: Sequence[Row],
                     replica_rows: Sequence[Row]) -> list[Finding]:
    """What one night of a cluster crosses: ``lag_rows`` are the masters' consumer_lag
    rows of the night, ``replica_rows`` the slaves' replica check_results rows."""
    return [*lag_findings(rules, lag_rows), *status_findings(rules, cluster_rows),
            *replica_findings(rules, replica_rows)]


def status_findings(rules: AlertRules, cluster_rows: Iterable[Row]) -> list[Finding]:
    findings = []
    for row in sorted(cluster_rows, key=lambda row: str(row["group_name"])):  # in no set order
        group, status = str(row["group_name"]), str(row["status"])
        if row["level"] != "group" or not rules.status.alerts_on(group, status):
            continue
        if status == "LOST" and not rules.lost_messages:
            continue
        queues = list(row.get("status_queues") or ())
        line = (f"cluster status {group}: {status} on {plural(len(queues), 'queue')} of "
                f"{', '.join(row.get('brokers') or ())}: Diff Total {row['diff_total']:,}, lag "
                f"{row['lag_messages']:,} messages; {one_line(row.get('reason') or '')}")
        findings.append(Finding(STATUS_SEVERITY[status], line, key=f"cluster status {group}",
                                state=status))
    return findings


def replica_findings(rules: AlertRules, replica_rows: Iterable[Row]) -> list[Finding]:
    severities = {ERROR, rules.replica.severity, *rules.check_severities}
    rows = sorted((row for row in replica_rows if row["severity"] in severities),
                  key=lambda row: (str(row["broker"]), str(row["check_name"]),
                                   str(row.get("scope") or "")))  # read in no set order
    return [Finding(row["severity"], f"{row['broker']}: {check_line(row)}",
                    key=f"replica {row['broker']} {row['check_name']} {row.get('scope')}")
            for row in rows]


def evaluate_cluster(rules: AlertRules, cluster: str, snapshot_id: str,
                     findings: Sequence[Finding], *, taken_at: datetime | None,
                     history: Sequence[Conditions] | None, now: datetime | None = None
                     ) -> Alert | None:
    """The night's cluster alert, or None when there is nothing to say."""
    current = list(findings)
    if history is not None:
        current = transitions(rules, Conditions(snapshot_id, taken_at or now or datetime.now(UTC),
                                                by_key(findings)), history)
    if not current:
        return None
    current.sort(key=lambda f: ALERT_RANK[f.severity])
    name = alert_name(cluster)
    return Alert(broker=name, snapshot_id=snapshot_id, raised_at=now or datetime.now(UTC),
                 severity=current[0].severity,
                 title=title(f"cluster {cluster}", snapshot_id, current),
                 findings=tuple(f.line for f in current),
                 report_url=rules.report_url(name, snapshot_id))


# --------------------------------------------------------------------------- reading


def night_rows(registry: Registry, cluster: str, masters: Sequence[str],
               slaves: Sequence[str], snapshot_id: str
               ) -> tuple[list[dict], list[dict], list[dict]]:
    """(cluster_lag rows, masters' consumer_lag rows, slaves' replica findings) of a night."""
    from jobs.lakehouse import tables as T

    cluster_rows = registry.read_rows(T.CLUSTER_LAG, cluster=cluster, snapshot_id=snapshot_id)
    return (cluster_rows, *member_rows(registry, masters, slaves, snapshot_id))


def member_rows(registry: Registry, masters: Sequence[str], slaves: Sequence[str],
                snapshot_id: str) -> tuple[list[dict], list[dict]]:
    """(masters' consumer_lag rows, slaves' replica findings) of a night."""
    from jobs.lakehouse import tables as T

    lag = [row for broker in masters
           for row in registry.read_rows(T.CONSUMER_LAG, broker=broker, snapshot_id=snapshot_id)]
    replica = [row for broker in slaves
               for row in registry.read_rows(T.CHECK_RESULTS, broker=broker,
                                             snapshot_id=snapshot_id)
               if str(row["check_name"]).startswith("replica_")]
    return lag, replica


def cluster_history(registry: Registry, rules: AlertRules, cluster: str,
                    masters: Sequence[str], slaves: Sequence[str], snapshot_id: str,
                    taken_at: datetime | None) -> list[Conditions]:
    """The conditions of the cluster's nights before this one, oldest first, back to one
    older than the reminder horizon (as :func:`jobs.alerts.evaluation.condition_history`)."""
    from jobs.lakehouse import tables as T

    if taken_at is None:
        return []
    nights: dict[str, datetime] = {}
    for row in registry.read_rows(T.CLUSTER_LAG, cluster=cluster):
        when = row["snapshot_taken_at"]
        if row["snapshot_id"] != snapshot_id and when is not None and when < taken_at:
            nights[row["snapshot_id"]] = when
    ordered = sorted(nights.items(), key=lambda kv: (kv[1], kv[0]))
    days = rules.status.remind_after_days
    horizon = ordered[-1][1] - timedelta(days=days) if ordered and days is not None else None
    history: list[Conditions] = []
    for night, when in reversed(ordered):
        rows = night_rows(registry, cluster, masters, slaves, night)
        history.insert(0, Conditions(night, when, by_key(cluster_findings(rules, *rows))))
        if horizon is None or when <= horizon or len(history) >= MAX_HISTORY:
            break
    return history
