"""Bench-only patches of the executors' decode code, for experiments (bench/load_delta.py).

``bench/load_delta.py`` puts this directory first on ``PYTHONPATH`` of a benchmark child
*only* for variants that set ``RMQ_BENCH_PATCH``; Spark's Python workers inherit the
environment, so the patch applies where the decoding runs without editing ``jobs/``.
Comma-separated items:

* ``nosha``      ``body_sha256`` becomes null (what the per-body sha256 costs)
* ``batch=N``    rmqlib's Arrow scan yields batches of N rows (default 16384)
* ``lookup-former``  message_lookup's rows derived as before: a DISTINCT over them all
  (each row is now made distinct at its source) and ``broker`` among the sort columns
  (constant in a load): what both cost the driver
* ``deltars-writer``  staged files written by delta-rs' ``write_deltalake`` (a scratch table
  per task attempt) as before 2026-11-29, in place of pyarrow's writer: what the writer
  costs
* ``inprocess-former``  the in-process load's facts streamed by delta-rs' ``write_deltalake``
  into the table in one append (before 2026-11-29), in place of staged pyarrow files
* ``dict-all``  pyarrow's default dictionary encoding on every column (before 2026-11-29,
  later), in place of the text columns only

Without ``RMQ_BENCH_PATCH`` this module does nothing.
"""

from __future__ import annotations

import os

_SPEC = os.environ.get("RMQ_BENCH_PATCH", "")


def _apply(spec: str) -> None:
    import functools

    import pyarrow as pa

    from jobs.load import decode_tasks

    for item in filter(None, spec.split(",")):
        if item == "nosha":
            decode_tasks.sha256_hex = lambda values: pa.nulls(len(values), pa.string())
        elif item.startswith("batch="):
            decode_tasks.scan_segment_arrow = functools.partial(
                decode_tasks.scan_segment_arrow, batch_size=int(item.split("=", 1)[1]))
        elif item == "lookup-former":
            from jobs.load import lookup_rows

            def former(broker, ids, derived=lookup_rows.lookup_sql):  # type: ignore[no-untyped-def]
                return derived(broker, ids).replace(
                    "unnest(list_distinct(keys))", "unnest(keys)").replace(
                    "SELECT substr(md5(", "SELECT DISTINCT substr(md5(").replace(
                    "lookup_value, physical_offset", "lookup_value, broker, physical_offset")

            lookup_rows.lookup_sql = former
        elif item == "deltars-writer":
            _former_staging_writer()
        elif item == "inprocess-former":
            _former_in_process_append()
        elif item == "dict-all":
            from jobs.lakehouse import parquet_files

            parquet_files.dictionary_columns = lambda schema: True
        else:
            raise ValueError(f"unknown RMQ_BENCH_PATCH item {item!r}")


def _former_staging_writer() -> None:
    import uuid

    import pyarrow as pa

    from jobs.lakehouse import staged_append
    from jobs.load import fact_writers

    def stage(batches, area, layout):  # type: ignore[no-untyped-def]
        from deltalake import write_deltalake
        from deltalake.writer import WriterProperties

        area = staged_append._table(area)
        attempt = area / uuid.uuid4().hex
        reader = pa.RecordBatchReader.from_batches(layout.schema, iter(batches))
        write_deltalake(str(attempt), reader,
                        partition_by=list(layout.partition_by) or None,
                        configuration=dict(layout.configuration) or None,
                        target_file_size=layout.target_file_bytes,
                        writer_properties=WriterProperties(compression=layout.compression))
        prefix = f"{staged_append.STAGING}/{area.name}/{attempt.name}"
        return [{**add, "path": f"{prefix}/{add['path']}"}
                for add in staged_append.logged_adds(attempt)]

    staged_append.stage = fact_writers.stage = stage


def _former_in_process_append() -> None:
    import pyarrow as pa
    from deltalake.writer import WriterProperties

    from jobs.lakehouse.driver_rows import append_rows_once
    from jobs.load import fact_writers

    def append(self, location, contract, tasks, context, app_id, version):  # type: ignore[no-untyped-def]
        rows = pa.RecordBatchReader.from_batches(contract.arrow_schema(),
                                                 fact_writers._decoded(tasks, context))
        append_rows_once(location, contract, rows, app_id, version,
                         writer_properties=WriterProperties(compression="ZSTD"))

    fact_writers.InProcessFacts.append = append


if _SPEC:
    _apply(_SPEC)

