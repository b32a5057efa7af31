"""Byte-range scans, resynchronisation, byte accounting and damaged files.

The contract (rmqlib/commitlog/walk.py): scans of adjacent ranges yield exactly the
records of the whole-file scan, their accounts add up to the file, and no damage ever
raises or disappears: every byte is decoded, blank, zero tail or an unreadable region.
"""

from __future__ import annotations

import itertools
import os
import random
import struct
from pathlib import Path

import numpy as np
import pytest
import rmq_encoder as E
from commitlog_strategies import messages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqlib.commitlog import walk as W
from rmqlib.commitlog.arrow import scan_segment_arrow
from rmqlib.commitlog.records import GapKind, ScanResult, scan_segment, scan_store, split_ranges
from rmqlib.errors import NotAStoreFileError

SEG = 16384
NAME = "00000000000000000000"


def scan(path: Path, start: int = 0, end: int | None = None,
         **kwargs: object) -> tuple[list[tuple[int, bytes, bool | None]], ScanResult]:
    s = scan_segment(path, start, end, **kwargs)  # type: ignore[arg-type]
    records = [(r.position, r.body, r.body_crc_ok) for r in s]
    return records, s.result


def assert_ranges_equal_whole(path: Path, cuts: list[int], **kwargs: object) -> None:
    size = path.stat().st_size
    whole, whole_result = scan(path, **kwargs)
    bounds = [0, *sorted(cuts), size]
    records: list[tuple[int, bytes, bool | None]] = []
    unreadable = []
    decoded = blank = zero = 0
    covered = 0
    for start, end in itertools.pairwise(bounds):
        part, result = scan(path, start, end, **kwargs)
        assert all(start <= pos < max(end, start + 1) for pos, _, _ in part)
        result.account.check()
        if result.span_end > result.span_start:
            assert result.span_start == covered, "spans must tile the file in order"
            covered = result.span_end
        records += part
        decoded += result.account.decoded
        blank += result.account.blank
        zero += result.account.zero_tail
        unreadable += result.account.unreadable
    assert records == whole
    assert covered == size
    assert (decoded, blank, zero) == (whole_result.account.decoded, whole_result.account.blank,
                                      whole_result.account.zero_tail)
    assert unreadable == whole_result.account.unreadable


def damaged_segment(directory: Path, seed: int) -> tuple[Path, E.CommitLogWriter]:
    """A segment with every kind of trouble: bad CRC, zeroed hole, flipped framing,
    stomped garbage, and a torn record at the end of written data."""
    rng = random.Random(seed)
    msgs = E.sample_messages(70, body_size=0, seed=seed)
    for msg in msgs:
        msg.body = rng.randbytes(rng.randrange(0, 400))
    msgs[5].body_crc = 1
    writer = E.CommitLogWriter(SEG * 4)
    for msg in msgs:
        writer.append(msg)
    data = writer.segments[0]
    placed = writer.placed
    hole_start, hole_end = placed[10].position, placed[12].position
    data[hole_start:hole_end] = bytes(hole_end - hole_start)  # two records wiped
    data[placed[20].position + 2] ^= 0x40  # TOTALSIZE of record 20
    data[placed[30].position + 50 : placed[30].position + 250] = rng.randbytes(200)
    torn = E.encode(E.Message(body=b"t" * 500), writer.offset)
    data[writer.position : writer.position + 200] = torn[:200]
    path = directory / NAME
    path.write_bytes(bytes(data))
    return path, writer


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("segments")
    clean = base / "clean"
    writer = E.CommitLogWriter(SEG)
    for msg in E.sample_messages(200, body_size=60):
        writer.append(msg)
    writer.write(clean, preallocate_next=False)
    damaged, _ = damaged_segment(base, seed=1)
    big = base / "big"
    big.mkdir()
    writer = E.CommitLogWriter(SEG * 2)
    for size in (10, 9000, 20, 5000, 30, 12000):
        writer.append(E.Message(body=bytes([size % 251]) * size))
    writer.write(big, preallocate_next=False)
    return {"clean": clean / NAME, "damaged": damaged, "big": big / NAME}


# ----------------------------------------------------------------------------- splits


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.sampled_from(["clean", "damaged", "big"]),
       cuts=st.lists(st.integers(0, 4 * SEG), max_size=6),
       small_windows=st.booleans())
def test_union_of_range_scans_equals_whole_file_scan(
        segments: dict[str, Path], which: str, cuts: list[int], small_windows: bool) -> None:
    path = segments[which]
    cuts = [min(c, path.stat().st_size) for c in cuts]
    kwargs = {"window_size": 4096} if small_windows else {}
    assert_ranges_equal_whole(path, cuts, **kwargs)


def test_every_split_point_of_the_damaged_segment(segments: dict[str, Path]) -> None:
    """Exhaustive over one region: each cut inside the damaged records still adds up."""
    path = segments["damaged"]
    for cut in range(3000, 3000 + 2000, 37):
        assert_ranges_equal_whole(path, [cut])


def test_record_crossing_the_range_end_belongs_to_its_start(
        segments: dict[str, Path]) -> None:
    path = segments["clean"]
    whole, _ = scan(path)
    second = whole[1][0]
    first, result = scan(path, 0, second - 1)  # the range ends inside record 0
    assert [pos for pos, _, _ in first] == [0]
    assert result.span_end == second  # owns the whole first record, past `end`
    _rest, result = scan(path, second - 1, None)
    assert result.span_start == second


def test_range_starting_inside_a_record_resyncs_to_the_next(segments: dict[str, Path]) -> None:
    path = segments["clean"]
    whole, _ = scan(path)
    third = whole[2][0]
    part, result = scan(path, whole[1][0] + 1, third + 1)
    assert [pos for pos, _, _ in part] == [third]
    assert result.span_start == third


def test_range_with_no_record_start_owns_nothing(segments: dict[str, Path]) -> None:
    path = segments["big"]
    whole, _ = scan(path)
    inside_big = whole[1][0] + 100
    part, result = scan(path, inside_big, inside_big + 500)
    assert part == [] and result.account.size == 0
    assert result.span_start == result.span_end


def test_split_ranges_cover_the_file() -> None:
    assert split_ranges(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert split_ranges(0, 4) == [(0, 0)]
    with pytest.raises(ValueError):
        split_ranges(10, 0)


def test_arrow_ranges_match_record_ranges(segments: dict[str, Path]) -> None:
    path = segments["damaged"]
    size = path.stat().st_size
    cuts = [0, 5000, 5001, 20000, size]
    for start, end in itertools.pairwise(cuts):
        records, result = scan(path, start, end)
        arrow = scan_segment_arrow(path, start, end, batch_size=7)
        positions = [p for batch in arrow for p in batch.column("file_position").to_pylist()]
        assert positions == [pos for pos, _, _ in records]
        assert arrow.account.as_dict() == result.account.as_dict()
        assert arrow.result.body_crc_failures == result.body_crc_failures


# ----------------------------------------------------------------------------- damage


def test_damaged_segment_is_fully_accounted(segments: dict[str, Path]) -> None:
    path = segments["damaged"]
    records, result = scan(path)
    account = result.account.check()
    kinds = [gap.kind for gap in result.gaps]
    assert kinds.count(GapKind.CORRUPT) == 3
    assert kinds[-2:] == [GapKind.TORN_TAIL, GapKind.ZERO_TAIL]
    zero_hole = result.gaps[0]
    assert "zero-filled" in zero_hole.reason
    assert account.unreadable[0].offset == zero_hole.offset
    assert all(region.reason.startswith(("corrupt:", "torn tail:"))
               for region in account.unreadable)
    assert [ok for _, _, ok in records].count(False) == 1  # the record with a bad CRC
    assert result.body_crc_failures == [records[5][0]]
    assert result.logical_end == result.gaps[-2].offset


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.integers(0, 2**31), xor=st.integers(1, 255))
def test_any_flipped_byte_is_reported_never_crashes(
        segments: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, where: int,
        xor: int) -> None:
    original = segments["clean"]
    data = bytearray(original.read_bytes())
    spot = where % len(data)
    data[spot] ^= xor
    path = tmp_path_factory.mktemp("flip") / NAME
    path.write_bytes(bytes(data))
    clean = {pos: (body, total) for (pos, body, _), total in
             zip(scan(original)[0], _totals(original), strict=True)}
    records, result = scan(path)
    assert result.account.check().size == len(data)
    hit = [pos for pos, (_, total) in clean.items() if pos <= spot < pos + total]
    for pos, body, ok in records:
        assert pos in clean, "no record may appear where none was written"
        if pos not in hit:
            assert (body, ok) == (clean[pos][0], True)
    for pos in clean:
        if pos not in hit:
            assert pos in {p for p, _, _ in records}, "intact records must survive"
    if hit and hit[0] not in {p for p, _, _ in records}:
        assert any(gap.offset == hit[0] for gap in result.gaps)
    elif hit and hit[0] + 88 <= spot < hit[0] + 88 + len(clean[hit[0]][0]):
        assert dict((p, ok) for p, _, ok in records)[hit[0]] is False  # body byte: bad CRC


def _totals(path: Path) -> list[int]:
    return [r.total_size for r in scan_segment(path)]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(1, SEG - 1))
def test_truncated_copy_keeps_whole_records_and_reports_torn_tail(
        segments: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, cut: int) -> None:
    original = segments["clean"]
    path = tmp_path_factory.mktemp("cut") / NAME
    path.write_bytes(original.read_bytes()[:cut])
    whole = [(r.position, r.total_size) for r in scan_segment(original)]
    records, result = scan(path)
    assert [pos for pos, _, _ in records] == [p for p, t in whole if p + t <= cut]
    assert result.account.check().size == cut
    assert all(gap.kind is not GapKind.CORRUPT for gap in result.gaps)


def test_zeroed_region_in_the_middle_is_corruption_not_end(tmp_path: Path) -> None:
    writer = E.CommitLogWriter(SEG)
    for msg in E.sample_messages(40, body_size=100):
        writer.append(msg)
    data = writer.segments[0]
    start, end = writer.placed[10].position, writer.placed[13].position + 7
    data[start:end] = bytes(end - start)
    (tmp_path / NAME).write_bytes(bytes(data))
    records, result = scan(tmp_path / NAME)
    assert [p for p, _, _ in records] == [p.position for p in writer.placed
                                          if not start <= p.position < end]
    (gap, tail) = result.gaps
    assert (gap.kind, gap.offset, gap.length) == (GapKind.CORRUPT, start,
                                                  writer.placed[14].position - start)
    assert tail.kind is GapKind.ZERO_TAIL


def test_garbage_with_magic_bytes_does_not_invent_records(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    data = bytearray(rng.integers(0, 256, 20000, dtype=np.uint8).tobytes())
    for pos in range(100, 19000, 331):  # magic-looking bytes everywhere
        data[pos : pos + 4] = struct.pack(">I", E.MAGIC_V1)
        data[pos - 4 : pos] = struct.pack(">i", 200)
    (tmp_path / NAME).write_bytes(bytes(data))
    records, result = scan(tmp_path / NAME)
    assert records == []
    assert result.account.check().unreadable[0].length == len(data)


# ----------------------------------------------------------------------------- names


def test_names_that_cannot_be_segments_raise_typed_errors(tmp_path: Path) -> None:
    (tmp_path / "commitlog.bak").write_bytes(b"x")
    with pytest.raises(NotAStoreFileError):
        scan_segment(tmp_path / "commitlog.bak")
    with pytest.raises(NotAStoreFileError):
        scan_segment(tmp_path / NAME)  # missing
    (tmp_path / "00000000000000000001").mkdir()
    with pytest.raises(NotAStoreFileError):
        scan_segment(tmp_path / "00000000000000000001")
    with pytest.raises(ValueError):
        scan_segment(tmp_path / "commitlog.bak", 5, 1, base_offset=0)


def test_misnamed_segment_is_unreadable_with_a_hint(tmp_path: Path) -> None:
    writer = E.CommitLogWriter(SEG)
    for msg in E.sample_messages(20, body_size=10):
        writer.append(msg)
    wrong = tmp_path / f"{SEG * 3:020d}"
    wrong.write_bytes(bytes(writer.segments[0]))
    records, result = scan(wrong)
    assert records == []
    assert "misnamed" in result.account.unreadable[0].reason
    fixed = [r.physical_offset for r in scan_segment(wrong, base_offset=0)]
    assert fixed == [p.physical_offset for p in writer.placed]


def test_store_level_issues(tmp_path: Path) -> None:
    writer = E.CommitLogWriter(SEG)
    for msg in E.sample_messages(300, body_size=100):
        writer.append(msg)
    writer.write(tmp_path)
    files = sorted(tmp_path.iterdir())
    files[2].unlink()  # a hole in the names
    older = bytearray(files[1].read_bytes())
    blank = older.rfind(struct.pack(">I", E.MAGIC_BLANK)) - 4
    older[blank : blank + 8] = b"\x01" * 8  # BLANK destroyed: torn tail in an old file
    files[1].write_bytes(bytes(older))
    store = scan_store(tmp_path)
    list(store)
    reasons = " | ".join(issue.reason for issue in store.issues)
    assert "previous one ends at" in reasons
    assert "does not end with a BLANK" in reasons
    assert "before the logical end" in reasons


def test_window_memory_is_bounded_by_window_size(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    writer = E.CommitLogWriter(1 << 20)
    for msg in E.sample_messages(2000, body_size=200):
        writer.append(msg)
    writer.write(tmp_path, preallocate_next=False)
    sizes: list[int] = []
    original = W.Window.load.__func__  # type: ignore[attr-defined]

    def spy(cls: type, seg: W.SegmentFile, pos: int, length: int) -> W.Window:
        window = original(cls, seg, pos, length)
        sizes.append(window.end - window.base)
        return window

    monkeypatch.setattr(W.Window, "load", classmethod(spy))
    count = sum(1 for _ in scan_segment(tmp_path / NAME, window_size=65536))
    assert count == 2000 == len(writer.placed)
    assert max(sizes) <= 65536 and len(sizes) > 10


# ----------------------------------------------------------------------------- predicate


@settings(max_examples=300, deadline=None)
@given(msg=messages(max_body=64), mutations=st.lists(
    st.tuples(st.integers(0, 140), st.integers(0, 255)), min_size=1, max_size=3))
def test_vectorised_and_scalar_validity_agree(msg: E.Message,
                                              mutations: list[tuple[int, int]]) -> None:
    record = bytearray(E.encode(msg, 4096))
    for at, value in mutations:
        if at < len(record):
            record[at] = value
    data = bytes(record) + bytes(64)
    seg = W.MemorySegment(data, start=4096)
    scalar = W.classify_at(seg, 0).kind is W.FrameKind.MESSAGE
    window = W.Window.load(seg, 0, len(data))
    chained = W._chain(data, 0, len(data) - 8, len(data), 1)
    vector = bool(chained) and len(W.validate_run(window, np.asarray(chained), 4096)) == 1
    assert scalar == vector


def test_random_files_of_records_and_noise_never_crash(tmp_path: Path) -> None:
    rng = random.Random(11)
    for round_ in range(20):
        writer = E.CommitLogWriter(SEG)
        for msg in E.sample_messages(rng.randrange(1, 50), body_size=rng.randrange(300),
                                     seed=round_):
            writer.append(msg)
        data = writer.segments[0]
        for _ in range(rng.randrange(5)):
            at = rng.randrange(len(data))
            data[at : at + rng.randrange(1, 64)] = os.urandom(rng.randrange(1, 64))
        path = tmp_path / f"{round_:020d}"
        path.write_bytes(bytes(data[: rng.randrange(1, SEG + 1)]))
        s = scan_segment(path, base_offset=0)
        list(s)
        s.account.check()


def test_records_after_a_blank_are_skipped_like_the_broker_does(tmp_path: Path) -> None:
    """The broker goes on with the next file at a BLANK (CommitLog.
    checkMessageAndReturnSize returns size 0): a stale record in its filler is never read,
    so it is neither decoded nor an issue; it is counted, and its bytes are blank."""
    writer = E.CommitLogWriter(SEG)
    for msg in E.sample_messages(10, body_size=10):
        writer.append(msg)
    writer.roll()  # BLANK at the write position, zeros after it...
    data = writer.segments[0]
    blank_at = writer.placed[-1].position + writer.placed[-1].length
    stale_at = blank_at + 64
    stale = E.encode(E.Message(body=b"stale"), stale_at)  # ...but a stale record past it
    data[stale_at : stale_at + len(stale)] = stale
    (tmp_path / NAME).write_bytes(bytes(data))
    store = scan_store(tmp_path)
    assert [r.position for r in store][-1] == writer.placed[-1].position
    assert store.issues == []
    (result,) = store.segments
    assert result.records_after_blank == 1
    assert (result.account.blank, result.account.unreadable) == (SEG - blank_at, [])
    # every split of the file agrees: no range owns the stale record
    for split in (64, 100, 512, 1000):
        found = []
        for lo, hi in split_ranges(SEG, split):
            scan = scan_segment(tmp_path / NAME, lo, hi)
            found += [r.position for r in scan]
        assert found == [p.position for p in writer.placed], split


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(msgs=st.lists(messages(max_body=200), min_size=0, max_size=12),
       filler=st.binary(min_size=0, max_size=700), tail=st.integers(0, 300),
       stale=st.booleans(), split=st.integers(64, 4096))
def test_blank_with_any_filler_scans_to_exactly_the_records(
        tmp_path: Path, msgs: list[E.Message], filler: bytes, tail: int, stale: bool,
        split: int) -> None:
    """Any valid records, then a BLANK whose filler holds arbitrary bytes (a stale record
    among them, or not): the scan gives exactly those records, the account sums to the
    file size with 0 unreadable (the BLANK's length is blank), and every split agrees."""
    data, positions = bytearray(), []
    for msg in msgs:
        positions.append(len(data))
        data += E.encode(msg, len(data))
    blank_at = len(data)
    body = bytearray(filler) + bytes(tail)
    if stale and len(body) > 300:  # a whole record left there before a recovery truncation
        old = E.encode(E.Message(body=b"stale"), blank_at + 8 + 16)
        if 16 + len(old) <= len(body):
            body[16:16 + len(old)] = old
    data += E.encode_blank(8 + len(body)) + body
    (tmp_path / NAME).write_bytes(bytes(data))
    records, result = scan(tmp_path / NAME)
    assert [position for position, _, _ in records] == positions
    account = result.account.check()
    assert account.size == len(data) and account.unreadable_bytes == 0
    assert account.blank == len(data) - blank_at and result.blanks == [blank_at]
    assert [g.kind for g in result.gaps] == []
    arrow = scan_segment_arrow(tmp_path / NAME)
    assert sum(batch.num_rows for batch in arrow) == len(msgs)
    assert arrow.account.as_dict() == account.as_dict()
    found, total = [], 0
    for lo, hi in split_ranges(len(data), split):
        part, part_result = scan(tmp_path / NAME, lo, hi)
        found += [position for position, _, _ in part]
        total += part_result.account.check().size
        assert part_result.account.unreadable == []
    assert found == [position for position, _, _ in records] and total == len(data)

