"""A broker whose store no longer holds what was loaded from it: find it, record it, go on.

A broker's commitlog is append-only except when it is not: a controller-mode master that
comes back as a slave truncates to the last epoch both agree on and receives the new
master's records at the same offsets, a DLedger follower truncates what the leader lacks,
an ASYNC_FLUSH master loses its unflushed pages in a power loss and writes again there,
a backup is put back, a broker is re-provisioned under the same name with an empty store.

Every night the load compares the snapshot with the last loaded record (the commitlog
high-water mark, :func:`changed_since_loaded`), which costs one record read. When it
differs, :func:`find_rewrite` searches the loaded records for the *first* one the
snapshot no longer holds (binary search over the loaded offsets, a record read per
step: a rewrite replaces a suffix of the history), and :func:`record_rewrite`:

1. appends a ``history_rewrites`` row (kind truncated, rewritten or reset; a reset is a
   new incarnation of the broker) naming the first superseded offset and every earlier
   snapshot whose rows from there on are superseded;
2. appends the superseded message rows to ``superseded_messages`` (msgIds, keys, topics,
   bodies: the audit of what the rewrite discarded);
3. moves the high-water marks back (commitlog to the first superseded offset, each
   queue to its first superseded unit), so the load reads the new history there.

Fact tables are append-only (``delta.appendOnly``): superseded rows stay where they are,
marked by the ``history_rewrites`` row, and every reader leaves them out with the same
predicate (:mod:`jobs.lakehouse.history`: first seen in a superseded snapshot, at or after the
rewrite's offset). Each step is idempotent: a load killed in between finds the row of
its snapshot and finishes the same rewrite.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import arrow_dataset, exists, sql_text
from jobs.lakehouse.history import HISTORY_KINDS, superseded_mask
from jobs.lakehouse.tables import Registry
from jobs.load.decode_tasks import COMMITLOG
from jobs.load.plan import HighWaterMark
from jobs.snapshot.manifest import MANIFEST, Manifest
from rmqlib.commitlog.records import CommitLogRecord, read_record_at
from rmqlib.common.segments import list_segments
from rmqlib.errors import StoreError
from rmqlib.store.commitlog_source import commitlog_source, committed_end

TRUNCATED, REWRITTEN, RESET, FILE = "truncated", "rewritten", "reset", "file"

# What identifies a loaded record well enough to tell it from another one written at the
# same offset: a rewrite's records differ at least in their store time.
IDENTITY = ("physical_offset", "total_size", "store_time", "born_time", "queue_id",
            "queue_offset")


@dataclass(frozen=True)
class Rewrite:
    """The history the snapshot no longer holds: loaded records from ``from_offset`` to
    ``to_offset`` (the old high-water mark)."""

    kind: str
    from_offset: int
    to_offset: int
    incarnation: int
    previous_snapshot_id: str
    superseded_snapshot_ids: tuple[str, ...]
    # The last loaded record the snapshot still holds (the new commitlog mark's record).
    kept_record: tuple[int, int, int] | None  # (offset, end, BODYCRC)


# --------------------------------------------------------------------------- detecting


def changed_since_loaded(store: Path, mark: HighWaterMark | None) -> str | None:
    """Why the snapshot no longer holds the loaded history (None when it does): the
    commitlog ends below the mark, or the last loaded record is not there any more."""
    if mark is None:
        return None
    source = commitlog_source(store)
    segments = list_segments(source.directory) if source.directory.is_dir() else []
    store_end = segments[-1].start + segments[-1].size if segments else 0
    if store_end < mark.loaded_until:
        return f"the commitlog ends at offset {store_end}, below the loaded {mark.loaded_until}"
    offset = mark.last_record_offset
    if offset is None or not any(s.start <= offset < s.end for s in segments):
        return None  # its file was deleted by retention: nothing to compare
    record = _record_at(source.directory, offset)
    if record is None or record.body_crc != mark.last_record_crc:
        return (f"at offset {offset}, where the last loaded record (BODYCRC "
                f"{mark.last_record_crc}) was, the snapshot holds "
                + ("no valid record" if record is None else
                   f"a record with BODYCRC {record.body_crc}"))
    return None


def find_rewrite(registry: Registry, broker: str, store: Path, mark: HighWaterMark,
                 snapshot_id: str, incarnation: int) -> Rewrite:
    """The first loaded record the snapshot no longer holds, as a :class:`Rewrite`
    (``incarnation``: the broker's before this snapshot, :func:`current_incarnation`)."""
    directory = commitlog_source(store).directory
    loaded = current_records(registry, broker, _store_start(directory), snapshot_id)
    offsets = loaded.column("physical_offset").to_pylist()

    def same(index: int) -> bool:
        record = _record_at(directory, offsets[index])
        return record is not None and _identity(record) == _row_identity(loaded, index)

    # The records the snapshot still holds are a prefix of the loaded ones: the first
    # one it does not is where the rewrite starts.
    first_gone = _first_false(len(offsets), same)
    if first_gone == 0:
        kind, incarnation = RESET, incarnation + 1
        from_offset = min(offsets[0], _store_start(directory)) if offsets else 0
    elif first_gone < len(offsets):
        from_offset = offsets[first_gone]
        kind = REWRITTEN if _record_at(directory, from_offset) else TRUNCATED
    else:  # every loaded record is still there: the rewrite starts past the last one
        from_offset = offsets[-1] + loaded.column("total_size")[-1].as_py()
        kind = REWRITTEN if _record_at(directory, from_offset) else TRUNCATED
    return Rewrite(kind, from_offset, mark.loaded_until, incarnation, mark.snapshot_id,
                   tuple(earlier_snapshots(registry, broker, snapshot_id)),
                   _last_kept(directory, loaded, from_offset))


def rewrite_from_row(registry: Registry, broker: str, store: Path, row: dict) -> Rewrite:
    """The rewrite an earlier attempt of this snapshot's load recorded."""
    return Rewrite(row["kind"], row["from_offset"], row["to_offset"], row["incarnation"],
                   row["previous_snapshot_id"], tuple(row["superseded_snapshot_ids"] or ()),
                   kept_record(registry, broker, store, row["from_offset"],
                               row["snapshot_id"]))


def kept_record(registry: Registry, broker: str, store: Path, from_offset: int,
                snapshot_id: str) -> tuple[int, int, int] | None:
    """(offset, end, BODYCRC) of the last loaded record before ``from_offset`` the store
    still holds: the commitlog mark after the rewrite (None: nothing is kept)."""
    directory = commitlog_source(store).directory
    return _last_kept(directory, current_records(registry, broker, _store_start(directory),
                                                 snapshot_id), from_offset)


def _last_kept(directory: Path, loaded: pa.Table,
               from_offset: int) -> tuple[int, int, int] | None:
    """(offset, end, BODYCRC) of the last of the ``loaded`` records before ``from_offset``,
    read from the store (None when there is none, or it cannot be read)."""
    before = loaded.filter(pc.less(loaded.column("physical_offset"), from_offset))
    if before.num_rows == 0:
        return None
    record = _record_at(directory, before.column("physical_offset")[-1].as_py())
    if record is None:
        return None
    return (record.physical_offset, record.physical_offset + record.total_size,
            record.body_crc)


def _store_start(directory: Path) -> int:
    segments = list_segments(directory) if directory.is_dir() else []
    return segments[0].start if segments else 0


def _first_false(count: int, holds: Callable[[int], bool]) -> int:
    """The first index in [0, count) where ``holds`` is false (``count`` if none), for a
    predicate true on a prefix."""
    return bisect.bisect_left(range(count), True, key=lambda index: not holds(index))


def _record_at(directory: Path, offset: int) -> CommitLogRecord | None:
    try:
        return read_record_at([directory], offset, verify_crc=False)
    except StoreError:
        return None


def _identity(record: CommitLogRecord) -> tuple:
    return (record.physical_offset, record.total_size, record.store_timestamp,
            record.born_timestamp, record.queue_id, record.queue_offset)


def _row_identity(rows: pa.Table, index: int) -> tuple:
    def millis(value: datetime) -> int:
        return round(value.replace(tzinfo=value.tzinfo or UTC).timestamp() * 1000)

    row = {name: rows.column(name)[index].as_py() for name in IDENTITY}
    return (row["physical_offset"], row["total_size"], millis(row["store_time"]),
            millis(row["born_time"]), row["queue_id"], row["queue_offset"])


# --------------------------------------------------------------------------- reading


def rewrites_of(registry: Registry, broker: str, before: str | None = None) -> list[dict]:
    """The broker's ``history_rewrites`` rows of kinds truncated, rewritten and reset
    (only those of other snapshots than ``before``, the one being loaded)."""
    return [row for row in history_of(registry, broker)
            if row["kind"] in HISTORY_KINDS and row["snapshot_id"] != before]


def history_of(registry: Registry, broker: str) -> list[dict]:
    """The broker's ``history_rewrites`` rows (every kind): read once per load."""
    return registry.read_rows(T.HISTORY_REWRITES, broker=broker)


def current_incarnation(history: list[dict]) -> int:
    """The broker's incarnation, from its ``history_rewrites`` rows (1 before any reset)."""
    return max((row["incarnation"] for row in history), default=1)


def earlier_snapshots(registry: Registry, broker: str, snapshot_id: str) -> list[str]:
    """The broker's snapshots loaded before ``snapshot_id`` (by load sequence)."""
    rows = registry.read_rows(T.SNAPSHOTS, broker=broker)
    seq = {row["snapshot_id"]: row["snapshot_seq"] for row in rows}
    mine = seq.get(snapshot_id, max(seq.values(), default=0) + 1)
    return sorted((s for s, n in seq.items() if n < mine), key=seq.__getitem__)


def current_records(registry: Registry, broker: str, from_offset: int,
                    snapshot_id: str) -> pa.Table:
    """The broker's loaded records (one row each: inner_index 0) at or after
    ``from_offset`` that no rewrite superseded, by offset, with their identity columns."""
    location = registry[T.MESSAGES].location
    if not exists(location):
        return pa.table({name: [] for name in IDENTITY})
    where = f"broker = {sql_text(broker)} AND physical_offset >= {int(from_offset)}"
    table = arrow_dataset(location, files_where=where).to_table(
        columns=[*IDENTITY, "first_snapshot_id"],
        filter=(ds.field("broker") == broker) & (ds.field("inner_index") == 0)
        & (ds.field("physical_offset") >= from_offset))
    earlier = rewrites_of(registry, broker, before=snapshot_id)
    table = table.filter(pc.invert(superseded_mask(table, earlier, "physical_offset")))
    return table.sort_by("physical_offset")


# --------------------------------------------------------------------------- recording


def rewrite_row(broker: str, snapshot_id: str, rewrite: Rewrite, superseded: int) -> dict:
    return {"broker": broker, "snapshot_id": snapshot_id, "kind": rewrite.kind,
            "file": None, "from_offset": rewrite.from_offset,
            "to_offset": max(rewrite.to_offset, rewrite.from_offset),
            "records_superseded": superseded, "incarnation": rewrite.incarnation,
            "previous_snapshot_id": rewrite.previous_snapshot_id,
            "superseded_snapshot_ids": list(rewrite.superseded_snapshot_ids)}


def recorded_rewrite(history: list[dict], snapshot_id: str) -> dict | None:
    """This snapshot's rewrite row, when an earlier attempt of its load wrote it."""
    return next((row for row in history if row["snapshot_id"] == snapshot_id
                 and row["kind"] in HISTORY_KINDS), None)


def file_rows(broker: str, snapshot_id: str, store: Path, incarnation: int) -> list[dict]:
    """Kind ``file`` rows: the files the snapshot copier found rewritten since the previous
    snapshot (``rewritten_at`` in the snapshot's manifest, beside its store directory)."""
    path = store.parent / MANIFEST
    if not path.is_file():
        return []  # a store loaded without a snapshot of ours
    manifest = Manifest.load(path)
    previous = manifest.previous
    return [{"broker": broker, "snapshot_id": snapshot_id, "kind": FILE, "file": entry.path,
             "from_offset": entry.rewritten_at,
             "to_offset": max(entry.rewritten_at, entry.data_length),
             "records_superseded": None, "incarnation": incarnation,
             "previous_snapshot_id": previous, "superseded_snapshot_ids": None}
            for entry in manifest.rewritten]


SUPERSEDED_COLUMNS = ("broker", "physical_offset", "inner_index", "first_snapshot_id",
                      "topic", "queue_id", "queue_offset", "tags", "keys", "msg_id",
                      "offset_msg_id", "born_time", "store_time", "total_size",
                      "body_sha256", "body", "properties")


def superseded_message_rows(registry: Registry, broker: str, snapshot_id: str,
                            rewrite: Rewrite, store: Path) -> pa.Table:
    """The message rows ``rewrite`` supersedes, as ``superseded_messages`` rows; those a
    DLedger broker had not committed when they were last loaded are marked
    ``acknowledged`` false (from that snapshot's ledger checkpoint, when it is kept)."""
    location = registry[T.MESSAGES].location
    where = f"broker = {sql_text(broker)} AND physical_offset >= {int(rewrite.from_offset)}"
    table = arrow_dataset(location, files_where=where).to_table(
        columns=list(SUPERSEDED_COLUMNS),
        filter=(ds.field("broker") == broker)
        & (ds.field("physical_offset") >= rewrite.from_offset)
        & ds.field("first_snapshot_id").isin(list(rewrite.superseded_snapshot_ids)))
    # rows an earlier rewrite already superseded are not superseded again
    earlier = rewrites_of(registry, broker, before=snapshot_id)
    table = table.filter(pc.invert(superseded_mask(table, earlier, "physical_offset")))
    committed = _committed_end_at(store, rewrite.previous_snapshot_id)
    acknowledged = (pa.nulls(table.num_rows, pa.bool_()) if committed is None else
                    pc.if_else(pc.greater_equal(table.column("physical_offset"), committed),
                               False, pa.scalar(None, pa.bool_())))
    return (table.append_column("superseded_in_snapshot_id",
                                pa.array([snapshot_id] * table.num_rows, pa.string()))
            .append_column("acknowledged", acknowledged))


def _committed_end_at(store: Path, snapshot_id: str) -> int | None:
    """The DLedger committed end of the broker's snapshot ``snapshot_id`` (a sibling of
    ``store``'s snapshot), None when it is not a DLedger store or no longer kept."""
    earlier = store.parent.parent / snapshot_id / store.name
    return committed_end(earlier) if earlier.is_dir() else None


def marks_after(registry: Registry, broker: str, marks: list[HighWaterMark],
                rewrite: Rewrite, snapshot_id: str) -> list[HighWaterMark]:
    """The high-water marks moved back to the first superseded record and units."""
    moved: list[HighWaterMark] = []
    first_units = _first_superseded_units(registry, broker, rewrite, snapshot_id)
    for mark in marks:
        if mark.stream == COMMITLOG:
            if rewrite.kept_record is None:
                continue  # a reset: the new incarnation loads from its start
            offset, end, crc = rewrite.kept_record
            mark = HighWaterMark(broker, COMMITLOG, None, None, None, end, snapshot_id,
                                 offset, crc)
        elif (mark.stream, mark.topic, mark.queue_id) in first_units:
            until = first_units[(mark.stream, mark.topic, mark.queue_id)]
            if until >= mark.loaded_until:
                moved.append(mark)
                continue
            mark = HighWaterMark(broker, mark.stream, mark.topic, mark.queue_id, mark.file,
                                 until, snapshot_id)
        moved.append(mark)
    return moved


def _first_superseded_units(registry: Registry, broker: str, rewrite: Rewrite,
                            snapshot_id: str) -> dict[tuple[str, str, int], int]:
    """(queue type, topic, queue id) -> byte position in the queue of its first unit that
    points at a record ``rewrite`` supersedes (units an earlier rewrite superseded are
    another history's: their positions say nothing of this one)."""
    location = registry[T.QUEUE_ENTRIES].location
    if not exists(location):
        return {}
    table = arrow_dataset(location).to_table(
        columns=["queue_type", "topic", "queue_id", "commitlog_offset", "source_file",
                 "file_position", "first_snapshot_id"],
        filter=(ds.field("broker") == broker)
        & (ds.field("commitlog_offset") >= rewrite.from_offset)
        & ds.field("first_snapshot_id").isin(list(rewrite.superseded_snapshot_ids)))
    earlier = rewrites_of(registry, broker, before=snapshot_id)
    table = table.filter(pc.invert(superseded_mask(table, earlier, "commitlog_offset")))
    firsts: dict[tuple[str, str, int], int] = {}
    for row in table.to_pylist():
        if row["source_file"] is None or row["file_position"] is None:
            continue
        position = int(Path(row["source_file"]).name) + row["file_position"]
        key = (row["queue_type"], row["topic"], row["queue_id"])
        firsts[key] = min(firsts.get(key, position), position)
    return firsts
