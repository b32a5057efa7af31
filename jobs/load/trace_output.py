"""``message_traces``: the trace contexts of the trace topics' messages, cut where they are read.

Trace messages are ordinary records of the commitlog, so the commitlog task that decodes a
byte range into ``messages`` sees their bodies anyway, decompressed and whole, before the
body policy (``hash``, ``none``) drops them. It picks out the records of the trace topics,
splits their bodies into contexts with :func:`rmqlib.traces_arrow.decode_trace_bodies`
and writes the rows beside its report (an Arrow IPC file, by task id, so a retried task
replaces it); after ``messages`` the driver appends every task's rows to
``message_traces`` at once, as the table's append of the snapshot (``(app_id, snapshot
seq)``, skipped when the table has it). The commitlog is read once for both tables.

The rows go through the driver because a task runs inside the Parquet writer's stream of
``messages`` rows (delta-rs on the executors and in process), where a second delta-rs write
cannot start. Trace contexts are small next to the messages they describe; a night's are
written in one commit.

Contexts the client's own decoder would refuse are no rows: their regions go into the
task's report and become quarantine rows (stream ``trace``) naming the trace message's
file and position, the region's place in the body and the reason. A body that could not
be decompressed is the ``messages`` row's ``body_error`` already and yields nothing here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from jobs.lakehouse.locations import Location
from jobs.load.arrow_columns import assemble, dates, task_file_stem, timestamps
from rmqlib.traces import DEFAULT_TRACE_TOPIC, TRACE_TOPIC_PREFIX
from rmqlib.traces_arrow import decode_trace_bodies

#: Quarantine stream of a trace context that does not decode.
TRACE_STREAM = "trace"


@dataclass(frozen=True)
class TraceOutput:
    """Where a load's commitlog tasks put trace rows (shipped to executors by pickle)."""

    directory: str  # beside the commitlog tasks' reports
    schema: pa.Schema  # message_traces'
    topics: tuple[str, ...] = ()  # trace topics besides the default and the cloud ones

    def trace_rows(self, batch: pa.RecordBatch) -> np.ndarray:
        """Rows of a commitlog batch that are trace messages."""
        topic = batch.column("topic")
        named = pc.is_in(topic, pa.array([DEFAULT_TRACE_TOPIC, *self.topics], pa.string()))
        cloud = pc.starts_with(topic, TRACE_TOPIC_PREFIX)
        return np.flatnonzero(pc.or_(named, cloud).to_numpy(zero_copy_only=False))


@dataclass
class TraceCollector:
    """A commitlog task's trace rows and unreadable contexts, staged when the task ends."""

    output: TraceOutput
    broker: str
    snapshot_id: str
    task_id: str
    rel_path: str
    batches: list[pa.RecordBatch] = field(default_factory=list)
    unreadable: list[list[object]] = field(default_factory=list)

    def collect(self, batch: pa.RecordBatch) -> None:
        """The trace contexts of a commitlog batch (rmqlib's scan schema)."""
        rows = self.output.trace_rows(batch)
        if not rows.size:
            return
        records = batch.take(pa.array(rows))
        bodies = records.column("body")
        decoded = decode_trace_bodies(bodies)
        self._note_unreadable(records, decoded.unreadable)
        if decoded.records.num_rows:
            self.batches.append(self._rows(records, decoded.records))

    def finish(self) -> dict[str, object]:
        """Write the rows; the report's part: their file, count and unreadable regions."""
        rows = sum(b.num_rows for b in self.batches)
        report: dict[str, object] = {"trace_rows": rows, "trace_unreadable": self.unreadable}
        if rows:
            name = trace_file_name(self.task_id)
            sink = pa.BufferOutputStream()
            options = pa.ipc.IpcWriteOptions(compression="zstd")
            with pa.ipc.new_stream(sink, self.output.schema, options=options) as writer:
                for batch in self.batches:
                    writer.write_batch(batch)
            (Location(self.output.directory) / name).write_bytes(sink.getvalue().to_pybytes())
            report["trace_file"] = name
        return report

    def _rows(self, records: pa.RecordBatch, contexts: pa.Table) -> pa.RecordBatch:
        """Contexts as rows of ``message_traces``: the trace message's columns taken by
        each context's body index, the context's own fields beside them."""
        carrier = pa.array(contexts.column("body_index").to_numpy(zero_copy_only=False))
        of_record = records.take(carrier)
        store_ms = of_record.column("store_timestamp")
        n = contexts.num_rows
        ctx = contexts.column
        columns = {
            "broker": pa.repeat(pa.scalar(self.broker, pa.string()), n),
            "physical_offset": of_record.column("physical_offset"),
            "context_position": ctx("position"),
            "context_length": ctx("length"),
            "trace_topic": of_record.column("topic"),
            "trace_born_host": of_record.column("born_host"),
            "store_time": timestamps(store_ms),
            "store_date": dates(store_ms),
            "trace_type": ctx("trace_type"),
            "trace_time": timestamps(ctx("timestamp_ms")),
            "trace_epoch_ms": ctx("timestamp_ms"),
            "group_name": ctx("group"),
            **{name: ctx(name) for name in (
                "region_id", "request_id", "topic", "msg_id", "tags", "keys", "store_host",
                "client_host", "body_length", "cost_ms", "msg_type", "offset_msg_id",
                "success", "retry_times", "context_code", "transaction_id",
                "transaction_state", "from_transaction_check")},
            "source_file": pa.repeat(pa.scalar(self.rel_path, pa.string()), n),
            "file_position": of_record.column("file_position"),
            "first_snapshot_id": pa.repeat(pa.scalar(self.snapshot_id, pa.string()), n),
        }
        return assemble(columns, self.output.schema)

    def _note_unreadable(self, records: pa.RecordBatch, regions: pa.Table) -> None:
        """[file position of the trace message, length, reason] per unreadable region."""
        positions = records.column("file_position").to_pylist()
        offsets = records.column("physical_offset").to_pylist()
        for body, at, length, reason in zip(*(regions.column(c).to_pylist() for c in (
                "body_index", "position", "length", "reason")), strict=True):
            self.unreadable.append([
                positions[body], length,
                f"trace message at commitlog offset {offsets[body]}: body bytes "
                f"[{at}, {at + length}): {reason}"])


def trace_file_name(task_id: str) -> str:
    return f"{task_file_stem(task_id)}.arrows"


def read_trace_rows(directory: str, reports: list[dict]) -> list[pa.RecordBatch]:
    """The rows the tasks of ``reports`` wrote (their last attempts')."""
    batches: list[pa.RecordBatch] = []
    for report in reports:
        name = report.get("trace_file")
        if name:
            data = (Location(directory) / str(name)).read_bytes()
            batches.extend(pa.ipc.open_stream(pa.py_buffer(data)))
    return batches
