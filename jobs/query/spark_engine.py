"""SQL over the lakehouse tables in a Spark session: for heavy scans and SQL only Spark speaks.

Every table is registered as ``rmq.<table>`` in the session catalog from the registry
(``jobs.lakehouse.tables``), so any session — the CLI's, a notebook's, a test's — sees the
same tables without sharing a metastore. Parameters are Spark's named parameter markers, so
values are never pasted into SQL text.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession

from jobs.lakehouse import tables as T
from jobs.lakehouse.tables import Registry
from jobs.query import lookup
from jobs.query.engine import Column, SqlError
from jobs.query.saved import saved_statement


def run_sql(spark: SparkSession, sql: str, params: dict[str, str] | None = None,
            registry: Registry | None = None) -> DataFrame:
    """Run SQL with the lakehouse tables registered (``rmq.messages``, ...)."""
    (registry or Registry(spark)).ensure()
    return spark.sql(sql, args=params or None)


def run_saved(spark: SparkSession, name: str, params: dict[str, str] | None = None,
              registry: Registry | None = None) -> DataFrame:
    """Run a saved query, checking its parameters first."""
    registry = registry or Registry(spark)
    sql, checked = saved_statement(name, params, registry.warehouse)
    return run_sql(spark, sql, checked, registry)


class SparkEngine:
    """The query stage's engine interface (jobs.query.engine) over a Spark session."""

    name = "spark"

    def __init__(self, spark: SparkSession, warehouse: Path | None = None) -> None:
        self.spark = spark
        self.registry = Registry(spark, warehouse)

    def tables(self) -> list[str]:
        return list(self.registry.ensure().tables)

    def columns(self, table: str) -> list[Column]:
        if table not in self.tables():
            raise SqlError(f"no table rmq.{table}")
        schema = self.spark.table(f"{T.DATABASE}.{table}").schema
        return [Column(f.name, f.dataType.simpleString(), f.nullable,
                       str(f.metadata.get("comment", ""))) for f in schema.fields]

    def query(self, sql: str, params: dict[str, str] | None = None) -> pa.Table:
        try:
            return run_sql(self.spark, sql, params, self.registry).toArrow()
        except (AnalysisException, ParseException) as error:
            raise SqlError.from_engine(error) from None

    def saved(self, name: str, params: dict[str, str] | None = None) -> pa.Table:
        return self.query(*lookup.saved_statement(self.query, self.registry.warehouse, name,
                                                  params))

    def close(self) -> None:
        self.spark.stop()
