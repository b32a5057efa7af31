"""Smoke test of the stack: real Spark + real delta-spark, write, MERGE, time travel, SQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from delta.tables import DeltaTable

pytestmark = pytest.mark.spark


def test_delta_write_merge_time_travel_and_sql(spark, tmp_path: Path) -> None:
    table_path = str(tmp_path / "offsets")
    initial = spark.createDataFrame(
        [("orders@billing", 0, 10), ("orders@billing", 1, 20)],
        "topic_group string, queue_id int, offset long",
    )
    initial.write.format("delta").save(table_path)

    updates = spark.createDataFrame(
        [("orders@billing", 1, 25), ("orders@billing", 2, 5)],
        "topic_group string, queue_id int, offset long",
    )
    (
        DeltaTable.forPath(spark, table_path).alias("t")
        .merge(updates.alias("u"), "t.topic_group = u.topic_group AND t.queue_id = u.queue_id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )

    current = {r.queue_id: r.offset for r in spark.read.format("delta").load(table_path).collect()}
    assert current == {0: 10, 1: 25, 2: 5}

    version_zero = spark.read.format("delta").option("versionAsOf", 0).load(table_path)
    assert {r.queue_id: r.offset for r in version_zero.collect()} == {0: 10, 1: 20}

    history = DeltaTable.forPath(spark, table_path).history().select("version", "operation")
    assert [(r.version, r.operation) for r in history.orderBy("version").collect()] == [
        (0, "WRITE"), (1, "MERGE"),
    ]

    total = spark.sql(f"SELECT sum(offset) AS total FROM delta.`{table_path}` WHERE queue_id > 0")
    assert total.collect()[0].total == 30


def test_session_is_configured_for_delta_and_utc(spark) -> None:
    conf = spark.conf
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert conf.get("spark.sql.catalog.spark_catalog").endswith("DeltaCatalog")
    jars = spark.sparkContext.getConf().get("spark.jars")
    assert "delta-spark_4.1_2.13-4.4.0.jar" in jars


def test_the_driver_has_the_heap_it_was_given(spark) -> None:  # type: ignore[no-untyped-def]
    """RMQ_SPARK_DRIVER_MEMORY sizes the driver's JVM (the test lanes give 2g; a fleet's
    pool of N Spark slots needs N x it free: docs/fleet.md), else the default 4g."""
    import os

    from jobs.lakehouse.spark_session import BASE_CONF, DRIVER_MEMORY_ENV

    given = os.environ.get(DRIVER_MEMORY_ENV) or BASE_CONF["spark.driver.memory"]
    assert spark.sparkContext.getConf().get("spark.driver.memory") == given
    units = {"m": 1 << 20, "g": 1 << 30}
    heap = int(given[:-1]) * units[given[-1].lower()]
    # the JVM reports its -Xmx less one survivor space
    assert 0.8 * heap < spark._jvm.java.lang.Runtime.getRuntime().maxMemory() <= heap


def test_the_driver_jvm_runs_with_the_options_it_was_given(spark) -> None:  # type: ignore[no-untyped-def]
    """RMQ_SPARK_JAVA_OPTIONS reaches the driver's JVM command line (the test lanes give the
    JIT and GC settings of docs/configuration.md) beside the project's own options."""
    import os

    from jobs.lakehouse.spark_session import JAVA_OPTIONS_ENV

    arguments = list(spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                     .getInputArguments())
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in arguments)
    for option in os.environ.get(JAVA_OPTIONS_ENV, "").split():
        assert option in arguments


def test_python_tasks_start_without_spark_archives_to_re_read(spark) -> None:  # type: ignore[no-untyped-def]
    """Every Python task re-validates the import caches (pyspark's setup_spark_files);
    each zip importer then re-reads its whole archive, 0.13 CPU-s a task with those of
    pyspark.zip and the spark-core jar. The session's daemon drops them before each task:
    after a first round of tasks has imported pyspark's modules from the zip, the next
    tasks find none left."""
    def _archive_importers_at_task_start(_: object) -> list[int]:  # pickled by value
        import sys
        import zipimport

        return [sum(isinstance(finder, zipimport.zipimporter)
                    for finder in sys.path_importer_cache.values())]

    context = spark.sparkContext
    assert spark.conf.get("spark.python.daemon.module") == "jobs.lakehouse.spark_python_daemon"
    first = context.parallelize(range(8), 8).mapPartitions(_archive_importers_at_task_start)
    assert len(first.collect()) == 8
    again = context.parallelize(range(8), 8).mapPartitions(_archive_importers_at_task_start)
    assert again.collect() == [0] * 8


def test_python_workers_import_the_installed_pyspark(spark) -> None:  # type: ignore[no-untyped-def]
    """Not pyspark.zip's sources, compiled again by every application's workers: the
    environment's own pyspark (the same release), compiled once at install."""
    import pyspark

    def where_pyspark_is(_: object) -> list[str]:  # pickled by value
        import pyspark

        return [pyspark.__file__]

    files = spark.sparkContext.parallelize(range(2), 2).mapPartitions(where_pyspark_is).collect()
    assert files == [pyspark.__file__] * 2
    assert ".zip" not in pyspark.__file__
