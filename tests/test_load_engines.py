"""Where a load decodes (jobs/load/fact_writers.py): Spark's executors, or this process.

tests/test_load_golden.py and tests/test_load_incremental.py hold the in-process path to
the very rows Spark writes, on the four real-broker stores and on three successive
snapshots of a running broker. Here: the choice itself; a small broker's first and
nothing-new nights, which start no Spark at all; and an in-process load killed between
its appends and finished by a re-run, which must leave the tables as one clean load does.
"""

from __future__ import annotations

import shutil

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lakehouse import IN_PROCESS_OPTIONS, LOADED_TABLES, broker_rows, load

from jobs.lakehouse import tables as T
from jobs.lakehouse.engine_choice import AUTO, LOCAL, MIB, SPARK, runs_in_process
from jobs.lakehouse.spark_session import SparkOnDemand
from jobs.lakehouse.tables import Registry
from jobs.load import fact_writers
from jobs.load.decode_tasks import Task
from jobs.load.job import LoadOptions, load_snapshot

pytestmark = [pytest.mark.spark, pytest.mark.broker]
BROKER, VARIANT = "v5-clean", "v5-clean"


class Killed(Exception):
    """The load's process dies here."""


@given(size=st.integers(min_value=0, max_value=1 << 40),
       limit=st.integers(min_value=0, max_value=1 << 20))
def test_auto_runs_in_process_exactly_up_to_the_limit(size: int, limit: int) -> None:
    assert runs_in_process("load", AUTO, size, limit) == (size <= limit * MIB)
    assert runs_in_process("load", LOCAL, size, limit)
    assert not runs_in_process("load", SPARK, size, limit)


def test_an_unknown_engine_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="load engine 'duckdb': expected one of auto, local"):
        runs_in_process("load", "duckdb", 0, 1)


@given(weights=st.lists(st.integers(min_value=0, max_value=200), max_size=30),
       split=st.integers(min_value=1, max_value=300), threads=st.integers(1, 4))
def test_in_process_threads_take_consecutive_tasks_and_a_small_night_is_one_attempt(
        weights: list[int], split: int, threads: int) -> None:
    tasks = [Task(f"t{i}", "commitlog", "p", "p", 0, w) for i, w in enumerate(weights)]
    groups = fact_writers.InProcessFacts(split, threads).groups(tasks)
    # every task once, in plan order: each thread's files cover consecutive offsets
    assert [t for g in groups for t in g] == tasks
    if sum(weights) < split:
        assert len(groups) == 1  # one attempt: a file per partition, not one per thread
    else:
        assert 1 <= len(groups) <= threads


def _no_spark() -> object:
    raise AssertionError("this load must not start Spark")


def test_a_small_brokers_nights_start_no_spark(golden, broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    """A first night into a fresh warehouse (tables created with delta-rs, the store
    decoded in process) and a night with nothing new (the same store again: queue tails
    read, the night's state committed) run without a JVM: the on-demand session that would
    start Spark raises if called. The first night's rows equal the golden Spark load's."""
    store = broker_stores[VARIANT] / "store"
    registry = Registry(None, tmp_path)
    first = load_snapshot(SparkOnDemand(_no_spark), BROKER, "s1", store,  # type: ignore[arg-type]
                          LoadOptions(), registry=registry)
    golden_registry, golden_summaries = golden
    assert first.results[T.MESSAGES].rows == golden_summaries[VARIANT].results[T.MESSAGES].rows
    for name in LOADED_TABLES:
        assert broker_rows(registry, name, BROKER) == broker_rows(golden_registry, name,
                                                                  VARIANT), name

    summary = load_snapshot(SparkOnDemand(_no_spark), BROKER, "s2", store,  # type: ignore[arg-type]
                            LoadOptions(), registry=Registry(None, tmp_path))
    assert not summary.skipped
    assert summary.results[T.QUEUE_ENTRIES].tasks > 0  # the queue tails were read again
    assert summary.results[T.MESSAGES].rows == 0
    assert {row["status"] for row in registry.read_rows(T.SNAPSHOTS, broker=BROKER)} == \
        {"loaded"}
    topics = [registry.read_rows(T.TOPICS, broker=BROKER, snapshot_id=night)
              for night in ("s1", "s2")]
    assert len(topics[0]) == len(topics[1]) > 0  # the night's state was written all the same
    again = load_snapshot(SparkOnDemand(_no_spark), BROKER, "s2", store,  # type: ignore[arg-type]
                          LoadOptions(), registry=Registry(None, tmp_path))
    assert again.skipped


def test_an_in_process_load_killed_after_its_appends_is_finished_by_a_rerun(  # type: ignore[no-untyped-def]
        spark, golden, broker_stores, tmp_path, monkeypatch):
    """Killed after queue_entries were committed (messages too), before the marks and the
    snapshot's status, its task reports lost with it: the re-run skips both appends
    (Delta's txn), decodes again only to recompute their reports, and the tables equal the
    golden Spark load's, each row once."""
    store = broker_stores[VARIANT] / "store"
    real_append = fact_writers.InProcessFacts.append

    def append_then_die(self, location, contract, *args, **kwargs):  # type: ignore[no-untyped-def]
        real_append(self, location, contract, *args, **kwargs)
        if contract.table == T.QUEUE_ENTRIES:
            raise Killed(contract.table)

    monkeypatch.setattr(fact_writers.InProcessFacts, "append", append_then_die)
    with pytest.raises(Killed):
        load(spark, tmp_path, BROKER, "s1", store, IN_PROCESS_OPTIONS)
    monkeypatch.undo()
    registry = Registry(None, tmp_path)
    assert {row["status"] for row in registry.read_rows(T.SNAPSHOTS, broker=BROKER)} == \
        {"loading"}

    shutil.rmtree(tmp_path / "_rmq_task_reports")
    _, summary = load(spark, tmp_path, BROKER, "s1", store, IN_PROCESS_OPTIONS)
    assert summary.results[T.MESSAGES].outcome == "skipped"
    assert summary.results[T.QUEUE_ENTRIES].outcome == "skipped"
    assert summary.results[T.INDEX_ENTRIES].outcome == "loaded"

    golden_registry, golden_summaries = golden
    assert summary.results[T.MESSAGES].rows == golden_summaries[VARIANT].results[T.MESSAGES].rows
    for name in LOADED_TABLES:
        assert broker_rows(registry, name, BROKER) == broker_rows(golden_registry, name,
                                                                  VARIANT), name

