"""Saved queries that say which rows of a table they use: ``-- narrow: <table> by <cte>``.

DataFusion prunes files by a query's literal predicates (partition values, then the Delta
log's column statistics), not by what a join will keep: its join filters skip row groups
of files it has already opened, and say nothing about partition columns. So
``consumer_positions``, which joins each broker's latest offsets to the two messages
around each offset, opened every ``consumer_offsets`` file (one per night) and every
``messages`` file's footer: its cost grew with the nights behind it.

A ``-- narrow: <table> by <cte>`` line in a saved query's header promises that every row
of ``rmq.<table>`` the query uses matches a row of its own CTE ``<cte>``, whose columns are
``broker`` and one column of the table. The local engine lists that CTE first (with the
CTEs it reads, and the earlier lines' narrowing in force), then reads ``rmq.<table>``, in
that query only, through a view ``WHERE <those rows as literals>``: partition values and
file statistics leave the other files out before any is opened. The SQL text is never
rewritten, so it runs as it is in Spark and any other SQL tool (Spark prunes the
partitions of a join by itself), with the same rows either way (tests/test_lookups.py):
the narrowing only leaves out rows the query's own joins would drop.

The CTEs are found in the query's text by a small scanner (strings, quoted names and
comments skipped): a full SQL parser costs a command ~0.4 s to import.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import pyarrow as pa

from jobs.query.saved import QueryError

#: ``-- narrow: <table> by <cte>`` in a saved query's header.
NARROW_LINE = re.compile(r"^--\s*narrow:\s*(\w+)\s+by\s+(\w+)\s*$", re.MULTILINE)
#: Text inlined into SQL as it is or in single quotes: nothing to escape in any dialect.
PLAIN = re.compile(r"^[\w.:+-]+$")
#: DataFusion prunes files by an IN list of at most 20 values (it rewrites it to ORs of
#: equalities); a longer list is checked row by row in every file.
PRUNABLE_LIST = 20
#: Past this many values of one broker, the table is narrowed to their range instead.
MAX_VALUES = 1000
#: The query text's tokens, as far as finding its CTEs needs: string literals, quoted
#: names and line comments (whose parentheses and commas do not count), parentheses,
#: commas, words.
_TOKEN = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|[(),]|\w+""")

Query = Callable[[str, dict[str, str]], pa.Table]
Restrict = Callable[[str, str], None]


def narrowings_of(sql: str) -> list[tuple[str, str]]:
    """The (table, cte) of each ``-- narrow:`` line, in order."""
    return [(m.group(1), m.group(2)) for m in NARROW_LINE.finditer(sql)]


def narrow(query: Query, sql: str, params: dict[str, str], restrict: Restrict) -> None:
    """For each ``-- narrow:`` line of ``sql``: list its CTE through ``query``, and have
    the engine read the table only at the listed rows (``restrict(table, condition)``).
    Stops, leaving the rest unnarrowed, at a value that cannot be inlined safely."""
    narrowing = narrowings_of(sql)
    ctes = common_table_expressions(sql) if narrowing else {}
    for table, cte in narrowing:
        condition = listed_condition(query(_listing(ctes, cte), params))
        if condition is None:
            return
        restrict(table, condition)


def cte_listing(sql: str, name: str) -> str:
    """``WITH <the CTEs name reads> SELECT DISTINCT * FROM name``, from ``sql``'s text."""
    return _listing(common_table_expressions(sql), name)


def _listing(ctes: dict[str, str], name: str) -> str:
    """:func:`cte_listing` of the CTEs already found."""
    if name not in ctes:
        raise QueryError(f"the narrowing's source {name!r} is not a CTE of the query")
    needed: list[str] = []

    def need(cte: str) -> None:
        if cte not in needed:
            for other in ctes:
                if other != cte and re.search(rf"\b{other}\b", ctes[cte]):
                    need(other)
            needed.append(cte)

    need(name)
    bodies = ",\n".join(f"{cte} AS ({ctes[cte]}\n)" for cte in needed)  # after what they read
    return f"WITH {bodies}\nSELECT DISTINCT * FROM {name}"


def common_table_expressions(sql: str) -> dict[str, str]:
    """The text of each CTE of ``WITH a AS (...), b AS (...) SELECT ...``, by name."""
    tokens = [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(sql)
              if not m.group(0).startswith("--")]
    words = [t[0].upper() for t in tokens]
    if not words or words[0] != "WITH":
        raise QueryError("a query with a narrowing starts with WITH")
    ctes: dict[str, str] = {}
    at = 1
    while True:
        if at + 2 >= len(tokens) or words[at + 1: at + 3] != ["AS", "("]:
            raise QueryError(f"expected '<name> AS (' at {tokens[at][0]!r}")
        opened = at + 2
        depth, close = 0, opened
        for close in range(opened, len(tokens)):
            depth += {"(": 1, ")": -1}.get(words[close], 0)
            if depth == 0:
                break
        ctes[tokens[at][0]] = sql[tokens[opened][2]:tokens[close][1]]
        if close + 1 >= len(tokens) or words[close + 1] != ",":
            return ctes
        at = close + 2


def listed_condition(rows: pa.Table) -> str | None:
    """:func:`pairs_condition` of a CTE's rows (columns ``broker`` and one more)."""
    if rows.num_columns != 2 or rows.column_names[0] != "broker":
        raise QueryError(f"a narrowing's CTE lists broker and one column, not "
                         f"{rows.column_names}")
    return pairs_condition(rows.column_names[1], zip(rows.column(0).to_pylist(),
                                                     rows.column(1).to_pylist(), strict=True))


def pairs_condition(column: str, pairs: Iterable[tuple[object, object]]) -> str | None:
    """A predicate true for every row whose (``broker``, ``column``) is one of ``pairs``:
    per broker, its values as IN lists the engines prune files by (their range past
    MAX_VALUES), so a file of one broker is not opened for another broker's values;
    ``FALSE`` for no pairs; None when a broker or a value is not plain text."""
    by_broker: dict[str, list[object]] = {}
    for broker, value in pairs:
        if broker is not None and value is not None:
            by_broker.setdefault(str(broker), []).append(value)
    if not all(PLAIN.match(b) for b in by_broker):
        return None
    terms = []
    for broker, values in sorted(by_broker.items()):
        values_term = values_in(column, values)
        if values_term is None:
            return None
        terms.append(f"(broker = '{broker}' AND {values_term})")
    return "(" + " OR ".join(terms) + ")" if terms else "FALSE"


def values_in(column: str, values: Iterable[object]) -> str | None:
    """``column IN (..)`` in lists short enough to prune files by; ``BETWEEN`` their
    least and greatest past MAX_VALUES; None when a value is neither an integer nor
    plain text."""
    distinct = sorted(set(values))  # type: ignore[type-var]
    if not all(isinstance(v, int) or (isinstance(v, str) and PLAIN.match(v))
               for v in distinct):
        return None
    literals = [str(v) if isinstance(v, int) else f"'{v}'" for v in distinct]
    if len(literals) > MAX_VALUES:
        return f"{column} BETWEEN {literals[0]} AND {literals[-1]}"
    lists = [f"{column} IN ({', '.join(literals[i:i + PRUNABLE_LIST])})"
             for i in range(0, len(literals), PRUNABLE_LIST)]
    return lists[0] if len(lists) == 1 else "(" + " OR ".join(lists) + ")"
