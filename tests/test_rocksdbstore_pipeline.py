"""The ``v5-rocksdbstore`` store through the load: a 5.5.0 broker whose transactions and timers
live in ``rocksdbstore/`` (transRocksDBEnable, timerRocksDBEnable) gives ``transactions`` and
``pending_timers`` rows equal to the clients' record, its checks fire for the dropped and the
undecided transactions, and rmqlib's reading of the database equals the raw decoding of
tests/test_rocksdbstore_store.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from test_rocksdbstore_store import TX_TOPIC, Store, Truth, _store, _truth, timer_rows, trans_rows

from jobs.check.checks import TransactionRules
from jobs.check.engines import DuckDbEngine
from jobs.check.reconcile import reconcile_snapshot
from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import read_arrow
from jobs.lakehouse.jars import REPO_ROOT
from jobs.lakehouse.spark_session import SparkOnDemand
from jobs.lakehouse.tables import Registry
from jobs.load.job import LoadOptions, load_snapshot
from rmqlib.commitlog.records import CommitLogRecord
from rmqlib.rocksdb.state_store import read_state_store

pytestmark = [pytest.mark.broker]

BROKER = "rocks"
STATE = {"commit": "committed", "rollback": "rolled_back", "dropped": "discarded",
         "pending": "pending"}


def _no_spark() -> object:
    raise AssertionError("this load must not start Spark")


@pytest.fixture(scope="module")
def truth(rocksdbstore_store: Path) -> Truth:
    return _truth(str(rocksdbstore_store))


@pytest.fixture(scope="module")
def store(rocksdbstore_store: Path) -> Store:
    return _store(str(rocksdbstore_store / "store"))


@pytest.fixture(scope="module")
def loaded(rocksdbstore_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Registry:
    registry = Registry(None, tmp_path_factory.mktemp("wh"))
    load_snapshot(SparkOnDemand(_no_spark), BROKER, "final", rocksdbstore_store / "store",
                  LoadOptions(engine="local", taken_at=datetime.now(UTC)), registry=registry)
    return registry


def rows_of(registry: Registry, table: str) -> list[dict]:
    return read_arrow(registry[table].location, broker=BROKER).to_pylist()


def ms(value: datetime | None) -> int | None:
    return None if value is None else round(value.timestamp() * 1000)


def test_rmqlib_reads_the_database_as_the_raw_decoding_does(store: Store) -> None:
    state = read_state_store(store.db_dir.parent)
    assert state is not None and state.bad == [] and not state.empty
    assert {h.msg_id: (h.half_offset, h.topic, h.check_times, h.size)
            for h in state.undecided} == trans_rows(store)
    assert {t.msg_id: (t.delivery_ms, t.size, t.commitlog_offset)
            for t in state.timeline} == timer_rows(store)


def test_each_transaction_is_in_the_state_the_clients_left_it(loaded: Registry, truth: Truth,
                                                              store: Store) -> None:
    """State, identity and half from the truth; checks as far as the store tells them: the
    trans family's count while pending, the committed copy's TRANSACTION_CHECK_TIMES (present
    when the half was indexed before the commit), none recorded for a rollback or a drop.
    A commit answered twice (a check that raced the decision asks the producer again) stores
    two committed copies: the first one decided the transaction."""
    rows = {r["msg_id"]: r for r in rows_of(loaded, T.TRANSACTIONS)}
    assert set(rows) == {t["msgId"] for t in truth.transactions}
    copies: dict[str, CommitLogRecord] = {}
    for copy in sorted(store.of_topic(TX_TOPIC), key=lambda r: r.physical_offset):
        copies.setdefault(copy.properties["UNIQ_KEY"], copy)
    pending = trans_rows(store)
    for t in truth.transactions:
        row = rows[t["msgId"]]
        assert row["state"] == STATE[t["outcome"]], t["plan"]
        assert (row["half_offset"], row["topic"], row["queue_id"], row["producer_group"]) == (
            t["halfCommitLogOffset"], t["topic"], t["queueId"], t["producerGroup"])
        assert row["transaction_id"] == t["transactionId"]
        if row["state"] == "committed":
            copy = copies[t["msgId"]]
            assert (row["committed_offset"], row["committed_queue_offset"]) == (
                copy.physical_offset, copy.queue_offset)
            assert row["checks"] == int(copy.properties.get("TRANSACTION_CHECK_TIMES", "0"))
            assert ms(row["decided_time"]) >= t["decidedMs"]
        elif row["state"] == "pending":
            assert row["checks"] == pending[t["msgId"]][2] == 0
            assert row["decided_time"] is None
        else:
            assert row["checks"] == 0 and row["decided_time"] is not None
    assert sum(r["state"] == "discarded" for r in rows.values()) == len(truth.plan("never"))


def test_pending_timers_are_the_timelines_undelivered_entries(loaded: Registry,
                                                             truth: Truth) -> None:
    rows = rows_of(loaded, T.PENDING_TIMERS)
    later = truth.timers_of(3600)
    assert sorted((r["commitlog_offset"], r["commitlog_size"], ms(r["delivery_time"]),
                   r["state"]) for r in rows) == sorted(
        (t["wheelCommitLogOffset"], t["wheelStoreSize"], t["timerOutMs"], "pending")
        for t in later)
    assert later and all(r["timerlog_position"] is None for r in rows)


def test_the_checks_fire_for_the_dropped_and_the_undecided(loaded: Registry,
                                                          truth: Truth) -> None:
    def findings(name: str) -> list[dict]:
        return [r for r in rows_of(loaded, T.CHECK_RESULTS) if r["check_name"] == name]

    reconcile_snapshot(DuckDbEngine(loaded.warehouse), loaded, BROKER, "final",
                       TransactionRules(max_pending_minutes=0))
    [dropped] = findings("transaction_discarded")
    never = sorted(t["halfCommitLogOffset"] for t in truth.plan("never"))
    assert (dropped["affected"], dropped["sample_offsets"]) == (len(never), never)
    [undecided] = findings("transaction_pending_too_long")
    immune = sorted(t["halfCommitLogOffset"] for t in truth.plan("immune"))
    assert (undecided["affected"], undecided["sample_offsets"]) == (len(immune), immune)


def test_the_snapshots_alert_names_the_dropped_and_the_undecided(
        loaded: Registry, tmp_path: Path) -> None:
    """Through the whole check step with config/alerts.yaml's transactions section (pending
    longer than 0 minutes is an error here): the alert carries exactly the two transaction
    findings."""
    from jobs.check_job import check_snapshot

    rules = tmp_path / "alerts.yaml"
    rules.write_text((REPO_ROOT / "config" / "alerts.yaml").read_text().replace(
        "max_pending_minutes: 10", "max_pending_minutes: 0").replace(
        "severity: warning                 # of transaction_pending_too_long",
        "severity: error"))
    outcome = check_snapshot(lambda: None, loaded.warehouse, BROKER, "final",
                             rules_path=rules, engine="local", output=tmp_path / "out")
    assert outcome.alert is not None
    lines = [line for line in outcome.alert.findings if "transaction" in line]
    assert len(lines) == 2
    assert any(line.startswith("check transaction_discarded [error] producer_group=PG_ROCKS_TX")
               for line in lines)
    assert any(line.startswith("check transaction_pending_too_long [error] "
                               "producer_group=PG_ROCKS_TX") for line in lines)
