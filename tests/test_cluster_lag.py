"""Cluster lag and status (jobs/check/cluster_lag.py) on consumer_lag rows as the brokers'
checks write them: totals are consumerProgress's, and movement is judged over the cluster.
Pure Python; the real-broker cluster is in tests/test_cluster_pipeline.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.check.cluster_lag import ClusterNight, cluster_rows
from jobs.check.consumer_status import RANK, Snapshot, StatusSettings, status_rows

T0 = datetime(2026, 11, 20, 2, tzinfo=UTC)
DAY = timedelta(days=1)
SETTINGS = StatusSettings(window=3, ok_lag_messages=0)


def lag_row(broker: str, snapshot: str, group: str, topic: str, queue: int, offset: int | None,
            max_offset: int) -> dict[str, Any]:
    """A consumer_lag row (status no_offset when the group has no offset for the queue)."""
    return {"broker": broker, "snapshot_id": snapshot, "group_name": group, "topic": topic,
            "queue_id": queue, "topic_kind": "normal",
            "status": "ok" if offset is not None else "no_offset", "min_offset": 0,
            "max_offset": max_offset, "consumer_offset": offset,
            "broker_diff": max_offset - (offset or 0),
            "lag_messages": max_offset - offset if offset is not None else None,
            "lost_messages": 0, "lag_seconds": 5.0 if offset is not None and max_offset > offset
            else None, "last_consumed_store_time": T0 if offset else None,
            "snapshot_taken_at": None}


# per queue: a list of (offset, max) per snapshot; offsets never go back, max never shrinks
queue_histories = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=3,
).map(lambda steps: _monotonic(steps))


def _monotonic(steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, offset, top = [], 0, 0
    for consumed, produced in steps:
        top += produced
        offset = min(offset + consumed, top)
        out.append((offset, top))
    return out


def night_of(histories: dict[tuple[str, str, int], list[tuple[int, int]]],
             masters: tuple[str, ...]) -> tuple[ClusterNight, dict[str, dict[str, list]]]:
    length = max(len(h) for h in histories.values())
    ids = [f"s{i + 1}" for i in range(length)]
    lag: dict[str, dict[str, list]] = {b: {s: [] for s in ids} for b in masters}
    for (broker, topic, queue), history in histories.items():
        for i, (offset, top) in enumerate(history, start=length - len(history)):
            lag[broker][ids[i]].append(lag_row(broker, ids[i], "G", topic, queue, offset, top))
    windows = {b: [Snapshot(s, T0 + i * DAY) for i, s in enumerate(ids)] for b in masters}
    return ClusterNight("C", ids[-1], masters, lag, windows), lag


cluster_histories = st.dictionaries(
    st.tuples(st.sampled_from(["broker-a", "broker-b"]), st.sampled_from(["T", "U"]),
              st.integers(0, 2)), queue_histories, min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(cluster_histories)
def test_totals_are_consumer_progress_and_movement_is_the_clusters(histories) -> None:
    night, lag = night_of(histories, ("broker-a", "broker-b"))
    rows = cluster_rows(night, [], SETTINGS)
    group = next(r for r in rows if r["level"] == "group")
    now = [r for b in night.masters for r in lag[b][night.snapshot_id]]
    assert group["diff_total"] == sum(r["broker_diff"] for r in now)
    assert group["broker_offset"] == sum(r["max_offset"] for r in now)
    assert group["queues"] == len(now)
    assert group["brokers"] == sorted({r["broker"] for r in now})
    for topic in {r["topic"] for r in now}:
        row = next(r for r in rows if r["level"] == "topic" and r["topic"] == topic)
        assert row["diff_total"] == sum(r["broker_diff"] for r in now if r["topic"] == topic)
    # the group stopped only when no queue of it moved on any master
    moved = any(h[0][0] != h[-1][0] for h in histories.values())
    lagging = any(len(h) >= 2 and h[-1][1] > h[-1][0] for h in histories.values())
    assert (group["status"] == "STOP") == (not moved and lagging)
    # the group's status is its worst queue's, and those queues are named
    assert all(q.split(":")[0] in night.masters for q in group["status_queues"])


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.tuples(st.just("broker-a"), st.sampled_from(["T", "U"]),
                                 st.integers(0, 3)), queue_histories, min_size=1, max_size=6))
def test_a_cluster_of_one_master_judges_like_the_brokers_own_check(histories) -> None:
    night, lag = night_of(histories, ("broker-a",))
    cluster = next(r for r in cluster_rows(night, [], SETTINGS) if r["level"] == "group")
    own = status_rows("broker-a", night.windows["broker-a"], lag["broker-a"], [], SETTINGS)
    broker_group = next(r for r in own if r["level"] == "group")
    assert cluster["status"] == broker_group["status"]
    assert cluster["diff_total"] == broker_group["broker_diff"]
    assert cluster["lag_messages"] == broker_group["lag_messages"]


def test_a_group_stopped_on_one_master_only_is_stalled_there_not_stopped() -> None:
    histories = {
        ("broker-a", "T", 0): [(10, 20), (10, 40), (10, 60)],   # consumers of a gone
        ("broker-b", "T", 0): [(10, 20), (30, 40), (50, 60)],   # b keeps consuming
    }
    night, lag = night_of(histories, ("broker-a", "broker-b"))
    group = next(r for r in cluster_rows(night, [], SETTINGS) if r["level"] == "group")
    assert group["status"] == "STALL"
    assert group["status_queues"] == ["broker-a:T:0"]
    # broker-a's own check, seeing only its queue, says STOP
    own = status_rows("broker-a", night.windows["broker-a"], lag["broker-a"], [], SETTINGS)
    assert next(r for r in own if r["level"] == "group")["status"] == "STOP"
    assert RANK["STOP"] > RANK["STALL"]


def test_a_master_without_a_snapshot_that_night_is_named_missing() -> None:
    night, _ = night_of({("broker-a", "T", 0): [(1, 2)]}, ("broker-a",))
    night = ClusterNight("C", night.snapshot_id, ("broker-a", "broker-b"), night.lag,
                         night.windows)
    group = next(r for r in cluster_rows(night, [], SETTINGS) if r["level"] == "group")
    assert group["missing_brokers"] == ["broker-b"] and group["brokers"] == ["broker-a"]


def test_the_previous_status_comes_from_the_previous_night() -> None:
    night, _ = night_of({("broker-a", "T", 0): [(1, 2), (1, 9)]}, ("broker-a",))
    previous = [{"level": "group", "group_name": "G", "topic": None, "status": "WARN"}]
    group = next(r for r in cluster_rows(night, previous, SETTINGS) if r["level"] == "group")
    assert (group["status"], group["previous_status"]) == ("STOP", "WARN")
