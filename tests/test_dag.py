"""The Airflow DAG rmq_nightly: its shape, and real runs with ``dag.test()`` (what
``airflow dags test`` calls) over a real broker's store read through a real sshd.

One scenario, three runs of the DAG, on the growing harness broker (hot snapshots s1 and s2
of one running 5.5.0 broker), reached over SFTP with Airflow's SSH connection:

1. logical date D1 with the store as s1: snapshot, load, check, alert (real SMTP and
   webhook servers on 127.0.0.1 receive it);
2. D1 again: nothing changes, nothing is sent twice;
3. D2 after the broker received more messages (the store is now s2) and with a body's
   bytes flipped in a commitlog file: only the new bytes are copied and loaded, and the
   CRC failure ends in an error alert that the notifiers deliver.
"""

from __future__ import annotations

import itertools
import json
import logging
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from endpoints import Mailbox, free_port, smtp_connection, start_webhook, webhook_connection
from lakehouse import all_content

from jobs import tables as T
from jobs.snapshot import MANIFEST, Manifest, snapshot_dir, snapshot_store
from jobs.tables import Registry
from rmqlib.commitlog import scan_segment
from rmqlib.segments import list_segments

REPO = Path(__file__).resolve().parent.parent
D1, D2 = datetime(2026, 11, 20, 2, tzinfo=UTC), datetime(2026, 11, 21, 2, tzinfo=UTC)
S1, S2 = "2026-11-20T0200Z", "2026-11-21T0200Z"
BROKER = "broker-a"
TASKS = {"list_brokers", "broker.snapshot", "broker.load", "broker.check", "broker.alert",
         "broker.clean_up"}


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A pipeline config for the tests, Airflow's SQLite DB migrated, alert endpoints up,
    and the DAG from a DagBag of dags/."""
    from aiosmtpd.controller import Controller

    work = tmp_path_factory.mktemp("nightly")
    config = work / "pipeline.yaml"
    config.write_text(json.dumps({
        "schedule": "0 2 * * *", "snapshot_root": str(work / "snapshots"),
        "warehouse": str(work / "warehouse"), "retention_days": 7, "retries": 0,
        "retry_delay_s": 1, "deliver_alerts": True, "brokers": []}))
    mailbox, smtp_port = Mailbox(), free_port()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    webhook, posts = start_webhook()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RMQ_PIPELINE_CONFIG", str(config))
        patch.delenv("RMQ_WAREHOUSE", raising=False)
        patch.setenv("AIRFLOW_CONN_RMQ_ALERTS_SMTP", smtp_connection(smtp_port))
        patch.setenv("AIRFLOW_CONN_RMQ_ALERTS_WEBHOOK",
                     webhook_connection(webhook.server_address[1]))
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                       check=True, capture_output=True)
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=str(REPO / "dags"))
        yield SimpleNamespace(work=work, bag=bag, dag=bag.get_dag("rmq_nightly"),
                              mailbox=mailbox, posts=posts, patch=patch)
    smtp.stop()
    webhook.shutdown()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_the_dag_imports_with_its_tasks_retries_and_assets(airflow):  # type: ignore[no-untyped-def]
    assert airflow.bag.import_errors == {}
    dag = airflow.dag
    assert set(dag.task_ids) == TASKS
    chain = ["broker.snapshot", "broker.load", "broker.check", "broker.alert",
             "broker.clean_up"]
    for upstream, downstream in itertools.pairwise(chain):
        assert downstream in dag.get_task(upstream).downstream_task_ids
    assert dag.get_task("list_brokers").downstream_task_ids == {"broker.snapshot"}
    assert "broker.clean_up" in dag.get_task("broker.snapshot").downstream_task_ids
    assert dag.max_active_runs == 1 and not dag.catchup
    assert dag.timetable.expression == "0 2 * * *"
    for task_id in TASKS:
        task = dag.get_task(task_id)
        assert task.retries == 0  # the test config's; retry_delay_s 1, doubling
        assert task.retry_exponential_backoff == 2.0
    loaded = {asset.name for asset in dag.get_task("broker.load").outlets}
    checked = {asset.name for asset in dag.get_task("broker.check").outlets}
    assert loaded == {f"rmq.{t}" for t in T.TABLES} - checked
    assert checked == {"rmq.check_results", "rmq.consumer_lag", "rmq.alerts"}
    warehouse = airflow.work / "warehouse"
    assert {a.uri for a in dag.get_task("broker.check").outlets} == {
        (warehouse / "rmq.db" / t).as_uri() for t in ("check_results", "consumer_lag", "alerts")}


def flip_body_bytes(store: Path) -> int:
    """Overwrite 8 bytes inside a body of the first record of the second-newest commitlog
    file with data (the frame stays whole: a CRC failure, not a torn record); returns the
    record's physical offset."""
    segment = [s for s in list_segments(store / "commitlog")][-3]
    victim = next(r for r in scan_segment(segment.path) if len(r.body) >= 64)
    record = segment.path.read_bytes()[victim.position:victim.position + victim.total_size]
    with open(segment.path, "r+b") as handle:
        handle.seek(victim.position + record.index(victim.body) + 10)
        handle.write(b"\xee" * 8)
    return victim.physical_offset


@pytest.fixture(scope="module")
def nightly(airflow, spark, growing_store, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The three runs; returns what each left behind."""
    from sshd import running_sshd

    source = airflow.work / "broker-store"
    shutil.copytree(growing_store / "snapshots" / "s1" / "store", source)
    registry = Registry(spark, airflow.work / "warehouse")
    with running_sshd(tmp_path_factory.mktemp("sshd")) as sshd:
        airflow.patch.setenv("AIRFLOW_CONN_RMQ_BROKER_SSH", sshd.airflow_connection())
        airflow.patch.setenv("AIRFLOW_VAR_RMQ_BROKERS", json.dumps(
            [{"name": BROKER, "store": str(source), "ssh_conn_id": "rmq_broker_ssh"}]))
        first = airflow.dag.test(logical_date=D1)
        after_first = SimpleNamespace(content=all_content(registry),
                                      runs={r["run_id"] for r in registry.read_rows(
                                          T.LOAD_RUNS)},
                                      mails=len(airflow.mailbox.envelopes),
                                      posts=len(airflow.posts))
        again = airflow.dag.test(logical_date=D1)
        after_again = SimpleNamespace(content=all_content(registry),
                                      runs=registry.read_rows(T.LOAD_RUNS),
                                      mails=len(airflow.mailbox.envelopes),
                                      posts=len(airflow.posts))
        shutil.rmtree(source)
        shutil.copytree(growing_store / "snapshots" / "s2" / "store", source)
        flipped = flip_body_bytes(source)
        second = airflow.dag.test(logical_date=D2)
    return SimpleNamespace(first=first, again=again, second=second, registry=registry,
                           after_first=after_first, after_again=after_again,
                           flipped=flipped, source=source)


def manifest(airflow, snapshot_id: str) -> Manifest:  # type: ignore[no-untyped-def]
    return Manifest.load(snapshot_dir(airflow.work / "snapshots", BROKER, snapshot_id)
                         / MANIFEST)


@pytest.mark.spark
@pytest.mark.broker
def test_a_run_snapshots_loads_checks_and_alerts(airflow, nightly, growing_store):  # type: ignore[no-untyped-def]
    assert nightly.first.state == "success"
    taken = manifest(airflow, S1)
    assert taken.source.startswith("ssh://rmq_broker_ssh/") and taken.abort_present
    counts = {t: len(nightly.registry.read_rows(t, broker=BROKER)) for t in
              (T.MESSAGES, T.QUEUE_ENTRIES, T.CONSUMER_LAG)}
    assert counts[T.MESSAGES] > 1000 and counts[T.QUEUE_ENTRIES] > 1000
    assert nightly.registry.read_rows(T.CONSUMER_LAG, snapshot_id=S1)
    checks = airflow.work / "warehouse" / "_checks"
    assert "chart-lag" in (checks / "reports" / BROKER / f"{S1}.html").read_text()
    assert (checks / "gx" / "gx" / "uncommitted" / "data_docs" / "local_site"
            / "index.html").is_file()
    # Whatever the first night found, its alert (if any) was delivered exactly once.
    alerts = nightly.registry.read_rows(T.ALERTS, snapshot_id=S1)
    sent = 1 if alerts else 0
    assert (nightly.after_first.mails, nightly.after_first.posts) == (sent, sent)
    if alerts:
        assert dict(alerts[0]["delivery"]) == {"email": "sent", "webhook": "sent"}


@pytest.mark.spark
@pytest.mark.broker
def test_running_the_same_logical_date_again_changes_nothing(airflow, nightly):  # type: ignore[no-untyped-def]
    assert nightly.again.state == "success"
    assert nightly.after_again.content == nightly.after_first.content
    assert (nightly.after_again.mails, nightly.after_again.posts) == (
        nightly.after_first.mails, nightly.after_first.posts)
    new_runs = [r for r in nightly.after_again.runs if r["run_id"] not in nightly.after_first.runs]
    assert new_runs and all(r["outcome"] != "loaded" and r["bytes_read"] == 0
                            for r in new_runs)
    assert manifest(airflow, S1).from_broker > 0  # the snapshot was not taken again


@pytest.mark.spark
@pytest.mark.broker
def test_a_later_date_copies_and_loads_only_new_bytes(airflow, nightly):  # type: ignore[no-untyped-def]
    assert nightly.second.state == "success"
    first, second = manifest(airflow, S1), manifest(airflow, S2)
    linked = {f.path for f in second.files if f.how == "linked"}
    assert {"commitlog/00000000000000000000", "commitlog/00000000000001048576"} <= linked
    for path in linked:  # the same inode: not a byte of them crossed SSH again
        old = snapshot_store(airflow.work / "snapshots", BROKER, S1) / path
        new = snapshot_store(airflow.work / "snapshots", BROKER, S2) / path
        assert old.stat().st_ino == new.stat().st_ino
    commitlog = [f for f in second.files if f.kind == "commitlog"]
    assert sum(f.from_broker for f in commitlog) < sum(f.data_length for f in commitlog)
    assert second.from_broker < first.from_broker + second.data_bytes - first.data_bytes \
        + sum(f.size for f in second.files if f.how == "copied" and f.kind != "commitlog")
    # The load read past the marks only: the new rows are exactly the records at or after
    # the end of what the first night loaded.
    registry = nightly.registry
    mark = max(r["physical_offset"] + r["total_size"] for r in registry.read_rows(
        T.MESSAGES, broker=BROKER, first_snapshot_id=S1))  # the end of the first load
    new_rows = registry.read_rows(T.MESSAGES, broker=BROKER, first_snapshot_id=S2)
    store = snapshot_store(airflow.work / "snapshots", BROKER, S2)
    quarantined = {r["global_offset"] for r in registry.read_rows(
        T.QUARANTINE, broker=BROKER, snapshot_id=S2) if r["stream"] == "commitlog"}
    expected = {r.physical_offset for s in list_segments(store / "commitlog")
                for r in scan_segment(s.path) if r.physical_offset >= mark} - quarantined
    assert {r["physical_offset"] for r in new_rows} == expected
    loaded = {r["table_name"]: r for r in registry.read_rows(
        T.LOAD_RUNS, broker=BROKER, snapshot_id=S2) if r["outcome"] == "loaded"}
    new_bytes = sum(r["total_size"] for r in new_rows)
    assert new_bytes <= loaded[T.MESSAGES]["bytes_read"] < second.data_bytes


@pytest.mark.spark
@pytest.mark.broker
def test_an_injected_fault_ends_in_an_error_alert_the_notifiers_deliver(airflow, nightly):  # type: ignore[no-untyped-def]
    registry = nightly.registry
    results = registry.read_rows(T.CHECK_RESULTS, broker=BROKER, snapshot_id=S2)
    crc = [r for r in results if r["check_name"] == "crc_failure"]
    assert crc and crc[0]["severity"] == "error"
    assert nightly.flipped in crc[0]["sample_offsets"]
    alert = registry.read_rows(T.ALERTS, broker=BROKER, snapshot_id=S2)[0]
    assert alert["severity"] == "error" and any("crc_failure" in f for f in alert["findings"])
    assert dict(alert["delivery"]) == {"email": "sent", "webhook": "sent"}
    assert len(airflow.mailbox.envelopes) == nightly.after_again.mails + 1
    assert len(airflow.posts) == nightly.after_again.posts + 1
    assert S2 in airflow.mailbox.envelopes[-1].content.decode()
    assert "crc_failure" in json.dumps(airflow.posts[-1]["json"])
