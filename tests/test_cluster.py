"""The load on a real Spark standalone cluster, not in local mode.

A master and one worker (1 core, 1 GiB) run on 127.0.0.1 from the installed pyspark. The load
is submitted as its own process, ``python -m jobs --master spark://...``, and then once more
with ``spark-submit jobs/cli.py``. Both must register an application with the master whose
executor the worker launched, and every Spark task must have run on that executor (the
event log says where each task ran), not in the driver.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyspark
import pytest
from deltalake import DeltaTable

from jobs.lakehouse.jars import ensure_delta_jars
from rmqlib.commitlog.records import scan_store

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.cluster]

REPO = Path(__file__).resolve().parent.parent
SPARK_HOME = Path(pyspark.__file__).resolve().parent
PYTHON = sys.executable  # the venv interpreter: rmqlib, pyarrow, numpy for driver and workers
LOG4J_CONFIG = REPO / "jvm" / "log4j2.properties"
START_TIMEOUT = 120  # seconds for the master to come up and the worker to register
RUN_TIMEOUT = 600  # seconds per load (a shared 2-core machine can be slow)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return f"--- {path}: missing"
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"--- {path} (last {len(text)} lines)\n" + "\n".join(text)


@dataclass
class Cluster:
    url: str  # spark://127.0.0.1:PORT, what drivers connect to
    webui: str  # the master's web UI; /json/ is its state as JSON
    work_dir: Path  # the worker's --work-dir: <app id>/<executor id>/{stdout,stderr}
    event_dir: Path  # spark.eventLog.dir of every application (spark-defaults.conf)
    env: dict[str, str]
    logs: list[Path] = field(default_factory=list)

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.webui}/json/", timeout=5) as response:
            return json.load(response)

    def apps(self) -> dict[str, dict]:
        state = self.state()
        return {app["id"]: app for app in state["activeapps"] + state["completedapps"]}

    def log_tails(self) -> str:
        return "\n".join(tail(log) for log in self.logs)


def _spawn(cls: str, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with log.open("wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), cls, *args],
                                stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=log.parent, start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the process group (the worker takes its executors down), then SIGKILL it."""
    for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            continue


def _wait(cluster: Cluster, processes: list[tuple[str, subprocess.Popen]], what: str,
          ready: Callable[[dict], bool]) -> None:
    """Poll the master's /json/ until ready(state); fail with the daemons' log tails when a
    daemon exits or START_TIMEOUT passes."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        for name, process in processes:
            if process.poll() is not None:
                pytest.fail(f"the Spark {name} exited with {process.returncode}\n"
                            f"{cluster.log_tails()}", pytrace=False)
        try:
            if ready(cluster.state()):
                return
        except OSError:
            pass  # the master's UI is not up yet
        if time.monotonic() > deadline:
            pytest.fail(f"waited {START_TIMEOUT} s for {what} ({cluster.url})\n"
                        f"{cluster.log_tails()}", pytrace=False)
        time.sleep(0.5)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and one worker on 127.0.0.1; both process groups are killed at
    the end, also when the start fails."""
    root = tmp_path_factory.mktemp("cluster")
    conf_dir, work_dir, event_dir = root / "conf", root / "work", root / "events"
    for folder in (conf_dir, work_dir, event_dir):
        folder.mkdir()
    # Read by the master and worker (REST submission server off: no fixed port 6066) and by
    # every driver's spark-submit: event logs, uncompressed, so the test can read them.
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.master.rest.enabled false\n"
        "spark.eventLog.enabled true\n"
        f"spark.eventLog.dir file://{event_dir}\n"
        "spark.eventLog.compress false\n"
        "spark.eventLog.rolling.enabled false\n")
    env = {key: value for key, value in os.environ.items()
           if key not in ("RMQ_SPARK_MASTER", "RMQ_WAREHOUSE", "PYSPARK_GATEWAY_PORT",
                          "PYSPARK_GATEWAY_SECRET", "SPARK_CONF_DIR", "PYSPARK_DRIVER_PYTHON")}
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_CONF_DIR=str(conf_dir),
               SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=PYTHON,
               SPARK_DAEMON_MEMORY="256m", RMQ_SPARK_LOG_FILE=str(root / "spark.log"))
    port, master_ui, worker_ui = free_port(), free_port(), free_port()
    cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{master_ui}",
                      work_dir, event_dir, env, [root / "master.log", root / "worker.log"])
    processes: list[tuple[str, subprocess.Popen]] = []
    try:
        processes.append(("master", _spawn(
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(master_ui)],
            root / "master.log", env)))
        _wait(cluster, processes, "the master to be ALIVE",
              lambda state: state["status"] == "ALIVE")
        processes.append(("worker", _spawn(
            "org.apache.spark.deploy.worker.Worker",
            [cluster.url, "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
             "--webui-port", str(worker_ui), "--work-dir", str(work_dir)],
            root / "worker.log", env)))
        _wait(cluster, processes, "the worker to register",
              lambda state: [w["state"] for w in state["workers"]] == ["ALIVE"])
        yield cluster
    finally:
        for _, process in reversed(processes):
            _stop(process)


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
        spark_cluster: Cluster, broker_stores, tmp_path: Path) -> None:
    store = broker_stores["v5-clean"] / "store"
    warehouse = tmp_path / "warehouse"
    records = sum(1 for _ in scan_store(store / "commitlog"))
    # --engine spark: a store this small is otherwise decoded in process, not on the cluster
    load = ["--warehouse", str(warehouse), "load", "--broker", "b", "--quiet", "--engine",
            "spark"]

    app_id, app = run_driver(
        spark_cluster, [PYTHON, "-m", "jobs", "--master", spark_cluster.url, *load,
                        "--snapshot-id", "s1", str(store)], "python-m-jobs", tmp_path)
    assert_ran_on_the_worker(spark_cluster, app_id, app)
    assert len(rows(warehouse, "messages", ["physical_offset"])) == records
    assert rows(warehouse, "queue_entries", ["queue_offset"])
    assert rows(warehouse, "snapshots", ["snapshot_id", "status"]) == [
        {"snapshot_id": "s1", "status": "loaded"}]

    # spark-submit decides the master here (no --master after the script) and must bring
    # the Delta jars: the driver JVM is running before jobs/cli.py starts.
    jars = ",".join(str(jar) for jar in ensure_delta_jars())
    driver_logging = (f"-Dlog4j2.configurationFile={LOG4J_CONFIG} "
                      f"-Drmq.log.file={spark_cluster.env['RMQ_SPARK_LOG_FILE']}")
    app_id, app = run_driver(
        spark_cluster, [str(SPARK_HOME / "bin" / "spark-submit"), "--master", spark_cluster.url,
                        "--jars", jars, "--driver-java-options", driver_logging,
                        "jobs/cli.py", *load, "--snapshot-id", "s2", str(store)],
        "spark-submit", tmp_path, {"PYTHONPATH": str(REPO)})
    assert_ran_on_the_worker(spark_cluster, app_id, app)
    assert len(rows(warehouse, "messages", ["physical_offset"])) == records  # nothing new
    snapshots = rows(warehouse, "snapshots", ["snapshot_id", "status"])
    assert sorted(snapshots, key=lambda row: row["snapshot_id"]) == [
        {"snapshot_id": "s1", "status": "loaded"}, {"snapshot_id": "s2", "status": "loaded"}]
