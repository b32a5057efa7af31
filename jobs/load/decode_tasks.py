"""What runs on the executors: decode one planned piece of a store into table rows.

The driver plans *tasks* (a byte range of a commitlog segment, the new part of a queue
file, the new entries of an index file) and hands them to ``mapInArrow``; each executor
opens the files itself, decodes them with ``rmqlib``'s Arrow path and yields
RecordBatches already in the target table's schema, which Spark passes straight to the
Delta writer. No row ever becomes a Python object and nothing is collected to the driver.

Besides rows, every task writes a small JSON *report* (its byte account, unreadable
regions, where its last complete record ends) into a report directory shared with the
driver, named by task id and written atomically, so a retried task simply replaces it.
The driver turns reports into quarantine rows, load statistics and high-water marks.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.lakehouse.locations import Location
from jobs.load.arrow_columns import assemble, dates, task_file_stem, timestamps
from jobs.load.trace_output import TraceCollector, TraceOutput
from jobs.snapshot.bucket import SnapshotObjects
from rmqlib.commitlog.arrow import scan_segment_arrow, unwrap_inner_batches
from rmqlib.common import races
from rmqlib.common.accounting import FileAccount
from rmqlib.common.bytesource import FileTarget
from rmqlib.common.fileio import read_range
from rmqlib.dledger.arrow import scan_dledger_arrow
from rmqlib.dledger.index import check_entries_in
from rmqlib.dledger.layout import INDEX_DIR as DLEDGER_INDEX_DIR
from rmqlib.dledger.layout import INDEX_UNIT_SIZE as DLEDGER_UNIT_SIZE
from rmqlib.errors import StoreError
from rmqlib.indexfile import INDEX_ENTRY_SIZE, IndexFile
from rmqlib.queues.batchconsumequeue import decode_bcq_range
from rmqlib.queues.consumequeue import CQ_UNIT_SIZE, EXT_MAX_ADDR, FILLER_SIZE, decode_cq_range
from rmqlib.queues.consumequeue_ext import ExtResolver
from rmqlib.rocksdb.consume_queue import read_queues
from rmqlib.transactions import OP_HALF_TOPIC

COMMITLOG = "commitlog"
DLEDGER = "dledger"  # a DLedger data file: commitlog records inside Raft entries
DLEDGER_INDEX = "dledger_index"  # quarantine kind of an index unit that disagrees
ROCKSDB_CQ = "rocksdb_cq"  # the RocksDB consume queue of a storeType=defaultRocksDB broker
DLEDGER_INDEX_REASON = "dledger index: unit of entry"
CONSUMEQUEUE = "consumequeue"
BATCHCONSUMEQUEUE = "batchconsumequeue"
INDEX = "index"

BODY_POLICIES = ("full", "hash", "none")

# The input rows of every decode job: one per planned task.
TASK_SCHEMA = pa.schema([
    pa.field("task_id", pa.string(), False),
    pa.field("kind", pa.string(), False),
    pa.field("path", pa.string(), False),
    pa.field("rel_path", pa.string(), False),
    pa.field("begin", pa.int64(), False),
    pa.field("end", pa.int64(), False),
    pa.field("topic", pa.string()),
    pa.field("queue_id", pa.int32()),
])
TASK_DDL = ("task_id STRING, kind STRING, path STRING, rel_path STRING, begin BIGINT, "
            "end BIGINT, topic STRING, queue_id INT")


@dataclass(frozen=True)
class Task:
    """One unit of decoding work: bytes [begin, end) of a file (index files: entry
    numbers [begin, end))."""

    task_id: str
    kind: str
    path: str
    rel_path: str
    begin: int
    end: int
    topic: str | None = None
    queue_id: int | None = None

    @property
    def weight(self) -> int:
        """Bytes this task reads, for balancing tasks over Spark partitions."""
        units = max(self.end - self.begin, 0)
        return units * INDEX_ENTRY_SIZE if self.kind == INDEX else units

    def as_row(self) -> tuple[object, ...]:
        return (self.task_id, self.kind, self.path, self.rel_path, self.begin, self.end,
                self.topic, self.queue_id)


@dataclass(frozen=True)
class DecodeContext:
    """Everything a task needs besides the task itself (shipped to executors by pickle)."""

    broker: str
    snapshot_id: str
    report_dir: str
    output_schema: pa.Schema
    body_policy: str = "full"
    verify_crc: bool = True
    # Queue units pointing at or past this commitlog offset are not loaded yet: the
    # broker truncates such units on recovery, so they may be rewritten.
    commitlog_end: int | None = None
    # The segment the broker appends to (relative path); see ``_torn_last_record``.
    commitlog_tail_file: str | None = None
    # RocksDB consume queue: the next queue offset to load per (topic, queue id), from the
    # high-water marks (a file queue's task carries its byte range instead).
    queue_marks: tuple[tuple[str, int, int], ...] = ()
    # A snapshot in a bucket: where its files' objects are. Read from there only where
    # ``read_objects`` says so (Spark's executors, on hosts without the driver's mirror).
    objects: SnapshotObjects | None = None
    read_objects: bool = False
    # Commitlog tasks: write the trace topics' contexts for message_traces (None: the
    # table has this snapshot's append already, or the task kind is another).
    traces: TraceOutput | None = None


#: Kinds whose decoders read byte ranges (a ByteSource): from a bucket, ranged GETs.
RANGE_READ_KINDS = frozenset((COMMITLOG, CONSUMEQUEUE, BATCHCONSUMEQUEUE))


class TaskFiles:
    """The bytes one task reads, on the host it runs on: the task's file, or, when the
    context reads a bucket snapshot's objects, the object itself by ranges (commitlog and
    queue ranges), the object cached on this host (index files, mapped whole), or this
    host's mirror of the snapshot (readers that need the file's directory: DLedger's
    index, RocksDB, consume-queue ext files)."""

    def __init__(self, task: Task, context: DecodeContext) -> None:
        self.task = task
        self.objects = context.objects if context.read_objects else None

    @cached_property
    def read(self) -> FileTarget:
        """What a range decoder reads: a path or a ByteSource."""
        if self.objects is None or self.task.kind not in RANGE_READ_KINDS:
            return self.local
        return self.objects.source(self.task.rel_path)

    @cached_property
    def local(self) -> str:
        """A local path of the file, inside a whole store directory unless an index file."""
        if self.objects is None:
            return self.task.path
        if self.task.kind == INDEX:
            return str(self.objects.local_file(self.task.rel_path))
        return str(self.objects.local_store() / self.task.rel_path)


# --------------------------------------------------------------------------- reports


def report_path(report_dir: str, task_id: str) -> Location:
    return Location(report_dir) / f"{task_file_stem(task_id)}.json"


def write_report(report_dir: str, task_id: str, report: dict[str, object]) -> None:
    """Write a task report atomically (a retried task overwrites the same file)."""
    report_path(report_dir, task_id).write_text(json.dumps(report, sort_keys=True))


def read_report(report_dir: str, task_id: str) -> dict[str, object] | None:
    try:
        return json.loads(report_path(report_dir, task_id).read_text())
    except FileNotFoundError:
        return None


def _account_report(account: FileAccount) -> dict[str, object]:
    return {
        "bytes": account.size, "decoded": account.decoded, "blank": account.blank,
        "zero_tail": account.zero_tail,
        "unreadable": [[r.offset, r.length, r.reason] for r in account.unreadable]
        + [[r.offset, 0, r.reason] for r in account.notes],  # races named at no byte cost
    }


def _base_report(task: Task, started: float) -> dict[str, object]:
    return {"task_id": task.task_id, "kind": task.kind, "rel_path": task.rel_path,
            "begin": task.begin, "end": task.end, "topic": task.topic,
            "queue_id": task.queue_id, "seconds": round(time.monotonic() - started, 3)}


def _error_report(task: Task, started: float, error: StoreError) -> dict[str, object]:
    """A file that cannot be read at all: the whole planned range is unreadable."""
    length = task.weight
    return {**_base_report(task, started), "rows": 0,
            "account": {"bytes": length, "decoded": 0, "blank": 0, "zero_tail": 0,
                        "unreadable": [[task.begin, length, f"unreadable file: {error}"]]}}


# --------------------------------------------------------------------------- the mapInArrow entry


def decode_function(context: DecodeContext
                    ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The function given to ``DataFrame.mapInArrow`` over a DataFrame of tasks."""

    def run(task_batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in task_batches:
            for row in batch.to_pylist():
                yield from run_task(Task(**row), context)

    return run


def run_task(task: Task, context: DecodeContext) -> Iterator[pa.RecordBatch]:
    """Decode one task into RecordBatches of ``context.output_schema``; write its report."""
    started = time.monotonic()
    decoder = DECODERS[task.kind]
    try:
        report = yield from decoder(task, context, TaskFiles(task, context))
    except StoreError as error:
        report = _error_report(task, started, error)
    report.update(_base_report(task, started))
    write_report(context.report_dir, task.task_id, report)


# --------------------------------------------------------------------------- commitlog


# The same batches and scan result from a commitlog segment and a DLedger data file.
RECORD_SCANS = {COMMITLOG: scan_segment_arrow, DLEDGER: scan_dledger_arrow}


def _commitlog_task(task: Task, context: DecodeContext, files: TaskFiles
                    ) -> Iterator[pa.RecordBatch]:
    scan = RECORD_SCANS[task.kind](files.read, task.begin, task.end,
                                   verify_crc=context.verify_crc)
    rows = 0
    first: int | None = None
    traces = (TraceCollector(context.traces, context.broker, context.snapshot_id,
                             task.task_id, task.rel_path)
              if context.traces is not None else None)
    held: pa.RecordBatch | None = None  # the latest batch, kept until the scan has ended
    for batch in scan:
        if batch.num_rows == 0:
            continue
        if held is not None:
            if traces is not None:
                traces.collect(held)
            out = to_messages(held, task.rel_path, context)
            rows += out.num_rows
            yield out
        held = batch
        if first is None:
            first = batch.column("physical_offset")[0].as_py()
    result = scan.result
    if task.rel_path != context.commitlog_tail_file:  # no write in progress there
        races.in_finished_file(result.account)
    account = _account_report(result.account)
    torn = held is not None and _torn_last_record(task, context, files, held,
                                                  result.segment_start, result.logical_end)
    torn_at: int | None = None  # its file position
    if torn:
        assert held is not None
        torn_at = held.column("physical_offset")[-1].as_py() - result.segment_start
        account = _quarantine_last_record(account, held, result.segment_start)
        held = held.slice(0, held.num_rows - 1)
    last: tuple[int, int, int] | None = None  # offset, size, crc of the last record kept
    if held is not None and held.num_rows:
        last = (held.column("physical_offset")[-1].as_py(),
                held.column("total_size")[-1].as_py(), held.column("body_crc")[-1].as_py())
        if traces is not None:
            traces.collect(held)
        out = to_messages(held, task.rel_path, context)
        rows += out.num_rows
        yield out
    report: dict[str, object] = {
        "rows": rows, "account": account,
        "segment_start": result.segment_start, "span_start": result.span_start,
        "span_end": result.span_end, "first_record_offset": first,
        "last_record_offset": last[0] if last else None,
        "last_record_end": last[0] + last[1] if last else None,
        "last_record_crc": last[2] if last else None,
        "logical_end": result.logical_end, "blanks": result.blanks,
        "records_after_blank": result.records_after_blank,
        "body_crc_failures": sum(p != torn_at for p in result.body_crc_failures),
        "property_crc_failures": sum(p != torn_at for p in result.property_crc_failures),
    }
    if traces is not None:
        report.update(traces.finish())
    if task.kind == DLEDGER:
        report["index_problems"] = _dledger_index_problems(task, files, scan.entries)
    return report


def _dledger_index_problems(task: Task, files: TaskFiles,
                            entries: list) -> list[list[object]]:
    """[relative path, file position, length, reason] of every index unit of this task's
    entries that disagrees with its entry (``index/`` beside ``data/``)."""
    data_rel = PurePosixPath(task.rel_path).parent
    index_dir = Path(files.local).parent.parent / DLEDGER_INDEX_DIR
    rel_index = data_rel.parent / DLEDGER_INDEX_DIR
    return [[str(rel_index / Path(p.path).name) if p.position >= 0 else str(rel_index),
             max(p.position, 0), DLEDGER_UNIT_SIZE if p.position >= 0 else 0,
             f"{DLEDGER_INDEX_REASON} {p.index}: {p.reason}"]
            for p in check_entries_in(index_dir, entries)]


TORN_RECORD_REASON = ("torn tail: the last record before the end of written data ends in "
                      "zeros or fails its CRC (a copy taken while the broker wrote it); read "
                      "again next snapshot")


def _torn_last_record(task: Task, context: DecodeContext, files: TaskFiles,
                      batch: pa.RecordBatch, segment_start: int,
                      logical_end: int | None) -> bool:
    """Is the last record of the store a partly copied one?

    A snapshot copied while the broker appends can catch the newest record half written:
    its header (and so its frame) is complete, the rest of its bytes are still the
    preallocated zeros. A complete record never ends in a zero byte (it ends with its
    properties' separator, a property value or its topic), and a torn body fails BODYCRC.
    Only the last record of the segment being written can be in that state; loading it
    would freeze a torn copy into the table and move the high-water mark past it. It is
    quarantined instead and read again from the next snapshot.
    """
    if task.rel_path != context.commitlog_tail_file:
        return False
    record_end = (batch.column("physical_offset")[-1].as_py() - segment_start
                  + batch.column("total_size")[-1].as_py())
    if record_end != logical_end:  # something follows it (or this range does not own the end)
        return False
    if read_range(files.read, record_end - 1, record_end) == b"\0":
        return True
    crc_failed = (batch.column("body_crc_ok")[-1].as_py() is False
                  or batch.column("property_crc_ok")[-1].as_py() is False)
    return context.verify_crc and crc_failed


def _quarantine_last_record(account: dict, batch: pa.RecordBatch, segment_start: int
                            ) -> dict[str, object]:
    """The account with the batch's last record moved from decoded to unreadable."""
    size = batch.column("total_size")[-1].as_py()
    position = batch.column("physical_offset")[-1].as_py() - segment_start
    unreadable = sorted([*account["unreadable"], [position, size, TORN_RECORD_REASON]])
    return {**account, "decoded": account["decoded"] - size, "unreadable": unreadable}


def sha256_hex(values: pa.Array) -> pa.Array:
    """Lowercase hex sha256 of every value of a binary array (null stays null).

    One C-level hash per body; measured as fast as hashing views of Arrow's buffer with
    vectorised hex conversion (bytes objects are cheap next to the hash itself).
    """
    sha256 = hashlib.sha256
    return pa.array([None if value is None else sha256(value).hexdigest()
                     for value in values.to_pylist()], pa.string())


#: Topics whose bodies are kept whatever the body policy: an op message's body is the list of
#: half-message queue offsets a transaction decision marks done (jobs.load.transaction_rows
#: reads it), a few bytes of numbers and nothing of a user's data.
BODIES_ALWAYS_KEPT = (OP_HALF_TOPIC,)


def _body_columns(body: pa.Array, topic: pa.Array, policy: str) -> dict[str, pa.Array]:
    """body / body_size / body_sha256 / body_policy under the load's body policy."""
    n = len(body)
    sizes = pc.binary_length(body)
    digests = pa.nulls(n, pa.string()) if policy == "none" else sha256_hex(body)
    policies = pa.repeat(pa.scalar(policy, pa.string()), n)
    if policy == "full":
        return {"body": body, "body_size": sizes, "body_sha256": digests,
                "body_policy": policies}
    kept = pc.is_in(topic, pa.array(BODIES_ALWAYS_KEPT, pa.string()))
    if pc.any(kept).as_py():
        digests = pc.if_else(kept, sha256_hex(body), digests)
        return {"body": pc.if_else(kept, body, pa.nulls(n, pa.binary())), "body_size": sizes,
                "body_sha256": digests, "body_policy": pc.if_else(kept, "full", policies)}
    return {"body": pa.nulls(n, pa.binary()), "body_size": sizes, "body_sha256": digests,
            "body_policy": policies}


def to_messages(batch: pa.RecordBatch, rel_path: str, context: DecodeContext
                ) -> pa.RecordBatch:
    """One rmqlib commitlog batch as a batch of the ``messages`` table: one row per
    message a consumer receives (inner batches unwrapped into their members)."""
    batch = unwrap_inner_batches(batch)
    n = batch.num_rows
    col = batch.column
    store_ms = col("store_timestamp")
    columns: dict[str, pa.Array] = {
        "broker": pa.repeat(pa.scalar(context.broker, pa.string()), n),
        "physical_offset": col("physical_offset"),
        "total_size": col("total_size"),
        "topic": col("topic"),
        "queue_id": col("queue_id"),
        "queue_offset": col("queue_offset"),
        "message_version": col("message_version"),
        "sysflag": col("sysflag"),
        "transaction_type": col("transaction_type"),
        "compression": col("compression"),
        "inner_batch": col("inner_batch"),
        "inner_index": col("inner_index"),
        "inner_num": col("inner_num"),
        "flag": col("flag"),
        "born_time": timestamps(col("born_timestamp")),
        "born_host": col("born_host"),
        "born_port": col("born_port"),
        "store_time": timestamps(store_ms),
        "store_date": dates(store_ms),
        "store_host": col("store_host"),
        "store_port": col("store_port"),
        "reconsume_times": col("reconsume_times"),
        "prepared_transaction_offset": col("prepared_transaction_offset"),
        "stored_body_size": col("body_length"),
        **_body_columns(col("body"), col("topic"), context.body_policy),
        "body_error": col("body_error"),
        "body_crc_ok": col("body_crc_ok"),
        "property_crc_ok": col("property_crc_ok"),
        "tags": col("tags"),
        "keys": col("keys"),
        "msg_id": col("uniq_key"),
        "offset_msg_id": col("offset_msg_id"),
        "properties": col("properties"),
        "batch_properties": col("batch_properties"),
        "source_file": pa.repeat(pa.scalar(rel_path, pa.string()), n),
        "file_position": col("file_position"),
        "first_snapshot_id": pa.repeat(pa.scalar(context.snapshot_id, pa.string()), n),
    }
    return assemble(columns, context.output_schema)


# --------------------------------------------------------------------------- queues


def _kinds(tags_code: np.ndarray, is_filler: np.ndarray) -> pa.Array:
    kind = np.where(is_filler, "filler",
                    np.where(tags_code <= -(2**31) - 1, "ext_address", "normal"))
    return pa.array(kind, pa.string())


def _cap(commitlog_offset: np.ndarray, size: np.ndarray, filler: np.ndarray,
         commitlog_end: int | None) -> int:
    """How many leading units point inside the loaded commitlog (fillers always do)."""
    if commitlog_end is None:
        return len(commitlog_offset)
    beyond = ~filler & (commitlog_offset + size.astype(np.int64) > commitlog_end)
    hits = np.flatnonzero(beyond)
    return int(hits[0]) if hits.size else len(commitlog_offset)


def _queue_task(task: Task, context: DecodeContext, files: TaskFiles
                ) -> Iterator[pa.RecordBatch]:
    batch_queue = task.kind == BATCHCONSUMEQUEUE
    decode_range = decode_bcq_range if batch_queue else decode_cq_range
    decoded = decode_range(files.read, task.begin, task.end, topic=task.topic,
                           queue_id=task.queue_id)
    if batch_queue:
        fields = decoded.fields
        offsets, sizes, tags = (fields["commitlog_offset"], fields["size"],
                                fields["tags_code"])
        queue_offset = fields["msg_base_offset"].astype(np.int64)
        filler = np.zeros(len(offsets), dtype=bool)
    else:
        offsets, sizes, tags = decoded.commitlog_offset, decoded.size, decoded.tags_code
        queue_offset = decoded.queue_offset
        filler = (offsets == 0) & (sizes == FILLER_SIZE) & (tags == 0)
    keep = _cap(offsets, sizes, filler, context.commitlog_end)
    n = keep
    position = decoded.file_position[:keep]
    ext = (_ext_columns(files, decoded.topic, decoded.queue_id, tags[:keep]) if not batch_queue
           else _ExtColumns.none(n))
    if n:
        columns: dict[str, pa.Array] = {
            "broker": pa.repeat(pa.scalar(context.broker, pa.string()), n),
            "topic": pa.repeat(pa.scalar(decoded.topic, pa.string()), n),
            "queue_id": pa.repeat(pa.scalar(decoded.queue_id, pa.int32()), n),
            "queue_offset": pa.array(queue_offset[:keep], pa.int64()),
            "queue_type": pa.repeat(pa.scalar(task.kind, pa.string()), n),
            "commitlog_offset": pa.array(offsets[:keep], pa.int64()),
            "size": pa.array(sizes[:keep], pa.int32()),
            "tags_code": pa.array(tags[:keep], pa.int64()),
            "kind": _kinds(tags[:keep], filler[:keep]),
            "batch_size": (pa.array(fields["batch_size"][:keep], pa.int32()) if batch_queue
                           else pa.nulls(n, pa.int32())),
            "store_time": timestamps(pa.array(fields["store_timestamp"][:keep], pa.int64())
                                      if batch_queue else ext.store_ms),
            "ext_tags_code": ext.tags_code,
            "ext_filter_bitmap": ext.filter_bitmap,
            "source_file": pa.repeat(pa.scalar(task.rel_path, pa.string()), n),
            "file_position": pa.array(position, pa.int64()),
            "first_snapshot_id": pa.repeat(pa.scalar(context.snapshot_id, pa.string()), n),
        }
        yield assemble(columns, context.output_schema)
    unit = 46 if batch_queue else 20
    loaded_end = int(position[-1]) + unit if n else None
    if keep < len(offsets):  # read again from the next snapshot, with their records
        races.note(decoded.account, int(decoded.file_position[keep]), races.hot_copy(
            f"{len(offsets) - keep} unit(s) from here point past the loaded commitlog's end "
            f"{context.commitlog_end}: their records were not in the copy (written after "
            "the commitlog was read); not loaded yet"))
    return {
        "rows": n, "account": _account_report(decoded.account),
        "file_start": decoded.start,
        "loaded_end": loaded_end,  # file position after the last loaded unit
        "units_beyond_commitlog": len(offsets) - keep,
        "min_queue_offset": int(queue_offset[0]) if n else None,
        "max_queue_offset": int(queue_offset[keep - 1]) if n else None,
    }


def _rocksdb_queue_task(task: Task, context: DecodeContext, files: TaskFiles
                        ) -> Iterator[pa.RecordBatch]:
    """Every queue of a RocksDB consume queue past its mark: one batch per queue.

    The units are those of a file queue (same columns; ``store_time`` from the value,
    ``source_file`` the database directory, ``file_position`` the position the unit would
    have in a file queue: queue offset x 20, which is also what the marks count)."""
    after = {(topic, queue_id): next_offset for topic, queue_id, next_offset
             in context.queue_marks}
    scan = read_queues(files.local, after)
    rows, marks = 0, []
    for queue in scan.queues:
        filler = np.zeros(len(queue), dtype=bool)
        keep = _cap(queue.commitlog_offset, queue.size, filler, context.commitlog_end)
        if not keep:
            continue
        n = keep
        columns: dict[str, pa.Array] = {
            "broker": pa.repeat(pa.scalar(context.broker, pa.string()), n),
            "topic": pa.repeat(pa.scalar(queue.topic, pa.string()), n),
            "queue_id": pa.repeat(pa.scalar(queue.queue_id, pa.int32()), n),
            "queue_offset": pa.array(queue.queue_offset[:keep], pa.int64()),
            "queue_type": pa.repeat(pa.scalar(CONSUMEQUEUE, pa.string()), n),
            "commitlog_offset": pa.array(queue.commitlog_offset[:keep], pa.int64()),
            "size": pa.array(queue.size[:keep], pa.int32()),
            "tags_code": pa.array(queue.tags_code[:keep], pa.int64()),
            "kind": _kinds(queue.tags_code[:keep], filler[:keep]),
            "batch_size": pa.nulls(n, pa.int32()),
            "store_time": timestamps(pa.array(queue.store_time_ms[:keep], pa.int64())),
            "ext_tags_code": pa.nulls(n, pa.int64()),
            "ext_filter_bitmap": pa.nulls(n, pa.binary()),
            "source_file": pa.repeat(pa.scalar(task.rel_path, pa.string()), n),
            "file_position": pa.array(queue.queue_offset[:keep] * CQ_UNIT_SIZE, pa.int64()),
            "first_snapshot_id": pa.repeat(pa.scalar(context.snapshot_id, pa.string()), n),
        }
        rows += n
        marks.append([queue.topic, queue.queue_id,
                      int(queue.queue_offset[keep - 1] + 1) * CQ_UNIT_SIZE])
        yield assemble(columns, context.output_schema)
    size = task.weight  # the database's bytes, measured when the task was planned
    # A key or value off the layout is no byte region: it is named by its ordinal among
    # the bad entries and its key's length.
    unreadable = [[number, len(bad.key), f"RocksDB {bad.family} key {bad.key[:64]!r}: "
                   f"{bad.reason}"] for number, bad in enumerate(scan.bad)]
    return {"rows": rows, "queue_marks": marks, "units_read": scan.units,
            "account": {"bytes": size, "decoded": size, "blank": 0, "zero_tail": 0,
                        "unreadable": unreadable}}


@dataclass(frozen=True)
class _ExtColumns:
    """What the ext units behind ext addresses say, one value per unit (null: none)."""

    tags_code: pa.Array
    store_ms: pa.Array
    filter_bitmap: pa.Array

    @classmethod
    def none(cls, n: int) -> _ExtColumns:
        return cls(pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64()), pa.nulls(n, pa.binary()))


def _ext_columns(files: TaskFiles, topic: str, queue_id: int,
                 tags: np.ndarray) -> _ExtColumns:
    """Resolve the units' ext addresses (§4.4) in ``consumequeue_ext/`` beside the queue
    file; an address no ext unit answers stays null (check ext_address_unresolved)."""
    rows = np.flatnonzero(tags <= EXT_MAX_ADDR)
    if not rows.size:
        return _ExtColumns.none(len(tags))
    queue = ExtResolver().queue_for(files.local, topic, queue_id)
    codes: list[int | None] = [None] * len(tags)
    times: list[int | None] = [None] * len(tags)
    bitmaps: list[bytes | None] = [None] * len(tags)
    for row in rows.tolist():
        try:
            unit = queue.resolve(int(tags[row]))
        except StoreError:
            continue
        codes[row], times[row], bitmaps[row] = (unit.tags_code, unit.msg_store_time,
                                                unit.filter_bitmap)
    return _ExtColumns(pa.array(codes, pa.int64()), pa.array(times, pa.int64()),
                       pa.array(bitmaps, pa.binary()))


# --------------------------------------------------------------------------- index


def _index_task(task: Task, context: DecodeContext, files: TaskFiles
                ) -> Iterator[pa.RecordBatch]:
    with IndexFile.open(files.local) as index:
        batch = index.to_record_batch()
        account = index.account()
        entry_count = index.entry_count
    numbers = batch.column("entry_number").to_numpy()
    mask = numbers >= task.begin
    batch = batch.filter(pa.array(mask))
    n = batch.num_rows
    if n:
        col = batch.column
        columns = {
            "broker": pa.repeat(pa.scalar(context.broker, pa.string()), n),
            "index_file": pa.repeat(pa.scalar(PurePosixPath(task.rel_path).name,
                                              pa.string()), n),
            "entry_number": col("entry_number"),
            "key_hash": col("key_hash"),
            "slot": col("slot"),
            "commitlog_offset": col("commitlog_offset"),
            "time_diff_seconds": col("time_diff"),
            "store_time": timestamps(col("store_time_ms")),
            "prev_index": col("prev_index"),
            "first_snapshot_id": pa.repeat(pa.scalar(context.snapshot_id, pa.string()), n),
        }
        yield assemble(columns, context.output_schema)
    return {"rows": n, "account": _account_report(account),
            "next_entry": entry_count + 1}


DECODERS = {
    COMMITLOG: _commitlog_task,
    DLEDGER: _commitlog_task,
    CONSUMEQUEUE: _queue_task,
    BATCHCONSUMEQUEUE: _queue_task,
    ROCKSDB_CQ: _rocksdb_queue_task,
    INDEX: _index_task,
}
