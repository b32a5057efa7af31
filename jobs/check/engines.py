"""Where the checks' SQL runs: Spark, or DuckDB in this process for small snapshots.

The checks (:mod:`jobs.check.checks`), the snapshot's views (:mod:`jobs.check.views`) and
the consumer lag (:mod:`jobs.check.lag`) are written once, in Spark SQL. A night's check
of a small broker spends almost all of its time in Spark's fixed costs: a JVM, then a
job, a plan and a py4j round trip per step, about 20 s for a few thousand rows. The
local engine runs the very same text in DuckDB inside this process: sqlglot translates
it from Spark's dialect to DuckDB's, and the tables are read with delta-rs (Arrow), so a
check starts no JVM and takes a second. tests/test_reconcile.py holds both engines to
identical rows on every real-broker store and every injected fault.

Spark's ``reflect()`` has no DuckDB counterpart: the one engine-specific piece of SQL is
Java's ``String.hashCode`` (:meth:`CheckEngine.java_hash`), which DuckDB takes from
rmqlib's implementation as a vectorised function.

Which engine checks a snapshot is :func:`engine_for`'s choice: local while the broker's
commitlog at the snapshot is at most ``local_checks_up_to_mib`` (config/pipeline.yaml),
Spark beyond (every row of the snapshot's views is held in this process's memory).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa

from jobs.lakehouse.driver_rows import arrow_dataset, exists
from jobs.lakehouse.engine_choice import (
    AUTO,
    ENGINES,
    LOCAL,
    SPARK,
    runs_in_process,
)
from jobs.lakehouse.locations import Location, warehouse_location
from jobs.lakehouse.tables import table_location
from rmqlib.common.javahash import java_string_hashes

if TYPE_CHECKING:
    import duckdb
    from pyspark.sql import DataFrame, SparkSession

    from jobs.lakehouse.tables import Registry

__all__ = ["AUTO", "ENGINES", "LOCAL", "SPARK", "CheckEngine", "DuckDbEngine", "SparkEngine",
           "engine_for"]


class CheckEngine(Protocol):
    """What the check stage needs of a SQL engine."""

    name: str

    def register(self, view: str, table: str, files_where: str | None = None) -> None:
        """Make lakehouse ``table`` readable as ``view`` (read lazily, filtered by the SQL);
        ``files_where``: a predicate true of every row the SQL will read, which the Delta
        log prunes files by before any is opened (an engine may ignore it)."""

    def create_view(self, name: str, sql: str, *, cached: bool = False) -> None:
        """Name the result of ``sql`` (kept in memory when ``cached``, or always)."""

    def arrow(self, sql: str) -> pa.Table:
        """The rows of ``sql``."""

    def java_hash(self, text_sql: str) -> str:
        """SQL for Java's ``String.hashCode`` of ``text_sql`` (an INT; 0 for NULL)."""

    def close(self) -> None:
        """Release what the views hold."""


def engine_for(setting: str, commitlog_bytes: int, up_to_mib: int, registry: Registry,
               spark: Callable[[], Registry]) -> CheckEngine:
    """The engine ``setting`` (auto, local or spark) asks for, for a snapshot whose commitlog
    holds ``commitlog_bytes``; ``spark`` gives the Spark registry (starting the session)
    only when Spark is chosen."""
    if runs_in_process("check", setting, commitlog_bytes, up_to_mib):
        return DuckDbEngine(registry.warehouse)
    on_spark = spark()
    return SparkEngine(on_spark.spark, on_spark)


# ----------------------------------------------------------------------------- Spark


class SparkEngine:
    """Spark SQL temp views in the session; ``cached`` views are persisted until close."""

    name = SPARK

    def __init__(self, spark: SparkSession, registry: Registry) -> None:
        self.spark, self.registry = spark, registry
        self._cached: list[DataFrame] = []

    def register(self, view: str, table: str, files_where: str | None = None) -> None:
        self.registry.read(table).createOrReplaceTempView(view)  # Spark prunes by the SQL

    def create_view(self, name: str, sql: str, *, cached: bool = False) -> None:
        frame = self.spark.sql(sql)
        if cached:
            frame = frame.persist()
            self._cached.append(frame)
        frame.createOrReplaceTempView(name)

    def arrow(self, sql: str) -> pa.Table:
        return self.spark.sql(sql).toArrow()

    def java_hash(self, text_sql: str) -> str:
        # java.util.Objects.hashCode(s) is s.hashCode(), 0 for null: by the JVM itself, and
        # reflect() keeps the checks free of Python workers.
        return f"CAST(reflect('java.util.Objects', 'hashCode', {text_sql}) AS INT)"

    def close(self) -> None:
        for frame in self._cached:
            frame.unpersist()
        self._cached.clear()


# ----------------------------------------------------------------------------- local


class DuckDbEngine:
    """DuckDB in this process over the warehouse's Delta tables (delta-rs datasets).

    Every view is materialized as a temporary table: it is small (that is why this engine
    was chosen) and most are read by several checks.
    """

    name = LOCAL
    HASH_FUNCTION = "java_string_hash"

    def __init__(self, warehouse: str | Path | Location) -> None:
        import duckdb
        from duckdb.sqltypes import INTEGER, VARCHAR

        self.warehouse = warehouse_location(warehouse, "warehouse")
        self.connection: duckdb.DuckDBPyConnection = duckdb.connect()
        # Timestamps print and truncate in UTC, as in the Spark session (spark_session.py).
        self._run("SET TimeZone = 'UTC'")
        self.connection.create_function(self.HASH_FUNCTION, _java_string_hashes, [VARCHAR],
                                        INTEGER, type="arrow", null_handling="special")

    def register(self, view: str, table: str, files_where: str | None = None) -> None:
        location = table_location(self.warehouse, table)
        if not exists(location):
            raise FileNotFoundError(f"table {table} does not exist at {location}")
        # A dataset, not a table: DuckDB pushes the views' filters and columns into the
        # scan, so only the broker's files and the columns used are read; files_where
        # leaves the other partitions out of the dataset (a state table has one a night).
        self.connection.register(view, arrow_dataset(location, files_where=files_where))

    def create_view(self, name: str, sql: str, *, cached: bool = False) -> None:
        self._run(f"CREATE OR REPLACE TEMP TABLE {name} AS {to_duckdb(sql)}")

    def arrow(self, sql: str) -> pa.Table:
        return self.connection.sql(to_duckdb(sql)).to_arrow_table()

    def java_hash(self, text_sql: str) -> str:
        return f"{self.HASH_FUNCTION}({text_sql})"

    def close(self) -> None:
        self.connection.close()

    def _run(self, statement: str) -> None:
        self.connection.execute(statement).fetchall()


@functools.lru_cache(maxsize=512)
def to_duckdb(spark_sql: str) -> str:
    """One Spark SQL statement in DuckDB's dialect (sqlglot)."""
    import sqlglot

    return sqlglot.transpile(spark_sql, read="spark", write="duckdb")[0]


def _java_string_hashes(strings: pa.Array | pa.ChunkedArray) -> pa.Array:
    """DuckDB's vectorised ``java_string_hash``: nulls hash as Java's Objects.hashCode does."""
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    return pa.array(java_string_hashes(strings).astype(np.int32), pa.int32())
