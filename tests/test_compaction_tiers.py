"""Size-tiered compaction (jobs/maintain/compaction.py): what a night rewrites is about
what the night added, whatever the history; a merge keeps every row and its statistics."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import os
import signal
from itertools import pairwise
from pathlib import Path
from statistics import median

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.maintain.compaction import (
    SCRATCH_PREFIX,
    DataFile,
    TieredPolicy,
    clear_scratch,
    data_files,
    merge_files,
    merge_plan,
    tier,
)

KIB = 1024


def simulate(nights: list[dict[str, int]], policy: TieredPolicy):  # type: ignore[no-untyped-def]
    """Apply ``merge_plan`` after every night's new files (a merged file's size: the sum,
    split at the target); yield (night's new bytes, bytes rewritten, files after)."""
    files: list[DataFile] = []
    clock = 0
    for night in nights:
        for partition, size in night.items():
            clock += 1
            files.append(DataFile(f"f{clock}", size, clock, (("p", partition),)))
        rewritten = 0
        for group in merge_plan(files, policy):
            assert len(group) >= 2 and len({f.partition for f in group}) == 1
            assert all(f.size < policy.target_file_bytes for f in group)
            chosen = {f.path for f in group}
            files = [f for f in files if f.path not in chosen]
            total = sum(f.size for f in group)
            rewritten += total
            while total > 0:
                clock += 1
                piece = min(total, policy.target_file_bytes)
                files.append(DataFile(f"f{clock}", piece, clock, group[0].partition))
                total -= piece
        yield sum(night.values()), rewritten, files


POLICY = TieredPolicy(target_file_bytes=128 * KIB * KIB, floor_bytes=KIB * KIB,
                      min_small_files=2, fanout=4)


@settings(max_examples=60, deadline=None)
@given(nights=st.lists(st.dictionaries(st.sampled_from("abc"), st.integers(1, 3 * KIB * KIB),
                                       min_size=1), min_size=1, max_size=400),
       fanout=st.integers(2, 8), first=st.integers(2, 8))
def test_each_byte_is_rewritten_about_once_per_tier_and_few_files_stay_small(
        nights: list[dict[str, int]], fanout: int, first: int) -> None:
    policy = TieredPolicy(64 * KIB * KIB, KIB * KIB, first, fanout)
    tiers = tier(policy.target_file_bytes - 1, policy)
    added = rewritten = 0
    for new, night_rewritten, files in simulate(nights, policy):
        added, rewritten = added + new, rewritten + night_rewritten
        for partition in {f.partition for f in files}:
            small = [f for f in files if f.partition == partition
                     and f.size < policy.target_file_bytes]
            # per tier fewer than its threshold, but one tier a merge just filled
            assert len(small) <= first + (fanout - 1) * tiers + 1
    # tier 0 costs at most its floor a night per partition; above it a byte moves up a tier
    # with each rewrite (a merge of `fanout` files of a tier fills the next)
    floor_allowance = len(nights) * 3 * (policy.floor_bytes + 3 * KIB * KIB) * first
    assert rewritten <= added * (tiers + 1) + floor_allowance


def test_a_night_does_not_rewrite_a_history_that_has_grown_large() -> None:
    """The case the bench met: a few hundred KiB a night for a year. OPTIMIZE rewrote the
    one growing file with each night's (~n nights of bytes on night n)."""
    nights = [{"a": 300 * KIB}] * 365
    per_night = [rewritten for _new, rewritten, _files in simulate(nights, POLICY)]
    assert sum(per_night) <= 365 * 300 * KIB * (tier(POLICY.target_file_bytes - 1, POLICY) + 2)
    assert max(per_night) < POLICY.target_file_bytes
    # a typical night is flat (a merge of a higher tier comes rarely, as a lump)
    assert median(per_night[-100:]) <= median(per_night[100:200]) + POLICY.floor_bytes


def test_files_at_the_target_are_never_merged() -> None:
    big = DataFile("big", POLICY.target_file_bytes, 0, ())
    small = [DataFile(f"s{i}", KIB, i, ()) for i in range(1, 4)]
    assert merge_plan([big, *small], POLICY) == [small]
    assert merge_plan([big, small[0]], POLICY) == []


# ------------------------------------------------------------------ real Delta tables


def night_rows(night: int, rows: int = 500) -> pa.Table:
    day = dt.date(2026, 1, 1) + dt.timedelta(days=night % 3)
    return pa.table({
        "store_date": pa.array([day] * rows),
        "broker": pa.array(["b1"] * rows),
        "offset": pa.array([night * rows + i for i in range(rows)], pa.int64()),
        "stored": pa.array([dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
                            + dt.timedelta(seconds=night * rows + i) for i in range(rows)],
                           pa.timestamp("us", "UTC")),
        "body": pa.array([f"n{night}-{i}" * 3 for i in range(rows)]),
    })


def table_of(path: Path, nights: int) -> DeltaTable:
    for night in range(nights):
        write_deltalake(path, night_rows(night), partition_by=["store_date"], mode="append")
    return DeltaTable(str(path))


def sorted_rows(table: DeltaTable) -> list[tuple]:
    data = table.to_pyarrow_table()
    return sorted(zip(*(data.column(c).to_pylist() for c in sorted(data.column_names)),
                      strict=True))


def stats_of(table: DeltaTable) -> dict[str, dict]:
    adds = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()
    return {row["path"]: row for row in adds.to_pylist()}


def test_a_merge_keeps_every_row_its_partition_and_statistics_like_delta_rs_own(
        tmp_path: Path) -> None:
    table = table_of(tmp_path / "t", 9)
    before, files = sorted_rows(table), data_files(table)
    stats_before = stats_of(table)
    policy = TieredPolicy(64 * KIB * KIB, KIB * KIB, 2, 4)
    groups = merge_plan(files, policy)
    assert len(groups) == 3  # one per store_date partition, three files each
    for group in groups:
        assert merge_files(table, tmp_path / "t", group, "table", policy.target_file_bytes) == 1
        table.update_incremental()
    assert sorted_rows(table) == before
    after = stats_of(table)
    assert len(after) == 3
    partition_of = {f.path: f.partition for f in data_files(table)}
    for path, row in after.items():
        merged_from = [stats_before[f.path] for g in groups for f in g
                       if f.partition == partition_of[path]]
        assert row["num_records"] == sum(r["num_records"] for r in merged_from)
        for column in ("offset", "stored", "body"):
            assert row[f"min.{column}"] == min(r[f"min.{column}"] for r in merged_from)
            assert row[f"max.{column}"] == max(r[f"max.{column}"] for r in merged_from)
        assert row["partition.store_date"] == merged_from[0]["partition.store_date"]
    log = sorted((tmp_path / "t" / "_delta_log").glob("*.json"))[-1].read_text()
    actions = [json.loads(line) for line in log.splitlines()]
    assert all(a["add"]["dataChange"] is False for a in actions if "add" in a)
    assert all(a["remove"]["dataChange"] is False for a in actions if "remove" in a)
    assert not list((tmp_path / "t").glob(f"{SCRATCH_PREFIX}*"))
    # time travel still reads the rows as they were
    assert sorted_rows(DeltaTable(str(tmp_path / "t"), version=8)) == before


def _merge_then_die(location: str) -> None:
    table = DeltaTable(location)
    group = merge_plan(data_files(table), POLICY)[0]
    merge_files(table, location, group, "table", POLICY.target_file_bytes,
                before_commit=lambda: os.kill(os.getpid(), signal.SIGKILL))


def test_a_merge_killed_before_its_commit_changes_nothing_and_is_cleared_next_time(
        tmp_path: Path) -> None:
    location = tmp_path / "t"
    table = table_of(location, 4)
    before, version = sorted_rows(table), table.version()
    child = multiprocessing.get_context("spawn").Process(target=_merge_then_die,
                                                         args=(str(location),))
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL
    table = DeltaTable(str(location))
    assert table.version() == version and sorted_rows(table) == before
    assert list(location.glob(f"{SCRATCH_PREFIX}table-*"))  # what the kill left
    clear_scratch(location, "table")
    assert not list(location.glob(f"{SCRATCH_PREFIX}*"))
    for group in merge_plan(data_files(table), POLICY):
        merge_files(table, location, group, "table", POLICY.target_file_bytes)
        table.update_incremental()
    assert sorted_rows(table) == before


@pytest.mark.spark
def test_spark_reads_the_merged_files(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    location = tmp_path / "t"
    table = table_of(location, 6)
    for group in merge_plan(data_files(table), POLICY):
        merge_files(table, location, group, "table", POLICY.target_file_bytes)
        table.update_incremental()
    frame = spark.read.format("delta").load(str(location))
    assert frame.count() == 6 * 500
    picked = frame.where("offset = 1234")
    assert [r["body"] for r in picked.collect()] == ["n2-234" * 3]


def test_a_merged_file_keeps_load_order_in_row_groups_a_window_read_skips(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A reader of the newest nights skips the older row groups of a merged file by their
    statistics (one row group per file made every merged file a whole read)."""
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from jobs.maintain import compaction

    monkeypatch.setattr(compaction, "ROW_GROUP_ROWS", 1000)
    location = tmp_path / "t"
    for night in range(9):
        write_deltalake(location, night_rows(night).drop(["store_date"]), mode="append")
    table = DeltaTable(str(location))
    (group,) = merge_plan(data_files(table), POLICY)
    merge_files(table, location, group, "table", POLICY.target_file_bytes)
    table.update_incremental()
    (merged,) = data_files(table)
    metadata = pq.ParquetFile(location / merged.path).metadata
    column = metadata.schema.to_arrow_schema().get_field_index("offset")
    ranges = [(metadata.row_group(i).column(column).statistics.min,
               metadata.row_group(i).column(column).statistics.max)
              for i in range(metadata.num_row_groups)]
    assert len(ranges) == 5 and ranges == sorted(ranges)
    assert all(high < low for (_, high), (low, _) in pairwise(ranges))
    fragment = next(ds.dataset(location / merged.path, format="parquet").get_fragments())
    newest = fragment.subset(ds.field("offset") >= 8 * 500)
    assert newest.num_row_groups == 1  # the window's row group alone is read


def test_a_merged_lookup_bucket_keeps_its_bloom_filters(tmp_path: Path) -> None:
    """message_lookup's files carry a Bloom filter on lookup_value, which point reads use
    to skip row groups: a merge writes one too."""
    import pyarrow.parquet as pq

    from jobs.lakehouse.message_lookup import parquet_options

    location = tmp_path / "lookup"
    for night in range(3):
        write_deltalake(location, pa.table({
            "lookup_bucket": ["a"] * 100,
            "lookup_value": [f"v{night}-{i}" for i in range(100)]}),
            partition_by=["lookup_bucket"], mode="append")
    table = DeltaTable(str(location))
    (group,) = merge_plan(data_files(table), POLICY)
    merge_files(table, location, group, "table", POLICY.target_file_bytes, parquet_options())
    table.update_incremental()
    (merged,) = data_files(table)
    chunk = pq.ParquetFile(location / merged.path).metadata.row_group(0).column(0)
    assert chunk.path_in_schema == "lookup_value" and chunk.bloom_filter_length > 0
    assert sorted(table.to_pyarrow_table().column("lookup_value").to_pylist()) == sorted(
        f"v{n}-{i}" for n in range(3) for i in range(100))


def test_a_merge_commits_past_another_brokers_replace_and_appends(tmp_path: Path) -> None:
    """delta-rs fails a commit that removes files when another partition was replaced
    since it read (another broker's check rewriting its rows): the merge commits again on
    the newer version, and every writer's rows are there once."""
    location = tmp_path / "t"
    for broker in ("b1", "b2"):
        for night in range(3):
            write_deltalake(location, pa.table({"broker": [broker] * 3, "v": [night] * 3}),
                            partition_by=["broker"], mode="append")
    table = DeltaTable(str(location))
    (group,) = [g for g in merge_plan(data_files(table), POLICY)
                if dict(g[0].partition)["broker"] == "b1"]

    def other_writers() -> None:
        write_deltalake(location, pa.table({"broker": ["b2"], "v": [9]}),
                        partition_by=["broker"], mode="overwrite", predicate="broker = 'b2'")
        write_deltalake(location, pa.table({"broker": ["b1"], "v": [7]}),
                        partition_by=["broker"], mode="append")

    assert merge_files(table, location, group, "b1", POLICY.target_file_bytes,
                       before_commit=other_writers) == 1
    rows = DeltaTable(str(location)).to_pyarrow_table().to_pylist()
    assert sorted((r["broker"], r["v"]) for r in rows) == sorted(
        [("b1", n) for n in range(3) for _ in range(3)] + [("b1", 7), ("b2", 9)])
    b1_files = [f for f in data_files(DeltaTable(str(location)))
                if dict(f.partition)["broker"] == "b1"]
    assert len(b1_files) == 2  # the merged file and the append that came after
