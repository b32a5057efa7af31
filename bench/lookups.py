"""Lookups and saved queries over warehouses of 1 M and 10 M messages (issue 21's benchmark).

A warehouse is built the way the nightly DAG fills one: a synthetic broker store
(bench/growing_broker.py: the load bench's record generator, 100-byte bodies, three
topics of four queues, keys ``order-<i>`` unique and ``user-<i % 97>`` shared, three
nights of commitlog kept) grows by ``messages / nights`` messages before each night; each
night is loaded (``jobs.load.job.load_snapshot``, engine ``auto`` and the driver's
delta-rs registry, as the DAG's load task runs it) and
maintained (``jobs.maintain.maintenance.maintain_tables``, what the DAG's ``maintain`` task
runs). A night's messages span a day of store time, so ``messages`` gets a ``store_date``
partition per night, as a real broker's would.

Then each saved query and ``trace`` run as a user runs them: ``python -m jobs sql --saved``
(and ``python -m jobs trace``) in a fresh process per run, on the in-process engine
(median of ``--repeat`` runs) and on Spark (``--spark-repeat`` runs); ``SELECT 1`` measures
start-up alone. The baseline is each lookup query's own SQL run as ad hoc SQL, which
nothing narrows (a full scan, local engine only). Files read per query are DataFusion's
own count (EXPLAIN ANALYZE, data files opened after the Delta log's pruning), over the
lookup table's steps and the final query, counted in this process.

Usage: python bench/lookups.py --messages 1000000 [--nights 30] [--no-spark]
       python bench/lookups.py --messages 10000000
       python bench/lookups.py --summary        (the tables of every size measured)
Results: .cache/bench/lookups/<messages>.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from commitlog_decode import uniq_key  # noqa: E402
from growing_broker import GrowingBroker  # noqa: E402

BROKER = "lookup-bench"
FIRST_NIGHT = datetime(2026, 1, 1, 2, tzinfo=UTC)
RESULTS = ROOT / ".cache" / "bench" / "lookups"


def msg_id(index: int) -> str:
    """The UNIQ_KEY the generator gives message ``index``."""
    return uniq_key(index)


def build(work: Path, messages: int, nights: int) -> list[dict]:
    """A fresh warehouse of ``messages`` messages over ``nights`` nightly loads, each
    followed by the DAG's maintenance; returns the seconds of each night's steps."""
    from jobs.lakehouse.spark_session import SparkOnDemand, build_spark_session
    from jobs.lakehouse.tables import Registry
    from jobs.load.job import LoadOptions, load_snapshot
    from jobs.maintain.maintenance import maintain_tables
    from jobs.snapshot.manifest import snapshot_id_for

    shutil.rmtree(work, ignore_errors=True)
    warehouse = work / "warehouse"
    store = GrowingBroker(work / "store", messages // nights)
    spark = SparkOnDemand(lambda: build_spark_session("lookup-bench", warehouse=warehouse))
    timings = []
    try:
        for night in range(1, nights + 1):
            clock = time.monotonic()
            store.grow()
            grown = time.monotonic()
            snapshot_id = snapshot_id_for(FIRST_NIGHT + timedelta(days=night - 1))
            summary = load_snapshot(spark, BROKER, snapshot_id, store.store, LoadOptions(),
                                    registry=Registry(None, warehouse))
            loaded = time.monotonic()
            maintain_tables(warehouse, BROKER, progress=lambda _line: None)
            done = time.monotonic()
            timings.append({"night": night, "grow_s": round(grown - clock, 2),
                            "load_s": round(loaded - grown, 2),
                            "maintain_s": round(done - loaded, 2),
                            "messages_rows": summary.results["messages"].rows,
                            "spark_started": spark.session is not None})
            print(f"night {night}: grow {grown - clock:.1f} s, load {loaded - grown:.1f} s, "
                  f"maintain {done - loaded:.1f} s", flush=True)
    finally:
        if spark.session is not None:
            spark.session.stop()
    return timings


def cases(messages: int) -> dict[str, list[str]]:
    """The command-line arguments of each measured query (after ``python -m jobs``).
    Lookups ask for a message of the middle night, so no file order favours them."""
    from growing_broker import QUEUES, TOPICS

    index = messages // 2 + 7
    topic, queue, queue_offset = TOPICS[index % 3], index % QUEUES, index // 12
    sql = ["sql", "--format", "jsonl"]
    return {
        "start-up (SELECT 1)": [*sql, "SELECT 1"],
        "message_by_key": [*sql, "--saved", "message_by_key", "-p", f"key=order-{index:012d}"],
        "message_by_key (shared by 1 in 97)": [*sql, "--saved", "message_by_key", "-p",
                                               f"key=user-{index % 97:04d}"],
        "message_by_msg_id": [*sql, "--saved", "message_by_msg_id", "-p",
                              f"msg_id={msg_id(index)}"],
        "message_by_msg_id (offsetMsgId)": [*sql, "--saved", "message_by_msg_id", "-p",
                                            "msg_id={offset_msg_id}"],
        "message_by_position": [*sql, "--saved", "message_by_position", "-p", f"topic={topic}",
                                "-p", f"queue_id={queue}", "-p", f"queue_offset={queue_offset}"],
        "message_journey": [*sql, "--saved", "message_journey", "-p", f"msg_id={msg_id(index)}"],
        "trace": ["trace", msg_id(index)],
        "volume_per_topic_hour": [*sql, "--saved", "volume_per_topic_hour"],
        "consumer_positions": [*sql, "--saved", "consumer_positions"],
    }


def offset_msg_id_of(warehouse: Path, uniq: str) -> str:
    from jobs.query.local_engine import LocalEngine

    rows = LocalEngine(warehouse).saved("message_by_msg_id", {"msg_id": uniq}).to_pylist()
    return str(rows[0]["offset_msg_id"])


def seconds(warehouse: Path, engine: str, args: list[str]) -> tuple[float, int]:
    """Wall seconds of one CLI run, and the lines it printed."""
    command = [sys.executable, "-m", "jobs", "--warehouse", str(warehouse), *args]
    if args[0] in ("sql", "trace"):
        command += ["--engine", engine]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, len(done.stdout.splitlines())


def files_read(warehouse: Path, args: list[str]) -> dict[str, int]:
    """Data files the in-process engine opens for the query, per table: the lookup
    table's steps and the query itself (trace runs message_journey)."""
    from jobs.query import lookup
    from jobs.query.local_engine import LocalEngine

    if args[0] == "trace":
        args = ["sql", "--saved", "message_journey", "-p", f"msg_id={args[1]}"]
    saved = saved_of(args)
    if saved is None:
        return dict(LocalEngine(warehouse).files_opened(args[-1]))
    name, params = saved
    engine = LocalEngine(warehouse)
    opened: Counter[str] = Counter()

    def counted(sql: str, bound: dict[str, str]):  # type: ignore[no-untyped-def]
        opened.update(engine.files_opened(sql, bound))
        return engine.query(sql, bound)

    sql, checked = lookup.saved_statement(counted, warehouse, name, params)
    opened.update(engine.files_opened(sql, checked))
    return dict(opened)


def saved_of(args: list[str]) -> tuple[str, dict[str, str]] | None:
    """The saved query and parameters a ``sql --saved NAME -p K=V ...`` command names."""
    if "--saved" not in args:
        return None
    at = args.index("--saved")
    return args[at + 1], dict(a.split("=", 1) for a in args[at + 2:] if a != "-p")


def table_files(warehouse: Path) -> dict[str, int]:
    from jobs.lakehouse import tables as T
    from jobs.query.local_engine import LocalEngine

    engine = LocalEngine(warehouse)
    return {name: engine.files(name).files
            for name in (T.MESSAGES, T.MESSAGE_LOOKUP, T.QUEUE_ENTRIES, T.CONSUMER_OFFSETS)}


def full_scans(measured: dict[str, list[str]]) -> dict[str, list[str]]:
    """The baseline: each saved lookup query's own SQL, parameters bound, run as ad hoc
    SQL, which nothing narrows (what every lookup cost before message_lookup)."""
    from jobs.query.lookup import lookup_of
    from jobs.query.saved import bind_as_literals, saved_query

    scans = {}
    for name, args in measured.items():
        saved = saved_of(args)
        if saved is not None and lookup_of(saved_query(saved[0]).sql):
            scans[f"{name}, full scan"] = ["sql", "--format", "jsonl",
                                           bind_as_literals(saved_query(saved[0]).sql, saved[1])]
    return scans


def measure(warehouse: Path, messages: int, repeat: int, spark_repeat: int,
            only: list[str] | None = None) -> dict:
    measured = cases(messages)
    uniq = msg_id(messages // 2 + 7)
    offset_id = offset_msg_id_of(warehouse, uniq)
    for args in measured.values():
        args[:] = [a.replace("{offset_msg_id}", offset_id) for a in args]
    measured.update(full_scans(measured))
    if only:
        measured = {name: args for name, args in measured.items() if name in only}
    results = {}
    for name, args in measured.items():
        local, spark, lines = [], [], 0
        for run in range(max(repeat, spark_repeat)):
            if run < repeat:
                took, lines = seconds(warehouse, "local", args)
                local.append(took)
            if run < spark_repeat and not name.endswith("full scan"):
                spark.append(seconds(warehouse, "spark", args)[0])
        results[name] = {"local_s": round(statistics.median(local), 3),
                         "spark_s": round(statistics.median(spark), 2) if spark else None,
                         "local_runs": local, "spark_runs": spark, "lines": lines,
                         "files_read": files_read(warehouse, args)}
        print(f"{name:34} local {results[name]['local_s']:6.2f} s  spark "
              f"{results[name]['spark_s'] or float('nan'):6.2f} s  files "
              f"{results[name]['files_read']}", flush=True)
    return results


def summarize() -> None:
    runs = {int(p.stem): json.loads(p.read_text()) for p in RESULTS.glob("[0-9]*.json")
            if p.stem.isdigit()}
    if not runs:
        sys.exit("nothing measured yet")
    sizes = sorted(runs)
    print("| query | " + " | ".join(f"{s:,} local s | {s:,} spark s | files read"
                                    for s in sizes) + " |")
    print("|---|" + "---:|---:|---|" * len(sizes))
    for name in runs[sizes[0]]["queries"]:
        cells = []
        for size in sizes:
            r = runs[size]["queries"][name]
            spark = f"{r['spark_s']:.2f}" if r["spark_s"] is not None else "-"
            files = ", ".join(f"{t} {n}" for t, n in sorted(r["files_read"].items()))
            cells.append(f"{r['local_s']:.2f} | {spark} | {files}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    for size in sizes:
        run = runs[size]
        loads = [n["load_s"] for n in run["nights"]]
        print(f"\n{size:,} messages in {run['nights_count']} nights: table files "
              f"{run['table_files']}; load s per night median {statistics.median(loads):.1f}, "
              f"maintain median {statistics.median(n['maintain_s'] for n in run['nights']):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, help="messages in the warehouse")
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3, help="runs per query, local engine")
    parser.add_argument("--spark-repeat", type=int, default=1, help="runs per query, Spark")
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--reuse", action="store_true", help="measure the warehouse built "
                        "by an earlier run")
    parser.add_argument("--only", action="append", metavar="QUERY", help="measure only this "
                        "query again (with --reuse), keeping the other results")
    parser.add_argument("--summary", action="store_true")
    args = parser.parse_args()
    if args.summary:
        summarize()
        return
    if not args.messages:
        parser.error("--messages is required")
    work = RESULTS / f"work-{args.messages}"
    out = RESULTS / f"{args.messages}.json"
    built = RESULTS / f"{args.messages}-nights.json"
    if not args.reuse:
        built.parent.mkdir(parents=True, exist_ok=True)
        built.write_text(json.dumps(build(work, args.messages, args.nights)))
    nights = json.loads(built.read_text())
    queries = measure(work / "warehouse", args.messages, args.repeat,
                      0 if args.no_spark else args.spark_repeat, args.only)
    if args.only:
        queries = {**json.loads(out.read_text())["queries"], **queries}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"messages": args.messages, "nights_count": args.nights,
                               "nights": nights, "queries": queries,
                               "table_files": table_files(work / "warehouse")}, indent=2))
    summarize()


if __name__ == "__main__":
    main()
