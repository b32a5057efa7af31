"""Read one compacted queue (its compaction log and sparse queue) and check them together.

A queue's view is what its consumers are served: the units of its sparse queue files, in
queue-offset order, each pointing at a record of the compaction log segment of the same
name. :func:`read_compacted_queue` decodes both and names every way they disagree
(a unit with no record behind it, a record no unit points at, a unit and record that
differ, a file without its partner, queue offsets that do not increase); every byte of
every file is accounted for. The broker rewrites both kinds of file when it compacts
(new files, then renames), so a copy of a running broker can pair a new log segment with
an old queue file: that, too, shows as disagreement, never as silently wrong rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmqlib.commitlog.records import CommitLogRecord, GapKind, scan_segment
from rmqlib.common.accounting import FileAccount
from rmqlib.common.fileio import read_bytes
from rmqlib.compaction import layout as L
from rmqlib.errors import StoreError
from rmqlib.queues.consumequeue import account_units


@dataclass(frozen=True)
class CompactedUnit:
    """One unit of a sparse queue: a message consumers of the queue are served."""

    queue_offset: int
    position: int          # in the queue's compaction log
    size: int              # the whole record's size
    tags_code: int
    store_timestamp: int
    queue_file: str
    file_position: int
    batch_size: int = 1    # always 1 in a sparse queue


@dataclass(frozen=True)
class CompactionIssue:
    """Something in a compacted queue's files that breaks the layout or the pairing;
    ``expected`` when a running broker leaves it (a copy of one can hold it)."""

    path: str
    offset: int | None
    reason: str
    expected: bool = False
    length: int = 0     # the bytes concerned, when known (a unit, a record, a region)


@dataclass
class CompactedQueue:
    """One queue of a compacted topic as its files hold it."""

    topic: str
    queue_id: int
    units: list[CompactedUnit] = field(default_factory=list)
    records: dict[int, CommitLogRecord] = field(default_factory=dict)  # by log position
    accounts: list[FileAccount] = field(default_factory=list)
    issues: list[CompactionIssue] = field(default_factory=list)
    # Unreadable regions a running broker leaves (a half-written record at the end of the
    # active segment), by file: (offset, length).
    torn_tails: dict[str, frozenset[tuple[int, int]]] = field(default_factory=dict)

    def record_of(self, unit: CompactedUnit) -> CommitLogRecord | None:
        return self.records.get(unit.position)


@dataclass
class CompactionScan:
    """Every compacted queue of a store, and the broker's compaction checkpoint."""

    queues: list[CompactedQueue] = field(default_factory=list)
    # position-checkpoint: per "<topic>_<queue>", the last queue offset a run compacted.
    checkpoint: dict[str, int] = field(default_factory=dict)
    issues: list[CompactionIssue] = field(default_factory=list)


def compacted_queues(root: str | Path) -> list[tuple[str, int]]:
    """(topic, queue id) of every queue with a compaction log or sparse queue directory."""
    base = Path(root) / L.COMPACTION_DIR
    found: set[tuple[str, int]] = set()
    for kind in (L.LOG_DIR, L.CQ_DIR):
        for queue_dir in sorted((base / kind).glob("*/*")):
            if queue_dir.is_dir() and queue_dir.name.lstrip("-").isdigit():
                found.add((queue_dir.parent.name, int(queue_dir.name)))
    return sorted(found)


def read_compaction(root: str | Path, *, verify_crc: bool = True) -> CompactionScan:
    """Every compacted queue of the store at ``root`` and its position checkpoint."""
    scan = CompactionScan()
    for topic, queue_id in compacted_queues(root):
        scan.queues.append(read_compacted_queue(root, topic, queue_id, verify_crc=verify_crc))
    checkpoint = Path(root) / L.COMPACTION_DIR / L.CHECKPOINT_FILE
    if checkpoint.is_file():
        scan.checkpoint, problem = _read_checkpoint(checkpoint)
        if problem:
            scan.issues.append(CompactionIssue(str(checkpoint), None, problem))
    for queue in scan.queues:
        compacted_to = scan.checkpoint.get(L.checkpoint_key(queue.topic, queue.queue_id))
        if compacted_to is not None:
            queue.issues += _duplicate_keys(queue, compacted_to)
    return scan


def _duplicate_keys(queue: CompactedQueue, compacted_to: int) -> list[CompactionIssue]:
    """A run keeps one record per KEYS value among the queue offsets it compacted (up to
    the checkpoint); the active segment after them may repeat a key. Two kept records of
    one key at or below the checkpoint mean a run that did not finish, or a copy taken
    while one ran."""
    seen: dict[str, int] = {}
    issues: list[CompactionIssue] = []
    for unit in queue.units:
        record = queue.record_of(unit)
        key = record.properties.get("KEYS") if record is not None else None
        if key is None or unit.queue_offset > compacted_to:
            continue
        if key in seen:
            issues.append(CompactionIssue(
                unit.queue_file, unit.file_position,
                f"key {key!r} kept twice in the compacted part (queue offsets {seen[key]} and "
                f"{unit.queue_offset}, compacted up to {compacted_to})", length=L.UNIT_SIZE))
        seen[key] = unit.queue_offset
    return issues


def _read_checkpoint(path: Path) -> tuple[dict[str, int], str | None]:
    """position-checkpoint's queueOffsetMap (fastjson JSON; ConfigManager keeps a .bak)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return {}, f"position checkpoint is not JSON: {error}"
    table = data.get("queueOffsetMap") if isinstance(data, dict) else None
    if not isinstance(table, dict) or not all(isinstance(v, int) for v in table.values()):
        return {}, "position checkpoint has no queueOffsetMap of integers"
    return {str(k): int(v) for k, v in table.items()}, None


def read_compacted_queue(root: str | Path, topic: str, queue_id: int, *,
                         verify_crc: bool = True) -> CompactedQueue:
    """One compacted queue: its units, the records they point at, accounts and issues."""
    base = Path(root) / L.COMPACTION_DIR
    log_dir = base / L.LOG_DIR / topic / str(queue_id)
    cq_dir = base / L.CQ_DIR / topic / str(queue_id)
    queue = CompactedQueue(topic, queue_id)
    logs, cqs = _segments(log_dir, queue), _segments(cq_dir, queue)
    for name in sorted(set(logs) ^ set(cqs)):
        alone, partner = (logs, "queue") if name in logs else (cqs, "log")
        queue.issues.append(CompactionIssue(str(alone[name]), None,
                                            f"no {partner} file of the same name"))
    for name in sorted(logs):
        _read_log_segment(logs[name], queue, verify_crc)
    for name in sorted(cqs):
        _read_queue_file(cqs[name], queue)
    _pair(queue)
    return queue


def _segments(directory: Path, queue: CompactedQueue) -> dict[str, Path]:
    """The segment files of one directory by name; anything else there is an issue (the
    transient compacting/ and replicating/ directories are skipped, as the broker's readers
    skip them)."""
    files: dict[str, Path] = {}
    if not directory.is_dir():
        return files
    for entry in sorted(directory.iterdir()):
        if entry.is_dir() and entry.name in L.TRANSIENT_DIRS:
            continue
        if entry.is_file() and L.SEGMENT_NAME.match(entry.name):
            files[entry.name] = entry
        elif entry.is_file() and entry.name.endswith(L.REPLACED_SUFFIX):
            queue.issues.append(CompactionIssue(
                str(entry), None, "a segment a compaction run replaced, not yet deleted: "
                "not read", expected=True))
        else:
            queue.issues.append(CompactionIssue(str(entry), None,
                                                "not a segment of a compacted queue"))
    return files


def _read_log_segment(path: Path, queue: CompactedQueue, verify_crc: bool) -> None:
    try:
        segment = scan_segment(path, verify_crc=verify_crc)
        for record in segment:
            queue.records[record.segment_start + record.position] = record
    except StoreError as error:
        queue.issues.append(CompactionIssue(str(path), error.offset, error.reason))
        return
    result = segment.result
    queue.accounts.append(result.account)
    for gap in result.gaps:
        if gap.kind in (GapKind.CORRUPT, GapKind.TORN_TAIL):
            torn = gap.kind is GapKind.TORN_TAIL
            queue.issues.append(CompactionIssue(str(path), gap.offset, gap.reason,
                                                expected=torn, length=gap.length))
            if torn:
                queue.torn_tails[str(path)] = frozenset({(gap.offset, gap.length)})
    for failed in result.body_crc_failures:
        queue.issues.append(CompactionIssue(str(path), failed, "BODYCRC mismatch"))


def _read_queue_file(path: Path, queue: CompactedQueue) -> None:
    units, account = decode_queue_bytes(read_bytes(path), str(path))
    queue.units += units
    queue.accounts.append(account)
    for region in account.unreadable:
        queue.issues.append(CompactionIssue(str(path), region.offset, region.reason,
                                            length=region.length))
    for unit in units:
        if unit.batch_size != 1:
            queue.issues.append(CompactionIssue(str(path), unit.file_position,
                                                f"batch size {unit.batch_size}, not 1",
                                                length=L.UNIT_SIZE))


def decode_queue_bytes(data: bytes, path: str) -> tuple[list[CompactedUnit], FileAccount]:
    """The units of one sparse queue file, and its account. Valid by the broker's rule
    (position, size and queue offset not negative, batch positive); the end unit the broker
    writes when the log segment rolls counts as filler; the all-zero units at the end as
    the unwritten tail; anything else is unreadable."""
    account = FileAccount(path, len(data))
    count = len(data) // L.UNIT_SIZE
    raw = np.frombuffer(data, dtype=L.UNIT_DTYPE, count=count)
    position = raw["commitlog_offset"].astype(np.int64)
    size, batch = raw["size"].astype(np.int64), raw["batch_size"].astype(np.int64)
    offset = raw["msg_base_offset"].astype(np.int64)
    valid = (position >= 0) & (size > 0) & (offset >= 0) & (batch > 0)
    end = (position == L.END_POSITION) & (size == 0) & (batch == 0)
    zero = ~np.frombuffer(data, np.uint8, count * L.UNIT_SIZE).reshape(count, L.UNIT_SIZE) \
        .any(axis=1)
    scan = account_units(account, len(data), L.UNIT_SIZE, valid | end, zero,
                         "invalid units: position < 0, size <= 0, offset < 0 or batch <= 0")
    ends = int(np.count_nonzero(end[:scan.data_units] & scan.in_data))
    account.decoded -= ends * L.UNIT_SIZE
    account.blank += ends * L.UNIT_SIZE
    units = [CompactedUnit(int(raw[i]["msg_base_offset"]), int(raw[i]["commitlog_offset"]),
                           int(raw[i]["size"]), int(raw[i]["tags_code"]),
                           int(raw[i]["store_timestamp"]), path, i * L.UNIT_SIZE,
                           int(raw[i]["batch_size"]))
             for i in np.flatnonzero(valid[:scan.data_units]).tolist()]
    return units, account.check()


def _pair(queue: CompactedQueue) -> None:
    """Every unit against the record it points at, every record against a unit, and the
    queue offsets in order."""
    pointed: set[int] = set()
    previous: CompactedUnit | None = None
    for unit in queue.units:
        if previous is not None and unit.queue_offset <= previous.queue_offset:
            queue.issues.append(CompactionIssue(
                unit.queue_file, unit.file_position,
                f"queue offset {unit.queue_offset} after {previous.queue_offset}",
                length=L.UNIT_SIZE))
        previous = unit
        pointed.add(unit.position)
        record = queue.record_of(unit)
        problem = _unit_mismatch(unit, record, queue) if record else \
            f"no record starts at position {unit.position} of the compaction log"
        if problem:
            queue.issues.append(CompactionIssue(unit.queue_file, unit.file_position, problem,
                                                length=L.UNIT_SIZE))
    last_unit = max(pointed, default=-1)
    for position, record in sorted(queue.records.items()):
        if position not in pointed:
            # The broker appends a record, then its unit: records after the last unit are
            # what a copy of a running broker catches in between.
            queue.issues.append(CompactionIssue(
                record.path, record.position,
                f"record of queue offset {record.queue_offset} has no unit in the queue"
                + (" (yet: it follows the last unit)" if position > last_unit else ""),
                expected=position > last_unit, length=record.total_size))


def _unit_mismatch(unit: CompactedUnit, record: CommitLogRecord,
                   queue: CompactedQueue) -> str | None:
    want = {"size": (unit.size, record.total_size),
            "queue offset": (unit.queue_offset, record.queue_offset),
            "store time": (unit.store_timestamp, record.store_timestamp),
            "topic": (queue.topic, record.topic), "queue id": (queue.queue_id, record.queue_id)}
    wrong = [f"{name} {a} (record: {b})" for name, (a, b) in want.items() if a != b]
    return f"unit and record differ: {', '.join(wrong)}" if wrong else None
