"""Consumer statuses over a window of snapshots (jobs/check/consumer_status.py) and the alerts
that follow their transitions (jobs/alerts/evaluation.py), on consumer_lag rows as
jobs/check/lag.py writes them. Pure Python (the history reader on delta-rs tables): the
real-broker scenario is in tests/test_dag.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.alerts.evaluation import (
    AlertRules,
    Conditions,
    LagRule,
    StatusRules,
    by_key,
    evaluate,
    snapshot_findings,
)
from jobs.check.consumer_status import (
    Rates,
    Snapshot,
    StatusSettings,
    catch_up,
    rows_newest_first,
    status_rows,
)
from jobs.lakehouse import tables as T
from jobs.lakehouse.tables import Registry

BROKER = "broker-a"
T0 = datetime(2026, 11, 20, 2, tzinfo=UTC)
DAY = timedelta(days=1)
SETTINGS = StatusSettings(window=3, ok_lag_messages=5)


def snaps(n: int) -> list[Snapshot]:
    return [Snapshot(f"s{i + 1}", T0 + i * DAY) for i in range(n)]


def lag(snapshot: str, group: str, queue: int, offset: int, max_offset: int, *,
        min_offset: int = 0, topic: str = "T") -> dict[str, Any]:
    """A consumer_lag row with consistent numbers (status below_min under the minimum)."""
    below = offset < min_offset
    return {"broker": BROKER, "snapshot_id": snapshot, "group_name": group, "topic": topic,
            "queue_id": queue, "topic_kind": "normal", "status": "below_min" if below else "ok",
            "min_offset": min_offset, "max_offset": max_offset, "consumer_offset": offset,
            "broker_diff": max_offset - offset,
            "lag_messages": max_offset - max(offset, min_offset),
            "lost_messages": min_offset - offset if below else 0,
            "lag_seconds": 60.0 if max_offset > offset else None,
            "snapshot_taken_at": None}


def judge(window: list[Snapshot], rows: list[dict[str, Any]],
          previous: list[dict[str, Any]] = (), settings: StatusSettings = SETTINGS
          ) -> dict[tuple, dict[str, Any]]:
    by_snapshot: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_snapshot.setdefault(row["snapshot_id"], []).append(row)
    out = status_rows(BROKER, window, by_snapshot, previous, settings)
    return {(r["level"], r["group_name"], r["topic"], r["queue_id"]): r for r in out}


def group(result: dict[tuple, dict[str, Any]], name: str) -> dict[str, Any]:
    return result[("group", name, None, None)]


# (offset, max) per snapshot for queues 0 and 1 of one group, and the expected statuses
SCENARIOS = {
    "keeping up": ([(100, 102), (200, 203), (300, 301)], [(50, 50), (60, 62), (70, 70)],
                   "OK", "OK"),
    "falling behind": ([(100, 150), (150, 250), (160, 300)], [(50, 60), (60, 80), (70, 100)],
                       "WARN", "WARN"),
    "stopped": ([(100, 150), (100, 250), (100, 300)], [(50, 60), (50, 80), (50, 100)],
                "STOP", "STOP"),
    "one queue stalled": ([(100, 150), (100, 250), (100, 300)], [(50, 60), (80, 80), (100, 100)],
                          "STALL", "OK"),
    "rewound": ([(100, 150), (40, 250), (300, 300)], [(50, 60), (60, 60), (60, 60)],
                "REWIND", "OK"),
    "lag fell once": ([(100, 150), (110, 250), (300, 320)], [(50, 60), (60, 60), (70, 70)],
                      "OK", "OK"),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_queue_and_group_statuses_over_the_window(name: str) -> None:
    queue0, queue1, status0, status1 = SCENARIOS[name]
    window = snaps(3)
    rows = [lag(s.snapshot_id, "G", q, offset, top) for q, series in ((0, queue0), (1, queue1))
            for s, (offset, top) in zip(window, series, strict=True)]
    result = judge(window, rows)
    assert result[("queue", "G", "T", 0)]["status"] == status0, result[("queue", "G", "T", 0)]
    assert result[("queue", "G", "T", 1)]["status"] == status1
    worst = max((status0, status1), key=["OK", "WARN", "REWIND", "STALL", "STOP",
                                         "LOST"].index)
    rolled = group(result, "G")
    assert rolled["status"] == worst
    assert rolled["queues"] == ([] if worst == "OK" else
                                [f"T:{q}" for q, s in ((0, status0), (1, status1)) if s == worst])
    assert rolled["broker_diff"] == sum(r["broker_diff"] for r in rows
                                        if r["snapshot_id"] == "s3")
    assert rolled["window_snapshots"] == 3 and rolled["window_start_snapshot_id"] == "s1"


def test_lost_wins_and_counts_what_retention_deleted() -> None:
    window = snaps(2)
    rows = [lag("s1", "G", 0, 10, 500), lag("s2", "G", 0, 10, 900, min_offset=400)]
    row = judge(window, rows)[("queue", "G", "T", 0)]
    assert (row["status"], row["lost_messages"], row["lag_messages"]) == ("LOST", 390, 500)
    assert "390 messages deleted by retention" in row["reason"]


def test_one_snapshot_is_ok_unless_lost_and_small_lag_is_ok() -> None:
    one = judge(snaps(1), [lag("s1", "G", 0, 0, 10_000)])
    assert group(one, "G")["status"] == "OK" and group(one, "G")["catch_up"] == "unknown"
    window = snaps(3)   # offset never moves, but lag stays within ok_lag_messages
    still = judge(window, [lag(s.snapshot_id, "G", 0, 100, 100 + i) for i, s in
                           enumerate(window)])
    assert group(still, "G")["status"] == "OK"


def test_window_holds_the_last_n_snapshots() -> None:
    window = snaps(4)
    # rewound between s1 and s2 only: a window of 3 (s2..s4) no longer sees it
    series = [(100, 150), (40, 250), (300, 300), (400, 400)]
    rows = [lag(s.snapshot_id, "G", 0, o, m) for s, (o, m) in zip(window, series, strict=True)]
    assert group(judge(window[1:], [r for r in rows if r["snapshot_id"] != "s1"]),
                 "G")["status"] == "OK"
    assert group(judge(window[:3], [r for r in rows if r["snapshot_id"] != "s4"]),
                 "G")["status"] == "REWIND"


def test_catch_up_estimate_from_the_window_rates() -> None:
    window = snaps(3)
    # consumes 200/day, produces 100/day: lag 100 at s3, shrinking 100/day -> 1 day
    rows = [lag(s.snapshot_id, "G", 0, 100 + 200 * i, 400 + 100 * i) for i, s in
            enumerate(window)]
    row = group(judge(window, rows), "G")
    assert row["catch_up"] == "eta"
    assert row["catch_up_seconds"] == pytest.approx(86400)
    assert row["catch_up_at"] == window[-1].taken_at + DAY
    assert row["consume_rate_per_s"] == pytest.approx(200 / 86400)
    slower = [lag(s.snapshot_id, "G", 0, 100 + 50 * i, 400 + 100 * i) for i, s in
              enumerate(window)]
    assert group(judge(window, slower), "G")["catch_up"] == "never"
    assert catch_up(0, Rates()) == ("now", 0.0)


def test_status_since_carries_over_while_the_status_lasts() -> None:
    window = snaps(3)
    first = judge(window[:2], [lag("s1", "G", 0, 100, 150), lag("s2", "G", 0, 100, 250)])
    assert group(first, "G")["status"] == "STOP"
    assert group(first, "G")["status_since_snapshot_id"] == "s2"
    previous = [{k: v for k, v in r.items() if not k.startswith("_")} for r in first.values()]
    second = judge(window, [lag("s1", "G", 0, 100, 150), lag("s2", "G", 0, 100, 250),
                            lag("s3", "G", 0, 100, 300)], previous)
    row = group(second, "G")
    assert (row["status"], row["previous_status"], row["status_since_snapshot_id"],
            row["status_since"]) == ("STOP", "STOP", "s2", window[1].taken_at)


# --------------------------------------------------------------------------- transitions

RULES = AlertRules(lag_rules=(LagRule("*", 1_000_000),),
                   status=StatusRules(SETTINGS, "WARN", remind_after_days=2.0,
                                      ignore_groups=("CID_*",)))


def status_row(snapshot: int, group_name: str, status: str, lag_messages: int = 500,
               lost: int = 0) -> dict[str, Any]:
    return {"broker": BROKER, "snapshot_id": f"s{snapshot}", "level": "group",
            "group_name": group_name, "topic": None, "queue_id": None, "status": status,
            "queues": ["T:0"] if status != "OK" else [], "lag_messages": lag_messages,
            "broker_diff": lag_messages + lost, "lost_messages": lost, "lag_seconds": 120.0,
            "catch_up": "never", "consume_rate_per_s": 0.0, "produce_rate_per_s": 1.0,
            "reason": f"{status} because", "snapshot_taken_at": T0 + (snapshot - 1) * DAY}


def crc(snapshot: int) -> dict[str, Any]:
    return {"broker": BROKER, "snapshot_id": f"s{snapshot}", "check_name": "crc_failure",
            "severity": "error", "scope": "broker", "affected": 1, "explanation": "bytes changed"}


def nights(statuses: list[list[dict[str, Any]]],
           checks: list[list[dict[str, Any]]]) -> list[tuple[str, ...] | None]:
    """Evaluate each night with the history of the nights before; the alerts' lines."""
    out, history = [], []
    for i, (status, check) in enumerate(zip(statuses, checks, strict=True)):
        taken = T0 + i * DAY
        alert = evaluate(RULES, BROKER, f"s{i + 1}", check, [], [], status_rows=status,
                         taken_at=taken, history=list(history), now=taken)
        out.append(alert.findings if alert else None)
        history.append(Conditions(f"s{i + 1}", taken, by_key(snapshot_findings(
            RULES, check, [], status))))
    return out


def test_alerts_follow_transitions_with_one_reminder_and_a_recovery() -> None:
    statuses = [[status_row(1, "G", "OK"), status_row(1, "CID_SYS", "STOP")],
                [status_row(2, "G", "WARN")],
                [status_row(3, "G", "WARN")],
                [status_row(4, "G", "WARN")],     # 2 days old: the one reminder
                [status_row(5, "G", "WARN")],     # no second reminder
                [status_row(6, "G", "STOP")],     # changed: raised again
                [status_row(7, "G", "OK")]]       # recovered
    checks = [[], [crc(2)], [crc(3)], [], [], [], []]
    lines = nights(statuses, checks)
    assert lines[0] is None                        # OK, and CID_* is ignored
    assert len(lines[1]) == 2
    assert lines[1][0].startswith("check crc_failure [error] broker: bytes changed")  # errors
    assert lines[1][1].startswith("status G: WARN on 1 queue (T:0): lag 500 messages")  # first
    assert lines[2] is None                        # same conditions: nothing to say
    assert len(lines[3]) == 2
    assert lines[3][0].startswith("reminder, still so since 2026-11-21 02:00 UTC (2.0 days): "
                                  "status G: WARN")
    assert lines[3][1] == ("cleared: check crc_failure [error] broker: bytes changed "
                           "(1 affected)")
    assert lines[4] is None
    assert len(lines[5]) == 1
    assert lines[5][0].startswith("status G: STOP") and lines[5][0].endswith("(was WARN)")
    assert lines[6] == ("recovered G: no longer STOP (now below the alerting status)",)


def test_the_same_night_evaluated_twice_gives_the_same_alert() -> None:
    history = [Conditions("s1", T0, by_key(snapshot_findings(
        RULES, [], [], [status_row(1, "G", "OK")])))]
    twice = [evaluate(RULES, BROKER, "s2", [crc(2)], [], [],
                      status_rows=[status_row(2, "G", "LOST", lost=40)], taken_at=T0 + DAY,
                      history=history, now=T0 + DAY) for _ in range(2)]
    assert twice[0] == twice[1] and twice[0] is not None
    assert twice[0].severity == "error"
    assert "40 messages lost to retention" in twice[0].findings[0]


def test_an_alert_of_recoveries_only_is_info() -> None:
    history = [Conditions("s1", T0, by_key(snapshot_findings(
        RULES, [crc(1)], [], [status_row(1, "G", "STALL")])))]
    alert = evaluate(RULES, BROKER, "s2", [], [], [], status_rows=[status_row(2, "G", "OK")],
                     taken_at=T0 + DAY, history=history, now=T0 + DAY)
    assert alert is not None and alert.severity == "info"   # an enum value of rmq.alerts
    assert alert.title == "broker-a s2: 2 recovered"
    assert sorted(alert.findings) == [
        "cleared: check crc_failure [error] broker: bytes changed (1 affected)",
        "recovered G: no longer STALL (now below the alerting status)"]


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(min_value=1, max_value=19), chunk=st.integers(min_value=1, max_value=9),
       data=st.data())
def test_history_is_read_newest_first_a_chunk_at_a_time(tmp_path_factory, n: int,  # type: ignore[no-untyped-def]
                                                        chunk: int, data) -> None:
    """rows_newest_first (the status window's and the alert history's reader) gives every
    snapshot exactly its own rows, newest first, whatever the chunk and whichever
    snapshots were never checked (no rows)."""
    registry = Registry(None, tmp_path_factory.mktemp("warehouse"))
    checked = data.draw(st.sets(st.integers(min_value=0, max_value=n - 1)))
    for i in sorted(checked):
        registry.replace_rows(T.CONSUMER_LAG, [lag(f"s{i + 1}", "G", 0, i, i + 5)],
                              broker=BROKER, snapshot_id=f"s{i + 1}")
    registry.replace_rows(T.CONSUMER_LAG, [{**lag("s1", "G", 0, 99, 99), "broker": "other"}],
                          broker="other", snapshot_id="s1")
    read = [(snap.snapshot_id, [row["consumer_offset"] for row in rows[T.CONSUMER_LAG]])
            for snap, rows in rows_newest_first(registry, (T.CONSUMER_LAG,), BROKER,
                                                snaps(n)[::-1], chunk)]
    assert read == [(f"s{i + 1}", [i] if i in checked else []) for i in reversed(range(n))]
