"""Many tasks stage files, the driver commits once (jobs/lakehouse/staged_append.py): over
random plans (tasks, partitions, empty tasks, failed and speculative attempts, a driver
killed between its moves and its commit) the table holds exactly the rows of the accepted
attempts, once, and no file the log does not name is left in the table's directory; on a
local disk and in a bucket of the local S3 server (moves there are copies and deletes)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from tempfile import TemporaryDirectory

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st
from s3_server import serving_bucket

from jobs.lakehouse import staged_append
from jobs.lakehouse.driver_rows import committed
from jobs.lakehouse.locations import Location
from jobs.lakehouse.staged_append import (
    STAGING,
    StagedLayout,
    clear_staging,
    commit_staged,
    stage,
    staging_dir,
)

SCHEMA = pa.schema([pa.field("broker", pa.string(), nullable=False),
                    pa.field("physical_offset", pa.int64(), nullable=False),
                    pa.field("store_time", pa.timestamp("us", "UTC")),
                    pa.field("store_date", pa.date32(), nullable=False)])
SETTINGS = {"delta.dataSkippingStatsColumns": "broker,physical_offset,store_time"}
LAYOUT = StagedLayout(SCHEMA, ("store_date",), SETTINGS)
DAY0 = dt.date(2026, 1, 1)
APP, VERSION = "load-messages-b", 7

# a task: the days of its rows (a row per entry); an attempt fails or is accepted
TASK = st.lists(st.integers(0, 3), max_size=12)
ATTEMPTS = st.lists(st.sampled_from(["failed", "speculative"]), max_size=2)


def rows(task_index: int, days: list[int]) -> pa.RecordBatch:
    offsets = [task_index * 1000 + i for i in range(len(days))]
    return pa.RecordBatch.from_pydict({
        "broker": ["b"] * len(days), "physical_offset": offsets,
        "store_time": [dt.datetime.combine(DAY0 + dt.timedelta(days=d), dt.time(1), dt.UTC)
                       for d in days],
        "store_date": [DAY0 + dt.timedelta(days=d) for d in days]}, schema=SCHEMA)


def new_table(location: Location) -> None:
    write_deltalake(str(location), SCHEMA.empty_table(), partition_by=["store_date"],
                    configuration=SETTINGS)


def table_rows(location: Location) -> list[tuple]:
    table = DeltaTable(str(location)).to_pyarrow_table()
    return sorted(zip(table["physical_offset"].to_pylist(), table["store_date"].to_pylist(),
                      strict=True))


def stray_files(location: Location) -> set[str]:
    """Parquet files under the table that its current version does not name."""
    named = {uri.removeprefix("file://") for uri in DeltaTable(str(location)).file_uris()}
    return {f.relative for f in location.files() if f.relative.endswith(".parquet")
            and str(location / f.relative) not in named}


def run_append(location: Location, tasks: list[list[int]], attempts: list[list[str]],
               killed: bool) -> None:
    """One append as SparkFacts runs it: failed attempts stage files nobody collects; a
    speculative one stages files the driver gets but does not use; optionally the driver
    dies after its moves, and the append runs again."""
    for run in ("killed", "final") if killed else ("final",):
        if committed(location, APP, VERSION):
            break
        clear_staging(location, APP, VERSION)
        area = staging_dir(location, APP, VERSION)
        accepted = []
        for index, (days, extra) in enumerate(zip(tasks, attempts, strict=True)):
            for _kind in extra:  # an attempt that lost: its files stay in staging
                stage([rows(index, days)], area, LAYOUT)
            accepted += stage([rows(index, days)], area, LAYOUT)
        if run == "killed":
            _move_without_commit(location, accepted)
            continue
        assert commit_staged(location, APP, VERSION, accepted)


def _move_without_commit(location: Location, adds: list[dict]) -> None:
    """commit_staged up to its commit: the driver dies there (its moves are done)."""
    from deltalake import DeltaTable as Real

    class Killed(Exception):
        pass

    original = Real.create_write_transaction

    def die(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise Killed

    Real.create_write_transaction = die  # type: ignore[method-assign]
    try:
        with pytest.raises(Killed):
            commit_staged(location, APP, VERSION, adds)
    finally:
        Real.create_write_transaction = original  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):  # type: ignore[no-untyped-def]
    with serving_bucket(tmp_path_factory.mktemp("s3") / "root", "lake"):
        yield Location("s3://lake")


@contextmanager
def fresh_table(where: Location | None) -> Iterator[Location]:
    """A new empty table in a temporary directory, or under a new prefix of ``where``."""
    if where is not None:
        location = where / uuid.uuid4().hex / "messages"
        new_table(location)
        yield location
        return
    with TemporaryDirectory() as scratch:
        location = Location(f"{scratch}/messages")
        new_table(location)
        yield location


@given(tasks=st.lists(TASK, min_size=1, max_size=5), data=st.data(), killed=st.booleans())
@settings(max_examples=30, deadline=None)
def test_the_table_holds_exactly_the_accepted_attempts_rows(
        tasks: list[list[int]], data: st.DataObject, killed: bool) -> None:
    check_accepted_attempts(None, tasks, data, killed)


@given(tasks=st.lists(TASK, min_size=1, max_size=4), data=st.data(), killed=st.booleans())
@settings(max_examples=12, deadline=None)
def test_in_a_bucket_too(bucket: Location, tasks: list[list[int]], data: st.DataObject,
                         killed: bool) -> None:
    check_accepted_attempts(bucket, tasks, data, killed)


def check_accepted_attempts(where: Location | None, tasks: list[list[int]],
                            data: st.DataObject, killed: bool) -> None:
    attempts = [data.draw(ATTEMPTS) for _ in tasks]
    with fresh_table(where) as location:
        run_append(location, tasks, attempts, killed)
        expected = sorted((i * 1000 + n, DAY0 + dt.timedelta(days=d))
                          for i, days in enumerate(tasks) for n, d in enumerate(days))
        assert table_rows(location) == expected
        assert stray_files(location) == set()
        assert not (location / STAGING).files()
        # a re-run of a committed append changes nothing
        version = DeltaTable(str(location)).version()
        run_append(location, tasks, attempts, killed=False)
        assert DeltaTable(str(location)).version() == version
        assert table_rows(location) == expected


def test_staged_files_carry_the_statistics_delta_rs_writes() -> None:
    """A staged file's statistics are the ones delta-rs' own append writes for the same
    rows (the table's statistics columns only), so readers prune as they do today."""
    with TemporaryDirectory() as scratch:
        batch = rows(3, [0, 0, 2, 1])
        direct, staged = Path(scratch) / "direct", Path(scratch) / "staged"
        new_table(direct)
        new_table(staged)
        write_deltalake(str(direct), batch, mode="append")
        adds = stage([batch], staging_dir(staged, APP, VERSION), LAYOUT)
        commit_staged(staged, APP, VERSION, adds)

        def stats(location: Path) -> dict:
            """{partition values: statistics} of the table's files, from its log."""
            return {json.dumps(add["partitionValues"], sort_keys=True): json.loads(add["stats"])
                    for add in staged_append.logged_adds(location)}

        assert stats(staged) == stats(direct)
        assert DeltaTable(str(staged)).transaction_version(APP) == VERSION
