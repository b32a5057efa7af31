"""Small tables read and written on the driver with delta-rs: no Spark job, no JVM.

State and bookkeeping tables (snapshots, topics, offsets, marks, lag, statuses, alerts,
audit logs) hold a few to a few thousand rows per broker and snapshot. Written through
Spark, each such write costs a job, a log replay and a commit, one to two seconds on two
cores, and a night made about a dozen of them per broker. delta-rs commits the same rows
in milliseconds, with the same idempotence as :mod:`jobs.lakehouse.delta_io`:

* :func:`append_rows_once`: the commit records the transaction ``(app_id, version)``; a
  write whose version the table has already seen is skipped (a re-run after a crash).
* :func:`replace_rows`: the rows matching a predicate are replaced atomically (delta-rs's
  predicate overwrite). delta-rs checks conflicts against the files the predicate read,
  as Spark does, so writers in other broker partitions never conflict.

Rows are tuples in the contract's column order, mappings by column name (a missing column
is null), or Arrow tables with its columns; the Arrow schema is the contract's, so NOT NULL
and the types hold on write.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.lakehouse.locations import Location, delta_storage_options, open_delta_table

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pa_fs
    from deltalake.writer import WriterProperties

    from jobs.lakehouse.contracts import Contract

    Rows = Sequence[tuple] | Sequence[Mapping[str, Any]] | pa.Table


def exists(location: str | Path) -> bool:
    """Whether a Delta log is at ``location`` (a table never created has none)."""
    return (Location(str(location)) / "_delta_log").is_dir()


def read_rows(location: str | Path, **equal: object) -> list[dict[str, object]]:
    """Rows of a Delta table matching ``column=value`` filters (a list or tuple value:
    any of its values); [] when the table was never created (no round trips just to
    learn that)."""
    if not exists(location):
        return []
    return read_arrow(location, **equal).to_pylist()


def read_arrow(location: str | Path, **equal: object) -> pa.Table:
    """The rows of an existing Delta table matching ``column=value`` filters (a list or
    tuple value: any of its values), as Arrow."""
    import pyarrow.dataset as ds

    condition = None
    for column, value in equal.items():
        term = ds.field(column).isin(list(value)) if isinstance(value, list | tuple) \
            else ds.field(column) == value
        condition = term if condition is None else condition & term
    return arrow_dataset(location, files_where=files_predicate(equal)).to_table(
        filter=condition)


def files_predicate(equal: Mapping[str, object]) -> str | None:
    """``equal``'s filters as the SQL predicate the Delta log prunes files with (partition
    values, statistics), so a table of many partitions (a state table has one per night)
    is opened only where the rows can be; None when a value is not a plain string or
    integer. The rows are still filtered exactly: the predicate only leaves files out."""
    terms = []
    for column, value in equal.items():
        values = list(value) if isinstance(value, list | tuple) else [value]
        if not values or not all(isinstance(v, str | int) and not isinstance(v, bool)
                                 for v in values):
            return None
        literals = ", ".join(sql_text(v) if isinstance(v, str) else str(v) for v in values)
        terms.append(f"{column} IN ({literals})")
    return " AND ".join(terms) or None


def arrow_dataset(location: str | Path, files_where: str | None = None,
                  version: int | None = None) -> ds.Dataset:
    """The current version (or ``version``) of an existing Delta table as a pyarrow
    dataset; ``files_where``:
    a SQL predicate that leaves out the files whose partition values and statistics in the
    Delta log cannot satisfy it (no file is opened to decide).

    On a local disk the Parquet files are read through Arrow's own filesystem, not
    deltalake's default: that one is implemented in Python, so Arrow's pre-buffered reads
    hold Python buffers. When such a read completes after the interpreter began to exit,
    Arrow's I/O thread frees the buffer, asks for the GIL, is ended by Python
    (``pthread_exit``) inside a ``noexcept`` frame, and the whole process aborts:
    "terminate called without an active exception", exit 134, after the command's work
    was done (tests/test_driver_rows.py runs a CLI again and again).

    In a bucket they are read through deltalake's (object_store underneath): Arrow's own
    S3 filesystem gives up on a throttled read (``503 SlowDown``) smaller than the error's
    body: the AWS SDK writes the body into the read's buffer, overflows it and reports an
    INTERNAL_FAILURE it does not retry (apache/doris#66557 tells the mechanism), which real
    S3 under load does to small column chunks. object_store retries it with backoff. The
    exit hazard above is why ``python -m jobs`` ends with ``os._exit`` (jobs.cli) and why
    Airflow's task processes are safe (they always end that way).
    """
    from pyarrow import fs

    where, table = Location(str(location)), open_delta_table(location)
    if version is not None:
        table.load_as_version(version)
    if not where.is_local:
        return table.to_pyarrow_dataset(filesystem=object_store_filesystem(table),
                                         file_pruning_predicate=files_where)
    filesystem, root = where.arrow_filesystem()
    native = fs.SubTreeFileSystem(root, filesystem)
    return table.to_pyarrow_dataset(filesystem=native, file_pruning_predicate=files_where)


def sparse_rows(dataset: ds.Dataset, where: ds.Expression, columns: Sequence[str]
                ) -> pa.Table:
    """The ``columns`` of ``dataset``'s rows matching ``where``, a filter few rows pass.

    A dataset scan decodes every projected column of a row group before it filters: the
    op messages' bodies of a night wanted that way decode the bodies of the whole night
    (a 1 GiB night without one transaction: 0.95 CPU-s). Here each row group is first
    counted on the filter's own columns, and read only when something in it matches
    (0.14 CPU-s for that night)."""
    import pyarrow as pa

    parts = [group.to_table(schema=dataset.schema, columns=list(columns), filter=where)
             for fragment in dataset.get_fragments(filter=where)
             for group in fragment.split_by_row_group()
             if group.to_table(schema=dataset.schema, columns=[], filter=where).num_rows]
    if parts:
        return pa.concat_tables(parts)
    return pa.schema([dataset.schema.field(name) for name in columns]).empty_table()


def object_store_filesystem(table: Any) -> pa_fs.FileSystem:
    """deltalake's own filesystem for ``table`` (object_store, configured from the
    ``AWS_*`` environment), told the files' sizes from the log so opening one costs no
    HEAD: what delta-rs uses when given no filesystem, chosen here on purpose."""
    from deltalake.fs import DeltaStorageHandler
    from pyarrow import fs

    adds = table.get_add_actions(flatten=True)
    sizes = dict(zip(adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist(),
                     strict=True))
    return fs.PyFileSystem(DeltaStorageHandler(
        table.table_uri, options=delta_storage_options(table.table_uri), known_sizes=sizes))


def arrow_rows(contract: Contract, rows: Rows) -> pa.Table:
    """``rows`` as an Arrow table of exactly the contract's schema."""
    import pyarrow as pa

    schema = contract.arrow_schema()
    if isinstance(rows, pa.RecordBatchReader):  # a stream in the contract's schema
        return rows
    if isinstance(rows, pa.Table):
        return rows.select(schema.names).cast(schema)
    if rows and isinstance(rows[0], Mapping):
        return pa.Table.from_pylist(list(rows), schema=schema)
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in schema]
    return pa.Table.from_arrays(
        [pa.array(list(values), field.type) for values, field in
         zip(columns, schema, strict=True)], schema=schema)


def append_rows(location: str | Path, contract: Contract, rows: Rows) -> None:
    """Append rows (an audit log's: every attempt is a row of its own)."""
    from deltalake import write_deltalake

    write_deltalake(str(location), arrow_rows(contract, rows), mode="append",
                    storage_options=delta_storage_options(location))


def append_rows_once(location: str | Path, contract: Contract,
                     rows: Rows | pa.RecordBatchReader, app_id: str, version: int, *,
                     writer_properties: WriterProperties | None = None) -> bool:
    """Append rows (or a stream of batches) unless the table already committed
    ``(app_id, version)``; True when written. Only one writer uses an ``app_id`` at a time
    (one load per broker). ``writer_properties``: Parquet settings (codec, row groups,
    Bloom filters; delta-rs's defaults when None)."""
    from deltalake import CommitProperties, Transaction, write_deltalake

    if committed(location, app_id, version):
        return False
    with commit_once(location, app_id, version):
        write_deltalake(str(location), arrow_rows(contract, rows), mode="append",
                        writer_properties=writer_properties,
                        storage_options=delta_storage_options(location),
                        commit_properties=CommitProperties(
                            app_transactions=[Transaction(app_id, version)]))
    return True


def committed(location: str | Path, app_id: str, version: int) -> bool:
    """Whether the table already holds the append ``(app_id, version)`` (its log's
    transaction action for ``app_id`` is at ``version`` or later)."""
    seen = open_delta_table(location).transaction_version(app_id)
    return seen is not None and seen >= version


@contextmanager
def commit_once(location: str | Path, app_id: str, version: int) -> Iterator[None]:
    """The append ``(app_id, version)``'s commit, where a commit refused as concurrent
    with itself is no failure: an object store's conditional PUT of the log entry can
    succeed while its answer is lost; the client's retry then meets its own entry
    (``412``), delta-rs finds a transaction of the same app id in it and gives up. When
    the log holds the append, it is committed (tests/test_s3_warehouse.py loses that
    answer on purpose)."""
    from deltalake.exceptions import CommitFailedError

    try:
        yield
    except CommitFailedError:
        if not committed(location, app_id, version):
            raise


def replace_rows(location: str | Path, contract: Contract, rows: Rows,
                 **equal: str) -> None:
    """Atomically replace the rows where every ``column = value`` holds with ``rows``
    (which must all match it, or delta-rs refuses the write)."""
    from deltalake import write_deltalake

    write_deltalake(str(location), arrow_rows(contract, rows), mode="overwrite",
                    predicate=predicate(**equal),
                    storage_options=delta_storage_options(location))


def predicate(**equal: str) -> str:
    """``column = 'value' AND ...`` in delta-rs's (DataFusion's) SQL."""
    return " AND ".join(f'"{column}" = {sql_text(value)}' for column, value in equal.items())


def sql_text(value: str) -> str:
    """A DataFusion string literal (quotes doubled; backslashes are plain characters)."""
    return "'" + value.replace("'", "''") + "'"
