"""How each store file changes while a broker runs: what a snapshot copies, in which
order, what it may reuse from the previous snapshot, and where a file's data ends.

The facts (spec §1.1, §2.2, §4.2, §5):

* Mapped-file queues (commitlog, consume queues and their ext/batch variants, index
  files, the timer log) are written from the start of each file onwards; the rest of the file is
  preallocated zeros. Bytes once written never change, except the newest record a writer
  is still copying in (a hot copy can catch it half-written).
* A file of such a queue is *finished* once a later file of the same queue has data: the
  broker moves on only after the file is full (commitlog: a BLANK record at its end).
  The allocation service creates the next commitlog file ahead of time, all zeros, so the
  newest file by name is not necessarily the one being written.
* Inside data, runs of zeros are short: a commitlog record's header is never all zero and
  a body is at most ``maxMessageSize`` (4 MiB by default); a consume-queue unit always has
  a non-zero size (fillers included), a timer log unit its size field. A zero run longer
  than that is the preallocated tail. Index files are different: their hash slots fill in
  any order, so they have no zero tail to find and are copied whole.
* Copy order keeps a hot snapshot consistent for the checks: config first (consumer
  offsets then never point past what the queues hold), then queues and index (every unit
  then points at commitlog bytes that exist by the time those are copied), then the
  commitlog, then the checkpoint; the markers (abort, lock) say how the broker was.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from rmqlib.dledger import layout as DL
from rmqlib.store.inventory import FileKind
from rmqlib.timers.timerlog import TL_UNIT_SIZE

MIB = 2**20
# Longer than any zero run inside commitlog data: the broker's default maxMessageSize is
# 4 MiB (a body of zeros); twice that leaves room for a raised limit.
COMMITLOG_ZERO_RUN = 8 * MIB
QUEUE_ZERO_RUN = 64 * 1024
# A growing file is re-read from the broker a little below the previous snapshot's data
# end: the record or unit being written then may have been caught half-done. Commitlog:
# from the start of the last record that copy held (see last_record_start); queues: the
# last page.
QUEUE_REREAD = 4096
# Reuse of an earlier copy is confirmed against the broker: its first CONFIRM_HEAD bytes
# and a window below the reuse point (``Growth.confirm_window``). A commitlog window holds
# the last records' headers (store timestamps, offsets) unless the records are bigger.
CONFIRM_HEAD = 4096
COMMITLOG_CONFIRM_WINDOW = 64 * 1024
BLANK_MAGIC = -875286124   # 0xCBD43194 as i32 (spec §2.2)
Buffer = bytes | memoryview | mmap.mmap


class CopyPhase(IntEnum):
    CONFIG = 0
    QUEUES_AND_INDEX = 1
    COMMITLOG = 2
    CHECKPOINT = 3
    MARKERS = 4


@dataclass(frozen=True)
class Growth:
    """How files of one kind grow, for the snapshot copier."""

    phase: CopyPhase
    append_only: bool = False   # written from the start; old bytes never change
    unit: int = 1               # data ends on a multiple of this
    zero_run: int = 0           # a zero run this long ends the data (0: copy whole file)
    reread: int = 0             # bytes re-read below the last snapshot's data end
    # Framed records (commitlog, DLedger entries): re-read from the last frame's start,
    # found by this hop over the frames (data, begin, end) -> start.
    last_frame_start: Callable[[Buffer, int, int], int] | None = None
    head: int = 0               # bytes at the start that are non-zero once a file has data
    # Bytes compared with the broker before the previous snapshot's copy of this file is
    # reused (``jobs.snapshot.copier``): the window just below the reuse point. A rewrite
    # of the file (a truncated and re-written commitlog, a reset store) shows there.
    confirm_window: int = 4096


def last_record_start(data: Buffer, begin: int, end: int) -> int:
    """Start of the last commitlog frame that begins before ``end``, hopping TOTALSIZE
    from ``begin`` (a frame start). Framing only: a frame that cannot be followed (bad
    length, or running past ``end``) is where the hops stop; so is a BLANK, after which
    the file holds no more records. The result is where a later copy must re-read from:
    everything before it belongs to records the copy held whole."""
    position = begin
    while position + 8 <= end:
        total = int.from_bytes(data[position:position + 4], "big", signed=True)
        magic = int.from_bytes(data[position + 4:position + 8], "big", signed=True)
        if magic == BLANK_MAGIC or total < 8 or position + total >= end:
            return position
        position += total
    return position


def last_entry_start(data: Buffer, begin: int, end: int) -> int:
    """The same for a DLedger data file (rmqlib.dledger.layout): hop SIZE from ``begin``
    (an entry start) to the start of the last entry that begins before ``end``; a BLANK
    or an entry that cannot be followed stops the hops."""
    position = begin
    while position + 8 <= end:
        magic = int.from_bytes(data[position:position + 4], "big", signed=True)
        size = int.from_bytes(data[position + 4:position + 8], "big", signed=True)
        if magic != DL.ENTRY_MAGIC or size < DL.ENTRY_HEADER_SIZE or position + size >= end:
            return position
        position += size
    return position


_QUEUE = dict(append_only=True, zero_run=QUEUE_ZERO_RUN, reread=QUEUE_REREAD)

GROWTH: dict[FileKind, Growth] = {
    FileKind.CONFIG_JSON: Growth(CopyPhase.CONFIG),
    FileKind.CONFIG_BACKUP: Growth(CopyPhase.CONFIG),
    FileKind.CONFIG_TMP: Growth(CopyPhase.CONFIG),
    FileKind.TIMERCHECK: Growth(CopyPhase.CONFIG),
    FileKind.CONSUME_QUEUE: Growth(CopyPhase.QUEUES_AND_INDEX, unit=20, head=20, **_QUEUE),
    FileKind.BATCH_CONSUME_QUEUE: Growth(CopyPhase.QUEUES_AND_INDEX, unit=46, head=46,
                                         **_QUEUE),
    # Ext units are variable-length (a short size, then the fields): byte granularity.
    FileKind.CONSUME_QUEUE_EXT: Growth(CopyPhase.QUEUES_AND_INDEX, head=2, **_QUEUE),
    # Index: hash slots fill anywhere, so no zero tail; a finished file is still reused.
    FileKind.INDEX: Growth(CopyPhase.QUEUES_AND_INDEX, append_only=True, head=40),
    FileKind.COMMITLOG: Growth(CopyPhase.COMMITLOG, append_only=True, zero_run=COMMITLOG_ZERO_RUN,
                               last_frame_start=last_record_start, head=8,
                               confirm_window=COMMITLOG_CONFIRM_WINDOW),
    # A DLedger broker's commitlog: entries (a 48-byte header around a record) tile its
    # data files like records tile commitlog segments. Index units (32 bytes, never all
    # zero) are written after their entry: copied with the queues, before the data.
    FileKind.DLEDGER_DATA: Growth(CopyPhase.COMMITLOG, append_only=True,
                                  zero_run=COMMITLOG_ZERO_RUN,
                                  last_frame_start=last_entry_start, head=8,
                                  confirm_window=COMMITLOG_CONFIRM_WINDOW),
    FileKind.DLEDGER_INDEX: Growth(CopyPhase.QUEUES_AND_INDEX, unit=DL.INDEX_UNIT_SIZE,
                                   head=DL.INDEX_UNIT_SIZE, **_QUEUE),
    # Timer log (§6.4): 52-byte units from the start of each file, each opening with its
    # size (52); a finished file ends with a 16-byte blank. Units point into the commitlog
    # like queue units, so it is copied with the queues.
    FileKind.TIMER_LOG: Growth(CopyPhase.QUEUES_AND_INDEX, unit=TL_UNIT_SIZE, head=4,
                               **_QUEUE),
    FileKind.CHECKPOINT: Growth(CopyPhase.CHECKPOINT),
    # endIndex / committedIndex name entries: copied after them.
    FileKind.DLEDGER_STATE: Growth(CopyPhase.CHECKPOINT),
    FileKind.ABORT: Growth(CopyPhase.MARKERS),
    FileKind.LOCK: Growth(CopyPhase.MARKERS),
}
# Everything else (RocksDB, timer wheel, compaction, HA state, unknown files) is
# copied whole with the queues, before the commitlog its offsets may point into.
OTHER = Growth(CopyPhase.QUEUES_AND_INDEX)


def growth_of(kind: FileKind) -> Growth:
    return GROWTH.get(kind, OTHER)


def data_end(last_nonzero_end: int, unit: int, size: int) -> int:
    """Where a file's data ends, given the end of its last non-zero byte: rounded up to
    a whole unit (a unit's last field can be zero, e.g. a consume-queue tags code)."""
    rounded = -(-last_nonzero_end // unit) * unit
    return min(rounded, size)


