"""checkpoint, config/timercheck, abort and lock."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_encoders import checkpoint_bytes, timercheck_bytes

from rmqlib.checkpoint import (
    decode_checkpoint_bytes,
    decode_timercheck_bytes,
    read_checkpoint,
    read_timercheck,
)
from rmqlib.errors import NotAStoreFileError, TruncatedDataError
from rmqlib.markers import decode_lock, decode_marker, read_abort, read_lock

T0 = 1_700_000_000_000
I64 = st.integers(-(2**63), 2**63 - 1)


def test_v4_layout(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    path.write_bytes(checkpoint_bytes(T0, T0 - 10, T0 - 500))
    ckp = read_checkpoint(path)
    assert (ckp.physic_msg_timestamp, ckp.logics_msg_timestamp, ckp.index_msg_timestamp) == (
        T0, T0 - 10, T0 - 500,
    )
    assert ckp.master_flushed_offset == 0 and ckp.confirm_phy_offset == 0
    assert ckp.layout == "4.x"
    assert ckp.fields_set == ("physic_msg_timestamp", "logics_msg_timestamp",
                              "index_msg_timestamp")
    assert ckp.account.decoded == 24 and ckp.account.zero_tail == 4096 - 24
    assert ckp.issues == []
    assert ckp.min_timestamp == T0 - 10 - 3000
    assert ckp.min_timestamp_index == T0 - 3010


def test_v5_layout() -> None:
    ckp = decode_checkpoint_bytes(checkpoint_bytes(T0, T0, 0, 0, 123_456))
    assert ckp.layout == "5.x"
    assert ckp.confirm_phy_offset == 123_456 and ckp.master_flushed_offset == 0
    assert ckp.fields_set == ("physic_msg_timestamp", "logics_msg_timestamp",
                              "confirm_phy_offset")
    assert ckp.account.decoded == 48  # 5.x page: all six known fields are decoded
    assert ckp.min_timestamp_index == 0


def test_logics_physical_offset_of_newer_5x() -> None:
    """Real 5.5.0 stores set a sixth field at 40 (the CQ dispatch commitlog offset)."""
    ckp = decode_checkpoint_bytes(checkpoint_bytes(T0, T0, T0, 0, 0, logics_physical=4374486))
    assert ckp.layout == "5.x"
    assert ckp.logics_physical_offset == 4374486
    assert ckp.account.decoded == 48 and not ckp.account.unreadable


def test_min_timestamp_floors_at_zero() -> None:
    assert decode_checkpoint_bytes(checkpoint_bytes(1000, 5000, 0)).min_timestamp == 0


@settings(max_examples=60, deadline=None)
@given(I64, I64, I64, I64, I64)
def test_round_trip(a: int, b: int, c: int, d: int, e: int) -> None:
    ckp = decode_checkpoint_bytes(checkpoint_bytes(a, b, c, d, e))
    assert (ckp.physic_msg_timestamp, ckp.logics_msg_timestamp, ckp.index_msg_timestamp,
            ckp.master_flushed_offset, ckp.confirm_phy_offset) == (a, b, c, d, e)
    assert ckp.account.balanced and not ckp.account.unreadable


def test_truncated_and_empty(tmp_path: Path) -> None:
    with pytest.raises(TruncatedDataError):
        decode_checkpoint_bytes(b"")
    with pytest.raises(TruncatedDataError):
        decode_checkpoint_bytes(checkpoint_bytes(1, 2, 3)[:20])
    with pytest.raises(NotAStoreFileError):
        read_checkpoint(tmp_path / "checkpoint")
    short = decode_checkpoint_bytes(checkpoint_bytes(1, 2, 3)[:30])
    assert short.master_flushed_offset is None and short.issues
    assert short.account.balanced


def test_garbage_after_fields_is_unreadable() -> None:
    data = bytearray(checkpoint_bytes(T0, T0, T0))
    data[100:104] = b"junk"
    data[4000] = 1
    ckp = decode_checkpoint_bytes(bytes(data))
    (region,) = ckp.account.unreadable
    assert (region.offset, region.length) == (100, 3901)
    assert ckp.account.balanced


def test_oversized_file_is_noted() -> None:
    ckp = decode_checkpoint_bytes(checkpoint_bytes(1, 2, 3, size=8192))
    assert ckp.issues and ckp.account.zero_tail == 8192 - 24


def test_timercheck(tmp_path: Path) -> None:
    path = tmp_path / "timercheck"
    path.write_bytes(timercheck_bytes(T0, 5200, 17, 0, 1, T0 - 1, 42))
    tck = read_timercheck(path)
    assert (tck.last_read_time_ms, tck.last_timer_log_flush_pos, tck.last_timer_queue_offset,
            tck.master_timer_queue_offset) == (T0, 5200, 17, 0)
    assert (tck.state_version, tck.data_version_timestamp, tck.data_version_counter) == (
        1, T0 - 1, 42,
    )
    assert tck.account.decoded == 56 and tck.account.balanced
    with pytest.raises(TruncatedDataError):
        decode_timercheck_bytes(b"\x00" * 16)
    partial = decode_timercheck_bytes(timercheck_bytes(1, 2, 3, 4, size=32))
    assert partial.state_version is None and partial.issues


# --------------------------------------------------------------------------- markers


def test_abort_markers(tmp_path: Path) -> None:
    assert not read_abort(tmp_path).abnormal
    (tmp_path / "abort").write_bytes(b"")
    state = read_abort(tmp_path)
    assert state.abnormal and state.abort.kind == "empty" and state.abort_bak is None
    (tmp_path / "abort").write_bytes(b"4242")
    (tmp_path / "abort.bak").write_bytes(b"")
    state = read_abort(tmp_path)
    assert state.abort.kind == "pid" and state.abort.pid == 4242
    assert state.abort.account.decoded == 4
    assert state.abort_bak.kind == "empty"


def test_abort_with_unexpected_content() -> None:
    marker = decode_marker(b"\x00\x01garbage")
    assert marker.kind == "other" and marker.pid is None
    assert marker.account.unreadable[0].length == 9


def test_lock_file(tmp_path: Path) -> None:
    assert read_lock(tmp_path) is None
    (tmp_path / "lock").write_bytes(b"lock")
    lock = read_lock(tmp_path)
    assert lock.valid and lock.account.decoded == 4
    assert decode_lock(b"lock\x00\x00").account.zero_tail == 2
    odd = decode_lock(b"nope")
    assert not odd.valid and odd.account.unreadable[0].length == 4
    assert decode_lock(b"").account.balanced
