"""A night on Spark in a bucket of the local S3 server (tests/s3_server.py), throttled
(tests/s3_throttle.py): it equals the night in process on a local disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from lakehouse import warehouse_content
from s3_server import serving_bucket
from s3_throttle import faulty_proxy

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
from pathlib import Path
from jobs.check_job import check_snapshot
from jobs.lakehouse.spark_session import SparkOnDemand, build_spark_session
from jobs.lakehouse.tables import Registry
from jobs.load.job import LoadOptions, load_snapshot
from jobs.maintain.maintenance import maintain_tables

warehouse, oracle, broker, snapshot_id, store, checks = sys.argv[1:]

def no_spark():
    raise AssertionError("the check runs in process")

spark = build_spark_session("rmq-s3-test", warehouse=warehouse)
load_snapshot(SparkOnDemand(lambda: spark), broker, snapshot_id, store,
              LoadOptions(engine="spark"), registry=Registry(spark, warehouse))
check_snapshot(no_spark, warehouse, broker, snapshot_id, engine="local", output=Path(checks))
maintain_tables(warehouse, broker)
# Spark reads the bucket's tables over S3A, every column of every row: the same as the
# oracle's on disk (the tables the load wrote: the check's hold the time it ran)
def digest(root, table):
    return tuple(spark.sql(
        "SELECT count(*), bit_xor(xxhash64(to_json(struct(*)))) "
        f"FROM delta.`{root}/rmq.db/{table}`").first())

for table in ("messages", "queue_entries", "index_entries", "message_lookup"):
    on_s3, on_disk = digest(warehouse, table), digest(oracle, table)
    assert on_s3 == on_disk and on_s3[0] > 0, (table, on_s3, on_disk)
spark.stop()
"""


@pytest.mark.spark
def test_a_night_on_spark_in_a_bucket_equals_the_night_in_process_on_disk(
        s3, broker_stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Spark's executors write the night's files into the bucket, the driver commits them
    through delta-rs, maintenance compacts and vacuums there, and Spark reads every table
    back over S3A, while 3 requests in 100 are answered ``503 SlowDown``
    (tests/s3_throttle.py). The tables equal the in-process engines' on a local disk, and
    nothing but the tables is left in the bucket."""
    local, store = tmp_path / "local", broker_stores["v5-clean"] / "store"
    load_snapshot(SparkOnDemand(_no_spark), "b1", "n1", store,  # type: ignore[arg-type]
                  LoadOptions(engine="local"), registry=Registry(None, local))
    check_snapshot(_no_spark, local, "b1", "n1", engine="local")  # type: ignore[arg-type]
    maintain_tables(local, "b1")
    script = tmp_path / "spark_night.py"
    script.write_text(SPARK_NIGHT)
    with faulty_proxy(s3.port, tmp_path, rate=0.03, seed=7) as proxy:
        night = subprocess.run(
            [sys.executable, str(script), "s3://lake/spark", str(local), "b1", "n1",
             str(store), str(tmp_path / "checks")], capture_output=True, text=True,
            timeout=900, env={**os.environ, "PYTHONPATH": str(REPO),
                              "AWS_ENDPOINT_URL": proxy.endpoint})
    assert night.returncode == 0, night.stdout[-2000:] + night.stderr[-4000:]
    assert proxy.counts.throttled > 10, proxy.counts
    on_s3, on_disk = warehouse_content("s3://lake/spark"), warehouse_content(local)
    assert on_disk[T.MESSAGES] and on_disk[T.CONSUMER_LAG]
    for name, rows in on_disk.items():
        assert on_s3[name] == rows, name
    assert {f.relative.split("/")[0] for f in Location("s3://lake/spark").files()} == {"rmq.db"}
