"""``message_lookup``'s rows as the load derives them (jobs/load/lookup_rows.py, DuckDB)
against a Python oracle: one row per msgId, per distinct non-empty key and per queued
position of each message row first seen in the snapshots asked for, no row twice, sorted
by bucket and value. Keys repeat and are empty in real ``KEYS`` properties; other brokers'
and other snapshots' rows must be left out."""

from __future__ import annotations

from datetime import date

import duckdb
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.lakehouse.message_lookup import KEY, MSG_ID, POSITION, bucket, position_value
from jobs.load.lookup_rows import QUEUED_TYPES, lookup_sql

TEXT = st.text(alphabet="ab 1_", max_size=3)
MESSAGE = st.fixed_dictionaries({
    "broker": st.sampled_from(["b1", "b2"]),
    "first_snapshot_id": st.sampled_from(["s1", "s2", "s3"]),
    "msg_id": st.one_of(st.none(), st.just(""), TEXT),
    "keys": st.lists(TEXT, max_size=4),
    "topic": st.sampled_from(["T", "U"]),
    "queue_id": st.integers(0, 2),
    "queue_offset": st.integers(0, 5),
    "transaction_type": st.sampled_from(["NOT", "COMMIT", "PREPARED", "ROLLBACK"]),
})


def oracle(messages: list[dict], broker: str, snapshots: set[str]) -> list[tuple]:
    rows = set()
    for m in messages:
        if m["broker"] != broker or m["first_snapshot_id"] not in snapshots:
            continue
        pointer = (m["broker"], m["store_date"], m["physical_offset"], m["inner_index"],
                   m["first_snapshot_id"])
        values = [(KEY, k) for k in m["keys"] if k]
        if m["msg_id"]:
            values.append((MSG_ID, m["msg_id"]))
        if m["transaction_type"] in QUEUED_TYPES:
            values.append((POSITION, position_value(m["topic"], m["queue_id"],
                                                    m["queue_offset"])))
        rows |= {(bucket(value), kind, value, *pointer) for kind, value in values}
    return sorted(rows, key=lambda r: (r[0], r[2], r[3], r[5], r[6], r[1]))


@settings(max_examples=80, deadline=None)
@given(messages=st.lists(MESSAGE, max_size=25),
       snapshots=st.sets(st.sampled_from(["s1", "s2", "s3"]), min_size=1))
def test_lookup_rows_are_each_value_once_sorted(messages: list[dict], snapshots: set[str]) -> None:
    for at, message in enumerate(messages):  # a message row's identity: unique, as loaded
        message.update(store_date=date(2026, 1, 1 + at % 2), physical_offset=at * 100,
                       inner_index=at % 3)
    table = pa.Table.from_pylist(messages, schema=pa.schema([
        ("broker", pa.string()), ("first_snapshot_id", pa.string()), ("msg_id", pa.string()),
        ("keys", pa.list_(pa.string())), ("topic", pa.string()), ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()), ("transaction_type", pa.string()),
        ("store_date", pa.date32()), ("physical_offset", pa.int64()),
        ("inner_index", pa.int32())]))
    with duckdb.connect() as connection:
        connection.register("messages", table)
        got = connection.sql(lookup_sql("b1", sorted(snapshots))).fetchall()
    expected = oracle(messages, "b1", snapshots)
    assert sorted(got) == sorted(expected) and len(got) == len(set(got))
    # sorted by bucket, value, then position (kind is not an ordering column)
    order = [(r[0], r[2], r[3], r[5], r[6]) for r in got]
    assert order == sorted(order)
