"""The SQL endpoint for BI tools: ``python -m jobs sql-server`` (the Spark Thrift Server) on
127.0.0.1 over the golden warehouse, queried by a real JDBC client, Hive's Beeline (it
ships in pyspark's jars), gives the same rows as ``python -m jobs sql``.

Beeline runs once, with every query in a script: each of its runs waits ~20 s at exit (its
shutdown hook closes the already closed session again and waits for an answer the server
never sends), so one run for all queries, separated by marker rows.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyspark
import pytest
from endpoints import free_port
from test_query_engines import TRACE_QUERIES, saved_query_params

from jobs.lakehouse.spark_session import DRIVER_MEMORY_ENV
from jobs.query.local_engine import LocalEngine
from jobs.query.saved import bind_as_literals, saved_queries, without_comments

pytestmark = [pytest.mark.spark, pytest.mark.broker]

REPO = Path(__file__).resolve().parent.parent
PYSPARK_JARS = Path(pyspark.__file__).parent / "jars"
MARKER = "=== "


@pytest.fixture(scope="module")
def sql_server(golden, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The server as a user starts it, on a free port; ends it with Ctrl-C (SIGINT)."""
    registry, _ = golden
    port = free_port()
    log = tmp_path_factory.mktemp("sql-server") / "server.log"
    env = {**os.environ, DRIVER_MEMORY_ENV: "1536m",
           "RMQ_SPARK_LOG_FILE": str(log.with_suffix(".spark.log"))}
    server = subprocess.Popen(
        [sys.executable, "-m", "jobs", "--warehouse", registry.warehouse, "sql-server",
         "--port", str(port)], cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
        stderr=log.open("w"))
    assert server.stdout is not None
    ready = server.stdout.readline()  # blocks until the server says it serves (or exits)
    assert f"jdbc:hive2://127.0.0.1:{port}/rmq" in ready, (ready, log.read_text())
    yield port, Path(registry.warehouse)
    server.send_signal(signal.SIGINT)
    assert server.wait(timeout=120) == 0, log.read_text()


def beeline(port: int, queries: dict[str, str], work: Path) -> dict[str, list[dict]]:  # type: ignore[type-arg]
    """Run every query through Beeline in one session; each query's rows as dicts."""
    # Without comments: Beeline's script reader takes a quote in a comment (``broker's``) for
    # the start of a string and splits the statements wrongly.
    script = work / "queries.sql"
    statements = {name: without_comments(sql).strip().rstrip(";") for name, sql in queries.items()}
    script.write_text("".join(f"SELECT '{MARKER}{name}' AS marker;\n{sql};\n"
                              for name, sql in statements.items()))
    done = subprocess.run(
        ["java", "-cp", f"{PYSPARK_JARS}/*", "org.apache.hive.beeline.BeeLine",
         "-u", f"jdbc:hive2://127.0.0.1:{port}/rmq", "--outputformat=tsv2", "--silent=true",
         "-f", str(script)], text=True, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results: dict[str, list[str]] = {}
    current = None
    for line in done.stdout.splitlines():
        if line.startswith(MARKER):
            current = line.removeprefix(MARKER)
            results[current] = []
        elif current is not None and line not in ("marker", ""):  # Beeline echoes blanks
            results[current].append(line)
    # tsv2, not csv2: csv2 leaves arrays and maps unquoted, with their commas
    return {name: list(csv.DictReader(io.StringIO("\n".join(lines)), delimiter="\t"))
            for name, lines in results.items()}


def from_beeline(cell: str, kind: pa.DataType) -> object:
    """A Beeline tsv2 cell as the Python value the local engine gives for that type."""
    if cell == "NULL":
        return None
    if pa.types.is_timestamp(kind):
        return datetime.fromisoformat(cell).replace(tzinfo=UTC)
    if pa.types.is_integer(kind):
        return int(cell)
    if pa.types.is_floating(kind):
        return float(cell)
    if pa.types.is_boolean(kind):
        return cell == "true"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        return json.loads(cell)
    return cell


def local_rows(table: pa.Table) -> list[dict]:  # type: ignore[type-arg]
    maps = [f.name for f in table.schema if pa.types.is_map(f.type)]
    rows = table.to_pylist()
    for row in rows:
        for name in maps:
            row[name] = None if row[name] is None else dict(row[name])
    return rows


def test_beeline_gets_the_rows_python_m_jobs_sql_gets(sql_server, broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    port, warehouse = sql_server
    params = saved_query_params(broker_stores)
    # a parameter left out gets its default, as `jobs sql --saved` gives it; the queries over
    # traces and transactions have no rows in these stores (tests/test_traces_pipeline.py)
    queries = {name: bind_as_literals(query.sql, query.checked(params.get(name, {}), warehouse))
               for name, query in saved_queries().items() if name not in TRACE_QUERIES}
    # unqualified names resolve in the default schema of the URL, rmq
    queries["ad_hoc"] = ("SELECT broker, topic, count(*) AS n, max(store_time) AS newest "
                         "FROM messages GROUP BY broker, topic")
    local = LocalEngine(warehouse)
    answers = beeline(port, queries, tmp_path)
    assert set(answers) == set(queries)
    for name, sql in queries.items():
        expected = local.query(sql.replace("FROM messages", "FROM rmq.messages"))
        assert expected.num_rows > 0, name
        kinds = {f.name: f.type for f in expected.schema}
        got = [{column: from_beeline(cell, kinds[column]) for column, cell in row.items()}
               for row in answers[name]]
        assert sorted_rows(got) == sorted_rows(local_rows(expected)), name


def sorted_rows(rows: list[dict]) -> list[str]:  # type: ignore[type-arg]
    """Rows as a sorted multiset (JSON text gives mixed values a total order)."""
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)
