"""rmqlib.rocksdb.state_store: the 5.5.x ``rocksdbstore/`` database, its ``trans`` and ``timer``
families in the layouts of RocketMQ 5.5.0 (TransRocksDBRecord, TimerRocksDBRecord), read back
exactly from a real RocksDB written here with the same bytes (hypothesis), entries off the
layout reported with their reason and never dropped; and the empty database every 5.5.0
store of the harness has (the RocksDB modes off)."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqlib.rocksdb.state_store import (
    STATE_STORE_DIR,
    TimelineEntry,
    UndecidedHalf,
    read_state_store,
)

topics = st.text(st.characters(categories=("L", "N"), include_characters="_-%"), min_size=1,
                 max_size=20)
msg_ids = st.text("0123456789ABCDEF", min_size=32, max_size=32)
halves = st.builds(UndecidedHalf, st.integers(0, 2**62), topics, msg_ids,
                   st.integers(0, 20), st.integers(1, 4 << 20))
timeline = st.builds(TimelineEntry, st.integers(0, 2**45), msg_ids, st.integers(1, 4 << 20),
                     st.integers(0, 2**62))
garbage = st.tuples(st.sampled_from(["trans", "timer"]), st.binary(max_size=30),
                    st.binary(max_size=20))


def write_database(root: Path, families: dict[str, dict[bytes, bytes]]) -> None:
    """A RocksDB with the column families of MessageRocksDBStorage, holding ``families``."""
    from rocksdict import Options, Rdict

    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(root / STATE_STORE_DIR), options)
    for name in ("timer", "trans"):
        db.create_column_family(name, options)
    for name, entries in families.items():
        family = db if name == "default" else db.get_column_family(name)
        for key, value in entries.items():
            family[key] = value
    db.close()


def trans_key(h: UndecidedHalf) -> bytes:
    return struct.pack(">q", h.half_offset) + f"@{h.topic}@{h.msg_id}".encode()


def timer_key(t: TimelineEntry) -> bytes:
    return struct.pack(">q", t.delivery_ms) + t.msg_id.encode()


@settings(max_examples=60, deadline=None)
@given(st.lists(halves, max_size=8, unique_by=lambda h: (h.half_offset, h.msg_id)),
       st.lists(timeline, max_size=8, unique_by=lambda t: (t.delivery_ms, t.msg_id)),
       st.one_of(st.none(), st.integers(0, 2**62)), st.one_of(st.none(), st.integers(0, 2**45)),
       st.lists(garbage, max_size=4))
def test_every_entry_reads_back_and_what_is_off_the_layout_is_reported(
        undecided: list[UndecidedHalf], entries: list[TimelineEntry], indexed: int | None,
        checkpoint: int | None, junk: list[tuple[str, bytes, bytes]]) -> None:
    trans = {trans_key(h): struct.pack(">ii", h.check_times, h.size) for h in undecided}
    timer = {timer_key(t): struct.pack(">iq", t.size, t.commitlog_offset) for t in entries}
    if indexed is not None:
        trans[b"lastOffsetPy"] = struct.pack(">q", indexed)
    if checkpoint is not None:
        timer[b"timeline_checkpoint"] = struct.pack(">q", checkpoint)
    expected_bad = set()
    for family, key, value in junk:
        target = trans if family == "trans" else timer
        if key in target or not key:
            continue
        good_trans = family == "trans" and len(value) == 8 and key[8:9] == b"@" and \
            key[9:].count(b"@") >= 1
        good_timer = family == "timer" and len(key) > 8 and len(value) == 12
        if good_trans or good_timer or key in (b"lastOffsetPy", b"timeline_checkpoint",
                                               b"sys_topic_scan_offset_checkpoint"):
            continue  # a well-formed entry by chance: not garbage
        target[key] = value
        expected_bad.add((family, key))
    with tempfile.TemporaryDirectory() as scratch:
        write_database(Path(scratch), {"trans": trans, "timer": timer})
        state = read_state_store(scratch)
    assert state is not None
    assert sorted(state.undecided, key=trans_key) == sorted(undecided, key=trans_key)
    assert sorted(state.timeline, key=timer_key) == sorted(entries, key=timer_key)
    assert (state.trans_indexed_to, state.timeline_checkpoint) == (indexed, checkpoint)
    assert {(b.family, b.key) for b in state.bad} == expected_bad
    assert all(b.reason for b in state.bad)
    assert state.pending_timers() == [t for t in state.timeline
                                      if checkpoint is None or t.delivery_ms >= checkpoint]


def test_a_store_without_the_directory_has_no_state_store(tmp_path: Path) -> None:
    assert read_state_store(tmp_path) is None


@pytest.mark.broker
def test_the_harness_5_5_stores_hold_an_empty_database(broker_stores: dict[str, Path]) -> None:
    """Every 5.5.0 store of the harness ran with the RocksDB modes off: the database exists
    (DefaultMessageStore opens it at every start), with its three families, and is empty."""
    state = read_state_store(broker_stores["v5-clean"] / "store")
    assert state is not None and state.empty
    assert read_state_store(broker_stores["v4-clean"] / "store") is None  # 4.9.7: none
