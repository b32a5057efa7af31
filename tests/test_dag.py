"""The Airflow DAG rmq_nightly: its shape, and real runs with ``dag.test()`` (what
``airflow dags test`` calls) over a real broker's store read through a real sshd.

One scenario, four runs of the DAG, on the growing harness broker (hot snapshots s1, s2, s3
of one running 5.5.0 broker), reached over SFTP with Airflow's SSH connection:

1. logical date D1 with the store as s1: snapshot, load, check, alert (real SMTP and
   webhook servers on 127.0.0.1 receive it);
2. D2 after the broker received more messages (the store is now s2) and with a body's
   bytes flipped in a commitlog file: only the new bytes are copied and loaded, and the
   CRC failure ends in an error alert that the notifiers deliver;
3. D3 with the store as s3 (retention deleted the two oldest commitlog files);
4. D3 again: nothing changes, its alert is not sent twice.

The harness's consumer groups (G_ALL keeps up, G_SLOW falls behind, G_STOP stopped,
G_RESET reset backwards, G_LOST lost messages to retention, G_STEP catches up in steps)
get their consumer status at the right snapshot, and the alerts say exactly what changed
(tests/test_consumer_status.py has the rules on synthetic rows). A last run has its load
task SIGKILLed: the run's final task still tells the operator which broker and task.
"""

from __future__ import annotations

import itertools
import json
import logging
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from airflow_scheduler import (
    local_executor_env,
    query_metadata,
    wait_for_execution_api,
    wait_until_run_ends,
)
from endpoints import Mailbox, free_port, smtp_connection, start_webhook, webhook_connection
from lakehouse import all_content

from jobs.lakehouse import tables as T
from jobs.lakehouse.tables import Registry
from jobs.snapshot.manifest import MANIFEST, Manifest, snapshot_dir, snapshot_store
from rmqlib.commitlog.records import scan_segment
from rmqlib.common.segments import list_segments

REPO = Path(__file__).resolve().parent.parent
D1, D2 = datetime(2026, 11, 20, 2, tzinfo=UTC), datetime(2026, 11, 21, 2, tzinfo=UTC)
S1, S2 = "2026-11-20T0200Z", "2026-11-21T0200Z"
BROKER = "broker-a"
D3, S3 = datetime(2026, 11, 22, 2, tzinfo=UTC), "2026-11-22T0200Z"
TASKS = {"list_brokers", "broker.snapshot", "broker.load", "broker.lookup", "broker.check",
         "broker.alert", "broker.maintain", "broker.clean_up", "list_clusters",
         "cluster.check_cluster", "cluster.alert_cluster", "run_outcome"}
#: The test's alert rules: consumer status over 2 snapshots, a queue lagging by <= 20 is OK,
#: reminders after 0.0001 days (8.6 s: the next DAG run's snapshot is later than that); no
#: lag-age threshold (the harness stores are hours older than the test's snapshots).
ALERT_RULES = {
    "version": 1,
    "lag": {"topic_kinds": ["normal", "retry"], "rules": [{"group": "*", "max_messages": 100000}]},
    "status": {"window": 2, "ok_lag_messages": 20, "alert_from": "WARN",
               "remind_after_days": 0.0001, "ignore_groups": ["CID_RMQ_SYS_*"]},
    "checks": {"severities": ["error"]},
    "expectations": {"severities": ["error"]},
    "report": {"base_url": "http://127.0.0.1:8080/rmq-reports",
               "page": "{broker}/{snapshot_id}.html"},
    "channels": {"email": {"smtp_conn_id": "rmq_alerts_smtp", "from": "rmq@example.com",
                           "to": ["oncall@example.com"]},
                 "webhook": {"conn_id": "rmq_alerts_webhook"}},
}


@pytest.fixture(scope="module")
def airflow(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A pipeline config for the tests, Airflow's SQLite DB migrated, alert endpoints up,
    and the DAG from a DagBag of dags/."""
    from aiosmtpd.controller import Controller

    work = tmp_path_factory.mktemp("nightly")
    config = work / "pipeline.yaml"
    (work / "alerts.yaml").write_text(json.dumps(ALERT_RULES))
    config.write_text(json.dumps({
        "schedule": "0 2 * * *", "snapshot_root": str(work / "snapshots"),
        "warehouse": str(work / "warehouse"), "retention_days": 7, "retries": 0,
        "retry_delay_s": 1, "deliver_alerts": True, "brokers": [],
        "alerts_config": str(work / "alerts.yaml")}))
    mailbox, smtp_port = Mailbox(), free_port()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    webhook, posts = start_webhook()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RMQ_PIPELINE_CONFIG", str(config))
        patch.delenv("RMQ_WAREHOUSE", raising=False)
        # dag.test() runs the tasks in this process, whose Spark session other tests share
        patch.setenv("RMQ_SPARK_SHARED_SESSION", "1")
        patch.setenv("AIRFLOW_CONN_RMQ_ALERTS_SMTP", smtp_connection(smtp_port))
        patch.setenv("AIRFLOW_CONN_RMQ_ALERTS_WEBHOOK",
                     webhook_connection(webhook.server_address[1]))
        subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
                       check=True, capture_output=True)
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=str(REPO / "dags"))
        yield SimpleNamespace(work=work, bag=bag, dag=bag.get_dag("rmq_nightly"),
                              mailbox=mailbox, posts=posts, patch=patch, smtp_port=smtp_port,
                              webhook_port=webhook.server_address[1])
    smtp.stop()
    webhook.shutdown()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_the_dag_imports_with_its_tasks_retries_and_assets(airflow):  # type: ignore[no-untyped-def]
    assert airflow.bag.import_errors == {}
    dag = airflow.dag
    assert set(dag.task_ids) == TASKS
    chain = ["broker.snapshot", "broker.load", "broker.check", "broker.alert",
             "broker.maintain", "broker.clean_up"]
    for upstream, downstream in itertools.pairwise(chain):
        assert downstream in dag.get_task(upstream).downstream_task_ids
    # the lookup rows beside the check, off the Spark pool; maintenance compacts them after
    lookup = dag.get_task("broker.lookup")
    assert lookup.upstream_task_ids == {"broker.load"}
    assert lookup.downstream_task_ids == {"broker.maintain"}
    assert lookup.pool != dag.get_task("broker.load").pool
    assert dag.get_task("list_brokers").downstream_task_ids == {"broker.snapshot",
                                                                "list_clusters"}
    final = dag.get_task("run_outcome")   # runs whatever happened: tells about failures
    assert final.trigger_rule == "all_done" and final.retries == 0
    # the clusters' stage runs after every broker, whatever happened to them
    assert dag.get_task("broker.clean_up").downstream_task_ids == {"cluster.check_cluster"}
    assert dag.get_task("cluster.check_cluster").trigger_rule == "all_done"
    assert dag.get_task("cluster.alert_cluster").downstream_task_ids == {"run_outcome"}
    assert "broker.clean_up" in dag.get_task("broker.snapshot").downstream_task_ids
    assert dag.max_active_runs == 1 and not dag.catchup
    assert dag.timetable.expression == "0 2 * * *"
    for task_id in TASKS - {"run_outcome"}:
        task = dag.get_task(task_id)
        assert task.retries == 0  # the test config's; retry_delay_s 1, doubling
        assert task.retry_exponential_backoff == 2.0
    loaded = {asset.name for asset in dag.get_task("broker.load").outlets}
    checked = {asset.name for asset in dag.get_task("broker.check").outlets}
    clustered = {asset.name for asset in dag.get_task("cluster.check_cluster").outlets}
    assert clustered == {f"rmq.{t}" for t in ("cluster_lag", "replica_status", "check_results",
                                              "alerts")}
    assert loaded == {f"rmq.{t}" for t in T.TABLES} - checked - clustered - {
        "rmq.message_lookup"}
    assert {asset.name for asset in lookup.outlets} == {"rmq.message_lookup"}
    checked_tables = ("check_results", "consumer_lag", "queue_bounds", "consumer_status", "alerts")
    assert checked == {f"rmq.{t}" for t in checked_tables}
    warehouse = airflow.work / "warehouse"
    assert {a.uri for a in dag.get_task("broker.check").outlets} == {
        (warehouse / "rmq.db" / t).as_uri() for t in checked_tables}


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


def mail_text(envelope) -> str:  # type: ignore[no-untyped-def]
    """Subject and decoded body parts of a received mail (SmtpHook base64-encodes the HTML)."""
    import email

    message = email.message_from_bytes(envelope.content)
    parts = [part.get_payload(decode=True) or b"" for part in message.walk()
             if not part.is_multipart()]
    return "\n".join([str(message["Subject"]), *(p.decode(errors="replace") for p in parts)])


def delivered(airflow) -> SimpleNamespace:  # type: ignore[no-untyped-def]
    """What the SMTP and webhook servers received so far."""
    return SimpleNamespace(mails=[mail_text(e) for e in airflow.mailbox.envelopes],
                           posts=[p["json"] for p in airflow.posts])


@pytest.fixture(scope="module")
def nightly(airflow, spark, growing_store, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The runs of three dates (the third run twice); returns what each left behind."""
    from sshd import running_sshd

    source = airflow.work / "broker-store"
    shutil.copytree(growing_store / "snapshots" / "s1" / "store", source)
    registry = Registry(spark, airflow.work / "warehouse")
    with running_sshd(tmp_path_factory.mktemp("sshd")) as sshd:
        airflow.patch.setenv("AIRFLOW_CONN_RMQ_BROKER_SSH", sshd.airflow_connection())
        airflow.patch.setenv("AIRFLOW_VAR_RMQ_BROKERS", json.dumps(
            [{"name": BROKER, "store": str(source), "ssh_conn_id": "rmq_broker_ssh"}]))
        first = airflow.dag.test(logical_date=D1)
        after_first = delivered(airflow)
        shutil.rmtree(source)
        shutil.copytree(growing_store / "snapshots" / "s2" / "store", source)
        flipped = flip_body_bytes(source)
        second = airflow.dag.test(logical_date=D2)
        after_second = delivered(airflow)
        shutil.rmtree(source)
        shutil.copytree(growing_store / "snapshots" / "s3" / "store", source)
        third = airflow.dag.test(logical_date=D3)
        after_third = delivered(airflow)
        rechecked = check_again(spark, registry, S3)
        # The same date again, on the night whose alert was delivered: nothing may change.
        content, runs = all_content(registry), {r["run_id"] for r in registry.read_rows(
            T.LOAD_RUNS)}
        again = SimpleNamespace(run=airflow.dag.test(logical_date=D3), before=content,
                                runs_before=runs)
        again.after, again.runs = all_content(registry), registry.read_rows(T.LOAD_RUNS)
    return SimpleNamespace(first=first, second=second, third=third, registry=registry,
                           after_first=after_first, after_second=after_second,
                           after_third=after_third, rechecked=rechecked, again=again,
                           after_all=delivered(airflow), flipped=flipped, source=source)


STATE_TABLES = (T.CONSUMER_STATUS, T.ALERTS, T.CONSUMER_LAG)


def check_again(spark, registry, snapshot_id: str) -> SimpleNamespace:  # type: ignore[no-untyped-def]
    """Process a checked (and alerted) snapshot again through the real check step, as a
    re-run after a lost task would: the tables before and after."""
    from lakehouse import table_content

    from jobs import pipeline
    from jobs.pipeline_config import load_config

    before = {t: table_content(registry, t) for t in STATE_TABLES}
    config = load_config()
    pipeline.check_broker(spark, config, {"broker": BROKER, "snapshot_id": snapshot_id,
                                          "skipped": False}, config.alerts_config)
    return SimpleNamespace(before=before,
                           after={t: table_content(registry, t) for t in STATE_TABLES})


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
    assert (checks / "gx" / BROKER / "gx" / "uncommitted" / "data_docs" / "local_site"
            / "index.html").is_file()
    # Whatever the first night found, its alert (if any) was delivered exactly once.
    alerts = nightly.registry.read_rows(T.ALERTS, snapshot_id=S1)
    sent = 1 if alerts else 0
    assert (len(nightly.after_first.mails), len(nightly.after_first.posts)) == (sent, sent)
    if alerts:
        assert dict(alerts[0]["delivery"]) == {"email": "sent", "webhook": "sent"}


@pytest.mark.spark
@pytest.mark.broker
def test_running_the_same_logical_date_again_changes_nothing(airflow, nightly):  # type: ignore[no-untyped-def]
    assert nightly.again.run.state == "success"
    assert nightly.again.after == nightly.again.before
    assert (nightly.after_all.mails, nightly.after_all.posts) == (
        nightly.after_third.mails, nightly.after_third.posts)  # its alert found delivered
    new_runs = [r for r in nightly.again.runs if r["run_id"] not in nightly.again.runs_before]
    assert new_runs and all(r["outcome"] != "loaded" and r["bytes_read"] == 0
                            for r in new_runs)
    assert manifest(airflow, S3).from_broker > 0  # the snapshot was not taken again


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
    assert len(nightly.after_second.mails) == len(nightly.after_first.mails) + 1
    assert len(nightly.after_second.posts) == len(nightly.after_first.posts) + 1
    assert S2 in nightly.after_second.mails[-1]
    assert "crc_failure" in json.dumps(nightly.after_second.posts[-1])


# --------------------------------------------------------------------------- consumer status

LAG_GROUPS = ("G_ALL", "G_STEP", "G_SLOW", "G_STOP", "G_RESET", "G_LOST")
#: Each group's status per snapshot under ALERT_RULES (window 2, lag <= 20 is OK): at s1
#: there is nothing to compare with; the harness's commits (lag_commits.jsonl) do the rest.
EXPECTED_STATUS = {
    S1: dict.fromkeys(LAG_GROUPS, "OK"),
    S2: {"G_ALL": "OK", "G_STEP": "WARN", "G_SLOW": "WARN", "G_STOP": "STOP",
         "G_RESET": "REWIND", "G_LOST": "WARN"},
    S3: {"G_ALL": "OK", "G_STEP": "OK", "G_SLOW": "WARN", "G_STOP": "STOP",
         "G_RESET": "OK", "G_LOST": "LOST"},
}
TRUTH_OF = {S1: "s1", S2: "s2", S3: "s3"}
BULK = ["TopicBulk:0", "TopicBulk:1"]


def group_status(registry, snapshot_id: str) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    return {r["group_name"]: r for r in registry.read_rows(
        T.CONSUMER_STATUS, broker=BROKER, snapshot_id=snapshot_id) if r["level"] == "group"}


def admin_truth(growing_store: Path, snapshot_id: str) -> dict[tuple[str, str, int], dict]:
    lines = (growing_store / "truth" / f"consumer_groups_{TRUTH_OF[snapshot_id]}.jsonl")
    return {(r["group"], r["topic"], r["queueId"]): r
            for r in map(json.loads, lines.read_text().splitlines()) if r}


@pytest.mark.spark
@pytest.mark.broker
def test_each_group_gets_its_status_at_the_right_snapshot(nightly, growing_store):  # type: ignore[no-untyped-def]
    assert nightly.third.state == "success"
    for snapshot_id, expected in EXPECTED_STATUS.items():
        statuses = group_status(nightly.registry, snapshot_id)
        assert {g: statuses[g]["status"] for g in LAG_GROUPS} == expected, snapshot_id
    at_s3 = group_status(nightly.registry, S3)
    # LOST counts what retention deleted: the queues' minimum minus the committed offset
    stats = [json.loads(line) for line in (growing_store / "truth" / "topic_stats_s3.jsonl")
             .read_text().splitlines()]
    minimum = {r["queueId"]: r["minOffset"] for r in stats if r["topic"] == "TopicBulk"}
    admin = admin_truth(growing_store, S3)
    lost = sum(minimum[q] - admin[("G_LOST", "TopicBulk", q)]["consumerOffset"] for q in (0, 1))
    assert lost > 0 and at_s3["G_LOST"]["lost_messages"] == lost
    assert at_s3["G_LOST"]["queues"] == BULK and at_s3["G_STOP"]["queues"] == BULK
    assert at_s3["G_STOP"]["status_since_snapshot_id"] == S2    # STOP since s2, still
    assert at_s3["G_RESET"]["previous_status"] == "REWIND"
    # catch-up at the window's rates: G_SLOW consumes a quarter of what arrives, G_STOP
    # nothing, G_STEP consumed far more than arrived between s2 and s3
    assert at_s3["G_SLOW"]["catch_up"] == at_s3["G_STOP"]["catch_up"] == "never"
    assert at_s3["G_STEP"]["catch_up"] == "eta" and at_s3["G_STEP"]["catch_up_seconds"] > 0
    assert at_s3["G_SLOW"]["consume_rate_per_s"] < at_s3["G_SLOW"]["produce_rate_per_s"]


@pytest.mark.spark
@pytest.mark.broker
def test_lag_equals_consumer_progress_and_the_broker_lag_latency(nightly, growing_store, airflow):  # type: ignore[no-untyped-def]
    """Per queue: Diff, LastTime and broker offset as the admin API returned them before each
    copy (queues whose offsets only the harness's commits move: G_STEP and the commit-only
    groups; TopicBulk receives nothing during a copy, TopicNormal the trickle); group Diff
    Total; the lag latency as the 5.5.0 broker's ConsumerLagCalculator computes it (store
    time of the message AT the consumer offset), read from the snapshot with rmqlib."""
    from rmqlib.commitlog.records import read_record_at
    from rmqlib.queues.consumequeue import decode_queue, walk_queue_tree

    groups = ("G_STEP", "G_SLOW", "G_STOP", "G_RESET", "G_LOST")
    for snapshot_id in EXPECTED_STATUS:
        admin = admin_truth(growing_store, snapshot_id)
        rows = {(r["group_name"], r["topic"], r["queue_id"]): r for r in nightly.registry
                .read_rows(T.CONSUMER_LAG, broker=BROKER, snapshot_id=snapshot_id)}
        store = snapshot_store(airflow.work / "snapshots", BROKER, snapshot_id)
        units = {(q.topic, q.queue_id): {u.queue_offset: u for f in decode_queue(q)
                                         for u in f.units()}
                 for q in walk_queue_tree(store / "consumequeue").queues}
        for key, truth in admin.items():
            if key[0] not in groups:
                continue
            mine = rows[key]
            assert mine["consumer_offset"] == truth["consumerOffset"], key
            last = mine["last_consumed_store_time"]
            assert (int(last.timestamp() * 1000) if last else 0) == max(
                truth["lastTimestamp"], 0), key
            if key[1] == "TopicBulk":
                assert (mine["max_offset"], mine["broker_diff"]) == (
                    truth["brokerOffset"], truth["diff"]), key
            if mine["status"] == "ok" and mine["lag_messages"] > 0:
                unit = units[key[1:]][mine["consumer_offset"]]
                stored = read_record_at(store / "commitlog", unit.commitlog_offset)
                assert int(mine["oldest_unconsumed_store_time"].timestamp() * 1000) == \
                    stored.store_timestamp, key
                assert mine["lag_seconds"] == pytest.approx(
                    mine["snapshot_taken_at"].timestamp() - stored.store_timestamp / 1000)
        status = group_status(nightly.registry, snapshot_id)
        for group in groups[1:]:  # TopicBulk only: the whole group is comparable
            assert status[group]["broker_diff"] == sum(
                t["diff"] for k, t in admin.items() if k[0] == group), (snapshot_id, group)
    retry = nightly.registry.read_rows(T.CONSUMER_LAG, broker=BROKER, snapshot_id=S3,
                                       topic="%RETRY%G_ALL")
    assert retry and all(r["topic_kind"] == "retry" for r in retry)  # shown as RocketMQ does


@pytest.mark.spark
@pytest.mark.broker
def test_alerts_say_exactly_what_changed(nightly, airflow):  # type: ignore[no-untyped-def]
    def lines(snapshot_id: str) -> list[str]:
        rows = nightly.registry.read_rows(T.ALERTS, broker=BROKER, snapshot_id=snapshot_id)
        return list(rows[0]["findings"]) if rows else []

    assert lines(S1) == []           # one snapshot: nothing to judge a trend on
    s2 = lines(S2)
    assert [line.split(":")[0] for line in s2] == [
        "status G_STOP", "check crc_failure [error] file=commitlog/00000000000003145728",
        "status G_LOST", "status G_RESET", "status G_SLOW", "status G_STEP"]  # errors first
    assert s2[0].startswith("status G_STOP: STOP on 2 queues (TopicBulk:0, TopicBulk:1): "
                            "lag 900 messages (Diff Total 900)")
    assert s2[3].startswith("status G_RESET: REWIND on 2 queues (TopicBulk:0, TopicBulk:1)")
    assert "offset went back from 550 to 500" in s2[3]
    s3 = lines(S3)
    assert len(s3) == 6, s3
    assert s3[0].startswith("status G_LOST: LOST on 2 queues (TopicBulk:0, TopicBulk:1): ")
    assert s3[0].endswith("(was WARN)") and "messages lost to retention" in s3[0]
    # what persists since s2 (more than remind_after_days ago) is reminded of, once
    assert all(line.startswith("reminder, still so since ") for line in s3[1:4])
    assert ": status G_STOP: STOP on 2 queues" in s3[1]               # errors ...
    assert ": check crc_failure [error] file=commitlog/" in s3[2]
    assert ": status G_SLOW: WARN on 2 queues" in s3[3] and "never catches up" in s3[3]
    assert sorted(s3[4:]) == ["recovered G_RESET: no longer REWIND (now below the alerting "
                              "status)", "recovered G_STEP: no longer WARN (now below the "
                              "alerting status)"]
    # delivered once each, to the real SMTP and webhook servers, with the report link
    assert len(nightly.after_third.mails) == len(nightly.after_second.mails) + 1
    assert len(nightly.after_third.posts) == len(nightly.after_second.posts) + 1
    mail, post = nightly.after_third.mails[-1], json.dumps(nightly.after_third.posts[-1])
    assert f"rmq-reports/{BROKER}/{S3}.html" in mail and f"{S3}.html" in post
    for line in s3:
        assert line.split(":")[0] in post
    assert "G_LOST: LOST on 2 queues" in mail and "recovered G_RESET" in mail


@pytest.mark.spark
@pytest.mark.broker
def test_checking_a_snapshot_again_changes_nothing_and_sends_nothing(nightly):  # type: ignore[no-untyped-def]
    # the same status rows and alert (raised_at and delivery included), the same lag
    assert nightly.rechecked.after == nightly.rechecked.before
    assert nightly.rechecked.before[T.CONSUMER_STATUS]
    alert = nightly.registry.read_rows(T.ALERTS, broker=BROKER, snapshot_id=S3)[0]
    assert dict(alert["delivery"]) == {"email": "sent", "webhook": "sent"}


@pytest.mark.spark
@pytest.mark.broker
def test_report_shows_each_groups_status_timeline_and_catch_up(nightly, airflow, browser_page):  # type: ignore[no-untyped-def]
    from jobs.report.pages import STATUS_COLORS

    page = airflow.work / "warehouse" / "_checks" / "reports" / BROKER / f"{S3}.html"
    browser_page.goto(page.as_uri())
    browser_page.wait_for_selector("#chart-status.js-plotly-plot", state="attached")
    traces = browser_page.evaluate("""document.getElementById('chart-status').data.map(t => ({
        name: t.name, x: Array.from(t.x), y: Array.from(t.y), color: t.marker.color}))""")
    points = {}  # (group, snapshot index) -> status, x sorted per chart
    xs = sorted({x for t in traces for x in t["x"]})
    assert len(xs) == 3
    for trace in traces:
        assert trace["color"] == STATUS_COLORS[trace["name"]]
        for x, group in zip(trace["x"], trace["y"], strict=True):
            points[(group, xs.index(x))] = trace["name"]
    for index, snapshot_id in enumerate(EXPECTED_STATUS):
        for group, status in EXPECTED_STATUS[snapshot_id].items():
            assert points[(group, index)] == status, (group, snapshot_id)
    assert browser_page.locator("#chart-status .scatterlayer .trace").count() == len(traces)
    rows = browser_page.evaluate("""Array.from(document.querySelectorAll(
        '#status-table tbody tr')).map(r => ({cls: r.className,
            cells: Array.from(r.cells).map(c => c.textContent.trim())}))""")
    table = {r["cells"][0]: r for r in rows}
    assert [r["cells"][0] for r in rows][:2] == ["G_LOST", "G_STOP"]  # worst first
    assert table["G_LOST"]["cells"][1] == "LOST" and "consumer-LOST" in table["G_LOST"]["cls"]
    assert table["G_SLOW"]["cells"][5].startswith("never catches up")
    assert table["G_STEP"]["cells"][5].startswith("catches up in ")
    assert table["G_STOP"]["cells"][2] == S2   # since
    colors = browser_page.evaluate("""Array.from(document.querySelectorAll(
        '#status-table tbody tr')).map(r => getComputedStyle(r).backgroundColor)""")
    ok_row = [r["cells"][0] for r in rows].index("G_ALL")
    assert colors[0] != colors[ok_row]   # a LOST row is highlighted, an OK row is not


# --------------------------------------------------------------------------- a killed task

D_KILLED = datetime(2026, 11, 25, 2, tzinfo=UTC)
KILLED_BROKER = "broker-k"


def _task_process(ti_id: str) -> int | None:
    """The pid of the task process running task instance ``ti_id``: the Task SDK titles it
    ``airflow worker -- <ti id>`` (setproctitle)."""
    wanted = ti_id.replace("-", "").lower()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if title.startswith("airflow worker -- ") and \
                title.split("-- ", 1)[1].strip().replace("-", "").lower() == wanted:
            return int(entry.name)
    return None


RUN_OF_DATE = ("SELECT {columns} FROM task_instance ti JOIN dag_run dr ON dr.dag_id = ti.dag_id "
               "AND dr.run_id = ti.run_id WHERE ti.dag_id = 'rmq_nightly' "
               "AND dr.logical_date LIKE ?")


def _query(database: Path, sql: str, *args: str) -> list[tuple]:
    return query_metadata(database, sql, *args)


def _running_ti(database: Path, task_id: str, run_date: str) -> str | None:
    rows = _query(database, RUN_OF_DATE.format(columns="ti.id") + " AND ti.task_id = ? "
                  "AND ti.state = 'running'", f"{run_date}%", task_id)
    return str(rows[0][0]) if rows else None


def _states(database: Path, run_date: str) -> dict[str, str]:
    return dict(_query(database, RUN_OF_DATE.format(columns="ti.task_id, ti.state"),
                       f"{run_date}%"))


@pytest.fixture(scope="module")
def killed(airflow, growing_store, tmp_path_factory):  # type: ignore[no-untyped-def]
    """``airflow dags test --use-executor`` with the LocalExecutor, so that every task runs
    in a process of its own (supervised, talking to a real Airflow API server on
    127.0.0.1), and the ``broker.load`` task's process SIGKILLed while it runs."""
    import os
    import signal

    work = tmp_path_factory.mktemp("killed")
    port = free_port()
    store = growing_store / "snapshots" / "s1" / "store"   # only read
    # the module's pipeline config (RMQ_PIPELINE_CONFIG): the same warehouse, so the same
    # Asset URIs as the runs before (Airflow deactivates an asset name whose URI changed);
    # the load decodes on Spark, so that it is still running seconds after it started (in
    # process, this small store's load can be over before the kill)
    config = work / "pipeline-spark-load.yaml"
    config.write_text(json.dumps({**json.loads(Path(os.environ["RMQ_PIPELINE_CONFIG"])
                                               .read_text()), "load_engine": "spark"}))
    env = {**os.environ, "RMQ_PIPELINE_CONFIG": str(config),
           "AIRFLOW_VAR_RMQ_BROKERS": json.dumps([{"name": KILLED_BROKER, "store": str(store)}]),
           **local_executor_env(port),
           # if the kill hits a task's supervisor instead of the task, the heartbeat
           # timeout is what fails it: 30 s, not the default 5 minutes
           "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
           "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5"}
    env.pop("AIRFLOW_CONN_RMQ_BROKER_SSH", None)
    airflow_bin = str(Path(sys.executable).parent / "airflow")
    database = Path(os.environ["AIRFLOW_HOME"]) / "airflow.db"
    mails_before = len(airflow.mailbox.envelopes)
    posts_before = len(airflow.posts)
    clock = time.monotonic()
    with open(work / "api-server.log", "wb") as api_log, open(work / "run.log", "wb") as run_log:
        api = subprocess.Popen([airflow_bin, "api-server", "--host", "127.0.0.1", "--port",
                                str(port), "--workers", "1", "--apps", "execution"],
                               env=env, stdout=api_log, stderr=subprocess.STDOUT,
                               start_new_session=True)
        run = None
        try:
            wait_for_execution_api(port, api, 120)
            run = subprocess.Popen([airflow_bin, "dags", "test", "rmq_nightly",
                                    D_KILLED.isoformat(), "--use-executor"],
                                   env=env, stdout=run_log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
            victim, ti_id = None, None
            deadline = time.monotonic() + 300
            while victim is None and run.poll() is None and time.monotonic() < deadline:
                ti_id = ti_id or _running_ti(database, "broker.load", "2026-11-25")
                victim = _task_process(ti_id) if ti_id else None
                time.sleep(0.2)
            assert victim is not None, (work / "run.log").read_text()[-3000:]
            time.sleep(3)  # let it get into its work (Spark starting)
            os.kill(victim, signal.SIGKILL)
            wait_until_run_ends(run, database, "2026-11-25", 600)
        finally:
            if run is not None and run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
            os.killpg(api.pid, signal.SIGTERM)
            api.wait(timeout=60)
    return SimpleNamespace(work=work, victim=victim, states=_states(database, "2026-11-25"),
                           log=(work / "run.log").read_text(errors="replace"),
                           mails=[mail_text(e) for e in airflow.mailbox.envelopes[mails_before:]],
                           posts=[p["json"] for p in airflow.posts[posts_before:]],
                           seconds=time.monotonic() - clock)


@pytest.mark.spark
@pytest.mark.broker
def test_a_killed_task_is_still_reported_with_its_broker_and_task(killed):  # type: ignore[no-untyped-def]
    assert killed.states["broker.snapshot"] == "success"
    assert killed.states["broker.load"] == "failed"          # SIGKILLed: no callback ran
    not_run = ("broker.lookup", "broker.check", "broker.alert", "broker.maintain",
               "broker.clean_up")
    assert {killed.states[t] for t in not_run} == {"upstream_failed"}
    assert killed.states["run_outcome"] == "failed"          # told, then kept the run failed
    assert len(killed.mails) == 1 and len(killed.posts) == 1, killed.log[-3000:]
    mail, post = killed.mails[0], json.dumps(killed.posts[0])
    for text in (mail, post):
        assert f"task broker.load of broker {KILLED_BROKER} failed" in text
        assert "SIGKILL" in text
        assert ("broker.alert, broker.check, broker.clean_up, broker.lookup, broker.maintain"
                in text)
    assert f"rmq_nightly 2026-11-25T0200Z: 1 task failed: {KILLED_BROKER} broker.load" in mail
