"""Where a load's decode tasks run, and how their rows reach the fact tables.

* :class:`SparkFacts`: the tasks become an RDD of task groups; each executor task decodes
  its group and writes the rows as Parquet files itself, returning only their add actions.
  For nights with much to read: the cores of a cluster; rows never pass through the
  driver or the JVM.
* :class:`InProcessFacts`: the same task code runs in this process and writes its files
  the same way, as one attempt. For nights with little to read (a nothing-new night reads
  a few KiB of queue tails): no JVM to start, no job to plan, no Python workers.

Both write with one writer (jobs.lakehouse.staged_append: pyarrow's Parquet files, the
statistics delta-rs derives from their footers) and commit once per ``(app_id, snapshot
sequence)`` through delta-rs (:func:`append_staged`): the commit carries Delta's
transaction action (``txn``), and an append whose version the table has already seen is
skipped, whichever of the two wrote it. The rows are the same (tests/test_load_engines.py
loads every real-broker store both ways and compares the tables). Which one a load uses
is :func:`fact_writer`'s choice, from ``load_engine`` and ``local_load_up_to_mib``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from jobs.lakehouse.driver_rows import committed
from jobs.lakehouse.engine_choice import LOCAL, SPARK, runs_in_process
from jobs.lakehouse.locations import open_delta_table
from jobs.lakehouse.staged_append import (
    StagedLayout,
    clear_staging,
    commit_staged,
    stage,
    staging_dir,
    statistics_settings,
)
from jobs.load.decode_tasks import DecodeContext, Task, run_task
from jobs.maintain.policy import POLICIES

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import RDD
    from pyspark.sql import SparkSession

    from jobs.lakehouse.contracts import Contract

class FactWriter(Protocol):
    """Decode tasks into a fact table, once per (app_id, version)."""

    name: str

    def append(self, location: str, contract: Contract, tasks: list[Task],
               context: DecodeContext, app_id: str, version: int) -> None:
        """Decode ``tasks`` and append their rows, unless ``(app_id, version)`` is
        already committed; every task's report is written either way it runs."""

    def run_for_reports(self, tasks: list[Task], context: DecodeContext) -> None:
        """Decode ``tasks`` again for their reports only (their rows are committed)."""

    def describe(self, tasks: list[Task]) -> str:
        """Where ``tasks`` are decoded, for the progress line."""


def fact_writer(setting: str, planned_bytes: int, up_to_mib: int, split_bytes: int,
                spark: Callable[[], SparkSession]) -> FactWriter:
    """The writer ``setting`` (auto, local or spark) asks for, for a plan of
    ``planned_bytes``; ``spark`` starts the session only when Spark is chosen."""
    if runs_in_process("load", setting, planned_bytes, up_to_mib):
        return InProcessFacts(split_bytes)
    return SparkFacts(spark(), split_bytes)


class InProcessFacts:
    """Decode in this process and stage the rows as the executors do: a thread per core,
    each staging a group of tasks (pyarrow's writer and compression release the GIL)."""

    name = LOCAL

    def __init__(self, split_bytes: int, threads: int | None = None) -> None:
        self.split_bytes = split_bytes
        self.threads = threads or min(4, os.cpu_count() or 1)

    def append(self, location: str, contract: Contract, tasks: list[Task],
               context: DecodeContext, app_id: str, version: int) -> None:
        # the stream is only decoded when it is written: skipped when an earlier attempt
        # committed it (its reports are recomputed if gone)
        def in_threads(area: str, layout: StagedLayout) -> list[list[dict]]:
            groups = self.groups(tasks)
            with ThreadPoolExecutor(max_workers=len(groups)) as pool:
                return list(pool.map(
                    lambda group: stage(_decoded(group, context), area, layout), groups))

        append_staged(location, contract, app_id, version, in_threads)

    def groups(self, tasks: list[Task]) -> list[list[Task]]:
        """One group (a thread, files as large as the table's target) below a split's worth
        of bytes, a group per thread above: a small night stays one attempt. Each group is
        a run of consecutive tasks, so its files cover a contiguous stretch of offsets
        (their statistics skip as one writer's would)."""
        total = sum(t.weight for t in tasks)
        return consecutive_groups(tasks, 1 if total < self.split_bytes else self.threads)

    def run_for_reports(self, tasks: list[Task], context: DecodeContext) -> None:
        for _ in _decoded(tasks, context):
            pass

    def describe(self, tasks: list[Task]) -> str:
        return f"in this process ({len(self.groups(tasks))} thread(s))"


def append_staged(location: str, contract: Contract, app_id: str, version: int,
                  write: Callable[[str, StagedLayout], list[list[dict]]],
                  options: Mapping[str, Any] | None = None) -> None:
    """The append ``(app_id, version)`` of the files ``write(area, layout)`` stages (the
    add actions of each attempt it accepts), committed once by this process; nothing is
    written when the table has it already (as Delta's own txn check did) and what an
    earlier attempt left is cleared first. ``options``: more of pyarrow's writer settings
    (the layout's)."""
    if committed(location, app_id, version):
        return
    clear_staging(location, app_id, version)
    attempts = write(str(staging_dir(location, app_id, version)),
                     staged_layout(location, contract, options))
    commit_staged(location, app_id, version, [add for adds in attempts for add in adds])


def _decoded(tasks: list[Task], context: DecodeContext) -> Iterator[pa.RecordBatch]:
    for task in tasks:
        yield from run_task(task, context)


class SparkFacts:
    """Decode on Spark's executors, each task writing its own Parquet files; the driver
    commits them once (jobs.lakehouse.staged_append): no row crosses into the JVM."""

    name = SPARK

    def __init__(self, spark: SparkSession, split_bytes: int) -> None:
        self.spark, self.split_bytes = spark, split_bytes

    def append(self, location: str, contract: Contract, tasks: list[Task],
               context: DecodeContext, app_id: str, version: int) -> None:
        def on_executors_staged(area: str, layout: StagedLayout) -> list[list[dict]]:
            return self.task_groups(tasks).mapPartitions(
                _staged_files(area, layout, on_executors(context))).collect()

        append_staged(location, contract, app_id, version, on_executors_staged)

    def run_for_reports(self, tasks: list[Task], context: DecodeContext) -> None:
        self.task_groups(tasks).foreach(_reports_only(on_executors(context)))

    def describe(self, tasks: list[Task]) -> str:
        return f"{len(self.groups(tasks))} Spark task(s), on the executors"

    def groups(self, tasks: list[Task]) -> list[list[Task]]:
        return pack_tasks(tasks, self.split_bytes, self.spark.sparkContext.defaultParallelism)

    def task_groups(self, tasks: list[Task]) -> RDD[list[Task]]:
        """An RDD of task groups (:func:`pack_tasks`), one Spark partition each."""
        groups = self.groups(tasks)
        return self.spark.sparkContext.parallelize(groups, max(1, len(groups)))


def on_executors(context: DecodeContext) -> DecodeContext:
    """The context as the executors get it: a snapshot in a bucket is read from its
    objects, since an executor's host need not hold the driver's mirror of it."""
    return replace(context, read_objects=True)


def pack_tasks(tasks: list[Task], target_bytes: int, min_groups: int) -> list[list[Task]]:
    """Group tasks into Spark partitions of about ``target_bytes`` each.

    Many small queue files would otherwise each cost a Spark task and a Parquet file;
    a commitlog range of ``target_bytes`` stays a partition of its own. At least
    ``min_groups`` groups (when there are that many tasks) keep every core busy.
    """
    total = sum(t.weight for t in tasks)
    count = min(len(tasks), max(min_groups, -(-total // max(target_bytes, 1))))
    groups: list[list[Task]] = [[] for _ in range(count)]
    loads = [0] * count
    for task in sorted(tasks, key=lambda t: -t.weight):
        lightest = loads.index(min(loads))
        groups[lightest].append(task)
        loads[lightest] += task.weight
    order = {t.task_id: i for i, t in enumerate(tasks)}
    return [sorted(g, key=lambda t: order[t.task_id]) for g in groups if g]


def consecutive_groups(tasks: list[Task], count: int) -> list[list[Task]]:
    """``tasks`` in their order, cut into at most ``count`` runs of about equal weight."""
    total = sum(t.weight for t in tasks)
    groups: list[list[Task]] = [[]]
    done = 0
    for task in tasks:
        if groups[-1] and len(groups) < count and done >= total * len(groups) / count:
            groups.append([])
        groups[-1].append(task)
        done += task.weight
    return groups


def staged_layout(location: str, contract: Contract,
                  options: Mapping[str, Any] | None = None) -> StagedLayout:
    """How the tasks write ``location``'s files: the contract's columns and partitioning,
    the table's own statistics settings, files of the size its compaction leaves alone
    (a night in process is one attempt: without it one file per partition), and
    ``options`` for pyarrow's writer."""
    return StagedLayout(contract.arrow_schema(), tuple(contract.partition_columns),
                        statistics_settings(open_delta_table(location).metadata().configuration),
                        target_file_bytes=POLICIES[contract.table].target_file_bytes,
                        options=dict(options or {}))


def _staged_files(area: str, layout: StagedLayout, context: DecodeContext
                  ) -> Callable[[Iterator[list[Task]]], Iterator[list[dict]]]:
    """The function each Spark partition (a group of tasks) runs: decode its tasks and
    stage their rows as files; yields the files' add actions."""

    def run(groups: Iterator[list[Task]]) -> Iterator[list[dict]]:
        for tasks in groups:
            yield stage(_decoded(tasks, context), area, layout)

    return run


def _reports_only(context: DecodeContext) -> Callable[[list[Task]], None]:
    """Run a group of tasks for their reports only (rows are dropped on the executor)."""

    def run(tasks: list[Task]) -> None:
        for _ in _decoded(tasks, context):
            pass

    return run


__all__ = ["FactWriter", "InProcessFacts", "SparkFacts",
           "fact_writer", "pack_tasks"]
