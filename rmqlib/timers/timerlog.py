"""Timer log files (5.x ``timerlog/``): fixed 52-byte units, one per timer enqueue (spec §6.4).

The timer wheel (``rmqlib.timers.timerwheel``) says *which* units fire at a second; the units
themselves live here, appended in enqueue order by ``TimerMessageStore.doEnqueue`` into a
mapped-file queue named like the commitlog (20-digit start offset, each file
``mappedFileSizeTimerLog`` bytes, 100 MiB by default). A unit's global *position* (file
start + position in file) is what the wheel's ``firstPos``/``lastPos`` and every unit's
``prevPos`` point at: the units of one wheel slot form a chain walked backwards.

Unit (``TimerLog.UNIT_SIZE``), big-endian: i32 size (= 52), i64 prevPos (previous unit of
the same slot, -1 if none), i32 magic (bit0 DEFAULT, bit1 ROLL, bit2 DELETE), i64
currWriteTimeMs, i32 delayedTime - currWriteTime, i64 commitlog offset and i32 size of
the ``rmq_sys_wheel_timer`` record, i32 ``String.hashCode`` of its REAL_TOPIC, i64
reserved (0). ``delivery_ms = currWriteTimeMs + delay`` is the time the unit fires
(``TIMER_OUT_MS`` of the record, or for a ROLL unit the time it is rolled over again).

When the next unit and a 16-byte blank no longer fit, ``TimerLog.append`` writes an
end-of-file blank (i32 bytes left in the file, i64 0, i32 ``BLANK_MAGIC_CODE``, the same
value as the commitlog BLANK magic) and moves on to the next file; the rest of that file
stays zero. Units are never written anywhere but at the write position, so a file holds,
in order: units from byte 0, then either the blank (file finished) or the zero tail.

Accounting per file. The broker's recovery (``recoverAndRevise``) keeps a unit when
size == 52 and ``(magic | 0xF) == 0xF``; a unit is decoded when, besides, it can be
delivered: commitlog offset ≥ 0, commitlog size > 0 and write time > 0 (the writer
never produces anything else; a unit torn by a crash mid-write fails this):

* valid units → ``decoded``;
* the blank (whose length field must reach exactly the end of the file) and everything
  after it, whatever it holds → ``blank`` (the broker never reads past it);
* the all-zero bytes after the last non-zero unit (no blank yet: the file being written)
  → ``zero_tail``;
* every other 52-byte slot before that point (wrong size, unknown magic bits, an all-zero
  hole followed by more units) → ``unreadable``, and so is a torn unit: non-zero bytes
  at the end of the file too short to hold a unit.

Units after a bad one are still decoded (their position says where they are), but
``write_position`` records where the broker's recovery would stop and truncate (the
first unit failing its size/magic rule).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from rmqlib.common import races
from rmqlib.common.accounting import FileAccount
from rmqlib.common.fileio import read_bytes, runs
from rmqlib.common.segments import Segment, list_segments, parse_segment_name
from rmqlib.errors import NotAStoreFileError

# TimerLog unit layout (TimerLog.UNIT_SIZE = 52), big-endian.
TL_UNIT_SIZE = 52
TL_SIZE_OFFSET = 0
TL_PREV_POS_OFFSET = 4
TL_MAGIC_OFFSET = 12
TL_WRITE_TIME_OFFSET = 16
TL_DELAY_OFFSET = 24
TL_COMMITLOG_OFFSET_OFFSET = 28  # TimerLog.UNIT_PRE_SIZE_FOR_MSG
TL_COMMITLOG_SIZE_OFFSET = 36
TL_TOPIC_HASH_OFFSET = 40  # TimerLog.UNIT_PRE_SIZE_FOR_METRIC
TL_RESERVED_OFFSET = 44

# End-of-file blank: i32 bytes left, i64 0, i32 magic (TimerLog.MIN_BLANK_LEN = 16).
TL_BLANK_LENGTH = 16
TL_BLANK_MAGIC = -875286124  # 0xCBD43194 = 0xBBCCDDEE ^ (1880681586 + 8), as in TimerLog

# Magic bits (TimerMessageStore.MAGIC_*); recovery accepts any value within MAGIC_BITS.
MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2
MAGIC_BITS = 0xF

DEFAULT_TIMERLOG_FILE_SIZE = 100 * 1024 * 1024  # mappedFileSizeTimerLog
TIMERLOG_DIR = "timerlog"
NO_PREV_POS = -1  # prevPos of the first unit of a slot chain

TL_UNIT_DTYPE = np.dtype(
    [
        ("size", ">i4"),
        ("prev_pos", ">i8"),
        ("magic", ">i4"),
        ("write_time_ms", ">i8"),
        ("delay_ms", ">i4"),
        ("commitlog_offset", ">i8"),
        ("commitlog_size", ">i4"),
        ("topic_hash", ">i4"),
        ("reserved", ">i8"),
    ]
)
assert TL_UNIT_DTYPE.itemsize == TL_UNIT_SIZE
assert TL_UNIT_DTYPE.fields is not None
assert TL_UNIT_DTYPE.fields["magic"][1] == TL_MAGIC_OFFSET
assert TL_UNIT_DTYPE.fields["commitlog_offset"][1] == TL_COMMITLOG_OFFSET_OFFSET
assert TL_UNIT_DTYPE.fields["topic_hash"][1] == TL_TOPIC_HASH_OFFSET

TIMERLOG_SCHEMA = pa.schema(
    [
        pa.field("position", pa.int64(), nullable=False),  # global: file start + position
        pa.field("prev_pos", pa.int64(), nullable=False),
        pa.field("magic", pa.int32(), nullable=False),
        pa.field("is_roll", pa.bool_(), nullable=False),
        pa.field("is_delete", pa.bool_(), nullable=False),
        pa.field("write_time_ms", pa.int64(), nullable=False),
        pa.field("delay_ms", pa.int32(), nullable=False),
        pa.field("delivery_ms", pa.int64(), nullable=False),
        pa.field("commitlog_offset", pa.int64(), nullable=False),
        pa.field("commitlog_size", pa.int32(), nullable=False),
        pa.field("topic_hash", pa.int32(), nullable=False),
        pa.field("reserved", pa.int64(), nullable=False),
        pa.field("file", pa.string(), nullable=False),
        pa.field("file_position", pa.int64(), nullable=False),
    ]
)

_HOLE = "all-zero units followed by more data (hole in the timer log)"
_TORN_LAST = ("the last unit before the zero tail is incomplete (the unit being written: "
              "a copy taken while the broker appended it, or a kill); recovery cuts it")
_INVALID = ("not a timer log unit: size != 52, magic outside bits 0xF, negative commitlog "
            "offset, commitlog size <= 0 or write time <= 0")


def magic_names(magic: int) -> str:
    """``DEFAULT|ROLL|DELETE`` style name of a magic value (for dumps)."""
    names = [name for bit, name in ((MAGIC_DEFAULT, "DEFAULT"), (MAGIC_ROLL, "ROLL"),
                                    (MAGIC_DELETE, "DELETE")) if magic & bit]
    return "|".join(names) or "NONE"


def is_delete_marker(magic: int) -> bool:
    """A DELETE unit that is not rolled: it cancels a message, it is not one
    (``needDelete(magic) && !needRoll(magic)`` in ``dequeue``)."""
    return bool(magic & MAGIC_DELETE) and not magic & MAGIC_ROLL


# --------------------------------------------------------------------------- one unit


@dataclass(frozen=True)
class TimerLogUnit:
    """One decoded timer log unit; ``position`` is global (what prevPos / the wheel hold)."""

    position: int
    prev_pos: int
    magic: int
    write_time_ms: int
    delay_ms: int
    commitlog_offset: int
    commitlog_size: int
    topic_hash: int
    reserved: int
    file_position: int

    @property
    def delivery_ms(self) -> int:
        """When the unit fires: currWriteTimeMs + delayedTime offset (TIMER_OUT_MS)."""
        return self.write_time_ms + self.delay_ms

    @property
    def is_roll(self) -> bool:
        return bool(self.magic & MAGIC_ROLL)

    @property
    def is_delete(self) -> bool:
        return bool(self.magic & MAGIC_DELETE)


# --------------------------------------------------------------------------- one file


@dataclass
class TimerLogFileDecode:
    """The accepted units of one timer log file as native-endian arrays, plus its account.

    ``blank_position`` is where the end-of-file blank starts (None: no blank, the file is
    still being written); ``write_position`` is where broker recovery stops in this file
    (the blank, the first slot it rejects, or the end); ``data_end`` where the zero tail
    or the blank starts.
    """

    path: str
    start: int
    file_position: np.ndarray
    fields: dict[str, np.ndarray]
    account: FileAccount
    blank_position: int | None
    write_position: int
    data_end: int

    @property
    def count(self) -> int:
        return int(self.file_position.size)

    @property
    def file_size(self) -> int:
        return self.account.size

    @property
    def position(self) -> np.ndarray:
        """Global positions (file start + file position) of the units."""
        return self.start + self.file_position

    @property
    def delivery_ms(self) -> np.ndarray:
        return self.fields["write_time_ms"] + self.fields["delay_ms"].astype(np.int64)

    @property
    def is_finished(self) -> bool:
        """True when the broker closed the file with its blank and moved on."""
        return self.blank_position is not None

    @property
    def recovery_complete(self) -> bool:
        """Broker recovery reads past this file only if it ends in a valid blank."""
        return self.blank_position is not None and self.write_position == self.blank_position

    def units(self) -> Iterator[TimerLogUnit]:
        """The units one by one (slow path; prefer the arrays or the batch)."""
        f = self.fields
        for i in range(self.count):
            yield TimerLogUnit(
                int(self.start + self.file_position[i]), int(f["prev_pos"][i]),
                int(f["magic"][i]), int(f["write_time_ms"][i]), int(f["delay_ms"][i]),
                int(f["commitlog_offset"][i]), int(f["commitlog_size"][i]),
                int(f["topic_hash"][i]), int(f["reserved"][i]), int(self.file_position[i]),
            )

    def to_record_batch(self) -> pa.RecordBatch:
        """The units as a RecordBatch with :data:`TIMERLOG_SCHEMA`."""
        n, f = self.count, self.fields
        magic = f["magic"]
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.position, pa.int64()),
                pa.array(f["prev_pos"], pa.int64()),
                pa.array(magic, pa.int32()),
                pa.array((magic & MAGIC_ROLL) != 0, pa.bool_()),
                pa.array((magic & MAGIC_DELETE) != 0, pa.bool_()),
                pa.array(f["write_time_ms"], pa.int64()),
                pa.array(f["delay_ms"], pa.int32()),
                pa.array(self.delivery_ms, pa.int64()),
                pa.array(f["commitlog_offset"], pa.int64()),
                pa.array(f["commitlog_size"], pa.int32()),
                pa.array(f["topic_hash"], pa.int32()),
                pa.array(f["reserved"], pa.int64()),
                pa.repeat(pa.scalar(self.path, pa.string()), n),
                pa.array(self.file_position, pa.int64()),
            ],
            schema=TIMERLOG_SCHEMA,
        )


def _strided_i32(data: bytes | bytearray | memoryview, field_offset: int, count: int
                 ) -> np.ndarray:
    """The i32 at ``field_offset`` of each of the first ``count`` 52-byte slots, without
    requiring the slots to be whole (the blank may sit in a short last slot)."""
    if count <= 0:
        return np.empty(0, dtype=np.int32)
    view = np.ndarray((count,), dtype=">i4", buffer=data, offset=field_offset,
                      strides=(TL_UNIT_SIZE,))
    return view.astype(np.int32)


def find_blank(data: bytes | bytearray | memoryview) -> int | None:
    """Position of the end-of-file blank: the first slot whose magic is the blank magic
    and whose length field reaches exactly the end of the data (the i64 between them,
    written 0, is read by nobody: the broker's recovery looks at the magic alone)."""
    size = len(data)
    candidates = (size - TL_BLANK_LENGTH) // TL_UNIT_SIZE + 1 if size >= TL_BLANK_LENGTH else 0
    magic = _strided_i32(data, TL_MAGIC_OFFSET, candidates)
    for index in np.flatnonzero(magic == TL_BLANK_MAGIC):
        pos = int(index) * TL_UNIT_SIZE
        left = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        if left == size - pos:
            return pos
    return None


def _account_after_blank(account: FileAccount, data: bytes | bytearray | memoryview,
                         blank: int) -> None:
    """The blank and everything after it, whatever it holds, is blank: the broker's
    ``recoverAndRevise`` breaks out of the file at the blank magic and ``TimerLog.append``
    sets the write position to the file end after writing it, so nothing reads past it."""
    account.blank += len(data) - blank


def decode_timerlog_bytes(data: bytes | bytearray | memoryview, *, path: str | Path,
                          start: int) -> TimerLogFileDecode:
    """Decode a whole timer log file held in memory (numpy, one pass).

    ``start`` is the file's start offset (its name); positions come back file-relative
    in ``file_position`` and global in ``position``.
    """
    account = FileAccount(str(path), len(data))
    blank = find_blank(data)
    limit = len(data) if blank is None else blank  # units live in [0, limit)
    n_full = limit // TL_UNIT_SIZE
    raw = np.frombuffer(data, dtype=TL_UNIT_DTYPE, count=n_full)
    native = {name: raw[name].astype(raw.dtype[name].newbyteorder("="))
              for name in TL_UNIT_DTYPE.names or ()}
    accepted = ((native["size"] == TL_UNIT_SIZE)
                & ((native["magic"] | MAGIC_BITS) == MAGIC_BITS))  # what recovery keeps
    valid = (accepted & (native["commitlog_offset"] >= 0) & (native["commitlog_size"] > 0)
             & (native["write_time_ms"] > 0))  # ... and what dequeue can deliver
    as_bytes = np.frombuffer(data, dtype=np.uint8, count=limit)
    zero = ~as_bytes[: n_full * TL_UNIT_SIZE].reshape(n_full, TL_UNIT_SIZE).any(axis=1)
    partial = as_bytes[n_full * TL_UNIT_SIZE:]  # < 52 bytes: a torn unit, or zeros
    torn = bool(partial.any())

    nonzero = np.flatnonzero(~zero)
    if torn or blank is not None:  # zeros before a blank or a torn unit are a hole
        data_units = n_full
    else:
        data_units = int(nonzero[-1]) + 1 if nonzero.size else 0
    in_data = valid[:data_units]
    account.decoded = int(np.count_nonzero(in_data)) * TL_UNIT_SIZE
    for first, length in runs(~in_data):
        hole = bool(zero[first:first + length].all())
        # the last unit before the zeros, alone invalid: the one being written (races)
        at_write_position = (blank is None and not torn and length == 1
                             and first + 1 == data_units)
        account.add_unreadable(first * TL_UNIT_SIZE, length * TL_UNIT_SIZE,
                               _HOLE if hole else races.torn_tail(_TORN_LAST)
                               if at_write_position else _INVALID)
    if torn:
        account.add_unreadable(n_full * TL_UNIT_SIZE, len(partial),
                               races.torn_tail(f"torn unit: {len(partial)} bytes left in the "
                                               f"file, a unit needs {TL_UNIT_SIZE}"))
        data_end = limit
    else:
        data_end = data_units * TL_UNIT_SIZE
        account.zero_tail = limit - data_end
    if blank is not None:
        _account_after_blank(account, data, blank)
    account.check()

    rejected = np.flatnonzero(~accepted)
    write_units = int(rejected[0]) if rejected.size else n_full
    write_position = write_units * TL_UNIT_SIZE
    if blank is None and not rejected.size and torn:
        write_position = n_full * TL_UNIT_SIZE  # recovery rejects the torn unit too
    keep = np.flatnonzero(in_data)
    return TimerLogFileDecode(
        path=str(path),
        start=start,
        file_position=keep.astype(np.int64) * TL_UNIT_SIZE,
        fields={name: values[keep] for name, values in native.items()},
        account=account,
        blank_position=blank,
        write_position=write_position,
        data_end=data_end,
    )


def decode_timerlog_file(path: str | Path) -> TimerLogFileDecode:
    """Decode one ``timerlog/<20-digit start offset>`` file."""
    return decode_timerlog_bytes(read_bytes(path), path=path, start=parse_segment_name(path))


# --------------------------------------------------------------------------- the directory


def timerlog_dir(path: str | Path) -> Path:
    """``timerlog/`` of a store root, or the path itself when it is that directory."""
    path = Path(path)
    return path / TIMERLOG_DIR if (path / TIMERLOG_DIR).is_dir() else path


def list_timerlog(path: str | Path) -> list[Segment]:
    """The timer log files of a store root or of a ``timerlog/`` directory, by start."""
    directory = timerlog_dir(path)
    if not directory.is_dir():
        raise NotAStoreFileError("timer log directory does not exist", path=directory)
    return list_segments(directory)


def decode_timerlog(path: str | Path) -> list[TimerLogFileDecode]:
    """Decode every timer log file (store root or ``timerlog/``), in start-offset order."""
    return [decode_timerlog_file(seg.path) for seg in list_timerlog(path)]


def iter_record_batches(path: str | Path) -> Iterator[pa.RecordBatch]:
    """One RecordBatch per timer log file (for Spark ``mapInArrow``), one file in memory
    at a time."""
    for seg in list_timerlog(path):
        yield decode_timerlog_file(seg.path).to_record_batch()


def recovery_end(decodes: Sequence[TimerLogFileDecode], flush_pos: int) -> int:
    """Global position where the broker's timer log recovery stops (and truncates).

    ``recoverAndRevise(lastTimerLogFlushPos, true)``: start at the newest file whose start
    is ≤ ``flush_pos`` (the first file if none), read unit by unit, go on to the next file
    at a blank, stop at the first unit it rejects (size != 52 or unknown magic bits, an
    all-zero unit included); files and units from there on are deleted.
    """
    if not decodes:
        return 0
    index = 0
    for i, decode in enumerate(decodes):
        if decode.start <= flush_pos:
            index = i
    for decode in decodes[index:]:
        if not decode.recovery_complete:
            return decode.start + decode.write_position
    last = decodes[-1]
    return last.start + last.file_size


@dataclass
class TimerLogColumns:
    """The units of several timer log files as one set of columns, in position order:
    what store-wide questions (pending messages, slot chains) are answered from without
    building a Python object per unit."""

    paths: list[str]
    file_index: np.ndarray  # which of ``paths`` holds the unit
    file_position: np.ndarray
    position: np.ndarray
    fields: dict[str, np.ndarray]

    @property
    def count(self) -> int:
        return int(self.position.size)

    @property
    def delivery_ms(self) -> np.ndarray:
        return self.fields["write_time_ms"] + self.fields["delay_ms"].astype(np.int64)

    def unit(self, i: int) -> TimerLogUnit:
        f = self.fields
        return TimerLogUnit(
            int(self.position[i]), int(f["prev_pos"][i]), int(f["magic"][i]),
            int(f["write_time_ms"][i]), int(f["delay_ms"][i]), int(f["commitlog_offset"][i]),
            int(f["commitlog_size"][i]), int(f["topic_hash"][i]), int(f["reserved"][i]),
            int(self.file_position[i]),
        )

    def find(self, positions: np.ndarray) -> np.ndarray:
        """Index of the unit at each global position, -1 where there is none."""
        at = np.searchsorted(self.position, positions)
        inside = at < self.count
        hit = np.zeros(positions.shape, dtype=bool)
        hit[inside] = self.position[at[inside]] == positions[inside]
        return np.where(hit, at, -1)


def timerlog_columns(decodes: Sequence[TimerLogFileDecode]) -> TimerLogColumns:
    """Concatenate decoded files (in start order) into :class:`TimerLogColumns`."""
    names = TL_UNIT_DTYPE.names or ()
    if not decodes:
        empty = np.empty(0, dtype=np.int64)
        return TimerLogColumns([], empty, empty, empty,
                               {n: np.empty(0, dtype=TL_UNIT_DTYPE[n].newbyteorder("="))
                                for n in names})
    columns = TimerLogColumns(
        paths=[d.path for d in decodes],
        file_index=np.concatenate([np.full(d.count, i, dtype=np.int64)
                                   for i, d in enumerate(decodes)]),
        file_position=np.concatenate([d.file_position for d in decodes]),
        position=np.concatenate([d.position for d in decodes]),
        fields={n: np.concatenate([d.fields[n] for d in decodes]) for n in names},
    )
    if columns.count > 1 and bool(np.any(np.diff(columns.position) <= 0)):
        # overlapping file names (a damaged directory): keep position order for find()
        order = np.argsort(columns.position, kind="stable")
        columns.file_index, columns.file_position = (columns.file_index[order],
                                                     columns.file_position[order])
        columns.position = columns.position[order]
        columns.fields = {n: v[order] for n, v in columns.fields.items()}
    return columns
