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
from jobs.lakehouse.locations import Location, open_delta_table, warehouse_location
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
    location: str


class LocalEngine:
    """DataFusion over one warehouse's Delta tables."""

    name = "local"

    def __init__(self, warehouse: str | Path | Location) -> None:
        self.warehouse = warehouse_location(warehouse, "warehouse")

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
        return _Context(self, settings or {}).execute(bound)

    def saved(self, name: str, params: dict[str, str] | None = None) -> pa.Table:
        """The rows of saved query ``name``, its parameters checked first. Its steps (a
        lookup's pointers, a narrowing's listings, then the query) share one context: each
        table is registered once, and every step reads the same version of it."""
        context = _Context(self, {})
        return context.execute(self._prepared(context, name, params))

    def files_opened(self, sql: str, params: dict[str, str] | None = None) -> dict[str, int]:
        """How many data files of each table running ``sql`` opens, by DataFusion's own
        count (EXPLAIN ANALYZE): what is left after the Delta log's partition and
        statistics pruning. A table whose files were all pruned is absent."""
        return _opened(self._execute(f"EXPLAIN ANALYZE {bind_as_literals(sql, params or {})}",
                                     _UNSPLIT))

    def saved_files_opened(self, name: str, params: dict[str, str] | None = None
                           ) -> dict[str, int]:
        """:meth:`files_opened` by saved query ``name`` as :meth:`saved` runs it (its
        lookup and narrowing done first; their own steps not counted)."""
        context = _Context(self, _UNSPLIT)
        return _opened(context.execute(f"EXPLAIN ANALYZE {self._prepared(context, name, params)}"))

    def _prepared(self, context: _Context, name: str, params: dict[str, str] | None) -> str:
        """Saved query ``name``'s bound SQL, its lookup's pointers found and its
        narrowing's rows listed in ``context`` (jobs.query.lookup, jobs.query.narrowing)."""
        def query(sql: str, params: dict[str, str] | None = None) -> pa.Table:
            return context.execute(bind_as_literals(sql, params or {}))

        sql, checked = saved_statement(query, self.warehouse, name, params, context.restrict)
        return bind_as_literals(sql, checked)

    def close(self) -> None:
        """Nothing to give back: DataFusion lives in this process."""

    def _delta_table(self, table: str) -> DeltaTable:
        location = table_location(self.warehouse, table)
        if not exists(location):
            known = ", ".join(self.tables()) or "none yet"
            raise SqlError(f"no table rmq.{table} in {self.warehouse} (tables: {known})")
        return open_delta_table(location)


class _Context:
    """A DataFusion context whose tables are registered, at their latest committed
    versions (a few ms each), when a statement first names them. A statement of its own
    gets a new context: like a new Spark query it sees the last night's commits, so a shell
    left open across a load reads the new night."""

    def __init__(self, engine: LocalEngine, settings: dict[str, str]) -> None:
        self.engine = engine
        self.builder = QueryBuilder()
        self.builder.execute(f"CREATE SCHEMA {T.DATABASE}").read_all()
        for option, value in settings.items():
            self.builder.execute(f"SET {option} = {value}").read_all()
        self.registered: set[str] = set()
        self.restricted: dict[str, str] = {}  # table -> the rows a saved query reads
        self.rewritten: bool | None = None  # whether any history was rewritten: asked once

    def execute(self, bound: str) -> pa.Table:
        """The rows of bound SQL text, the tables it names registered first."""
        self._register({name.lower() for name in TABLE_REFERENCE.findall(bound)})
        try:
            # from_stream, not pa.table(): pa.table() asks pandas (1 s to import) first
            return pa.RecordBatchReader.from_stream(self.builder.execute(bound)).read_all()
        except DeltaError as error:
            raise SqlError.from_engine(error) from None

    def restrict(self, table: str, condition: str) -> None:
        """Read ``rmq.<table>`` in this context only where ``condition`` holds
        (jobs.query.narrowing); not once the table is registered, so every statement of
        the context reads the same rows."""
        if table not in self.registered:
            self.restricted[table] = condition

    def _register(self, tables: set[str]) -> None:
        tables = tables - self.registered
        current = self._current_views(tables)
        for table in sorted(tables - set(current)):
            source = _all_rows_of(table) or table
            if table in self.restricted:
                self._table(f"{table}{_WHOLE}", source)
                self._view(table, f"SELECT * FROM {T.DATABASE}.{table}{_WHOLE}")
            else:
                self._table(table, source)
        if current:
            self._table(T.HISTORY_REWRITES, T.HISTORY_REWRITES)
        for table, view in current.items():
            self._table(f"{table}{ALL_ROWS_SUFFIX}", table)
            self._view(table, view)

    def _table(self, name: str, table: str) -> None:
        """Register ``rmq.<name>`` as Delta table ``table`` (``messages_all`` is every row
        of ``messages``), unless it already is."""
        if name not in self.registered:
            self.builder.register(f"{T.DATABASE}.{name}", self.engine._delta_table(table))
            self.registered.add(name)

    def _view(self, name: str, select: str) -> None:
        """Register ``rmq.<name>`` as a view of ``select``, restricted if it is."""
        if name in self.restricted:
            select = f"SELECT * FROM ({select}) AS whole WHERE {self.restricted[name]}"
        self.builder.execute(f"CREATE VIEW {T.DATABASE}.{name} AS {select}").read_all()
        self.registered.add(name)

    def _current_views(self, tables: set[str]) -> dict[str, str]:
        """The views of the fact tables ``tables`` names that must leave superseded rows
        out (jobs.lakehouse.history): none while no broker's history was ever rewritten,
        so a query then reads the tables exactly as they are."""
        facts = sorted(t for t in tables if t in OFFSET_COLUMNS)
        if not facts:
            return {}
        if self.rewritten is None:
            self.rewritten = _history_rewritten(self.engine.warehouse)
        if not self.rewritten:
            return {}
        return {t: current_rows_sql(t, f"{T.DATABASE}.{t}{ALL_ROWS_SUFFIX}",
                                    f"{T.DATABASE}.{T.HISTORY_REWRITES}") for t in facts}


#: The suffix under which a restricted table is registered whole, under its view.
_WHOLE = "__whole"


def _history_rewritten(warehouse: Path) -> bool:
    """Whether any broker's history was ever rewritten (a few ms: DataFusion over the
    tiny history_rewrites table, no pandas)."""
    location = table_location(warehouse, T.HISTORY_REWRITES)
    if not exists(location):
        return False
    kinds = ", ".join(f"'{kind}'" for kind in HISTORY_KINDS)
    probe = QueryBuilder().register("rewrites", open_delta_table(location)).execute(
        f"SELECT count(*) AS n FROM rewrites WHERE kind IN ({kinds})")
    return pa.RecordBatchReader.from_stream(probe).read_all().column(0)[0].as_py() > 0


#: A large file is scanned as several byte ranges, each counted as opened: counted with
#: files unsplit, so that each file counts once.
_UNSPLIT = {"datafusion.optimizer.repartition_file_scans": "false"}


def _opened(plan: pa.Table) -> dict[str, int]:
    """The data files each table's scans opened, from an EXPLAIN ANALYZE plan."""
    opened: dict[str, int] = {}
    for text in plan.column("plan").to_pylist():
        for line in text.splitlines():
            scan = _SCAN.search(line)
            if scan is not None:
                table = scan.group("table")
                opened[table] = opened.get(table, 0) + int(scan.group("opened"))
    return opened


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
