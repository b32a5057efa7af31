"""Consume-queue units, accounting, directory walk and min/max offsets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_encoders import FILLER, cq_file, cq_unit, ext_address

from rmqlib.common.segments import Segment, segment_issues, segment_name, unsized_last_file
from rmqlib.errors import NotAStoreFileError
from rmqlib.queues.consumequeue import (
    CQ_SCHEMA,
    CQ_UNIT_SIZE,
    EXT_MAX_ADDR,
    CqFileDecode,
    decode_cq_bytes,
    decode_cq_file,
    decode_queue,
    decorate_ext_offset,
    is_ext_addr,
    iter_record_batches,
    queue_bounds,
    undecorate_ext_addr,
    walk_queue_tree,
)

I64 = st.integers(-(2**63), 2**63 - 1)
VALID_UNIT = st.tuples(
    st.integers(0, 2**63 - 1), st.integers(1, 2**31 - 1), I64
)


def decode(data: bytes, start: int = 0) -> CqFileDecode:
    return decode_cq_bytes(data, path="mem", start=start, topic="T", queue_id=3)


def write_queue(root: Path, topic: str, queue: str, files: dict[int, bytes]) -> Path:
    qdir = root / topic / queue
    qdir.mkdir(parents=True)
    for start, data in files.items():
        (qdir / segment_name(start)).write_bytes(data)
    return qdir


# --------------------------------------------------------------------------- round trips


@settings(max_examples=150, deadline=None)
@given(
    units=st.lists(VALID_UNIT, max_size=40),
    fillers=st.integers(0, 5),
    tail_units=st.integers(0, 10),
    start_units=st.integers(0, 10**6),
)
def test_random_units_round_trip(
    units: list[tuple[int, int, int]], fillers: int, tail_units: int, start_units: int
) -> None:
    all_units = [FILLER] * fillers + units
    data = cq_file(all_units, (len(all_units) + tail_units) * CQ_UNIT_SIZE)
    result = decode(data, start=start_units * CQ_UNIT_SIZE)

    assert result.count == len(all_units)
    assert result.commitlog_offset.tolist() == [u[0] for u in all_units]
    assert result.size.tolist() == [u[1] for u in all_units]
    assert result.tags_code.tolist() == [u[2] for u in all_units]
    assert result.queue_offset.tolist() == [start_units + i for i in range(len(all_units))]
    account = result.account
    assert account.balanced and not account.unreadable
    assert account.blank >= fillers * CQ_UNIT_SIZE
    assert account.decoded + account.blank == len(all_units) * CQ_UNIT_SIZE
    assert account.zero_tail == tail_units * CQ_UNIT_SIZE
    assert result.write_position == len(all_units) * CQ_UNIT_SIZE


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_always_balance(data: bytes) -> None:
    result = decode(data)
    assert result.account.balanced
    assert result.write_position <= result.data_end
    assert (result.size > 0).all() and (result.commitlog_offset >= 0).all()


def test_queue_offset_from_file_name(tmp_path: Path) -> None:
    qdir = write_queue(tmp_path, "TopicA", "2", {6_000_000: cq_file([(100, 200, 7)], 60)})
    result = decode_cq_file(qdir / segment_name(6_000_000))
    assert (result.topic, result.queue_id) == ("TopicA", 2)
    assert result.queue_offset.tolist() == [300_000]
    assert next(result.units()).commitlog_offset == 100


def test_filler_units_are_blank() -> None:
    result = decode(cq_file([FILLER, FILLER, (500, 90, 1)], 100))
    assert result.is_filler.tolist() == [True, True, False]
    assert result.account.blank == 40
    assert result.account.decoded == 20
    assert result.account.zero_tail == 40


def test_size_max_but_nonzero_offset_is_not_a_filler() -> None:
    result = decode(cq_unit(5, 0x7FFFFFFF, 0))
    assert result.is_filler.tolist() == [False]


def test_ext_address_tags() -> None:
    address = ext_address(4096)
    assert is_ext_addr(address) and address <= EXT_MAX_ADDR
    assert decorate_ext_offset(4096) == address
    assert undecorate_ext_addr(address) == 4096
    assert not is_ext_addr(-(2**31))  # a (negative) tag hash is not an address
    assert undecorate_ext_addr(-5) == -5
    result = decode(cq_file([(0, 91, address), (91, 91, -(2**31))]))
    assert result.is_ext_addr.tolist() == [True, False]


def test_record_batch_schema_and_values() -> None:
    result = decode(cq_file([FILLER, (10, 20, ext_address(0))], 60), start=200)
    batch = result.to_record_batch()
    assert batch.schema == CQ_SCHEMA
    rows = batch.to_pylist()
    assert rows[0] == {
        "topic": "T", "queue_id": 3, "queue_offset": 10, "commitlog_offset": 0,
        "size": 0x7FFFFFFF, "tags_code": 0, "is_filler": True, "is_ext_addr": False,
        "file": "mem", "file_position": 0,
    }
    assert rows[1]["queue_offset"] == 11 and rows[1]["is_ext_addr"]


def test_empty_record_batch() -> None:
    batch = decode(b"").to_record_batch()
    assert batch.num_rows == 0 and batch.schema == CQ_SCHEMA


# --------------------------------------------------------------------------- faults


def test_truncated_file_partial_unit_is_unreadable() -> None:
    data = cq_file([(1, 2, 3), (4, 5, 6)])[:35]
    result = decode(data)
    assert result.count == 1
    (region,) = result.account.unreadable
    assert (region.offset, region.length) == (20, 15)
    assert "multiple of 20" in region.reason


def test_garbage_unit_then_valid_units() -> None:
    data = cq_file([(100, 10, 0), (-7, 10, 0), (200, 10, 0)], 100)
    result = decode(data)
    assert result.commitlog_offset.tolist() == [100, 200]
    assert result.write_position == 20  # broker recovery stops at the garbage unit
    (region,) = result.account.unreadable
    assert (region.offset, region.length) == (20, 20)
    assert result.account.zero_tail == 40


def test_size_zero_unit_followed_by_data_is_unreadable() -> None:
    data = cq_file([(100, 10, 0), (300, 0, 9), (0, 0, 0), (200, 10, 0)])
    result = decode(data)
    assert [r.length for r in result.account.unreadable] == [40]


def test_zero_hole_followed_by_data() -> None:
    data = cq_file([(100, 10, 0), (0, 0, 0), (200, 10, 0)])
    (region,) = decode(data).account.unreadable
    assert "hole" in region.reason and region.offset == 20


def test_all_zero_and_empty_files() -> None:
    zero = decode(bytes(200))
    assert zero.count == 0 and zero.account.zero_tail == 200 and zero.write_position == 0
    empty = decode(b"")
    assert empty.count == 0 and empty.account.size == 0 and empty.account.balanced


def test_wrong_file_names(tmp_path: Path) -> None:
    qdir = tmp_path / "T" / "0"
    qdir.mkdir(parents=True)
    for name in ("abc", "123", "00000000000000000010"):
        (qdir / name).write_bytes(bytes(20))
        with pytest.raises(NotAStoreFileError):
            decode_cq_file(qdir / name)
    bad_queue = tmp_path / "T" / "x1"
    bad_queue.mkdir()
    (bad_queue / segment_name(0)).write_bytes(bytes(20))
    with pytest.raises(NotAStoreFileError):
        decode_cq_file(bad_queue / segment_name(0))
    with pytest.raises(NotAStoreFileError):
        decode_cq_file(qdir / segment_name(40))  # missing
    with pytest.raises(NotAStoreFileError):
        decode(bytes(20), start=7)


# --------------------------------------------------------------------------- walk


def test_walk_skips_non_queues_and_reports_loose_files(tmp_path: Path) -> None:
    root = tmp_path / "consumequeue"
    write_queue(root, "TopicA", "0", {0: cq_file([(0, 10, 0)], 40)})
    write_queue(root, "TopicA", "1", {40: bytes(40), 0: bytes(40)})
    write_queue(root, "%RETRY%g1", "0", {})
    (root / "TopicA" / "abc").mkdir()
    (root / "TopicA" / "01").mkdir()
    (root / "TopicA" / "7").write_bytes(b"")
    (root / "TopicA" / "0" / "junk.txt").write_text("x")
    for name in ("CURRENT", "MANIFEST-000004", "000009.sst", "LOG"):
        (root / name).write_bytes(b"rocks")

    tree = walk_queue_tree(root)
    assert [(q.topic, q.queue_id) for q in tree.queues] == [
        ("%RETRY%g1", 0), ("TopicA", 0), ("TopicA", 1),
    ]
    assert [s.start for s in tree.queues[2].segments] == [0, 40]
    assert sorted(p.name for p in tree.loose_files) == [
        "000009.sst", "CURRENT", "LOG", "MANIFEST-000004",
    ]
    assert tree.rocksdb
    skipped = {p.path.name: p.reason for p in tree.skipped}
    assert set(skipped) == {"abc", "01", "7", "junk.txt"}


def test_walk_missing_root(tmp_path: Path) -> None:
    with pytest.raises(NotAStoreFileError):
        walk_queue_tree(tmp_path / "nope")


def test_segment_issues() -> None:
    segs = [Segment(Path(segment_name(s)), s, z) for s, z in ((0, 100), (100, 100), (300, 90))]
    issues = segment_issues(segs, CQ_UNIT_SIZE)
    assert any("size 90" in i for i in issues)
    assert any("expected 200" in i for i in issues)
    assert segment_issues(segs[:2], CQ_UNIT_SIZE) == []
    # a 0-byte last file (a kill while rolling) is not a size issue but a state of its own
    rolled = [*segs[:2], Segment(Path(segment_name(200)), 200, 0)]
    assert segment_issues(rolled, CQ_UNIT_SIZE) == []
    assert unsized_last_file(rolled) == rolled[-1]
    assert unsized_last_file(segs) is None
    # anywhere else a 0-byte file is a size issue
    first_empty = [Segment(Path(segment_name(0)), 0, 0), *segs[1:2]]
    assert segment_issues(first_empty, CQ_UNIT_SIZE, file_size=100) == [
        f"{segment_name(0)}: size 0 != file size 100"]


def test_iter_record_batches(tmp_path: Path) -> None:
    root = tmp_path / "cq"
    write_queue(root, "T", "0", {0: cq_file([(0, 10, 0)] * 5), 100: cq_file([(50, 10, 0)], 100)})
    batches = list(iter_record_batches(walk_queue_tree(root).queues))
    table = pa.Table.from_batches(batches)
    assert table.column("queue_offset").to_pylist() == [0, 1, 2, 3, 4, 5]


# --------------------------------------------------------------------------- min / max


FILE = 100  # 5 units per file in these tests


def queue_from(tmp_path: Path, files: dict[int, list[tuple[int, int, int]]]) -> list:
    qdir = write_queue(tmp_path, "T", "0", {s: cq_file(u, FILE) for s, u in files.items()})
    (queue,) = walk_queue_tree(qdir.parent.parent).queues
    return decode_queue(queue)


def test_bounds_when_old_files_are_gone(tmp_path: Path) -> None:
    full = [(1000 + 10 * i, 10, 0) for i in range(5)]
    decodes = queue_from(tmp_path, {200: full, 300: full, 400: [(2000, 10, 0), (2010, 10, 0)]})
    bounds = queue_bounds(decodes)
    assert bounds.first_file_offset == 10
    assert bounds.min_offset == 10
    assert bounds.max_offset == (400 + 40) // 20 == 22
    assert bounds.dirty_files == ()


def test_bounds_with_commitlog_min_correction(tmp_path: Path) -> None:
    first = [(100 * i, 10, 0) for i in range(5)]
    decodes = queue_from(tmp_path, {0: first, 100: [(600, 10, 0)]})
    assert queue_bounds(decodes, commitlog_min_offset=250).min_offset == 3
    assert queue_bounds(decodes, commitlog_min_offset=0).min_offset == 0
    # every unit below the commitlog min -> empty queue, min == max
    empty = queue_bounds(decodes, commitlog_min_offset=10_000)
    assert empty.min_offset == empty.max_offset == 6


def test_bounds_fillers_skipped_unless_clmin_zero(tmp_path: Path) -> None:
    decodes = queue_from(tmp_path, {0: [FILLER, FILLER, (5000, 10, 0)]})
    assert queue_bounds(decodes, commitlog_min_offset=0).min_offset == 0
    assert queue_bounds(decodes, commitlog_min_offset=4000).min_offset == 2
    assert queue_bounds(decodes).max_offset == 3


def test_bounds_recovery_stops_at_partial_file(tmp_path: Path) -> None:
    full = [(10 * i, 10, 0) for i in range(5)]
    decodes = queue_from(tmp_path, {0: full, 100: full[:2], 200: full})
    bounds = queue_bounds(decodes)
    assert bounds.max_offset == (100 + 40) // 20
    assert bounds.dirty_files == (decodes[2].path,)


def test_bounds_all_files_full_and_empty_queue(tmp_path: Path) -> None:
    full = [(10 * i, 10, 0) for i in range(5)]
    decodes = queue_from(tmp_path, {0: full, 100: full})
    assert queue_bounds(decodes).max_offset == 10
    assert queue_bounds([]).max_offset == 0


def test_numpy_arrays_are_native_endian() -> None:
    result = decode(cq_file([(1, 2, 3)]))
    assert result.commitlog_offset.dtype == np.int64
    assert result.commitlog_offset.dtype.byteorder in ("=", "<", "|")
