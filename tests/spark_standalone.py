"""A real Spark standalone cluster on 127.0.0.1 from the installed pyspark: a master and N
workers, for tests/test_cluster.py and bench/cluster_load.py.

Each daemon runs in its own process group with its log in the cluster's root; leaving the
context stops them all (SIGTERM, then SIGKILL), also when the start fails. Every driver
run against the cluster reads ``<root>/conf/spark-defaults.conf``: event logs on,
uncompressed, so a caller can read where each task ran.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyspark
from endpoints import free_port

from jobs.lakehouse.spark_session import JAVA_OPTIONS_ENV

SPARK_HOME = Path(pyspark.__file__).resolve().parent
PYTHON = sys.executable  # the venv interpreter: rmqlib, pyarrow, numpy for driver and workers
START_TIMEOUT = 120  # seconds for the master to come up and the workers to register


class ClusterStartError(RuntimeError):
    """A daemon exited or the cluster was not up in time (with the daemons' log tails)."""


def tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return f"--- {path}: missing"
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"--- {path} (last {len(text)} lines)\n" + "\n".join(text)


@dataclass
class Cluster:
    url: str  # spark://127.0.0.1:PORT, what drivers connect to
    webui: str  # the master's web UI; /json/ is its state as JSON
    work_dir: Path  # the workers' --work-dir: <app id>/<executor id>/{stdout,stderr}
    event_dir: Path  # spark.eventLog.dir of every application (spark-defaults.conf)
    env: dict[str, str]  # the environment a driver of this cluster runs with
    logs: list[Path] = field(default_factory=list)

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.webui}/json/", timeout=5) as response:
            return json.load(response)

    def apps(self) -> dict[str, dict]:
        state = self.state()
        return {app["id"]: app for app in state["activeapps"] + state["completedapps"]}

    def log_tails(self) -> str:
        return "\n".join(tail(log) for log in self.logs)


@contextmanager
def standalone_cluster(root: Path, workers: int = 1, cores: int = 1,
                       memory: str = "1g", worker_hides: Sequence[Path] = (),
                       worker_env: Mapping[str, str] | None = None) -> Iterator[Cluster]:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, under
    ``root``; ClusterStartError when they do not come up.

    ``worker_hides``: directories the workers (and so their executors) do not see, as on
    another host: each worker runs in a mount namespace of its own (``unshare``, as root)
    with an empty tmpfs mounted over each. ``worker_env``: variables only the workers get."""
    conf_dir, work_dir, event_dir = root / "conf", root / "work", root / "events"
    for folder in (conf_dir, work_dir, event_dir):
        folder.mkdir(parents=True, exist_ok=True)
    # REST submission server off: no fixed port 6066.
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
               SPARK_DAEMON_MEMORY="256m", RMQ_SPARK_LOG_FILE=str(root / "spark.log"),
               SPARK_DAEMON_JAVA_OPTS=os.environ.get(JAVA_OPTIONS_ENV, ""))
    port, master_ui = free_port(), free_port()
    names = ["master", *(f"worker-{n}" if workers > 1 else "worker" for n in range(workers))]
    cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{master_ui}",
                      work_dir, event_dir, env, [root / f"{name}.log" for name in names])
    processes: list[tuple[str, subprocess.Popen]] = []
    try:
        processes.append(("master", _spawn(
            "org.apache.spark.deploy.master.Master",
            ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(master_ui)],
            cluster.logs[0], env)))
        _wait(cluster, processes, "the master to be ALIVE",
              lambda state: state["status"] == "ALIVE")
        for name, log in zip(names[1:], cluster.logs[1:], strict=True):
            processes.append((name, _spawn(
                "org.apache.spark.deploy.worker.Worker",
                [cluster.url, "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                 "--webui-port", str(free_port()), "--work-dir", str(work_dir)], log,
                {**env, **(worker_env or {})}, hides=worker_hides)))
        _wait(cluster, processes, f"{workers} worker(s) to register",
              lambda state: [w["state"] for w in state["workers"]] == ["ALIVE"] * workers)
        yield cluster
    finally:
        for _, process in reversed(processes):
            _stop(process)


def _spawn(cls: str, args: list[str], log: Path, env: dict[str, str],
           hides: Sequence[Path] = ()) -> subprocess.Popen:
    command = [str(SPARK_HOME / "bin" / "spark-class"), cls, *args]
    if hides:  # a private mount namespace with an empty tmpfs over each hidden directory
        mounts = " && ".join(f"mount -t tmpfs rmq-hidden {shlex.quote(str(d))}" for d in hides)
        command = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                   f"{mounts} && exec {shlex.join(command)}"]
    with log.open("wb") as out:  # the child keeps its own descriptor
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=log.parent, start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM the process group (a worker takes its executors down), then SIGKILL it."""
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
    """Poll the master's /json/ until ready(state); ClusterStartError with the daemons' log
    tails when a daemon exits or START_TIMEOUT passes."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        for name, process in processes:
            if process.poll() is not None:
                raise ClusterStartError(f"the Spark {name} exited with {process.returncode}\n"
                                        f"{cluster.log_tails()}")
        try:
            if ready(cluster.state()):
                return
        except OSError:
            pass  # the master's UI is not up yet
        if time.monotonic() > deadline:
            raise ClusterStartError(f"waited {START_TIMEOUT} s for {what} ({cluster.url})\n"
                                    f"{cluster.log_tails()}")
        time.sleep(0.5)
