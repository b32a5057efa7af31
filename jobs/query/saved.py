"""The saved queries (``jobs/query/queries/*.sql``) and their ``:name`` parameters.

Each file is one query in the dialect both engines run (DataFusion and Spark SQL agree on
the functions the queries use; tests/test_query_engines.py runs every query on both and
compares the rows). Its comment header says what the query answers; a ``-- params:`` line
names its parameters. Parameters are always strings. A ``-- lookup:`` line says the query
finds messages by a value message_lookup indexes (jobs.query.lookup reads few files then).
A ``-- default: <param> = last <N> days of <table>.<date column>`` line makes a date
parameter optional: left out, it is the first of the last N days the table holds (its
newest partition value, from the Delta log: nothing is scanned), so a query over recent
days reads the same few partitions however long the history behind them. A
``-- narrow: <table> by <cte>`` line says the query uses only the rows of a table its own
CTE lists (jobs.query.narrowing reads just those on the local engine).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

QUERIES_DIR = Path(__file__).resolve().parent / "queries"
#: A named parameter marker ``:name`` (not ``::type`` casts, not inside a word).
PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
#: ``-- default: since = last 7 days of messages.store_date``
DEFAULT_LINE = re.compile(r"^--\s*default:\s*(\w+)\s*=\s*last\s+(\d+)\s+days?\s+of\s+"
                          r"(\w+)\.(\w+)\s*$", re.MULTILINE)


class QueryError(ValueError):
    """An unknown saved query or a missing / unexpected parameter."""


@dataclass(frozen=True)
class RecentDays:
    """A date parameter's default: the first of the last ``days`` days ``table`` holds,
    by the newest value of its partition column ``column``."""

    days: int
    table: str
    column: str

    def value(self, warehouse: Path | str | None) -> str:
        """ISO date; with no warehouse or no rows yet, the first of the last ``days``
        days up to today (UTC)."""
        newest = newest_partition_date(warehouse, self.table, self.column) \
            if warehouse is not None else None
        if newest is None:
            newest = datetime.now(UTC).date()
        return (newest - timedelta(days=self.days - 1)).isoformat()


def newest_partition_date(warehouse: Path | str, table: str, column: str) -> date | None:
    """The newest value of date partition column ``column`` among ``table``'s live files,
    from its Delta log; None for a table with no files (or none yet)."""
    import pyarrow as pa

    from jobs.lakehouse.driver_rows import exists
    from jobs.lakehouse.locations import open_delta_table
    from jobs.lakehouse.tables import table_location

    location = table_location(warehouse, table)
    if not exists(location):
        return None
    actions = pa.RecordBatchReader.from_stream(
        open_delta_table(location).get_add_actions(flatten=True)).read_all()
    name = f"partition.{column}"
    if actions.num_rows == 0 or name not in actions.column_names:
        return None
    values = [v for v in actions.column(name).to_pylist() if v is not None]
    newest = max(values, default=None)
    return date.fromisoformat(str(newest)) if newest is not None else None


@dataclass(frozen=True)
class SavedQuery:
    name: str
    description: str
    sql: str
    defaults: dict[str, RecentDays] = field(default_factory=dict)

    @property
    def parameters(self) -> list[str]:
        return sorted(set(PARAMETER.findall(without_comments(self.sql))))

    def checked(self, params: dict[str, str],
                warehouse: Path | str | None = None) -> dict[str, str]:
        """``params`` when they are exactly this query's parameters (those with a default
        may be left out: they get it, from ``warehouse``), else a QueryError."""
        params = {**{name: default.value(warehouse) for name, default in self.defaults.items()
                     if name not in params}, **params}
        missing = sorted(set(self.parameters) - set(params))
        extra = sorted(set(params) - set(self.parameters))
        if missing or extra:
            raise QueryError(f"query {self.name!r} takes parameters {self.parameters or 'none'}; "
                             f"missing {missing or 'none'}, unexpected {extra or 'none'}")
        return params


def without_comments(sql: str) -> str:
    """``sql`` without its ``--`` comment lines."""
    return "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))


def saved_queries(directory: Path = QUERIES_DIR) -> dict[str, SavedQuery]:
    """Every saved query, by file name without ``.sql``."""
    queries = {}
    for path in sorted(directory.glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        header = [line.lstrip("- ").rstrip() for line in text.splitlines()
                  if line.startswith("--")
                  and not line.startswith(("-- params", "-- lookup", "-- default", "-- narrow"))]
        defaults = {m.group(1): RecentDays(int(m.group(2)), m.group(3), m.group(4))
                    for m in DEFAULT_LINE.finditer(text)}
        queries[path.stem] = SavedQuery(path.stem, " ".join(header).strip(), text, defaults)
    return queries


def saved_query(name: str) -> SavedQuery:
    """The saved query ``name``, or a QueryError listing the known ones."""
    queries = saved_queries()
    if name not in queries:
        raise QueryError(f"no saved query {name!r}; known: {', '.join(queries)}")
    return queries[name]


def saved_statement(name: str, params: dict[str, str] | None,
                    warehouse: Path | str | None = None) -> tuple[str, dict[str, str]]:
    """Saved query ``name``'s SQL and ``params``, checked to be exactly its parameters
    (defaults from ``warehouse``'s tables)."""
    query = saved_query(name)
    return query.sql, query.checked(params or {}, warehouse)


def parse_parameters(items: list[str]) -> dict[str, str]:
    """``["key=value", ...]`` from the command line as a dict."""
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise QueryError(f"parameter {item!r} is not KEY=VALUE")
        params[key] = value
    return params


def sql_string_literal(value: str) -> str:
    """``value`` as a standard SQL string literal: quotes doubled, nothing else special.

    DataFusion's parser (like standard SQL) gives backslashes no meaning in ``'...'``, so
    doubling ``'`` is the whole escaping; tests/test_query_engines.py checks arbitrary
    strings come back unchanged."""
    return "'" + value.replace("'", "''") + "'"


def bind_as_literals(sql: str, params: dict[str, str]) -> str:
    """``sql`` with each ``:name`` marker outside comments and string literals replaced by
    its value as a string literal, for an engine without named parameters."""
    unknown = sorted(set(PARAMETER.findall(without_comments(sql))) - set(params))
    if unknown:
        raise QueryError(f"no value for parameter(s) {unknown}")
    pieces = _LITERALS_AND_COMMENTS.split(sql)  # text, literal, text, literal, ..., text
    for at in range(0, len(pieces), 2):
        pieces[at] = PARAMETER.sub(lambda m: sql_string_literal(params[m.group(1)]), pieces[at])
    return "".join(pieces)


#: String literals, quoted identifiers and line comments, which parameters never sit in.
_LITERALS_AND_COMMENTS = re.compile(r"""('(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*)""")
