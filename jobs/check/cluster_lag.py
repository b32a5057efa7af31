"""Consumer progress over a cluster: ``mqadmin consumerProgress`` summed over every master,
and each group's status judged across all its queues on every master; ``cluster_lag``.

A topic of a RocketMQ cluster has queues on several masters (``broker-a`` queues 0-3,
``broker-b`` queues 0-3), and a consumer group in clustering mode consumes them all:
``consumerProgress -g G`` asks every master for its ``ConsumeStats`` and prints one line
per (topic, broker, queue) and the group's Diff Total. Each broker's check already wrote
those lines as ``consumer_lag`` rows; this module only adds them up per (cluster, group)
and (cluster, group, topic), over the masters' snapshots of the same id (a slave's offsets
are copies of its master's and are not counted).

Statuses use the rules of :mod:`jobs.check.consumer_status` queue by queue, with one
difference that is the point of judging a cluster: whether the group *moved* is decided
over all its queues on every master. A group whose consumers stopped on broker-a but not on
broker-b is STALL on broker-a's queues (one part of the group is stuck), not STOP (the
whole group gone), which is what broker-a's own check, seeing only its queues, must say.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobs.check.consumer_status import (
    OK,
    RANK,
    Rates,
    Snapshot,
    StatusSettings,
    judged,
    lag_window,
    moved,
    queue_status,
    summed,
    window_rates,
)

if TYPE_CHECKING:
    from jobs.lakehouse.tables import Registry

log = logging.getLogger(__name__)
GROUP, TOPIC = "group", "topic"
Row = Mapping[str, Any]
QueueKey = tuple[str, str, str, int]  # broker, group, topic, queue id


@dataclass(frozen=True)
class QueueJudgement:
    """One queue of one master at the judged snapshot: its lag row and its status."""

    broker: str
    row: Row
    status: str
    reason: str
    rates: Rates
    window_snapshots: int

    @property
    def name(self) -> str:
        return f"{self.broker}:{self.row['topic']}:{self.row['queue_id']}"


@dataclass(frozen=True)
class ClusterNight:
    """What the cluster's rows of one snapshot id are computed from."""

    cluster: str
    snapshot_id: str
    masters: tuple[str, ...]                      # configured masters of the cluster
    lag: Mapping[str, Mapping[str, Sequence[Row]]]  # broker -> snapshot id -> consumer_lag rows
    windows: Mapping[str, Sequence[Snapshot]]     # broker -> its snapshots of the window

    @property
    def taken_at(self) -> datetime | None:
        """The latest snapshot time of the present masters."""
        taken = [s.taken_at for b in self.present for s in self.windows[b]
                 if s.snapshot_id == self.snapshot_id and s.taken_at is not None]
        return max(taken) if taken else None

    @property
    def present(self) -> list[str]:
        """Masters with a checked snapshot of this id."""
        return sorted(b for b in self.masters if self.snapshot_id in self.lag.get(b, {}))


def cluster_rows(night: ClusterNight, previous: Sequence[Row],
                 settings: StatusSettings) -> list[dict[str, Any]]:
    """The ``cluster_lag`` rows of ``night`` (group rows, then topic rows).

    ``previous``: the cluster's rows at the snapshot id before (for previous_status)."""
    judgements = judge_queues(night, settings)
    totals = _totals(night)
    before = {(r["level"], r["group_name"], r.get("topic")): r["status"] for r in previous}
    rows = []
    for (group, topic), lag_rows in sorted(totals.items(), key=lambda kv: (kv[0][0],
                                                                           kv[0][1] or "")):
        mine = [j for j in judgements if j.row["group_name"] == group
                and (topic is None or j.row["topic"] == topic)]
        level = GROUP if topic is None else TOPIC
        row = _row(night, level, group, topic, lag_rows, mine)
        row["previous_status"] = before.get((level, group, topic))
        rows.append(row)
    return rows


def judge_queues(night: ClusterNight, settings: StatusSettings) -> list[QueueJudgement]:
    """Each judged queue of every present master, its history over the broker's window."""
    histories: dict[QueueKey, list[Row]] = {}
    for broker in night.present:
        for snap in night.windows[broker]:
            for row in judged(night.lag[broker].get(snap.snapshot_id, ())):
                key = (broker, str(row["group_name"]), str(row["topic"]), int(row["queue_id"]))
                histories.setdefault(key, []).append(row)
    histories = {k: h for k, h in histories.items() if h[-1]["snapshot_id"] == night.snapshot_id}
    group_moved: dict[str, bool] = {}
    for (_, group, _, _), history in histories.items():
        group_moved[group] = group_moved.get(group, False) or moved(history)
    judgements = []
    for key, history in sorted(histories.items()):
        status, reason = queue_status(history, group_moved[key[1]], settings)
        rates = window_rates(history, night.windows[key[0]])
        judgements.append(QueueJudgement(key[0], history[-1], status, reason, rates,
                                         len(history)))
    return judgements


def _totals(night: ClusterNight) -> dict[tuple[str, str | None], list[tuple[str, Row]]]:
    """Every consumer_lag row of the night per (group, None) and (group, topic): what
    consumerProgress adds up (all of a group's queues, with or without an offset)."""
    totals: dict[tuple[str, str | None], list[tuple[str, Row]]] = {}
    for broker in night.present:
        for row in night.lag[broker][night.snapshot_id]:
            group = str(row["group_name"])
            for key in ((group, None), (group, str(row["topic"]))):
                totals.setdefault(key, []).append((broker, row))
    return totals


def _row(night: ClusterNight, level: str, group: str, topic: str | None,
         lag_rows: Sequence[tuple[str, Row]], judged_queues: Sequence[QueueJudgement]
         ) -> dict[str, Any]:
    rows = [row for _, row in lag_rows]
    worst = max(judged_queues, key=lambda j: RANK[j.status], default=None)
    status = worst.status if worst else OK
    named = [j.name for j in judged_queues if j.status == status] if status != OK else []
    if worst is None:
        reason = "no queue with a committed offset inside a known queue"
    else:
        reason = f"{worst.name}: {worst.reason}"
        if len(named) > 1:
            reason += f" (and {len(named) - 1} more queue{'s' if len(named) > 2 else ''})"
    rates = summed(j.rates for j in judged_queues)
    return {
        "cluster": night.cluster, "snapshot_id": night.snapshot_id, "level": level,
        "group_name": group, "topic": topic,
        "brokers": sorted({broker for broker, _ in lag_rows}), "queues": len(rows),
        "broker_offset": _sum(rows, "max_offset"), "consumer_offset": _sum(rows, "consumer_offset"),
        "diff_total": _sum(rows, "broker_diff"), "lag_messages": _sum(rows, "lag_messages"),
        "lost_messages": _sum(rows, "lost_messages"),
        "lag_seconds": _max(r.get("lag_seconds") for r in rows),
        "last_consume_time": _max(r.get("last_consumed_store_time") for r in rows),
        "consume_tps": rates.consume_rate,
        "status": status, "reason": reason, "status_queues": named,
        "window_snapshots": max((j.window_snapshots for j in judged_queues), default=1),
        "previous_status": None,
        "missing_brokers": sorted(set(night.masters) - set(night.present)),
        "snapshot_taken_at": night.taken_at,
    }


def _sum(rows: Iterable[Row], column: str) -> int:
    return sum(int(r.get(column) or 0) for r in rows)


def _max(values: Iterable[Any]) -> Any:
    known = [v for v in values if v is not None]
    return max(known) if known else None


# --------------------------------------------------------------------------- the table


def read_night(registry: Registry, cluster: str, masters: Sequence[str], snapshot_id: str,
               settings: StatusSettings) -> ClusterNight:
    """The masters' consumer_lag rows over each one's window up to ``snapshot_id``."""
    lag: dict[str, dict[str, list[dict[str, Any]]]] = {}
    windows: dict[str, list[Snapshot]] = {}
    for broker in masters:
        try:
            checked, by_id = lag_window(registry, broker, snapshot_id, settings.window)
        except ValueError:
            continue  # not loaded this night: counted as missing
        if _checked(registry, broker, snapshot_id, by_id.get(snapshot_id)):
            lag[broker] = by_id
            windows[broker] = checked[::-1]
    return ClusterNight(cluster, snapshot_id, tuple(masters), lag, windows)


def _checked(registry: Registry, broker: str, snapshot_id: str,
             rows: list[dict[str, Any]] | None) -> bool:
    """Whether the master's check of the night ran: it has consumer_lag rows, or it has no
    consumer offsets to have any (a master whose check failed is missing, not lag-free)."""
    from jobs.lakehouse import tables as T

    if rows is None:
        return False
    return bool(rows) or not registry.read_rows(T.CONSUMER_OFFSETS, broker=broker,
                                                snapshot_id=snapshot_id)


def judge_cluster(registry: Registry, cluster: str, masters: Sequence[str], snapshot_id: str,
                  settings: StatusSettings) -> list[dict[str, Any]]:
    """Compute and write (replacing) the cluster's ``cluster_lag`` rows of ``snapshot_id``."""
    from jobs.lakehouse import tables as T

    night = read_night(registry, cluster, masters, snapshot_id, settings)
    previous = _previous_rows(registry, cluster, snapshot_id, night.taken_at)
    rows = cluster_rows(night, previous, settings)
    registry.replace_rows(T.CLUSTER_LAG, rows, cluster=cluster, snapshot_id=snapshot_id)
    log.info("cluster %s / %s: %d group(s) over %s%s", cluster, snapshot_id,
             sum(1 for r in rows if r["level"] == GROUP), ", ".join(night.present) or "no master",
             f"; missing {', '.join(sorted(set(masters) - set(night.present)))}"
             if set(masters) - set(night.present) else "")
    return rows


def _previous_rows(registry: Registry, cluster: str, snapshot_id: str,
                   taken_at: datetime | None) -> list[dict[str, Any]]:
    """The cluster's rows at its latest snapshot id taken before this one."""
    from jobs.lakehouse import tables as T

    if taken_at is None:
        return []
    earlier = [r for r in registry.read_rows(T.CLUSTER_LAG, cluster=cluster)
               if r["snapshot_id"] != snapshot_id and r["snapshot_taken_at"] is not None
               and r["snapshot_taken_at"] < taken_at]
    if not earlier:
        return []
    last = max(earlier, key=lambda r: (r["snapshot_taken_at"], r["snapshot_id"]))["snapshot_id"]
    return [r for r in earlier if r["snapshot_id"] == last]
