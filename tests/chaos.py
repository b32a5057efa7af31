"""A fleet's nights through the DAG's steps under seeded kills, and what must hold after
(issue 39): the chaos soak's engine, run short by tests/test_soak.py and long by
bench/soak.py.

Every step of a night (``jobs.pipeline``'s snapshot, load, check, alert delivery,
maintenance and clean-up per broker; the cluster's check and alert after its brokers) runs
as a process of its own (tests/chaos_step.py), as the LocalExecutor runs the DAG's tasks:
a broker's steps in the DAG's order, brokers side by side up to ``parallelism``. A seeded
random source decides for every attempt whether it is SIGKILLed and how long after its
start, and for every night whether the whole deployment dies (every running step at once,
as when the host or the executor goes); a killed attempt is retried, as Airflow retries a
task whose process died. The last attempt of a step is never killed, so every night ends.

Then :func:`verify` checks the outcome against an undisturbed serial run: the same
snapshots loaded, checked, alerted and maintained one step after another into a fresh
warehouse must give the very same rows in every table (delta-rs reads both); every
snapshot must hold what an undisturbed snapshot of the same store holds; every recorded
alert must say "sent" on every channel and have reached each channel's server, more than
once only where an attempt of its delivery was killed (a channel's answer is recorded
after it was sent: at least once); and nothing may be left behind (a snapshot's partial
directory, a load's staging files, a lock).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml
from endpoints import (
    Mailbox,
    environment,
    free_port,
    smtp_connection,
    start_webhook,
    webhook_connection,
)
from lakehouse import warehouse_content
from pipeline_nights import _no_spark as no_spark

REPO = Path(__file__).resolve().parent.parent
STEP = Path(__file__).with_name("chaos_step.py")
#: How long after its start (its imports done) an attempt may be killed, per step: about
#: the step's length on the real-broker stores, so kills land all through it.
KILL_WINDOW_S = {"snapshot": 1.0, "load": 4.0, "lookup": 1.0, "check": 8.0, "alert": 1.5,
                 "maintain": 3.0, "clean_up": 0.5, "check_cluster": 4.0, "alert_cluster": 1.5}
SMTP_CONN, WEBHOOK_CONN = "rmq_alerts_smtp", "rmq_alerts_webhook"
DISK_FULL = "out of disk space"   # a step's one line for a full disk (jobs.lakehouse.disk_space)


@dataclass(frozen=True)
class SoakBroker:
    """A broker of the fleet: its store as it was on each night, and its cluster role."""

    name: str
    stores: tuple[Path, ...]
    cluster: str | None = None
    role: str | None = None
    master: str | None = None

    def source(self, night: int) -> dict[str, Any]:
        """The broker as the config names it on ``night`` (its store as it was then)."""
        store = self.stores[min(night, len(self.stores) - 1)]
        source: dict[str, Any] = {"name": self.name, "store": str(store)}
        if self.cluster:
            source.update(cluster=self.cluster, role=self.role, master=self.master)
        return source


@dataclass(frozen=True)
class Faults:
    """What goes wrong, and how often; the same seed kills the same attempts."""

    seed: int
    kill_chance: float = 0.3          # of an attempt that is not the step's last
    deployment_kill_chance: float = 0.5   # of a night: every running step killed at once
    deployment_window_s: float = 40.0     # ... at a moment up to this far into the night
    attempts: int = 4                 # per step (the DAG's retries + 1)
    parallelism: int = 4              # steps running at once (the LocalExecutor's)
    disk_squeeze_chance: float = 0.0  # of a night: the data's filesystem made full ...
    disk_squeeze_s: float = 8.0       # ... for this long (a tmpfs of its own: see soak())


@dataclass
class Attempt:
    """One attempt of one step: how it ended and, if killed, where it was."""

    night: str
    broker: str
    step: str
    attempt: int
    outcome: str                      # ok | killed | deployment | disk_full | failed
    seconds: float
    kill_after_s: float | None = None
    last_line: str = ""


@dataclass
class SoakRun:
    work: Path
    data: Path                        # the snapshots, the warehouse and the reports
    config: Path
    nights: list[str]
    brokers: list[SoakBroker]
    attempts: list[Attempt] = field(default_factory=list)
    deployment_kills: list[str] = field(default_factory=list)
    disk_squeezes: list[str] = field(default_factory=list)
    mailbox: Mailbox | None = None
    posts: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def kills(self) -> list[Attempt]:
        return [a for a in self.attempts if a.outcome in ("killed", "deployment")]

    def failures(self) -> list[Attempt]:
        return [a for a in self.attempts if a.outcome == "failed"]

    @property
    def warehouse(self) -> Path:
        return self.data / "warehouse"

    @property
    def snapshots(self) -> Path:
        return self.data / "snapshots"


class SoakError(RuntimeError):
    """A step failed on every attempt: the soak cannot go on."""


# --------------------------------------------------------------------------- config


def write_soak_config(work: Path, brokers: list[SoakBroker], *, warehouse: Path,
                      checks_output: Path, snapshot_root: Path) -> Path:
    """A pipeline config on the in-process engines delivering alerts by e-mail and
    webhook; every error and warning finding raises the snapshot's alert."""
    alerts = yaml.safe_load((REPO / "config" / "alerts.yaml").read_text())
    alerts["checks"] = {"severities": ["error", "warning"]}
    alerts["channels"] = {"email": {"smtp_conn_id": SMTP_CONN, "from": "rmq@example.com",
                                    "to": ["oncall@example.com"]},
                          "webhook": {"conn_id": WEBHOOK_CONN}}
    (work / "alerts.yaml").write_text(yaml.safe_dump(alerts))
    config = {"snapshot_root": str(snapshot_root), "warehouse": str(warehouse),
              "checks_output": str(checks_output), "deliver_alerts": True,
              "alerts_config": str(work / "alerts.yaml"), "check_engine": "local",
              "load_engine": "local", "retention_days": 30,
              "brokers": [b.source(0) for b in brokers]}
    path = work / f"{warehouse.name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@contextmanager
def alert_servers() -> Iterator[tuple[Mailbox, list[dict[str, Any]], dict[str, str]]]:
    """A real SMTP server and webhook on 127.0.0.1, and the Airflow connections to them."""
    from aiosmtpd.controller import Controller

    mailbox, smtp_port = Mailbox(), free_port()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    webhook, posts = start_webhook()
    try:
        yield mailbox, posts, {
            f"AIRFLOW_CONN_{SMTP_CONN.upper()}": smtp_connection(smtp_port),
            f"AIRFLOW_CONN_{WEBHOOK_CONN.upper()}": webhook_connection(
                webhook.server_address[1])}
    finally:
        smtp.stop()
        webhook.shutdown()


# --------------------------------------------------------------------------- the soak


class _Deployment:
    """The running step processes; kill them all at once, as a dying host would."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[int, subprocess.Popen[str]] = {}
        self.killed: set[int] = set()

    def started(self, process: subprocess.Popen[str]) -> None:
        with self.lock:
            self.running[process.pid] = process

    def ended(self, process: subprocess.Popen[str]) -> bool:
        """Forget the process; True when the deployment kill ended it."""
        with self.lock:
            self.running.pop(process.pid, None)
            return process.pid in self.killed

    def kill_all(self, spare: set[int]) -> int:
        with self.lock:
            victims = [p for pid, p in self.running.items() if pid not in spare]
            for process in victims:
                self.killed.add(process.pid)
                _kill(process)
            return len(victims)


def _kill(process: subprocess.Popen[str]) -> None:
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


class Soak:
    """Runs the nights; see the module's docstring."""

    def __init__(self, run: SoakRun, faults: Faults, env: dict[str, str]) -> None:
        self.run, self.faults, self.env = run, faults, env
        self.deployment = _Deployment()
        self.last_attempts: set[int] = set()    # pids of attempts no kill may touch
        self.slots = threading.Semaphore(faults.parallelism)
        self.record_lock = threading.Lock()
        self.steps_dir = run.work / "steps"
        self.steps_dir.mkdir(exist_ok=True)

    def rng(self, *key: object) -> random.Random:
        return random.Random("/".join(str(k) for k in (self.faults.seed, *key)))

    # one night ------------------------------------------------------------------

    def night(self, index: int) -> None:
        night = self.run.nights[index]
        stop = threading.Event()
        faults = [threading.Thread(target=self._deployment_killer, args=(night, stop)),
                  threading.Thread(target=self._disk_squeezer, args=(night, stop))]
        for thread in faults:
            thread.start()
        try:
            errors: list[BaseException] = []
            threads = [threading.Thread(target=self._guard, args=(errors, self.broker_night,
                                                                  index, broker))
                       for broker in self.run.brokers]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            if errors:
                raise errors[0]
            for cluster, members in clusters_on(self.run.brokers, index).items():
                checked = self.step(night, f"cluster:{cluster}", "check_cluster", {
                    "cluster": cluster, "brokers": members, "snapshot_id": night})
                self.step(night, f"cluster:{cluster}", "alert_cluster", checked)
        finally:
            stop.set()
            for thread in faults:
                thread.join()

    def _guard(self, errors: list[BaseException], call: Any, *args: Any) -> None:
        try:
            call(*args)
        except BaseException as error:  # handed to the night's thread
            errors.append(error)

    def broker_night(self, index: int, broker: SoakBroker) -> None:
        night = self.run.nights[index]
        taken = self.step(night, broker.name, "snapshot",
                          {"broker": broker.source(index), "snapshot_id": night})
        loaded = self.step(night, broker.name, "load", taken)
        self.step(night, broker.name, "lookup", loaded)  # the DAG runs it beside the check
        delivered = self.step(night, broker.name, "alert",
                              self.step(night, broker.name, "check", loaded))
        self.step(night, broker.name, "maintain", delivered)
        self.step(night, broker.name, "clean_up", taken)

    def _deployment_killer(self, night: str, stop: threading.Event) -> None:
        rng = self.rng(night, "deployment")
        if rng.random() >= self.faults.deployment_kill_chance:
            return
        if stop.wait(rng.uniform(0, self.faults.deployment_window_s)):
            return
        with self.record_lock:
            spare = set(self.last_attempts)
        victims = self.deployment.kill_all(spare)
        self.run.deployment_kills.append(f"{night}: {victims} step(s) killed")

    def _disk_squeezer(self, night: str, stop: threading.Event) -> None:
        """Fill the data's filesystem for a while, as another tenant of the disk would:
        its tmpfs shrunk to what it holds, then given back its size."""
        rng = self.rng(night, "disk")
        if rng.random() >= self.faults.disk_squeeze_chance:
            return
        if stop.wait(rng.uniform(0, self.faults.deployment_window_s)):
            return
        size = _tmpfs_size(self.run.data)
        stats = os.statvfs(self.run.data)
        used = (stats.f_blocks - stats.f_bfree) * stats.f_frsize
        _resize_tmpfs(self.run.data, used + 64 * 1024)
        try:
            stop.wait(self.faults.disk_squeeze_s)
        finally:
            _resize_tmpfs(self.run.data, size)
        self.run.disk_squeezes.append(
            f"{night}: full at {used / 2**20:.1f} MiB for {self.faults.disk_squeeze_s:g} s")

    # one step -------------------------------------------------------------------

    def step(self, night: str, broker: str, step: str, given: dict[str, Any]) -> dict[str, Any]:
        """Run the step until an attempt succeeds; its result (the DAG's XCom)."""
        for attempt in range(1, self.faults.attempts + 1):
            rng = self.rng(night, broker, step, attempt)
            last = attempt == self.faults.attempts
            kill_after = None if last or rng.random() >= self.faults.kill_chance \
                else rng.uniform(0, KILL_WINDOW_S[step])
            with self.slots:
                result, record = self._attempt(night, broker, step, attempt, given,
                                               kill_after, last)
            with self.record_lock:
                self.run.attempts.append(record)
            if result is not None:
                return result
            # the retry delay; after a full disk, long enough for the space to come back
            time.sleep(self.faults.disk_squeeze_s if record.outcome == "disk_full" else 0.2)
        raise SoakError(f"{broker} {step} of {night}: every attempt failed; last: "
                        f"{self.run.attempts[-1].last_line}")

    def _attempt(self, night: str, broker: str, step: str, attempt: int,
                 given: dict[str, Any], kill_after: float | None,
                 last: bool) -> tuple[dict[str, Any] | None, Attempt]:
        name = f"{night}-{broker.replace(':', '_')}-{step}-{attempt}"
        given_path, out_path = self.steps_dir / f"{name}.in", self.steps_dir / f"{name}.out"
        log_path = self.steps_dir / f"{name}.log"
        given_path.write_text(json.dumps(given, default=str))
        started = time.monotonic()
        with log_path.open("w") as log:
            process = subprocess.Popen(
                [sys.executable, str(STEP), step, str(self.run.config), str(given_path),
                 str(out_path)], cwd=REPO, env=self.env, stdout=subprocess.PIPE,
                stderr=log, text=True, start_new_session=True)
            if last:
                with self.record_lock:
                    self.last_attempts.add(process.pid)
            self.deployment.started(process)
            killed = self._supervise(process, kill_after)
            by_deployment = self.deployment.ended(process)
        seconds = round(time.monotonic() - started, 2)
        outcome = ("deployment" if by_deployment else "killed" if killed
                   else "ok" if process.returncode == 0 and out_path.exists()
                   else "disk_full" if DISK_FULL in log_path.read_text(errors="replace")
                   else "failed")
        last_line = _last_line(log_path)
        if outcome == "failed":  # a signal's death leaves no line of its own: say it
            last_line += f" [exit {process.returncode}]"
        record = Attempt(night, broker, step, attempt, outcome, seconds,
                         kill_after if killed else None, last_line)
        if outcome != "ok":
            return None, record
        return json.loads(out_path.read_text()), record

    def _supervise(self, process: subprocess.Popen[str], kill_after: float | None) -> bool:
        """Wait for the process; kill it ``kill_after`` seconds after it said "ready".
        True when this kill ended it (not the deployment's)."""
        assert process.stdout is not None
        with process.stdout:
            process.stdout.readline()  # "ready", or nothing when it died before
        deadline = None if kill_after is None else time.monotonic() + kill_after
        while process.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                _kill(process)
                process.wait()
                return True
            time.sleep(0.02)
        return False


def _tmpfs_size(mount: Path) -> int:
    stats = os.statvfs(mount)
    return stats.f_blocks * stats.f_frsize


def _resize_tmpfs(mount: Path, size: int) -> None:
    """Resize the tmpfs at ``mount`` (as root): smaller than what it holds is refused."""
    subprocess.run(["mount", "-o", f"remount,size={max(size // 1024, 1)}k", str(mount)],
                   check=True, capture_output=True)


def _last_line(log: Path) -> str:
    """The last thing a step logged, without its time stamp: where it was."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    if not lines:
        return "(nothing logged: starting)"
    return lines[-1].split(" ", 2)[-1][:200]


def soak(work: Path, brokers: list[SoakBroker], nights: list[str], faults: Faults,
         data: Path | None = None) -> SoakRun:
    """Run ``nights`` of ``brokers`` under ``faults``, in ``work``; see :func:`verify`.
    The snapshots, the warehouse and the reports go to ``data`` (default ``work``), which
    must be a tmpfs of its own, resizable by this process (root), when ``faults`` squeeze
    the disk."""
    work.mkdir(parents=True, exist_ok=True)
    data = data or work
    if faults.disk_squeeze_chance and not os.path.ismount(data):
        raise ValueError(f"{data}: the disk squeezes need a tmpfs of its own there")
    config = write_soak_config(work, brokers, warehouse=data / "warehouse",
                               checks_output=data / "checks", snapshot_root=data / "snapshots")
    run = SoakRun(work, data, config, nights, brokers)
    started = time.monotonic()
    with alert_servers() as (mailbox, posts, connections):
        env = {**os.environ, **connections, "PYTHONPATH": str(REPO)}
        runner = Soak(run, faults, env)
        for index in range(len(nights)):
            runner.night(index)
        run.mailbox = mailbox
        run.posts = list(posts)
    run.seconds = round(time.monotonic() - started, 1)
    return run


# --------------------------------------------------------------------------- verify


@dataclass
class Verdict:
    """What the soak's outcome was compared with, and every difference (all must be 0)."""

    nights: int
    brokers: int
    attempts: int
    kills: int
    kills_by_step: dict[str, int]
    deployment_kills: list[str]
    disk_squeezes: list[str]
    disk_full_failures: int
    failed_attempts: list[str]
    rows_compared: int
    table_differences: dict[str, list[str]]
    snapshot_differences: list[str]
    alerts: int
    deliveries: dict[str, int]
    undelivered: list[str]
    unexplained_duplicates: list[str]
    duplicates_after_kills: int
    leftovers: list[str]
    seconds: float
    oracle_seconds: float
    where_kills_landed: list[str]

    def clean(self) -> bool:
        return not (self.failed_attempts or self.table_differences
                    or self.snapshot_differences or self.undelivered
                    or self.unexplained_duplicates or self.leftovers)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def verify(run: SoakRun) -> Verdict:
    """Compare the soak's warehouse, snapshots, alerts and leftovers with an undisturbed
    serial run of the same nights (see the module's docstring)."""
    started = time.monotonic()
    oracle = serial_oracle(run)
    oracle_seconds = round(time.monotonic() - started, 1)
    soaked, serial = warehouse_content(run.warehouse), warehouse_content(oracle)
    differences = {}
    for name in sorted(set(soaked) | set(serial)):
        only = sorted(set(soaked.get(name, [])) ^ set(serial.get(name, [])))
        if only or soaked.get(name) != serial.get(name):
            differences[name] = only[:5] or ["same rows, different counts"]
    kills = run.kills()
    alerts, deliveries, undelivered, unexplained, explained = _alert_outcome(run)
    return Verdict(
        nights=len(run.nights), brokers=len(run.brokers), attempts=len(run.attempts),
        kills=len(kills), kills_by_step=dict(Counter(a.step for a in kills)),
        deployment_kills=run.deployment_kills, disk_squeezes=run.disk_squeezes,
        disk_full_failures=sum(a.outcome == "disk_full" for a in run.attempts),
        failed_attempts=[f"{a.night} {a.broker} {a.step} #{a.attempt}: {a.last_line}"
                         for a in run.failures()],
        rows_compared=sum(len(rows) for rows in soaked.values()),
        table_differences=differences, snapshot_differences=_snapshot_differences(run),
        alerts=alerts, deliveries=deliveries, undelivered=undelivered,
        unexplained_duplicates=unexplained, duplicates_after_kills=explained,
        leftovers=leftovers(run), seconds=run.seconds, oracle_seconds=oracle_seconds,
        where_kills_landed=[f"{a.night} {a.broker} {a.step} #{a.attempt} "
                            f"{a.outcome} after {a.seconds:.1f} s: {a.last_line}"
                            for a in kills])


def serial_oracle(run: SoakRun) -> Path:
    """The soak's snapshots (the same ids and times of taking) loaded, checked, alerted
    and maintained one step after another, in this process, into a fresh warehouse."""
    from jobs import pipeline
    from jobs.pipeline_config import BrokerSource, load_config

    sys.path.insert(0, str(REPO / "dags"))
    from notifiers import deliver

    warehouse = run.work / "serial" / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    config = load_config(write_soak_config(
        warehouse.parent, run.brokers, warehouse=warehouse,
        checks_output=warehouse.parent / "checks", snapshot_root=run.snapshots))

    def send(alert: Any, rules: Any, only: list[str]) -> dict[str, str]:
        return deliver(alert, rules, only=only, context={})

    with alert_servers() as (_, _, connections), environment(connections):
        for index, night in enumerate(run.nights):
            for broker in run.brokers:
                taken = pipeline.snapshot_broker(
                    config, BrokerSource(**broker.source(index)), night)
                checked = pipeline.check_broker(no_spark, config, pipeline.load_broker(
                    no_spark, config, taken), config.alerts_config)
                pipeline.maintain_broker(config, pipeline.deliver_alert(config, checked, send))
            for cluster, members in clusters_on(run.brokers, index).items():
                outcome = pipeline.check_cluster(config, cluster, members, night)
                pipeline.deliver_alert(config, outcome, send)
    return warehouse


def clusters_on(brokers: list[SoakBroker], night: int) -> dict[str, list[dict[str, Any]]]:
    """The fleet's clusters as the DAG lists them (jobs.pipeline_config.clusters_of), each
    with its brokers as they were on ``night``."""
    from jobs.pipeline_config import BrokerSource, clusters_of

    clusters = clusters_of([BrokerSource(**broker.source(night)) for broker in brokers])
    return {name: [member.as_dict() for member in members]
            for name, members in sorted(clusters.items())}


def _snapshot_differences(run: SoakRun) -> list[str]:
    """Each night's snapshot of each broker against an undisturbed snapshot of the same
    store, taken one after another: the same files, sizes, data lengths and checksums."""
    from jobs.pipeline_config import BrokerSource
    from jobs.snapshot.roots import snapshots_at
    from jobs.snapshot.sources import LocalSource

    fresh = run.work / "fresh-snapshots"
    root, taken = snapshots_at(fresh), snapshots_at(run.snapshots)
    differences = []
    for index, night in enumerate(run.nights):
        for broker in run.brokers:
            source = BrokerSource(**broker.source(index))
            expected = root.take(LocalSource(Path(source.store)), broker.name, night)
            actual = taken.manifest(broker.name, night)
            if _entries(expected) != _entries(actual):
                differences.append(f"{broker.name} {night}: "
                                   f"{sorted(set(_entries(expected)) ^ set(_entries(actual)))[:3]}")
    return differences


def _entries(manifest: Any) -> list[tuple[Any, ...]]:
    return sorted((f.path, f.kind, f.size, f.data_length, f.sha256) for f in manifest.files)


def _alert_outcome(run: SoakRun) -> tuple[int, dict[str, int], list[str], list[str], int]:
    """The recorded alerts against what the SMTP server and the webhook received."""
    from jobs.lakehouse import tables as T
    from jobs.lakehouse.driver_rows import read_rows

    rows = read_rows(T.table_location(str(run.warehouse), T.ALERTS))
    assert run.mailbox is not None
    received: Counter[tuple[str, str, str]] = Counter()
    for envelope in run.mailbox.envelopes:
        text = envelope.content.decode(errors="replace")
        for row in rows:
            if row["title"] in " ".join(text.split()):
                received[("email", row["broker"], row["snapshot_id"])] += 1
    for post in run.posts:
        header = post["json"]["blocks"][0]["text"]["text"]
        for row in rows:
            if header == row["title"][:150]:
                received[("webhook", row["broker"], row["snapshot_id"])] += 1
    # sent again on a retry: at least once, when the attempt that sent it died (a kill) or
    # could not record its answer (the disk filled between the send and the record)
    interrupted = {(a.broker, a.night) for a in run.attempts if a.step.startswith("alert")
                   and a.outcome in ("killed", "deployment", "disk_full")}
    undelivered, unexplained, explained = [], [], 0
    for row in rows:
        for channel in ("email", "webhook"):
            status = dict(row["delivery"]).get(channel)
            count = received[(channel, row["broker"], row["snapshot_id"])]
            alert = f"{row['broker']} {row['snapshot_id']} {channel}"
            if status != "sent" or count == 0:
                undelivered.append(f"{alert}: recorded {status!r}, received {count}")
            elif count > 1 and (row["broker"], row["snapshot_id"]) not in interrupted:
                unexplained.append(f"{alert}: received {count} times")
            elif count > 1:
                explained += count - 1
    by_channel = Counter(channel for channel, _, _ in received.elements())
    return len(rows), dict(by_channel), undelivered, unexplained, explained


def leftovers(run: SoakRun) -> list[str]:
    """A snapshot's partial directory, a load's staging files, a held lock."""
    from jobs.lakehouse.locks import try_lock
    from jobs.lakehouse.staged_append import STAGING
    from jobs.snapshot.manifest import PARTIAL_PREFIX

    found = [str(p) for p in run.snapshots.glob(f"*/{PARTIAL_PREFIX}*")]
    found += [str(p) for p in run.warehouse.glob(f"*/{STAGING}/**/*")
              if p.is_file()]
    for broker in run.brokers:
        with try_lock(run.warehouse, f"load-{broker.name}", {"by": "soak"}) as held:
            if not held:
                found.append(f"lock load-{broker.name} still held")
    return found


def summary(verdict: Verdict) -> str:
    """The soak's report in a few lines."""
    return "\n".join([
        f"nights {verdict.nights}, brokers {verdict.brokers}, attempts {verdict.attempts}, "
        f"kills {verdict.kills} {verdict.kills_by_step}, deployment kills "
        f"{verdict.deployment_kills or 'none'}, {verdict.seconds} s (the serial run "
        f"{verdict.oracle_seconds} s)",
        f"rows compared {verdict.rows_compared:,}, tables differing "
        f"{len(verdict.table_differences)}, snapshots differing "
        f"{len(verdict.snapshot_differences)}, failed attempts "
        f"{len(verdict.failed_attempts)}",
        f"alerts {verdict.alerts}, deliveries {verdict.deliveries}, undelivered "
        f"{len(verdict.undelivered)}, duplicates after a killed or disk-full delivery "
        f"{verdict.duplicates_after_kills}, unexplained duplicates "
        f"{len(verdict.unexplained_duplicates)}",
        f"disk full {verdict.disk_squeezes or 'never'}, attempts failed by it "
        f"{verdict.disk_full_failures}; leftovers {len(verdict.leftovers)}",
        *(f"  kill: {line}" for line in verdict.where_kills_landed),
        *(f"  failed: {line}" for line in verdict.failed_attempts),
        *(f"  differs: {table}: {rows}" for table, rows in verdict.table_differences.items()),
        *(f"  snapshot differs: {line}" for line in verdict.snapshot_differences),
        *(f"  not delivered: {line}" for line in verdict.undelivered),
        *(f"  sent twice: {line}" for line in verdict.unexplained_duplicates),
        *(f"  left behind: {line}" for line in verdict.leftovers)])
