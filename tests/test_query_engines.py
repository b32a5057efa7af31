"""The query stage (jobs/query/): the in-process engine and Spark give the same rows, the CLI
answers without a JVM in every output format, and the interactive shell works from a pipe.

The warehouse is the golden one (tests/conftest.py: snapshot s1 of the four real-broker
stores, one broker each); parameters come from the stores' ground truth.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.lakehouse import tables as T
from jobs.query.local_engine import LocalEngine
from jobs.query.output import json_rows, write_result
from jobs.query.saved import QueryError, bind_as_literals, saved_queries
from jobs.query.shell import SqlShell
from jobs.query.spark_engine import SparkEngine

REPO = Path(__file__).resolve().parent.parent
#: Saved queries over message_traces and transactions, held on both engines against the
#: v5-traces store (tests/test_traces_pipeline.py).
TRACE_QUERIES = frozenset({"consume_latency", "slowest_consumptions", "failed_consumptions",
                           "undecided_transactions", "message_trace_contexts",
                           "transaction_history"})
#: Text a parameter may hold: anything but lone surrogates (not encodable) and NUL.
PARAMETER_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"),
                         max_size=40)
#: The fixtures these properties use are read-only (a warehouse, engines): safe to share.
FIXTURES_ARE_FINE = [HealthCheck.function_scoped_fixture]


def canonical(table: pa.Table) -> list[str]:
    """A result as a sorted list of JSON rows: what both engines must agree on."""
    return sorted(json.dumps(row, sort_keys=True) for row in json_rows(table))


def truth_message(broker_stores: dict[str, Path]) -> dict:  # type: ignore[type-arg]
    truth = [json.loads(line) for line in (broker_stores["v5-clean"] / "truth" /
             "messages.jsonl").read_text().splitlines()]
    return next(r for r in truth if r["acked"] and len(r["keys"]) > 1
                and r["storedTopic"] == r["topic"])


def deliveries(broker_stores: dict[str, Path], group: str) -> dict[str, list[dict]]:
    """The truth's delivery log of ``group``: each msgId's deliveries, in order."""
    log: dict[str, list[dict]] = {}
    for line in (broker_stores["v5-clean"] / "truth" / "consumed.jsonl").read_text().splitlines():
        delivery = json.loads(line)
        if delivery["group"] == group:
            log.setdefault(delivery["msgId"], []).append(delivery)
    return log


def dead_lettered(broker_stores: dict[str, Path]) -> list[str]:
    """The msgIds G_FAIL asked to consume later on every delivery (they end in its DLQ)."""
    return sorted(msg_id for msg_id, log in deliveries(broker_stores, "G_FAIL").items()
                  if all(d["status"] == "RECONSUME_LATER" for d in log))


def saved_query_params(broker_stores: dict[str, Path]) -> dict[str, dict[str, str]]:
    """Parameters of every parameterised saved query, from the v5-clean store's truth: a
    message with several keys, and a message G_FAIL retried into its DLQ."""
    sent = truth_message(broker_stores)
    return {"message_by_key": {"key": sent["keys"][1]},
            "message_by_msg_id": {"msg_id": sent["msgId"]},
            "message_by_position": {"topic": sent["topic"], "queue_id": str(sent["queueId"]),
                                    "queue_offset": str(sent["queueOffset"])},
            "message_journey": {"msg_id": dead_lettered(broker_stores)[0]}}


@pytest.fixture(scope="module")
def engines(golden, spark):  # type: ignore[no-untyped-def]
    registry, _ = golden
    warehouse = Path(registry.warehouse)
    return LocalEngine(warehouse), SparkEngine(spark, warehouse), warehouse


@pytest.mark.spark
@pytest.mark.broker
def test_every_saved_query_gives_the_same_rows_on_both_engines(engines, broker_stores):  # type: ignore[no-untyped-def]
    local, spark, warehouse = engines
    sent = truth_message(broker_stores)
    params = saved_query_params(broker_stores)
    assert set(params) | {"consumer_positions", "volume_per_topic_hour"} | \
        TRACE_QUERIES == set(saved_queries())
    for name, saved in saved_queries().items():
        if name in TRACE_QUERIES:  # these stores trace nothing: tests/test_traces_pipeline.py
            continue
        rows = local.saved(name, params.get(name))
        assert rows.num_rows > 0, name
        assert canonical(rows) == canonical(spark.saved(name, params.get(name))), name
        # its lookup and narrowing leave out files, never rows: the SQL as it is agrees
        as_written = local.query(saved.sql, saved.checked(params.get(name) or {}, warehouse))
        assert canonical(rows) == canonical(as_written), name
    for name in ("message_by_key", "message_by_msg_id", "message_by_position"):
        found = local.saved(name, params[name]).to_pylist()
        assert sent["msgId"] in {r["msg_id"] for r in found if r["broker"] == "v5-clean"}, name


@pytest.mark.spark
@pytest.mark.broker
def test_ad_hoc_sql_agrees_across_engines_and_tables(engines):  # type: ignore[no-untyped-def]
    local, spark, _ = engines
    assert spark.tables() == local.tables() == list(T.TABLES)  # Spark's registry made them all
    for sql in ("SELECT broker, topic, count(*) AS n, sum(body_size) AS bytes FROM rmq.messages "
                "GROUP BY broker, topic",
                "SELECT broker, kind, count(*) AS n FROM rmq.queue_entries GROUP BY broker, kind",
                "SELECT * FROM rmq.snapshots",
                "SELECT broker, group_name, topic, queue_id, consumer_offset "
                "FROM rmq.consumer_offsets WHERE consumer_offset > 0"):
        assert canonical(local.query(sql)) == canonical(spark.query(sql)), sql
    # columns and comments come from the same Delta log
    local_columns = {c.name: (c.nullable, c.comment) for c in local.columns(T.MESSAGES)}
    spark_columns = {c.name: (c.nullable, c.comment) for c in spark.columns(T.MESSAGES)}
    assert local_columns == spark_columns and local_columns["keys"][1]


#: How consume_latency rounds its percentiles (jobs/query/queries/consume_latency.sql).
LATENCY_PERCENTILE = "round(percentile_cont({q}) WITHIN GROUP (ORDER BY latency_ms), 2)"


@pytest.mark.spark
@pytest.mark.broker
def test_percentiles_of_whole_milliseconds_are_the_same_on_both_engines(engines) -> None:  # type: ignore[no-untyped-def]
    """percentile_cont of whole milliseconds at q = 0.5, 0.95, 0.99 is exact at two decimals
    (q * (n - 1) has two), so rounded there both engines give the exact value. Rounded to
    one decimal a value like 1,000.85 is a tie each engine's floating point breaks its own way
    (CI saw 1055.8 on DataFusion, 1055.9 on Spark): the saved query must round at two."""
    local, spark, _ = engines
    quantiles = (0.5, 0.95, 0.99)
    sql_text = (REPO / "jobs" / "query" / "queries" / "consume_latency.sql").read_text()
    assert all(LATENCY_PERCENTILE.format(q=q) in sql_text for q in quantiles)
    rows = ", ".join(f"({n}, {1000 + 7 * i})" for n in range(2, 120) for i in range(n))
    columns = ", ".join(f"{LATENCY_PERCENTILE.format(q=q)} AS p{int(q * 100)}" for q in quantiles)
    sql = (f"SELECT n, {columns} FROM (VALUES {rows}) AS t(n, latency_ms) GROUP BY n")
    exact = [{"n": n, **{f"p{int(q * 100)}": float(1000 + 7 * Decimal(str(q)) * (n - 1))
                         for q in quantiles}} for n in range(2, 120)]
    assert sorted(local.query(sql).to_pylist(), key=lambda r: r["n"]) == exact
    assert sorted(spark.query(sql).to_pylist(), key=lambda r: r["n"]) == exact


@given(value=PARAMETER_TEXT)
@settings(max_examples=200, deadline=None, suppress_health_check=FIXTURES_ARE_FINE)
def test_a_parameter_comes_back_exactly_as_given(tmp_path: Path, value: str) -> None:
    """A value bound as a literal is data, never SQL: quotes, backslashes, ``--``, ``:x``."""
    rows = LocalEngine(tmp_path).query("SELECT :v AS v, ':v' AS literal -- :v\n", {"v": value})
    assert rows.to_pylist() == [{"v": value, "literal": ":v"}]


@pytest.mark.spark
@given(value=PARAMETER_TEXT)
@settings(max_examples=25, deadline=None, suppress_health_check=FIXTURES_ARE_FINE)
def test_spark_binds_the_same_parameter_values(engines, value: str) -> None:  # type: ignore[no-untyped-def]
    local, spark, _ = engines
    sql = "SELECT :v AS v, length(:v) AS n"
    assert local.query(sql, {"v": value}).to_pylist() == spark.query(sql, {"v": value}).to_pylist()


def test_markers_in_literals_and_comments_stay_and_missing_values_are_refused() -> None:
    sql = "SELECT ':a', \"x:a\" FROM t WHERE c = :a -- :a\n AND d = :b"
    assert bind_as_literals(sql, {"a": "1", "b": "it's"}) == \
        "SELECT ':a', \"x:a\" FROM t WHERE c = '1' -- :a\n AND d = 'it''s'"
    with pytest.raises(QueryError, match="b"):
        bind_as_literals(sql, {"a": "1"})


def test_results_print_as_table_csv_and_json_lines() -> None:
    table = pa.table({"topic": ["A", None], "n": [3, 12], "keys": [["k1", "k 2"], []],
                      "props": pa.array([[("a", "1")], None], pa.map_(pa.string(), pa.string())),
                      "body": [b"\x00\xff", None]})
    text = io.StringIO()
    write_result(table, text, "table")
    lines = text.getvalue().splitlines()
    assert lines[0].split(" | ")[0].strip() == "topic" and lines[-1] == "(2 rows)"
    assert lines[2].split(" | ")[:2] == ["A    ", " 3"]  # text left, numbers right-aligned
    assert lines[3].split(" | ")[:2] == ["NULL ", "12"]
    out = io.StringIO()
    write_result(table, out, "csv")
    parsed = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert parsed[0] == {"topic": "A", "n": "3", "keys": '["k1", "k 2"]', "props": '{"a": "1"}',
                         "body": "AP8="}
    assert parsed[1]["topic"] == "" and parsed[1]["keys"] == "[]"
    out = io.StringIO()
    write_result(table, out, "jsonl", limit=1)
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        {"topic": "A", "n": 3, "keys": ["k1", "k 2"], "props": {"a": "1"}, "body": "AP8="}]


def run_sql_cli(warehouse: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobs", "--warehouse", str(warehouse), "sql",
                           *args], input=stdin, cwd=REPO, text=True, capture_output=True,
                          timeout=120)


def heavy_imports(warehouse: Path, *args: str) -> tuple[list[str], str, str]:
    """``python -m jobs --warehouse W ARGS`` (its ``main``: ``python -m jobs`` itself ends
    the process at once) run in a process that then prints which of pyspark and pandas it
    imported, and the exit code: its output lines, that verdict, and its stderr."""
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from jobs.cli import main\n"
         f"code = main(['--warehouse', {str(warehouse)!r}, *{list(args)!r}])\n"
         "print(sorted({'pyspark', 'pandas'} & set(sys.modules)), code)"],
        cwd=REPO, text=True, capture_output=True, timeout=120)
    *lines, verdict = probe.stdout.splitlines()
    return lines, verdict, probe.stderr


@pytest.mark.spark
@pytest.mark.broker
def test_lookups_and_trace_import_neither_pyspark_nor_pandas(engines, broker_stores):  # type: ignore[no-untyped-def]
    _, _, warehouse = engines
    params = saved_query_params(broker_stores)
    for name in ("message_by_key", "message_by_msg_id", "message_by_position"):
        bound = [arg for key, value in params[name].items() for arg in ("-p", f"{key}={value}")]
        lines, verdict, stderr = heavy_imports(warehouse, "sql", "--saved", name, "--format",
                                               "jsonl", *bound)
        assert verdict == "[] 0" and lines, (name, stderr)
    lines, verdict, stderr = heavy_imports(warehouse, "trace",
                                           params["message_journey"]["msg_id"])
    assert verdict == "[] 0" and "dead letter" in "\n".join(lines), stderr


@pytest.mark.spark
@pytest.mark.broker
def test_the_cli_answers_without_a_jvm_in_every_format(engines):  # type: ignore[no-untyped-def]
    local, _, warehouse = engines
    sql = ("SELECT broker, count(*) AS n, max(store_time) AS newest FROM rmq.messages "
           "GROUP BY broker ORDER BY broker")
    expected = local.query(sql).to_pylist()
    rows, verdict, stderr = heavy_imports(warehouse, "sql", sql, "--format", "jsonl")
    # neither a JVM nor pandas (pyarrow imports it on some paths: most of a second)
    assert verdict == "[] 0", stderr
    assert [json.loads(r) for r in rows] == list(json_rows(local.query(sql)))
    as_csv = run_sql_cli(warehouse, sql, "--format", "csv")
    assert [(r["broker"], int(r["n"])) for r in csv.DictReader(io.StringIO(as_csv.stdout))] == \
        [(r["broker"], r["n"]) for r in expected]
    bad = run_sql_cli(warehouse, "SELECT no_such_column FROM rmq.messages")
    assert bad.returncode == 3 and bad.stderr.startswith("error: ") and \
        len(bad.stderr.strip().splitlines()) == 1 and "no_such_column" in bad.stderr


@pytest.mark.spark
@pytest.mark.broker
def test_the_shell_runs_a_script_from_a_pipe(engines, broker_stores):  # type: ignore[no-untyped-def]
    local, _, warehouse = engines
    sent = truth_message(broker_stores)
    script = "\n".join([
        "\\d", "\\d rmq.snapshots",
        "SELECT broker, count(*) AS n", "FROM rmq.messages", "GROUP BY broker;",
        "\\format jsonl", f"\\saved message_by_msg_id msg_id={sent['msgId']}",
        "SELECT nope FROM rmq.messages;", "\\saved no_such_query", "\\q",
        "SELECT 'after quit';"])
    result = run_sql_cli(warehouse, stdin=script + "\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert [line for line in out if line.startswith("rmq.")][:len(local.tables())] == \
        [f"rmq.{t}" for t in local.tables()]
    assert any(line.startswith("snapshot_id ") and "string" in line for line in out)
    counts = local.query("SELECT broker, count(*) AS n FROM rmq.messages GROUP BY broker")
    for row in counts.to_pylist():
        assert any(line.split(" | ")[0].strip() == row["broker"] and
                   line.split(" | ")[1].strip() == str(row["n"]) for line in out)
    found = [json.loads(line) for line in out if line.startswith("{")]
    assert found and {r["msg_id"] for r in found} == {sent["msgId"]}
    assert sum(line.startswith("error:") for line in out) == 2
    assert "after quit" not in result.stdout and "rmq=>" not in result.stdout


@pytest.mark.spark
@pytest.mark.broker
def test_tab_completes_tables_columns_saved_queries_and_commands(engines):  # type: ignore[no-untyped-def]
    local, _, _ = engines
    shell = SqlShell(local, out=io.StringIO())
    assert shell.candidates("rmq.me", "SELECT * FROM rmq.me") == [
        "rmq.message_lookup", "rmq.message_traces", "rmq.messages"]
    assert shell.candidates("rmq.con", "SELECT * FROM rmq.con") == sorted(
        f"rmq.{t}" for t in local.tables() if t.startswith("con"))
    assert "offset_msg_id" in shell.candidates("off", "SELECT off FROM rmq.messages")
    assert shell.candidates("message_by", "\\saved message_by") == [
        "message_by_key", "message_by_msg_id", "message_by_position"]
    assert shell.candidates("\\f", "\\f") == ["\\format"]


@pytest.mark.spark
@pytest.mark.broker
def test_tables_counts_every_tables_rows_from_its_delta_log(engines, tmp_path):  # type: ignore[no-untyped-def]
    """``python -m jobs tables`` reads the logs' row counts (no JVM, no scan): each equals
    count(*) over the table."""
    local, _, warehouse = engines
    listed = subprocess.run([sys.executable, "-m", "jobs", "--warehouse", str(warehouse),
                             "tables"], cwd=REPO, text=True, capture_output=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: int(line.split()[1].replace(",", ""))
            for line in listed.stdout.splitlines()}
    assert rows == {f"rmq.{t}": local.query(f"SELECT count(*) AS n FROM rmq.{t}")["n"][0].as_py()
                    for t in local.tables()}
    assert rows["rmq.messages"] > 0
    empty = subprocess.run([sys.executable, "-m", "jobs", "--warehouse", str(tmp_path), "tables"],
                           cwd=REPO, text=True, capture_output=True, timeout=120)
    assert empty.returncode == 0 and empty.stdout.startswith("no tables in ")


@pytest.mark.spark
@pytest.mark.broker
def test_each_journey_equals_the_truths_delivery_log(engines, broker_stores):  # type: ignore[no-untyped-def]
    """For every message G_FAIL kept failing, its journey from the tables holds exactly
    the copies the consumer was given (the original, then each %RETRY% copy, by queue
    position and reconsume times), each preceded by its delay copy, and one dead-letter
    copy after the last, reconsumed once more; G_FAIL's committed offsets had passed every
    delivered copy. The CLI prints the same journey."""
    local, _, warehouse = engines
    failing = deliveries(broker_stores, "G_FAIL")
    dead = dead_lettered(broker_stores)
    assert len(dead) >= 10
    for msg_id in dead:
        rows = [r for r in local.saved("message_journey", {"msg_id": msg_id}).to_pylist()
                if r["broker"] == "v5-clean"]
        copies = {r["physical_offset"]: r for r in rows}.values()
        delivered = [(d["queueTopic"], d["queueId"], d["queueOffset"], d["reconsumeTimes"])
                     for d in failing[msg_id]]
        assert [(c["topic"], c["queue_id"], c["queue_offset"], c["reconsume_times"])
                for c in copies if c["step"] in ("stored", "retry")] == delivered, msg_id
        steps = [c["step"] for c in copies]
        assert steps == ["stored"] + ["delay", "retry"] * (len(delivered) - 1) + \
            ["dead letter"], (msg_id, steps)
        last = list(copies)[-1]
        assert (last["topic"], last["reconsume_times"]) == ("%DLQ%G_FAIL", len(delivered))
        assert last["retry_topic"] == failing[msg_id][0]["topic"]
        passed = {(r["topic"], r["queue_offset"]): r["passed"] for r in rows
                  if r["group_name"] == "G_FAIL"}
        assert passed and all(passed.values()), (msg_id, passed)
    printed = subprocess.run([sys.executable, "-m", "jobs", "--warehouse", str(warehouse),
                              "trace", dead[0]], cwd=REPO, text=True, capture_output=True,
                             timeout=120)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.count("dead letter") == 1 and "%DLQ%G_FAIL" in printed.stdout
    unknown = subprocess.run([sys.executable, "-m", "jobs", "--warehouse", str(warehouse),
                              "trace", "0" * 32], cwd=REPO, text=True, capture_output=True,
                             timeout=120)
    assert unknown.returncode == 3 and "no message" in unknown.stdout
