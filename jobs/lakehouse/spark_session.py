"""The one place every job and test gets its SparkSession from.

Sets Delta's SQL extension and catalog, puts the Delta jars from Maven Central on the
classpath, sizes memory and parallelism for a 2-core / 24 GiB machine, and pins the
session time zone to UTC so timestamps from broker stores mean the same everywhere.
Override any setting with ``extra_conf`` or ``RMQ_SPARK_MASTER`` (e.g.
``spark://127.0.0.1:7077`` for a standalone cluster).

A warehouse in an S3 bucket is read through S3A (``s3://`` included), configured from the
same ``AWS_*`` variables delta-rs and pyarrow read; the executors get them too, since
their tasks write the tables' files there (jobs.lakehouse.staged_append). Spark's catalog
(Derby) stays on the local disk. Spark never commits to such a table: delta-rs does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from jobs.lakehouse.jars import REPO_ROOT, check_python_agrees, ensure_delta_jars, pom_versions
from jobs.lakehouse.locations import AWS_VARIABLES, Location, local_companion, warehouse_location
from jobs.lakehouse.tables import WAREHOUSE_CONF, default_warehouse

DEFAULT_MASTER = "local[2]"
#: The driver's heap (``spark.driver.memory``) when set; a fleet's pool of N Spark slots
#: needs N x this (plus ~0.6 GiB per JVM off-heap) free: docs/fleet.md.
DRIVER_MEMORY_ENV = "RMQ_SPARK_DRIVER_MEMORY"
#: More options for the driver's (and executors') JVM, e.g. JIT settings.
JAVA_OPTIONS_ENV = "RMQ_SPARK_JAVA_OPTIONS"
DEFAULT_LOG_FILE = REPO_ROOT / ".cache" / "logs" / "spark.log"
LOG4J_CONFIG = REPO_ROOT / "jvm" / "log4j2.properties"

BASE_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.session.timeZone": "UTC",
    # Driver runs the executors in local mode: 4 GiB leaves most of 24 GiB to the OS,
    # Python workers and the page cache that decoding relies on. RMQ_SPARK_DRIVER_MEMORY
    # overrides it (DRIVER_MEMORY_ENV): JVMs alive at once x this must fit the machine.
    "spark.driver.memory": "4g",
    # Small data on 2 cores: a few partitions beat the default 200 by far.
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # Spark 4.1 substitutes named parameters (spark.sql(..., args=...)) in the parser, and
    # a session extension's parser (Delta's here, Iceberg's alike: apache/iceberg#16625,
    # apache/spark#55392) drops them: UNBOUND_SQL_PARAMETER. The legacy substitution binds
    # them after parsing and works with Delta; the saved queries rely on it.
    "spark.sql.legacy.parameterSubstitution.constantsOnly": "true",
    # pyspark's daemon without its per-task re-read of Spark's own archives (0.13 CPU-s a
    # Python task) and with the installed pyspark (jobs/lakehouse/spark_python_daemon.py)
    "spark.python.daemon.module": "jobs.lakehouse.spark_python_daemon",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


def s3a_conf(environment: Mapping[str, str], master: str | None) -> dict[str, str]:
    """Spark's settings for tables in an S3 bucket, from the ``AWS_*`` variables: S3A for
    ``s3://`` and ``s3a://``, the endpoint (path-style, as S3-compatible servers need) and
    the region; S3A's default credential chain reads the keys from the environment.

    Executors of a cluster (``master`` not ``local``) run in the workers' environment, yet
    their tasks write the night's files: they get the variables as ``spark.executorEnv.*``.
    Spark redacts the secret and the token in its UI and event log, but pyspark starts
    its driver JVM with every setting on the command line, where other users of the host
    can read them (docs/object-storage.md: give workers an instance role instead). Local
    executors inherit the environment and get nothing."""
    endpoint = environment.get("AWS_ENDPOINT_URL", "")
    conf = {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint.region":
            environment.get("AWS_REGION") or environment.get("AWS_DEFAULT_REGION") or "us-east-1",
        # Third-party stores answer with their own ETags and checksums: S3A's defaults.
        "spark.hadoop.fs.s3a.change.detection.mode": "warn",
    }
    if endpoint:
        conf.update({"spark.hadoop.fs.s3a.endpoint": endpoint,
                     "spark.hadoop.fs.s3a.path.style.access": "true",
                     "spark.hadoop.fs.s3a.connection.ssl.enabled":
                         str(endpoint.startswith("https://")).lower()})
    if master is None or not master.startswith("local"):
        for name in AWS_VARIABLES:
            if environment.get(name):
                conf[f"spark.executorEnv.{name}"] = environment[name]
    return conf


def build_spark_session(
    app_name: str = "rmq-lakehouse",
    *,
    master: str | None = None,
    warehouse: Path | Location | str | None = None,
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Create (or return the running) SparkSession configured for Delta."""
    check_python_agrees(pom_versions())
    jars = ensure_delta_jars()
    # Python workers must run this interpreter (the project venv, which has rmqlib and
    # numpy), not whatever "python3" is first on PATH; pyspark reads the variable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Keep the driver on loopback instead of the host's first interface address.
    os.environ.setdefault("SPARK_LOCAL_IP", os.environ.get("RMQ_SPARK_DRIVER_BIND", "127.0.0.1"))
    location = warehouse_location(warehouse or default_warehouse(), "warehouse")
    catalog = location.path if location.is_local else local_companion(location, "spark-catalog")
    log_file = Path(os.environ.get("RMQ_SPARK_LOG_FILE", DEFAULT_LOG_FILE))
    log_file.parent.mkdir(parents=True, exist_ok=True)
    java_options = (f"-Dderby.system.home={catalog} -Drmq.log.file={log_file} "
                    f"-Dlog4j2.configurationFile={LOG4J_CONFIG} "
                    f"{os.environ.get(JAVA_OPTIONS_ENV, '')}").strip()
    # Under spark-submit the driver JVM is already running (pyspark then finds its gateway
    # in the environment): spark-submit's --master applies unless one is given here, and
    # the Delta jars must come from its --jars, since the driver classpath is fixed by now.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    master = master or os.environ.get("RMQ_SPARK_MASTER") or (
        None if submitted else DEFAULT_MASTER)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    if not submitted:
        builder = builder.config("spark.jars", ",".join(str(jar) for jar in jars))
    builder = (
        builder
        .config("spark.sql.warehouse.dir", str(catalog))
        .config(WAREHOUSE_CONF, location.uri)
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", java_options)
        .config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    )
    # The driver listens on loopback unless executors on other hosts must reach it
    # (docker-compose: RMQ_SPARK_DRIVER_HOST=<the Airflow container's name>, bind 0.0.0.0).
    driver = {"spark.driver.host": os.environ.get("RMQ_SPARK_DRIVER_HOST", "127.0.0.1"),
              "spark.driver.bindAddress": os.environ.get("RMQ_SPARK_DRIVER_BIND", "127.0.0.1")}
    if os.environ.get(DRIVER_MEMORY_ENV):
        driver["spark.driver.memory"] = os.environ[DRIVER_MEMORY_ENV]
    objects = {} if location.is_local else s3a_conf(os.environ, master)
    for key, value in {**BASE_CONF, **objects, **driver, **(extra_conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("RMQ_SPARK_LOG_LEVEL", "WARN"))
    if submitted:
        _require_delta_on_driver(session, jars[0].parent)
    return session


def _require_delta_on_driver(session: SparkSession, jar_dir: Path) -> None:
    """Fail in one line when spark-submit was run without the Delta jars."""
    from py4j.protocol import Py4JJavaError

    try:
        session._jvm.org.apache.spark.util.Utils.classForName(  # type: ignore[union-attr]
            BASE_CONF["spark.sql.extensions"], False, False)
    except Py4JJavaError:
        session.stop()
        raise RuntimeError(
            f"the Delta jars are not on the driver's classpath: run spark-submit with "
            f"--jars \"$(python -m jobs.lakehouse.jars | paste -sd, -)\" (they are in {jar_dir})"
        ) from None


def end_spark_application(session: SparkSession, *, timeout_s: float = 120.0) -> None:
    """Stop ``session`` and wait until the driver JVM this process launched has exited.

    Left alone, the JVM exits only after the Python process has (it watches its stdin)
    and then runs its shutdown hooks: 1.6 s on an idle machine, longer on a busy one,
    holding its heap after the Airflow task that started it has given back its pool slot,
    while the next task's JVM starts. Ended here, inside the task (0.6 s), the pool bounds
    the JVMs alive, not only the tasks.
    """
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)  # None under spark-submit: not ours to end
    session.stop()
    if gateway is None or process is None:
        return
    gateway.close()
    if process.stdin is not None:
        process.stdin.close()  # the gateway server exits on end of input
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    SparkContext._gateway = None
    SparkContext._jvm = None


class SparkOnDemand:
    """A SparkSession started on first call, for steps that may not need one: a check of a
    small snapshot runs in process (jobs.check.engines) and never pays for a JVM."""

    def __init__(self, start: Callable[[], SparkSession]) -> None:
        self._start = start
        self._session: SparkSession | None = None

    def __call__(self) -> SparkSession:
        if self._session is None:
            self._session = self._start()
        return self._session

    @property
    def session(self) -> SparkSession | None:
        """The session if one was started, else None."""
        return self._session
