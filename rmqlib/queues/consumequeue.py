"""Consume-queue files: fixed 20-byte units pointing into the commitlog (spec §4.1-§4.4).

A queue is ``consumequeue/<topic>/<queueId>/`` holding files named by their byte offset
in the queue's logical stream (queue offset x 20, spec §1.1, §10). Each file decodes in
one numpy pass into a :class:`CqFileDecode` (arrays + byte account) and from there into
an Arrow RecordBatch with :data:`CQ_SCHEMA`, which is what the Spark jobs consume.

Unit classification follows the broker (``CQ.recover``): a unit is *valid* when its
commitlog offset ≥ 0 and size > 0 (filler units included). Accounting per file:

* valid non-filler units → ``decoded``; filler units (offset 0, size 0x7FFFFFFF,
  tagsCode 0, ``fillPreBlank``) → ``blank``;
* the all-zero units after the last non-zero unit → ``zero_tail``;
* every other unit before that point (negative offset, size ≤ 0, or an all-zero hole
  followed by more data) → ``unreadable``, and so is a trailing partial unit when the
  file size is not a multiple of 20.

Valid units after an invalid one are still decoded (the broker serves older files by
position), but ``write_position`` records where the broker's recovery would stop.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa

from rmqlib.common import races
from rmqlib.common.accounting import FileAccount, UnreadableRegion
from rmqlib.common.bytesource import ByteSource, FileTarget, source_name
from rmqlib.common.fileio import has_nonzero_after, read_bytes, read_range, runs
from rmqlib.common.segments import SEGMENT_NAME, Segment, parse_segment_name
from rmqlib.errors import NotAStoreFileError

# Unit layout (ConsumeQueue.CQ_STORE_UNIT_SIZE), big-endian.
CQ_UNIT_SIZE = 20
CQ_COMMITLOG_OFFSET_OFFSET = 0
CQ_COMMITLOG_OFFSET_LENGTH = 8
CQ_SIZE_OFFSET = CQ_COMMITLOG_OFFSET_OFFSET + CQ_COMMITLOG_OFFSET_LENGTH
CQ_SIZE_LENGTH = 4
CQ_TAGS_CODE_OFFSET = CQ_SIZE_OFFSET + CQ_SIZE_LENGTH
CQ_TAGS_CODE_LENGTH = 8

CQ_UNIT_DTYPE = np.dtype(
    [("commitlog_offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")]
)
assert CQ_UNIT_DTYPE.itemsize == CQ_UNIT_SIZE

DEFAULT_CQ_FILE_SIZE = 6_000_000  # 300 000 units (MessageStoreConfig)

# Filler unit written by fillPreBlank before the first real unit of a rebuilt queue.
FILLER_COMMITLOG_OFFSET = 0
FILLER_SIZE = 0x7FFFFFFF
FILLER_TAGS_CODE = 0

# ConsumeQueueExt addresses stored in place of tagsCode (ConsumeQueueExt.MAX_ADDR).
EXT_MAX_ADDR = -(2**31) - 1
_LONG_MIN = -(2**63)

QUEUE_ID_NAME = re.compile(r"^(0|[1-9]\d{0,9})$")
_INT_MAX = 2**31 - 1
ROCKSDB_MARKERS = ("CURRENT", "IDENTITY", "LOCK")
ROCKSDB_PREFIXES = ("MANIFEST-", "OPTIONS-", "LOG")
ROCKSDB_SUFFIXES = (".sst", ".log", ".blob")

CQ_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("queue_id", pa.int32(), nullable=False),
        pa.field("queue_offset", pa.int64(), nullable=False),
        pa.field("commitlog_offset", pa.int64(), nullable=False),
        pa.field("size", pa.int32(), nullable=False),
        pa.field("tags_code", pa.int64(), nullable=False),
        pa.field("is_filler", pa.bool_(), nullable=False),
        pa.field("is_ext_addr", pa.bool_(), nullable=False),
        pa.field("file", pa.string(), nullable=False),
        pa.field("file_position", pa.int64(), nullable=False),
    ]
)


# --------------------------------------------------------------------------- tagsCode


def is_ext_addr(tags_code: int) -> bool:
    """True when a tagsCode is really a ConsumeQueueExt address (``isExtAddr``)."""
    return tags_code <= EXT_MAX_ADDR


def decorate_ext_offset(ext_offset: int) -> int:
    """The address the broker stores for an ext-file byte offset (``decorate``)."""
    if is_ext_addr(ext_offset):
        return ext_offset
    return ext_offset + _LONG_MIN


def undecorate_ext_addr(address: int) -> int:
    """The ext-file byte offset behind an address (``unDecorate``); non-addresses unchanged."""
    if is_ext_addr(address):
        return address - _LONG_MIN
    return address


# --------------------------------------------------------------------------- one unit


@dataclass(frozen=True)
class CqUnit:
    """One decoded consume-queue unit and where it came from."""

    queue_offset: int
    commitlog_offset: int
    size: int
    tags_code: int
    file_position: int

    @property
    def is_filler(self) -> bool:
        return is_filler(self.commitlog_offset, self.size, self.tags_code)

    @property
    def is_ext_addr(self) -> bool:
        return is_ext_addr(self.tags_code)


def is_filler(commitlog_offset: int, size: int, tags_code: int) -> bool:
    """The fillPreBlank unit: offset 0, size 0x7FFFFFFF, tagsCode 0."""
    return (
        commitlog_offset == FILLER_COMMITLOG_OFFSET
        and size == FILLER_SIZE
        and tags_code == FILLER_TAGS_CODE
    )


def is_valid_unit(commitlog_offset: int, size: int) -> bool:
    """The broker's recovery rule: offset ≥ 0 and size > 0 (fillers pass)."""
    return commitlog_offset >= 0 and size > 0


# --------------------------------------------------------------------------- helpers


def queue_location(path: str | Path) -> tuple[str, int]:
    """(topic, queueId) from a unit file's ``<topic>/<queueId>/<file>`` path."""
    path = Path(path)
    queue_name = path.parent.name
    if not QUEUE_ID_NAME.match(queue_name) or int(queue_name) > _INT_MAX:
        raise NotAStoreFileError(
            "parent directory is not a queue id (canonical decimal int)", path=path
        )
    return path.parent.parent.name, int(queue_name)


def check_unit_start(start: int, unit_size: int, path: str | Path) -> int:
    """A queue file starts on a unit boundary (its name is queue offset x unit size)."""
    if start % unit_size:
        raise NotAStoreFileError(
            f"file start offset {start} is not a multiple of the {unit_size}-byte unit",
            path=path,
        )
    return start


def unit_file_start(path: str | Path, unit_size: int) -> int:
    """Start offset from the file name, which must be a multiple of the unit size."""
    return check_unit_start(parse_segment_name(path), unit_size, path)


@dataclass(frozen=True)
class UnitFileIdentity:
    """Where a queue unit file sits: its start offset and the queue it belongs to."""

    start: int
    topic: str
    queue_id: int


def unit_file_identity(
    path: str | Path, unit_size: int, topic: str | None = None, queue_id: int | None = None
) -> UnitFileIdentity:
    """Start offset from the name; topic and queue id from the directories unless given."""
    start = unit_file_start(path, unit_size)
    if topic is None or queue_id is None:
        dir_topic, dir_queue = queue_location(path)
        topic = dir_topic if topic is None else topic
        queue_id = dir_queue if queue_id is None else queue_id
    return UnitFileIdentity(start, topic, queue_id)


# --------------------------------------------------------------------------- one file


TORN_LAST_UNIT = ("the last unit before the zero tail is incomplete (the unit being written: "
                  "a copy taken while the broker appended it, or a kill); recovery cuts it")
UNIT_BEFORE_MORE = "invalid unit followed by more units"


@dataclass(frozen=True)
class UnitScan:
    """Where the units of a fixed-unit queue file stand (CQ and batch CQ alike)."""

    in_data: np.ndarray  # per unit before the zero tail: is it valid?
    data_units: int  # units up to the last non-zero one
    write_units: int  # units before the first invalid one (broker recovery stops there)


def account_units(
    account: FileAccount,
    data_length: int,
    unit_size: int,
    valid: np.ndarray,
    zero: np.ndarray,
    invalid_reason: str,
) -> UnitScan:
    """Classify the units of one file into ``account`` (see the module docstring).

    Valid units before the zero tail count as decoded, trailing all-zero units as zero
    tail; every other run of units is unreadable (an all-zero hole, or ``invalid_reason``),
    and so is a partial unit at the end. The last non-zero unit, alone invalid, is the unit
    being written (a ``torn tail``, rmqlib.common.races); :func:`range_account` relabels it
    when units follow it in the file.
    """
    n_full = data_length // unit_size
    nonzero = np.flatnonzero(~zero)
    data_units = int(nonzero[-1]) + 1 if nonzero.size else 0
    invalid = np.flatnonzero(~valid)
    write_units = int(invalid[0]) if invalid.size else n_full
    in_data = valid[:data_units]
    account.decoded = int(np.count_nonzero(in_data)) * unit_size
    account.zero_tail = (n_full - data_units) * unit_size
    for first, length in runs(~in_data):
        hole = bool(np.all(zero[first : first + length]))
        reason = "all-zero units followed by more data (hole in the queue)" if hole else (
            invalid_reason)
        if not hole and length == 1 and first + 1 == data_units:
            reason = races.torn_tail(f"{TORN_LAST_UNIT}; {invalid_reason}")
        account.add_unreadable(first * unit_size, length * unit_size, reason)
    account.add_unreadable(
        n_full * unit_size,
        data_length - n_full * unit_size,
        f"partial unit: file size is not a multiple of {unit_size}",
    )
    return UnitScan(in_data, data_units, write_units)


@dataclass
class CqFileDecode:
    """All units of one consume-queue file, as arrays, plus its byte account.

    Arrays hold the valid units only (fillers included, flagged by ``is_filler``);
    ``write_position`` is where broker recovery would stop (first invalid unit),
    ``data_end`` where the zero tail starts.
    """

    path: str
    topic: str
    queue_id: int
    start: int
    file_position: np.ndarray
    commitlog_offset: np.ndarray
    size: np.ndarray
    tags_code: np.ndarray
    account: FileAccount
    write_position: int
    data_end: int

    @property
    def count(self) -> int:
        return int(self.file_position.size)

    @property
    def queue_offset(self) -> np.ndarray:
        return (self.start + self.file_position) // CQ_UNIT_SIZE

    @property
    def is_filler(self) -> np.ndarray:
        return (
            (self.commitlog_offset == FILLER_COMMITLOG_OFFSET)
            & (self.size == FILLER_SIZE)
            & (self.tags_code == FILLER_TAGS_CODE)
        )

    @property
    def is_ext_addr(self) -> np.ndarray:
        return self.tags_code <= EXT_MAX_ADDR

    @property
    def file_size(self) -> int:
        return self.account.size

    @property
    def is_full(self) -> bool:
        """Broker recovery moves on to the next file only when this one is full."""
        return self.write_position == self.file_size

    def units(self) -> Iterator[CqUnit]:
        """The valid units one by one (slow path; prefer the arrays or the batch)."""
        offsets = self.queue_offset
        for i in range(self.count):
            yield CqUnit(
                int(offsets[i]),
                int(self.commitlog_offset[i]),
                int(self.size[i]),
                int(self.tags_code[i]),
                int(self.file_position[i]),
            )

    def to_record_batch(self) -> pa.RecordBatch:
        """The valid units as a RecordBatch with :data:`CQ_SCHEMA`."""
        n = self.count
        return pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(self.topic, pa.string()), n),
                pa.repeat(pa.scalar(self.queue_id, pa.int32()), n),
                pa.array(self.queue_offset, pa.int64()),
                pa.array(self.commitlog_offset, pa.int64()),
                pa.array(self.size, pa.int32()),
                pa.array(self.tags_code, pa.int64()),
                pa.array(self.is_filler, pa.bool_()),
                pa.array(self.is_ext_addr, pa.bool_()),
                pa.repeat(pa.scalar(self.path, pa.string()), n),
                pa.array(self.file_position, pa.int64()),
            ],
            schema=CQ_SCHEMA,
        )


def decode_cq_bytes(
    data: bytes | bytearray | memoryview,
    *,
    path: str | Path,
    start: int,
    topic: str,
    queue_id: int,
) -> CqFileDecode:
    """Decode a whole consume-queue file held in memory (numpy, one pass)."""
    check_unit_start(start, CQ_UNIT_SIZE, path)
    account = FileAccount(str(path), len(data))
    n_full = len(data) // CQ_UNIT_SIZE
    units = np.frombuffer(data, dtype=CQ_UNIT_DTYPE, count=n_full)
    offsets = units["commitlog_offset"].astype(np.int64)
    sizes = units["size"].astype(np.int32)
    tags = units["tags_code"].astype(np.int64)

    valid = (offsets >= 0) & (sizes > 0)
    zero = (offsets == 0) & (sizes == 0) & (tags == 0)
    scan = account_units(account, len(data), CQ_UNIT_SIZE, valid, zero,
                         "invalid units: commitlog offset < 0 or size <= 0")
    in_data, data_units, write_units = scan.in_data, scan.data_units, scan.write_units
    filler = in_data & (offsets[:data_units] == FILLER_COMMITLOG_OFFSET) & (
        sizes[:data_units] == FILLER_SIZE
    ) & (tags[:data_units] == FILLER_TAGS_CODE)
    n_filler = int(np.count_nonzero(filler))
    account.decoded -= n_filler * CQ_UNIT_SIZE
    account.blank = n_filler * CQ_UNIT_SIZE
    account.check()

    keep = np.flatnonzero(in_data)
    return CqFileDecode(
        path=str(path),
        topic=topic,
        queue_id=queue_id,
        start=start,
        file_position=keep.astype(np.int64) * CQ_UNIT_SIZE,
        commitlog_offset=offsets[keep],
        size=sizes[keep],
        tags_code=tags[keep],
        account=account,
        write_position=write_units * CQ_UNIT_SIZE,
        data_end=data_units * CQ_UNIT_SIZE,
    )


def decode_cq_file(
    path: str | Path, *, topic: str | None = None, queue_id: int | None = None
) -> CqFileDecode:
    """Decode one consume-queue file; topic and queue id default to its directory names."""
    where = unit_file_identity(path, CQ_UNIT_SIZE, topic, queue_id)
    return decode_cq_bytes(
        read_bytes(path), path=path, start=where.start, topic=where.topic,
        queue_id=where.queue_id,
    )


def unit_range(path: FileTarget, begin: int, end: int | None, unit_size: int
               ) -> tuple[int, int, int]:
    """(begin, end, file size) of a unit-aligned byte range of a queue file, clipped."""
    size = path.size if isinstance(path, ByteSource) else Path(path).stat().st_size
    end = size if end is None else min(end, size)
    if begin < 0 or begin % unit_size or end < begin:
        raise ValueError(f"bad unit range [{begin}, {end}) for {unit_size}-byte units")
    return begin, end, size


def range_account(local: FileAccount, path: FileTarget, begin: int, end: int,
                  file_size: int, unit_size: int) -> FileAccount:
    """The account of bytes [begin, end) of a file, from the account of their decode.

    Offsets move from range-relative to file-relative. Zero units at the end of a range
    are a zero tail only if nothing non-zero follows in the file; otherwise they are a
    hole, exactly as a whole-file decode would report them.
    """
    name = source_name(path)
    account = FileAccount(name, end - begin, local.decoded, local.blank)
    tail = local.zero_tail
    full_units_end = file_size // unit_size * unit_size
    torn = any(region.reason.startswith(races.TORN_TAIL) for region in local.unreadable)
    units_follow = (tail or torn) and end < full_units_end and has_nonzero_after(
        path, end, full_units_end)
    for region in local.unreadable:
        reason = region.reason
        if units_follow and reason.startswith(races.TORN_TAIL):
            reason = f"{UNIT_BEFORE_MORE}; {reason.split('; ', 1)[-1]}"
        account.unreadable.append(UnreadableRegion(
            name, region.offset + begin, region.length, reason))
    if tail and units_follow:
        account.add_unreadable(end - tail, tail,
                               "all-zero units followed by more data (hole in the queue)")
    else:
        account.zero_tail = tail
    return account.check()


Decode = TypeVar("Decode")  # CqFileDecode or BcqFileDecode


def decode_unit_range(path: FileTarget, begin: int, end: int | None, unit_size: int,
                      decode_bytes: Callable[..., Decode], topic: str | None,
                      queue_id: int | None) -> Decode:
    """Decode bytes [begin, end) of a fixed-unit queue file (a path or a ByteSource) with
    ``decode_bytes``.

    Positions and the account come back file-relative; the account covers only the
    range, so the decodes of adjacent ranges add up to the whole file.
    """
    begin, end, file_size = unit_range(path, begin, end, unit_size)
    name = source_name(path)
    where = unit_file_identity(name, unit_size, topic, queue_id)
    local = decode_bytes(read_range(path, begin, end), path=name, start=where.start + begin,
                         topic=where.topic, queue_id=where.queue_id)
    local.start = where.start
    local.file_position = local.file_position + begin
    local.write_position += begin
    local.data_end += begin
    local.account = range_account(local.account, path, begin, end, file_size, unit_size)
    return local


def decode_cq_range(
    path: FileTarget, begin: int = 0, end: int | None = None, *,
    topic: str | None = None, queue_id: int | None = None,
) -> CqFileDecode:
    """Decode bytes [begin, end) of one consume-queue file (``begin`` on a unit boundary).

    Used by the incremental loads, which read a growing queue file only past what they
    already loaded (see :func:`decode_unit_range`).
    """
    return decode_unit_range(path, begin, end, CQ_UNIT_SIZE, decode_cq_bytes, topic,
                             queue_id)


# --------------------------------------------------------------------------- directory walk


@dataclass(frozen=True)
class SkippedEntry:
    """Something found in a queue tree that is not a queue or a unit file, and why."""

    path: Path
    reason: str


@dataclass(frozen=True)
class QueueDir:
    """One ``<root>/<topic>/<queueId>/`` directory and its unit files (by start offset)."""

    topic: str
    queue_id: int
    path: Path
    segments: tuple[Segment, ...]


@dataclass
class QueueTree:
    """Result of walking ``consumequeue/`` (or ``consumequeue_ext/``, ``batchconsumequeue/``).

    ``loose_files`` are plain files directly under the root: RocksDB CQ files in 5.2+
    (§4.6) share the directory, and ``rocksdb`` says whether they look like a RocksDB
    instance (its data is not decoded by rmqlib).
    """

    root: Path
    queues: list[QueueDir] = field(default_factory=list)
    loose_files: list[Path] = field(default_factory=list)
    skipped: list[SkippedEntry] = field(default_factory=list)

    @property
    def rocksdb(self) -> bool:
        return any(looks_like_rocksdb_file(p.name) for p in self.loose_files)


def looks_like_rocksdb_file(name: str) -> bool:
    """File names a RocksDB instance keeps in its directory."""
    return (
        name in ROCKSDB_MARKERS
        or name.startswith(ROCKSDB_PREFIXES)
        or name.endswith(ROCKSDB_SUFFIXES)
    )


def walk_queue_tree(root: str | Path) -> QueueTree:
    """List every queue dir under a consume-queue root the way the broker loads them.

    Like ``ConsumeQueueStore.loadConsumeQueues``: non-directories at topic level are
    skipped (reported as loose files), queue dirs must be decimal ints (only canonical
    names, since the broker reopens ``<topic>/<int>``); inside a queue dir, anything that
    is not a 20-digit-named file is reported as skipped.
    """
    root = Path(root)
    if not root.is_dir():
        raise NotAStoreFileError("queue root directory does not exist", path=root)
    tree = QueueTree(root)
    for topic_entry in sorted(os.scandir(root), key=lambda e: e.name):
        if not topic_entry.is_dir():
            tree.loose_files.append(Path(topic_entry.path))
            continue
        for queue_entry in sorted(os.scandir(topic_entry.path), key=lambda e: e.name):
            _add_queue(tree, topic_entry.name, queue_entry)
    tree.queues.sort(key=lambda q: (q.topic, q.queue_id))
    return tree


def _add_queue(tree: QueueTree, topic: str, entry: os.DirEntry[str]) -> None:
    path = Path(entry.path)
    if not entry.is_dir():
        tree.skipped.append(SkippedEntry(path, "not a directory in a topic directory"))
        return
    if not QUEUE_ID_NAME.match(entry.name) or int(entry.name) > _INT_MAX:
        tree.skipped.append(SkippedEntry(path, "queue directory name is not a queue id"))
        return
    segments: list[Segment] = []
    for item in os.scandir(path):
        if item.is_file() and SEGMENT_NAME.match(item.name):
            segments.append(Segment(Path(item.path), int(item.name), item.stat().st_size))
        else:
            tree.skipped.append(
                SkippedEntry(Path(item.path), "not a unit file (20-digit start offset)")
            )
    segments.sort(key=lambda s: s.start)
    tree.queues.append(QueueDir(topic, int(entry.name), path, tuple(segments)))


# --------------------------------------------------------------------------- min / max


@dataclass(frozen=True)
class QueueBounds:
    """Logical offsets of a queue: ``[min_offset, max_offset)`` like the broker's.

    ``first_file_offset`` is the first file's start / 20 (before any min correction);
    ``dirty_files`` are files after the recovery end that the broker would delete.
    """

    min_offset: int
    max_offset: int
    first_file_offset: int
    end_byte_offset: int
    dirty_files: tuple[str, ...] = ()


def queue_bounds(
    decodes: Sequence[CqFileDecode], commitlog_min_offset: int | None = None
) -> QueueBounds:
    """Min and max queue offset from the decoded files of one queue (sorted by start).

    Max follows ``CQ.recover``: scan from the third-last file, moving on only past full
    files; max = (end file start + write position) / 20. Min is the first file's start
    / 20, corrected as ``correctMinOffset(clMin)`` does when the commitlog min offset is
    given: the first unit of the first file with offset ≥ clMin (fillers count only when
    clMin is 0), or min = max when the queue's last unit is below clMin.
    """
    if not decodes:
        return QueueBounds(0, 0, 0, 0)
    first = decodes[0]
    end, stop_index = _recovery_end(decodes)
    max_offset = end // CQ_UNIT_SIZE
    first_file_offset = first.start // CQ_UNIT_SIZE
    min_offset = first_file_offset
    if commitlog_min_offset is not None:
        min_offset = _corrected_min(decodes, end, commitlog_min_offset, min_offset)
    dirty = tuple(d.path for d in decodes[stop_index + 1 :])
    return QueueBounds(min_offset, max_offset, first_file_offset, end, dirty)


def _recovery_end(decodes: Sequence[CqFileDecode]) -> tuple[int, int]:
    index = max(0, len(decodes) - 3)
    while True:
        current = decodes[index]
        if current.is_full and index + 1 < len(decodes):
            index += 1
            continue
        return current.start + current.write_position, index


def _corrected_min(
    decodes: Sequence[CqFileDecode], end: int, cl_min: int, default: int
) -> int:
    last = _unit_before(decodes, end)
    if last is None or last < cl_min:
        return end // CQ_UNIT_SIZE
    first = decodes[0]
    limit = first.write_position
    mask = (first.file_position < limit) & (first.commitlog_offset >= cl_min)
    hits = np.flatnonzero(mask)
    if hits.size:
        return (first.start + int(first.file_position[hits[0]])) // CQ_UNIT_SIZE
    return default


def _unit_before(decodes: Sequence[CqFileDecode], end: int) -> int | None:
    """Commitlog offset of the unit ending at byte ``end`` of the queue stream."""
    target = end - CQ_UNIT_SIZE
    for d in decodes:
        if d.start <= target < d.start + d.file_size:
            hit = np.flatnonzero(d.file_position == target - d.start)
            return int(d.commitlog_offset[hit[0]]) if hit.size else None
    return None


# --------------------------------------------------------------------------- whole queues


def decode_queue(queue: QueueDir) -> list[CqFileDecode]:
    """Decode every file of one queue directory, in start-offset order."""
    return [
        decode_cq_file(seg.path, topic=queue.topic, queue_id=queue.queue_id)
        for seg in queue.segments
    ]


def iter_record_batches(queues: Iterable[QueueDir]) -> Iterator[pa.RecordBatch]:
    """One RecordBatch per consume-queue file (for Spark ``mapInArrow``)."""
    for queue in queues:
        for seg in queue.segments:
            yield decode_cq_file(
                seg.path, topic=queue.topic, queue_id=queue.queue_id
            ).to_record_batch()
