"""The saved queries (``jobs/query/queries/*.sql``) and their ``:name`` parameters.

Each file is one query in the dialect both engines run (DataFusion and Spark SQL agree on
the functions the queries use; tests/test_query_engines.py runs every query on both and
compares the rows). Its comment header says what the query answers; a ``-- params:`` line
names its parameters. Parameters are always strings. A ``-- lookup:`` line says the query
finds messages by a value message_lookup indexes (jobs.query.lookup reads few files then).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

QUERIES_DIR = Path(__file__).resolve().parent / "queries"
#: A named parameter marker ``:name`` (not ``::type`` casts, not inside a word).
PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


class QueryError(ValueError):
    """An unknown saved query or a missing / unexpected parameter."""


@dataclass(frozen=True)
class SavedQuery:
    name: str
    description: str
    sql: str

    @property
    def parameters(self) -> list[str]:
        return sorted(set(PARAMETER.findall(without_comments(self.sql))))

    def checked(self, params: dict[str, str]) -> dict[str, str]:
        """``params`` when they are exactly this query's parameters, else a QueryError."""
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
                  if line.startswith("--") and not line.startswith(("-- params", "-- lookup"))]
        queries[path.stem] = SavedQuery(path.stem, " ".join(header).strip(), text)
    return queries


def saved_query(name: str) -> SavedQuery:
    """The saved query ``name``, or a QueryError listing the known ones."""
    queries = saved_queries()
    if name not in queries:
        raise QueryError(f"no saved query {name!r}; known: {', '.join(queries)}")
    return queries[name]


def saved_statement(name: str, params: dict[str, str] | None) -> tuple[str, dict[str, str]]:
    """Saved query ``name``'s SQL and ``params``, checked to be exactly its parameters."""
    query = saved_query(name)
    return query.sql, query.checked(params or {})


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
