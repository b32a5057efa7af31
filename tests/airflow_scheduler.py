"""Airflow as production runs it, on 127.0.0.1: API server (execution API), DAG processor
and scheduler with the LocalExecutor, each task in a process of its own, pools enforced by
the scheduler (``airflow dags test`` queues every ready task at once and ignores pools).

Used by the fleet test (4 brokers, pool honoured) and bench/fleet_dag.py (1 vs 8 brokers,
wall time and peak memory). While a run goes on, a sampler reads /proc every half second:
the Spark JVMs alive and the resident memory of every process the three daemons started.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from endpoints import free_port

AIRFLOW = str(Path(sys.executable).parent / "airflow")
REPO = Path(__file__).resolve().parent.parent
NEVER_ON_ITS_OWN = "0 2 29 2 *"  # no slot between the DAG's start date and 2028: only ours
SPARK_SUBMIT = b"org.apache.spark.deploy.SparkSubmit"
SPARK_LAUNCHER = b"org.apache.spark.launcher.Main"


def is_spark_driver(cmdline: bytes) -> bool:
    """A Spark driver JVM's command line (``java ... SparkSubmit``). Not those of the
    processes that start one and name the same class as an argument for a moment: the
    ``spark-class`` shell script, its subshell and the launcher JVM (``launcher.Main``)."""
    argv = cmdline.split(b"\0")
    return (Path(argv[0].decode(errors="replace")).name == "java" and SPARK_SUBMIT in argv
            and SPARK_LAUNCHER not in argv)


def write_pipeline_config(work: Path, pool: str, slots: int,
                          settings: dict[str, object] | None = None) -> Path:
    """``work/pipeline.yaml``: snapshots and warehouse under ``work``, the Spark pool, no
    retries, alerts recorded but not delivered, and a schedule that never fires on its own
    (unpausing a DAG with a daily cron makes the scheduler create today's run too); then
    ``settings``."""
    config = work / "pipeline.yaml"
    config.write_text(json.dumps({
        "schedule": NEVER_ON_ITS_OWN, "snapshot_root": str(work / "snapshots"),
        "warehouse": str(work / "warehouse"), "retention_days": 7, "retries": 0,
        "retry_delay_s": 1, "deliver_alerts": False, "brokers": [], "spark_pool": pool,
        "spark_pool_slots": slots, "alerts_config": str(REPO / "config" / "alerts.yaml"),
        **(settings or {})}))
    return config


def local_executor_env(port: int) -> dict[str, str]:
    """Settings that make tasks run under the LocalExecutor and reach the execution API
    of an API server on 127.0.0.1:``port``."""
    return {"AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": "rmq-tests-only-" + os.urandom(8).hex(),
            "AIRFLOW__API__PORT": str(port)}


def wait_for_port(port: int, process: subprocess.Popen, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if process.poll() is not None:
            raise AssertionError(f"{Path(process.args[0]).name} {process.args[1]} exited with "
                                 f"{process.returncode}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


def wait_for_execution_api(port: int, process: subprocess.Popen, seconds: float) -> None:
    """Until the API server on ``port`` answers its execution API's health check. Its first
    request there builds the execution app (measured: 4.0 s with the scheduler starting
    beside it, 4.9-6.3 s on a loaded machine); a task's first call waits only 5 s
    (``[workers] execution_api_timeout``) before it retries, so every scheduled run's first
    task met a timeout on a busy machine (issue 39)."""
    wait_for_port(port, process, seconds)
    urllib.request.urlopen(f"http://127.0.0.1:{port}/execution/health", timeout=seconds).read()


def wait_until_run_ends(run: subprocess.Popen, database: Path, run_date: str,
                        seconds: float, dag_id: str = "rmq_nightly") -> None:
    """Until the DAG run of ``run_date`` (YYYY-MM-DD) is finished in the metadata DB (or
    the command exits). Seen: ``airflow dags test --use-executor`` kept running after the
    run had finished, its LocalExecutor workers not shutting down; the caller kills it
    then (start it with ``start_new_session=True`` and kill its process group)."""
    deadline = time.monotonic() + seconds
    sql = "SELECT state FROM dag_run WHERE dag_id = ? AND logical_date LIKE ?"
    while run.poll() is None and time.monotonic() < deadline:
        if {row[0] for row in query_metadata(database, sql, dag_id, f"{run_date}%")} \
                & {"success", "failed"}:
            with suppress(subprocess.TimeoutExpired):
                run.wait(timeout=20)
            return
        time.sleep(1)


def query_metadata(database: Path, sql: str, *args: str) -> list[tuple]:
    """Rows of Airflow's SQLite metadata DB, read only."""
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as db:
        return db.execute(sql, args).fetchall()


@dataclass
class TaskRun:
    task_id: str
    map_index: int
    state: str
    pool: str
    started: float | None   # epoch seconds
    ended: float | None


@dataclass
class DagRunRecord:
    state: str
    seconds: float                          # trigger to the run's end, wall
    tasks: list[TaskRun]
    peak_spark_jvms: int = 0                # sampled: Spark drivers alive at once
    peak_rss_mib: float = 0.0               # sampled: all processes of the deployment
    logs: Path | None = None

    def most_at_once(self, pool: str) -> int:
        """The most task instances of ``pool`` that ran at the same time (from the
        scheduler's own record of when each began and ended)."""
        edges = sorted((moment, step) for t in self.tasks if t.pool == pool and t.started
                       for moment, step in ((t.started, 1), (t.ended or time.time(), -1)))
        running = peak = 0
        for _moment, step in edges:  # an end at the same instant as a start counts first
            running += step
            peak = max(peak, running)
        return peak

    def failed_task_logs(self, tail: int = 3000) -> str:
        """The end of the last attempt's log of every task instance that failed, for an
        assertion's message: the scheduler's log says that a task failed, not why, and
        the deployment's home is gone once the test ends."""
        if self.logs is None:
            return ""
        parts = []
        for task in self.tasks:
            if task.state != "failed":
                continue
            mapped = f"map_index={task.map_index}/" if task.map_index >= 0 else ""
            attempts = sorted((self.logs / "logs").glob(
                f"dag_id=*/run_id=*/task_id={task.task_id}/{mapped}attempt=*.log"),
                key=lambda p: int(p.stem.split("=")[1]))
            text = attempts[-1].read_text(errors="replace")[-tail:] if attempts else "no log"
            parts.append(f"--- {task.task_id}[{task.map_index}]:\n{text}")
        return "\n".join(parts)


@dataclass
class TreeSampler:
    """Every half second, the processes under ``roots``: the most Spark JVMs alive at once
    and the most resident memory all of them held at once."""

    roots: list[int]
    peak_spark_jvms: int = 0
    peak_rss_kib: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> TreeSampler:
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.done.set()
        self.thread.join()

    def run(self) -> None:
        while not self.done.wait(0.5):
            parents = _parents()
            tree = _descendants(self.roots, parents)
            drivers = {pid for pid in tree if is_spark_driver(_read(pid, "cmdline"))}
            # A driver starting a process (its Python workers) forks: for a moment the
            # child is a copy of it, command line included. Not a driver of its own.
            jvms = sum(1 for pid in drivers if parents.get(pid) not in drivers)
            self.peak_spark_jvms = max(self.peak_spark_jvms, jvms)
            self.peak_rss_kib = max(self.peak_rss_kib, sum(_rss_kib(pid) for pid in tree))


def _read(pid: int, name: str) -> bytes:
    try:
        return (Path("/proc") / str(pid) / name).read_bytes()
    except OSError:
        return b""


def _parents() -> dict[int, int]:
    """Every process's parent, from one pass over /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        stat = _read(int(entry.name), "stat") if entry.name.isdigit() else b""
        if stat:  # "pid (comm) state ppid ...": comm may hold spaces, split after it
            parents[int(entry.name)] = int(stat.rsplit(b")", 1)[1].split()[1])
    return parents


def _rss_kib(pid: int) -> int:
    for line in _read(pid, "status").splitlines():
        if line.startswith(b"VmRSS:"):
            return int(line.split()[1])
    return 0


def _descendants(roots: list[int], parents: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(roots), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class Deployment:
    """The three daemons on one metadata DB (SQLite under ``home``)."""

    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home, self.env = home, env
        self.database = home / "airflow.db"
        self.daemons: list[subprocess.Popen] = []

    def airflow(self, *args: str) -> str:
        done = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True)
        if done.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)}: {done.stderr[-3000:]}")
        return done.stdout

    def start(self, port: int) -> None:
        for name, args in (("api-server", ["api-server", "--host", "127.0.0.1", "--port",
                                           str(port), "--workers", "1", "--apps", "execution"]),
                           ("dag-processor", ["dag-processor"]), ("scheduler", ["scheduler"])):
            self.daemons.append(self._daemon(name, args))
        wait_for_execution_api(port, self.daemons[0], 120)

    def _daemon(self, name: str, args: list[str]) -> subprocess.Popen:
        with open(self.home / f"{name}.log", "ab") as out:
            return subprocess.Popen([AIRFLOW, *args], env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def kill_scheduler(self) -> None:
        """SIGKILL the scheduler and everything it started (the LocalExecutor's workers and
        the tasks they run), as when its host dies; then start a new one."""
        old = next(d for d in self.daemons if d.args[1] == "scheduler")
        os.killpg(old.pid, signal.SIGKILL)
        old.wait()
        self.daemons[self.daemons.index(old)] = self._daemon("scheduler", ["scheduler"])

    def stop(self) -> None:
        for daemon in self.daemons:
            with suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in self.daemons:
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()

    def query(self, sql: str, *args: object) -> list[tuple]:
        with sqlite3.connect(f"file:{self.database}?mode=ro", uri=True, timeout=30) as db:
            return db.execute(sql, args).fetchall()

    def wait_for_dag(self, dag_id: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.query("SELECT 1 FROM dag WHERE dag_id = ? AND NOT is_stale", dag_id):
                return
            self._still_running()
            time.sleep(1)
        raise AssertionError(f"the DAG processor did not register {dag_id} in {seconds} s: "
                             + self.log_tail("dag-processor"))

    def run(self, dag_id: str, logical_date: datetime, seconds: float) -> DagRunRecord:
        """Trigger ``dag_id`` for ``logical_date`` and wait for the run to end."""
        with TreeSampler([d.pid for d in self.daemons]) as sampler:
            clock = time.monotonic()
            run_id = self.trigger(dag_id, logical_date)
            state = self.wait_for_run(dag_id, run_id, seconds)
            elapsed = time.monotonic() - clock
        return DagRunRecord(state, elapsed, self.task_runs(dag_id, run_id),
                            sampler.peak_spark_jvms, sampler.peak_rss_kib / 1024, self.home)

    def trigger(self, dag_id: str, logical_date: datetime) -> str:
        run_id = f"fleet__{logical_date:%Y%m%dT%H%M}"
        self.airflow("dags", "trigger", dag_id, "--logical-date", logical_date.isoformat(),
                     "--run-id", run_id)
        return run_id

    def wait_for_run(self, dag_id: str, run_id: str, seconds: float) -> str:
        """The run's state once it ended (or as it is after ``seconds``)."""
        state, deadline = "queued", time.monotonic() + seconds
        while state not in ("success", "failed") and time.monotonic() < deadline:
            time.sleep(1)
            self._still_running()
            rows = self.query("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?",
                              dag_id, run_id)
            state = rows[0][0] if rows else "queued"
        return state

    def task_runs(self, dag_id: str, run_id: str) -> list[TaskRun]:
        return [TaskRun(task_id, map_index, task_state, pool, _epoch(started), _epoch(ended))
                for task_id, map_index, task_state, pool, started, ended in self.query(
                    "SELECT task_id, map_index, state, pool, start_date, end_date "
                    "FROM task_instance WHERE dag_id = ? AND run_id = ?", dag_id, run_id)]

    def _still_running(self) -> None:
        for daemon in self.daemons:
            if daemon.poll() is not None:
                raise AssertionError(f"airflow {daemon.args[1]} exited with "
                                     f"{daemon.returncode}: {self.log_tail(daemon.args[1])}")

    def log_tail(self, name: str) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _epoch(text: str | None) -> float | None:
    return datetime.fromisoformat(text).timestamp() if text else None


@contextmanager
def deployment(work: Path, brokers: list[dict], pool: str, slots: int,
               extra_env: dict[str, str] | None = None,
               settings: dict[str, object] | None = None,
               without: Iterable[str] = ()) -> Iterator[Deployment]:
    """A fresh Airflow home (``work/airflow``) with ``rmq_nightly`` unpaused, ``pool`` of
    ``slots``, the brokers as the ``rmq_brokers`` Variable, and the daemons running; the
    pipeline's snapshots and warehouse under ``work`` (see :func:`write_pipeline_config`);
    the variables ``without`` names are not passed on (say, ``AWS_*`` when the keys are to
    come from an Airflow connection only)."""
    home = work / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    pipeline_config = write_pipeline_config(work, pool, slots, settings)
    port = free_port()
    env = {**os.environ, **local_executor_env(port),
           "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
           "AIRFLOW__CORE__PARALLELISM": "16",
           "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
           "RMQ_PIPELINE_CONFIG": str(pipeline_config),
           "AIRFLOW_VAR_RMQ_BROKERS": json.dumps(brokers), **(extra_env or {})}
    for name in ("RMQ_WAREHOUSE", *without):
        env.pop(name, None)
    deployed = Deployment(home, env)
    deployed.airflow("db", "migrate")
    deployed.airflow("pools", "set", pool, str(slots), "Spark applications at once")
    try:
        deployed.start(port)
        deployed.wait_for_dag("rmq_nightly", 300)
        yield deployed
    finally:
        deployed.stop()
