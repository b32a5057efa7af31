"""Spark's own Delta append, idempotent by Delta's own mechanism.

:func:`append_once`: a DataFrame appended with ``txnAppId``/``txnVersion``. Delta records
the pair in the same atomic commit and skips a later write with a version it has already
seen. The load no longer writes its facts this way (its executors write the files and the
driver commits them: :mod:`jobs.lakehouse.staged_append`); bench/load_delta.py's floor and
``pipeline-delta`` modes measure Spark's writer with it.

Small rows (state, bookkeeping, check results) are written from the driver:
:mod:`jobs.lakehouse.driver_rows`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

if TYPE_CHECKING:
    from jobs.lakehouse.contracts import Contract


def append_once(df: DataFrame, location: str, app_id: str, version: int) -> None:
    """Append ``df`` unless Delta already committed (app_id, version) to this table."""
    (df.write.format("delta").mode("append")
     .option("txnAppId", app_id).option("txnVersion", version)
     .save(location))


def conform(df: DataFrame, contract: Contract) -> DataFrame:
    """``df`` with the contract's columns, in its order and types; a column ``df`` lacks
    is null (NOT NULL is checked by Delta on write)."""
    have = set(df.columns)
    return df.select(*[
        (F.col(f.name) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in contract.spark_schema().fields])


def sql_string(value: str) -> str:
    """A Spark SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
