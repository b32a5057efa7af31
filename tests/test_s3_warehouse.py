"""The warehouse in an object store: the local S3 server (tests/s3_server.py), written by
the in-process engines and by Spark's executors (delta-rs commits with conditional puts,
leases for the locks).

A fleet's nights on the bucket, four brokers snapshotting into it, loading, checking and
maintaining at once in processes of their own (each a host with its own mirror), must
give the very tables the same snapshots give on local disk one broker after another (read
with delta-rs). Their decode stages must overlap, not take turns: each process meets the
others at a barrier as its decode stage begins (a file per broker) and records when it
began and ended; were anything to serialise the loads up to there (a warehouse-wide lock,
a table lock), no process would pass the barrier and the test would fail on its timeout,
whatever the machine's timing. (The same on local disk, under kills: tests/test_soak.py.)
The CLI must work on the bucket, refuse Spark's own Delta writer there in one line, and
never create a local directory named after the URI. A store that goes away under a step
fails it in one line, and its re-run heals the night. (A night on Spark, and one
throttled: tests/test_s3_spark.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable, write_deltalake
from lakehouse import delta_rows, warehouse_content
from s3_server import serving_bucket
from s3_throttle import faulty_proxy

from jobs.check_job import check_snapshot
from jobs.lakehouse import tables as T
from jobs.lakehouse.locations import Location
from jobs.lakehouse.spark_session import SparkOnDemand
from jobs.lakehouse.tables import Registry, table_location
from jobs.load.job import LoadOptions, load_snapshot
from jobs.maintain.maintenance import maintain_tables
from jobs.snapshot.bucket import MIRROR_ENV, BucketSnapshots

pytestmark = [pytest.mark.broker]

REPO = Path(__file__).resolve().parent.parent
FLEET = {"fleet-a": "v5-clean", "fleet-b": "v4-clean", "fleet-c": "v5-killed",
         "fleet-d": "v4-killed"}
NIGHTS = ("n1", "n2")
LEASE_SECONDS = 3.0  # the outage test's lock leases
RETRY_SECONDS = 3.0  # how long the outage tests' clients retry before a step fails
SNAPSHOTS = "s3://lake/fleet-snapshots"
BARRIER_SECONDS = 900  # four processes start on two cores: generous, a deadlock guard only
BROKER_NIGHT = """
import sys, time
from datetime import datetime
from pathlib import Path
from jobs.check_job import check_snapshot
from jobs.lakehouse import tables as T
from jobs.lakehouse.spark_session import SparkOnDemand
from jobs.lakehouse.tables import Registry
from jobs.load import job
from jobs.load.job import LoadOptions, load_snapshot
from jobs.maintain.maintenance import maintain_tables
from jobs.snapshot.roots import snapshots_at
from jobs.snapshot.sources import LocalSource

def no_spark():
    raise AssertionError("a warehouse on S3 is written without Spark")

warehouse, snapshots, broker, snapshot_id, store, checks, *meet = sys.argv[1:]
decode_into = job.SnapshotLoad.decode_into

def decode_at_the_barrier(self, table, *args, **kwargs):
    # the decode stage is messages -> queue_entries -> index_entries; each broker records
    # when it began and ended, and none goes on until all have begun
    barrier, brokers, seconds = Path(meet[0]), int(meet[1]), float(meet[2])
    if table == T.MESSAGES:
        (barrier / f"{broker}.began").write_text(repr(time.time()))
        deadline = time.monotonic() + seconds
        while len(list(barrier.glob("*.began"))) < brokers:
            if time.monotonic() > deadline:
                raise SystemExit(f"{broker}: the other brokers never reached their decode stage")
            time.sleep(0.05)
    result = decode_into(self, table, *args, **kwargs)
    if table == T.INDEX_ENTRIES:
        (barrier / f"{broker}.ended").write_text(repr(time.time()))
    return result

if meet:
    job.SnapshotLoad.decode_into = decode_at_the_barrier
taken = snapshots_at(snapshots).take(LocalSource(store), broker, snapshot_id)
load_snapshot(SparkOnDemand(no_spark), broker, snapshot_id,
              snapshots_at(snapshots).local_store(broker, snapshot_id),
              LoadOptions(taken_at=datetime.fromisoformat(taken.started_at)),
              registry=Registry(None, warehouse))
check_snapshot(no_spark, warehouse, broker, snapshot_id, output=Path(checks))
maintain_tables(warehouse, broker)
print("done", broker, snapshot_id)
"""


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with serving_bucket(tmp_path_factory.mktemp("s3") / "root", "lake") as server:
        yield server


def _no_spark() -> object:
    raise AssertionError("a warehouse on S3 is written without Spark")


def test_four_brokers_at_once_on_s3_equal_one_after_another_on_local_disk(
        s3, broker_stores, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)  # nothing may appear here (a directory named "s3:")
    bucket, local = "s3://lake/fleet", tmp_path / "serial"
    script = tmp_path / "broker_night.py"
    script.write_text(BROKER_NIGHT)
    hosts = tmp_path / "hosts"  # each broker's process a host of its own (its mirror)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    for night in NIGHTS:  # n1 creates the tables in a race, n2 appends to them
        meet = [str(barrier), str(len(FLEET)), str(BARRIER_SECONDS)] if night == NIGHTS[0] \
            else []
        running = {broker: subprocess.Popen(
            [sys.executable, str(script), bucket, SNAPSHOTS, broker, night,
             str(broker_stores[variant] / "store"), str(tmp_path / "checks"), *meet],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO), MIRROR_ENV: str(hosts / broker)})
            for broker, variant in FLEET.items()}
        failed = []
        for broker, process in running.items():
            output, _ = process.communicate(timeout=1200)
            if process.returncode != 0:
                failed.append(f"{broker} exit {process.returncode}:\n{output[-3000:]}")
        assert not failed, "\n".join(failed)
        if meet:  # all four were in their decode stage at once: no lock serialised them
            began, ended = ([float(f.read_text()) for f in barrier.glob(f"*.{edge}")]
                            for edge in ("began", "ended"))
            assert len(began) == len(ended) == len(FLEET) and max(began) < min(ended)
        # The oracle: one broker after another into a local disk, from the same snapshots
        # read back on a host of its own.
        monkeypatch.setenv(MIRROR_ENV, str(hosts / "oracle"))
        for broker in FLEET:
            registry = Registry(None, local)
            snapshots = BucketSnapshots(Location(SNAPSHOTS))
            taken = snapshots.manifest(broker, night)
            assert taken is not None
            load_snapshot(SparkOnDemand(_no_spark), broker, night,  # type: ignore[arg-type]
                          snapshots.local_store(broker, night),
                          LoadOptions(taken_at=datetime.fromisoformat(taken.started_at)),
                          registry=registry)
            check_snapshot(_no_spark, local, broker, night)  # type: ignore[arg-type]
            maintain_tables(local, broker)
    on_s3, on_disk = warehouse_content(bucket), warehouse_content(local)
    assert on_s3[T.MESSAGES] and on_s3[T.CONSUMER_LAG]  # not two empty warehouses
    for name, rows in on_disk.items():
        only = sorted(set(rows) ^ set(on_s3[name]))
        assert on_s3[name] == rows, f"{name}: " + "\n".join(
            ("s3 " if row in on_s3[name] else "disk ") + row for row in only[:10])
    assert sorted(tmp_path.iterdir()) == sorted([script, local, tmp_path / "checks", hosts,
                                                 barrier])
    loaded = [json.loads(row) for row in on_s3[T.SNAPSHOTS]]  # named by their URIs
    assert {row["store_path"] for row in loaded} == {
        f"{SNAPSHOTS}/{broker}/{night}" for broker in FLEET for night in NIGHTS}
    # Nothing of the loads is left in the bucket but the tables: no lease, no task report.
    left = {f.relative.split("/")[0] for f in Location("s3://lake/fleet").files()}
    assert left == {"rmq.db"}


def run_jobs(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_cli_on_a_bucket(s3, broker_stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Load, check, maintain, SQL, a saved query, a trace and a migration (delta-rs, no
    Spark) on the bucket, from a directory that stays empty."""
    work = tmp_path / "cwd"
    work.mkdir()
    warehouse = ["--warehouse", "s3://lake/cli/"]
    store = str(broker_stores["v5-clean"] / "store")
    loaded = run_jobs(work, *warehouse, "load", "--broker", "b1", "--snapshot-id", "s1", store)
    assert loaded.returncode == 0, loaded.stderr
    checked = run_jobs(work, *warehouse, "check", "--broker", "b1", "--snapshot-id", "s1",
                       "--output", str(tmp_path / "checks"))
    assert checked.returncode == 0, checked.stderr
    assert (tmp_path / "checks" / "reports" / "b1" / "s1.html").is_file()
    assert run_jobs(work, *warehouse, "maintain", "--broker", "b1").returncode == 0
    counted = run_jobs(work, *warehouse, "sql", "--format", "csv",
                       "SELECT count(*) AS n FROM rmq.messages")
    assert counted.returncode == 0, counted.stderr
    stored = len(delta_rows(table_location("s3://lake/cli", T.MESSAGES)))
    assert counted.stdout.split() == ["n", str(stored)] and stored > 0
    positions = run_jobs(work, *warehouse, "sql", "--saved", "consumer_positions")
    assert positions.returncode == 0 and "G_ALL" in positions.stdout, positions.stderr
    msg_id = run_jobs(work, *warehouse, "sql", "--format", "csv",
                      "SELECT msg_id FROM rmq.messages WHERE topic = 'TopicNormal' "
                      "ORDER BY physical_offset LIMIT 1").stdout.split()[1]
    traced = run_jobs(work, *warehouse, "trace", msg_id)
    assert traced.returncode == 0 and "TopicNormal" in traced.stdout, traced.stderr
    # a table of an earlier major contract (unpartitioned): refused, then migrated in place
    snapshots = table_location("s3://lake/cli", T.SNAPSHOTS)
    before = delta_rows(snapshots)
    write_deltalake(snapshots, DeltaTable(snapshots).to_pyarrow_table(), mode="overwrite",
                    schema_mode="overwrite", partition_by=[])
    DeltaTable(snapshots).alter.set_table_properties({"rmq.contract.version": "1.0.0"},
                                                     raise_if_not_exists=False)
    next_night = [*warehouse, "load", "--broker", "b1", "--snapshot-id", "s2", store]
    refused = run_jobs(work, *next_night)
    assert refused.returncode == 3 and "python -m jobs migrate" in refused.stderr, refused
    migrated = run_jobs(work, *warehouse, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "rmq.snapshots: rewritten" in migrated.stdout, migrated.stdout
    assert DeltaTable(snapshots).metadata().partition_columns == ["broker"]
    assert delta_rows(snapshots) == before
    assert run_jobs(work, *next_night).returncode == 0
    assert list(work.iterdir()) == []


def test_a_load_the_store_went_away_under_fails_and_its_rerun_finishes_the_night(
        s3, broker_stores, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The S3 server goes away as the load begins its queue entries (its messages are
    committed, nothing after) and stays away: the load fails once the clients' retries are
    spent (``RMQ_S3_RETRY_SECONDS``, made short here), leaving every table readable and no
    append half made. With the server back,
    the re-run finishes the night: its tables equal an undisturbed load's."""
    import time

    from jobs.load import job
    from jobs.load.job import LoadRefusedError

    monkeypatch.setenv("RMQ_LEASE_SECONDS", str(LEASE_SECONDS))
    monkeypatch.setenv("RMQ_S3_RETRY_SECONDS", str(RETRY_SECONDS))
    store = broker_stores["v5-clean"] / "store"
    local = tmp_path / "undisturbed"
    load_snapshot(SparkOnDemand(_no_spark), "b1", "s1", store, LoadOptions(),  # type: ignore[arg-type]
                  registry=Registry(None, local))
    decode_into = job.SnapshotLoad.decode_into

    def store_goes_away(self, table, *args, **kwargs):  # type: ignore[no-untyped-def]
        if table == T.QUEUE_ENTRIES:
            s3.stop()
        return decode_into(self, table, *args, **kwargs)

    bucket = "s3://lake/outage"
    with monkeypatch.context() as patch:
        patch.setattr(job.SnapshotLoad, "decode_into", store_goes_away)
        # delta-rs (OSError) or obstore (a task report), whichever reaches the store first
        with pytest.raises(Exception, match=r"error sending request"):
            load_snapshot(SparkOnDemand(_no_spark), "b1", "s1", store,  # type: ignore[arg-type]
                          LoadOptions(), registry=Registry(None, bucket))
    s3.start()
    assert delta_rows(table_location(bucket, T.MESSAGES)) == \
        delta_rows(table_location(local, T.MESSAGES))  # the one append made, whole
    assert delta_rows(table_location(bucket, T.QUEUE_ENTRIES)) == []
    # The failed load could not release its lease (the store was away): the re-run is
    # refused, naming it, until it expires one lease period after its last renewal.
    deadline = time.monotonic() + 10 * LEASE_SECONDS
    while True:
        try:
            summary = load_snapshot(SparkOnDemand(_no_spark), "b1", "s1", store,  # type: ignore[arg-type]
                                    LoadOptions(), registry=Registry(None, bucket))
            break
        except LoadRefusedError as refused:
            assert "lease expires at" in str(refused) and time.monotonic() < deadline
            time.sleep(0.5)
    assert not summary.skipped
    for name in T.TABLES:
        if name not in T.AUDIT_LOGS:
            assert delta_rows(table_location(bucket, name)) == \
                delta_rows(table_location(local, name)), name


@pytest.mark.parametrize("table", [T.QUEUE_ENTRIES, T.SNAPSHOTS])
def test_a_commit_whose_answer_is_lost_is_not_made_twice(
        s3, broker_stores, tmp_path: Path, monkeypatch, table: str) -> None:  # type: ignore[no-untyped-def]
    """The server commits a table's next log entry, and its answer is lost (the proxy
    cuts the connection after the server did it); the client's retry meets its own entry
    (412). A fact table's append (its app id's transaction is in the entry) is then found
    committed and the load goes on; a state table's commit fails the load in one line,
    and its re-run finishes the night. Either way no row is there twice: the tables equal
    an undisturbed night's."""
    from deltalake.exceptions import CommitFailedError

    store = broker_stores["v5-clean"] / "store"
    bucket, local = f"s3://lake/lost-{table}", tmp_path / "undisturbed"
    for night in ("s0", "s1"):
        load_snapshot(SparkOnDemand(_no_spark), "b1", night, store, LoadOptions(),  # type: ignore[arg-type]
                      registry=Registry(None, local))
    load_snapshot(SparkOnDemand(_no_spark), "b1", "s0", store, LoadOptions(),  # type: ignore[arg-type]
                  registry=Registry(None, bucket))
    entry = rf"PUT [^ ]*/{bucket[5:]}/rmq\.db/{table}/_delta_log/0+\d+\.json"

    def night() -> None:
        load_snapshot(SparkOnDemand(_no_spark), "b1", "s1", store,  # type: ignore[arg-type]
                      LoadOptions(), registry=Registry(None, bucket))

    with faulty_proxy(s3.port, tmp_path, lose_answer_at=entry) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        if table == T.QUEUE_ENTRIES:
            night()
        else:
            with pytest.raises(CommitFailedError, match="concurrent transaction"):
                night()
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.environment()["AWS_ENDPOINT_URL"])
    assert proxy.counts.lost == 1
    if table != T.QUEUE_ENTRIES:
        night()
    for name in T.TABLES:
        if name not in T.AUDIT_LOGS:
            assert delta_rows(table_location(bucket, name)) == \
                delta_rows(table_location(local, name)), name


def test_a_night_in_process_with_one_request_in_ten_throttled_equals_the_night_on_disk(
        s3, broker_stores, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Load, check and maintain with 1 request in 10 answered ``503 SlowDown``
    (tests/s3_throttle.py): every client backs off and retries, and the tables equal the
    night on disk. Arrow's own S3 reads gave up here (a throttled read smaller than the
    error's body); tables in a bucket are read through object_store instead
    (jobs.lakehouse.driver_rows.arrow_dataset)."""
    local, store, bucket = tmp_path / "disk", broker_stores["v5-clean"] / "store", "s3://lake/slow"

    def night(warehouse: str | Path) -> None:
        load_snapshot(SparkOnDemand(_no_spark), "b1", "n1", store,  # type: ignore[arg-type]
                      LoadOptions(engine="local"), registry=Registry(None, warehouse))
        check_snapshot(_no_spark, warehouse, "b1", "n1",  # type: ignore[arg-type]
                       engine="local", output=tmp_path / "checks")
        maintain_tables(warehouse, "b1")

    night(local)
    with (faulty_proxy(s3.port, tmp_path, rate=0.1, seed=2) as proxy,
          monkeypatch.context() as patched):
        patched.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        night(bucket)
    assert proxy.counts.throttled > 10, proxy.counts
    on_s3 = warehouse_content(bucket)
    for name, rows in warehouse_content(local).items():
        assert on_s3[name] == rows, name


# (step, the request that finds the store gone: a commit of the step's own). The load's
# outage is the server stopped under it (the test above).
OUTAGES = (
    ("check", r"^PUT /lake/faults/rmq\.db/check_results/_delta_log/\d+\.json "),
    ("maintain", r"^PUT /lake/faults/rmq\.db/[a-z_]+/_delta_log/\d+\.json "),
)


def test_the_store_going_away_at_each_steps_commit_fails_it_in_one_line_and_the_rerun_heals(
        s3, broker_stores, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The store goes away at the moment a step commits (tests/s3_throttle.py drops every
    request from the commit's PUT on): the check at its results, the maintenance at its
    first merge. Each fails with one error line on
    stderr (exit 4) once its clients' retries are spent, no commit of it is visible, and
    once the store is back and the failed step's lease has expired, its re-run gives the
    tables of an undisturbed night. The one line names the request that failed. A store
    away for a few requests only (restarting) costs the step nothing: the commit's PUT is
    retried with backoff by delta-rs as configured (jobs.lakehouse.locations)."""
    import time

    monkeypatch.setenv("RMQ_LEASE_SECONDS", str(LEASE_SECONDS))
    store, local, bucket = broker_stores["v5-clean"] / "store", tmp_path / "disk", "s3://lake/faults"
    load_snapshot(SparkOnDemand(_no_spark), "b1", "s1", store, LoadOptions(),  # type: ignore[arg-type]
                  registry=Registry(None, local))
    check_snapshot(_no_spark, local, "b1", "s1", output=tmp_path / "disk-checks")  # type: ignore[arg-type]
    maintain_tables(local, "b1")
    work = tmp_path / "cwd"
    work.mkdir()
    loaded = run_jobs(work, "--warehouse", bucket, "load", "--broker", "b1", "--snapshot-id",
                      "s1", str(store))
    assert loaded.returncode == 0, loaded.stderr
    steps = {"check": ["check", "--broker", "b1", "--snapshot-id", "s1",
                       "--output", str(tmp_path / "checks")],
             "maintain": ["maintain", "--broker", "b1"]}
    for step, down_at in OUTAGES:
        versions = {name: DeltaTable(table_location(bucket, name)).version()
                    for name in T.TABLES}
        with faulty_proxy(s3.port, tmp_path, down_at=down_at) as proxy, \
                monkeypatch.context() as patched:
            patched.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
            patched.setenv("RMQ_S3_RETRY_SECONDS", str(RETRY_SECONDS))
            failed = run_jobs(work, "--warehouse", bucket, *steps[step])
            assert proxy.is_down, (step, failed.stderr)
            assert failed.returncode == 4, (step, failed.stdout, failed.stderr)
            last = failed.stderr.strip().splitlines()[-1]  # after the progress lines
            assert "Traceback" not in failed.stderr, failed.stderr
            assert last.startswith("internal error: ") and "_delta_log" in last, last
            proxy.restore()
            changed = [name for name, version in versions.items() if name == T.CHECK_RESULTS
                       and DeltaTable(table_location(bucket, name)).version() != version]
            assert changed == [], step  # the failed commit is not there
            time.sleep(LEASE_SECONDS * 1.5)  # the failed step's lease expires
            healed = run_jobs(work, "--warehouse", bucket, *steps[step])
            assert healed.returncode == 0, (step, healed.stderr)
        assert proxy.counts.dropped > 0
    # The store away for the check's commit and the next 14 requests: retried, not failed.
    # delta-rs by default gives up after 11 attempts (about 2 s): the retry settings hold.
    with faulty_proxy(s3.port, tmp_path, down_at=OUTAGES[0][1], down_for=15) as proxy, \
            monkeypatch.context() as patched:
        patched.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        ridden_over = run_jobs(work, "--warehouse", bucket, *steps["check"])
        assert ridden_over.returncode == 0, ridden_over.stderr
    assert proxy.counts.dropped == 15, proxy.counts
    on_s3 = warehouse_content(bucket)
    for name, rows in warehouse_content(local).items():
        assert on_s3[name] == rows, name


@pytest.mark.parametrize("fault", ["store away", "answer lost"])
def test_a_vacuum_cut_off_leaves_the_table_whole_and_its_rerun_finishes(
        s3, growing_store, tmp_path: Path, monkeypatch, fault: str) -> None:  # type: ignore[no-untyped-def]
    """VACUUM in a bucket meets the store going away at its deletes (nothing deleted, the
    step fails once its retries are spent) or deletes with the answer lost (the client
    retries a delete already done). Either way every file of the table's version is still
    there and its rows are the undisturbed ones; the re-run leaves no file the table does
    not name. (``time_travel_days=0`` on one table: the removed files are fresh, and the
    config refuses < 1 for deployments.)"""
    from deltalake import DeltaTable

    from jobs.maintain.maintenance import POLICIES, _maintain_table

    bucket, local = f"s3://lake/vacuum-{fault.replace(' ', '-')}", tmp_path / "undisturbed"
    for number, night in enumerate(("s1", "s2", "s3")):  # three nights: files to compact
        store = growing_store / "snapshots" / night / "store"
        for warehouse in (bucket, local):
            load_snapshot(SparkOnDemand(_no_spark), "b1", f"n{number}", store,  # type: ignore[arg-type]
                          LoadOptions(), registry=Registry(None, warehouse))
    location = str(table_location(bucket, T.MESSAGES))
    compacted = _maintain_table(bucket, location, T.MESSAGES, POLICIES[T.MESSAGES], "b1", 1)
    assert compacted["files_compacted"] > 1 and compacted["files_vacuumed"] == 0

    def stored() -> set[str]:
        return {f.relative for f in Location(location).files()
                if not f.relative.startswith("_delta_log/")}

    def named() -> set[str]:
        return {uri[len(location) + 1:] for uri in DeltaTable(location).file_uris()}

    left_over = stored() - named()
    assert left_over  # the compacted files: out of the table, not yet deleted
    monkeypatch.setenv("RMQ_S3_RETRY_SECONDS", "2")
    deletes = r"POST [^ ]*\?delete"
    with faulty_proxy(s3.port, tmp_path, down_at=deletes if fault == "store away" else None,
                      lose_answer_at=deletes if fault == "answer lost" else None) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        if fault == "store away":
            with pytest.raises(Exception, match="error sending request"):
                _maintain_table(bucket, location, T.MESSAGES, POLICIES[T.MESSAGES], "b1", 0)
        else:
            vacuumed = _maintain_table(bucket, location, T.MESSAGES, POLICIES[T.MESSAGES],
                                       "b1", 0)
            assert vacuumed["files_vacuumed"] == len(left_over)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.environment()["AWS_ENDPOINT_URL"])
    assert (proxy.counts.dropped if fault == "store away" else proxy.counts.lost) >= 1
    assert named() <= stored()  # every file of the table's version is there
    assert delta_rows(location) == delta_rows(table_location(local, T.MESSAGES))
    if fault == "store away":
        assert stored() - named() == left_over  # nothing was deleted
        _maintain_table(bucket, location, T.MESSAGES, POLICIES[T.MESSAGES], "b1", 0)
    assert stored() == named()
    assert delta_rows(location) == delta_rows(table_location(local, T.MESSAGES))


def test_a_vacuum_cut_off_between_its_delete_batches_is_finished_by_its_rerun(
        s3, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A VACUUM of more files than one delete request takes (S3's DeleteObjects: 1,000
    keys) meets the store going away at its second batch: the step fails after its retries,
    one batch's files are gone and the other's are still there, every file of the
    table's version is there and reads; the re-run deletes the rest. A table of 1,005
    one-row partitions, overwritten by one row: 1,005 files out of the table."""
    import pyarrow as pa

    from jobs.lakehouse.locations import delta_storage_options
    from jobs.maintain.maintenance import POLICIES, _maintain_table

    location, removed = "s3://lake/vacuum-batches", 1005
    rows = pa.table({"p": [f"{i:04d}" for i in range(removed)], "v": list(range(removed))})
    write_deltalake(location, rows, partition_by=["p"],
                    storage_options=delta_storage_options(location))
    write_deltalake(location, rows.slice(7, 1), mode="overwrite",
                    storage_options=delta_storage_options(location))

    def stored() -> set[str]:
        return {f.relative for f in Location(location).files()
                if not f.relative.startswith("_delta_log/")}

    def named() -> set[str]:
        return {uri[len(location) + 1:] for uri in DeltaTable(location).file_uris()}

    before = stored()
    assert len(before - named()) == removed and len(named()) == 1
    monkeypatch.setenv("RMQ_S3_RETRY_SECONDS", "2")
    monkeypatch.setenv("RMQ_LEASE_SECONDS", "2")  # the cut step's lease: not released
    # The third DeleteObjects request: the compaction's lease is released by the first
    # (obstore deletes through DeleteObjects), VACUUM's first batch is the second.
    with faulty_proxy(s3.port, tmp_path, down_at=r"POST [^ ]*\?delete",
                      down_at_match=3) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        with pytest.raises(Exception, match="error sending request"):
            _maintain_table("s3://lake", location, T.MESSAGES, POLICIES[T.MESSAGES], "b1", 0)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.environment()["AWS_ENDPOINT_URL"])
    assert proxy.counts.dropped >= 1
    cut = stored()
    # one batch done, the other not (which arrives first is the client's choice)
    assert named() <= cut and len(before - cut) in (1000, removed - 1000)
    assert DeltaTable(location).to_pyarrow_table().to_pylist() == [{"v": 7, "p": "0007"}]
    time.sleep(2.5)  # a re-run waits at most a lease period for the cut step's lease
    rerun = _maintain_table("s3://lake", location, T.MESSAGES, POLICIES[T.MESSAGES], "b1", 0)
    # delta-rs counts every tombstone's file it deleted, those already gone too (an S3
    # delete of a missing key succeeds): what is left in the bucket is the measure.
    assert rerun["files_vacuumed"] in (len(cut - named()), removed)
    assert stored() == named()
    assert DeltaTable(location).to_pyarrow_table().to_pylist() == [{"v": 7, "p": "0007"}]
