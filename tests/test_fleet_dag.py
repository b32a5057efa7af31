"""The nightly DAG over a fleet of five brokers under a real scheduler: the Spark pool holds.

``airflow dags test`` runs every ready task at once and ignores pools, so this runs
``rmq_nightly`` the way production does (tests/airflow_scheduler.py: API server, DAG
processor and scheduler with the LocalExecutor, each task a process of its own).

One scheduled run covers what two did (a run costs minutes of task start-ups on two
cores): the fleet mixes the store kinds (a cluster with a slave, DLedger, RocksDB), keeps
its snapshots and tables in a bucket, and decodes on Spark, so that the pool has five
brokers' Spark applications to bound.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow_scheduler import deployment
from s3_server import serving_bucket

from jobs.lakehouse import tables as T
from jobs.lakehouse.locations import AWS_VARIABLES, Location, open_delta_table
from jobs.lakehouse.spark_session import DRIVER_MEMORY_ENV
from jobs.lakehouse.tables import table_location
from jobs.snapshot.bucket import MIRROR_ENV

pytestmark = [pytest.mark.spark, pytest.mark.broker]


POOL, SLOTS = "rmq_spark", 2
WAREHOUSE = "s3://lake/warehouse"
#: Each task's driver heap: two task JVMs of the default 4g beside the test lanes' own
#: sessions once got one OOM-killed on 24 GiB (docs/fleet.md); a load of these stores peaks
#: at 1.9 GiB resident with 1.5 GiB of heap.
DRIVER_MEMORY = "1536m"


def test_a_scheduled_dag_run_of_a_mixed_fleet_keeps_to_the_spark_pool(  # type: ignore[no-untyped-def]
        cluster_store, dledger5_store, rocksdb_store, tmp_path: Path):
    """``rmq_nightly`` over the real 5.5.0 cluster (two masters and a slave, their stores as
    the brokers left them at s2), a DLedger broker and a RocksDB broker beside it, under the
    scheduler, with the snapshots and the warehouse in a bucket of the local S3 server (the
    reports in ``checks_output`` beside it), its keys and endpoint given only as the Airflow
    ``aws`` connection of ``aws_conn_id`` (no ``AWS_*`` variable in any Airflow process),
    and every load on Spark:
    - every task group succeeds, side by side (LocalExecutor), then the cluster's stage;
    - never more load and check tasks (each a Spark application) ran at once than the pool
      has slots, by the scheduler's own record of when each task instance began and ended;
      nor were more driver JVMs alive at any sample (every half second) than it has slots,
      since a task ends its JVM before it gives back its slot;
    - Diff Total per group equals what ``consumerProgress`` printed, the slave is a copy of
      its master (compared from the snapshots read back from the bucket), the DLedger
      broker's night loads every entry's record and the RocksDB broker's
      (storeType=defaultRocksDB) every unit of its RocksDB queue, and both check clean;
    - the secret key is in no file of the Airflow home but its metadata database."""
    import json

    from rmqlib.dledger.records import scan_dledger
    from rmqlib.rocksdb.consume_queue import read_queues

    truth = cluster_store / "truth"
    brokers = [{"name": b["name"], "store": str(cluster_store / "s2" / b["name"] / "store"),
                "cluster": b["cluster"], "role": b["role"], "master": b["master"]}
               for b in json.loads((truth / "brokers.json").read_text())]
    brokers.append({"name": "broker-dledger", "store": str(dledger5_store / "store")})
    brokers.append({"name": "broker-rocksdb", "store": str(rocksdb_store / "store")})
    reports = tmp_path / "checks"
    with serving_bucket(tmp_path / "s3", "lake") as s3:
        keys = s3.environment()
        connection = {"conn_type": "aws", "login": keys["AWS_ACCESS_KEY_ID"],
                      "password": keys["AWS_SECRET_ACCESS_KEY"],
                      "extra": {"endpoint_url": keys["AWS_ENDPOINT_URL"],
                                "region_name": keys["AWS_REGION"]}}
        env = {MIRROR_ENV: str(tmp_path / "mirror"), DRIVER_MEMORY_ENV: DRIVER_MEMORY,
               "AIRFLOW_CONN_RMQ_S3": json.dumps(connection)}
        # these small stores would otherwise load in process, and no task would start a
        # JVM for the pool to bound
        settings = {"snapshot_root": "s3://lake/snapshots", "warehouse": WAREHOUSE,
                    "checks_output": str(reports), "load_engine": "spark",
                    "aws_conn_id": "rmq_s3"}
        with deployment(tmp_path, brokers, POOL, SLOTS, env, settings,
                        without=AWS_VARIABLES) as airflow:
            run = airflow.run("rmq_nightly", datetime(2026, 11, 24, 2, tzinfo=UTC), 1800)
            logs = airflow.log_tail("scheduler")
        published = {b["name"]: (Location("s3://lake/snapshots") / b["name"]).directories()
                     for b in brokers}
        tables = {name: open_delta_table(table_location(WAREHOUSE, name)).to_pyarrow_table()
                  for name in (T.CLUSTER_LAG, T.REPLICA_STATUS, T.MESSAGES, T.QUEUE_ENTRIES,
                               T.CHECK_RESULTS, T.SNAPSHOTS)}
    states = {(t.task_id, t.map_index): t.state for t in run.tasks}
    # the tasks that did not succeed first: a long message is cut at its end
    assert run.state == "success", ({k: v for k, v in states.items() if v != "success"},
                                    run.failed_task_logs(), logs)
    for step in ("snapshot", "load", "lookup", "check", "alert", "maintain", "clean_up"):
        assert {states[(f"broker.{step}", i)] for i in range(len(brokers))} == {"success"}
    assert states[("cluster.check_cluster", 0)] == states[("cluster.alert_cluster", 0)] \
        == "success"
    assert {t.task_id for t in run.tasks if t.pool == POOL} == {"broker.load", "broker.check"}
    assert 1 <= run.most_at_once(POOL) <= SLOTS
    assert 1 <= run.peak_spark_jvms <= SLOTS
    # the keys reached every task from the connection alone, and no log holds the secret
    written = [p for p in (tmp_path / "airflow").rglob("*") if p.is_file()
               and keys["AWS_SECRET_ACCESS_KEY"].encode() in p.read_bytes()
               and p.suffix != ".db"]
    assert written == []
    assert published == {b["name"]: ["2026-11-24T0200Z", "objects"] for b in brokers}
    assert not (tmp_path / "snapshots").exists() and not (tmp_path / "warehouse").exists()
    assert sorted(tables[T.SNAPSHOTS].column("broker").to_pylist()) == \
        sorted(b["name"] for b in brokers)
    lag = tables[T.CLUSTER_LAG]
    totals = {r["group_name"]: r["diff_total"] for r in lag.to_pylist() if r["level"] == "group"}
    progress = [json.loads(line) for line in (truth / "consumer_progress_s2.jsonl").open()]
    assert {p["group"]: totals[p["group"]] for p in progress} == \
        {p["group"]: p["diffTotal"] for p in progress}
    replica = tables[T.REPLICA_STATUS]
    assert [(r["broker"], r["state"], r["lag_bytes"]) for r in replica.to_pylist()] == \
        [("broker-a-s1", "in_sync", 0)]
    pages = list((reports / "reports").glob("cluster:RmqCluster/*.html"))
    assert len(pages) == 1
    messages = tables[T.MESSAGES]
    loaded = sorted(r["physical_offset"] for r in messages.to_pylist()
                    if r["broker"] == "broker-dledger")
    entries = scan_dledger(dledger5_store / "store" / "dledger-n0" / "data")
    assert loaded == [record.physical_offset for _, record in entries]
    units = tables[T.QUEUE_ENTRIES]
    loaded_units = sum(1 for r in units.to_pylist() if r["broker"] == "broker-rocksdb")
    assert loaded_units == read_queues(rocksdb_store / "store" / "consumequeue").units
    results = tables[T.CHECK_RESULTS]
    assert [(r["broker"], r["check_name"]) for r in results.to_pylist()
            if r["broker"] in ("broker-dledger", "broker-rocksdb")
            and r["severity"] == "error"] == []
