"""Driver side of a load: decide which bytes of a snapshot are new, as decode tasks.

A broker's commitlog and consume queues only grow; the ``load_state`` table remembers,
per broker, how far each was loaded (the *high-water mark*: the end of the last complete
record or unit, so a torn tail is read again next time). Planning lists the snapshot's
files, compares them with those marks and returns byte-range tasks for what is past
them. It reads only file names, sizes and index-file headers; decoding is the executors'.

Planning also finds what cannot be loaded: bytes deleted by broker retention before any
load saw them (*retention gaps*). A store that no longer holds what was loaded (rewritten,
truncated or reset) is settled before planning (:mod:`jobs.load.rewrites`): the marks
planning gets are already moved back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from jobs.load.decode_tasks import (
    BATCHCONSUMEQUEUE,
    COMMITLOG,
    CONSUMEQUEUE,
    DLEDGER,
    INDEX,
    ROCKSDB_CQ,
    Task,
)
from rmqlib.commitlog.records import split_ranges
from rmqlib.common.fileio import has_nonzero_after
from rmqlib.common.segments import Segment, list_segments
from rmqlib.indexfile import list_index_files
from rmqlib.queues.batchconsumequeue import BCQ_UNIT_SIZE
from rmqlib.queues.consumequeue import CQ_UNIT_SIZE, QueueDir, walk_queue_tree
from rmqlib.rocksdb.database import is_database
from rmqlib.store.commitlog_source import CommitlogSource, commitlog_source
from rmqlib.store.growth import growth_of
from rmqlib.store.inventory import FileKind

OTHER_STREAM = "other"  # quarantine stream of a file outside the known streams
DEFAULT_SPLIT_BYTES = 64 * 1024 * 1024
DEFAULT_QUEUE_SPLIT_BYTES = 6_000_000  # one default-size consume-queue file
UNIT_SIZES = {CONSUMEQUEUE: CQ_UNIT_SIZE, BATCHCONSUMEQUEUE: BCQ_UNIT_SIZE}


@dataclass(frozen=True)
class HighWaterMark:
    """One row of ``load_state``."""

    broker: str
    stream: str
    topic: str | None
    queue_id: int | None
    file: str | None
    loaded_until: int
    snapshot_id: str
    last_record_offset: int | None = None
    last_record_crc: int | None = None

    @property
    def key(self) -> tuple[str, str | None, int | None, str | None]:
        return (self.stream, self.topic, self.queue_id, self.file)


@dataclass(frozen=True)
class RetentionGap:
    """Offsets deleted by the broker before a load saw them (commitlog: bytes; queues:
    queue offsets, unit indexes for batch queues)."""

    stream: str
    topic: str | None
    queue_id: int | None
    from_offset: int
    to_offset: int


@dataclass(frozen=True)
class SkippedQueue:
    """A queue whose files end below what was loaded (topic deleted and re-created)."""

    stream: str
    topic: str
    queue_id: int
    rel_path: str
    reason: str
    length: int


@dataclass
class LoadPlan:
    """Everything the executors will decode for one snapshot, plus what planning found."""

    store: Path
    commitlog_tasks: list[Task] = field(default_factory=list)
    queue_tasks: list[Task] = field(default_factory=list)
    index_tasks: list[Task] = field(default_factory=list)
    gaps: list[RetentionGap] = field(default_factory=list)
    skipped_queues: list[SkippedQueue] = field(default_factory=list)
    # (relative path, size, reason, stream) of files that cannot be decoded at all
    unreadable_files: list[tuple[str, int, str, str]] = field(default_factory=list)
    commitlog_min_offset: int | None = None
    commitlog_hwm: int | None = None
    # The segment the broker writes to (relative path): a record at its end may be torn.
    commitlog_tail_file: str | None = None

    @property
    def tasks(self) -> list[Task]:
        return self.commitlog_tasks + self.queue_tasks + self.index_tasks

    def planned_bytes(self, tasks: Iterable[Task]) -> int:
        return sum(t.weight for t in tasks)

    def data_bytes(self, tasks: Iterable[Task]) -> int:
        """About the bytes of data ``tasks`` decode, for the room their rows will take: a
        file's byte ranges count from the first one's start to the end of the file's
        allocated blocks (a mapped file's preallocated zero tail takes none, in the
        broker's store or in its sparse snapshot copy, yet a range covers it); index
        ranges count their entries."""
        first: dict[str, int] = {}
        entries = 0
        for task in tasks:
            if task.kind == INDEX:
                entries += task.weight
            else:
                first[task.path] = min(first.get(task.path, task.begin), task.begin)
        return entries + sum(max(0, _allocated(Path(path)) - begin)
                             for path, begin in first.items())


def _allocated(path: Path) -> int:
    """Bytes of ``path`` on its disk (at most its size)."""
    try:
        info = path.stat()
    except OSError:
        return 0
    return min(info.st_size, info.st_blocks * 512)


def _rel(store: Path, path: Path) -> str:
    return path.relative_to(store).as_posix()


def plan_load(store: str | Path, marks: Iterable[HighWaterMark], *,
              split_bytes: int = DEFAULT_SPLIT_BYTES,
              queue_split_bytes: int = DEFAULT_QUEUE_SPLIT_BYTES) -> LoadPlan:
    """Tasks for everything in ``store`` past the broker's high-water marks."""
    store = Path(store).resolve()
    by_key = {mark.key: mark for mark in marks}
    plan = LoadPlan(store)
    _plan_commitlog(plan, by_key.get((COMMITLOG, None, None, None)), split_bytes)
    file_queues = 0
    for stream in (CONSUMEQUEUE, BATCHCONSUMEQUEUE):
        root = store / stream
        if root.is_dir():
            for queue in walk_queue_tree(root).queues:
                mark = by_key.get((stream, queue.topic, queue.queue_id, None))
                _plan_queue(plan, stream, queue, mark, queue_split_bytes)
                file_queues += 1
    if not file_queues:  # with rocksdbCQDoubleWriteEnable the files are the queues loaded
        _plan_rocksdb_queues(plan)
    _plan_index(plan, by_key)
    return plan


# --------------------------------------------------------------------------- commitlog


def _plan_commitlog(plan: LoadPlan, mark: HighWaterMark | None, split_bytes: int) -> None:
    """Tasks for the commitlog past the mark: ``commitlog/``'s segments, or a DLedger
    broker's data files (named and growing like segments; their tasks decode the records
    inside the entries). Marks are commitlog offsets either way."""
    source = commitlog_source(plan.store)
    _refuse_superseded(plan, source)
    directory = source.directory
    kind = DLEDGER if source.dledger else COMMITLOG
    segments = list_segments(directory) if directory.is_dir() else []
    hwm = mark.loaded_until if mark else None
    plan.commitlog_hwm = hwm
    if not segments:
        return
    plan.commitlog_min_offset = segments[0].start
    plan.commitlog_tail_file = _rel(plan.store, _written_segment(segments, kind).path)
    start_from = hwm or 0
    if segments[0].start > start_from:
        plan.gaps.append(RetentionGap(COMMITLOG, None, None, start_from, segments[0].start))
    for seg in segments:
        if seg.start + seg.size <= start_from:
            continue
        begin = max(start_from - seg.start, 0)
        if mark is not None and not has_nonzero_after(seg.path, begin):
            continue  # only the preallocated zeros past the mark: nothing new to decode
        for lo, hi in split_ranges(seg.size - begin, split_bytes):
            if hi > lo:
                rel = _rel(plan.store, seg.path)
                plan.commitlog_tasks.append(Task(
                    f"{rel}@{begin + lo}", kind, str(seg.path), rel, begin + lo,
                    begin + hi))


def _refuse_superseded(plan: LoadPlan, source: CommitlogSource) -> None:
    """A commitlog/ a DLedger broker no longer writes: its files are quarantined whole,
    named, rather than read (reading both logs is not supported yet)."""
    if source.superseded is None:
        return
    for seg in list_segments(source.superseded):
        plan.unreadable_files.append((
            _rel(plan.store, seg.path), seg.size,
            "commitlog written before the broker switched to DLedger (below its "
            "dividedCommitlogOffset): not loaded, only the DLedger log is", OTHER_STREAM))


def _written_segment(segments: list[Segment], kind: str) -> Segment:
    """The segment the broker was writing to: the last one holding a record.

    A live broker's store ends with the next file already created, all zeros
    (AllocateMappedFileService), and a kill can leave a 0-byte one; neither holds the
    newest record. Records tile every file from position 0, so a file whose head (first
    record's length and magic, as the snapshot copier reads it) is zero has not been
    written yet. DLedger entries tile their data files the same way.
    """
    head = growth_of(FileKind.DLEDGER_DATA if kind == DLEDGER else FileKind.COMMITLOG).head
    for seg in reversed(segments):
        if seg.size >= head and has_nonzero_after(seg.path, 0, stop=head):
            return seg
    return segments[-1]


# --------------------------------------------------------------------------- queues


def _plan_queue(plan: LoadPlan, stream: str, queue: QueueDir, mark: HighWaterMark | None,
                queue_split_bytes: int) -> None:
    unit = UNIT_SIZES[stream]
    segments = [seg for seg in queue.segments if seg.size > 0]
    if not segments:
        return
    hwm = mark.loaded_until if mark else 0
    first, last = segments[0], segments[-1]
    if last.start + last.size < hwm:
        plan.skipped_queues.append(SkippedQueue(
            stream, queue.topic, queue.queue_id, _rel(plan.store, queue.path),
            f"queue files end at byte {last.start + last.size} of the queue but "
            f"{hwm} were already loaded (topic deleted and re-created?): not loaded",
            sum(seg.size for seg in segments)))
        return
    if first.start > hwm:
        plan.gaps.append(RetentionGap(stream, queue.topic, queue.queue_id, hwm // unit,
                                      first.start // unit))
    step = max(unit, queue_split_bytes // unit * unit)
    for seg in segments:
        if seg.start + seg.size <= hwm:
            continue
        begin = max(hwm - seg.start, 0)
        rel = _rel(plan.store, seg.path)
        for lo in range(begin, seg.size, step):
            plan.queue_tasks.append(Task(f"{rel}@{lo}", stream, str(seg.path), rel, lo,
                                         min(lo + step, seg.size), queue.topic,
                                         queue.queue_id))


def _plan_rocksdb_queues(plan: LoadPlan) -> None:
    """One task for a RocksDB consume queue (storeType=defaultRocksDB): the database is
    read whole each night (it holds what retention keeps) and every queue loads from its
    own mark (``DecodeContext.queue_marks``)."""
    database = plan.store / CONSUMEQUEUE
    if not is_database(database):
        return
    size = sum(f.stat().st_size for f in database.iterdir() if f.is_file())
    plan.queue_tasks.append(Task(f"{CONSUMEQUEUE}@rocksdb", ROCKSDB_CQ, str(database),
                                 CONSUMEQUEUE, 0, size))


# --------------------------------------------------------------------------- index


def _plan_index(plan: LoadPlan, by_key: dict[tuple, HighWaterMark]) -> None:
    directory = plan.store / INDEX
    if not directory.is_dir():
        return
    # listing.unsized (0-byte files a killed broker left while rolling) hold no entries
    listing = list_index_files(directory)
    for path, error in listing.rejected:
        plan.unreadable_files.append((_rel(plan.store, path), path.stat().st_size,
                                      f"index file cannot be opened: {error}", INDEX))
    for info in listing.files:
        mark = by_key.get((INDEX, None, None, info.path.name))
        next_entry = mark.loaded_until if mark else 1
        if info.header.entry_count < next_entry:
            continue
        rel = _rel(plan.store, info.path)
        plan.index_tasks.append(Task(f"{rel}@{next_entry}", INDEX, str(info.path), rel,
                                     next_entry, info.header.entry_count + 1))
