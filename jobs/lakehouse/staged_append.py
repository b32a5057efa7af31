"""An append whose files are written by many tasks and committed once, by the driver.

Spark's Delta writer costs several times the CPU the rows need (bench/README.md, "Big
nights"): every row crosses from the Python worker into the JVM and through Spark's own
Parquet writer, and each executor's commit protocol runs a job of its own. Here a task
writes its rows where it runs, with pyarrow's Parquet writer (the table's partitioning,
compression and file statistics; jobs.lakehouse.parquet_files), and hands back only its
files' add actions; the driver commits them in one Delta transaction:

1. :func:`stage` (in a task): pyarrow writes the task's batches as Parquet files in a
   directory of its own under ``<table>/_rmq_staging/<append>/``, in the table's partition
   directories; delta-rs derives each file's statistics from its footer, with the table's
   statistics settings, as it does for the table's own files. It returns the files' add
   actions, paths relative to the table.
2. :func:`commit_staged` (the driver, once per table and append): unless the table has
   already seen the append's transaction ``(app_id, version)`` (a re-run after a crash),
   it moves the files of the attempts Spark accepted into the table's partition
   directories and commits them with the transaction, in one commit. The staging
   directory is then removed, with the files of failed and speculative attempts in it.

A load killed while tasks write leaves only staging, which the append's next attempt
clears first. Killed between the moves and the commit, it leaves files the log never
names: the staging directory lists them (``moved.json``, written before the first move),
and the next attempt deletes them. Nothing staged is read by anyone: ``_``-prefixed
directories are not part of a Delta table.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from jobs.lakehouse.contracts import STATS_COLUMNS
from jobs.lakehouse.driver_rows import commit_once, committed
from jobs.lakehouse.locations import (
    Location,
    open_delta_table,
    warehouse_location,
)
from jobs.lakehouse.parquet_files import add_actions, logged_adds, write_partitioned

STAGING = "_rmq_staging"
MOVED = "moved.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.=-]")


@dataclass(frozen=True)
class StagedLayout:
    """What a task needs to write a table's files: picklable, no Spark, no contract."""

    schema: pa.Schema
    partition_by: tuple[str, ...]
    configuration: Mapping[str, str]  # the table's delta.dataSkipping* settings
    target_file_bytes: int | None = None
    compression: str = "ZSTD"
    # more of pyarrow's writer settings (row groups, Bloom filters, dictionary columns)
    options: Mapping[str, Any] = field(default_factory=dict)


def _table(location: str | Path | Location) -> Location:
    return warehouse_location(location, "table")


def staging_dir(location: str | Path | Location, app_id: str, version: int) -> Location:
    """The append's own staging directory under the table (a local directory or a key
    prefix in the table's bucket)."""
    return _table(location) / STAGING / f"{_UNSAFE.sub('_', app_id)}-{version}"


def stage(batches: Iterable[pa.RecordBatch], area: str | Location, layout: StagedLayout
          ) -> list[dict[str, Any]]:
    """Write ``batches`` as Parquet files in a new attempt directory under ``area`` and
    return their add actions (``path`` relative to ``area``'s table). No rows: [].

    pyarrow writes the files (jobs.lakehouse.parquet_files: the table's partition
    directories, zstd, statistics on the table's statistics columns) and delta-rs derives
    the add actions from their footers. In a bucket the files are written in a local
    scratch directory first and uploaded (retried as every obstore request is)."""
    area = _table(area)
    attempt = area / uuid.uuid4().hex
    scratch = area.scratch_directory(attempt.name)  # the attempt itself on a local disk
    try:
        write_partitioned(batches, layout.schema, layout.partition_by, scratch,
                          layout.target_file_bytes, parquet_options(layout))
        adds = add_actions(scratch, layout.schema, layout.partition_by, layout.configuration)
        if not area.is_local:
            for add in adds:
                (attempt / add["path"]).put_file(scratch / add["path"])
    finally:
        if not area.is_local:
            shutil.rmtree(scratch, ignore_errors=True)
    prefix = f"{STAGING}/{area.name}/{attempt.name}"
    return [{**add, "path": f"{prefix}/{add['path']}"} for add in adds]


def parquet_options(layout: StagedLayout) -> dict[str, Any]:
    """pyarrow's writer settings for ``layout``: its compression, column statistics where
    Delta's file statistics are taken from (every column when the table does not name its
    statistics columns), and the layout's own further options."""
    named = layout.configuration.get(STATS_COLUMNS)
    columns = [c.strip() for c in named.split(",") if c.strip()] if named else None
    return {"compression": layout.compression.lower(), "write_statistics": columns or True,
            **layout.options}


def statistics_settings(configuration: Mapping[str, str | None]) -> dict[str, str | None]:
    """A table's settings for which columns get file statistics (``delta.dataSkipping*``):
    files written outside the table get the statistics its own files get."""
    return {k: v for k, v in configuration.items() if k.startswith("delta.dataSkipping")}


def clear_staging(location: str | Path | Location, app_id: str, version: int) -> None:
    """Remove what an earlier attempt of this append left: files it moved into the table
    but never committed (the commit is checked first), then its staging directory."""
    table = _table(location)
    area = staging_dir(table, app_id, version)
    moved = area / MOVED
    if moved.is_file() and not committed(str(table), app_id, version):
        for path in json.loads(moved.read_text()):
            (table / path).delete()
    area.delete_tree()


def commit_staged(location: str | Path | Location, app_id: str, version: int,
                  adds: list[dict[str, Any]]) -> bool:
    """Move the staged files of ``adds`` into the table and commit them as the append
    ``(app_id, version)``; False (and nothing moved) when the table has it already."""
    from deltalake import CommitProperties, Transaction
    from deltalake.transaction import AddAction

    location = _table(location)
    area = staging_dir(location, app_id, version)
    if committed(str(location), app_id, version):
        area.delete_tree()
        return False
    final = [_final_path(add["path"]) for add in adds]
    (area / MOVED).write_text(json.dumps(final))
    for add, path in zip(adds, final, strict=True):
        (location / add["path"]).move_to(location / path)
    table = open_delta_table(location)
    actions = [AddAction(path, add["size"], add["partitionValues"], add["modificationTime"],
                         True, add.get("stats")) for add, path in zip(adds, final, strict=True)]
    with commit_once(str(location), app_id, version):
        table.create_write_transaction(
            actions, mode="append", schema=table.schema(),
            partition_by=list(table.metadata().partition_columns) or None,
            commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]))
    area.delete_tree()
    return True


def _final_path(staged: str) -> str:
    """``_rmq_staging/<append>/<attempt>/<partition dirs>/<file>`` -> ``<partition dirs>/<file>``
    (delta-rs names every file with a new UUID: no two attempts' names meet)."""
    parts = staged.split("/")
    if len(parts) < 4 or parts[0] != STAGING:
        raise ValueError(f"not a staged file: {staged!r}")
    return "/".join(parts[3:])


__all__ = ["STAGING", "StagedLayout", "clear_staging", "commit_staged", "logged_adds", "stage",
           "staging_dir", "statistics_settings"]
