"""The RocksDB consume queue of a 5.x broker with ``storeType=defaultRocksDB``.

The database lives in ``consumequeue/`` itself (``useSeparateStorePathForRocksdbCQ`` moves
it to ``consumequeue_rocksdb/``) and replaces the ``consumequeue/<topic>/<queue>/`` files.
Big-endian integers, UTF-8 topics, single control bytes (``CTRL_1`` = 0x01) between the
fields (RocketMQ ``store/.../queue/RocksDBConsumeQueueTable``, ``RocksDBConsumeQueueOffsetTable``):

column family ``default``, one entry per dispatched message::

    key   i32 topic length | 01 | topic | 01 | i32 queue id | 01 | i64 queue offset
    value i64 commitlog offset | i32 size | i64 tags code | i64 store time (ms)

column family ``offset``, a queue's bounds::

    key   i32 topic length | 01 | topic | 01 | "max" or "min" | 01 | i32 queue id
    value i64 commitlog offset | i64 queue offset   (of the last unit for "max")

``min`` is written lazily (when the broker is first asked); the topic ``CHECKPOINT_TOPIC``
``max`` 0 holds an 8-byte value, the end of the last dispatched message. The key order
(bytewise) is topic length, topic, queue, offset: one queue's units are contiguous and in
queue-offset order.

Units are written without the write-ahead log and reach an SST only when the memtable is
flushed (at the latest on a clean shutdown): a copy of a running broker's database holds the
units up to the last flush, not the newest ones.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmqlib.errors import CorruptDataError
from rmqlib.rocksdb.database import Database, open_readonly

CTRL_1 = 0x01
UNIT_VALUE = struct.Struct(">qiqq")       # commitlog offset, size, tags code, store time
UNIT_VALUE_SIZE = UNIT_VALUE.size          # 28
BOUND_VALUE = struct.Struct(">qq")         # commitlog offset, queue offset
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
UNITS_FAMILY, OFFSET_FAMILY = "default", "offset"
MAX, MIN = b"max", b"min"
# A unit key's fixed part: topic length, three CTRL_1, queue id, queue offset.
UNIT_KEY_FIXED = 4 + 1 + 1 + 4 + 1 + 8


def queue_prefix(topic: str, queue_id: int) -> bytes:
    """The key prefix shared by every unit of one queue."""
    name = topic.encode("utf-8")
    return struct.pack(">i", len(name)) + bytes([CTRL_1]) + name + bytes([CTRL_1]) + \
        struct.pack(">i", queue_id) + bytes([CTRL_1])


def unit_key(topic: str, queue_id: int, queue_offset: int) -> bytes:
    return queue_prefix(topic, queue_id) + struct.pack(">q", queue_offset)


def parse_unit_key(key: bytes) -> tuple[str, int, int]:
    """(topic, queue id, queue offset) of a unit key; CorruptDataError if it is none."""
    if len(key) < UNIT_KEY_FIXED:
        raise CorruptDataError(f"unit key of {len(key)} bytes is shorter than any")
    (length,) = struct.unpack_from(">i", key)
    if length < 0 or len(key) != UNIT_KEY_FIXED + length or key[4] != CTRL_1 \
            or key[5 + length] != CTRL_1 or key[10 + length] != CTRL_1:
        raise CorruptDataError(f"unit key does not follow the layout: {key[:64]!r}")
    topic = key[5:5 + length].decode("utf-8", errors="replace")
    (queue_id,) = struct.unpack_from(">i", key, 6 + length)
    (queue_offset,) = struct.unpack_from(">q", key, 11 + length)
    return topic, queue_id, queue_offset


def parse_bound_key(key: bytes) -> tuple[str, bytes, int]:
    """(topic, b"max" | b"min", queue id) of an ``offset`` family key."""
    if len(key) < 14:
        raise CorruptDataError(f"offset key of {len(key)} bytes is shorter than any")
    (length,) = struct.unpack_from(">i", key)
    if length < 0 or len(key) != 4 + 1 + length + 1 + 3 + 1 + 4 or key[4] != CTRL_1 \
            or key[5 + length] != CTRL_1 or key[9 + length] != CTRL_1:
        raise CorruptDataError(f"offset key does not follow the layout: {key[:64]!r}")
    topic = key[5:5 + length].decode("utf-8", errors="replace")
    kind = key[6 + length:9 + length]
    (queue_id,) = struct.unpack_from(">i", key, 10 + length)
    return topic, kind, queue_id


@dataclass
class QueueUnits:
    """One queue's units (numpy arrays, queue-offset order) and what did not decode."""

    topic: str
    queue_id: int
    queue_offset: np.ndarray
    commitlog_offset: np.ndarray
    size: np.ndarray
    tags_code: np.ndarray
    store_time_ms: np.ndarray

    def __len__(self) -> int:
        return len(self.queue_offset)


@dataclass
class BadEntry:
    """A key or value that does not follow the layout (reported, never skipped)."""

    family: str
    key: bytes
    reason: str


@dataclass
class RocksQueueScan:
    """What one read of the database found: units per queue, bounds, bad entries."""

    queues: list[QueueUnits] = field(default_factory=list)
    max_offsets: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    min_offsets: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    dispatched_to: int | None = None     # CHECKPOINT_TOPIC's commitlog offset
    bad: list[BadEntry] = field(default_factory=list)

    @property
    def units(self) -> int:
        return sum(len(q) for q in self.queues)


def read_queues(path: str | Path, after: dict[tuple[str, int], int] | None = None
                ) -> RocksQueueScan:
    """Every queue's units (from queue offset ``after[(topic, queue)]`` on, when given)
    and the bounds, from the database at ``path`` (opened on a clone)."""
    with open_readonly(path) as db:
        return scan_database(db, after or {})


def read_bounds(path: str | Path) -> RocksQueueScan:
    """Only the ``offset`` family (each queue's bounds, the checkpoint): cheap, however many
    units the database holds."""
    with open_readonly(path) as db:
        return decode_entries(db.items(OFFSET_FAMILY), ())


def find_unit(path: str | Path, topic: str, queue_id: int, queue_offset: int
              ) -> tuple[int, int, int, int] | None:
    """(commitlog offset, size, tags code, store time) of one unit, None when absent."""
    with open_readonly(path) as db:
        value = db.get(UNITS_FAMILY, unit_key(topic, queue_id, queue_offset))
    if value is None or len(value) != UNIT_VALUE_SIZE:
        return None
    return UNIT_VALUE.unpack(value)


def scan_database(db: Database, after: dict[tuple[str, int], int]) -> RocksQueueScan:
    return decode_entries(db.items(OFFSET_FAMILY), _unit_entries(db, after))


def decode_entries(bounds: Iterable[tuple[bytes, bytes]],
                   units: Iterable[tuple[bytes, bytes]]) -> RocksQueueScan:
    """The queues of the ``offset`` and ``default`` families' (key, value) pairs (in key
    order); every pair off the layout is a :class:`BadEntry`, never an exception."""
    scan = RocksQueueScan()
    _read_bounds(bounds, scan)
    rows: dict[tuple[str, int], list[tuple[int, bytes]]] = {}
    for key, value in units:
        try:
            topic, queue_id, queue_offset = parse_unit_key(key)
        except CorruptDataError as error:
            scan.bad.append(BadEntry(UNITS_FAMILY, key, error.reason))
            continue
        if len(value) != UNIT_VALUE_SIZE:
            scan.bad.append(BadEntry(UNITS_FAMILY, key,
                                     f"unit value of {len(value)} bytes, not {UNIT_VALUE_SIZE}"))
            continue
        rows.setdefault((topic, queue_id), []).append((queue_offset, value))
    for (topic, queue_id), queue in sorted(rows.items()):
        scan.queues.append(_queue_units(topic, queue_id, queue))
    return scan


def _unit_entries(db: Database, after: dict[tuple[str, int], int]
                  ) -> Iterator[tuple[bytes, bytes]]:
    """Every unit entry, less each queue's units below its ``after`` offset.

    Every key is read (so a key that follows no layout is still seen and reported); the
    database holds what the broker's retention keeps, not the history, so a night's read
    does not grow with the years loaded before it."""
    if not after:
        yield from db.items(UNITS_FAMILY)
        return
    skip_to = {queue_prefix(topic, queue): unit_key(topic, queue, first)
               for (topic, queue), first in after.items()}
    for key, value in db.items(UNITS_FAMILY):
        target = skip_to.get(key[:-8])
        if target is not None and key < target:
            continue
        yield key, value


def _queue_units(topic: str, queue_id: int, units: list[tuple[int, bytes]]) -> QueueUnits:
    values = np.frombuffer(b"".join(v for _, v in units),
                           dtype=np.dtype([("commitlog_offset", ">i8"), ("size", ">i4"),
                                           ("tags_code", ">i8"), ("store_time", ">i8")]))
    return QueueUnits(topic, queue_id, np.array([o for o, _ in units], dtype=np.int64),
                      values["commitlog_offset"].astype(np.int64),
                      values["size"].astype(np.int32), values["tags_code"].astype(np.int64),
                      values["store_time"].astype(np.int64))


def _read_bounds(bounds: Iterable[tuple[bytes, bytes]], scan: RocksQueueScan) -> None:
    for key, value in bounds:
        try:
            topic, kind, queue_id = parse_bound_key(key)
        except CorruptDataError as error:
            scan.bad.append(BadEntry(OFFSET_FAMILY, key, str(error)))
            continue
        if topic == CHECKPOINT_TOPIC and len(value) == 8:
            (scan.dispatched_to,) = struct.unpack(">q", value)
            continue
        if len(value) != BOUND_VALUE.size:
            scan.bad.append(BadEntry(OFFSET_FAMILY, key,
                                     f"bound value of {len(value)} bytes, not 16"))
            continue
        target = scan.max_offsets if kind == MAX else scan.min_offsets if kind == MIN else None
        if target is None:
            scan.bad.append(BadEntry(OFFSET_FAMILY, key, f"bound kind {kind!r}"))
            continue
        target[(topic, queue_id)] = BOUND_VALUE.unpack(value)
