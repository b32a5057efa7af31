"""Load one store snapshot of one broker into the Delta tables.

Order of work (each step idempotent, so a load killed anywhere is finished by re-running
it with the same snapshot id):

1. register the snapshot (``snapshots``, status ``loading``) and give it a sequence
   number; that number is the Delta ``txnVersion`` of every fact append below;
2. settle a store that no longer holds what was loaded (``jobs.load.rewrites``: record
   the rewrite and the superseded rows, move the marks back), then plan decode tasks
   past the broker's high-water marks (``jobs.load.plan``);
3. decode and append ``messages``, then ``queue_entries`` (units past the loaded
   commitlog wait for the next load), then ``index_entries``: on Spark's executors, or in
   this process for a small plan (:mod:`jobs.load.fact_writers`); meanwhile, in
   background threads, append the snapshot's state rows (topics, groups, offsets, delay
   offsets), which need no decoding;
4. append quarantine rows and retention gaps, derived from the task reports;
5. advance the high-water marks (``load_state``) and mark the snapshot ``loaded``;
6. append one ``load_runs`` row per table (the audit log: it grows with every attempt).

A snapshot already ``loaded`` is skipped at once. A newer snapshot is refused while an
older one of the same broker is still ``loading`` (its facts may be half written), and a
load is refused while another load of the same broker runs (:mod:`jobs.load.broker_lock`).
Loads of different brokers run side by side: every write below is a blind append or
replaces rows of the load's own ``broker`` partition, which Delta never sees as a conflict.

Only the decoded facts (step 3) may be Spark jobs; every other row is computed on the
driver and committed there with delta-rs (:mod:`jobs.lakehouse.driver_rows`): a Spark
write of a few rows costs a job and a log replay, about a second each on two cores. Tables
are created with delta-rs too (:mod:`jobs.lakehouse.table_ddl`), so a load whose plan is
small starts no JVM at all, first night included; Spark is started only to decode a plan
beyond ``local_up_to_mib``.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path

import pyarrow as pa
from deltalake.writer import WriterProperties
from pyspark.sql import SparkSession

from jobs.lakehouse import tables as T
from jobs.lakehouse.disk_space import BOOKKEEPING_ROOM, disk_of, ensure_room
from jobs.lakehouse.driver_rows import append_rows_once, committed
from jobs.lakehouse.engine_choice import (
    AUTO,
    ENGINES,
    LOCAL_LOAD_UP_TO_MIB,
)
from jobs.lakehouse.locations import (
    Location,
    UnsupportedLocationError,
    local_directory,
    shared_table_handles,
)
from jobs.lakehouse.spark_session import SparkOnDemand
from jobs.lakehouse.tables import Registry
from jobs.load import rewrites, state_rows
from jobs.load.broker_lock import BrokerBusyError, broker_load_lock
from jobs.load.decode_tasks import (
    BATCHCONSUMEQUEUE,
    BODY_POLICIES,
    COMMITLOG,
    CONSUMEQUEUE,
    DLEDGER,
    DLEDGER_INDEX,
    INDEX,
    ROCKSDB_CQ,
    DecodeContext,
    Task,
    read_report,
)
from jobs.load.fact_writers import FactWriter, fact_writer
from jobs.load.lookup_rows import write_lookup_rows
from jobs.load.plan import (
    DEFAULT_QUEUE_SPLIT_BYTES,
    DEFAULT_SPLIT_BYTES,
    HighWaterMark,
    LoadPlan,
    plan_load,
)
from jobs.load.trace_output import TRACE_STREAM, TraceOutput, read_trace_rows
from jobs.load.transaction_rows import transaction_rows
from jobs.snapshot.bucket import SnapshotObjects
from rmqlib.config import load_config_dir
from rmqlib.errors import StoreError
from rmqlib.queues.consumequeue import CQ_UNIT_SIZE
from rmqlib.store.inventory import take_inventory
from rmqlib.store.replica import write_offset

LOADING, LOADED = "loading", "loaded"
# The quarantine stream of a task kind that is another form of a stream.
QUARANTINE_STREAMS = {DLEDGER: COMMITLOG, ROCKSDB_CQ: CONSUMEQUEUE}
Progress = Callable[[str], None]


class LoadRefusedError(RuntimeError):
    """The load cannot proceed (bad arguments, an unfinished earlier snapshot, ...)."""


@dataclass(frozen=True)
class LoadOptions:
    split_bytes: int = DEFAULT_SPLIT_BYTES
    queue_split_bytes: int = DEFAULT_QUEUE_SPLIT_BYTES
    body_policy: str = "full"
    verify_crc: bool = True
    taken_at: datetime | None = None
    # Where the facts are decoded: auto (in this process up to local_up_to_mib of plan,
    # else Spark), local or spark (jobs.load.fact_writers).
    engine: str = AUTO
    local_up_to_mib: int = LOCAL_LOAD_UP_TO_MIB
    # A slave's store (config/pipeline.yaml role: slave): its records are its master's
    # records, loaded from the master; only its state and commitlog bounds are loaded.
    replica: bool = False
    # Topics holding trace messages besides RMQ_SYS_TRACE_TOPIC and rmq_sys_TRACE_DATA_*
    # (a client's customizedTraceTopic, a broker's msgTraceTopicName): message_traces.
    trace_topics: tuple[str, ...] = ()
    # Derive the new messages' message_lookup rows at the end of the load (the CLI). The
    # DAG derives them in a task of their own beside the check (jobs.pipeline.
    # lookup_broker): DuckDB on the task's host needs no Spark application or pool slot.
    lookup: bool = True


@dataclass
class TableResult:
    """What one table got from this load (one ``load_runs`` row)."""

    table: str
    rows: int = 0
    bytes_read: int = 0
    tasks: int = 0
    seconds: float = 0.0
    outcome: str = "loaded"
    detail: str | None = None


@dataclass
class LoadSummary:
    broker: str
    snapshot_id: str
    snapshot_seq: int
    run_id: str
    skipped: bool = False
    results: dict[str, TableResult] = field(default_factory=dict)
    quarantined_bytes: int = 0
    retention_gap_bytes: int = 0
    seconds: float = 0.0

    @property
    def bytes_read(self) -> int:
        return sum(r.bytes_read for r in self.results.values())


def rmqlib_version() -> str:
    try:
        return package_version("rmq-lakehouse")
    except PackageNotFoundError:  # metadata missing in an uninstalled checkout
        return "unknown"


class SnapshotLoad:
    """One run of :func:`load_snapshot`; holds what the steps share."""

    def __init__(self, spark: SparkOnDemand, registry: Registry, broker: str, snapshot_id: str,
                 store: Path, options: LoadOptions, progress: Progress) -> None:
        self.spark = spark
        self.facts: FactWriter | None = None  # chosen once the plan's size is known
        self.registry = registry
        self.broker = broker
        self.snapshot_id = snapshot_id
        self.store = store
        self.options = options
        self.progress = progress
        self.run_id = uuid.uuid4().hex
        self.started_at = datetime.now(UTC)
        self.clock = time.monotonic()
        self.inventory = take_inventory(store)
        # A snapshot in a bucket, read here from this host's mirror: Spark's executors
        # read its objects instead, and the tables name it by its URI.
        self.objects = SnapshotObjects.beside(store)
        self.seq = 0
        self.summary = LoadSummary(broker, snapshot_id, 0, self.run_id)
        self.reports: dict[str, list[dict]] = {}

    # ---- helpers

    def app_id(self, table: str) -> str:
        return f"rmq-load/{self.broker}/{table}"

    @property
    def reports_root(self) -> Location:
        """This load's task reports (removed once the load is done)."""
        return Location(self.registry.warehouse) / "_rmq_task_reports" / self.broker / \
            str(self.seq)

    def report_dir(self, kind: str) -> str:
        return str(self.reports_root / kind)

    def context(self, table: str, kind: str, commitlog_end: int | None = None,
                commitlog_tail_file: str | None = None,
                marks: list[HighWaterMark] | None = None) -> DecodeContext:
        queue_marks = tuple((m.topic, m.queue_id, m.loaded_until // CQ_UNIT_SIZE)
                            for m in marks or [] if m.stream == CONSUMEQUEUE
                            and m.topic is not None and m.queue_id is not None)
        return DecodeContext(self.broker, self.snapshot_id, self.report_dir(kind),
                             self.registry[table].contract.arrow_schema(),
                             self.options.body_policy, self.options.verify_crc, commitlog_end,
                             commitlog_tail_file, queue_marks, self.objects)

    # ---- steps

    def register_snapshot(self) -> bool:
        """Give the snapshot its sequence number; False when it is already loaded."""
        rows = self.registry.read_rows(T.SNAPSHOTS, broker=self.broker)
        known = {row["snapshot_id"]: row for row in rows}
        mine = known.get(self.snapshot_id)
        if mine is not None and mine["status"] == LOADED:
            self.seq = mine["snapshot_seq"]
            return False
        unfinished = [row["snapshot_id"] for row in rows
                      if row["status"] != LOADED and row["snapshot_id"] != self.snapshot_id]
        if unfinished:
            raise LoadRefusedError(
                f"broker {self.broker!r}: snapshot(s) {', '.join(sorted(unfinished))} did not "
                f"finish loading; re-run their load first (their rows may be half written)")
        self.seq = mine["snapshot_seq"] if mine else 1 + max(
            (row["snapshot_seq"] for row in rows), default=0)
        self.registry.check_drift()  # never write into a table that left its contract
        self.write_snapshot_row(LOADING, None, None, [])
        return True

    def write_snapshot_row(self, status: str, cl_min: int | None, cl_max: int | None,
                           errors: list[str]) -> None:
        row = state_rows.snapshot_row(self.broker, self.snapshot_id, self.seq, self.store,
                                      self.objects.uri if self.objects else str(self.store),
                                      self.inventory, self.options.taken_at, status, cl_min,
                                      cl_max, errors)
        self.registry.replace_rows(T.SNAPSHOTS, [row], broker=self.broker,
                                   snapshot_id=self.snapshot_id)

    def marks(self) -> list[HighWaterMark]:
        return [HighWaterMark(**row)
                for row in self.registry.read_rows(T.LOAD_STATE, broker=self.broker)]

    def settle_history(self, marks: list[HighWaterMark]) -> list[HighWaterMark]:
        """The marks to plan from, after recording what the snapshot shows was rewritten:
        the files the snapshot copier found rewritten, and a commitlog that no longer
        holds the loaded history (then the superseded rows are recorded and the marks
        moved back; see :mod:`jobs.load.rewrites`). A replica loads no records: its
        commitlog is compared with its master's by the cluster stage instead."""
        mark = next((m for m in marks if m.stream == COMMITLOG), None)
        rewrite = None
        history = rewrites.history_of(self.registry, self.broker)
        recorded = rewrites.recorded_rewrite(history, self.snapshot_id)
        if recorded is not None:
            rewrite = rewrites.rewrite_from_row(self.registry, self.broker, self.store,
                                                recorded)
        elif mark is not None and not self.options.replica:
            reason = rewrites.changed_since_loaded(self.store, mark)
            if reason is not None:
                self.progress(f"the store no longer holds the loaded history: {reason}")
                rewrite = rewrites.find_rewrite(self.registry, self.broker, self.store,
                                                mark, self.snapshot_id,
                                                rewrites.current_incarnation(history))
        superseded = (rewrites.superseded_message_rows(self.registry, self.broker,
                                                       self.snapshot_id, rewrite, self.store)
                      if rewrite is not None else None)
        incarnation = (rewrite.incarnation if rewrite is not None
                       else rewrites.current_incarnation(history))
        rows = rewrites.file_rows(self.broker, self.snapshot_id, self.store, incarnation)
        if rewrite is not None and recorded is None:
            rows.append(rewrites.rewrite_row(self.broker, self.snapshot_id, rewrite,
                                             superseded.num_rows))
            self.progress(f"history {rewrite.kind} from commitlog offset "
                          f"{rewrite.from_offset}: {superseded.num_rows} loaded record(s) "
                          f"superseded (incarnation {rewrite.incarnation})")
        # The rewrite's row first: a load killed after it finishes this same rewrite.
        for write in self.append_small(T.HISTORY_REWRITES, rows).values():
            write()
        if rewrite is None:
            return marks
        for write in self.append_small(T.SUPERSEDED_MESSAGES, superseded).values():
            write()
        moved = rewrites.marks_after(self.registry, self.broker, marks, rewrite,
                                     self.snapshot_id)
        self.registry.replace_rows(T.LOAD_STATE, mark_rows(moved), broker=self.broker)
        return moved

    def decode_into(self, table: str, kind_label: str, tasks: list[Task],
                    context: DecodeContext) -> TableResult:
        """Decode tasks on the executors straight into ``table`` (skipped by Delta when
        this snapshot's rows are already there)."""
        result = TableResult(table, tasks=len(tasks))
        clock = time.monotonic()
        if tasks:
            facts = self.fact_writer()
            planned = sum(t.weight for t in tasks)
            self.progress(f"{table}: decoding {len(tasks)} task(s), {planned / 2**20:.1f} MiB "
                          f"planned, {facts.describe(tasks)}")
            facts.append(self.registry[table].location, self.registry[table].contract, tasks,
                         context, self.app_id(table), self.seq)
            reports = self.collect_reports(tasks, context, result)
            self.reports[kind_label] = reports
            result.rows = sum(int(r["rows"]) for r in reports)
            result.bytes_read = sum(int(r["account"]["bytes"]) for r in reports)
        result.seconds = time.monotonic() - clock
        self.summary.results[table] = result
        return result

    def trace_output(self, tasks: list[Task]) -> TraceOutput | None:
        """Where the commitlog tasks write message_traces rows; None when the table has
        this snapshot's append already. When ``messages`` has it but ``message_traces``
        not (a load killed between the two), the commitlog tasks' reports are removed, so
        that the tasks run again for their trace rows."""
        table = self.registry[T.MESSAGE_TRACES]
        if not tasks or committed(table.location, self.app_id(T.MESSAGE_TRACES), self.seq):
            return None
        if committed(self.registry[T.MESSAGES].location, self.app_id(T.MESSAGES), self.seq):
            Location(self.report_dir(COMMITLOG)).delete_tree()
        return TraceOutput(self.report_dir(COMMITLOG), table.contract.arrow_schema(),
                           self.options.trace_topics)

    def append_traces(self, context: DecodeContext) -> None:
        """Append the trace rows the commitlog tasks wrote, once (one commit)."""
        result = TableResult(T.MESSAGE_TRACES)
        self.summary.results[T.MESSAGE_TRACES] = result
        if context.traces is None:
            result.outcome, result.detail = "skipped", "no commitlog read, or committed before"
            return
        clock = time.monotonic()
        reports = self.reports.get(COMMITLOG, [])
        batches = read_trace_rows(context.traces.directory, reports)
        result.rows = sum(b.num_rows for b in batches)
        if batches:  # zstd, as every fact table's files
            table = self.registry[T.MESSAGE_TRACES]
            append_rows_once(table.location, table.contract, pa.Table.from_batches(batches),
                             self.app_id(T.MESSAGE_TRACES), self.seq,
                             writer_properties=WriterProperties(compression="ZSTD"))
        result.seconds = time.monotonic() - clock
        self.progress(f"{T.MESSAGE_TRACES}: {result.rows} trace context(s)")

    def plan(self, marks: list[HighWaterMark]) -> LoadPlan:
        """What to decode: everything past the marks; for a replica, nothing (its records
        are its master's), though planning still finds its commitlog's first offset."""
        plan = plan_load(self.store, marks, split_bytes=self.options.split_bytes,
                         queue_split_bytes=self.options.queue_split_bytes)
        if self.options.replica:
            plan.commitlog_tasks, plan.queue_tasks, plan.index_tasks = [], [], []
            plan.gaps = []
        return plan

    def write_lookup(self) -> None:
        """message_lookup rows of the new messages (and of any earlier snapshot of the
        broker still without them: a crash, or the first load after an upgrade)."""
        clock = time.monotonic()
        written = write_lookup_rows(self.registry, self.broker, self.seq)
        result = TableResult(T.MESSAGE_LOOKUP, rows=written.rows)
        if not written.snapshots:
            result.outcome, result.detail = "skipped", "already written by an earlier attempt"
        elif written.snapshots != [self.snapshot_id]:
            result.detail = "derived for snapshot(s) " + ", ".join(written.snapshots)
        result.seconds = time.monotonic() - clock
        self.progress(f"{T.MESSAGE_LOOKUP}: {written.rows} row(s) in {result.seconds:.1f} s")
        self.summary.results[T.MESSAGE_LOOKUP] = result

    def fact_writer(self) -> FactWriter:
        if self.facts is None:
            raise RuntimeError("the fact writer is chosen after planning")
        return self.facts

    def choose_fact_writer(self, plan: LoadPlan) -> None:
        self.facts = fact_writer(self.options.engine, plan.planned_bytes(plan.tasks),
                                 self.options.local_up_to_mib, self.options.split_bytes,
                                 self.spark)

    def collect_reports(self, tasks: list[Task], context: DecodeContext,
                        result: TableResult) -> list[dict]:
        """The tasks' reports; when Delta skipped the append (already committed by an
        earlier attempt) and their reports are gone, recompute them without writing."""
        reports = {t.task_id: read_report(context.report_dir, t.task_id) for t in tasks}
        missing = [t for t in tasks if reports[t.task_id] is None]
        if missing:
            result.outcome = "skipped" if len(missing) == len(tasks) else "loaded"
            result.detail = (f"{len(missing)} task(s) already committed by an earlier attempt; "
                             "their reports were recomputed")
            self.fact_writer().run_for_reports(missing, context)
            reports.update({t.task_id: read_report(context.report_dir, t.task_id)
                            for t in missing})
        return [reports[t.task_id] for t in tasks]

    def commitlog_end(self, plan: LoadPlan) -> int | None:
        """End of the last complete record loaded so far (this snapshot included)."""
        ends = [r["last_record_end"] for r in self.reports.get(COMMITLOG, [])
                if r.get("last_record_end") is not None]
        candidates = [*ends, *([plan.commitlog_hwm] if plan.commitlog_hwm else [])]
        return max(candidates) if candidates else None

    def state_writes(self) -> dict[str, Callable[[], None]]:
        """One append per per-snapshot state table that has rows for this snapshot.

        A snapshot's state never changes, so it is appended once (txnVersion = the
        snapshot's sequence number) rather than replaced: a re-run is skipped by Delta.
        """
        config = self.config
        builders = {
            T.TOPICS: state_rows.topic_rows,
            T.SUBSCRIPTION_GROUPS: state_rows.subscription_group_rows,
            T.CONSUMER_OFFSETS: state_rows.consumer_offset_rows,
            T.DELAY_OFFSETS: state_rows.delay_offset_rows,
            T.PENDING_TIMERS: lambda broker, snapshot_id, store, _config: (
                state_rows.pending_timer_rows(broker, snapshot_id, store, self.state_store)),
            T.COMPACTED_ENTRIES: lambda broker, snapshot_id, store, _config: (
                state_rows.compacted_entry_rows(broker, snapshot_id, store, self.compaction)),
            T.BROKER_EPOCHS: lambda broker, snapshot_id, store, _config: (
                state_rows.broker_epoch_rows(broker, snapshot_id, store, self.controller)),
            T.POP_IN_FLIGHT: state_rows.pop_in_flight_rows,
        }
        writes = {}
        for table, build in builders.items():
            writes.update(self.append_small(table, build(self.broker, self.snapshot_id,
                                                         self.store, config)))
        return writes

    def start_writes(self, pool: ThreadPoolExecutor,
                     writes: dict[str, Callable[[], None]]) -> list[Future[None]]:
        """Start small independent writes in the background: each is mostly Delta commit
        latency, which overlaps with decoding and with each other even on two cores."""
        def timed(table: str, write: Callable[[], None]) -> None:
            clock = time.monotonic()
            write()
            self.summary.results[table].seconds = time.monotonic() - clock

        return [pool.submit(timed, table, write) for table, write in writes.items()]

    def quarantine_rows(self, plan: LoadPlan) -> list[tuple]:
        rows: list[tuple] = []
        for reports in self.reports.values():
            for report in reports:
                # A DLedger data file is the broker's commitlog, a RocksDB queue its
                # consume queue: their regions are the commitlog's and the queues'.
                stream = QUARANTINE_STREAMS.get(report["kind"], report["kind"])
                segment_start = report.get("segment_start")
                for offset, length, reason in report["account"]["unreadable"]:
                    global_offset = segment_start + offset if stream == COMMITLOG else None
                    rows.append((self.broker, self.snapshot_id, report["rel_path"], offset,
                                 length, reason, stream, global_offset))
                for rel, position, length, reason in report.get("index_problems", []):
                    rows.append((self.broker, self.snapshot_id, rel, position, length, reason,
                                 DLEDGER_INDEX, None))
                for position, length, reason in report.get("trace_unreadable", []):
                    rows.append((self.broker, self.snapshot_id, report["rel_path"], position,
                                 length, reason, TRACE_STREAM, None))
        for skipped in plan.skipped_queues:
            rows.append((self.broker, self.snapshot_id, skipped.rel_path, 0, skipped.length,
                         skipped.reason, skipped.stream, None))
        for rel, size, reason, stream in plan.unreadable_files:
            rows.append((self.broker, self.snapshot_id, rel, 0, size, reason, stream, None))
        for rel, offset, length, reason in state_rows.compaction_problems(self.store,
                                                                          self.compaction):
            rows.append((self.broker, self.snapshot_id, rel, offset, length, reason,
                         state_rows.COMPACTION_STREAM, None))
        for rel, offset, length, reason in (self.controller.problems if self.controller
                                            else ()):
            rows.append((self.broker, self.snapshot_id, rel, offset, length, reason,
                         state_rows.CONTROLLER_STREAM, None))
        for rel, offset, length, reason in self.state_store_problems:
            rows.append((self.broker, self.snapshot_id, rel, offset, length, reason,
                         state_rows.STATE_STORE_STREAM, None))
        seen: dict[str, int] = {}
        for name, reason in self.config_problems:
            path = self.store / "config" / name
            size = path.stat().st_size if path.is_file() else 0
            # several problems of one file (RocksDB entries left out) are numbered
            number = seen[name] = seen.get(name, -1) + 1
            rows.append((self.broker, self.snapshot_id, f"config/{Path(name).name}", number,
                         size, reason, "config", None))
        return sorted(set(rows), key=lambda r: (r[2], r[3]))

    def gap_rows(self, plan: LoadPlan) -> list[tuple]:
        return [(self.broker, self.snapshot_id, g.stream, g.topic, g.queue_id, g.from_offset,
                 g.to_offset) for g in plan.gaps]

    def append_small(self, table: str, rows: list[tuple]) -> dict[str, Callable[[], None]]:
        """The write appending this snapshot's rows once (none when there are none)."""
        self.summary.results[table] = TableResult(table, rows=len(rows))
        if not rows:
            return {}
        return {table: functools.partial(self.registry.append_rows_once, table, rows,
                                         self.app_id(table), self.seq)}

    def new_marks(self, plan: LoadPlan, old: list[HighWaterMark]) -> list[tuple]:
        """Old marks advanced by this load's reports (never moved backwards)."""
        marks = {m.key: m for m in old}

        def advance(key: tuple, until: int, **extra: object) -> None:
            current = marks.get(key)
            if current is None or until >= current.loaded_until:
                stream, topic, queue_id, file = key
                marks[key] = HighWaterMark(self.broker, stream, topic, queue_id, file, until,
                                           self.snapshot_id, **extra)

        for report in self.reports.get(COMMITLOG, []):
            if report.get("last_record_end") is not None:
                advance((COMMITLOG, None, None, None), report["last_record_end"],
                        last_record_offset=report["last_record_offset"],
                        last_record_crc=report["last_record_crc"])
        for report in self.reports.get("queues", []):
            if report.get("loaded_end") is not None:
                key = (report["kind"], report["topic"], report["queue_id"], None)
                advance(key, report["file_start"] + report["loaded_end"])
            for topic, queue_id, loaded_end in report.get("queue_marks", []):  # RocksDB
                advance((CONSUMEQUEUE, topic, queue_id, None), loaded_end)
        for report in self.reports.get(INDEX, []):
            if report.get("next_entry") is not None:
                advance((INDEX, None, None, Path(report["rel_path"]).name),
                        report["next_entry"])
        return mark_rows(marks.values())

    def write_load_runs(self) -> None:
        version = rmqlib_version()
        rows = [(self.run_id, self.broker, self.snapshot_id, r.table, self.started_at,
                 float(round(r.seconds, 3)), r.bytes_read, r.rows, r.tasks, version,
                 r.outcome, r.detail)
                for r in self.summary.results.values()]
        if not rows:
            rows = [(self.run_id, self.broker, self.snapshot_id, T.SNAPSHOTS, self.started_at,
                     0.0, 0, 0, 0, version, "skipped", "snapshot already loaded")]
        self.registry.append_rows(T.LOAD_RUNS, rows)

    # ---- the whole load

    def run(self) -> LoadSummary:
        step = f"{self.broker}: load of snapshot {self.snapshot_id}"
        disk = disk_of(self.registry.warehouse)
        ensure_room(step, disk, BOOKKEEPING_ROOM)
        if not self.register_snapshot():
            self.progress(f"snapshot {self.snapshot_id!r} of broker {self.broker!r} is already "
                          "loaded: nothing to do")
            self.summary.skipped = True
            self.summary.snapshot_seq = self.seq
            self.write_load_runs()
            return self.finish()
        self.summary.snapshot_seq = self.seq
        self.progress(f"snapshot {self.snapshot_id!r} of broker {self.broker!r} registered as "
                      f"#{self.seq}")
        self.config = load_config_dir(self.store / "config")
        self.config_problems = state_rows.config_problems(self.config)
        self.compaction = state_rows.read_compaction_state(self.store)
        self.controller = state_rows.read_controller_state(self.store)
        # 5.5.x rocksdbstore/ (None without one), and what of it could not be read
        self.state_store, self.state_store_problems = state_rows.read_state_store_safely(
            self.store)
        errors = [f"{name}: {reason}" for name, reason in self.config_problems]
        with ThreadPoolExecutor(max_workers=4) as pool:
            # Per-snapshot state needs no decoding: it is written while the executors decode.
            pending = self.start_writes(pool, self.state_writes())
            old_marks = self.settle_history(self.marks())
            plan = self.plan(old_marks)
            # the night's files take about the data they decode (1 KiB bodies: 0.9 of it)
            ensure_room(step, disk, BOOKKEEPING_ROOM + plan.data_bytes(plan.tasks))
            self.progress(f"planned {len(plan.tasks)} task(s): {len(plan.commitlog_tasks)} "
                          f"commitlog, {len(plan.queue_tasks)} queue, {len(plan.index_tasks)} "
                          f"index; {plan.planned_bytes(plan.tasks) / 2**20:.1f} MiB past the "
                          "high-water marks")
            self.choose_fact_writer(plan)
            messages = self.context(T.MESSAGES, COMMITLOG,
                                    commitlog_tail_file=plan.commitlog_tail_file)
            messages = replace(messages, traces=self.trace_output(plan.commitlog_tasks))
            self.decode_into(T.MESSAGES, COMMITLOG, plan.commitlog_tasks, messages)
            self.append_traces(messages)
            cl_end = self.commitlog_end(plan)
            self.decode_into(T.QUEUE_ENTRIES, "queues", plan.queue_tasks,
                             self.context(T.QUEUE_ENTRIES, "queues", cl_end,
                                          marks=old_marks))
            self.decode_into(T.INDEX_ENTRIES, INDEX, plan.index_tasks,
                             self.context(T.INDEX_ENTRIES, INDEX))
            if not self.options.replica:
                if self.options.lookup:
                    self.write_lookup()
                pending += self.start_writes(pool, self.append_small(
                    T.TRANSACTIONS, transaction_rows(
                        self.registry, self.broker, self.snapshot_id, self.seq,
                        self.state_store,
                        self.options.taken_at or state_rows.newest_mtime(self.inventory))))
            quarantine = self.quarantine_rows(plan)
            self.summary.quarantined_bytes = sum(int(row[4]) for row in quarantine)
            self.summary.retention_gap_bytes = sum(
                g.to_offset - g.from_offset for g in plan.gaps if g.stream == COMMITLOG)
            pending += self.start_writes(pool, {
                **self.append_small(T.QUARANTINE, quarantine),
                **self.append_small(T.RETENTION_GAPS, self.gap_rows(plan))})
            for future in pending:
                future.result()
        self.registry.replace_rows(T.LOAD_STATE, self.new_marks(plan, old_marks),
                                   broker=self.broker)
        if self.options.replica:
            cl_end = write_offset(self.store)  # the bytes it received
        self.write_snapshot_row(LOADED, plan.commitlog_min_offset, cl_end, errors)
        self.write_load_runs()
        self.reports_root.delete_tree()
        return self.finish()

    def finish(self) -> LoadSummary:
        self.summary.seconds = time.monotonic() - self.clock
        return self.summary


def mark_rows(marks: Iterable[HighWaterMark]) -> list[tuple]:
    """``load_state`` rows of the marks, in key order."""
    return [(m.broker, m.stream, m.topic, m.queue_id, m.file, m.loaded_until,
             m.snapshot_id, m.last_record_offset, m.last_record_crc)
            for m in sorted(marks, key=lambda m: tuple(map(str, m.key)))]


@shared_table_handles()
def load_snapshot(spark: SparkSession | SparkOnDemand, broker: str, snapshot_id: str,
                  store: str | Path, options: LoadOptions | None = None, *,
                  registry: Registry | None = None,
                  progress: Progress | None = None) -> LoadSummary:
    """Load ``store`` (a snapshot directory of broker ``broker``) as ``snapshot_id``.

    ``spark`` may be a :class:`SparkOnDemand`: it is then started only if the tables must
    be created or evolved, or the plan is decoded on Spark.
    """
    options = options or LoadOptions()
    if options.body_policy not in BODY_POLICIES:
        raise LoadRefusedError(f"body policy must be one of {', '.join(BODY_POLICIES)}")
    if options.engine not in ENGINES:
        raise LoadRefusedError(f"load engine must be one of {', '.join(ENGINES)}")
    if not broker or not snapshot_id:
        raise LoadRefusedError("a broker name and a snapshot id are required")
    try:  # a URI is never taken for a path (a snapshot in a bucket: its mirror)
        store = local_directory(store, "store").resolve()
    except UnsupportedLocationError as error:
        raise LoadRefusedError(str(error)) from None
    on_demand = spark if isinstance(spark, SparkOnDemand) else SparkOnDemand(lambda: spark)
    registry = ready_registry(on_demand, registry)
    try:
        load = SnapshotLoad(on_demand, registry, broker, snapshot_id, store, options,
                            progress or (lambda _message: None))
    except StoreError as error:
        raise LoadRefusedError(f"{store} is not a readable broker store: {error}") from error
    try:
        with broker_load_lock(registry.warehouse, broker, snapshot_id):
            return load.run()
    except BrokerBusyError as error:
        raise LoadRefusedError(str(error)) from error


def ready_registry(spark: SparkOnDemand, registry: Registry | None) -> Registry:
    """The warehouse's tables, created or evolved if need be (delta-rs: no Spark); only
    a registry given without a warehouse takes it from the Spark session."""
    return (registry or Registry(spark())).ensure(names=False)


__all__ = ["BATCHCONSUMEQUEUE", "CONSUMEQUEUE", "LoadOptions", "LoadRefusedError",
           "LoadSummary", "load_snapshot"]
