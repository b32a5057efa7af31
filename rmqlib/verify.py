"""Offline verification of a whole store: the invariants of spec §8, file by file.

Like Kafka's DumpLogSegments ``--verify``: read everything, trust nothing, report every
inconsistency as a :class:`Finding` with file, offset and reason. ``error`` findings
mean the store is damaged or was not written by a stock broker; ``warning`` findings are
states a healthy broker can legitimately leave behind (a torn tail after a hard kill,
records not yet dispatched to a consume queue, consumer offsets out of range).

Checks, in data-flow order:

1. inventory: files rmqlib does not know or does not decode;
2. commitlog: framing, length rule, body and property CRCs, segment naming and tails,
   queue-offset contiguity per (topic, queue) in commitlog order (§8.2-8.6);
3. consume queues: every unit resolves to a record with the same size, topic, queue and
   queue offset; commitlog offsets increase; every dispatchable record has its unit
   (§8.7, 8.8, 8.10);
4. index files: structural invariants, and every entry's key hash is a key of the
   record it points to (§8.11);
5. config and checkpoint: parse, and offsets within queue bounds (§8.13, 8.14).

Every file's byte account must balance; a region rmqlib could not read is an error.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmqlib import config as cfg
from rmqlib.accounting import FileAccount
from rmqlib.checkpoint import read_checkpoint
from rmqlib.commitlog import CommitLogRecord, GapKind, scan_store
from rmqlib.commitlog_layout import TransactionType
from rmqlib.consumequeue import (
    CqFileDecode,
    QueueBounds,
    decode_queue,
    queue_bounds,
    segment_issues,
    walk_queue_tree,
)
from rmqlib.errors import StoreError
from rmqlib.indexfile import IndexFile, list_index_files, record_index_keys
from rmqlib.inventory import Inventory, take_inventory
from rmqlib.javahash import index_key_hash
from rmqlib.properties import INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET, INNER_NUM

ERROR = "error"
WARNING = "warning"

DISPATCHED_TYPES = (TransactionType.NOT, TransactionType.COMMIT)


@dataclass(frozen=True)
class Finding:
    severity: str  # ERROR or WARNING
    check: str
    path: str | None
    offset: int | None
    message: str

    def as_dict(self) -> dict[str, object]:
        return {"severity": self.severity, "check": self.check, "path": self.path,
                "offset": self.offset, "message": self.message}


@dataclass(frozen=True)
class RecordFacts:
    """What later checks need to know about one commitlog record (kept small on purpose)."""

    total_size: int
    topic: str
    queue_id: int
    queue_offset: int
    dispatched: bool  # transaction type NOT or COMMIT: the build-CQ dispatcher takes it
    keys_hashes: frozenset[int]
    lmq_offsets: tuple[tuple[str, int], ...]


@dataclass
class VerifyReport:
    root: Path
    inventory: Inventory
    findings: list[Finding] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    accounts: list[FileAccount] = field(default_factory=list)

    def add(self, severity: str, check: str, path: object, offset: int | None,
            message: str) -> None:
        self.findings.append(
            Finding(severity, check, None if path is None else str(path), offset, message))

    def account(self, account: FileAccount,
                expected: frozenset[tuple[int, int]] = frozenset()) -> None:
        """Keep a file's account. A region nobody could read is an error, unless it is
        ``expected`` as (offset, length), e.g. the torn tail a hard kill leaves."""
        self.accounts.append(account)
        if not account.balanced:
            self.add(ERROR, "accounting", account.path, None,
                     f"byte accounting does not balance: {account.as_dict()}")
        for region in account.unreadable:
            severity = WARNING if (region.offset, region.length) in expected else ERROR
            self.add(severity, "unreadable", region.path, region.offset,
                     f"{region.length} unreadable bytes: {region.reason}")

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors


def verify_store(root: str | Path, *, verify_crc: bool = True) -> VerifyReport:
    """Run every check over the store at ``root``; never raises for bad bytes."""
    root = Path(root)
    report = VerifyReport(root, take_inventory(root))
    _check_inventory(report)
    records = _check_commitlog(report, verify_crc)
    bounds = _check_consume_queues(report, records)
    _check_index(report, records)
    _check_config(report, bounds)
    return report


# --------------------------------------------------------------------------- inventory


def _check_inventory(report: VerifyReport) -> None:
    for where, reason, files, size in report.inventory.not_decoded_groups():
        report.add(WARNING, "inventory", report.root / where, None,
                   f"{files} file(s), {size} bytes: {reason}")


# --------------------------------------------------------------------------- commitlog


def _check_commitlog(report: VerifyReport, verify_crc: bool) -> dict[int, RecordFacts]:
    """Scan the commitlog; return facts about every record keyed by physical offset."""
    commitlog_dir = report.root / "commitlog"
    records: dict[int, RecordFacts] = {}
    if not commitlog_dir.is_dir():
        report.add(ERROR, "commitlog", commitlog_dir, None, "no commitlog directory")
        return records
    scan = scan_store(commitlog_dir, verify_crc=verify_crc)
    next_offset: dict[tuple[str, int], tuple[int, int]] = {}
    for record in scan:
        report.counts["commitlog_records"] += 1
        _check_record_crc(report, record)
        _check_queue_offset_contiguity(report, record, next_offset)
        records[record.physical_offset] = _facts(record)
    for result in scan.segments:
        torn = frozenset((gap.offset, gap.length) for gap in result.gaps
                         if gap.kind is GapKind.TORN_TAIL)
        report.account(result.account, expected=torn)
        report.counts["commitlog_blanks"] += len(result.blanks)
    for issue in scan.issues:
        report.add(ERROR, "commitlog", issue.path, issue.offset, issue.reason)
    report.counts["commitlog_end"] = scan.logical_end or 0
    return records


def _check_record_crc(report: VerifyReport, record: CommitLogRecord) -> None:
    if record.body_crc_ok is False:
        report.add(ERROR, "body-crc", record.path, record.position,
                   f"BODYCRC {record.body_crc} does not match the body "
                   f"(physical offset {record.physical_offset})")
    if record.property_crc_ok is False:
        report.add(ERROR, "property-crc", record.path, record.position,
                   f"__CRC32# trailer does not match (physical offset {record.physical_offset})")


def _check_queue_offset_contiguity(report: VerifyReport, record: CommitLogRecord,
                                   next_offset: dict[tuple[str, int], tuple[int, int]]) -> None:
    """§8.6: dispatched records of one queue take consecutive queue offsets."""
    if record.transaction_type not in DISPATCHED_TYPES:
        return
    queue = (record.topic, record.queue_id)
    width = int(record.properties.get(INNER_NUM, "1")) if record.inner_batch else 1
    expected = next_offset.get(queue)
    if expected is not None and record.queue_offset != expected[0]:
        report.add(ERROR, "queue-offset", record.path, record.position,
                   f"{record.topic}/{record.queue_id}: queue offset {record.queue_offset} "
                   f"follows {expected[0] - expected[1]} (expected {expected[0]})")
    next_offset[queue] = (record.queue_offset + width, width)


def _facts(record: CommitLogRecord) -> RecordFacts:
    # The tag key is indexed only by 5.5.0+ brokers; accepting it always is harmless.
    keys = record_index_keys(record.topic, record.properties.get("KEYS"), record.uniq_key,
                             record.tags)
    lmq_names = record.properties.get(INNER_MULTI_DISPATCH)
    lmq_offsets = record.properties.get(INNER_MULTI_QUEUE_OFFSET)
    lmq: tuple[tuple[str, int], ...] = ()
    if lmq_names and lmq_offsets:
        pairs = zip(lmq_names.split(","), lmq_offsets.split(","), strict=False)
        lmq = tuple((name, int(offset)) for name, offset in pairs if offset.isdigit())
    return RecordFacts(record.total_size, record.topic, record.queue_id, record.queue_offset,
                       record.transaction_type in DISPATCHED_TYPES,
                       frozenset(index_key_hash(key) for key in keys), lmq)


# --------------------------------------------------------------------------- consume queues


def _check_consume_queues(report: VerifyReport,
                          records: dict[int, RecordFacts]) -> dict[tuple[str, int], QueueBounds]:
    cq_root = report.root / "consumequeue"
    bounds: dict[tuple[str, int], QueueBounds] = {}
    if not cq_root.is_dir():
        report.add(WARNING, "consumequeue", cq_root, None, "no consumequeue directory")
        return bounds
    tree = walk_queue_tree(cq_root)
    for skipped in tree.skipped:
        report.add(WARNING, "consumequeue", skipped.path, None, skipped.reason)
    commitlog_min = min(records) if records else None
    seen: set[tuple[str, int, int]] = set()
    for queue in tree.queues:
        try:
            decodes = decode_queue(queue)
        except StoreError as error:
            report.add(ERROR, "consumequeue", error.path, error.offset, error.reason)
            continue
        for issue in segment_issues(list(queue.segments), 20):
            report.add(ERROR, "consumequeue", queue.path, None, issue)
        queue_range = queue_bounds(decodes, commitlog_min)
        bounds[(queue.topic, queue.queue_id)] = queue_range
        for decode in decodes:
            report.account(decode.account)
            _check_units(report, decode, queue_range, records, seen)
    _check_dispatch_complete(report, records, bounds, seen)
    return bounds


def _check_units(report: VerifyReport, decode: CqFileDecode, queue_range: QueueBounds,
                 records: dict[int, RecordFacts], seen: set[tuple[str, int, int]]) -> None:
    """§8.7/8.8: each unit in [min, max) points at the record it claims."""
    queue_offsets = decode.queue_offset
    live = ((queue_offsets >= queue_range.min_offset)
            & (queue_offsets < queue_range.max_offset) & ~decode.is_filler)
    offsets = decode.commitlog_offset[live]
    if offsets.size > 1 and np.any(np.diff(offsets) <= 0):
        report.add(ERROR, "cq-order", decode.path, None,
                   "commitlog offsets do not strictly increase within the queue")
    for queue_offset, phys, size, position in zip(
            queue_offsets[live].tolist(), offsets.tolist(), decode.size[live].tolist(),
            decode.file_position[live].tolist(), strict=True):
        report.counts["cq_units"] += 1
        problem = _unit_problem(decode.topic, decode.queue_id, queue_offset, phys, size,
                                records)
        if problem:
            report.add(ERROR, "cq-resolve", decode.path, position,
                       f"{decode.topic}/{decode.queue_id} offset {queue_offset}: {problem}")
        else:
            seen.add((decode.topic, decode.queue_id, queue_offset))


def _unit_problem(topic: str, queue_id: int, queue_offset: int, phys: int, size: int,
                  records: dict[int, RecordFacts]) -> str | None:
    facts = records.get(phys)
    if facts is None:
        return f"no commitlog record starts at physical offset {phys}"
    if facts.total_size != size:
        return f"unit size {size} != record TOTALSIZE {facts.total_size}"
    if topic.startswith("%LMQ%"):
        if (topic, queue_offset) not in facts.lmq_offsets:
            return f"record at {phys} does not list {topic} at offset {queue_offset}"
        return None
    if (facts.topic, facts.queue_id) != (topic, queue_id):
        return f"record at {phys} belongs to {facts.topic}/{facts.queue_id}"
    if facts.queue_offset != queue_offset:
        return f"record at {phys} has queue offset {facts.queue_offset}"
    return None


def _check_dispatch_complete(report: VerifyReport, records: dict[int, RecordFacts],
                             bounds: dict[tuple[str, int], QueueBounds],
                             seen: set[tuple[str, int, int]]) -> None:
    """§8.10: every record a queue should hold is there; later ones are dispatch lag."""
    lagging: dict[tuple[str, int], int] = defaultdict(int)
    for phys, facts in records.items():
        if not facts.dispatched:
            continue
        queue = (facts.topic, facts.queue_id)
        queue_range = bounds.get(queue)
        if queue_range is None or facts.queue_offset >= queue_range.max_offset:
            lagging[queue] += 1
        elif (facts.queue_offset >= queue_range.min_offset
              and (facts.topic, facts.queue_id, facts.queue_offset) not in seen):
            report.add(ERROR, "cq-missing", None, phys,
                       f"record at physical offset {phys} ({facts.topic}/{facts.queue_id} "
                       f"offset {facts.queue_offset}) has no consume-queue unit")
    for (topic, queue_id), count in sorted(lagging.items()):
        report.add(WARNING, "cq-lag", None, None,
                   f"{topic}/{queue_id}: {count} record(s) beyond the consume queue's max "
                   "offset (not yet dispatched)")


# --------------------------------------------------------------------------- index


def _check_index(report: VerifyReport, records: dict[int, RecordFacts]) -> None:
    index_dir = report.root / "index"
    if not index_dir.is_dir():
        return
    listing = list_index_files(index_dir)
    for path, error in listing.rejected:
        report.add(ERROR, "index", path, error.offset, error.reason)
    commitlog_min = min(records) if records else 0
    for info in listing.files:
        with IndexFile.open(info.path) as index:
            report.account(index.account())
            for problem in index.validate().problems:
                report.add(ERROR, "index", info.path, problem.offset,
                           f"{problem.kind}: {problem.detail}")
            _check_index_entries(report, index, records, commitlog_min)


def _check_index_entries(report: VerifyReport, index: IndexFile,
                         records: dict[int, RecordFacts], commitlog_min: int) -> None:
    arrays = index.entry_arrays()
    for number, key_hash, phys in zip(arrays["number"].tolist(), arrays["key_hash"].tolist(),
                                      arrays["commitlog_offset"].tolist(), strict=True):
        report.counts["index_entries"] += 1
        if phys < commitlog_min:
            continue  # the record's commitlog file was deleted by retention
        facts = records.get(phys)
        if facts is None:
            report.add(ERROR, "index-resolve", index.path, number,
                       f"entry {number}: no record starts at physical offset {phys}")
        elif key_hash not in facts.keys_hashes:
            report.add(ERROR, "index-key", index.path, number,
                       f"entry {number}: key hash {key_hash} is not a key of the record at {phys}")


# --------------------------------------------------------------------------- config


def _check_config(report: VerifyReport, bounds: dict[tuple[str, int], QueueBounds]) -> None:
    config_dir = report.root / "config"
    checkpoint = report.root / "checkpoint"
    if checkpoint.exists():
        try:
            state = read_checkpoint(checkpoint)
            report.account(state.account)
            for issue in state.issues:
                report.add(WARNING, "checkpoint", checkpoint, None, issue)
        except StoreError as error:
            report.add(ERROR, "checkpoint", error.path, error.offset, error.reason)
    if not config_dir.is_dir():
        report.add(WARNING, "config", config_dir, None, "no config directory")
        return
    loaded = cfg.load_config_dir(config_dir)
    for name, error in loaded.errors.items():
        report.add(ERROR, "config", config_dir / name, error.offset, error.reason)
    for unsupported in loaded.unsupported:
        report.add(WARNING, "config", unsupported.path, None, unsupported.reason)
    for offsets in (loaded.consumer_offsets, loaded.lmq_consumer_offsets):
        if offsets is not None:
            _check_consumer_offsets(report, offsets, bounds)
    if loaded.delay_offsets is not None:
        _check_delay_offsets(report, loaded.delay_offsets, bounds)


def _check_consumer_offsets(report: VerifyReport, offsets: cfg.ConsumerOffsets,
                            bounds: dict[tuple[str, int], QueueBounds]) -> None:
    """§8.14: offsets usually lie in [min, max]; the broker corrects them on pull."""
    for row in offsets.offsets:
        report.counts["consumer_offsets"] += 1
        queue_range = bounds.get((row.topic, row.queue_id))
        if queue_range is not None and not (
                queue_range.min_offset <= row.offset <= queue_range.max_offset):
            report.add(WARNING, "consumer-offset", offsets.source.used if offsets.source
                       else None, None,
                       f"{row.topic}@{row.group} queue {row.queue_id}: offset {row.offset} "
                       f"outside [{queue_range.min_offset}, {queue_range.max_offset}]")


def _check_delay_offsets(report: VerifyReport, delay: cfg.DelayOffsets,
                         bounds: dict[tuple[str, int], QueueBounds]) -> None:
    """§8.13: the schedule service never runs ahead of its queue."""
    for level, offset in delay.offsets.items():
        queue_range = bounds.get(("SCHEDULE_TOPIC_XXXX", level - 1))
        if queue_range is not None and offset > queue_range.max_offset:
            report.add(ERROR, "delay-offset", delay.source.used if delay.source else None,
                       None, f"delay level {level}: offset {offset} beyond the schedule "
                       f"queue's max {queue_range.max_offset}")
