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

The commitlog is read once, on the Arrow bulk path: index entries are loaded first (as
sorted arrays) so each batch is checked against them while it is in memory, and only a
few numeric columns per record (about 30 bytes) are kept for the consume-queue checks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqlib import config as cfg
from rmqlib.checkpoint import read_checkpoint
from rmqlib.commitlog.arrow import scan_segment_arrow
from rmqlib.commitlog.properties import INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET, INNER_NUM
from rmqlib.commitlog.records import GapKind, naming_issues, tail_issues
from rmqlib.common import races
from rmqlib.common.accounting import FileAccount
from rmqlib.common.javahash import index_key_hashes, tags_code
from rmqlib.common.numbers import decimal_or_none, is_decimal
from rmqlib.common.segments import (
    UNSIZED_FILE_REASON,
    Segment,
    list_segments,
    segment_issues,
    unsized_last_file,
)
from rmqlib.compaction.layout import COMPACTION_DIR
from rmqlib.compaction.store import read_compaction
from rmqlib.controller import BAK_SUFFIX as EPOCH_BAK_SUFFIX
from rmqlib.controller import (
    EPOCH_FILE,
    IDENTITY_FILE,
    TEMP_IDENTITY_FILE,
    check_epochs,
    check_identity,
    read_broker_identity,
    read_epoch_file,
)
from rmqlib.dledger.arrow import scan_dledger_arrow
from rmqlib.dledger.entries import DLedgerEntry
from rmqlib.dledger.index import check_index, read_index_units, read_properties
from rmqlib.dledger.layout import CHECKPOINT_FILE as DLEDGER_CHECKPOINT
from rmqlib.dledger.layout import DATA_DIR as DLEDGER_DATA
from rmqlib.dledger.layout import INDEX_DIR as DLEDGER_INDEX
from rmqlib.dledger.layout import INDEX_UNIT_SIZE
from rmqlib.dledger.records import dledger_dirs
from rmqlib.errors import StoreError
from rmqlib.indexfile import (
    INDEX_TAG_TYPE,
    UNSIZED_INDEX_REASON,
    IndexFile,
    list_index_files,
)
from rmqlib.pop import KV_DIRECTORY, KV_FAMILY, decode_kv_records
from rmqlib.queues.batchconsumequeue import (
    BCQ_UNIT_SIZE,
    BcqFileDecode,
    base_offset_gaps,
    bcq_bounds,
    decode_bcq_file,
)
from rmqlib.queues.consumequeue import (
    CQ_UNIT_SIZE,
    CqFileDecode,
    QueueBounds,
    QueueTree,
    decode_queue,
    queue_bounds,
    walk_queue_tree,
)
from rmqlib.queues.consumequeue_ext import ExtResolver
from rmqlib.rocksdb.consume_queue import QueueUnits, read_queues
from rmqlib.rocksdb.database import is_database, open_readonly
from rmqlib.rocksdb.state_store import read_state_store
from rmqlib.store.inventory import Inventory, take_inventory
from rmqlib.timers.timer_store import check_timer_store, commitlog_properties, read_timer_store

ERROR = "error"
WARNING = "warning"

# Transaction types the build-CQ dispatcher takes (PREPARED and ROLLBACK are skipped).
DISPATCHED_NAMES = ["NOT", "COMMIT"]
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"  # its tagsCode is a delivery time, not a TAGS hash


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


@dataclass
class VerifyReport:
    root: Path
    inventory: Inventory
    findings: list[Finding] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    accounts: list[FileAccount] = field(default_factory=list)
    # How the broker was (abort file, lock held): decides the severity of every race of
    # a hot copy (rmqlib.common.races).
    state: races.StoreState = field(default_factory=races.StoreState)

    @property
    def hot(self) -> bool:
        return self.state.hot

    def race(self, check: str, path: object, offset: int | None, reason: str) -> None:
        """A finding about a race of a hot copy (or damage), its severity by the rule."""
        self.add(races.severity(reason, self.hot), check, path, offset, reason)

    def add(self, severity: str, check: str, path: object, offset: int | None,
            message: str) -> None:
        self.findings.append(
            Finding(severity, check, None if path is None else str(path), offset, message))

    def account(self, account: FileAccount,
                expected: frozenset[tuple[int, int]] = frozenset()) -> None:
        """Keep a file's account. A region nobody could read is an error, unless it is
        a race of a hot copy (a ``torn tail``, a ``hot copy`` state) in a hot store, or
        ``expected`` as (offset, length) there; a note costs no byte and is judged by
        the same rule (rmqlib.common.races)."""
        self.accounts.append(account)
        if not account.balanced:
            self.add(ERROR, "accounting", account.path, None,
                     f"byte accounting does not balance: {account.as_dict()}")
        for region in account.unreadable:
            race = races.is_race(region.reason) or (region.offset, region.length) in expected
            severity = WARNING if race and self.hot else ERROR
            self.add(severity, "unreadable", region.path, region.offset,
                     f"{region.length} unreadable bytes: {region.reason}")
        for note in account.notes:
            self.race("hot-copy", note.path, note.offset, note.reason)

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
    report = VerifyReport(root, take_inventory(root), state=races.store_state(root))
    _check_inventory(report)
    entries = _load_index_entries(report)
    raft_logs = dledger_dirs(root)
    facts = (_check_dledger(report, entries, raft_logs, verify_crc)
             if raft_logs and not (root / "commitlog").is_dir()
             else _check_commitlog(report, entries, verify_crc))
    _report_index_mismatches(report, entries, facts)
    queues = _check_consume_queues(report, facts)
    _check_batch_consume_queues(report, facts, queues)
    _check_dispatch_complete(report, facts, queues)
    _check_ext_files(report, queues)
    _check_timers(report)
    _check_compaction(report, facts)
    _check_controller(report, facts)
    _check_pop_kv(report)
    _check_state_store(report)
    _check_config(report, queues.bounds)
    return report


# --------------------------------------------------------------------------- inventory


def _check_inventory(report: VerifyReport) -> None:
    for where, reason, files, size in report.inventory.not_decoded_groups():
        report.add(WARNING, "inventory", report.root / where, None,
                   f"{files} file(s), {size} bytes: {reason}")


# --------------------------------------------------------------------------- index entries


@dataclass
class IndexEntries:
    """Every index entry of the store, sorted by the commitlog offset it points to."""

    physical_offset: np.ndarray
    key_hash: np.ndarray
    number: np.ndarray
    file: np.ndarray  # position in ``files``
    files: list[str]
    matched: np.ndarray  # set once the entry's record and key were confirmed

    def between(self, low: int, high: int) -> slice:
        """Entries whose offsets lie in [low, high]."""
        return slice(int(np.searchsorted(self.physical_offset, low, "left")),
                     int(np.searchsorted(self.physical_offset, high, "right")))


def _load_index_entries(report: VerifyReport) -> IndexEntries:
    """Structural checks of every index file, then all entries as sorted arrays."""
    parts: list[dict[str, np.ndarray]] = []
    files: list[str] = []
    index_dir = report.root / "index"
    listing = list_index_files(index_dir) if index_dir.is_dir() else None
    for path, error in listing.rejected if listing else []:
        report.add(ERROR, "index", path, error.offset, error.reason)
    for path in listing.unsized if listing else []:
        report.account(FileAccount(str(path), 0).check())
        report.add(WARNING, "index", path, None, UNSIZED_INDEX_REASON)
    for info in listing.files if listing else []:
        with IndexFile.open(info.path) as index:
            report.account(index.account())
            for problem in index.validate().problems:
                report.add(ERROR, "index", info.path, problem.offset,
                           f"{problem.kind}: {problem.detail}")
            arrays = index.entry_arrays()
        arrays["file"] = np.full(len(arrays["number"]), len(files), dtype=np.int32)
        files.append(str(info.path))
        parts.append(arrays)
    offsets = _concat([part["commitlog_offset"] for part in parts], np.int64)
    order = np.argsort(offsets, kind="stable")
    report.counts["index_entries"] = len(offsets)
    return IndexEntries(
        offsets[order], _concat([p["key_hash"] for p in parts], np.int32)[order],
        _concat([p["number"] for p in parts], np.int32)[order],
        _concat([p["file"] for p in parts], np.int32)[order], files,
        np.zeros(len(offsets), dtype=bool))


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)


def _warn_unsized(report: VerifyReport, check: str, segments: Sequence[Segment]) -> None:
    """A 0-byte last file a kill left while the broker rolled to a new file: a warning."""
    unsized = unsized_last_file(segments)
    if unsized is not None:
        report.add(WARNING, check, unsized.path, None, UNSIZED_FILE_REASON)


# --------------------------------------------------------------------------- commitlog


@dataclass
class RecordFacts:
    """What the later checks need of every record, as arrays in commitlog order."""

    physical_offset: np.ndarray
    total_size: np.ndarray
    topic_id: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    dispatched: np.ndarray  # transaction type NOT or COMMIT: the build-CQ dispatcher takes it
    store_timestamp: np.ndarray
    tags_code: np.ndarray   # what a consume-queue unit's tagsCode holds (§4.3), 0 if no TAGS
    width: np.ndarray       # queue offsets the record takes: INNER_NUM for an inner batch
    topics: dict[str, int]
    lmq: dict[int, tuple[tuple[str, int], ...]]  # physical offset -> (LMQ queue, offset)

    def locate(self, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Row of each offset among the records, and whether a record starts there."""
        rows = np.searchsorted(self.physical_offset, offsets)
        clipped = np.minimum(rows, max(len(self.physical_offset) - 1, 0))
        found = (rows < len(self.physical_offset)) & (
            self.physical_offset[clipped] == offsets) if len(self.physical_offset) else (
            np.zeros(len(offsets), dtype=bool))
        return clipped, found


class CommitlogChecker:
    """Streams the commitlog's Arrow batches once, checking each batch as it goes."""

    def __init__(self, report: VerifyReport, entries: IndexEntries) -> None:
        self.report = report
        self.entries = entries
        self.topics: dict[str, int] = {}
        self.next_offset: dict[int, int] = {}  # queue key -> expected next queue offset
        self.columns: dict[str, list[np.ndarray]] = defaultdict(list)
        self.lmq: dict[int, tuple[tuple[str, int], ...]] = {}

    def check_batch(self, batch: pa.RecordBatch) -> None:
        report = self.report
        report.counts["commitlog_records"] += batch.num_rows
        for name in ("body_crc_ok", "property_crc_ok"):
            bad = np.flatnonzero(pc.equal(batch[name], False).fill_null(False).to_numpy(
                zero_copy_only=False))
            for row in bad.tolist():
                report.add(ERROR, name.replace("_ok", "").replace("_", "-"),
                           batch["file"][row].as_py(), batch["file_position"][row].as_py(),
                           f"{name[:-3].replace('_', ' ')} mismatch (physical offset "
                           f"{batch['physical_offset'][row].as_py()})")
        topic_id = self._topic_ids(batch["topic"])
        dispatched = pc.is_in(batch["transaction_type"],
                              pa.array(DISPATCHED_NAMES)).to_numpy(zero_copy_only=False)
        queue_id = batch["queue_id"].to_numpy()
        queue_offset = batch["queue_offset"].to_numpy()
        self._check_contiguity(batch, topic_id, queue_id, queue_offset, dispatched)
        self._check_index_entries(batch, topic_id)
        self._collect_lmq(batch)
        for name, values in (("physical_offset", batch["physical_offset"].to_numpy()),
                             ("total_size", batch["total_size"].to_numpy()),
                             ("topic_id", topic_id), ("queue_id", queue_id),
                             ("queue_offset", queue_offset), ("dispatched", dispatched),
                             ("store_timestamp", batch["store_timestamp"].to_numpy()),
                             ("tags_code", _tags_codes(batch["tags"])),
                             ("width", _widths(batch))):
            self.columns[name].append(values)

    def facts(self) -> RecordFacts:
        columns = self.columns
        return RecordFacts(_concat(columns["physical_offset"], np.int64),
                           _concat(columns["total_size"], np.int32),
                           _concat(columns["topic_id"], np.int32),
                           _concat(columns["queue_id"], np.int32),
                           _concat(columns["queue_offset"], np.int64),
                           _concat(columns["dispatched"], bool),
                           _concat(columns["store_timestamp"], np.int64),
                           _concat(columns["tags_code"], np.int64),
                           _concat(columns["width"], np.int64), self.topics, self.lmq)

    def _topic_ids(self, topics: pa.Array) -> np.ndarray:
        encoded = topics.dictionary_encode()
        ids = np.array([self.topics.setdefault(name, len(self.topics))
                        for name in encoded.dictionary.to_pylist()], dtype=np.int32)
        return ids[encoded.indices.to_numpy()]

    def _check_contiguity(self, batch: pa.RecordBatch, topic_id: np.ndarray,
                          queue_id: np.ndarray, queue_offset: np.ndarray,
                          dispatched: np.ndarray) -> None:
        """§8.6: dispatched records of one queue take consecutive queue offsets."""
        rows = np.flatnonzero(dispatched)
        if not rows.size:
            return
        width = _widths(batch)
        key = topic_id[rows].astype(np.int64) << 32 | queue_id[rows].astype(np.int64)
        order = np.lexsort((rows, key))
        rows, key = rows[order], key[order]
        offsets, following = queue_offset[rows], queue_offset[rows] + width[rows]
        expected = np.empty(len(rows), dtype=np.int64)
        expected[1:] = following[:-1]
        first = np.ones(len(rows), dtype=bool)
        first[1:] = key[1:] != key[:-1]
        expected[first] = [self.next_offset.get(k, o) for k, o in
                           zip(key[first].tolist(), offsets[first].tolist(), strict=True)]
        for row, got, want in zip(rows[offsets != expected].tolist(),
                                  offsets[offsets != expected].tolist(),
                                  expected[offsets != expected].tolist(), strict=True):
            self.report.add(ERROR, "queue-offset", batch["file"][row].as_py(),
                            batch["file_position"][row].as_py(),
                            f"{batch['topic'][row].as_py()}/{queue_id[row]}: queue offset "
                            f"{got} where {want} was expected")
        last = np.ones(len(rows), dtype=bool)
        last[:-1] = key[1:] != key[:-1]
        self.next_offset.update(zip(key[last].tolist(), following[last].tolist(), strict=True))

    def _check_index_entries(self, batch: pa.RecordBatch, topic_id: np.ndarray) -> None:
        """§8.11: an entry pointing into this batch names a record start and one of its keys."""
        physical = batch["physical_offset"].to_numpy()
        span = self.entries.between(int(physical[0]), int(physical[-1]))
        wanted = self.entries.physical_offset[span]
        if not wanted.size:
            return
        rows = np.searchsorted(physical, wanted)
        starts = physical[rows] == wanted
        candidates = _key_candidates(batch, np.unique(rows[starts]))
        pairs = rows.astype(np.int64) << 32 | (
            self.entries.key_hash[span].astype(np.int64) & 0xFFFFFFFF)
        self.entries.matched[span] = starts & np.isin(pairs, candidates)

    def _collect_lmq(self, batch: pa.RecordBatch) -> None:
        names = pc.map_lookup(batch["properties"], INNER_MULTI_DISPATCH, "last")
        if names.null_count == len(names):
            return
        offsets = pc.map_lookup(batch["properties"], INNER_MULTI_QUEUE_OFFSET, "last")
        physical = batch["physical_offset"]
        for row in np.flatnonzero(names.is_valid().to_numpy(zero_copy_only=False)).tolist():
            pairs = zip(names[row].as_py().split(","),
                        (offsets[row].as_py() or "").split(","), strict=False)
            self.lmq[physical[row].as_py()] = tuple(
                (name, int(offset)) for name, offset in pairs if is_decimal(offset))


def _widths(batch: pa.RecordBatch) -> np.ndarray:
    """Queue offsets each record takes: 1, or INNER_NUM for an inner batch (§2.6)."""
    width = np.ones(batch.num_rows, dtype=np.int64)
    inner = batch["inner_batch"].to_numpy(zero_copy_only=False)
    if inner.any():
        counts = pc.map_lookup(batch["properties"], INNER_NUM, "last").to_pylist()
        numbers = [decimal_or_none(c) for c in np.asarray(counts, dtype=object)[inner]]
        width[inner] = [1 if n is None else n for n in numbers]
    return width


def _tags_codes(tags: pa.Array) -> np.ndarray:
    """tagsCode of each record's TAGS, hashed once per distinct tag."""
    encoded = tags.dictionary_encode()
    codes = np.array([tags_code(t) for t in encoded.dictionary.to_pylist()] + [0],
                     dtype=np.int64)
    indices = encoded.indices.fill_null(len(encoded.dictionary)).to_numpy()
    return codes[indices]


def _key_candidates(batch: pa.RecordBatch, rows: np.ndarray) -> np.ndarray:
    """(row << 32 | keyHash) for every key the broker indexes for the given rows:
    topic#UNIQ_KEY, topic#k per KEYS entry, and (5.5.0+) topic#T#tags."""
    subset = batch.select(["topic", "uniq_key", "keys", "tags"]).take(pa.array(rows))
    topic = subset["topic"]
    flat_rows = pc.list_parent_indices(subset["keys"]).to_numpy()
    strings = [
        (np.arange(len(rows)), pc.binary_join_element_wise(topic, subset["uniq_key"], "#")),
        (flat_rows, pc.binary_join_element_wise(
            topic.take(pa.array(flat_rows, pa.int64())), pc.list_flatten(subset["keys"]),
            "#")),
        (np.arange(len(rows)), pc.binary_join_element_wise(
            topic, pa.repeat(pa.scalar(INDEX_TAG_TYPE), len(rows)), subset["tags"], "#")),
    ]
    candidates = []
    for local_rows, keys in strings:
        valid = keys.is_valid().to_numpy(zero_copy_only=False)
        hashes = index_key_hashes(keys.filter(pa.array(valid)))
        candidates.append(rows[local_rows[valid]].astype(np.int64) << 32 | hashes.astype(
            np.int64) & 0xFFFFFFFF)
    return np.concatenate(candidates)


def _check_commitlog(report: VerifyReport, entries: IndexEntries,
                     verify_crc: bool) -> RecordFacts:
    """Scan every segment on the Arrow path; return the facts later checks need."""
    commitlog_dir = report.root / "commitlog"
    checker = CommitlogChecker(report, entries)
    if not commitlog_dir.is_dir():
        report.add(ERROR, "commitlog", commitlog_dir, None, "no commitlog directory")
        return checker.facts()
    segments = list_segments(commitlog_dir)
    results = []
    last_end: int | None = None
    for segment in segments:
        scan = scan_segment_arrow(segment.path, verify_crc=verify_crc)
        for batch in scan:
            checker.check_batch(batch)
            last_end = int(pc.max(pc.add(batch["physical_offset"], batch["total_size"]))
                           .as_py())
        results.append(scan.result)
        report.counts["commitlog_blanks"] += len(scan.result.blanks)
    for result in results:
        holds_end = last_end is not None and (
            result.segment_start < last_end <= result.segment_start + result.file_size)
        torn = [gap for gap in result.gaps if gap.kind is GapKind.TORN_TAIL]
        if torn and not holds_end:  # tail_issues names it too
            races.in_finished_file(result.account)
        report.account(result.account)
        for gap in torn if holds_end else []:
            report.race("commitlog-tail", result.path, gap.offset, races.torn_tail(
                f"{gap.length} bytes after the last valid record at the write position (the "
                f"logical end): {gap.reason}"))
        if result.records_after_blank:
            report.add(WARNING, "commitlog-blank", result.path, result.blanks[0],
                       f"the end-of-file BLANK's filler holds {result.records_after_blank} "
                       "stale record frame(s) (left by a recovery that truncated without "
                       "zeroing): never read by the broker, not decoded")
    for issue in naming_issues(segments) + tail_issues(results, last_end):
        report.add(ERROR, "commitlog", issue.path, issue.offset, issue.reason)
    _warn_unsized(report, "commitlog", segments)
    report.counts["commitlog_end"] = last_end or 0
    return checker.facts()


# Why a RocksDB queue ends before the commitlog in a copy of a running broker.
ROCKSDB_LAG = ("(not in RocksDB's files yet: the broker writes RocksDB queue units without "
               "the write-ahead log, so a copy taken while it runs holds them up to the last "
               "memtable flush; it rebuilds the rest from the commitlog on restart)")

# consumequeue/ holding file queues and a RocksDB database both.
DOUBLE_WRITE = ("consume queues both as files and in a RocksDB database "
                "(rocksdbCQDoubleWriteEnable): the files are checked and loaded, the RocksDB "
                "copy is not")

# Findings listed one by one before the rest is counted in one line.
MAX_LISTED = 20


def _check_dledger(report: VerifyReport, entries: IndexEntries, raft_logs: list[Path],
                   verify_crc: bool) -> RecordFacts:
    """A DLedger store's commitlog: every data file walked entry by entry (byte account,
    corrupt gaps, torn tail) with the records inside decoded in one pass as the load does
    (rmqlib.dledger.arrow) and checked like a commitlog's records; an entry whose body is
    no record is an unreadable region; then the index units against the entries, and the
    checkpoint's end index against the last entry."""
    checker = CommitlogChecker(report, entries)
    last_end: int | None = None
    for raft_log in raft_logs:
        found: list[DLedgerEntry] = []
        accounts = []
        for segment in list_segments(raft_log / DLEDGER_DATA):
            scan = scan_dledger_arrow(segment.path, verify_crc=verify_crc)
            for batch in scan:
                checker.check_batch(batch)
            accounts.append((scan.result.account, bool(scan.entries)))
            report.counts["dledger_entries"] += len(scan.entries)
            found += scan.entries
            if scan.entries:
                last_end = scan.entries[-1].end
        # only the last data file holding entries is being written: a torn tail before it
        # is damage (rmqlib.common.races)
        last_data = max((i for i, (_, has) in enumerate(accounts) if has), default=-1)
        for i, (account, _) in enumerate(accounts):
            report.account(races.in_finished_file(account) if i < last_data else account)
        _check_dledger_index(report, raft_log, found)
    report.counts["commitlog_end"] = last_end or 0
    return checker.facts()


def _check_dledger_index(report: VerifyReport, raft_log: Path,
                         entries: list[DLedgerEntry]) -> None:
    index_dir = raft_log / DLEDGER_INDEX
    if index_dir.is_dir():
        problems = check_index(entries, list(read_index_units(index_dir)))
        for problem in problems[:MAX_LISTED]:
            report.add(races.severity(problem.reason, report.hot), "dledger-index",
                       index_dir, problem.index * INDEX_UNIT_SIZE,
                       f"index {problem.index}: {problem.reason}")
        if len(problems) > MAX_LISTED:
            report.add(ERROR, "dledger-index", index_dir, None,
                       f"{len(problems) - MAX_LISTED} more index problems")
    else:
        report.add(ERROR, "dledger-index", index_dir, None, "no DLedger index directory")
    checkpoint = raft_log / DLEDGER_CHECKPOINT
    if checkpoint.is_file() and entries:
        end = read_properties(checkpoint).get("endIndex")
        if end is not None and end.lstrip("-").isdigit() and int(end) > entries[-1].index:
            report.add(ERROR, "dledger-checkpoint", checkpoint, None,
                       f"endIndex {end} is past the last entry ({entries[-1].index})")


def _report_index_mismatches(report: VerifyReport, entries: IndexEntries,
                             facts: RecordFacts) -> None:
    """Entries not confirmed while streaming: no record there, or not one of its keys."""
    commitlog_min = int(facts.physical_offset[0]) if len(facts.physical_offset) else 0
    unmatched = np.flatnonzero(~entries.matched & (entries.physical_offset >= commitlog_min))
    _, starts = facts.locate(entries.physical_offset[unmatched])
    for index, is_start in zip(unmatched.tolist(), starts.tolist(), strict=True):
        number, phys = int(entries.number[index]), int(entries.physical_offset[index])
        path = entries.files[entries.file[index]]
        if is_start:
            report.add(ERROR, "index-key", path, number,
                       f"entry {number}: key hash {int(entries.key_hash[index])} is not a key "
                       f"of the record at {phys}")
        else:
            report.add(ERROR, "index-resolve", path, number,
                       f"entry {number}: no record starts at physical offset {phys}")


# --------------------------------------------------------------------------- consume queues


@dataclass
class QueueChecks:
    """What the queue checks learn for the checks after them."""

    bounds: dict[tuple[str, int], QueueBounds] = field(default_factory=dict)
    units_end: dict[tuple[str, int], int] = field(default_factory=dict)  # 1 + last resolved
    resolved: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    ext_used: dict[tuple[str, int], set[int]] = field(default_factory=dict)  # ext addresses
    ext: ExtResolver = field(default_factory=ExtResolver)  # ext files, decoded once
    commitlog_min: int | None = None
    rocksdb: bool = False  # the queues are a RocksDB database (storeType=defaultRocksDB)

    def resolved_up_to(self, key: tuple[str, int], end: int) -> None:
        self.units_end[key] = max(self.units_end.get(key, 0), end)


def _check_consume_queues(report: VerifyReport, facts: RecordFacts) -> QueueChecks:
    queues = QueueChecks(resolved=np.zeros(len(facts.physical_offset), dtype=bool),
                         commitlog_min=int(facts.physical_offset[0])
                         if len(facts.physical_offset) else None)
    cq_root = report.root / "consumequeue"
    if not cq_root.is_dir():
        report.add(WARNING, "consumequeue", cq_root, None, "no consumequeue directory")
        return queues
    tree = walk_queue_tree(cq_root)
    if is_database(cq_root) and not tree.queues:
        queues.rocksdb = True
        _check_rocksdb_queues(report, cq_root, facts, queues)
        return queues
    if is_database(cq_root):
        report.add(WARNING, "rocksdb-cq", cq_root, None, DOUBLE_WRITE)
    for skipped in tree.skipped:
        report.add(WARNING, "consumequeue", skipped.path, None, skipped.reason)
    for queue in tree.queues:
        try:
            decodes = decode_queue(queue)
        except StoreError as error:
            report.add(ERROR, "consumequeue", error.path, error.offset, error.reason)
            continue
        for issue in segment_issues(list(queue.segments), 20):
            report.add(ERROR, "consumequeue", queue.path, None, issue)
        _warn_unsized(report, "consumequeue", queue.segments)
        queue_range = queue_bounds(decodes, queues.commitlog_min)
        key = (queue.topic, queue.queue_id)
        queues.bounds[key] = queue_range
        for decode in decodes:
            report.account(decode.account)
            end = _check_units(report, decode, queue_range, facts, queues.resolved)
            queues.resolved_up_to(key, end)
            _check_ext_units(report, decode, queue_range, facts, queues.ext,
                             queues.ext_used.setdefault(key, set()))
    return queues


def _check_rocksdb_queues(report: VerifyReport, database: Path, facts: RecordFacts,
                          queues: QueueChecks) -> None:
    """A RocksDB consume queue (storeType=defaultRocksDB): every unit points at the record
    it claims (as for a file queue), each queue's units are contiguous from its first, and
    its ``max`` bound is its last unit; keys or values off the layout are errors."""
    try:
        scan = read_queues(database)
    except StoreError as error:
        report.add(ERROR, "rocksdb-cq", database, None, error.reason)
        return
    report.counts["rocksdb_cq_units"] += scan.units
    for bad in scan.bad:
        report.add(ERROR, "rocksdb-cq", database, None,
                   f"{bad.family} key {bad.key[:64]!r}: {bad.reason}")
    for units in scan.queues:
        key = (units.topic, units.queue_id)
        first, end = int(units.queue_offset[0]), int(units.queue_offset[-1]) + 1
        queues.bounds[key] = QueueBounds(first, end, first, end * CQ_UNIT_SIZE)
        if np.any(np.diff(units.queue_offset) != 1):
            report.add(ERROR, "rocksdb-cq", database, first,
                       f"{units.topic}/{units.queue_id}: queue offsets are not contiguous")
        bound = scan.max_offsets.get(key)
        last = (int(units.commitlog_offset[-1]), end - 1)
        if bound != last:
            report.add(ERROR, "rocksdb-cq-max", database, end - 1,
                       f"{units.topic}/{units.queue_id}: max bound {bound} is not the last "
                       f"unit (commitlog offset, queue offset) {last}")
        report.counts["cq_units"] += len(units)
        rows, found = facts.locate(units.commitlog_offset)
        problems = _unit_problems(units, rows, found, units.commitlog_offset, units.size,
                                  units.queue_offset, facts)
        for queue_offset, problem in zip(units.queue_offset.tolist(), problems, strict=True):
            if problem:
                report.add(ERROR, "cq-resolve", database, queue_offset,
                           f"{units.topic}/{units.queue_id} offset {queue_offset}: {problem}")
        ok = np.array([problem is None for problem in problems], dtype=bool) & found
        queues.resolved[rows[ok]] = True
        queues.resolved_up_to(key, int(units.queue_offset[ok].max()) + 1 if ok.any() else 0)


def _check_units(report: VerifyReport, decode: CqFileDecode, queue_range: QueueBounds,
                 facts: RecordFacts, resolved: np.ndarray) -> int:
    """§8.7/8.8: each unit from the queue's min offset on (also units past a hole, which
    broker recovery would cut) points at the record it claims. Returns 1 + the highest
    queue offset whose unit resolved (0 if none)."""
    queue_offsets = decode.queue_offset
    live = (queue_offsets >= queue_range.min_offset) & ~decode.is_filler
    offsets, sizes = decode.commitlog_offset[live], decode.size[live]
    queue_offsets, positions = queue_offsets[live], decode.file_position[live]
    report.counts["cq_units"] += len(offsets)
    if offsets.size > 1 and np.any(np.diff(offsets) <= 0):
        report.add(ERROR, "cq-order", decode.path, None,
                   "commitlog offsets do not strictly increase within the queue")
    rows, found = facts.locate(offsets)
    if decode.topic.startswith("%LMQ%"):
        problems = [_lmq_problem(decode.topic, int(q), int(o), found_one, facts)
                    for q, o, found_one in zip(queue_offsets, offsets, found, strict=True)]
    else:
        problems = _unit_problems(decode, rows, found, offsets, sizes, queue_offsets, facts)
    commitlog_end = report.counts["commitlog_end"]
    for position, queue_offset, problem, offset, size in zip(
            positions.tolist(), queue_offsets.tolist(), problems, offsets.tolist(),
            sizes.tolist(), strict=True):
        if problem and offset + size > commitlog_end >= 0:
            report.race("cq-ahead", decode.path, position, races.hot_copy(
                f"{decode.topic}/{decode.queue_id} offset {queue_offset}: the unit points "
                f"past the copied commitlog's end {commitlog_end} (commitlog offset {offset}, "
                f"size {size}): its record was written after the commitlog was read"))
        elif problem:
            report.add(ERROR, "cq-resolve", decode.path, position,
                       f"{decode.topic}/{decode.queue_id} offset {queue_offset}: {problem}")
    ok = np.array([problem is None for problem in problems], dtype=bool) & found
    resolved[rows[ok]] = True
    return int(queue_offsets[ok].max()) + 1 if ok.any() else 0


def _check_ext_units(report: VerifyReport, decode: CqFileDecode, queue_range: QueueBounds,
                     facts: RecordFacts, ext: ExtResolver, used: set[int]) -> None:
    """§4.4: a unit whose tagsCode is an ext address names an ext unit of its queue, and
    that unit holds the record's store time and tagsCode (the hash of TAGS; delivery
    times on the schedule topic are not re-derived)."""
    live = (decode.queue_offset >= queue_range.min_offset) & decode.is_ext_addr
    if not live.any():
        return
    queue = ext.queue_for(decode.path, decode.topic, decode.queue_id)
    rows, found = facts.locate(decode.commitlog_offset[live])
    for address, row, here, position in zip(decode.tags_code[live].tolist(), rows.tolist(),
                                            found.tolist(), decode.file_position[live].tolist(),
                                            strict=True):
        report.counts["cq_ext_units"] += 1
        where = f"{decode.topic}/{decode.queue_id} unit at {position}"
        try:
            unit = queue.resolve(address)
        except StoreError as error:
            report.add(ERROR, "cq-ext", decode.path, position, f"{where}: {error}")
            continue
        used.add(address)
        if not here:
            continue  # cq-resolve already reported the missing record
        if unit.msg_store_time != facts.store_timestamp[row]:
            report.add(ERROR, "cq-ext", decode.path, position,
                       f"{where}: ext store time {unit.msg_store_time} != record store time "
                       f"{facts.store_timestamp[row]}")
        if decode.topic != SCHEDULE_TOPIC and unit.tags_code != facts.tags_code[row]:
            report.add(ERROR, "cq-ext", decode.path, position,
                       f"{where}: ext tagsCode {unit.tags_code} != the record's TAGS hash "
                       f"{facts.tags_code[row]}")


def _optional_queue_tree(report: VerifyReport, name: str, check: str) -> QueueTree | None:
    """The queue tree under ``<store>/<name>`` (None when the store has none), its stray
    entries reported as warnings."""
    root = report.root / name
    if not root.is_dir():
        return None
    tree = walk_queue_tree(root)
    for skipped in tree.skipped:
        report.add(WARNING, check, skipped.path, None, skipped.reason)
    return tree


def _check_ext_files(report: VerifyReport, queues: QueueChecks) -> None:
    """Every ext file's bytes are accounted for; ext units no consume-queue unit points
    at are counted per queue (a warning: retention removes CQ files before ext files)."""
    tree = _optional_queue_tree(report, "consumequeue_ext", "consumequeue-ext")
    if tree is None:
        return
    for queue in tree.queues:
        try:
            ext_queue = queues.ext.queue_at(queue.path, queue.topic, queue.queue_id)
        except StoreError as error:
            report.add(ERROR, "consumequeue-ext", error.path, error.offset, error.reason)
            continue
        used = queues.ext_used.get((queue.topic, queue.queue_id), set())
        orphans = 0
        for decode in ext_queue.decodes:
            report.account(decode.account)
            report.counts["ext_units"] += len(decode.units)
            orphans += sum(unit.address not in used for unit in decode.units)
        if orphans:
            report.add(WARNING, "ext-orphan", queue.path, None,
                       f"{queue.topic}/{queue.queue_id}: {orphans} ext unit(s) no "
                       "consume-queue unit points at")


def _check_batch_consume_queues(report: VerifyReport, facts: RecordFacts,
                                queues: QueueChecks) -> None:
    """§4.5/§8.12 for ``batchconsumequeue/``: each unit names the record it claims (size,
    topic, queue, base offset = QUEUEOFFSET, batch size = INNER_NUM or 1, store time)
    and bases are contiguous."""
    tree = _optional_queue_tree(report, "batchconsumequeue", "batchconsumequeue")
    if tree is None:
        return
    for queue in tree.queues:
        key = (queue.topic, queue.queue_id)
        try:
            decodes = [decode_bcq_file(seg.path, topic=queue.topic, queue_id=queue.queue_id)
                       for seg in queue.segments]
        except StoreError as error:
            report.add(ERROR, "batchconsumequeue", error.path, error.offset, error.reason)
            continue
        for issue in segment_issues(list(queue.segments), BCQ_UNIT_SIZE):
            report.add(ERROR, "batchconsumequeue", queue.path, None, issue)
        _warn_unsized(report, "batchconsumequeue", queue.segments)
        for decode in decodes:
            report.account(decode.account)
        for index, want, got in base_offset_gaps(decodes):
            report.add(ERROR, "bcq-base", queue.path, index * BCQ_UNIT_SIZE,
                       f"{queue.topic}/{queue.queue_id} unit {index}: base offset {got} "
                       f"where {want} was expected")
        span = bcq_bounds(decodes)
        queues.bounds[key] = QueueBounds(span.min_offset, span.max_offset, span.min_offset,
                                         0)
        for decode in decodes:
            queues.resolved_up_to(key, _check_batch_units(report, decode, facts, queues))


def _check_batch_units(report: VerifyReport, decode: BcqFileDecode, facts: RecordFacts,
                       queues: QueueChecks) -> int:
    """Compare each batch unit with its record, column-wise; 1 + the last queue offset
    resolved."""
    live = decode.fields["commitlog_offset"] >= (queues.commitlog_min or 0)
    unit = {name: values[live].astype(np.int64) for name, values in decode.fields.items()}
    positions = decode.file_position[live]
    report.counts["bcq_units"] += int(live.sum())
    rows, found = facts.locate(unit["commitlog_offset"])
    same_queue = ((facts.topic_id[rows] == facts.topics.get(decode.topic, -1))
                  & (facts.queue_id[rows] == decode.queue_id))
    expected = {"size": facts.total_size[rows], "msg_base_offset": facts.queue_offset[rows],
                "batch_size": facts.width[rows],
                "store_timestamp": facts.store_timestamp[rows]}
    ok = found & same_queue
    for name, want in expected.items():
        ok &= unit[name] == want
    for i in np.flatnonzero(~ok).tolist():
        report.add(ERROR, "bcq-resolve", decode.path, int(positions[i]),
                   f"{decode.topic}/{decode.queue_id} base {unit['msg_base_offset'][i]}: "
                   + _batch_unit_problem(unit, expected, i, bool(found[i]),
                                         bool(same_queue[i])))
    queues.resolved[rows[ok]] = True
    ends = unit["msg_base_offset"][ok] + unit["batch_size"][ok]
    return int(ends.max()) if ends.size else 0


def _batch_unit_problem(unit: dict[str, np.ndarray], expected: dict[str, np.ndarray], i: int,
                        found: bool, same_queue: bool) -> str:
    if not found:
        return f"no commitlog record starts at physical offset {unit['commitlog_offset'][i]}"
    if not same_queue:
        return f"record at {unit['commitlog_offset'][i]} belongs to another queue"
    name = next(n for n, want in expected.items() if unit[n][i] != want[i])
    return f"unit {name} {unit[name][i]} != record's {int(expected[name][i])}"


def _unit_problems(decode: CqFileDecode | QueueUnits, rows: np.ndarray,
                   found: np.ndarray, offsets: np.ndarray, sizes: np.ndarray,
                   queue_offsets: np.ndarray, facts: RecordFacts) -> list[str | None]:
    """Why each unit does not resolve (None when it does), compared column-wise."""
    topic_id = facts.topics.get(decode.topic, -1)
    size_ok = facts.total_size[rows] == sizes
    queue_ok = (facts.topic_id[rows] == topic_id) & (facts.queue_id[rows] == decode.queue_id)
    offset_ok = facts.queue_offset[rows] == queue_offsets
    if np.all(found & size_ok & queue_ok & offset_ok):
        return [None] * len(offsets)
    names = {number: name for name, number in facts.topics.items()}
    problems: list[str | None] = []
    for i, (phys, row) in enumerate(zip(offsets.tolist(), rows.tolist(), strict=True)):
        if not found[i]:
            problems.append(f"no commitlog record starts at physical offset {phys}")
        elif not size_ok[i]:
            problems.append(f"unit size {sizes[i]} != record TOTALSIZE {facts.total_size[row]}")
        elif not queue_ok[i]:
            problems.append(f"record at {phys} belongs to {names[facts.topic_id[row]]}/"
                            f"{facts.queue_id[row]}")
        elif not offset_ok[i]:
            problems.append(f"record at {phys} has queue offset {facts.queue_offset[row]}")
        else:
            problems.append(None)
    return problems


def _lmq_problem(topic: str, queue_offset: int, phys: int, found: bool,
                 facts: RecordFacts) -> str | None:
    """§8.7 for LMQ queues: the record lists this queue at this offset."""
    if not found:
        return f"no commitlog record starts at physical offset {phys}"
    if (topic, queue_offset) not in facts.lmq.get(phys, ()):
        return f"record at {phys} does not list {topic} at offset {queue_offset}"
    return None


def _check_dispatch_complete(report: VerifyReport, facts: RecordFacts,
                             queues: QueueChecks) -> None:
    """§8.10: every record a queue should hold is there. Records after the queue's last
    unit are dispatch lag (a warning); a record below it without its unit is an error."""
    bounds, units_end = queues.bounds, queues.units_end
    pending = np.flatnonzero(facts.dispatched & ~queues.resolved)
    names = {number: name for name, number in facts.topics.items()}
    key = facts.topic_id[pending].astype(np.int64) << 32 | facts.queue_id[pending]
    for queue_key in np.unique(key).tolist():
        rows = pending[key == queue_key]
        topic, queue_id = names[queue_key >> 32], queue_key & 0xFFFFFFFF
        queue_range = bounds.get((topic, queue_id))
        offsets = facts.queue_offset[rows]
        end = max(queue_range.max_offset, units_end.get((topic, queue_id), 0)) if (
            queue_range) else -1
        lagging = offsets >= end
        if lagging.any():
            report.add(WARNING, "cq-lag", None, None,
                       f"{topic}/{queue_id}: {int(lagging.sum())} record(s) beyond the consume "
                       "queue's max offset " + (ROCKSDB_LAG if queues.rocksdb
                                                else "(not yet dispatched)"))
        if queue_range is None:
            continue
        missing = rows[~lagging & (offsets >= queue_range.min_offset)]
        for row in missing.tolist():
            report.add(ERROR, "cq-missing", None, int(facts.physical_offset[row]),
                       f"record at physical offset {int(facts.physical_offset[row])} ({topic}/"
                       f"{queue_id} offset {int(facts.queue_offset[row])}) has no "
                       "consume-queue unit")


# --------------------------------------------------------------------------- timers


def _check_timers(report: VerifyReport) -> None:
    """§6.4: timer log, wheel and timercheck account for their bytes, each timer log unit
    names its ``rmq_sys_wheel_timer`` record (size, TIMER_OUT_MS, topic hash) and the
    wheel's slots chain the units of their tick (rmqlib.timers.timer_store)."""
    if not ((report.root / "timerlog").is_dir() or (report.root / "timerwheel").is_file()):
        return
    timers = read_timer_store(report.root)
    for account in timers.accounts:
        report.account(account)
    properties_of = commitlog_properties(report.root / "commitlog")
    for finding in check_timer_store(timers, properties_of=properties_of):
        report.add(finding.severity, finding.check, finding.path, finding.offset,
                   finding.message)
    pending = timers.pending()
    report.counts["timers_pending"] += len(pending.pending) if pending is not None else 0


# --------------------------------------------------------------------------- config


def _check_compaction(report: VerifyReport, facts: RecordFacts) -> None:
    """Compacted topics: each queue's units against its compaction log (rmqlib.compaction),
    and every kept record against its original in the commitlog (same topic, queue, queue
    offset, size, store time, tags); an original retention already deleted is counted."""
    if not (report.root / COMPACTION_DIR).is_dir():
        return
    scan = read_compaction(report.root)
    for issue in scan.issues:
        report.add(ERROR, "compaction", issue.path, issue.offset, issue.reason)
    for queue in scan.queues:
        for account in queue.accounts:
            report.account(account, queue.torn_tails.get(account.path, frozenset()))
        for issue in queue.issues:
            report.add(WARNING if issue.expected else ERROR, "compaction", issue.path,
                       issue.offset, issue.reason)
        rows = _original_rows(facts, queue.topic, queue.queue_id)
        for unit in queue.units:
            report.counts["compacted_units"] += 1
            row = rows.get(unit.queue_offset)
            if row is None:
                if rows and unit.queue_offset > min(rows):  # retention deletes from the start
                    report.add(ERROR, "compaction", unit.queue_file, unit.file_position,
                               f"kept record of queue offset {unit.queue_offset} has no "
                               "original in the commitlog")
                else:
                    report.counts["compacted_originals_deleted"] += 1
                continue
            original = (int(facts.total_size[row]), int(facts.store_timestamp[row]),
                        int(facts.tags_code[row]))
            if original != (unit.size, unit.store_timestamp, unit.tags_code):
                report.add(ERROR, "compaction", unit.queue_file, unit.file_position,
                           f"kept record of queue offset {unit.queue_offset} differs from its "
                           f"original at commitlog offset {int(facts.physical_offset[row])}: "
                           f"size, store time, tags code "
                           f"{(unit.size, unit.store_timestamp, unit.tags_code)} != {original}")


def _check_controller(report: VerifyReport, facts: RecordFacts) -> None:
    """Controller mode: the epoch history (rmqlib.controller) against the commitlog's
    first offset and end and topics.json's stateVersion, and the broker's identity."""
    root = report.root
    if (root / EPOCH_FILE).exists() or (root / (EPOCH_FILE + EPOCH_BAK_SUFFIX)).exists():
        try:
            epochs = read_epoch_file(root / EPOCH_FILE)
        except StoreError as error:
            report.add(ERROR, "controller", error.path, error.offset, error.reason)
        else:
            for account in epochs.accounts:
                report.account(account)
            report.counts["epochs"] = len(epochs.entries)
            first, end = _commitlog_span(facts)
            topics = cfg.load_topics(root / "config" / cfg.TOPICS_FILE, missing_ok=True) \
                if (root / "config").is_dir() else None
            state = topics.data_version.state_version if topics and topics.data_version \
                else None
            _report_controller(report, epochs.used_path or str(root / EPOCH_FILE),
                               check_epochs(epochs, first, end, state_version=state))
    for name in (IDENTITY_FILE, TEMP_IDENTITY_FILE):
        if (root / name).is_file():
            try:
                identity = read_broker_identity(root / name)
            except StoreError as error:
                report.add(ERROR, "controller", error.path, error.offset, error.reason)
                continue
            report.account(identity.account)
            _report_controller(report, root / name, check_identity(identity))


def _check_pop_kv(report: VerifyReport) -> None:
    """KV pop's kvStore/ (read on a clone): every popState record is a popped message its
    key names; the messages in flight are counted."""
    database = report.root / KV_DIRECTORY
    if not is_database(database):
        return
    try:
        with open_readonly(database) as db:
            flying, bad = decode_kv_records(db.items(KV_FAMILY))
    except StoreError as error:
        report.add(ERROR, "pop", error.path, error.offset, error.reason)
        return
    report.counts["pop_in_flight"] += len(flying)
    for key, reason in bad:
        report.add(ERROR, "pop", database, None, f"{KV_FAMILY} record {key[:40].hex()}: {reason}")


def _check_state_store(report: VerifyReport) -> None:
    """5.5.x rocksdbstore/ (read on a clone): every entry of its trans and timer families
    follows the layout; undecided transactions and timeline entries are counted."""
    try:
        state = read_state_store(report.root)
    except StoreError as error:
        report.add(ERROR, "rocksdbstore", error.path, error.offset, error.reason)
        return
    if state is None:
        return
    report.counts["undecided_transactions"] += len(state.undecided)
    report.counts["timeline_pending"] += len(state.pending_timers())
    for bad in state.bad:
        report.add(ERROR, "rocksdbstore", state.path, None,
                   f"{bad.family} entry {bad.key[:40].hex()}: {bad.reason}")


def _report_controller(report: VerifyReport, path: object, findings: list) -> None:
    """rmqlib.controller's findings: errors and warnings as such, the rest counted."""
    for finding in findings:
        if finding.severity in (ERROR, WARNING):
            report.add(finding.severity, "controller", path, None,
                       f"{finding.code}: {finding.message}")
        else:
            report.counts[f"controller_{finding.code}"] += 1


def _commitlog_span(facts: RecordFacts) -> tuple[int | None, int | None]:
    """The first record's offset and the end of the last one (None for no records)."""
    if not len(facts.physical_offset):
        return None, None
    return (int(facts.physical_offset[0]),
            int(facts.physical_offset[-1]) + int(facts.total_size[-1]))


def _original_rows(facts: RecordFacts, topic: str, queue_id: int) -> dict[int, int]:
    """Row of each commitlog record of one queue, by queue offset."""
    topic_id = facts.topics.get(topic)
    if topic_id is None:
        return {}
    rows = np.flatnonzero((facts.topic_id == topic_id) & (facts.queue_id == queue_id))
    return dict(zip(facts.queue_offset[rows].tolist(), rows.tolist(), strict=True))


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
    for name, reason in loaded.mid_rewrite:
        report.race("config", config_dir / name, None, reason)
    for name, error in loaded.errors.items():
        report.add(ERROR, "config", config_dir / name, error.offset, error.reason)
    for unsupported in loaded.unsupported:
        report.add(WARNING, "config", unsupported.path, None, unsupported.reason)
    for name, notes in loaded.left_out.items():
        for note in notes:
            report.add(ERROR, "config", config_dir / name, None, note)
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
