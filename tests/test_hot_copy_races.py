"""Every race of a hot copy is recognised as such (rmqlib.common.races).

Each test copies a hot snapshot of a real running 5.5.0 broker (``v5-growing``, s2: its
abort file is there, the broker was running) or a cleanly stopped one (``v5-clean``),
gives it the state a copy racing the broker can catch, and requires ``rmq verify`` to
decode what can be decoded and to judge the rest by the one rule: a race warns in a hot
store and is an error in a cleanly stopped one; bytes the broker skips are no finding.
"""

from __future__ import annotations

import random
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from rmqlib.commitlog.records import scan_segment
from rmqlib.common.segments import list_segments
from rmqlib.indexfile import IndexFile, list_index_files
from rmqlib.store.verify import ERROR, WARNING, verify_store

pytestmark = pytest.mark.broker


def copy_store(source: Path, target: Path, *, hot: bool = True) -> Path:
    shutil.copytree(source, target, symlinks=True)
    if not hot:  # as a cleanly stopped broker leaves it
        for name in ("abort", "abort.bak"):
            (target / name).unlink(missing_ok=True)
    return target


@pytest.fixture
def hot_store(growing_store: Path, tmp_path: Path) -> Path:
    store = copy_store(growing_store / "snapshots" / "s2" / "store", tmp_path / "store")
    assert (store / "abort").is_file()
    return store


def findings(store: Path) -> list[tuple[str, str, str]]:
    report = verify_store(store)
    return [(f.severity, f.check, f.message) for f in report.findings
            if f.check not in ("inventory", "cq-lag", "consumer-offset")]


def lag_index_header(path: Path, k: int) -> int:
    """Set the header of an index file back k entries, as a copy that read it k puts
    before the entries (IndexFile.putKey: entry, slot, then header). Returns the count."""
    with IndexFile.open(path) as index:
        arrays = index.entry_arrays()
        header = index.header
        slots_n = index.geometry.hash_slot_num
    h = index.header.entry_count - k
    assert h >= 1
    used = len(np.unique(arrays["key_hash"][:h] % slots_n))
    end_ts = header.begin_timestamp + 1000 * int(arrays["time_diff"][h - 1])
    with open(path, "r+b") as handle:
        handle.seek(8)
        handle.write(struct.pack(">q", end_ts))
        handle.seek(24)
        handle.write(struct.pack(">qii", int(arrays["commitlog_offset"][h - 1]), used, h + 1))
    return h


@pytest.mark.parametrize("k", [1, 7, 300])
def test_an_index_header_lagging_k_entries_is_decoded_and_warns_once(hot_store, k) -> None:  # type: ignore[no-untyped-def]
    newest = list_index_files(hot_store / "index").files[-1].path
    with IndexFile.open(newest) as index:
        before = index.to_record_batch().to_pylist()
    h = lag_index_header(newest, k)
    with IndexFile.open(newest) as index:
        assert (index.header.entry_count, index.lagging_entries) == (h, k)
        assert index.to_record_batch().to_pylist() == before  # exactly those entries
        assert index.validate().problems == []
    found = findings(hot_store)
    assert [(s, c) for s, c, _ in found] == [(WARNING, "hot-copy")]
    assert "index header lags its entries" in found[0][2] and f"{k} more" in found[0][2]


def test_the_same_lag_in_a_cleanly_stopped_store_is_an_error(hot_store) -> None:  # type: ignore[no-untyped-def]
    for name in ("abort", "abort.bak"):
        (hot_store / name).unlink()
    lag_index_header(list_index_files(hot_store / "index").files[-1].path, 5)
    assert [(s, c) for s, c, _ in findings(hot_store)] == [(ERROR, "hot-copy")]


def test_the_index_entry_being_written_warns_and_garbage_after_it_is_damage(hot_store) -> None:  # type: ignore[no-untyped-def]
    newest = list_index_files(hot_store / "index").files[-1].path
    with IndexFile.open(newest) as index:
        position = index.geometry.entry_position(index.entry_count + 1)
    with open(newest, "r+b") as handle:  # only the key hash of the next entry written
        handle.seek(position)
        handle.write(struct.pack(">i", 12345))
    found = findings(hot_store)
    assert [(s, c) for s, c, _ in found] == [(WARNING, "unreadable")]
    assert "torn tail: index entry at the write position" in found[0][2]
    with open(newest, "r+b") as handle:
        handle.seek(position + 20 * 9)
        handle.write(b"\x01")
    assert {(s, c) for s, c, _ in findings(hot_store)} == {(ERROR, "unreadable")}


def test_a_blank_whose_filler_holds_any_bytes_is_no_finding(broker_stores, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A BLANK's length field runs to the file end and the broker skips all of it: what
    its filler holds (here random bytes) is neither decoded nor torn nor corrupt."""
    store = copy_store(broker_stores["v5-clean"] / "store", tmp_path / "store")
    first = list_segments(store / "commitlog")[0]
    scan = scan_segment(first.path)
    records = [r.physical_offset for r in scan]
    (blank,) = scan.result.blanks
    with open(first.path, "r+b") as handle:
        handle.seek(blank + 8)
        handle.write(random.Random(5).randbytes(first.size - blank - 8))
    report = verify_store(store)
    assert report.errors == []
    assert [f for f in report.warnings if f.check.startswith("commitlog")] == []
    again = scan_segment(first.path)
    assert [r.physical_offset for r in again] == records
    assert again.account.blank == first.size - blank and again.account.unreadable == []


def test_a_torn_last_consume_queue_unit_warns_in_a_hot_copy(hot_store) -> None:  # type: ignore[no-untyped-def]
    queue = hot_store / "consumequeue" / "TopicNormal" / "0" / "00000000000000000000"
    data = bytearray(queue.read_bytes())
    last = (len(data.rstrip(b"\0")) + 19) // 20 * 20 - 20
    data[last + 8:last + 20] = bytes(12)  # only the commitlog offset of the unit copied
    queue.write_bytes(bytes(data))
    found = findings(hot_store)
    assert [(s, c) for s, c, _ in found] == [(WARNING, "unreadable")]
    assert "torn tail: the last unit before the zero tail" in found[0][2]


def test_a_config_file_caught_mid_rewrite_warns_and_the_bak_is_read(hot_store) -> None:  # type: ignore[no-untyped-def]
    offsets = hot_store / "config" / "consumerOffset.json"
    text = offsets.read_bytes()
    offsets.write_bytes(text[: len(text) // 2])  # 5.1-5.3 overwrite in place: cut
    found = findings(hot_store)
    assert [(s, c) for s, c, _ in found] == [(WARNING, "config")]
    assert found[0][2].startswith("hot copy: consumerOffset.json unparsable")
    assert "consumerOffset.json.bak" in found[0][2]


def _no_spark() -> object:
    raise AssertionError("this load must not start Spark")


@pytest.mark.parametrize("hot", [True, False])
def test_the_lakehouse_loads_the_lagging_entries_with_one_hot_copy_finding(
        growing_store, tmp_path, hot) -> None:  # type: ignore[no-untyped-def]
    """Load (in process, no JVM) and check (DuckDB) a hot copy whose newest index header
    lags 4 entries: index_entries holds every entry, the quarantine a zero-length note, the
    check one ``hot_copy_race`` finding: a warning (error once the abort file is gone),
    and no quarantined_region."""
    from jobs.check.engines import DuckDbEngine
    from jobs.check.reconcile import reconcile_snapshot
    from jobs.lakehouse import tables as T
    from jobs.lakehouse.spark_session import SparkOnDemand
    from jobs.lakehouse.tables import Registry
    from jobs.load.job import LoadOptions, load_snapshot

    store = copy_store(growing_store / "snapshots" / "s2" / "store", tmp_path / "store",
                       hot=hot)
    newest = list_index_files(store / "index").files[-1].path
    with IndexFile.open(newest) as index:
        total = index.entry_count
    lag_index_header(newest, 4)
    registry = Registry(None, tmp_path / "wh")
    load_snapshot(SparkOnDemand(_no_spark), "b", "s2", store,  # type: ignore[arg-type]
                  LoadOptions(engine="local"), registry=registry)
    entries = [row for row in registry.read_rows(T.INDEX_ENTRIES, broker="b")
               if row["index_file"] == newest.name]
    assert sorted(row["entry_number"] for row in entries) == list(range(1, total + 1))
    notes = [row for row in registry.read_rows(T.QUARANTINE, broker="b")
             if row["file"] == f"index/{newest.name}"]
    assert [(row["length"], row["reason"].split(":")[0]) for row in notes] == [(0, "hot copy")]
    reconcile_snapshot(DuckDbEngine(tmp_path / "wh"), registry, "b", "s2")
    rows = registry.read_rows(T.CHECK_RESULTS, broker="b")
    races = [(row["check_name"], row["severity"]) for row in rows
             if row["check_name"] in ("hot_copy_race", "quarantined_region", "torn_tail")]
    assert races == [("hot_copy_race", WARNING if hot else ERROR)]
