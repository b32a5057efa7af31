"""Batch consume queue (5.x ``queue.type=BatchCQ``): 46-byte units (spec §4.5).

Lives in ``batchconsumequeue/<topic>/<queueId>/``, files named by byte offset like every
mapped-file queue; compaction CQ files use the same unit. Unlike the classic queue, a
unit's index is *not* a queue offset: each unit carries ``msgBaseOffset`` and
``batchSize`` and covers queue offsets [base, base + batchSize).

Accounting per file mirrors :mod:`rmqlib.queues.consumequeue`: units valid by the broker's
recovery rule (offset ≥ 0, size > 0, base ≥ 0, batch > 0) → ``decoded``; the all-zero
units after the last non-zero one → ``zero_tail``; every other unit before that, and a
trailing partial unit → ``unreadable``. There is no filler unit in this format.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from rmqlib.common.accounting import FileAccount
from rmqlib.common.bytesource import FileTarget
from rmqlib.common.fileio import read_bytes
from rmqlib.queues.consumequeue import (
    EXT_MAX_ADDR,
    account_units,
    check_unit_start,
    decode_unit_range,
    unit_file_identity,
)

# BatchConsumeQueue unit layout (CQ_STORE_UNIT_SIZE = 46), big-endian.
BCQ_UNIT_SIZE = 46
BCQ_COMMITLOG_OFFSET_OFFSET = 0
BCQ_SIZE_OFFSET = 8
BCQ_TAGS_CODE_OFFSET = 12
BCQ_STORE_TIME_OFFSET = 20  # MSG_STORE_TIME_OFFSET_INDEX
BCQ_BASE_OFFSET_OFFSET = 28  # MSG_BASE_OFFSET_INDEX
BCQ_BATCH_SIZE_OFFSET = 36  # MSG_BATCH_SIZE_INDEX
BCQ_COMPACTED_OFFSET_OFFSET = 38  # MSG_COMPACT_OFFSET_INDEX
BCQ_RESERVED_OFFSET = 42
DEFAULT_BCQ_FILE_SIZE = 13_800_000  # 300 000 units

BCQ_UNIT_DTYPE = np.dtype(
    [
        ("commitlog_offset", ">i8"),
        ("size", ">i4"),
        ("tags_code", ">i8"),
        ("store_timestamp", ">i8"),
        ("msg_base_offset", ">i8"),
        ("batch_size", ">i2"),
        ("compacted_offset", ">i4"),
        ("reserved", ">i4"),
    ]
)
assert BCQ_UNIT_DTYPE.itemsize == BCQ_UNIT_SIZE

BCQ_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("queue_id", pa.int32(), nullable=False),
        pa.field("unit_index", pa.int64(), nullable=False),
        pa.field("commitlog_offset", pa.int64(), nullable=False),
        pa.field("size", pa.int32(), nullable=False),
        pa.field("tags_code", pa.int64(), nullable=False),
        pa.field("store_timestamp", pa.int64(), nullable=False),
        pa.field("msg_base_offset", pa.int64(), nullable=False),
        pa.field("batch_size", pa.int16(), nullable=False),
        pa.field("compacted_offset", pa.int32(), nullable=False),
        pa.field("reserved", pa.int32(), nullable=False),
        pa.field("is_ext_addr", pa.bool_(), nullable=False),
        pa.field("file", pa.string(), nullable=False),
        pa.field("file_position", pa.int64(), nullable=False),
    ]
)

@dataclass
class BcqFileDecode:
    """Valid units of one batch-CQ file as native-endian arrays, plus the account."""

    path: str
    topic: str
    queue_id: int
    start: int
    file_position: np.ndarray
    fields: dict[str, np.ndarray]
    account: FileAccount
    write_position: int
    data_end: int

    @property
    def count(self) -> int:
        return int(self.file_position.size)

    @property
    def unit_index(self) -> np.ndarray:
        return (self.start + self.file_position) // BCQ_UNIT_SIZE

    def to_record_batch(self) -> pa.RecordBatch:
        n = self.count
        f = self.fields
        return pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(self.topic, pa.string()), n),
                pa.repeat(pa.scalar(self.queue_id, pa.int32()), n),
                pa.array(self.unit_index, pa.int64()),
                pa.array(f["commitlog_offset"], pa.int64()),
                pa.array(f["size"], pa.int32()),
                pa.array(f["tags_code"], pa.int64()),
                pa.array(f["store_timestamp"], pa.int64()),
                pa.array(f["msg_base_offset"], pa.int64()),
                pa.array(f["batch_size"], pa.int16()),
                pa.array(f["compacted_offset"], pa.int32()),
                pa.array(f["reserved"], pa.int32()),
                pa.array(f["tags_code"] <= EXT_MAX_ADDR, pa.bool_()),
                pa.repeat(pa.scalar(self.path, pa.string()), n),
                pa.array(self.file_position, pa.int64()),
            ],
            schema=BCQ_SCHEMA,
        )


def decode_bcq_bytes(
    data: bytes | bytearray | memoryview,
    *,
    path: str | Path,
    start: int,
    topic: str,
    queue_id: int,
) -> BcqFileDecode:
    """Decode a whole batch-CQ file held in memory (numpy, one pass)."""
    check_unit_start(start, BCQ_UNIT_SIZE, path)
    account = FileAccount(str(path), len(data))
    n_full = len(data) // BCQ_UNIT_SIZE
    raw = np.frombuffer(data, dtype=BCQ_UNIT_DTYPE, count=n_full)
    native = {
        name: raw[name].astype(raw.dtype[name].newbyteorder("="))
        for name in BCQ_UNIT_DTYPE.names
    }
    valid = (
        (native["commitlog_offset"] >= 0)
        & (native["size"] > 0)
        & (native["msg_base_offset"] >= 0)
        & (native["batch_size"] > 0)
    )
    as_bytes = np.frombuffer(data, dtype=np.uint8, count=n_full * BCQ_UNIT_SIZE)
    zero = ~as_bytes.reshape(n_full, BCQ_UNIT_SIZE).any(axis=1)
    scan = account_units(account, len(data), BCQ_UNIT_SIZE, valid, zero,
                         "invalid units: offset < 0, size <= 0, base < 0 or batch size <= 0")
    in_data, data_units, write_units = scan.in_data, scan.data_units, scan.write_units
    account.check()

    keep = np.flatnonzero(in_data)
    return BcqFileDecode(
        path=str(path),
        topic=topic,
        queue_id=queue_id,
        start=start,
        file_position=keep.astype(np.int64) * BCQ_UNIT_SIZE,
        fields={name: values[keep] for name, values in native.items()},
        account=account,
        write_position=write_units * BCQ_UNIT_SIZE,
        data_end=data_units * BCQ_UNIT_SIZE,
    )


def decode_bcq_file(
    path: str | Path, *, topic: str | None = None, queue_id: int | None = None
) -> BcqFileDecode:
    """Decode one ``batchconsumequeue/<topic>/<queueId>/<offset>`` file."""
    where = unit_file_identity(path, BCQ_UNIT_SIZE, topic, queue_id)
    return decode_bcq_bytes(
        read_bytes(path), path=path, start=where.start, topic=where.topic,
        queue_id=where.queue_id,
    )


def decode_bcq_range(
    path: FileTarget, begin: int = 0, end: int | None = None, *,
    topic: str | None = None, queue_id: int | None = None,
) -> BcqFileDecode:
    """Decode bytes [begin, end) of one batch-CQ file; same rules as ``decode_cq_range``."""
    return decode_unit_range(path, begin, end, BCQ_UNIT_SIZE, decode_bcq_bytes, topic,
                             queue_id)


@dataclass(frozen=True)
class BcqBounds:
    """Queue offsets covered by a batch queue: [min_offset, max_offset)."""

    min_offset: int
    max_offset: int


def bcq_bounds(decodes: Sequence[BcqFileDecode]) -> BcqBounds:
    """min = base of the first valid unit, max = last base + last batchSize (§4.5)."""
    with_units = [d for d in decodes if d.count]
    if not with_units:
        return BcqBounds(0, 0)
    first, last = with_units[0], with_units[-1]
    base = last.fields["msg_base_offset"]
    batch = last.fields["batch_size"]
    return BcqBounds(
        int(first.fields["msg_base_offset"][0]), int(base[-1]) + int(batch[-1])
    )


def base_offset_gaps(decodes: Sequence[BcqFileDecode]) -> list[tuple[int, int, int]]:
    """Invariant §8.12 violations as (unit index, expected base, actual base)."""
    index = np.concatenate([d.unit_index for d in decodes]) if decodes else np.empty(0)
    if index.size < 2:
        return []
    base = np.concatenate([d.fields["msg_base_offset"] for d in decodes])
    batch = np.concatenate([d.fields["batch_size"] for d in decodes]).astype(np.int64)
    expected = base[:-1] + batch[:-1]
    bad = np.flatnonzero(expected != base[1:])
    return [(int(index[i + 1]), int(expected[i]), int(base[i + 1])) for i in bad]
