"""The load's last fact step: ``message_lookup`` rows for the messages a snapshot added.

Derived from the ``messages`` files just committed rather than decoded a second time: the
message rows already say everything a lookup needs, and deriving works the same whether
Spark or this process decoded them. The new files (chosen by the Delta log's statistics,
:func:`~jobs.lakehouse.driver_rows.arrow_dataset`) are cut into groups, one per core of
the load's engine once they hold a split's worth of bytes (else one): each group's task,
on an executor or in one of this process's threads as the decode tasks, reads its files
with DuckDB (one thread), unnests keys, computes the md5 bucket, sorts by bucket and
value, and stages the rows as the table's Parquet files (row groups and Bloom filter of
jobs/lakehouse/message_lookup.py); the driver commits the groups' files once
(jobs.lakehouse.staged_append). A night's bucket then has a file per group: sorted, and
merged eight at a time by the compaction.

Which snapshots still need rows is kept by Delta itself: the append records the
transaction ``(rmq-lookup/<broker>, snapshot seq)``, and a load derives the rows of every
snapshot of its broker after the last recorded one. So a re-run after a crash adds
nothing twice, and the first load after an upgrade indexes the broker's whole history.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import arrow_dataset, sql_text
from jobs.lakehouse.locations import Location, open_delta_table
from jobs.lakehouse.message_lookup import KEY, MSG_ID, POSITION, app_id
from jobs.lakehouse.staged_append import StagedLayout, stage
from jobs.lakehouse.tables import Registry
from jobs.load.fact_writers import append_staged, consecutive_weights

if TYPE_CHECKING:
    import pyarrow.dataset as ds

    from jobs.load.fact_writers import FactWriter

BATCH_ROWS = 256 * 1024
#: The order of a write's rows: by bucket and value, then the row they point at.
ORDER = "lookup_bucket, lookup_value, physical_offset, inner_index"
#: Where in a lookup append's staging directory the derived, unsorted rows wait per bucket.
PIECES = "pieces"
# Records a consume queue never lists (a half message; a rollback marker) have no position.
QUEUED_TYPES = ("NOT", "COMMIT")
MESSAGE_COLUMNS = ("broker", "store_date", "physical_offset", "inner_index",
                   "first_snapshot_id", "msg_id", "keys", "topic", "queue_id", "queue_offset",
                   "transaction_type")


def pending_snapshots(registry: Registry, broker: str, seq: int) -> list[str]:
    """The broker's snapshots up to ``seq`` whose lookup rows are not written yet."""

    done = open_delta_table(registry[T.MESSAGE_LOOKUP].location).transaction_version(
        app_id(broker)) or 0
    return sorted(row["snapshot_id"] for row in registry.read_rows(T.SNAPSHOTS, broker=broker)
                  if done < row["snapshot_seq"] <= seq)


def lookup_sql(broker: str, snapshot_ids: Iterable[str], ordered: bool = True) -> str:
    """DuckDB SQL over view ``messages`` giving the lookup rows of the broker's messages
    first seen in ``snapshot_ids``, sorted by bucket and value (unless not ``ordered``).
    Each row is distinct without a DISTINCT over them all: a message row has one msgId and
    one position, and its keys are made distinct before they are unnested (a key may repeat
    in ``KEYS``). The order leaves out ``broker``, one here: each sort column costs DuckDB's
    sort (with it, 5.4 CPU-s for the 3.5 M rows of a 1 GiB night instead of 3.8)."""
    ids = ", ".join(sql_text(s) for s in snapshot_ids)
    pointer = "broker, store_date, physical_offset, inner_index, first_snapshot_id"
    queued = ", ".join(sql_text(t) for t in QUEUED_TYPES)
    return f"""
        WITH m AS (SELECT * FROM messages
                   WHERE broker = {sql_text(broker)} AND first_snapshot_id IN ({ids})),
        entries AS (
            SELECT '{MSG_ID}' AS kind, msg_id AS lookup_value, {pointer}
            FROM m WHERE msg_id IS NOT NULL AND msg_id <> ''
            UNION ALL
            SELECT '{KEY}', k, {pointer}
            FROM (SELECT unnest(list_distinct(keys)) AS k, {pointer} FROM m) WHERE k <> ''
            UNION ALL
            SELECT '{POSITION}', concat_ws(' ', topic, queue_id, queue_offset), {pointer}
            FROM m WHERE transaction_type IN ({queued}))
        SELECT substr(md5(lookup_value), 1, 1) AS lookup_bucket, kind,
               lookup_value, {pointer}
        FROM entries""" + (f"\n        ORDER BY {ORDER}" if ordered else "")


@dataclass
class LookupWrite:
    """What :func:`write_lookup_rows` did."""

    snapshots: list[str] = field(default_factory=list)  # whose rows were derived
    rows: int = 0
    groups: int = 0  # tasks that derived them


@dataclass(frozen=True)
class LookupGroup:
    """What one task derives lookup rows from: some of the new ``messages`` files."""

    messages: str                 # the messages table's location
    broker: str
    snapshot_ids: tuple[str, ...]
    paths: tuple[str, ...]        # its files, relative to the table


@dataclass(frozen=True)
class Piece:
    """A derived task's unsorted rows of one bucket: a Parquet file in the staging area."""

    bucket: str
    location: str
    size: int


def new_files_where(broker: str, snapshot_ids: Iterable[str]) -> str:
    """The Delta log's predicate for the files that can hold the snapshots' new rows."""
    ids = ", ".join(sql_text(s) for s in snapshot_ids)
    return f"broker = {sql_text(broker)} AND first_snapshot_id IN ({ids})"


def write_lookup_rows(registry: Registry, broker: str, seq: int, writer: FactWriter,
                      split_bytes: int) -> LookupWrite:
    """Append the lookup rows of every snapshot of ``broker`` up to ``seq`` not yet
    indexed (none when all are), in two rounds of tasks where ``writer`` runs its own:
    each group of new messages files derives its rows into unsorted pieces per bucket, then
    each run of buckets sorts its pieces and stages them as the table's files. So a night
    adds one sorted file per bucket however many tasks derived it (a lookup reads a bucket
    file per night), and no task sorts more than its share."""
    pending = pending_snapshots(registry, broker, seq)
    done = LookupWrite(pending)
    if not pending:
        return done
    groups = lookup_groups(registry[T.MESSAGES].location, broker, pending,
                           writer.parallelism, split_bytes)
    done.groups = len(groups)
    target = registry[T.MESSAGE_LOOKUP]

    def write(area: str, layout: StagedLayout) -> list[list[dict]]:
        pieces = [p for ps in writer.run_groups(groups, derived_pieces(area)) for p in ps]
        runs = bucket_runs(pieces, len(groups))
        attempts = writer.run_groups(runs, sorted_files(area, layout)) if runs else []
        done.rows = sum(json.loads(add["stats"])["numRecords"]
                        for adds in attempts for add in adds)
        return attempts

    append_staged(target.location, target.contract, app_id(broker), seq, write)
    return done


def lookup_groups(messages: str, broker: str, snapshot_ids: list[str], parallelism: int,
                  split_bytes: int) -> list[LookupGroup]:
    """The new files of ``snapshot_ids`` in runs of about equal bytes: one run below
    ``split_bytes`` in all, else ``parallelism`` (at most one per file)."""
    paths = [fragment.path for fragment in
             arrow_dataset(messages, new_files_where(broker, snapshot_ids)).get_fragments()]
    adds = pa.table(open_delta_table(messages).get_add_actions(flatten=True))
    sizes = dict(zip((unquote(p) for p in adds.column("path").to_pylist()),
                     adds.column("size_bytes").to_pylist(), strict=True))
    weights = [sizes.get(unquote(path), 1) for path in paths]
    count = 1 if sum(weights) < split_bytes else parallelism
    return [LookupGroup(messages, broker, tuple(snapshot_ids), tuple(run))
            for run in consecutive_weights(paths, weights, count) if run]


def bucket_runs(pieces: list[Piece], count: int) -> list[list[Piece]]:
    """The pieces by bucket, the buckets in ``count`` runs of about equal bytes."""
    buckets = sorted({p.bucket for p in pieces})
    weights = [sum(p.size for p in pieces if p.bucket == b) for b in buckets]
    return [[p for p in pieces if p.bucket in run]
            for run in consecutive_weights(buckets, weights, count) if run]


def derived_pieces(area: str) -> Callable[[LookupGroup], list[Piece]]:
    """The first round's work, wherever it runs: a group's lookup rows, unsorted, written
    by DuckDB as a file per bucket under the staging area (in a bucket: uploaded)."""

    def run(group: LookupGroup) -> list[Piece]:
        pieces = Location(area) / PIECES / uuid.uuid4().hex
        with duckdb_session() as (connection, scratch):
            written = pieces.path if pieces.is_local else scratch / "written"
            written.parent.mkdir(parents=True, exist_ok=True)
            connection.register("messages", group_dataset(group))
            connection.execute(
                f"COPY ({lookup_sql(group.broker, group.snapshot_ids, ordered=False)}) "
                f"TO {sql_text(str(written))} (FORMAT parquet, COMPRESSION uncompressed, "
                "PARTITION_BY (lookup_bucket), WRITE_PARTITION_COLUMNS true)")
            found = []
            for file in sorted(written.rglob("*.parquet")):
                bucket, size = file.parent.name.removeprefix("lookup_bucket="), file.stat().st_size
                target = pieces / file.relative_to(written).as_posix()
                if not pieces.is_local:
                    target.put_file(file)
                found.append(Piece(bucket, str(target), size))
            return found

    return run


def sorted_files(area: str, layout: StagedLayout) -> Callable[[list[Piece]], list[dict]]:
    """The second round's work, wherever it runs: a run of buckets' pieces sorted by
    DuckDB and staged as the table's files; returns their add actions."""

    def run(pieces: list[Piece]) -> list[dict]:
        with duckdb_session() as (connection, scratch):
            local = [_readable(Location(piece.location), scratch / f"{index}.parquet")
                     for index, piece in enumerate(pieces)]
            files = ", ".join(sql_text(str(path)) for path in local)
            columns = ", ".join(f'"{name}"' for name in layout.schema.names)
            reader = connection.sql(f"SELECT {columns} FROM read_parquet([{files}]) "
                                    f"ORDER BY {ORDER}").to_arrow_reader(BATCH_ROWS)
            return stage((batch.cast(layout.schema) for batch in reader), area, layout)

    return run


def _readable(piece: Location, download: Path) -> Path:
    """A local path of ``piece``: itself on a local disk, else downloaded to ``download``."""
    if piece.is_local:
        return piece.path
    piece.get_file(download)
    return download


def group_dataset(group: LookupGroup) -> ds.Dataset:
    """``group``'s messages files as a dataset (their partition values from the log)."""
    import pyarrow.dataset as ds

    dataset = arrow_dataset(group.messages, new_files_where(group.broker, group.snapshot_ids))
    wanted = set(group.paths)
    return ds.FileSystemDataset([f for f in dataset.get_fragments() if f.path in wanted],
                                dataset.schema, dataset.format, dataset.filesystem)


@contextmanager
def duckdb_session() -> Iterator[tuple[Any, Path]]:
    """A DuckDB connection on one thread (a task is a core) and a scratch directory of its
    own, where a sort larger than memory (the first load of a long history) spills."""
    import duckdb

    with tempfile.TemporaryDirectory(prefix="rmq-lookup-") as scratch, \
            duckdb.connect() as connection:
        connection.execute("SET threads = 1")
        connection.execute("SET preserve_insertion_order = false")
        connection.execute(f"SET temp_directory = {sql_text(str(Path(scratch) / 'spill'))}")
        yield connection, Path(scratch)
