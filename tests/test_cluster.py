"""The load on a real Spark standalone cluster, not in local mode.

A master and one worker (1 core, 1 GiB) run on 127.0.0.1 from the installed pyspark. The load
is submitted as its own process, ``python -m jobs --master spark://...``, and then once more
with ``spark-submit jobs/cli.py``, that time from a snapshot and into a warehouse in an S3
bucket (the local S3 server), whose keys only the driver is given: the worker started
without them, in a mount namespace where the driver's mirror of the snapshot is an empty
directory (another host, sharing nothing but the bucket), and its executor reads the
snapshot's objects and writes the night's files with what the driver hands it. Both must
register an
application with the master whose executor the worker launched, and every Spark task must
have run on that executor (the event log says where each task ran), not in the driver. The
bucket's tables equal the local ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable
from lakehouse import warehouse_content
from s3_server import serving_bucket
from spark_standalone import (
    PYTHON,
    SPARK_HOME,
    Cluster,
    ClusterStartError,
    standalone_cluster,
    tail,
)

from jobs.lakehouse import tables as T
from jobs.lakehouse.jars import ensure_delta_jars
from jobs.lakehouse.locations import Location
from jobs.snapshot.bucket import MIRROR_ENV, BucketSnapshots
from jobs.snapshot.sources import LocalSource
from rmqlib.commitlog.records import scan_store

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.cluster]

REPO = Path(__file__).resolve().parent.parent
LOG4J_CONFIG = REPO / "jvm" / "log4j2.properties"
RUN_TIMEOUT = 600  # seconds per load (a shared 2-core machine can be slow)


@pytest.fixture(scope="module")
def driver_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver's mirror of the bucket's snapshots: a directory the worker cannot see."""
    return tmp_path_factory.mktemp("driver-host")


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory, driver_host: Path
                  ) -> Iterator[Cluster]:
    """A standalone master and one worker (1 core, 1 GiB) on 127.0.0.1
    (tests/spark_standalone.py); both are stopped at the end. The worker runs as on
    another host: the driver's mirror is hidden from it, and it has a mirror of its own."""
    try:
        with standalone_cluster(tmp_path_factory.mktemp("cluster"), worker_hides=[driver_host],
                                worker_env={MIRROR_ENV: str(tmp_path_factory.mktemp(
                                    "worker-host"))}) as cluster:
            yield cluster
    except ClusterStartError as error:
        pytest.fail(str(error), pytrace=False)


def run_driver(cluster: Cluster, args: list[str], name: str, tmp_path: Path,
               extra_env: dict[str, str] | None = None) -> tuple[str, dict]:
    """Run one driver process to the end; return its application id and the master's record
    of it. Fails with the driver's, Spark's and the daemons' log tails."""
    before = set(cluster.apps())
    out, err = tmp_path / f"{name}.stdout", tmp_path / f"{name}.stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        result = subprocess.run(args, cwd=REPO, env={**cluster.env, **(extra_env or {})},
                                stdout=stdout, stderr=stderr, timeout=RUN_TIMEOUT, check=False)
    logs = "\n".join([tail(out), tail(err), tail(Path(cluster.env["RMQ_SPARK_LOG_FILE"])),
                      cluster.log_tails()])
    assert result.returncode == 0, f"{name} exited with {result.returncode}\n{logs}"
    deadline = time.monotonic() + 30
    while True:  # the master files an application as completed once its driver is gone
        new = {i: app for i, app in cluster.apps().items() if i not in before}
        if len(new) == 1 and next(iter(new.values()))["state"] == "FINISHED":
            return next(iter(new.items()))
        assert time.monotonic() < deadline, (
            f"{name}: expected one new finished application on {cluster.url}, master has "
            f"{new}\n{logs}")
        time.sleep(1)


def assert_ran_on_the_worker(cluster: Cluster, app_id: str, app: dict) -> None:
    """The worker launched an executor for the application and every task ran there."""
    assert app["name"] == "rmq-load" and app["cores"] == 1, app
    executor_logs = sorted(cluster.work_dir.glob(f"{app_id}/*/stderr"))
    assert executor_logs, f"the worker launched no executor for {app_id}"
    command = executor_logs[0].read_text(errors="replace")
    assert "CoarseGrainedExecutorBackend" in command and app_id in command
    tasks = [json.loads(line)["Task Info"]
             for line in (cluster.event_dir / app_id).read_text().splitlines()
             if line.startswith('{"Event":"SparkListenerTaskEnd"')]
    assert tasks, f"no task ended in {app_id}"
    assert {(t["Executor ID"], t["Host"]) for t in tasks} == {("0", "127.0.0.1")}


def rows(warehouse: Path, table: str, columns: list[str]) -> list[dict]:
    """Read a table with delta-rs: no JVM, and a second reader of what the cluster wrote."""
    return DeltaTable(str(warehouse / "rmq.db" / table)).to_pyarrow_table(
        columns=columns).to_pylist()


def test_a_load_runs_on_the_executors_of_a_standalone_cluster(  # type: ignore[no-untyped-def]
        spark_cluster: Cluster, driver_host: Path, broker_stores, tmp_path: Path) -> None:
    store = broker_stores["v5-clean"] / "store"
    warehouse = tmp_path / "warehouse"
    records = sum(1 for _ in scan_store(store / "commitlog"))
    # --engine spark: a store this small is otherwise decoded in process, not on the cluster
    load = ["load", "--broker", "b", "--quiet", "--engine", "spark"]

    app_id, app = run_driver(
        spark_cluster, [PYTHON, "-m", "jobs", "--master", spark_cluster.url,
                        "--warehouse", str(warehouse), *load,
                        "--snapshot-id", "s1", str(store)], "python-m-jobs", tmp_path)
    assert_ran_on_the_worker(spark_cluster, app_id, app)
    assert len(rows(warehouse, "messages", ["physical_offset"])) == records
    assert rows(warehouse, "queue_entries", ["queue_offset"])
    assert rows(warehouse, "snapshots", ["snapshot_id", "status"]) == [
        {"snapshot_id": "s1", "status": "loaded"}]

    # spark-submit decides the master here (no --master after the script) and must bring
    # the jars (Delta's, S3A's): the driver JVM is running before jobs/cli.py starts.
    jars = ",".join(str(jar) for jar in ensure_delta_jars())
    driver_logging = (f"-Dlog4j2.configurationFile={LOG4J_CONFIG} "
                      f"-Drmq.log.file={spark_cluster.env['RMQ_SPARK_LOG_FILE']}")
    # This time the snapshot is in the bucket too, taken by the driver's host; the worker
    # sees neither the driver's mirror of it nor any directory but its own: its executor
    # reads the snapshot's objects and writes the night's files to the bucket.
    with serving_bucket(tmp_path / "s3", "lake") as server:
        bucket, snapshots = "s3://lake/cluster", "s3://lake/snapshots"
        os.environ[MIRROR_ENV] = str(driver_host)
        try:
            BucketSnapshots(Location(snapshots)).take(LocalSource(store), "b", "s1")
        finally:
            del os.environ[MIRROR_ENV]
        on_bucket = ["--warehouse", bucket, *load]
        app_id, app = run_driver(
            spark_cluster, [str(SPARK_HOME / "bin" / "spark-submit"), "--master",
                            spark_cluster.url, "--jars", jars, "--driver-java-options",
                            driver_logging, "jobs/cli.py", *on_bucket, "--snapshot-id", "s1",
                            snapshots],
            "spark-submit", tmp_path, {"PYTHONPATH": str(REPO), MIRROR_ENV: str(driver_host),
                                       **server.environment()})
        assert_ran_on_the_worker(spark_cluster, app_id, app)
        on_s3, on_disk = warehouse_content(bucket), warehouse_content(warehouse)
        loaded = [json.loads(row) for row in on_s3.pop(T.SNAPSHOTS)]
        assert [row["store_path"] for row in loaded] == [f"{snapshots}/b/s1"]
        assert _without_place(loaded) == _without_place(
            [json.loads(row) for row in on_disk.pop(T.SNAPSHOTS)])
        assert on_s3 == on_disk


def _without_place(rows: list[dict]) -> list[dict]:
    """Snapshot rows without where the store was and when it was taken (a directory and
    its files' time here; the bucket's URI and the manifest's time there)."""
    return [{k: v for k, v in row.items() if k not in ("store_path", "taken_at")}
            for row in rows]
