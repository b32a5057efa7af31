"""The nightly pipeline over a real 5.5.0 broker with ``storeType=defaultRocksDB`` (the
harness's ``v5-rocksdb``): its consume queue and its topics, groups and offsets live in
RocksDB databases, not in files and JSON.

Two nights through the DAG's steps in this process (snapshot, load, check; no Spark):
night 1 copies the harness's hot copy ``snapshots/s1/store`` (taken while the broker ran),
night 2 the store after its clean shutdown. The oracle is what the harness recorded from
the client and the admin API (every acked send with its queue position, the queues' max
offsets, ``consumerProgress``). A copy whose RocksDB queue has one unit changed must give
exactly the findings that name it.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pipeline_nights import (
    assert_progress_equals,
    jsonl,
    offsets_and_lag,
    run_night,
    write_config,
)
from pipeline_nights import rows as nights_rows

from jobs.lakehouse import tables as T
from rmqlib.config import load_config_dir
from rmqlib.rocksdb.consume_queue import UNIT_VALUE, read_queues, unit_key
from rmqlib.rocksdb.database import INCONSISTENT_COPY

pytestmark = pytest.mark.broker

BROKER = "rocks-a"
NIGHTS = {"s1": "2026-11-23T0200Z", "s2": "2026-11-24T0200Z"}


def rows(warehouse: Path, table: str, **equal: object) -> list[dict[str, Any]]:
    return nights_rows(warehouse, table, broker=BROKER, **equal)


@pytest.fixture(scope="module")
def nights(rocksdb_store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("rocksdb")
    config = write_config(work, BROKER, rocksdb_store / "store")
    stores = {"s1": rocksdb_store / "snapshots" / "s1" / "store",
              "s2": rocksdb_store / "store"}
    results = {name: run_night(config, snapshot_id, stores[name])
               for name, snapshot_id in NIGHTS.items()}
    return {"work": work, "warehouse": work / "warehouse", "results": results,
            "config": config}


def test_queue_entries_are_the_rocksdb_units_of_every_acked_send(nights, rocksdb_store: Path
                                                                 ) -> None:
    found = rows(nights["warehouse"], T.QUEUE_ENTRIES)
    units = {(r["topic"], r["queue_id"], r["queue_offset"]): r for r in found}
    assert len(units) == len(found)  # no unit twice across the nights
    for sent in (m for m in jsonl(rocksdb_store / "truth" / "messages.jsonl") if m["acked"]):
        unit = units[(sent["storedTopic"], sent["storedQueueId"], sent["queueOffset"])]
        assert unit["commitlog_offset"] == sent["commitLogOffset"]
        assert unit["source_file"] == "consumequeue" and unit["store_time"] is not None
    stats = jsonl(rocksdb_store / "truth" / "topic_stats.jsonl")
    assert {(s["topic"], s["queueId"]): s["maxOffset"] - s["minOffset"] for s in stats
            if s["maxOffset"] > s["minOffset"]} == dict(Counter(k[:2] for k in units))


def test_a_hot_copy_holds_no_unflushed_units_and_the_next_night_loads_them(
        nights, rocksdb_store: Path) -> None:
    """The broker writes RocksDB queue units without the write-ahead log: the copy of the
    running broker (night 1) holds none of them, so night 1 loads its messages but no
    units and says the queues trail the commitlog; night 2 (after the flush of the clean
    shutdown) loads every unit, each queue from its mark."""
    hot = read_queues(rocksdb_store / "snapshots" / "s1" / "store" / "consumequeue")
    warehouse = nights["warehouse"]
    first = rows(warehouse, T.QUEUE_ENTRIES, first_snapshot_id=NIGHTS["s1"])
    assert len(first) == hot.units
    assert rows(warehouse, T.MESSAGES, first_snapshot_id=NIGHTS["s1"])
    checks = {r["check_name"] for r in rows(warehouse, T.CHECK_RESULTS,
                                             snapshot_id=NIGHTS["s1"])}
    # Exactly what is true of that copy: its queues end before the commitlog (the units
    # are in the broker's memory), the broker was running, and G_HALF had not committed
    # yet. The queues' bounds count the commitlog's records (the broker's view), so the
    # consumer offsets the copy holds are not reported above (or below) them.
    assert hot.units < len(rows(warehouse, T.MESSAGES, first_snapshot_id=NIGHTS["s1"]))
    assert checks == {"dispatch_lag", "unclean_shutdown", "group_without_offsets"}
    offsets = {r["group_name"] for r in rows(warehouse, T.CONSUMER_OFFSETS,
                                              snapshot_id=NIGHTS["s1"])}
    assert "G_HALF" not in offsets
    second = rows(warehouse, T.QUEUE_ENTRIES, first_snapshot_id=NIGHTS["s2"])
    final = read_queues(rocksdb_store / "store" / "consumequeue")
    assert len(first) + len(second) == final.units


def test_state_from_rocksdb_config_and_lag_equal_consumer_progress(nights, rocksdb_store: Path
                                                                  ) -> None:
    truth = jsonl(rocksdb_store / "truth" / "consumer_groups.jsonl")
    assert_progress_equals(truth, *offsets_and_lag(nights["warehouse"], BROKER,
                                                   NIGHTS["s2"]), pull_offsets=False)
    topics = {r["topic"] for r in rows(nights["warehouse"], T.TOPICS,
                                       snapshot_id=NIGHTS["s2"])}
    assert {"TopicRocks", "TopicRocksBulk", "TopicRocksDelay"} <= topics
    groups = {r["group_name"] for r in rows(nights["warehouse"], T.SUBSCRIPTION_GROUPS,
                                            snapshot_id=NIGHTS["s2"])}
    assert {"G_ALL", "G_HALF"} <= groups


def test_the_clean_night_checks_clean_and_a_rerun_changes_nothing(nights, rocksdb_store: Path
                                                                  ) -> None:
    warehouse = nights["warehouse"]
    findings = [(r["check_name"], r["severity"])
                for r in rows(warehouse, T.CHECK_RESULTS, snapshot_id=NIGHTS["s2"])
                if r["severity"] in ("error", "warning")]
    assert findings == []
    assert rows(warehouse, T.QUARANTINE) == []
    before = {t: len(rows(warehouse, t)) for t in (T.MESSAGES, T.QUEUE_ENTRIES, T.LOAD_STATE)}
    again = run_night(nights["config"], NIGHTS["s2"], rocksdb_store / "store")
    assert again["loaded"]["skipped"] and again["checked"]["skipped"]
    assert {t: len(rows(warehouse, t)) for t in before} == before


def test_a_changed_rocksdb_unit_gives_exactly_its_findings(rocksdb_store: Path,
                                                           tmp_path: Path) -> None:
    from rocksdict import Options, Rdict

    store = tmp_path / "source"
    shutil.copytree(rocksdb_store / "store", store)
    database = str(store / "consumequeue")
    families = Rdict.list_cf(database)
    db = Rdict(database, options=Options(raw_mode=True),
               column_families={f: Options(raw_mode=True) for f in families if f != "default"})
    key = unit_key("TopicRocksBulk", 1, 100)
    phys, size, tags, stored = UNIT_VALUE.unpack(db[key])
    db[key] = UNIT_VALUE.pack(phys + 1, size, tags, stored)  # inside its record
    db.close()
    writer = Options(raw_mode=True)
    writer.set_allow_concurrent_memtable_write(False)  # the broker's in-place updates
    offsets = Rdict(str(store / "config" / "consumerOffsets"), options=writer)
    offsets[b"TopicRocksDelay@G_HALF"] = b"{not json"  # a value the broker could not parse
    offsets.close()
    run_night(write_config(tmp_path, BROKER, store), NIGHTS["s2"], store)
    findings = {r["check_name"]: r for r in rows(tmp_path / "warehouse", T.CHECK_RESULTS)
                if r["severity"] in ("error", "warning")}
    assert findings["cq_unit_without_record"]["scope"] == "topic=TopicRocksBulk queue=1"
    assert list(findings["cq_unit_without_record"]["sample_offsets"]) == [100]
    # ... and the record it stood for, left without a unit in its queue.
    assert findings["record_without_unit"]["scope"] == "topic=TopicRocksBulk queue=1"
    assert list(findings["record_without_unit"]["sample_offsets"]) == [phys]
    # The offsets entry that is no JSON is left out, and said to be, with its key.
    assert findings["quarantined_region"]["scope"] == "file=config/consumerOffset.json"
    assert "TopicRocksDelay@G_HALF" in findings["quarantined_region"]["observed"]
    assert set(findings) == {"cq_unit_without_record", "record_without_unit",
                             "quarantined_region"}
    loaded = {(r["topic"], r["group_name"]) for r in rows(tmp_path / "warehouse",
                                                          T.CONSUMER_OFFSETS)}
    assert ("TopicRocksDelay", "G_HALF") not in loaded and ("TopicRocks", "G_HALF") in loaded


def test_a_copy_the_snapshot_could_not_make_consistent_is_refused_and_quarantined(
        rocksdb_store: Path, tmp_path: Path) -> None:
    """A RocksDB queue copy the snapshot marked inconsistent (the database kept changing
    under it) is read by no one: the load quarantines the database as a consume-queue
    region with the copier's reason, loads no unit from it, and the check says so."""
    store = tmp_path / "source"
    shutil.copytree(rocksdb_store / "store", store)
    (store / "consumequeue" / INCONSISTENT_COPY).write_text(
        "not copied consistently in 5 attempts (1 file(s) deleted while it was copied)\n")
    run_night(write_config(tmp_path, BROKER, store), NIGHTS["s2"], store)
    warehouse = tmp_path / "warehouse"
    [row] = rows(warehouse, T.QUARANTINE)
    assert (row["file"], row["stream"]) == ("consumequeue", "consumequeue")
    assert "not consistent" in row["reason"] and "deleted while it was copied" in row["reason"]
    assert rows(warehouse, T.QUEUE_ENTRIES) == []
    errors = {r["check_name"] for r in rows(warehouse, T.CHECK_RESULTS)
              if r["severity"] == "error"}
    assert errors == {"quarantined_region"}



def test_a_night_over_each_config_layout_loads_the_brokers_state(rocksdb_config_store: Path,
                                                                  tmp_path: Path) -> None:
    """v1 per table, v1 single database, v2: the state tables hold what the store holds,
    and lag equals consumerProgress."""
    store = rocksdb_config_store / "store"
    config = write_config(tmp_path, BROKER, store)
    run_night(config, NIGHTS["s2"], store)
    warehouse = tmp_path / "warehouse"
    truth = jsonl(rocksdb_config_store / "truth" / "consumer_groups.jsonl")
    # The v1 RocksDB managers keep no pull offsets; v2 keeps them in table 2.
    v2 = rocksdb_config_store.name.endswith("-v2")
    assert_progress_equals(truth, *offsets_and_lag(warehouse, BROKER, NIGHTS["s2"]),
                           pull_offsets=v2)
    on_disk = load_config_dir(store / "config")
    loaded = rows(warehouse, T.TOPICS, snapshot_id=NIGHTS["s2"])
    assert {r["topic"] for r in loaded} == set(on_disk.topics.topics)
    groups = rows(warehouse, T.SUBSCRIPTION_GROUPS, snapshot_id=NIGHTS["s2"])
    assert {r["group_name"] for r in groups} == set(on_disk.subscription_groups.groups)
    findings = [(r["check_name"], r["severity"])
                for r in rows(warehouse, T.CHECK_RESULTS, snapshot_id=NIGHTS["s2"])
                if r["severity"] in ("error", "warning")]
    assert findings == [] and rows(warehouse, T.QUARANTINE) == []
