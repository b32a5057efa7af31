"""``rocksdbstore/``: the RocksDB state store every 5.5.x broker opens at start.

``DefaultMessageStore`` opens ``MessageRocksDBStorage`` at ``<store>/rocksdbstore`` whatever
the settings, so every 5.5.x store has the directory; it holds data only when a RocksDB mode
is on. Three column families, big-endian integers, UTF-8 text (RocketMQ 5.5.0 ``store``
module, ``rocksdb/MessageRocksDBStorage``, ``transaction/TransRocksDBRecord``,
``timer/rocksdb/TimerRocksDBRecord``, ``index/rocksdb/IndexRocksDBRecord``; docs/rocksdb.md):

``trans`` (``transRocksDBEnable`` with ``transWriteOriginTransHalfEnable=false``): one entry
per transaction still undecided; a commit or rollback deletes it, and so does the check loop
once a half was checked more than ``transactionCheckMax`` times (nothing else records that)::

    key   i64 half commitlog offset | "@" real topic | "@" msgId
    value i32 check times | i32 half record size
    key   "lastOffsetPy"  ->  i64 the last half offset indexed

``timer`` (``timerRocksDBEnable``): one entry per timer message of the timeline; delivered
ones stay until a range delete half an hour later::

    key   i64 delivery time (ms) | msgId
    value i32 size | i64 commitlog offset of its rmq_sys_wheel_timer record
    key   "sys_topic_scan_offset_checkpoint"  ->  i64 next queue offset of rmq_sys_wheel_timer
    key   "timeline_checkpoint"               ->  i64 delivered up to this time (ms, exclusive)

``default`` (``indexRocksDBEnable``): an index of keys, tags and msgIds (counted here, not
decoded: the commitlog's own records say the same).

Entries are written through a write-ahead log the broker flushes by hand: a copy of a running
broker holds what was flushed, a cleanly stopped one everything.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from rmqlib.rocksdb.consume_queue import BadEntry
from rmqlib.rocksdb.database import is_database, open_readonly

STATE_STORE_DIR = "rocksdbstore"
TRANS_FAMILY, TIMER_FAMILY, INDEX_FAMILY = "trans", "timer", "default"
TRANS_LAST_OFFSET = b"lastOffsetPy"
TIMER_SCAN_CHECKPOINT = b"sys_topic_scan_offset_checkpoint"
TIMELINE_CHECKPOINT = b"timeline_checkpoint"
INDEX_SPECIAL_KEYS = (b"lastOffsetPy", b"lastStoreTimeStamp")
I64 = struct.Struct(">q")
TRANS_VALUE = struct.Struct(">ii")     # check times, half size
TIMER_VALUE = struct.Struct(">iq")     # size, commitlog offset
SEPARATOR = b"@"


@dataclass(frozen=True)
class UndecidedHalf:
    """A transaction the broker still checks: its half message and how often it asked."""

    half_offset: int
    topic: str
    msg_id: str
    check_times: int
    size: int


@dataclass(frozen=True)
class TimelineEntry:
    """A timer message on the RocksDB timeline: when it is due and where its record is."""

    delivery_ms: int
    msg_id: str
    size: int
    commitlog_offset: int


@dataclass
class StateStore:
    """What ``rocksdbstore/`` holds (empty lists and None: nothing of that kind)."""

    path: Path
    undecided: list[UndecidedHalf] = field(default_factory=list)
    trans_indexed_to: int | None = None       # lastOffsetPy of the trans family
    timeline: list[TimelineEntry] = field(default_factory=list)
    timer_scan_offset: int | None = None      # next rmq_sys_wheel_timer queue offset to read
    timeline_checkpoint: int | None = None    # delivered up to here (ms, exclusive)
    index_entries: int = 0                    # entries of the default family, not decoded
    bad: list[BadEntry] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing written: every RocksDB mode was off (or nothing was flushed yet)."""
        return not (self.undecided or self.timeline or self.index_entries or self.bad
                    or self.trans_indexed_to is not None or self.timer_scan_offset is not None
                    or self.timeline_checkpoint is not None)

    def pending_timers(self) -> list[TimelineEntry]:
        """Timeline entries not delivered yet: due at or after the timeline checkpoint
        (without one, the broker starts from ten seconds before its start: every entry)."""
        if self.timeline_checkpoint is None:
            return list(self.timeline)
        return [t for t in self.timeline if t.delivery_ms >= self.timeline_checkpoint]


def read_state_store(store: str | Path) -> StateStore | None:
    """The state store of ``store`` (a store root), None when the store has none."""
    path = Path(store) / STATE_STORE_DIR
    if not is_database(path):
        return None
    state = StateStore(path)
    with open_readonly(path) as db:
        for key, value in db.items(TRANS_FAMILY):
            _trans_entry(state, key, value)
        for key, value in db.items(TIMER_FAMILY):
            _timer_entry(state, key, value)
        state.index_entries = sum(1 for key, _ in db.items(INDEX_FAMILY)
                                  if key not in INDEX_SPECIAL_KEYS)
    return state


def _long(state: StateStore, family: str, key: bytes, value: bytes) -> int | None:
    if len(value) != I64.size:
        state.bad.append(BadEntry(family, key, f"value of {len(value)} bytes, expected 8"))
        return None
    return I64.unpack(value)[0]


def _trans_entry(state: StateStore, key: bytes, value: bytes) -> None:
    if key == TRANS_LAST_OFFSET:
        state.trans_indexed_to = _long(state, TRANS_FAMILY, key, value)
        return
    parts = key[8:].split(SEPARATOR, 2)
    if len(key) < 8 or len(parts) != 3 or parts[0] != b"":
        state.bad.append(BadEntry(TRANS_FAMILY, key, "not offset | @topic | @msgId"))
        return
    if len(value) != TRANS_VALUE.size:
        state.bad.append(BadEntry(TRANS_FAMILY, key,
                                  f"value of {len(value)} bytes, expected 8"))
        return
    try:
        topic, msg_id = parts[1].decode("utf-8"), parts[2].decode("utf-8")
    except UnicodeDecodeError as error:
        state.bad.append(BadEntry(TRANS_FAMILY, key, f"not UTF-8: {error.reason}"))
        return
    checks, size = TRANS_VALUE.unpack(value)
    state.undecided.append(UndecidedHalf(I64.unpack_from(key)[0], topic, msg_id, checks, size))


def _timer_entry(state: StateStore, key: bytes, value: bytes) -> None:
    if key == TIMER_SCAN_CHECKPOINT:
        state.timer_scan_offset = _long(state, TIMER_FAMILY, key, value)
        return
    if key == TIMELINE_CHECKPOINT:
        state.timeline_checkpoint = _long(state, TIMER_FAMILY, key, value)
        return
    if len(key) <= 8 or len(value) != TIMER_VALUE.size:
        state.bad.append(BadEntry(TIMER_FAMILY, key, f"key of {len(key)} bytes, value of "
                                  f"{len(value)} (expected a time and a msgId, 12 bytes)"))
        return
    try:
        msg_id = key[8:].decode("utf-8")
    except UnicodeDecodeError as error:
        state.bad.append(BadEntry(TIMER_FAMILY, key, f"msgId not UTF-8: {error.reason}"))
        return
    size, offset = TIMER_VALUE.unpack(value)
    state.timeline.append(TimelineEntry(I64.unpack_from(key)[0], msg_id, size, offset))
