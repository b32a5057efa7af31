"""The one place every job and test gets its SparkSession from.

Sets Delta's SQL extension and catalog, puts the Delta jars from Maven Central on the
classpath, sizes memory and parallelism for a 2-core / 24 GiB machine, and pins the
session time zone to UTC so timestamps from broker stores mean the same everywhere.
Override any setting with ``extra_conf`` or ``RMQ_SPARK_MASTER`` (e.g.
``spark://127.0.0.1:7077`` for a standalone cluster).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from jobs.jars import REPO_ROOT, check_python_agrees, ensure_delta_jars, pom_versions

DEFAULT_MASTER = "local[2]"
DEFAULT_WAREHOUSE = REPO_ROOT / ".cache" / "warehouse"

BASE_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    # Driver runs the executors in local mode: 4 GiB leaves most of 24 GiB to the OS,
    # Python workers and the page cache that decoding relies on.
    "spark.driver.memory": "4g",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    # Small data on 2 cores: a few partitions beat the default 200 by far.
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def build_spark_session(
    app_name: str = "rmq-lakehouse",
    *,
    master: str | None = None,
    warehouse: Path | None = None,
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Create (or return the running) SparkSession configured for Delta."""
    check_python_agrees(pom_versions())
    jars = ensure_delta_jars()
    # Keep the driver on loopback instead of the host's first interface address.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warehouse = warehouse or Path(os.environ.get("RMQ_WAREHOUSE", DEFAULT_WAREHOUSE))
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master or os.environ.get("RMQ_SPARK_MASTER", DEFAULT_MASTER))
        .config("spark.jars", ",".join(str(jar) for jar in jars))
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={warehouse}")
    )
    for key, value in {**BASE_CONF, **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("RMQ_SPARK_LOG_LEVEL", "WARN"))
    return session
