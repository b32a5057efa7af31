"""Replica checks: each slave's snapshot against its master's snapshot of the same night.

What a healthy RocketMQ slave is (see :mod:`rmqlib.store.replica` for the bytes):

* its commitlog is a byte copy of its master's up to its write position, and its consume
  queues are byte copies of the master's units;
* it is behind by the bytes not yet replicated, and by the store time between the
  master's last record and the last record it holds whole;
* its topics and subscription groups are the master's, and its consumer offsets are at
  most ``SlaveSynchronize``'s period (10 s) plus a persist period (5 s) older.

Each night writes one ``replica_status`` row per slave and its findings in
``check_results`` (broker = the slave):

  replica_diverged        error    commitlog bytes differ, at the first differing offset
  replica_queue_diverged  error    consume-queue units differ, per queue, at the first unit
  replica_lagging         replica  behind by more than max_lag_bytes / max_lag_seconds
  replica_config_stale    replica  topics or subscription groups of one side missing on
                                   the other
  replica_offsets_stale   replica  consumer offsets behind the master's while the slave's
                                   consumerOffset.json is older than offsets_sync_seconds
  replica_master_missing  warning  no loaded snapshot of the master with this id

("replica" = the severity of ``replica.severity`` in config/alerts.yaml.) The commitlog
comparison starts where the previous night's ended: a night reads only what is new.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.lakehouse import tables as T
from jobs.lakehouse.delta_io import sql_string
from jobs.lakehouse.driver_rows import arrow_dataset, exists
from rmqlib.store.replica import (
    CommitlogComparison,
    QueueComparison,
    compare_commitlogs,
    compare_queues,
    write_offset,
)

if TYPE_CHECKING:
    from jobs.lakehouse.tables import Registry

log = logging.getLogger(__name__)
ERROR, WARNING = "error", "warning"
IN_SYNC, LAGGING, DIVERGED, MASTER_MISSING = "in_sync", "lagging", "diverged", "master_missing"
OFFSETS_FILE = "config/consumerOffset.json"
# The largest record the broker stores (maxMessageSize, 4 MiB by default) and then some:
# the last record before a write position starts at most this far before it.
LAST_RECORD_WINDOW = 16 * 2**20


@dataclass(frozen=True)
class ReplicaRules:
    """``replica`` in config/alerts.yaml: when a slave counts as lagging behind its master,
    and how old its synchronised consumer offsets may be."""

    max_lag_bytes: int = 64 * 2**20
    max_lag_seconds: float = 300.0
    offsets_sync_seconds: float = 60.0
    severity: str = WARNING


@dataclass(frozen=True)
class ReplicaPair:
    """A slave and its master in one night's snapshots."""

    cluster: str
    slave: str
    master: str
    snapshot_id: str
    slave_store: Path
    master_store: Path | None         # None: the master has no snapshot of this id
    slave_taken_at: datetime | None = None
    slave_offsets_written_at: datetime | None = None  # mtime of its consumerOffset.json


@dataclass
class ReplicaOutcome:
    status: dict[str, Any]
    findings: list[dict[str, Any]]

    @property
    def state(self) -> str:
        return str(self.status["state"])


def check_replica(registry: Registry, pair: ReplicaPair, rules: ReplicaRules,
                  now: datetime | None = None) -> ReplicaOutcome:
    """Compare the pair, write the slave's ``replica_status`` row and its replica findings
    (replacing those of the same night), and return them."""
    now = now or datetime.now(UTC)
    outcome = (_master_missing(pair, now) if pair.master_store is None
               else _compare(registry, pair, rules, now))
    registry.replace_rows(T.REPLICA_STATUS, [outcome.status], broker=pair.slave,
                          snapshot_id=pair.snapshot_id)
    registry.replace_rows(T.CHECK_RESULTS, outcome.findings, broker=pair.slave,
                          snapshot_id=pair.snapshot_id)
    log.info("replica %s of %s / %s: %s, %s behind, %d finding(s)", pair.slave, pair.master,
             pair.snapshot_id, outcome.state, _bytes(outcome.status.get("lag_bytes")),
             len(outcome.findings))
    return outcome


def _compare(registry: Registry, pair: ReplicaPair, rules: ReplicaRules,
             now: datetime) -> ReplicaOutcome:
    assert pair.master_store is not None
    start = _resume_offset(registry, pair)
    commitlog = compare_commitlogs(pair.master_store, pair.slave_store, start=start)
    if start and (commitlog.replica_end < start or commitlog.master_end < start):
        commitlog = compare_commitlogs(pair.master_store, pair.slave_store)  # reset: all
    queues = compare_queues(pair.master_store, pair.slave_store)
    master_time = _last_store_time(registry, pair.master, commitlog.master_end)
    replica_time = _last_store_time(registry, pair.master, commitlog.replica_end)
    lag_seconds = ((master_time - replica_time).total_seconds()
                   if master_time and replica_time else None)
    config = _config_differences(registry, pair)
    behind, ahead = _offset_differences(registry, pair)
    findings = [
        *_divergence(pair, commitlog),
        *_queue_divergence(pair, queues),
        *_lagging(pair, rules, commitlog, lag_seconds),
        *_config_stale(pair, rules, config),
        *_offsets_stale(pair, rules, behind),
    ]
    state = (DIVERGED if commitlog.diverged_at is not None or queues.mismatches
             else LAGGING if any(f["check_name"] == "replica_lagging" for f in findings)
             else IN_SYNC)
    status = {
        "broker": pair.slave, "snapshot_id": pair.snapshot_id, "cluster": pair.cluster,
        "master": pair.master, "state": state,
        "master_write_offset": commitlog.master_end,
        "replica_write_offset": commitlog.replica_end, "lag_bytes": commitlog.lag_bytes,
        "master_last_store_time": master_time, "replica_last_store_time": replica_time,
        "lag_seconds": lag_seconds, "compared_from": commitlog.compared_from,
        "compared_to": commitlog.compared_to, "diverged_at": commitlog.diverged_at,
        "queues_compared": queues.queues, "units_compared": queues.units,
        "queues_diverged": len(queues.mismatches), "config_differences": len(config),
        "offsets_behind": len(behind), "offsets_ahead": len(ahead), "checked_at": now,
    }
    return ReplicaOutcome(status, [_stamp(f, pair, now) for f in findings])


def _master_missing(pair: ReplicaPair, now: datetime) -> ReplicaOutcome:
    end = write_offset(pair.slave_store)
    status = {
        "broker": pair.slave, "snapshot_id": pair.snapshot_id, "cluster": pair.cluster,
        "master": pair.master, "state": MASTER_MISSING, "replica_write_offset": end or 0,
        "queues_compared": 0, "units_compared": 0, "queues_diverged": 0,
        "config_differences": 0, "offsets_behind": 0, "offsets_ahead": 0, "checked_at": now,
    }
    finding = _finding("replica_master_missing", WARNING, "broker", 1,
                       f"a loaded snapshot {pair.snapshot_id} of {pair.master}", "none",
                       "The master has no loaded snapshot of this night: the slave could not "
                       "be compared with it.")
    return ReplicaOutcome(status, [_stamp(finding, pair, now)])


# --------------------------------------------------------------------------- findings


def _finding(check: str, severity: str, scope: str, affected: int, expected: str,
             observed: str, explanation: str, *, topic: str | None = None,
             queue_id: int | None = None, group: str | None = None,
             offsets: Sequence[int] = ()) -> dict[str, Any]:
    return {"check_name": check, "severity": severity, "scope": scope, "topic": topic,
            "queue_id": queue_id, "group_name": group, "affected": max(int(affected), 1),
            "expected": expected, "observed": observed, "sample_offsets": list(offsets),
            "explanation": explanation}


def _stamp(finding: dict[str, Any], pair: ReplicaPair, now: datetime) -> dict[str, Any]:
    return {"broker": pair.slave, "snapshot_id": pair.snapshot_id, **finding, "checked_at": now}


def _divergence(pair: ReplicaPair, c: CommitlogComparison) -> list[dict[str, Any]]:
    if c.diverged_at is None:
        return []
    return [_finding(
        "replica_diverged", ERROR, "broker", c.compared_to - c.diverged_at,
        f"the bytes of {pair.master}'s commitlog over [{c.compared_from:,}, {c.compared_to:,})",
        f"different from commitlog offset {c.diverged_at:,}",
        f"The slave's commitlog is not a copy of its master's: the first differing byte is at "
        f"offset {c.diverged_at:,} (a damaged disk, or a slave that followed another master).",
        offsets=[c.diverged_at])]


def _queue_divergence(pair: ReplicaPair, q: QueueComparison) -> list[dict[str, Any]]:
    return [_finding(
        "replica_queue_diverged", ERROR, f"topic={m.topic} queue={m.queue_id}", 1,
        f"the {m.stream} units of {pair.master}", f"different from unit {m.queue_offset:,}",
        "The slave's queue units differ from its master's: it dispatched different records "
        "(or its queue file is damaged).", topic=m.topic, queue_id=m.queue_id,
        offsets=[m.queue_offset]) for m in q.mismatches]


def _lagging(pair: ReplicaPair, rules: ReplicaRules, c: CommitlogComparison,
             lag_seconds: float | None) -> list[dict[str, Any]]:
    over_bytes = c.lag_bytes > rules.max_lag_bytes
    over_time = lag_seconds is not None and lag_seconds > rules.max_lag_seconds
    if not (over_bytes or over_time):
        return []
    seconds = f"{lag_seconds:,.1f} s" if lag_seconds is not None else "unknown"
    return [_finding(
        "replica_lagging", rules.severity, "broker", c.lag_bytes,
        f"at most {rules.max_lag_bytes:,} bytes and {rules.max_lag_seconds:,.0f} s behind",
        f"{c.lag_bytes:,} bytes ({c.replica_end:,} of {c.master_end:,}) and {seconds} behind",
        f"The slave is behind its master by {c.lag_bytes:,} commitlog bytes ({seconds} of store "
        f"time): replication is slow, paused or broken.", offsets=[c.replica_end])]


def _config_stale(pair: ReplicaPair, rules: ReplicaRules,
                  differences: list[str]) -> list[dict[str, Any]]:
    if not differences:
        return []
    return [_finding(
        "replica_config_stale", rules.severity, "broker", len(differences),
        f"the topics and subscription groups of {pair.master}",
        "; ".join(differences[:5]) + (f" and {len(differences) - 5} more"
                                       if len(differences) > 5 else ""),
        "The slave's topics or subscription groups differ from its master's: its "
        "SlaveSynchronize did not run since they changed.")]


def _offsets_stale(pair: ReplicaPair, rules: ReplicaRules,
                   behind: list[tuple[str, str, int, int, int]]) -> list[dict[str, Any]]:
    written, taken = pair.slave_offsets_written_at, pair.slave_taken_at
    age = (taken - written).total_seconds() if written and taken else None
    if not behind or (age is not None and age <= rules.offsets_sync_seconds):
        return []
    groups = sorted({b[0] for b in behind})
    shown = ", ".join(f"{g}@{t}:{q} {'none' if s < 0 else f'{s:,}'} < {m:,}"
                      for g, t, q, s, m in behind[:3])
    return [_finding(
        "replica_offsets_stale", rules.severity, "broker", len(behind),
        f"the consumer offsets of {pair.master}, or a copy at most "
        f"{rules.offsets_sync_seconds:,.0f} s old",
        f"{len(behind):,} offset(s) of {', '.join(groups[:5])} behind ({shown}); "
        f"{OFFSETS_FILE} " + (f"{age:,.0f} s old" if age is not None else "of unknown age"),
        "The slave's consumer offsets are behind its master's and were not synchronised "
        "recently: after a switch to this slave, consumers would re-consume messages.")]


# --------------------------------------------------------------------------- reading


def _resume_offset(registry: Registry, pair: ReplicaPair) -> int:
    """Where the previous night's comparison of this slave ended (0: compare everything):
    only when that night found the two identical (a divergence is compared again)."""
    earlier = [r for r in registry.read_rows(T.REPLICA_STATUS, broker=pair.slave)
               if r["snapshot_id"] != pair.snapshot_id and r["state"] in (IN_SYNC, LAGGING)
               and r["compared_to"] is not None and r["checked_at"] is not None]
    if not earlier:
        return 0
    return int(max(earlier, key=lambda r: r["checked_at"])["compared_to"])


def _last_store_time(registry: Registry, master: str, write_offset: int) -> datetime | None:
    """Store time of the last whole record below ``write_offset`` in the master's loaded
    messages (a slave's records are its master's)."""
    location = registry[T.MESSAGES].location
    low = max(write_offset - LAST_RECORD_WINDOW, 0)
    where = (f"broker = {sql_string(master)} AND physical_offset >= {low} "
             f"AND physical_offset < {write_offset}")
    import pyarrow.dataset as ds

    if not exists(location):
        return None
    table = arrow_dataset(location, files_where=where).to_table(
        columns=["physical_offset", "total_size", "store_time"],
        filter=(ds.field("broker") == master) & (ds.field("physical_offset") >= low)
        & (ds.field("physical_offset") < write_offset))
    best: tuple[int, datetime] | None = None
    for row in table.to_pylist():
        if row["physical_offset"] + row["total_size"] <= write_offset and (
                best is None or row["physical_offset"] > best[0]):
            best = (row["physical_offset"], row["store_time"])
    return best[1] if best else None


def _config_differences(registry: Registry, pair: ReplicaPair) -> list[str]:
    """Topics and subscription groups one side has and the other lacks."""
    differences = []
    for table, column, noun in ((T.TOPICS, "topic", "topic"),
                                (T.SUBSCRIPTION_GROUPS, "group_name", "group")):
        master = {r[column] for r in registry.read_rows(table, broker=pair.master,
                                                        snapshot_id=pair.snapshot_id)}
        slave = {r[column] for r in registry.read_rows(table, broker=pair.slave,
                                                       snapshot_id=pair.snapshot_id)}
        differences += [f"{noun} {n} missing on the slave" for n in sorted(master - slave)]
        differences += [f"{noun} {n} only on the slave" for n in sorted(slave - master)]
    return differences


def _offset_differences(registry: Registry, pair: ReplicaPair
                        ) -> tuple[list[tuple[str, str, int, int, int]], list[tuple]]:
    """(group, topic, queue, slave offset, master offset) behind and ahead of the master."""
    def offsets(broker: str) -> dict[tuple[str, str, int], int]:
        return {(r["group_name"], r["topic"], r["queue_id"]): int(r["consumer_offset"])
                for r in registry.read_rows(T.CONSUMER_OFFSETS, broker=broker,
                                            snapshot_id=pair.snapshot_id)}

    master, slave = offsets(pair.master), offsets(pair.slave)
    behind, ahead = [], []
    for key, value in sorted(master.items()):
        copy = slave.get(key)
        if copy is None or copy < value:
            behind.append((*key, -1 if copy is None else copy, value))
        elif copy > value:
            ahead.append((*key, copy, value))
    return behind, ahead


def _bytes(value: Any) -> str:
    return "?" if value is None else f"{int(value):,} bytes"
