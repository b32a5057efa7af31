"""SQL over the lakehouse tables by name, and the saved example queries.

Every table is registered as ``rmq.<table>`` in the session catalog from the registry
(``jobs.lakehouse.tables``), so any session — the CLI's, a notebook's, a test's — sees the same
tables without sharing a metastore. Saved queries live in ``jobs/lakehouse/queries/*.sql``: a
comment header saying what the query answers and which ``:name`` parameters it takes
(Spark's named parameter markers, so values are never pasted into SQL text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from jobs.lakehouse.tables import Registry

QUERIES_DIR = Path(__file__).resolve().parent / "queries"
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


class QueryError(ValueError):
    """An unknown saved query or a missing / unexpected parameter."""


@dataclass(frozen=True)
class SavedQuery:
    name: str
    description: str
    sql: str

    @property
    def parameters(self) -> list[str]:
        body = "\n".join(line for line in self.sql.splitlines()
                         if not line.lstrip().startswith("--"))
        return sorted(set(_PARAM.findall(body)))


def saved_queries(directory: Path = QUERIES_DIR) -> dict[str, SavedQuery]:
    """Every saved query, by file name without ``.sql``."""
    queries = {}
    for path in sorted(directory.glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        header = [line.lstrip("- ").rstrip() for line in text.splitlines()
                  if line.startswith("--") and not line.startswith("-- params")]
        queries[path.stem] = SavedQuery(path.stem, " ".join(header).strip(), text)
    return queries


def run_sql(spark: SparkSession, sql: str, params: dict[str, str] | None = None,
            registry: Registry | None = None) -> DataFrame:
    """Run SQL with the lakehouse tables registered (``rmq.messages``, ...)."""
    (registry or Registry(spark)).ensure()
    return spark.sql(sql, args=params or None)


def run_saved(spark: SparkSession, name: str, params: dict[str, str] | None = None,
              registry: Registry | None = None) -> DataFrame:
    """Run a saved query, checking its parameters first."""
    queries = saved_queries()
    if name not in queries:
        raise QueryError(f"no saved query {name!r}; known: {', '.join(queries)}")
    query = queries[name]
    params = params or {}
    missing = sorted(set(query.parameters) - set(params))
    extra = sorted(set(params) - set(query.parameters))
    if missing or extra:
        raise QueryError(f"query {name!r} takes parameters {query.parameters or 'none'}; "
                         f"missing {missing or 'none'}, unexpected {extra or 'none'}")
    return run_sql(spark, query.sql, params, registry)
