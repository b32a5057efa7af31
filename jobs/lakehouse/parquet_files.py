"""A table's data files written by pyarrow, outside any Delta writer, and their add actions.

Two writes put files into a table without a Delta writer: a load's tasks stage their rows
(:mod:`jobs.lakehouse.staged_append`) and a compaction merges files
(:mod:`jobs.maintain.compaction`). Both write with pyarrow's Parquet writer and let
delta-rs derive each file's statistics from its footer (``convert_to_deltalake`` does,
the same way its writer does for the files it writes), so the files read as the table's
own: same statistics columns, same partition directories.

pyarrow rather than delta-rs' writer because it costs less CPU for the same rows
(bench/README.md, "Spark load into Delta"), and because it writes rows in the order they
come: delta-rs plans a write as a DataFusion query whose partitions interleave a stream's
batches, so a merged file's row groups would each span the whole range of its nights.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jobs.lakehouse.locations import Location

#: Rows per row group unless a table's options say otherwise: each row group has its own
#: statistics, so a reader of a stretch of offsets or nights skips the rest of the file.
ROW_GROUP_ROWS = 128 * 1024
#: At most this many bytes of rows wait for a row group in memory (wide rows: 1 KiB bodies).
ROW_GROUP_BYTES = 64 * 2**20
#: zstd, as the facts have always been written.
DEFAULT_OPTIONS: dict[str, Any] = {"compression": "zstd"}


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth a dictionary page: the text ones (broker, topic, tags, hosts,
    file names repeat within a row group). pyarrow tries a dictionary on every column by
    default and gives up per column chunk once it outgrows its page; on offsets, times,
    bodies and maps the try costs CPU and the fallback bytes: at 100-byte bodies the
    messages rows took 25 % less CPU and 9 % less space without it (bench/README.md)."""
    return [f.name for f in schema if pa.types.is_string(f.type)
            or pa.types.is_large_string(f.type)]


class RollingParquetFiles:
    """Parquet files of one directory (a partition), written in row groups of at most
    ``row_group_rows`` rows or about ``ROW_GROUP_BYTES`` bytes; a new file begins once the
    current one reaches ``target_bytes``. Rows are written in the order they come."""

    def __init__(self, directory: Path, schema: pa.Schema, target_bytes: int | None,
                 options: Mapping[str, Any]) -> None:
        self.directory, self.schema, self.target_bytes = directory, schema, target_bytes
        self.row_group_rows = int(options.get("row_group_size", ROW_GROUP_ROWS))
        self.writer_options = {"use_dictionary": dictionary_columns(schema),
                               **{k: v for k, v in options.items() if k != "row_group_size"}}
        self.writer: pq.ParquetWriter | None = None
        self.path: Path | None = None
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = self.pending_bytes = 0

    def add(self, batch: pa.RecordBatch) -> None:
        """Buffer ``batch``; write every full row group."""
        self.pending.append(batch)
        self.pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        if self.pending_rows >= self.row_group_rows or self.pending_bytes >= ROW_GROUP_BYTES:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        rows = pa.Table.from_batches(self.pending, self.schema)
        group = self.row_group_rows
        if self.pending_bytes >= ROW_GROUP_BYTES and rows.num_rows:
            group = max(1, min(group, rows.num_rows * ROW_GROUP_BYTES // self.pending_bytes))
        whole = rows.num_rows if final else rows.num_rows - rows.num_rows % group
        if whole:
            self._write(rows.slice(0, whole), group)
        rest = rows.slice(whole)
        self.pending = rest.to_batches()
        self.pending_rows = rest.num_rows
        self.pending_bytes = rest.nbytes

    def _write(self, rows: pa.Table, row_group_rows: int) -> None:
        if self.writer is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.path = self.directory / f"part-00000-{uuid.uuid4()}-c000.zstd.parquet"
            self.writer = pq.ParquetWriter(self.path, self.schema, **self.writer_options)
        self.writer.write_table(rows, row_group_size=row_group_rows)
        if self.target_bytes and self.path is not None \
                and self.path.stat().st_size >= self.target_bytes:
            self.writer.close()
            self.writer = None

    def close(self) -> None:
        """Write what is buffered and close the current file."""
        if self.pending_rows:
            self._flush(final=True)
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def write_in_order(rows: Iterable[pa.RecordBatch], schema: pa.Schema, directory: Path,
                   target_file_bytes: int | None, options: Mapping[str, Any]) -> None:
    """Write ``rows`` in order into Parquet files of about ``target_file_bytes`` in
    ``directory`` (no partition directories)."""
    files = RollingParquetFiles(directory, schema, target_file_bytes, options)
    for batch in rows:  # streamed: at most a row group and a batch in memory
        files.add(batch)
    files.close()


def write_partitioned(rows: Iterable[pa.RecordBatch], schema: pa.Schema,
                      partition_by: tuple[str, ...], directory: Path,
                      target_file_bytes: int | None, options: Mapping[str, Any]) -> int:
    """Write ``rows`` (of ``schema``, partition columns included) into Hive-style partition
    directories under ``directory`` (``store_date=2026-01-01/``; ``directory`` itself
    without partition columns), the partition columns left out of the files as Delta lays
    them out. Returns the number of rows written."""
    data_schema = pa.schema([f for f in schema if f.name not in partition_by])
    open_files: dict[tuple, RollingParquetFiles] = {}
    written = 0
    for batch in rows:
        written += batch.num_rows
        for values, part in _split_by_partition(batch, partition_by):
            files = open_files.get(values)
            if files is None:
                files = open_files[values] = RollingParquetFiles(
                    directory / partition_path(partition_by, values), data_schema,
                    target_file_bytes, options)
            files.add(part.select(data_schema.names))
    for files in open_files.values():
        files.close()
    return written


def _split_by_partition(batch: pa.RecordBatch, partition_by: tuple[str, ...]
                        ) -> Iterable[tuple[tuple, pa.RecordBatch]]:
    """``batch``'s rows grouped by their partition values (one group, no copy, when the
    whole batch is in one partition: a load's batches mostly are)."""
    if not batch.num_rows:
        return
    keys = [batch.column(name) for name in partition_by]
    if all(key.null_count == 0 and pc.count_distinct(key).as_py() == 1 for key in keys):
        yield tuple(key[0].as_py() for key in keys), batch
        return
    table = pa.Table.from_batches([batch])
    for group in table.group_by(list(partition_by)).aggregate([]).to_pylist():
        mask = None
        for name in partition_by:
            value = group[name]
            match = pc.is_null(table[name]) if value is None else pc.equal(table[name], value)
            mask = match if mask is None else pc.and_(mask, match)
        for part in table.filter(mask).to_batches():
            yield tuple(group[name] for name in partition_by), part


def partition_path(partition_by: tuple[str, ...], values: tuple) -> str:
    """``col=value/...`` as Delta writers name partition directories ("" for none).
    Partition columns are dates, numbers or hex digits here (data_contracts/README.md): no
    escaping."""
    parts = []
    for name, value in zip(partition_by, values, strict=True):
        if value is None:
            raise ValueError(f"partition column {name} is null: the contracts require it")
        text = value.isoformat() if hasattr(value, "isoformat") else str(value)
        if not all(c.isalnum() or c in "-_.:" for c in text):
            raise ValueError(f"partition value {text!r} of {name} would need escaping")
        parts.append(f"{name}={text}")
    return "/".join(parts)


def add_actions(directory: Path, schema: pa.Schema, partition_by: tuple[str, ...],
                settings: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """Add actions (path relative to ``directory``, partition values, size, statistics of
    the columns the table's ``settings`` name) of the Parquet files written there."""
    from deltalake import Schema, convert_to_deltalake

    if not any(directory.rglob("*.parquet")):
        return []
    partitions = Schema.from_arrow(pa.schema([schema.field(name) for name in partition_by])) \
        if partition_by else None
    convert_to_deltalake(str(directory), partition_by=partitions,
                         partition_strategy="hive" if partitions else None,
                         configuration=dict(settings) or None)
    return logged_adds(directory)


def logged_adds(table_dir: Path | Location) -> list[dict[str, Any]]:
    """The add actions in the JSON commits of a scratch table's log (a commit or two,
    never checkpointed), as written."""
    log = Location(str(table_dir)) / "_delta_log"
    adds = []
    for commit in sorted(f.relative for f in log.files() if f.relative.endswith(".json")):
        for line in (log / commit).read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                adds.append(action["add"])
    return adds


__all__ = ["DEFAULT_OPTIONS", "ROW_GROUP_ROWS", "RollingParquetFiles", "add_actions",
           "dictionary_columns", "logged_adds", "partition_path", "write_in_order",
           "write_partitioned"]
