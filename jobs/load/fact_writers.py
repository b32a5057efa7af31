"""Where a load's decode tasks run, and how their rows reach the fact tables.

* :class:`SparkFacts`: the tasks become a DataFrame of task rows, ``mapInArrow`` decodes
  them on the executors and Spark's Delta writer appends the rows. For nights with much
  to read: the cores of a cluster, rows never pass through the driver.
* :class:`InProcessFacts`: the same task code runs in this process, and delta-rs streams
  its RecordBatches into the table. For nights with little to read (a nothing-new night
  reads a few KiB of queue tails): no JVM to start, no job to plan, no Python workers.

Both append once per ``(app_id, snapshot sequence)``: the commit carries Delta's
transaction action (``txn``), and an append whose version the table has already seen is
skipped, whichever of the two wrote it. The rows are the same (tests/test_load_engines.py
loads every real-broker store both ways and compares the tables). Which one a load uses
is :func:`fact_writer`'s choice, from ``load_engine`` and ``local_load_up_to_mib``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa
from deltalake.writer import WriterProperties

from jobs.lakehouse.delta_io import append_once
from jobs.lakehouse.driver_rows import append_rows_once
from jobs.lakehouse.engine_choice import LOCAL, SPARK, runs_in_process
from jobs.load.decode_tasks import TASK_DDL, DecodeContext, Task, decode_function, run_task

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.lakehouse.contracts import Contract

DEFAULT_LOCAL_LOAD_MIB = 256  # config/pipeline.yaml's local_load_up_to_mib


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
        return InProcessFacts()
    return SparkFacts(spark(), split_bytes)


class InProcessFacts:
    """Decode in this process; delta-rs writes the stream of batches."""

    name = LOCAL

    def append(self, location: str, contract: Contract, tasks: list[Task],
               context: DecodeContext, app_id: str, version: int) -> None:
        # Skipped when an earlier attempt committed it (its reports are recomputed if gone);
        # the stream is only decoded when it is written. zstd, as Spark writes the facts.
        rows = pa.RecordBatchReader.from_batches(contract.arrow_schema(),
                                                 _decoded(tasks, context))
        append_rows_once(location, contract, rows, app_id, version,
                         writer_properties=WriterProperties(compression="ZSTD"))

    def run_for_reports(self, tasks: list[Task], context: DecodeContext) -> None:
        for _ in _decoded(tasks, context):
            pass

    def describe(self, tasks: list[Task]) -> str:
        return "in this process"


def _decoded(tasks: list[Task], context: DecodeContext) -> Iterator[pa.RecordBatch]:
    for task in tasks:
        yield from run_task(task, context)


class SparkFacts:
    """Decode on Spark's executors; Spark's Delta writer appends."""

    name = SPARK

    def __init__(self, spark: SparkSession, split_bytes: int) -> None:
        self.spark, self.split_bytes = spark, split_bytes

    def append(self, location: str, contract: Contract, tasks: list[Task],
               context: DecodeContext, app_id: str, version: int) -> None:
        decoded = self.task_frame(tasks).mapInArrow(decode_function(context),
                                                    contract.spark_schema())
        append_once(decoded, location, app_id, version)

    def run_for_reports(self, tasks: list[Task], context: DecodeContext) -> None:
        self.task_frame(tasks).mapInArrow(_reports_only(context), "task_id STRING").collect()

    def describe(self, tasks: list[Task]) -> str:
        return f"{len(self.groups(tasks))} Spark task(s), on the executors"

    def groups(self, tasks: list[Task]) -> list[list[Task]]:
        return pack_tasks(tasks, self.split_bytes, self.spark.sparkContext.defaultParallelism)

    def task_frame(self, tasks: list[Task]) -> DataFrame:
        """A DataFrame of tasks, one Spark partition per group of :func:`pack_tasks`."""
        groups = self.groups(tasks)
        rdd = self.spark.sparkContext.parallelize(
            [[t.as_row() for t in group] for group in groups], len(groups))
        return self.spark.createDataFrame(rdd.flatMap(lambda group: group), TASK_DDL)


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


def _reports_only(context: DecodeContext) -> Callable[[Iterator[pa.RecordBatch]],
                                                      Iterator[pa.RecordBatch]]:
    """Run tasks for their reports only (rows are dropped on the executor)."""

    def run(task_batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in task_batches:
            for row in batch.to_pylist():
                task = Task(**row)
                for _ in run_task(task, context):
                    pass
                yield pa.RecordBatch.from_pydict({"task_id": [task.task_id]})

    return run


__all__ = ["DEFAULT_LOCAL_LOAD_MIB", "FactWriter", "InProcessFacts", "SparkFacts",
           "fact_writer", "pack_tasks"]
