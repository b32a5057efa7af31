"""Size-tiered compaction: each night rewrites what the night added, not the history.

Delta's ``OPTIMIZE`` (delta-rs' ``optimize.compact``) bin-packs *every* file of a
partition below the target size. A fact table that gains a few MiB a night keeps one
growing file below its 128 MiB target, and each night's compaction rewrote that file with
the night's new one: the maintenance of night ``n`` read and wrote ``n`` nights of rows,
until the file reached the target (months, at a few MiB a night).

Here a partition's files below the target are sorted into **tiers** by size, as in
Cassandra's size-tiered compaction or an LSM tree: tier 0 holds the files below
``floor_bytes``; tier ``t`` the files in ``[floor * fanout**(t-1), floor * fanout**t)``.
A tier is merged, together with every smaller file of the partition, once it holds
``fanout`` files (tier 0: ``min_small_files``), the lowest such tier first, one merge per
partition per night. A merge of ``fanout`` files of one tier writes a file of the next, so
every byte is rewritten about once per tier — ``log_fanout(target / floor)`` times in all,
whatever the history — and the files below the target stay a few per tier. Tier 0 is
cheap by definition (less than ``floor_bytes``), so small tables are still one file after
most nights.

delta-rs' own compaction cannot merge a chosen set of files (it takes every file below
its target), so a merge is written here: the chosen files are read as one stream, oldest
first, and written by pyarrow into a scratch directory beside the table, in row groups of
``ROW_GROUP_ROWS`` rows (each a stretch of nights, so a reader of the newest nights skips
the others by their statistics); delta-rs derives each new file's statistics from its
footer as it does for the files it writes; the file is moved into the partition's
directory, and one commit removes the chosen files and adds the new ones, all with
``dataChange = false``
(what ``OPTIMIZE`` commits: blind appends of other brokers never conflict with it). A
merge killed before its commit leaves a file no version refers to, which VACUUM removes,
and a scratch directory, which the next maintenance of the same scope removes.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.lakehouse.locations import Location
from jobs.lakehouse.parquet_files import DEFAULT_OPTIONS, add_actions, write_in_order
from jobs.lakehouse.staged_append import statistics_settings

SCRATCH_PREFIX = ".compaction-"
# Rows per row group of a merged file. A merge concatenates nights in load order, so each
# row group covers a stretch of nights and its statistics (commitlog offsets, snapshot ids)
# let a reader of the newest nights skip the rest of the file; one row group per file (the
# writer's default of a million rows) made a merged file of many nights a whole read.
ROW_GROUP_ROWS = 128 * 1024


@dataclass(frozen=True)
class TieredPolicy:
    """When a partition's files are merged (:mod:`jobs.maintain.policy` gives each table
    one)."""

    target_file_bytes: int   # files this large are left alone; merges write up to it
    floor_bytes: int         # tier 0: files below this, merged once there are...
    min_small_files: int     # ...this many of them
    fanout: int              # a higher tier is merged once it has this many files


@dataclass(frozen=True)
class DataFile:
    """One file of the table, as its add action names it."""

    path: str                # relative to the table's root
    size: int
    modified_ms: int
    partition: tuple[tuple[str, str | None], ...]  # (column, value as the log writes it)
    records: int | None = None  # from its statistics, when it has them


def tier(size: int, policy: TieredPolicy) -> int:
    """0 below the floor, then one more for every ``fanout`` times the size."""
    level, bound = 0, policy.floor_bytes
    while size >= bound:
        level, bound = level + 1, bound * policy.fanout
    return level


def merge_plan(files: Iterable[DataFile], policy: TieredPolicy) -> list[list[DataFile]]:
    """The merges to run now: at most one per partition, each a list of files oldest
    first (so rows keep the order they were loaded in)."""
    partitions: dict[tuple, list[DataFile]] = {}
    for file in files:
        if file.size < policy.target_file_bytes:
            partitions.setdefault(file.partition, []).append(file)
    merges = []
    for partition in sorted(partitions, key=repr):
        group = _partition_merge(partitions[partition], policy)
        if group:
            merges.append(sorted(group, key=lambda f: (f.modified_ms, f.path)))
    return merges


def _partition_merge(files: list[DataFile], policy: TieredPolicy) -> list[DataFile]:
    levels = [(tier(f.size, policy), f) for f in files]
    counts = Counter(level for level, _ in levels)
    for level in sorted(counts):
        needed = policy.min_small_files if level == 0 else policy.fanout
        if counts[level] >= max(needed, 2):
            return [f for file_level, f in levels if file_level <= level]
    return []


def data_files(table: Any) -> list[DataFile]:
    """The table's files now (a delta-rs ``DeltaTable``)."""
    import pyarrow as pa

    adds = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=False)).read_all()
    wanted = ("path", "size_bytes", "modification_time", "partition", "num_records")
    rows = adds.select([c for c in wanted if c in adds.column_names]).to_pylist()
    return [DataFile(r["path"], r["size_bytes"], r["modification_time"],
                     tuple((k, partition_string(v))
                           for k, v in (r.get("partition") or {}).items()),
                     r.get("num_records"))
            for r in rows]


def partition_string(value: object) -> str | None:
    """A partition value as the Delta log writes it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        raise TypeError("timestamp partition values are not compacted here")
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def clear_scratch(location: str | Path, scope: str) -> None:
    """Remove what killed merges of ``scope`` left (call with the scope's lock held)."""
    table = Location(str(location))
    if table.is_local:  # elsewhere the scratch is a temporary directory of the merge's own
        for leftover in table.path.glob(f"{SCRATCH_PREFIX}{scope}-*"):
            shutil.rmtree(leftover, ignore_errors=True)


def _readable(location: Location, group: Sequence[DataFile], inputs: Path | None
              ) -> list[str]:
    """Local paths of ``group``'s files: where they are on a local disk (``inputs`` None);
    from a bucket, downloaded whole into ``inputs``, a directory of the merge's own (the
    files a compaction merges are small: one GET each, retried with backoff by obstore,
    where Arrow's own S3 reads of their small column chunks give up on a throttled
    request: jobs.lakehouse.driver_rows)."""
    if inputs is None:
        return [str(location.path / f.path) for f in group]
    local = [inputs / f"{index}.parquet" for index in range(len(group))]
    for file, path in zip(group, local, strict=True):
        (location / file.path).get_file(path)
    return [str(path) for path in local]


def merge_files(table: Any, location: str | Path, group: Sequence[DataFile], scope: str,
                target_file_bytes: int, parquet_options: Mapping[str, Any] | None = None,
                before_commit: Callable[[], None] | None = None) -> int:
    """Rewrite ``group`` (files of one partition) as one file, or several of about
    ``target_file_bytes``, rows in the group's order; one commit. The number of files
    written. ``parquet_options``: the table's own Parquet settings for pyarrow's writer
    (``row_group_size``, ``compression``, Bloom filters), if it has any."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake.transaction import AddAction, RemoveAction

    location = Location(str(location))
    partition_columns = list(table.metadata().partition_columns)
    schema = pa.schema(table.schema().to_arrow())
    data_schema = pa.schema([f for f in schema if f.name not in partition_columns])
    scratch = location.scratch_directory(f"{SCRATCH_PREFIX}{scope}-{uuid.uuid4().hex}")
    inputs = None if location.is_local else Path(tempfile.mkdtemp(prefix="rmq-merge-inputs-"))
    try:
        rows = ds.dataset(_readable(location, group, inputs), schema=data_schema,
                          format="parquet").scanner(use_threads=False).to_reader()
        write_in_order(rows, rows.schema, scratch, target_file_bytes,
                       {**DEFAULT_OPTIONS, "row_group_size": ROW_GROUP_ROWS,
                        **(parquet_options or {})})
        written = add_actions(scratch, data_schema, (), _statistics_settings(table))
        _check_every_row_written(group, written)
        directory = Path(group[0].path).parent
        partition = dict(group[0].partition)
        now_ms = int(time.time() * 1000)
        moved = [(directory / add["path"]).as_posix() for add in written]
        for add, path in zip(written, moved, strict=True):
            (location / path).put_file(scratch / add["path"])
        actions: list[Any] = [
            AddAction(path, add["size"], partition, add["modificationTime"], False, add["stats"])
            for add, path in zip(written, moved, strict=True)]
        actions += [RemoveAction(f.path, False, now_ms, size=f.size,
                                 partition_values=partition) for f in group]
        if before_commit is not None:
            before_commit()
        try:
            _commit(table, group, actions, partition_columns)
        except Exception:
            for path in moved:  # never committed: not the table's (VACUUM would, later)
                (location / path).delete()
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if inputs is not None:
            shutil.rmtree(inputs, ignore_errors=True)
    return len(written)


COMMIT_ATTEMPTS = 5


def _commit(table: Any, group: Sequence[DataFile], actions: list[Any],
            partition_columns: list[str]) -> None:
    """Commit the merge; after a conflict, again on the table as it now is, as long as
    every file of the group is still in it.

    delta-rs counts a commit with remove actions as having read the whole table, so a
    concurrent replace in *another* partition (another broker's check rewriting its rows)
    fails it. Nothing the merge read changed then: the same actions are committed on the
    newer version. A file of the group removed meanwhile (which the scope's lock rules
    out) ends the merge."""
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import CommitProperties

    for attempt in range(COMMIT_ATTEMPTS):
        try:
            table.create_write_transaction(
                actions, mode="append", schema=table.schema(),
                partition_by=partition_columns, commit_properties=CommitProperties(
                    custom_metadata={"rmq.operation": "tiered compaction"}))
            return
        except CommitFailedError:
            table.update_incremental()
            live = {f.path for f in data_files(table)}
            if attempt + 1 == COMMIT_ATTEMPTS or any(f.path not in live for f in group):
                raise


class CompactionError(RuntimeError):
    """A merge would not keep the rows it replaces; nothing was committed."""


def _check_every_row_written(group: Sequence[DataFile], written: list[dict]) -> None:
    """The new files hold as many rows as the files they replace (where both counts are
    known from statistics), or the merge is not committed."""
    counts = [json.loads(add["stats"]).get("numRecords") if add.get("stats") else None
              for add in written]
    if None in counts or any(f.records is None for f in group):
        return
    if sum(counts) != sum(f.records or 0 for f in group):
        raise CompactionError(f"a merge of {len(group)} files wrote {sum(counts)} rows for "
                              f"{sum(f.records or 0 for f in group)}: not committed")


def _statistics_settings(table: Any) -> dict[str, str | None]:
    """The table's statistics settings: the merged file's statistics cover what its other
    files' do."""
    return statistics_settings(table.metadata().configuration)
