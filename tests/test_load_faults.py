"""The load under faults: corrupted copies, killed drivers, stores that went backwards.

Each test copies a real-broker store, damages or swaps it the way it happens in
production, loads it with the real Spark + Delta stack and checks what the tables hold.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from lakehouse import TEST_OPTIONS, all_content, load

from jobs.lakehouse import tables as T
from jobs.lakehouse.staged_append import STAGING
from jobs.lakehouse.tables import Registry
from rmqlib.commitlog.records import scan_segment
from rmqlib.common.segments import list_segments, segment_name

pytestmark = [pytest.mark.spark, pytest.mark.broker]
REPO = Path(__file__).resolve().parent.parent


def copy_store(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


def _overwrite(path: Path, at: int, length: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(at)
        handle.write(b"\xee" * length)


def test_corrupted_copy_loads_its_good_parts_and_quarantines_the_exact_bad_range(
        spark, broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    store = copy_store(broker_stores["v5-clean"] / "store", tmp_path / "store")
    seg = list_segments(store / "commitlog")[1]
    clean = [(r.physical_offset, r.total_size) for r in scan_segment(seg.path)]
    # Overwrite 300 bytes from the magic code of the first record past a third of the
    # second segment: its frame and those of the records the 300 bytes reach are gone.
    target = next(offset for offset, _ in clean if offset - seg.start >= seg.size // 3)
    damage_at, damage_len = target - seg.start + 4, 300
    _overwrite(seg.path, damage_at, damage_len)
    broken = [r for r in clean
              if r[0] - seg.start < damage_at + damage_len
              and r[0] - seg.start + r[1] > damage_at]
    assert broken, "the damage must hit at least one record"
    registry, summary = load(spark, tmp_path / "wh", "b", "s1", store)

    rows = registry.read(T.QUARANTINE).collect()
    assert len(rows) == 1
    (row,) = rows
    first_bad = min(offset for offset, _ in broken) - seg.start
    next_good = max(offset + size for offset, size in broken) - seg.start
    assert (row.file, row.offset, row.stream) == (f"commitlog/{seg.path.name}", first_bad,
                                                  "commitlog")
    assert row.offset + row.length == next_good
    assert row.global_offset == seg.start + first_bad
    assert row.reason.startswith("corrupt")
    assert summary.quarantined_bytes == row.length
    loaded = {r.physical_offset for r in registry.read(T.MESSAGES).select(
        "physical_offset").collect()}
    assert {offset for offset, _ in broken}.isdisjoint(loaded)
    assert {offset for offset, _ in clean} - {offset for offset, _ in broken} <= loaded


def test_damage_inside_a_body_loads_the_record_flagged_not_quarantined(
        spark, broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    """Bytes flipped inside a body leave the frame intact: the record is loaded with its
    CRC failure on the row (the checks report it), nothing is quarantined."""
    store = copy_store(broker_stores["v5-clean"] / "store", tmp_path / "store")
    seg = list_segments(store / "commitlog")[0]
    victim = next(r for r in scan_segment(seg.path) if len(r.body) >= 64)
    data = seg.path.read_bytes()[victim.position:victim.position + victim.total_size]
    body_at = victim.position + data.index(victim.body)
    _overwrite(seg.path, body_at + len(victim.body) // 2, 16)
    registry, summary = load(spark, tmp_path / "wh", "b", "s1", store)

    assert registry.read(T.QUARANTINE).count() == 0 and summary.quarantined_bytes == 0
    (row,) = registry.read(T.MESSAGES).where(
        f"physical_offset = {victim.physical_offset}").collect()
    assert row.body_crc_ok is False
    assert registry.read(T.MESSAGES).where("body_crc_ok = false").count() == 1


def test_a_different_store_under_the_same_broker_name_is_a_new_incarnation(
        spark, broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    """A broker re-provisioned under the same name (here: another real broker's store)
    is loaded as a new incarnation: every record of the first is superseded, kept in
    superseded_messages, and the current rows are exactly a fresh load's of the second."""
    from jobs.lakehouse.history import superseded_mask
    from jobs.load import rewrites

    warehouse = tmp_path / "wh"
    first, second = broker_stores["v5-killed"] / "store", broker_stores["v4-clean"] / "store"
    registry, _ = load(spark, warehouse, "b", "day-1", first)
    loaded_first = {r.physical_offset for r in registry.read(T.MESSAGES).collect()}
    load(spark, warehouse, "b", "day-2", second)
    (row,) = registry.read_rows(T.HISTORY_REWRITES, broker="b")
    assert (row["kind"], row["incarnation"], row["from_offset"]) == (rewrites.RESET, 2, 0)
    kept = registry.read_rows(T.SUPERSEDED_MESSAGES, broker="b")
    assert {r["physical_offset"] for r in kept} == loaded_first
    fresh, _ = load(spark, tmp_path / "fresh", "b", "day-2", second)
    every = registry.read_arrow(T.MESSAGES, broker="b")
    current = every.filter(pc.invert(superseded_mask(
        every, rewrites.rewrites_of(registry, "b"), "physical_offset")))
    expected = fresh.read_arrow(T.MESSAGES, broker="b")
    key = ["physical_offset", "inner_index"]
    order = [(k, "ascending") for k in key]
    assert (current.select([*key, "msg_id", "body_sha256"]).sort_by(order)
            == expected.select([*key, "msg_id", "body_sha256"]).sort_by(order))
    # Spark SQL by name: rmq.messages is the current history, rmq.messages_all every row
    registry.ensure()
    counted = spark.sql("SELECT (SELECT count(*) FROM rmq.messages) AS current, "
                        "(SELECT count(*) FROM rmq.messages_all) AS every").collect()[0]
    assert (counted.current, counted.every) == (current.num_rows, every.num_rows)


def _load_command(store: Path, warehouse: Path, broker: str, snapshot: str) -> list[str]:
    """The CLI load on Spark (a driver and its JVM to kill; in process this small store's
    load can end before the kill: tests/test_load_engines.py kills that one in between)."""
    return [sys.executable, "-m", "jobs", "--warehouse", str(warehouse), "load", "--broker",
            broker, "--snapshot-id", snapshot, "--split-mib", "1", "--quiet", "--engine",
            "spark", str(store)]


def test_killed_driver_then_rerun_gives_the_same_tables(spark, golden, broker_stores,
                                                        tmp_path):  # type: ignore[no-untyped-def]
    """SIGKILL the whole driver process (Python, its JVM and the executors' workers) while
    the executors write their files, then again right after the messages commit, re-run,
    compare with an uninterrupted load: the golden warehouse's load of the same store."""
    reference, _ = golden
    variant = "v5-killed"
    store = broker_stores[variant] / "store"
    warehouse = tmp_path / "killed"
    command = _load_command(store, warehouse, variant, "s1")
    env = {**os.environ, "RMQ_SPARK_LOG_LEVEL": "ERROR"}
    messages = warehouse / "rmq.db" / "messages"

    def staged() -> bool:  # a task has written a file, nothing of it is committed
        return any((messages / STAGING).rglob("*.parquet")) and \
            len(list((messages / "_delta_log").glob("*.json"))) < 2

    def committed() -> bool:  # the messages commit landed, the rest of the load has not
        return len(list((messages / "_delta_log").glob("*.json"))) >= 2

    for moment in (staged, committed):
        process = subprocess.Popen(command, cwd=REPO, env=env, start_new_session=True)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            if (messages / "_delta_log").is_dir() and moment():
                break
            time.sleep(0.02)
        assert process.poll() is None, f"the load finished before it could be killed " \
                                       f"({moment.__name__})"
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    rerun = subprocess.run([*command, "--json", "--query", "volume_per_topic_hour"], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    loaded = tuple(t for t in T.TABLES if t not in (T.CHECK_RESULTS, T.CONSUMER_LAG, T.ALERTS,
                                                     *T.CLUSTER_TABLES))
    assert all_content(Registry(spark, warehouse), tables=loaded) == all_content(
        reference, variant, loaded)
    # nothing staged is left, and every data file in the table's directory is committed
    assert not list((messages / STAGING).rglob("*.parquet"))
    named = {Path(uri.removeprefix("file://")) for uri in DeltaTable(str(messages)).file_uris()}
    assert {p for p in messages.rglob("*.parquet") if "_delta_log" not in p.parts} == named
    # The re-run's JSON summary (which appends the kill left committed depends on timing:
    # their rows are not counted again), then the saved query it was asked for.
    summary, end = json.JSONDecoder().raw_decode(rerun.stdout)
    assert not summary["skipped"]
    assert {T.MESSAGES, T.QUEUE_ENTRIES, T.INDEX_ENTRIES} <= set(summary["tables"])
    assert summary["tables"][T.MESSAGES]["rows_added"] in (
        0, len(reference.read_rows(T.MESSAGES, broker=variant)))
    assert "saved query volume_per_topic_hour" in rerun.stdout[end:]
    assert "TopicBulk" in rerun.stdout[end:]


def _cut_in_body(record, data: bytes) -> int:  # type: ignore[no-untyped-def]
    return data.index(record.body) + len(record.body) // 2  # frame intact, BODYCRC fails


def _cut_last_byte(record, data: bytes) -> int:  # type: ignore[no-untyped-def]
    return record.total_size - 1  # frame and BODYCRC intact, properties end in a zero


# (A cut inside the header breaks the frame itself: rmqlib's walker reports a torn tail,
# tested in test_commitlog.py and test_commitlog_ranges.py; the load quarantines what the
# walker reports, test_quarantine_holds_exactly_the_unreadable_regions.)
@pytest.mark.parametrize(("cut", "next_file"), [
    (_cut_in_body, None), (_cut_last_byte, None), (_cut_in_body, "preallocated"),
    (_cut_last_byte, "unsized")], ids=["body", "last-byte", "body-preallocated",
                                       "last-byte-unsized"])
def test_torn_tail_is_read_again_by_the_next_snapshot(spark, broker_stores, tmp_path, cut,
                                                      next_file):  # type: ignore[no-untyped-def]
    """Snapshot 1 ends inside a record (a copy taken while the broker wrote); snapshot 2
    has the whole record: the high-water mark stopped before the torn bytes. A live
    broker's copy also holds the next file, created ahead all zeros, or a 0-byte one when
    the broker was killed creating it: the torn record is still the tail."""
    full = copy_store(broker_stores["v5-clean"] / "store", tmp_path / "full")
    torn = copy_store(full, tmp_path / "torn")
    last = list_segments(torn / "commitlog")
    if next_file is not None:
        ahead = torn / "commitlog" / segment_name(last[-1].start + last[-1].size)
        ahead.write_bytes(b"\0" * last[-1].size if next_file == "preallocated" else b"")
    records = [r for seg in last for r in scan_segment(seg.path)]
    victim = records[-1]
    assert victim.body, "the last record of the store has a body"
    seg_path = Path(victim.path)
    data = seg_path.read_bytes()
    at = victim.position + cut(victim, data[victim.position:victim.position + victim.total_size])
    seg_path.write_bytes(data[:at] + b"\x00" * (len(data) - at))
    registry, first = load(spark, tmp_path / "wh", "b", "s1", torn, TEST_OPTIONS)
    offsets = {r.physical_offset for r in registry.read(T.MESSAGES).select(
        "physical_offset").collect()}
    assert victim.physical_offset not in offsets
    assert len(offsets) == len(records) - 1
    quarantine = registry.read(T.QUARANTINE).collect()
    regions = [q for q in quarantine if q.length > 0]
    assert [(q.offset, q.reason.split(":")[0]) for q in regions] == [
        (victim.position, "torn tail")]
    assert first.quarantined_bytes == regions[0].length
    # the victim's queue unit waits for its record: named as a hot-copy state (no bytes)
    (note,) = [q for q in quarantine if q.length == 0]
    assert note.reason.startswith("hot copy")
    assert note.file.startswith(f"consumequeue/{victim.topic}/{victim.queue_id}/")
    assert int(Path(note.file).name) + note.offset == victim.queue_offset * 20
    registry, second = load(spark, tmp_path / "wh", "b", "s2", full, TEST_OPTIONS)
    rows = registry.read(T.MESSAGES).where(
        f"physical_offset = {victim.physical_offset}").collect()
    assert len(rows) == 1 and rows[0].first_snapshot_id == "s2"
    assert rows[0].body_crc_ok is True
    assert second.results[T.MESSAGES].rows == 1
