"""``rmq_nightly`` with its warehouse and its snapshots in an S3 bucket, as a deployment
runs it: the LocalExecutor (each task a process of its own, talking to an Airflow API
server on 127.0.0.1), the bucket on the local S3 server, its keys and endpoint given only
as the Airflow ``aws`` connection of ``aws_conn_id`` (no ``AWS_*`` variable in any
process).

The run must succeed and leave the very tables the same steps leave on local disk, run one
broker after another in this process from the run's own snapshots, read back from the
bucket on another "host" (a mirror of its own), with delta-rs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow_scheduler import (
    local_executor_env,
    query_metadata,
    wait_for_port,
    wait_until_run_ends,
)
from endpoints import free_port
from lakehouse import RUN_COLUMNS, delta_rows, warehouse_content
from s3_server import running_s3, s3_environment

from jobs import pipeline
from jobs.lakehouse import tables as T
from jobs.lakehouse.locations import AWS_VARIABLES, Location
from jobs.lakehouse.tables import table_location
from jobs.pipeline_config import BrokerSource, load_config
from jobs.snapshot.manifest import snapshot_id_for

pytestmark = [pytest.mark.broker]

REPO = Path(__file__).resolve().parent.parent
AIRFLOW = str(Path(sys.executable).parent / "airflow")
RUN_DATE = datetime(2026, 11, 26, 2, tzinfo=UTC)
BROKERS = {"s3-a": "v5-clean", "s3-b": "v4-killed"}
SNAPSHOTS = "s3://lake/snapshots"


def _config(path: Path, warehouse: str, work: Path, **more: object) -> Path:
    path.write_text(json.dumps({
        "snapshot_root": SNAPSHOTS, "warehouse": warehouse, "retries": 0,
        "deliver_alerts": False, "brokers": [], "checks_output": str(work / "checks"),
        "alerts_config": str(REPO / "config" / "alerts.yaml"), **more}))
    return path


def _no_spark() -> object:
    raise AssertionError("these nights run without Spark")


def test_the_nightly_dag_on_a_bucket_equals_its_steps_on_local_disk(
        broker_stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    brokers = [{"name": name, "store": str(broker_stores[variant] / "store")}
               for name, variant in BROKERS.items()]
    with running_s3(tmp_path / "s3") as s3:
        s3.bucket("lake")
        keys = s3.environment()
        connection = {"conn_type": "aws", "login": keys["AWS_ACCESS_KEY_ID"],
                      "password": keys["AWS_SECRET_ACCESS_KEY"],
                      "extra": {"endpoint_url": keys["AWS_ENDPOINT_URL"],
                                "region_name": keys["AWS_REGION"]}}
        config = _config(tmp_path / "pipeline.yaml", "s3://lake/nightly", tmp_path / "dag",
                         aws_conn_id="rmq_s3")
        port, home = free_port(), tmp_path / "airflow"
        env = {k: v for k, v in os.environ.items() if k not in AWS_VARIABLES}
        env.update({"AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
                    "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "PYTHONPATH": str(REPO),
                    "RMQ_PIPELINE_CONFIG": str(config), "AIRFLOW_CONN_RMQ_S3": json.dumps(
                        connection), "AIRFLOW_VAR_RMQ_BROKERS": json.dumps(brokers),
                    "RMQ_SNAPSHOT_MIRROR": str(tmp_path / "dag-host"),
                    **local_executor_env(port)})
        for key in [k for k in env if k.startswith("AIRFLOW_CONN_RMQ_ALERTS")]:
            env.pop(key)
        subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True)
        with open(tmp_path / "api.log", "wb") as api_log, \
                open(tmp_path / "run.log", "wb") as run_log:
            run = None
            api = subprocess.Popen([AIRFLOW, "api-server", "--host", "127.0.0.1", "--port",
                                    str(port), "--workers", "1", "--apps", "execution"],
                                   env=env, stdout=api_log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
            try:
                wait_for_port(port, api, 120)
                run = subprocess.Popen([AIRFLOW, "dags", "test", "rmq_nightly",
                                        RUN_DATE.isoformat(), "--use-executor"], env=env,
                                       stdout=run_log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
                wait_until_run_ends(run, home / "airflow.db", RUN_DATE.date().isoformat(), 1200)
            finally:
                for process in (run, api):
                    if process is not None and process.poll() is None:
                        os.killpg(process.pid, signal.SIGKILL)
                        process.wait(timeout=60)
        log = (tmp_path / "run.log").read_text(errors="replace")
        states = dict(query_metadata(home / "airflow.db", "SELECT task_id || '[' || map_index "
                                     "|| ']', state FROM task_instance"))
        # cluster.* are skipped: these brokers name no cluster (an empty mapping)
        assert {t for t, state in states.items() if state != "success"} == {
            "cluster.check_cluster[-1]", "cluster.alert_cluster[-1]"}, (states, log[-4000:])
        assert len(states) == 2 * 6 + 5
        assert "AWS_SECRET_ACCESS_KEY" not in log and keys["AWS_SECRET_ACCESS_KEY"] not in log
        with s3_environment(s3):
            on_s3 = warehouse_content("s3://lake/nightly")
            # The snapshots are in the bucket, objects and a manifest each, none on disk
            published = {name: (Location(SNAPSHOTS) / name).directories()
                         for name in BROKERS}
            snapshot_id = snapshot_id_for(RUN_DATE)
            assert published == {name: [snapshot_id, "objects"] for name in BROKERS}
            assert not (tmp_path / "dag" / "snapshots").exists()
            # The oracle takes the run's own snapshots (the same ids and times of taking)
            # from the bucket, on a host that did not take them, into a local warehouse.
            oracle = load_config(_config(tmp_path / "local.yaml", str(tmp_path / "local-wh"),
                                         tmp_path / "dag"))
            os.environ["RMQ_SNAPSHOT_MIRROR"] = str(tmp_path / "oracle-host")
            try:
                for broker in brokers:
                    source = BrokerSource(**broker)
                    taken = pipeline.snapshot_broker(oracle, source, snapshot_id)
                    assert taken["existing"], taken
                    loaded = pipeline.load_broker(_no_spark, oracle, taken)
                    checked = pipeline.check_broker(_no_spark, oracle, loaded,
                                                    oracle.alerts_config)
                    pipeline.maintain_broker(oracle, checked)
            finally:
                del os.environ["RMQ_SNAPSHOT_MIRROR"]
    assert on_s3[T.MESSAGES] and on_s3[T.CONSUMER_STATUS]
    for name in on_s3:
        on_disk = delta_rows(table_location(oracle.warehouse, name), leave_out=RUN_COLUMNS)
        only = sorted(set(on_disk) ^ set(on_s3[name]))
        assert on_s3[name] == on_disk, f"{name}: " + "\n".join(
            ("s3 " if row in on_s3[name] else "disk ") + row for row in only[:10])
