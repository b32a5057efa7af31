"""A saved query's default date window (``-- default: since = last 7 days of ...``): the
answer is the query's over the last days the table holds, and only those days' files are
opened, however many days lie behind them (issue 35: saved queries flat over the years)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory

import pyarrow as pa
from deltalake import write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.lakehouse import tables as T
from jobs.lakehouse.tables import table_location
from jobs.query.local_engine import LocalEngine
from jobs.query.lookup import saved_statement
from jobs.query.saved import saved_query

DAY0 = dt.date(2026, 1, 1)
# (day number, hour, topic index, total_size) of each message
MESSAGES = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 23), st.integers(0, 2),
                              st.integers(1, 4096)), min_size=1, max_size=120)


def write_messages(warehouse: Path, messages: list[tuple[int, int, int, int]]) -> None:
    """A messages table of the columns the query reads, partitioned by store_date as the
    contract's is, one commit (and one file) per day."""
    location = table_location(warehouse, T.MESSAGES)
    for day in sorted({m[0] for m in messages}):
        rows = [m for m in messages if m[0] == day]
        times = [dt.datetime.combine(DAY0 + dt.timedelta(days=d), dt.time(h), dt.UTC)
                 for d, h, _, _ in rows]
        write_deltalake(location, pa.table({
            "broker": ["b"] * len(rows),
            "topic": [f"T{t}" for _, _, t, _ in rows],
            "store_time": pa.array(times, pa.timestamp("us", "UTC")),
            "total_size": pa.array([s for *_, s in rows], pa.int32()),
            "store_date": pa.array([DAY0 + dt.timedelta(days=d) for d, *_ in rows]),
        }), mode="append", partition_by=["store_date"])


def expected(messages: list[tuple[int, int, int, int]], first_day: int) -> dict:
    """{(topic, day, hour): (messages, bytes)} from the day ``first_day`` on."""
    counted: Counter = Counter()
    sizes: Counter = Counter()
    for day, hour, topic, size in messages:
        if day >= first_day:
            counted[(f"T{topic}", day, hour)] += 1
            sizes[(f"T{topic}", day, hour)] += size
    return {key: (n, sizes[key]) for key, n in counted.items()}


def answer(rows: pa.Table) -> dict:
    return {(r["topic"], (r["hour"].date() - DAY0).days, r["hour"].hour):
            (r["messages"], r["bytes"]) for r in rows.to_pylist()}


@given(messages=MESSAGES, since_day=st.integers(0, 45))
@settings(max_examples=25, deadline=None)
def test_the_default_window_is_the_last_seven_days_and_reads_only_them(
        messages: list[tuple[int, int, int, int]], since_day: int) -> None:
    assert saved_query("volume_per_topic_hour").defaults["since"].days == 7
    with TemporaryDirectory() as scratch:
        warehouse = Path(scratch)
        write_messages(warehouse, messages)
        engine = LocalEngine(warehouse)
        newest = max(m[0] for m in messages)
        assert answer(engine.saved("volume_per_topic_hour")) == expected(messages, newest - 6)
        sql, params = saved_statement(engine.query, warehouse, "volume_per_topic_hour", {})
        assert params == {"since": (DAY0 + dt.timedelta(days=newest - 6)).isoformat()}
        window_days = len({m[0] for m in messages if m[0] >= newest - 6})
        assert engine.files_opened(sql, params).get(T.MESSAGES, 0) == window_days
        since = {"since": (DAY0 + dt.timedelta(days=since_day)).isoformat()}
        assert answer(engine.saved("volume_per_topic_hour", since)) == \
            expected(messages, since_day)
