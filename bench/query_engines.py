"""``python -m jobs sql`` on both engines, as a user runs it: a fresh process per query.

For each query (every saved query, an ad-hoc GROUP BY, and ``SELECT 1`` for start-up alone)
the local engine (DataFusion in process) and the Spark engine run in turn, alternating, so
both see the same machine; the median wall seconds of each and their ratio are printed.

Usage: python bench/query_engines.py [--warehouse W] [--repeat 5] [--spark-repeat 2]
       (default warehouse: the one ``make run`` fills, .cache/warehouse)
Results: a table on stdout and .cache/bench/query_engines.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from jobs.lakehouse.driver_rows import arrow_dataset  # noqa: E402
from jobs.lakehouse.tables import MESSAGES, table_location  # noqa: E402


def queries(warehouse: Path) -> dict[str, list[str]]:
    """The command-line arguments of each measured query; parameters from the warehouse."""
    sample = _sample_message(warehouse)
    return {
        "start-up (SELECT 1)": ["SELECT 1"],
        "ad hoc: count per topic": ["SELECT topic, count(*) FROM rmq.messages GROUP BY topic"],
        "message_by_key": ["--saved", "message_by_key", "-p", f"key={sample['key']}"],
        "message_by_msg_id": ["--saved", "message_by_msg_id", "-p", f"msg_id={sample['msg_id']}"],
        "volume_per_topic_hour": ["--saved", "volume_per_topic_hour"],
        "consumer_positions": ["--saved", "consumer_positions"],
    }


def _sample_message(warehouse: Path) -> dict[str, str]:
    """A message with a key and a msgId, to look up."""
    rows = arrow_dataset(table_location(warehouse, MESSAGES)).to_table(
        columns=["msg_id", "keys"]).to_pylist()
    row = next(r for r in rows if r["msg_id"] and r["keys"])
    return {"msg_id": row["msg_id"], "key": row["keys"][0]}


def seconds(warehouse: Path, engine: str, args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jobs", "--warehouse", str(warehouse), "sql",
                    "--engine", engine, *args], cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warehouse", type=Path, default=ROOT / ".cache" / "warehouse")
    parser.add_argument("--repeat", type=int, default=5, help="runs per query, local engine")
    parser.add_argument("--spark-repeat", type=int, default=2, help="runs per query, Spark")
    args = parser.parse_args()
    results = {}
    for name, sql_args in queries(args.warehouse).items():
        local, spark = [], []
        for run in range(max(args.repeat, args.spark_repeat)):
            if run < args.repeat:
                local.append(seconds(args.warehouse, "local", sql_args))
            if run < args.spark_repeat:
                spark.append(seconds(args.warehouse, "spark", sql_args))
        results[name] = {"local_s": statistics.median(local), "spark_s": statistics.median(spark),
                         "local_runs": local, "spark_runs": spark}
    print(f"{'query':28} {'local s':>8} {'spark s':>8} {'spark/local':>12}")
    for name, r in results.items():
        print(f"{name:28} {r['local_s']:8.2f} {r['spark_s']:8.2f} "
              f"{r['spark_s'] / r['local_s']:11.1f}x")
    out = ROOT / ".cache" / "bench" / "query_engines.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"warehouse": str(args.warehouse), "results": results}, indent=2))


if __name__ == "__main__":
    main()
