"""A slave's store against its master's: is the slave a byte-identical prefix of the master?

RocketMQ's master/slave replication (``HAService``: the slave asks for bytes from its own
max physical offset, the master sends the commitlog bytes as they are, the slave appends
them with ``appendToCommitLog``) makes the slave's commitlog a *byte copy* of the master's,
file by file: same file names, same positions, same record bytes (store host and
PHYSICALOFFSET included, spec §2). The slave then builds its own consume queues and index
from those bytes with its own reput service, so its consume-queue units are byte copies of
the master's too (same commitlog offsets, sizes and tags codes). Its config (topics,
subscription groups, consumer and delay offsets) is pulled from the master every few
seconds by ``SlaveSynchronize``.

So, for one night's snapshots of a master and its slave:

* **commitlog**: over the range both hold, the bytes are equal; the first offset where they
  differ is where the slave *diverged*. The slave's write position (the bytes it received)
  is behind the master's by the *replication lag in bytes*. A slave whose data ends
  past the master's snapshot is not an error (the two copies are taken at slightly different
  moments): only the common range is compared.
* **consume queues**: per queue both hold, the units of the common range are equal.

Comparison reads aligned chunks of both files and compares them in memory, chunk by
chunk: no file is ever read whole. ``start`` lets a nightly check begin where the previous
night's check of the same slave ended (the bytes before were already compared, and a
commitlog never changes below its write position), which keeps a night's cost flat.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rmqlib.commitlog import layout as L
from rmqlib.common.fileio import last_nonzero_end
from rmqlib.common.segments import Segment, list_segments
from rmqlib.queues.batchconsumequeue import BCQ_UNIT_SIZE
from rmqlib.queues.consumequeue import CQ_UNIT_SIZE, QueueDir, walk_queue_tree
from rmqlib.store.growth import data_end

COMMITLOG, CONSUMEQUEUE, BATCHCONSUMEQUEUE = "commitlog", "consumequeue", "batchconsumequeue"
QUEUE_UNIT_SIZES = {CONSUMEQUEUE: CQ_UNIT_SIZE, BATCHCONSUMEQUEUE: BCQ_UNIT_SIZE}
CHUNK = 4 << 20


# --------------------------------------------------------------------------- reading


def read_span(segments: list[Segment], offset: int, length: int) -> bytes:
    """Bytes [offset, offset + length) of a stream by logical offset, across its files;
    shorter when the files end (or have a hole) before that."""
    parts: list[bytes] = []
    position, end = offset, offset + length
    for segment in segments:
        if segment.end <= position or position >= end:
            continue
        if segment.start > position:
            break  # a hole in the file sequence: stop at it
        with open(segment.path, "rb") as handle:
            handle.seek(position - segment.start)
            data = handle.read(min(end, segment.end) - position)
        parts.append(data)
        position += len(data)
        if len(data) < min(end, segment.end) - (position - len(data)):
            break
    return b"".join(parts)


def first_difference(left: list[Segment], right: list[Segment], start: int, end: int,
                     chunk: int = CHUNK) -> int | None:
    """The first logical offset in [start, end) where two streams' bytes differ (a byte
    missing on one side counts as a difference), or None when they are equal."""
    position = start
    while position < end:
        length = min(chunk, end - position)
        a, b = read_span(left, position, length), read_span(right, position, length)
        if a != b:
            return position + _first_unequal(a, b)
        position += length
    return None


def _first_unequal(a: bytes, b: bytes) -> int:
    """Index of the first byte where ``a`` and ``b`` differ (they do differ)."""
    low, high = 0, min(len(a), len(b))
    while low < high:  # bisect on equal prefixes: C-speed slices, no per-byte loop
        middle = (low + high) // 2
        if a[low:middle + 1] == b[low:middle + 1]:
            low = middle + 1
        else:
            high = middle
    return low


# --------------------------------------------------------------------------- data ends


def commitlog_data_end(segments: list[Segment]) -> int | None:
    """Logical offset where a commitlog's written bytes end (None: nothing written).

    That is the broker's write position: the end of the last non-zero byte of the file it
    last wrote to, or that file's end when it was closed with a BLANK. Replication sends
    byte ranges, not records, so a slave may hold the first part of a record: its position
    is then inside that record, which framing alone would not show (a record cut inside its
    properties still frames). A record whose own last bytes are zero would read a few
    bytes short; stock clients always set properties, whose text ends non-zero.
    """
    for segment in reversed(segments):
        last = last_nonzero_end(segment.path, segment.size)
        if not last:
            continue
        if last >= L.BLANK_RECORD_LENGTH and _is_blank(segment, last - L.BLANK_RECORD_LENGTH):
            return segment.end
        return segment.start + last
    return None


def write_offset(store: str | Path) -> int | None:
    """A store's commitlog write position (None: no commitlog, or nothing written)."""
    directory = Path(store) / COMMITLOG
    return commitlog_data_end(list_segments(directory)) if directory.is_dir() else None


def _is_blank(segment: Segment, position: int) -> bool:
    """A BLANK frame at ``position``: bytes-left-in-file and the BLANK magic."""
    head = read_span([segment], segment.start + position, L.BLANK_RECORD_LENGTH)
    return head[4:] == L.MAGIC_BYTES_BLANK and \
        int.from_bytes(head[:4], "big", signed=True) == segment.size - position


def queue_data_end(segments: tuple[Segment, ...] | list[Segment], unit: int) -> int:
    """Logical byte offset where a queue's units end: its last non-zero byte, rounded up to
    a whole unit (a unit's last field may be zero)."""
    for segment in reversed(segments):
        last = last_nonzero_end(segment.path, segment.size)
        if last:
            return segment.start + data_end(last, unit, segment.size)
    return segments[0].start if segments else 0


# --------------------------------------------------------------------------- comparison


@dataclass(frozen=True)
class CommitlogComparison:
    """The slave's commitlog against the master's, at one night's snapshots."""

    master_min: int
    master_end: int
    replica_min: int
    replica_end: int
    compared_from: int
    compared_to: int
    diverged_at: int | None  # first logical offset whose bytes differ

    @property
    def lag_bytes(self) -> int:
        """How far the slave's data end is behind the master's (0 when ahead)."""
        return max(self.master_end - self.replica_end, 0)

    @property
    def bytes_compared(self) -> int:
        return max(self.compared_to - self.compared_from, 0)


def compare_commitlogs(master_store: str | Path, replica_store: str | Path, *,
                       start: int = 0, chunk: int = CHUNK) -> CommitlogComparison:
    """Compare the commitlogs of two store roots over the range both hold, from ``start``
    (bytes below it were compared before)."""
    master = list_segments(Path(master_store) / COMMITLOG)
    replica = list_segments(Path(replica_store) / COMMITLOG)
    master_min = master[0].start if master else 0
    replica_min = replica[0].start if replica else 0
    master_end = commitlog_data_end(master) or master_min
    replica_end = commitlog_data_end(replica) or replica_min
    begin = max(master_min, replica_min, start)
    until = min(master_end, replica_end)
    diverged = first_difference(master, replica, begin, until, chunk) if until > begin else None
    return CommitlogComparison(master_min, master_end, replica_min, replica_end, begin,
                               max(until, begin), diverged)


@dataclass(frozen=True)
class QueueMismatch:
    """A queue whose units differ between master and slave: the first differing unit."""

    stream: str
    topic: str
    queue_id: int
    queue_offset: int  # unit index (queue offset for consume queues)


@dataclass
class QueueComparison:
    queues: int = 0          # queues present on both sides and compared
    units: int = 0           # units compared
    mismatches: list[QueueMismatch] = field(default_factory=list)
    replica_max_offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    master_max_offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)


def compare_queues(master_store: str | Path, replica_store: str | Path,
                   chunk: int = CHUNK) -> QueueComparison:
    """Compare every queue the two stores both hold over their common units; record each
    side's unit end (the queue's max offset for consume queues) per queue."""
    result = QueueComparison()
    for stream, unit in QUEUE_UNIT_SIZES.items():
        masters = dict(_queues(Path(master_store) / stream))
        for key, replica in _queues(Path(replica_store) / stream):
            replica_end = queue_data_end(replica.segments, unit)
            result.replica_max_offsets[(stream, *key)] = replica_end // unit
            master = masters.get(key)
            if master is None:
                continue
            master_end = queue_data_end(master.segments, unit)
            begin = max(master.segments[0].start if master.segments else 0,
                        replica.segments[0].start if replica.segments else 0)
            until = min(master_end, replica_end)
            result.queues += 1
            if until <= begin:
                continue
            result.units += (until - begin) // unit
            diverged = first_difference(list(master.segments), list(replica.segments), begin,
                                        until, chunk)
            if diverged is not None:
                result.mismatches.append(QueueMismatch(stream, key[0], key[1], diverged // unit))
        for key, master in masters.items():
            result.master_max_offsets[(stream, *key)] = \
                queue_data_end(master.segments, unit) // unit
    return result


def _queues(root: Path) -> Iterator[tuple[tuple[str, int], QueueDir]]:
    if not root.is_dir():
        return
    for queue in walk_queue_tree(root).queues:
        if queue.segments:
            yield (queue.topic, queue.queue_id), queue


__all__ = ["CommitlogComparison", "QueueComparison", "QueueMismatch", "commitlog_data_end",
           "compare_commitlogs", "compare_queues", "first_difference", "queue_data_end",
           "read_span", "write_offset"]
