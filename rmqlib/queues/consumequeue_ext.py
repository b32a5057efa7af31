"""ConsumeQueueExt files: variable-length units addressed from CQ tagsCode (spec §4.4).

Only present with ``enableConsumeQueueExt=true``. Unit: i16 size (= 20 + bitmap
length), i64 tagsCode, i64 msgStoreTime, i16 bitMapSize, bitmap bytes. A unit's
address, as stored in the consume queue, is ``decorate(file start + position)``.

Accounting per file: units → ``decoded``; the i16 -1 end marker the broker writes when
the next unit does not fit (``fullFillToEnd``) → ``blank``, and every byte after it
too, whatever it holds (the broker counts the file as full from there and never reads
past the marker); the all-zero rest after the last
unit → ``zero_tail``; a unit whose fields contradict each other, and everything after it
up to the zero tail (units have no resync marker) → ``unreadable``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from rmqlib.common.accounting import FileAccount
from rmqlib.common.fileio import nonzero_span, read_bytes
from rmqlib.errors import CorruptDataError
from rmqlib.queues.consumequeue import decorate_ext_offset, undecorate_ext_addr, unit_file_identity

# CqExtUnit layout (big-endian).
CQX_SIZE_OFFSET = 0
CQX_SIZE_LENGTH = 2
CQX_TAGS_CODE_OFFSET = CQX_SIZE_OFFSET + CQX_SIZE_LENGTH
CQX_TAGS_CODE_LENGTH = 8
CQX_STORE_TIME_OFFSET = CQX_TAGS_CODE_OFFSET + CQX_TAGS_CODE_LENGTH
CQX_STORE_TIME_LENGTH = 8
CQX_BITMAP_SIZE_OFFSET = CQX_STORE_TIME_OFFSET + CQX_STORE_TIME_LENGTH
CQX_BITMAP_SIZE_LENGTH = 2
CQX_BITMAP_OFFSET = CQX_BITMAP_SIZE_OFFSET + CQX_BITMAP_SIZE_LENGTH
CQX_MIN_UNIT_SIZE = CQX_BITMAP_OFFSET  # 20, CqExtUnit.MIN_EXT_UNIT_SIZE
CQX_END_MARKER = -1  # i16 written by fullFillToEnd
CQX_END_BLANK_DATA_LENGTH = 4  # bytes the writer keeps free at the end of a file
DEFAULT_CQX_FILE_SIZE = 48 * 1024 * 1024

_HEAD = struct.Struct(">hqqh")

CQX_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("queue_id", pa.int32(), nullable=False),
        pa.field("address", pa.int64(), nullable=False),
        pa.field("tags_code", pa.int64(), nullable=False),
        pa.field("msg_store_time", pa.int64(), nullable=False),
        pa.field("filter_bitmap", pa.binary(), nullable=False),
        pa.field("file", pa.string(), nullable=False),
        pa.field("file_position", pa.int64(), nullable=False),
    ]
)


@dataclass(frozen=True)
class CqExtUnit:
    """One ext unit; ``address`` is the decorated value a CQ unit's tagsCode holds."""

    address: int
    tags_code: int
    msg_store_time: int
    filter_bitmap: bytes
    file_position: int

    @property
    def size(self) -> int:
        return CQX_MIN_UNIT_SIZE + len(self.filter_bitmap)


@dataclass
class CqxFileDecode:
    """Units of one ext file, its account, and whether it ended with the -1 marker."""

    path: str
    topic: str
    queue_id: int
    start: int
    units: list[CqExtUnit]
    account: FileAccount
    end_marker_position: int | None

    def by_address(self) -> dict[int, CqExtUnit]:
        return {unit.address: unit for unit in self.units}

    def to_record_batch(self) -> pa.RecordBatch:
        units = self.units
        n = len(units)
        return pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(self.topic, pa.string()), n),
                pa.repeat(pa.scalar(self.queue_id, pa.int32()), n),
                pa.array([u.address for u in units], pa.int64()),
                pa.array([u.tags_code for u in units], pa.int64()),
                pa.array([u.msg_store_time for u in units], pa.int64()),
                pa.array([u.filter_bitmap for u in units], pa.binary()),
                pa.repeat(pa.scalar(self.path, pa.string()), n),
                pa.array([u.file_position for u in units], pa.int64()),
            ],
            schema=CQX_SCHEMA,
        )


def _last_nonzero_end(data: bytes, position: int) -> int:
    """End (exclusive) of the last non-zero byte at or after ``position``."""
    span = nonzero_span(data, position)
    return position if span is None else span[1]


def decode_cqx_bytes(
    data: bytes, *, path: str | Path, start: int, topic: str, queue_id: int
) -> CqxFileDecode:
    """Decode a whole ext file held in memory, walking units like ``recover``."""
    account = FileAccount(str(path), len(data))
    units: list[CqExtUnit] = []
    pos = 0
    marker: int | None = None
    while pos + CQX_SIZE_LENGTH <= len(data):
        (size,) = struct.unpack_from(">h", data, pos)
        if size == CQX_END_MARKER:
            marker = pos
            break
        if size == 0:
            break
        problem = _unit_problem(data, pos, size)
        if problem:
            end = max(_last_nonzero_end(data, pos), pos + 1)
            account.add_unreadable(pos, end - pos, problem)
            account.zero_tail = len(data) - end
            account.check()
            return CqxFileDecode(str(path), topic, queue_id, start, units, account, None)
        _, tags, store_time, bitmap_size = _HEAD.unpack_from(data, pos)
        bitmap = bytes(data[pos + CQX_BITMAP_OFFSET : pos + CQX_BITMAP_OFFSET + bitmap_size])
        units.append(
            CqExtUnit(decorate_ext_offset(start + pos), tags, store_time, bitmap, pos)
        )
        account.decoded += size
        pos += size
    _account_end(account, data, pos, marker)
    return CqxFileDecode(str(path), topic, queue_id, start, units, account, marker)


def _unit_problem(data: bytes, pos: int, size: int) -> str | None:
    if size < CQX_MIN_UNIT_SIZE:
        return f"ext unit size {size} is below the minimum {CQX_MIN_UNIT_SIZE}"
    if pos + size > len(data):
        return f"ext unit of size {size} runs past the end of the file"
    (bitmap_size,) = struct.unpack_from(">h", data, pos + CQX_BITMAP_SIZE_OFFSET)
    if bitmap_size < 0 or size != CQX_MIN_UNIT_SIZE + bitmap_size:
        return f"ext unit size {size} does not match bitmap size {bitmap_size}"
    return None


def _account_end(account: FileAccount, data: bytes, pos: int, marker: int | None) -> None:
    if marker is not None:
        # The marker ends the file whatever follows it: ConsumeQueueExt.fullFillToEnd sets
        # the write position to the file end, and recover() moves to the next file at a
        # size <= 0; nobody reads past it, so it is all blank (rmqlib.common.races).
        account.blank += len(data) - pos
        account.check()
        return
    end = _last_nonzero_end(data, pos)
    account.add_unreadable(pos, end - pos, "non-zero bytes after the last ext unit")
    account.zero_tail = len(data) - end
    account.check()


def decode_cqx_file(
    path: str | Path, *, topic: str | None = None, queue_id: int | None = None
) -> CqxFileDecode:
    """Decode one ``consumequeue_ext/<topic>/<queueId>/<offset>`` file."""
    # Ext units vary in size, so any byte offset is a valid file start (unit size 1).
    where = unit_file_identity(path, 1, topic, queue_id)
    return decode_cqx_bytes(
        read_bytes(path), path=path, start=where.start, topic=where.topic,
        queue_id=where.queue_id,
    )


def iter_units(decodes: list[CqxFileDecode]) -> Iterator[CqExtUnit]:
    for decode in decodes:
        yield from decode.units


class ExtAddressError(CorruptDataError):
    """A consume-queue tagsCode is an ext address that no ext unit answers."""


@dataclass
class ExtQueue:
    """The ext files of one queue, to resolve the addresses its consume queue holds."""

    topic: str
    queue_id: int
    decodes: list[CqxFileDecode]
    units: dict[int, CqExtUnit] = field(init=False)  # by address, built once

    def __post_init__(self) -> None:
        self.units = {address: unit for d in self.decodes
                      for address, unit in d.by_address().items()}

    def resolve(self, address: int) -> CqExtUnit:
        """The ext unit at ``address``; ExtAddressError if there is none (past the
        files' end, in a gap between files, or not where a unit starts)."""
        offset = undecorate_ext_addr(address)
        for decode in self.decodes:
            if decode.start <= offset < decode.start + decode.account.size:
                unit = self.units.get(address)
                if unit is None:
                    raise ExtAddressError(
                        f"no ext unit starts at ext offset {offset} (address {address})",
                        path=decode.path, offset=offset - decode.start)
                return unit
        end = max((d.start + d.account.size for d in self.decodes), default=0)
        raise ExtAddressError(
            f"ext address {address} (ext offset {offset}) is past the ext files of "
            f"{self.topic}/{self.queue_id}, which end at {end}")


def load_ext_queue(directory: str | Path, topic: str, queue_id: int) -> ExtQueue:
    """Decode every ext file of ``consumequeue_ext/<topic>/<queueId>`` (none: empty)."""
    from rmqlib.common.segments import list_segments

    directory = Path(directory)
    files = list_segments(directory) if directory.is_dir() else []
    return ExtQueue(topic, queue_id, [decode_cqx_file(f.path, topic=topic, queue_id=queue_id)
                                      for f in files])


class ExtResolver:
    """Resolves ext addresses of consume-queue units, loading each queue's ext files
    once: ``consumequeue_ext`` sits beside the ``consumequeue`` root of the unit file."""

    def __init__(self) -> None:
        self._queues: dict[Path, ExtQueue] = {}

    def queue_for(self, cq_file: str | Path, topic: str, queue_id: int) -> ExtQueue:
        cq_root = Path(cq_file).resolve().parent.parent.parent
        return self.queue_at(cq_root.parent / "consumequeue_ext" / topic / str(queue_id),
                             topic, queue_id)

    def queue_at(self, directory: Path, topic: str, queue_id: int) -> ExtQueue:
        """The ext queue in ``directory``, decoded on first use only."""
        directory = directory.resolve()
        if directory not in self._queues:
            self._queues[directory] = load_ext_queue(directory, topic, queue_id)
        return self._queues[directory]

    def describe(self, cq_file: str | Path, topic: str, queue_id: int,
                 address: int) -> dict[str, object]:
        """Dump fields for a unit whose tagsCode is ``address``: the ext unit's real tags
        code, store time and filter bitmap, or why the address resolves to nothing."""
        try:
            unit = self.queue_for(cq_file, topic, queue_id).resolve(address)
        except ExtAddressError as error:
            return {"ext_error": str(error)}
        return {"ext_tags_code": unit.tags_code, "ext_msg_store_time": unit.msg_store_time,
                "ext_filter_bitmap": unit.filter_bitmap.hex()}
