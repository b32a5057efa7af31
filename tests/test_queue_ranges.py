"""Range decoding of queue files (what the incremental Spark load reads): the decodes
of adjacent unit-aligned ranges add up to the whole-file decode, units and bytes."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from store_encoders import FILLER, bcq_unit, cq_unit

from rmqlib.common.segments import segment_name
from rmqlib.queues.batchconsumequeue import BCQ_UNIT_SIZE, decode_bcq_file, decode_bcq_range
from rmqlib.queues.consumequeue import CQ_UNIT_SIZE, decode_cq_file, decode_cq_range

ZERO_CQ = b"\0" * CQ_UNIT_SIZE
ZERO_BCQ = b"\0" * BCQ_UNIT_SIZE
cq_units = st.lists(st.one_of(
    st.tuples(st.integers(0, 2**40), st.integers(1, 2**20), st.integers(-(2**63), 2**63 - 1))
    .map(lambda u: cq_unit(*u)),
    st.just(cq_unit(*FILLER)),
    st.just(ZERO_CQ),  # holes when data follows, zero tail at the end
    st.just(cq_unit(-5, 10, 0)),  # invalid unit
), max_size=30)
bcq_units = st.lists(st.one_of(
    st.tuples(st.integers(0, 2**40), st.integers(1, 2**20), st.integers(0, 2**40),
              st.integers(0, 2**40), st.integers(1, 100))
    .map(lambda u: bcq_unit(u[0], u[1], 0, u[2], u[3], u[4])),
    st.just(ZERO_BCQ),
), max_size=20)


def write(data: bytes, start: int, directory: Path) -> Path:
    path = directory / "T" / "3" / segment_name(start)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def check_ranges(path: Path, unit: int, cuts: list[int], whole, decode_range) -> None:  # type: ignore[no-untyped-def]
    size = path.stat().st_size
    bounds = sorted({0, size, *(min(c * unit, size // unit * unit) for c in cuts)})
    parts = [decode_range(path, a, b) for a, b in itertools.pairwise(bounds)]
    for part in parts:
        assert part.account.balanced
    positions = [p.file_position for p in parts] or [np.empty(0, np.int64)]
    assert np.array_equal(np.concatenate(positions),
                          whole.file_position)
    for name in ("decoded", "blank", "zero_tail", "unreadable_bytes"):
        assert sum(getattr(p.account, name) for p in parts) == getattr(whole.account, name)
    ours = [r for p in parts for r in p.account.unreadable]
    assert merged_regions(ours) == merged_regions(whole.account.unreadable)


def merged_regions(regions) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """(offset, length) with adjacent regions joined: a range cut may split one."""
    merged: list[list[int]] = []
    for offset, length in sorted((r.offset, r.length) for r in regions):
        if merged and merged[-1][0] + merged[-1][1] == offset:
            merged[-1][1] += length
        else:
            merged.append([offset, length])
    return merged


@settings(max_examples=150, deadline=None)
@given(units=cq_units, partial=st.binary(max_size=19), start=st.integers(0, 1000),
       cuts=st.lists(st.integers(0, 40), max_size=5))
def test_cq_ranges_add_up_to_the_file(units, partial, start, cuts) -> None:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as tmp:
        path = write(b"".join(units) + partial, start * CQ_UNIT_SIZE, Path(tmp))
        whole = decode_cq_file(path)
        check_ranges(path, CQ_UNIT_SIZE, cuts, whole, decode_cq_range)
        parts = [decode_cq_range(path, 0)]
        assert np.array_equal(parts[0].queue_offset, whole.queue_offset)


@settings(max_examples=100, deadline=None)
@given(units=bcq_units, start=st.integers(0, 1000),
       cuts=st.lists(st.integers(0, 25), max_size=4))
def test_bcq_ranges_add_up_to_the_file(units, start, cuts) -> None:  # type: ignore[no-untyped-def]
    with tempfile.TemporaryDirectory() as tmp:
        path = write(b"".join(units), start * BCQ_UNIT_SIZE, Path(tmp))
        whole = decode_bcq_file(path)
        check_ranges(path, BCQ_UNIT_SIZE, cuts, whole, decode_bcq_range)
