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
        else:
            raise ValueError(f"unknown RMQ_BENCH_PATCH item {item!r}")


if _SPEC:
    _apply(_SPEC)
