"""The scheduler killed mid-run (issue 39): ``rmq_nightly`` under a real scheduler with the
LocalExecutor (tests/airflow_scheduler.py) loses its scheduler, the executor's workers and
the task they ran, all at once, as when the scheduler's host dies; a new scheduler finds the
dead task by its missing heartbeat, retries it and finishes the night, whose tables equal
the same snapshot's steps run undisturbed. The kills of tasks and whole deployments over a
fleet's nights are tests/test_soak.py's."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from airflow_scheduler import DagRunRecord, deployment
from lakehouse import warehouse_content
from pipeline_nights import _no_spark as no_spark

from jobs import pipeline
from jobs.pipeline_config import BrokerSource, load_config
from jobs.snapshot.manifest import snapshot_id_for

pytestmark = [pytest.mark.broker]


KILLED_NIGHT = datetime(2026, 11, 20, 2, tzinfo=UTC)
SCHEDULER_SETTINGS = {"retries": 2, "retry_delay_s": 1, "load_engine": "local",
                      "check_engine": "local"}
# A task whose process died is found by its missing heartbeat, and a dead scheduler's
# task instances are taken over by the next one: in seconds here, not the default minutes.
SCHEDULER_ENV = {"AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
                 "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
                 "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "10",
                 "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "5"}


def test_the_scheduler_killed_with_its_running_task_and_restarted_finishes_the_night(  # type: ignore[no-untyped-def]
        growing_store, tmp_path: Path) -> None:
    """``rmq_nightly`` under the scheduler (LocalExecutor): while the broker's check runs,
    the scheduler is SIGKILLed with everything it started (its executor's workers and the
    task), then a new scheduler starts. The run ends in success, the check ran again after
    the kill, and the tables equal the same snapshot's steps run undisturbed."""
    brokers = [{"name": "g", "store": str(growing_store / "snapshots" / "s1" / "store")}]
    with deployment(tmp_path, brokers, "rmq_spark", 2, SCHEDULER_ENV,
                    SCHEDULER_SETTINGS) as airflow:
        run_id = airflow.trigger("rmq_nightly", KILLED_NIGHT)
        deadline = time.monotonic() + 600
        while not airflow.query("SELECT 1 FROM task_instance WHERE run_id = ? AND task_id = "
                                "'broker.check' AND state = 'running'", run_id):
            assert time.monotonic() < deadline, airflow.log_tail("scheduler")
            time.sleep(0.2)
        time.sleep(2)  # into its work
        killed_at = time.time()
        airflow.kill_scheduler()
        state = airflow.wait_for_run("rmq_nightly", run_id, 900)
        tasks = airflow.task_runs("rmq_nightly", run_id)
        record = DagRunRecord(state, 0.0, tasks, logs=airflow.home)
        states = {t.task_id: t.state for t in tasks}
        assert state == "success", (states, record.failed_task_logs(),
                                    airflow.log_tail("scheduler"))
    check = next(t for t in tasks if t.task_id == "broker.check")
    assert check.started is not None and check.started > killed_at  # it ran again
    assert set(states.values()) <= {"success", "skipped"}, states

    config = load_config(tmp_path / "pipeline.yaml")
    oracle = replace(config, warehouse=tmp_path / "oracle" / "warehouse")
    taken = pipeline.snapshot_broker(oracle, BrokerSource(**brokers[0]),
                                     snapshot_id_for(KILLED_NIGHT))
    assert taken["existing"]
    checked = pipeline.check_broker(no_spark, oracle, pipeline.load_broker(
        no_spark, oracle, taken), oracle.alerts_config)
    pipeline.maintain_broker(oracle, checked)
    assert warehouse_content(config.warehouse) == warehouse_content(oracle.warehouse)
