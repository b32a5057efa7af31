"""5.x batch consume queue (46-byte units) and ConsumeQueueExt units."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_encoders import bcq_unit, cq_file, cqx_unit, ext_address

from rmqlib.common.segments import segment_name
from rmqlib.errors import NotAStoreFileError
from rmqlib.queues.batchconsumequeue import (
    BCQ_SCHEMA,
    BCQ_UNIT_SIZE,
    base_offset_gaps,
    bcq_bounds,
    decode_bcq_bytes,
    decode_bcq_file,
)
from rmqlib.queues.consumequeue import decode_cq_bytes
from rmqlib.queues.consumequeue_ext import (
    CQX_SCHEMA,
    ExtAddressError,
    decode_cqx_bytes,
    decode_cqx_file,
    load_ext_queue,
)


def bcq(data: bytes, start: int = 0):
    return decode_bcq_bytes(data, path="mem", start=start, topic="B", queue_id=1)


def cqx(data: bytes, start: int = 0):
    return decode_cqx_bytes(data, path="mem", start=start, topic="X", queue_id=0)


# --------------------------------------------------------------------------- batch CQ

BCQ_UNIT = st.tuples(
    st.integers(0, 2**62), st.integers(1, 2**31 - 1), st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**62), st.integers(1, 2**15 - 1),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(BCQ_UNIT, max_size=20), st.integers(0, 5))
def test_bcq_round_trip(units: list[tuple[int, int, int, int, int]], tail: int) -> None:
    base = 0
    encoded = []
    for offset, size, tags, store, batch in units:
        encoded.append(bcq_unit(offset, size, tags, store, base, batch))
        base += batch
    data = b"".join(encoded) + bytes(tail * BCQ_UNIT_SIZE)
    result = bcq(data, start=BCQ_UNIT_SIZE * 7)
    assert result.count == len(units)
    assert result.fields["commitlog_offset"].tolist() == [u[0] for u in units]
    assert result.fields["tags_code"].tolist() == [u[2] for u in units]
    assert result.fields["batch_size"].tolist() == [u[4] for u in units]
    assert result.fields["compacted_offset"].tolist() == [-1] * len(units)
    assert result.unit_index.tolist() == [7 + i for i in range(len(units))]
    assert result.account.decoded == len(units) * BCQ_UNIT_SIZE
    assert result.account.zero_tail == tail * BCQ_UNIT_SIZE
    assert base_offset_gaps([result]) == []
    batch = result.to_record_batch()
    assert batch.schema == BCQ_SCHEMA and batch.num_rows == len(units)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_bcq_arbitrary_bytes_balance(data: bytes) -> None:
    assert bcq(data).account.balanced


def test_bcq_invalid_unit_and_partial_tail() -> None:
    data = (
        bcq_unit(100, 50, 0, 1, 0, 4)
        + bcq_unit(200, 50, 0, 1, 4, 0)  # batch size 0: invalid
        + bcq_unit(300, 50, 0, 1, 4, 2)
        + b"\x01\x02"
    )
    result = bcq(data)
    assert result.fields["commitlog_offset"].tolist() == [100, 300]
    assert result.write_position == BCQ_UNIT_SIZE
    assert [(r.offset, r.length) for r in result.account.unreadable] == [
        (46, 46), (138, 2),
    ]


def test_bcq_bounds_and_gaps() -> None:
    first = bcq(bcq_unit(1, 9, 0, 1, 10, 3) + bcq_unit(2, 9, 0, 1, 13, 2))
    second = bcq(bcq_unit(3, 9, 0, 1, 16, 5) + bytes(46), start=92)
    assert bcq_bounds([first, second]).min_offset == 10
    assert bcq_bounds([first, second]).max_offset == 21
    assert base_offset_gaps([first, second]) == [(2, 15, 16)]
    assert bcq_bounds([]).max_offset == 0


def test_bcq_file_name_must_be_unit_multiple(tmp_path: Path) -> None:
    qdir = tmp_path / "B" / "0"
    qdir.mkdir(parents=True)
    (qdir / segment_name(45)).write_bytes(bytes(46))
    with pytest.raises(NotAStoreFileError):
        decode_bcq_file(qdir / segment_name(45))
    (qdir / segment_name(46)).write_bytes(bcq_unit(5, 5, 0, 1, 0, 1))
    assert decode_bcq_file(qdir / segment_name(46)).unit_index.tolist() == [1]


# --------------------------------------------------------------------------- ConsumeQueueExt


def test_cqx_units_and_addresses(tmp_path: Path) -> None:
    units = [cqx_unit(11, 1000), cqx_unit(22, 2000, bytes(range(14))), cqx_unit(33, 3000)]
    data = b"".join(units) + bytes(100)
    start = 50_331_648
    qdir = tmp_path / "X" / "4"
    qdir.mkdir(parents=True)
    (qdir / segment_name(start)).write_bytes(data)
    result = decode_cqx_file(qdir / segment_name(start))
    assert [u.tags_code for u in result.units] == [11, 22, 33]
    assert result.units[1].filter_bitmap == bytes(range(14))
    assert [u.address for u in result.units] == [
        ext_address(start), ext_address(start + 20), ext_address(start + 54),
    ]
    assert result.account.decoded == 74 and result.account.zero_tail == 100
    batch = result.to_record_batch()
    assert batch.schema == CQX_SCHEMA and batch.column("queue_id").to_pylist() == [4] * 3

    # a CQ unit's tagsCode resolves to the ext unit at that address
    cq = decode_cq_bytes(cq_file([(0, 90, ext_address(start + 20))]), path="m", start=0,
                         topic="X", queue_id=4)
    assert cq.is_ext_addr.tolist() == [True]
    assert result.by_address()[int(cq.tags_code[0])].msg_store_time == 2000


def test_ext_addresses_that_name_no_unit_are_typed_errors(tmp_path: Path) -> None:
    """Past the ext files' end, inside a unit, before the first file: ExtAddressError naming
    the address and the queue, never a unit's worth of garbage."""
    start = 4096
    qdir = tmp_path / "consumequeue_ext" / "X" / "4"
    qdir.mkdir(parents=True)
    (qdir / segment_name(start)).write_bytes(cqx_unit(11, 1000) + bytes(44))
    queue = load_ext_queue(qdir, "X", 4)
    assert queue.resolve(ext_address(start)).tags_code == 11
    with pytest.raises(ExtAddressError, match=r"past the ext files of X/4, which end at 4160"):
        queue.resolve(ext_address(start + 64))
    with pytest.raises(ExtAddressError, match="no ext unit starts at ext offset 4098"):
        queue.resolve(ext_address(start + 2))
    with pytest.raises(ExtAddressError, match="past the ext files"):
        queue.resolve(ext_address(0))
    assert load_ext_queue(tmp_path / "missing", "X", 4).decodes == []


def test_cqx_end_marker_is_blank() -> None:
    data = cqx_unit(1, 2) + b"\xff\xff" + bytes(30)
    result = cqx(data)
    assert result.end_marker_position == 20
    assert result.account.blank == 32 and result.account.decoded == 20


def test_cqx_garbage_after_marker_and_bad_unit() -> None:
    # the end marker ends the file whatever follows (ConsumeQueueExt.recover moves on)
    after_marker = cqx(cqx_unit(1, 2) + b"\xff\xff" + b"\x00\x07" + bytes(10))
    assert after_marker.account.unreadable == []
    assert after_marker.account.blank == 14 and after_marker.account.balanced
    bad_size = cqx(cqx_unit(1, 2) + b"\x00\x05" + bytes(18) + b"\x01" + bytes(9))
    (region,) = bad_size.account.unreadable
    assert region.offset == 20 and "below the minimum" in region.reason
    assert len(bad_size.units) == 1 and bad_size.account.balanced
    mismatch = bytearray(cqx_unit(1, 2, b"ab"))
    mismatch[19] = 5  # bitMapSize 5, size 22
    assert "does not match" in cqx(bytes(mismatch)).account.unreadable[0].reason
    too_long = cqx(cqx_unit(1, 2, b"abc")[:-1])
    assert "past the end" in too_long.account.unreadable[0].reason


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_cqx_arbitrary_bytes_balance(data: bytes) -> None:
    assert cqx(data).account.balanced
