"""Incremental loads of successive snapshots of one running broker (harness v5-growing).

s1 and s2 are hot copies taken while the broker kept receiving messages; before s3 the
broker's own retention deleted its two oldest commitlog files. Loading them in order
must give exactly the union of their records, each once, tagged with the snapshot that
first held it; a later snapshot reads only what is new; rows of deleted files stay.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lakehouse import IN_PROCESS_OPTIONS, LOADED_TABLES, all_content, broker_rows, load

from jobs.lakehouse import tables as T
from rmqlib.commitlog.records import scan_store
from rmqlib.common.fileio import has_nonzero_after
from rmqlib.common.segments import list_segments
from rmqlib.queues.consumequeue import decode_queue, walk_queue_tree

pytestmark = [pytest.mark.spark, pytest.mark.broker]
SNAPSHOTS = ("s1", "s2", "s3")


def snapshot_store(growing: Path, name: str) -> Path:
    return growing / "snapshots" / name / "store"


def records_of(store: Path) -> dict[int, int]:
    """{physical offset: BODYCRC} of every record of a snapshot."""
    return {r.physical_offset: r.body_crc for r in scan_store(store / "commitlog")}


@pytest.fixture(scope="module")
def in_order(spark, growing_store, tmp_path_factory):  # type: ignore[no-untyped-def]
    """s1, s2, s3 loaded one after the other into one warehouse."""
    warehouse = tmp_path_factory.mktemp("growing")
    summaries = {}
    registry = None
    for name in SNAPSHOTS:
        registry, summaries[name] = load(spark, warehouse, "g", name,
                                         snapshot_store(growing_store, name))
    return registry, summaries


def test_successive_snapshots_give_exactly_the_union_of_their_records(
        in_order, growing_store):  # type: ignore[no-untyped-def]
    registry, _ = in_order
    first_seen: dict[int, str] = {}
    crcs: dict[int, int] = {}
    for name in SNAPSHOTS:
        for offset, crc in records_of(snapshot_store(growing_store, name)).items():
            first_seen.setdefault(offset, name)
            assert crcs.setdefault(offset, crc) == crc  # same bytes in every copy
    rows = registry.read(T.MESSAGES).select("physical_offset", "first_snapshot_id").collect()
    assert len(rows) == len({r.physical_offset for r in rows})  # no duplicates
    assert {r.physical_offset: r.first_snapshot_id for r in rows} == first_seen
    assert set(first_seen.values()) == set(SNAPSHOTS)


def test_snapshots_loaded_in_process_equal_the_spark_loads(in_order, spark, growing_store,  # type: ignore[no-untyped-def]
                                                          tmp_path):
    """s1, s2, s3 decoded in this process (queue tails past the loaded commitlog, a torn
    last record, retention) leave the tables exactly as the executors did."""
    registry, summaries = in_order
    for name in SNAPSHOTS:
        local, summary = load(spark, tmp_path, "g", name, snapshot_store(growing_store, name),
                              IN_PROCESS_OPTIONS)
        assert summary.bytes_read == summaries[name].bytes_read, name
    for table in LOADED_TABLES:
        assert broker_rows(local, table, "g") == broker_rows(registry, table, "g"), table


def test_rows_of_files_deleted_by_retention_are_kept(in_order, growing_store):  # type: ignore[no-untyped-def]
    registry, _ = in_order
    s3_start = list_segments(snapshot_store(growing_store, "s3") / "commitlog")[0].start
    assert s3_start > 0, "the broker's retention must have deleted the first files"
    truth = [json.loads(line) for line in
             (growing_store / "truth" / "messages.jsonl").read_text().splitlines()]
    deleted = {int(m["offsetMsgId"][-16:], 16) for m in truth if m.get("deletedByRetention")}
    assert len(deleted) > 500
    offsets = {r.physical_offset for r in registry.read(T.MESSAGES).where(
        f"physical_offset < {s3_start}").select("physical_offset").collect()}
    assert deleted <= offsets
    assert registry.read(T.RETENTION_GAPS).count() == 0  # s2 had loaded them all


def logical_end(store: Path) -> int:
    scan = scan_store(store / "commitlog")
    for _ in scan:
        pass
    return scan.logical_end


def test_a_later_snapshot_reads_only_what_is_new(in_order, growing_store):  # type: ignore[no-untyped-def]
    """The commitlog bytes a load reads are exactly those past the previous load's
    high-water mark (the end of its last complete record)."""
    _, summaries = in_order
    for before, after in (("s1", "s2"), ("s2", "s3")):
        old = records_of(snapshot_store(growing_store, before))
        new = records_of(snapshot_store(growing_store, after))
        added = summaries[after].results[T.MESSAGES]
        assert added.rows == len(set(new) - set(old)) > 0
        mark = logical_end(snapshot_store(growing_store, before))
        segments = list_segments(snapshot_store(growing_store, after) / "commitlog")
        # Segments holding only preallocated zeros past the mark are not even planned.
        past_mark = sum(max(0, s.end - max(s.start, mark)) for s in segments
                        if s.end > mark and has_nonzero_after(s.path, max(mark - s.start, 0)))
        assert added.bytes_read == past_mark
        assert past_mark < sum(s.size for s in segments)


def test_queue_entries_are_the_union_of_the_queues_units(in_order, growing_store):  # type: ignore[no-untyped-def]
    registry, _ = in_order
    expected: dict[tuple[str, int, int], int] = {}
    for name in SNAPSHOTS:
        store = snapshot_store(growing_store, name)
        cl_end = scan_store(store / "commitlog")
        for _ in cl_end:
            pass
        for queue in walk_queue_tree(store / "consumequeue").queues:
            for decoded in decode_queue(queue):
                for unit in decoded.units():
                    if unit.is_filler or unit.commitlog_offset + unit.size <= cl_end.logical_end:
                        key = (queue.topic, queue.queue_id, unit.queue_offset)
                        assert expected.setdefault(key, unit.commitlog_offset) == (
                            unit.commitlog_offset)
    rows = registry.read(T.QUEUE_ENTRIES).select(
        "topic", "queue_id", "queue_offset", "commitlog_offset").collect()
    got = {(r.topic, r.queue_id, r.queue_offset): r.commitlog_offset for r in rows}
    assert len(got) == len(rows)
    assert got == expected


def test_reloading_a_snapshot_changes_nothing(in_order, spark, growing_store):  # type: ignore[no-untyped-def]
    registry, _ = in_order
    before = all_content(registry)
    _, summary = load(spark, Path(registry.warehouse), "g", "s2",
                      snapshot_store(growing_store, "s2"))
    assert summary.skipped
    assert all_content(registry) == before


def test_first_load_after_retention_records_the_retention_gap(spark, growing_store, tmp_path):  # type: ignore[no-untyped-def]
    """A broker first loaded at s3: what its retention deleted before, no load saw."""
    registry, summary = load(spark, tmp_path / "wh", "g", "s3",
                             snapshot_store(growing_store, "s3"))
    s3_start = list_segments(snapshot_store(growing_store, "s3") / "commitlog")[0].start
    gaps = registry.read(T.RETENTION_GAPS).where("stream = 'commitlog'").collect()
    assert [(g.snapshot_id, g.from_offset, g.to_offset) for g in gaps] == [("s3", 0, s3_start)]
    assert summary.retention_gap_bytes == s3_start > 0
    s3_queues = walk_queue_tree(snapshot_store(growing_store, "s3") / "consumequeue").queues
    expected = {(q.topic, q.queue_id, 0, q.segments[0].start // 20)
                for q in s3_queues if q.segments[0].start > 0}
    assert expected, "retention deleted consume-queue files too"
    queue_gaps = registry.read(T.RETENTION_GAPS).where("stream = 'consumequeue'").collect()
    assert {(g.topic, g.queue_id, g.from_offset, g.to_offset) for g in queue_gaps} == expected
