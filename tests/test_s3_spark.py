"""A night on Spark, and a night throttled, in a bucket of the local S3 server
(tests/s3_server.py, tests/s3_throttle.py): both equal the night on a local disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from lakehouse import warehouse_content
from s3_server import serving_bucket
from s3_throttle import throttling_proxy

from jobs.check_job import check_snapshot
from jobs.lakehouse import tables as T
from jobs.lakehouse.locations import Location
from jobs.lakehouse.spark_session import SparkOnDemand
from jobs.lakehouse.tables import Registry
from jobs.load.job import LoadOptions, load_snapshot
from jobs.maintain.maintenance import maintain_tables

pytestmark = [pytest.mark.broker]

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def s3(tmp_path_factory):  # type: ignore[no-untyped-def]
    with serving_bucket(tmp_path_factory.mktemp("s3") / "root", "lake") as server:
        yield server


def _no_spark() -> object:
    raise AssertionError("the in-process night starts no Spark")


SPARK_NIGHT = """
import sys
from jobs.check_job import check_snapshot
from jobs.lakehouse.spark_session import SparkOnDemand, build_spark_session
from jobs.lakehouse.tables import Registry
from jobs.load.job import LoadOptions, load_snapshot
from jobs.maintain.maintenance import maintain_tables

warehouse, broker, snapshot_id, store, checks = sys.argv[1:]
spark = build_spark_session("rmq-s3-test", warehouse=warehouse)
registry = Registry(spark, warehouse)
load_snapshot(SparkOnDemand(lambda: spark), broker, snapshot_id, store,
              LoadOptions(engine="spark"), registry=registry)
check_snapshot(lambda: registry.ensure(), warehouse, broker, snapshot_id, engine="spark",
               output=__import__("pathlib").Path(checks))
spark.stop()
maintain_tables(warehouse, broker)
"""


@pytest.mark.spark
def test_a_night_on_spark_and_one_throttled_in_process_equal_the_night_on_disk(
        s3, broker_stores, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """One broker's night three ways, each compared with the in-process engines on a
    local disk:

    - on Spark into a bucket: the executors write the night's files there, the driver
      commits through delta-rs, the check reads over S3A; 3 requests in 100 answered
      ``503 SlowDown`` (tests/s3_throttle.py);
    - in process into a bucket, 1 request in 10 answered ``503 SlowDown``: Arrow's own S3
      reads gave up on throttled small reads, so tables in a bucket are read through
      object_store (jobs.lakehouse.driver_rows.arrow_dataset);
    - both maintained there (compaction, VACUUM), and nothing but the tables left behind.
    """
    local, store = tmp_path / "local", broker_stores["v5-clean"] / "store"
    load_snapshot(SparkOnDemand(_no_spark), "b1", "n1", store,  # type: ignore[arg-type]
                  LoadOptions(engine="local"), registry=Registry(None, local))
    check_snapshot(_no_spark, local, "b1", "n1", engine="local")  # type: ignore[arg-type]
    maintain_tables(local, "b1")
    on_disk = warehouse_content(local)
    assert on_disk[T.MESSAGES] and on_disk[T.CONSUMER_LAG]

    script = tmp_path / "spark_night.py"
    script.write_text(SPARK_NIGHT)
    with throttling_proxy(s3.port, 0.03, tmp_path, seed=7) as (endpoint, spark):
        night = subprocess.run(
            [sys.executable, str(script), "s3://lake/spark", "b1", "n1", str(store),
             str(tmp_path / "checks")], capture_output=True, text=True, timeout=900,
            env={**os.environ, "PYTHONPATH": str(REPO), "AWS_ENDPOINT_URL": endpoint})
    assert night.returncode == 0, night.stdout[-2000:] + night.stderr[-4000:]
    with (throttling_proxy(s3.port, 0.1, tmp_path, seed=2) as (endpoint, local_),
          monkeypatch.context() as patched):
        patched.setenv("AWS_ENDPOINT_URL", endpoint)
        load_snapshot(SparkOnDemand(_no_spark), "b1", "n1", store,  # type: ignore[arg-type]
                      LoadOptions(engine="local"), registry=Registry(None, "s3://lake/t"))
        check_snapshot(_no_spark, "s3://lake/t", "b1", "n1",  # type: ignore[arg-type]
                       engine="local", output=tmp_path / "checks-t")
        maintain_tables("s3://lake/t", "b1")
    for throttled in (spark, local_):
        assert throttled.throttled > 10, throttled
    for bucket in ("s3://lake/spark", "s3://lake/t"):
        on_s3 = warehouse_content(bucket)
        for name, rows in on_disk.items():
            assert on_s3[name] == rows, (bucket, name)
        assert {f.relative.split("/")[0] for f in Location(bucket).files()} == {"rmq.db"}
