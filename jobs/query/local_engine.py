"""SQL over the lakehouse tables in this process: Apache DataFusion reading the Delta tables
through delta-rs (``deltalake.QueryBuilder``). No JVM, so a query answers in a second.

Why DataFusion: delta-rs (already what maintenance and the alert task use) ships it, and
its table provider reads the Delta log itself: partition pruning and file skipping by the
log's column statistics, the same as Spark's. DuckDB reads Delta only through an extension
it downloads at run time, and Polars would need the tables scanned into it first.

Tables are registered as ``rmq.<table>`` when a query names them (each registration reads
that table's Delta log; registering all eighteen for every query would cost ~0.4 s).
DataFusion has no named parameters: ``:name`` markers are bound as string literals
(``jobs.query.saved.bind_as_literals``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError

from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import exists
from jobs.lakehouse.history import (
    ALL_ROWS_SUFFIX,
    HISTORY_KINDS,
    OFFSET_COLUMNS,
    current_rows_sql,
)
from jobs.lakehouse.tables import table_location
from jobs.query.engine import Column, SqlError
from jobs.query.lookup import saved_statement
from jobs.query.saved import bind_as_literals

#: A Parquet scan of EXPLAIN ANALYZE: the table of its first file and the files it opened.
_SCAN = re.compile(rf"DataSourceExec: file_groups=\{{.*?/{T.DATABASE}\.db/(?P<table>\w+)/"
                   r".*?files_opened=(?P<opened>\d+)")
#: ``rmq.<table>`` (or ``rmq."<table>"``) anywhere in a query.
TABLE_REFERENCE = re.compile(r"\brmq\s*\.\s*\"?(\w+)\"?", re.IGNORECASE)


@dataclass(frozen=True)
class TableFiles:
    name: str
    rows: int | None  # None when a file has no row count statistic
    files: int
    bytes: int
    location: Path


class LocalEngine:
    """DataFusion over one warehouse's Delta tables."""

    name = "local"

    def __init__(self, warehouse: Path) -> None:
        self.warehouse = Path(warehouse)

    def tables(self) -> list[str]:
        """The lakehouse tables that exist in this warehouse, in the registry's order."""
        return [name for name in T.TABLES if exists(table_location(self.warehouse, name))]

    def files(self, table: str) -> TableFiles:
        """Rows, data files and bytes of ``table``'s current version, from its Delta log
        alone (each file's ``numRecords`` statistic): nothing is scanned."""
        actions = pa.RecordBatchReader.from_stream(
            self._delta_table(table).get_add_actions(flatten=True)).read_all()
        rows = actions["num_records"].to_pylist() if actions.num_rows else []
        return TableFiles(table, None if None in rows else sum(rows), actions.num_rows,
                          sum(actions["size_bytes"].to_pylist()),
                          table_location(self.warehouse, table))

    def columns(self, table: str) -> list[Column]:
        """``table``'s columns as its Delta log records them (type, NOT NULL, comment)."""
        schema = self._delta_table(table).schema()
        return [Column(field.name, _type_name(field.type), field.nullable,
                       str((field.metadata or {}).get("comment", "")))
                for field in schema.fields]

    def query(self, sql: str, params: dict[str, str] | None = None) -> pa.Table:
        """The rows of ``sql`` (with ``:name`` parameters bound) as an Arrow table."""
        return self._execute(bind_as_literals(sql, params or {}))

    def _execute(self, bound: str, settings: dict[str, str] | None = None) -> pa.Table:
        """Run bound SQL text with DataFusion ``settings`` for this statement alone."""
        builder = self._builder({name.lower() for name in TABLE_REFERENCE.findall(bound)},
                                settings or {})
        try:
            # from_stream, not pa.table(): pa.table() asks pandas (1 s to import) first
            return pa.RecordBatchReader.from_stream(builder.execute(bound)).read_all()
        except DeltaError as error:
            raise SqlError.from_engine(error) from None

    def saved(self, name: str, params: dict[str, str] | None = None) -> pa.Table:
        """The rows of saved query ``name``, its parameters checked first."""
        return self.query(*saved_statement(self.query, self.warehouse, name, params))

    def files_opened(self, sql: str, params: dict[str, str] | None = None) -> dict[str, int]:
        """How many data files of each table running ``sql`` opens, by DataFusion's own
        count (EXPLAIN ANALYZE): what is left after the Delta log's partition and
        statistics pruning. A table whose files were all pruned is absent."""
        # A large file is scanned as several byte ranges, each counted as opened: counted
        # here with files unsplit, so that each file counts once.
        plan = self._execute(f"EXPLAIN ANALYZE {bind_as_literals(sql, params or {})}",
                             {"datafusion.optimizer.repartition_file_scans": "false"})
        opened: dict[str, int] = {}
        for text in plan.column("plan").to_pylist():
            for line in text.splitlines():
                scan = _SCAN.search(line)
                if scan is not None:
                    table = scan.group("table")
                    opened[table] = opened.get(table, 0) + int(scan.group("opened"))
        return opened

    def close(self) -> None:
        """Nothing to give back: DataFusion lives in this process."""

    def _builder(self, tables: set[str], settings: dict[str, str]) -> QueryBuilder:
        """A DataFusion context for one statement, with ``tables`` registered at their
        latest committed versions (a few ms each): like a new Spark query, each statement
        sees the last night's commits, so a shell left open across a load reads the new
        night, and a saved lookup's later steps never read a table older than its first."""
        builder = QueryBuilder()
        builder.execute(f"CREATE SCHEMA {T.DATABASE}").read_all()
        for option, value in settings.items():
            builder.execute(f"SET {option} = {value}").read_all()
        current = self._current_views(tables)
        for table in sorted(tables - set(current)):
            raw = _all_rows_of(table)
            if raw is not None:  # rmq.messages_all: every row, superseded ones included
                builder.register(f"{T.DATABASE}.{table}", self._delta_table(raw))
            else:
                builder.register(f"{T.DATABASE}.{table}", self._delta_table(table))
        if current and T.HISTORY_REWRITES not in tables:
            builder.register(f"{T.DATABASE}.{T.HISTORY_REWRITES}",
                             self._delta_table(T.HISTORY_REWRITES))
        for table, view in current.items():
            if f"{table}{ALL_ROWS_SUFFIX}" not in tables:
                builder.register(f"{T.DATABASE}.{table}{ALL_ROWS_SUFFIX}",
                                 self._delta_table(table))
            builder.execute(f"CREATE VIEW {T.DATABASE}.{table} AS {view}").read_all()
        return builder

    def _current_views(self, tables: set[str]) -> dict[str, str]:
        """The views of the fact tables ``tables`` names that must leave superseded rows
        out (jobs.lakehouse.history): none while no broker's history was ever rewritten,
        so a query then reads the tables exactly as they are."""
        facts = sorted(t for t in tables if t in OFFSET_COLUMNS)
        if not facts or not self._history_rewritten():
            return {}
        return {t: current_rows_sql(t, f"{T.DATABASE}.{t}{ALL_ROWS_SUFFIX}",
                                    f"{T.DATABASE}.{T.HISTORY_REWRITES}") for t in facts}

    def _history_rewritten(self) -> bool:
        """Whether any broker's history was ever rewritten (a few ms: DataFusion over the
        tiny history_rewrites table, no pandas)."""
        location = table_location(self.warehouse, T.HISTORY_REWRITES)
        if not exists(location):
            return False
        kinds = ", ".join(f"'{kind}'" for kind in HISTORY_KINDS)
        probe = QueryBuilder().register("rewrites", DeltaTable(str(location))).execute(
            f"SELECT count(*) AS n FROM rewrites WHERE kind IN ({kinds})")
        return pa.RecordBatchReader.from_stream(probe).read_all().column(0)[0].as_py() > 0

    def _delta_table(self, table: str) -> DeltaTable:
        location = table_location(self.warehouse, table)
        if not exists(location):
            known = ", ".join(self.tables()) or "none yet"
            raise SqlError(f"no table rmq.{table} in {self.warehouse} (tables: {known})")
        return DeltaTable(str(location))


def _all_rows_of(name: str) -> str | None:
    """The fact table ``rmq.<table>_all`` stands for (every row), None for other names."""
    base = name.removesuffix(ALL_ROWS_SUFFIX)
    return base if base != name and base in OFFSET_COLUMNS else None


def _type_name(data_type: object) -> str:
    """A delta-rs type as SQL people read it: ``string``, ``array<string>``, ``map<...>``."""
    kind = getattr(data_type, "type", None)
    if isinstance(kind, str) and kind not in ("array", "map", "struct"):
        return kind
    if kind == "array":
        return f"array<{_type_name(data_type.element_type)}>"  # type: ignore[attr-defined]
    if kind == "map":
        return (f"map<{_type_name(data_type.key_type)}, "  # type: ignore[attr-defined]
                f"{_type_name(data_type.value_type)}>")  # type: ignore[attr-defined]
    if kind == "struct":
        fields = ", ".join(f"{f.name}: {_type_name(f.type)}"
                           for f in data_type.fields)  # type: ignore[attr-defined]
        return f"struct<{fields}>"
    return str(data_type)
