"""pyarrow's writer for a table's files (jobs/lakehouse/parquet_files.py), over random
streams: every row lands once in its partition's directory, in the order it came, in row
groups no larger than asked, files rolled at the target size; the add actions delta-rs
derives name every file with its partition values, its row count and the true minimum
and maximum of each statistics column; only text columns get a dictionary page."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from tempfile import TemporaryDirectory

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.lakehouse.parquet_files import add_actions, partition_path, write_partitioned

SCHEMA = pa.schema([pa.field("physical_offset", pa.int64(), nullable=False),
                    pa.field("topic", pa.string()),
                    pa.field("body", pa.binary()),
                    pa.field("store_date", pa.date32(), nullable=False)])
DAY0 = dt.date(2026, 1, 1)
SETTINGS = {"delta.dataSkippingStatsColumns": "physical_offset,topic"}

# a batch: the (day, topic) of each of its rows; offsets increase across the stream
BATCHES = st.lists(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["A", "B", None])),
                            max_size=40), max_size=6)


def stream(batches: list[list[tuple[int, str | None]]]) -> list[pa.RecordBatch]:
    out, offset = [], 0
    for rows in batches:
        out.append(pa.RecordBatch.from_pydict({
            "physical_offset": list(range(offset, offset + len(rows))),
            "topic": [topic for _, topic in rows],
            "body": [bytes(50) for _ in rows],
            "store_date": [DAY0 + dt.timedelta(days=day) for day, _ in rows]}, schema=SCHEMA))
        offset += len(rows)
    return out


@settings(max_examples=60, deadline=None)
@given(batches=BATCHES, group_rows=st.integers(1, 30),
       target=st.sampled_from([None, 1, 2000]))
def test_every_row_lands_once_in_order_in_its_partition(batches, group_rows, target) -> None:  # type: ignore[no-untyped-def]
    rows = stream(batches)
    with TemporaryDirectory() as scratch:
        directory = Path(scratch)
        written = write_partitioned(iter(rows), SCHEMA, ("store_date",), directory, target,
                                    {"compression": "zstd", "row_group_size": group_rows,
                                     "write_statistics": ["physical_offset", "topic"]})
        adds = add_actions(directory, SCHEMA, ("store_date",), SETTINGS)
        expected: dict[str, list[int]] = {}
        for batch in rows:
            for offset, day in zip(batch["physical_offset"].to_pylist(),
                                   batch["store_date"].to_pylist(), strict=True):
                expected.setdefault(day.isoformat(), []).append(offset)
        assert written == sum(b.num_rows for b in rows)
        found: dict[str, list[int]] = {}
        for add in adds:
            day = add["partitionValues"]["store_date"]
            assert add["path"].startswith(partition_path(("store_date",),
                                                         (dt.date.fromisoformat(day),)) + "/")
            file = pq.ParquetFile(directory / add["path"])
            assert "store_date" not in file.schema_arrow.names
            assert all(file.metadata.row_group(i).num_rows <= group_rows
                       for i in range(file.metadata.num_row_groups))
            # a dictionary for the text column only (dictionary_columns)
            assert {(file.metadata.schema.column(c).name,
                     file.metadata.row_group(g).column(c).has_dictionary_page)
                    for g in range(file.metadata.num_row_groups)
                    for c in range(file.metadata.num_columns)} <= {
                ("topic", True), ("physical_offset", False), ("body", False)}
            table = file.read()
            offsets = table["physical_offset"].to_pylist()
            assert offsets == sorted(offsets)  # written in the order the rows came
            found.setdefault(day, []).extend(offsets)
            stats = json.loads(add["stats"])
            assert stats["numRecords"] == table.num_rows
            assert stats["minValues"]["physical_offset"] == min(offsets)
            assert stats["maxValues"]["physical_offset"] == max(offsets)
            topics = [t for t in table["topic"].to_pylist() if t is not None]
            assert stats["nullCount"]["topic"] == table.num_rows - len(topics)
            if topics:
                assert (stats["minValues"]["topic"], stats["maxValues"]["topic"]) \
                    == (min(topics), max(topics))
            assert "body" not in stats["minValues"]
        assert {day: sorted(v) for day, v in found.items()} == expected


def test_files_roll_at_the_target_size(tmp_path: Path) -> None:
    rows = stream([[(0, "A")] * 200] * 5)
    write_partitioned(iter(rows), SCHEMA, ("store_date",), tmp_path, 1,
                      {"compression": "zstd", "row_group_size": 100})
    files = [pq.ParquetFile(f).metadata for f in tmp_path.rglob("*.parquet")]
    # a file is closed once a write takes it past the (tiny) target: each batch of 200
    # rows fills two row groups and is one write
    assert sorted((f.num_rows, f.num_row_groups) for f in files) == [(200, 2)] * 5


def test_a_partition_value_that_needs_escaping_is_refused() -> None:
    with pytest.raises(ValueError, match="escaping"):
        partition_path(("topic",), ("a/b",))
    with pytest.raises(ValueError, match="null"):
        partition_path(("store_date",), (None,))
