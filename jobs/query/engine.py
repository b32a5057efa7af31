"""What every SQL engine of the query stage offers, so the CLI and the shell use either.

``local`` (jobs.query.local_engine): DataFusion in this process, answers in a second; the
default. ``spark`` (jobs.query.spark_engine): a Spark session, for heavy scans and SQL only
Spark speaks. Both register the tables as ``rmq.<table>``, run the same saved queries
(jobs.query.saved) and return Arrow tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pyarrow as pa

from jobs.query.saved import QueryError

ENGINES = ("local", "spark")


class SqlError(QueryError):
    """SQL the engine could not plan or run (syntax, unknown table or column, types)."""

    @classmethod
    def from_engine(cls, error: BaseException) -> SqlError:
        """The engine's message on one line (DataFusion's and Spark's span several)."""
        return cls(" ".join(str(error).split()))


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool
    comment: str


class Engine(Protocol):
    name: str

    def tables(self) -> list[str]:
        """The lakehouse tables that exist in the warehouse."""
        ...

    def columns(self, table: str) -> list[Column]:
        """A table's columns with their types, NOT NULL and comments."""
        ...

    def query(self, sql: str, params: dict[str, str] | None = None) -> pa.Table:
        """The rows of ``sql``, ``:name`` parameters bound, as an Arrow table."""
        ...

    def saved(self, name: str, params: dict[str, str] | None = None) -> pa.Table:
        """The rows of saved query ``name``, its parameters checked first."""
        ...

    def close(self) -> None:
        """Give back what the engine holds (a Spark session ends its application)."""
        ...


def open_engine(name: str, warehouse: Path, master: str | None = None) -> Engine:
    """Engine ``name`` over ``warehouse`` (a Spark engine starts its session here)."""
    if name == "local":
        from jobs.query.local_engine import LocalEngine

        return LocalEngine(warehouse)
    if name == "spark":
        from jobs.lakehouse.spark_session import build_spark_session
        from jobs.query.spark_engine import SparkEngine

        return SparkEngine(build_spark_session("rmq-sql", master=master, warehouse=warehouse),
                           warehouse)
    raise ValueError(f"unknown engine {name!r}; one of {', '.join(ENGINES)}")
