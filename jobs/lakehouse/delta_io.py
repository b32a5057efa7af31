"""SQL text for Spark.

Spark only *reads* the lakehouse's tables: every Delta commit is made by delta-rs
(:mod:`jobs.lakehouse.driver_rows`, :mod:`jobs.lakehouse.staged_append`,
:mod:`jobs.lakehouse.table_ddl`, :mod:`jobs.lakehouse.migrate`, the maintenance), whose
commits are conditional writes that several writers, on several hosts and in an object
store, can make at once. delta-spark commits to S3 with an unconditional PUT (its only S3
log store is single-driver), so two of its writers can silently lose a commit there
(docs/object-storage.md); tests/test_layering.py keeps Spark's writer out of ``jobs``.
"""

from __future__ import annotations


def sql_string(value: str) -> str:
    """A Spark SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
