"""``python -m jobs load`` with the facts decoded in process or on Spark, as a user runs it.

Two nights of one store (default: the embedded v5-clean), each a fresh ``python -m jobs
load`` process, the two engines alternating so both see the same machine:

* **first night**: a fresh warehouse (Spark creates the tables either way; the facts are
  then decoded in process and written by delta-rs, or decoded on Spark's executors);
* **nothing new**: the same store again under a new snapshot id, on existing tables (the
  queue tails are read again, the night's state rows committed).

Prints median wall seconds per night and engine and their ratio, and checks that both
engines' warehouses hold the same rows.

Usage: python bench/load_engines.py [--store S] [--repeat 3]
Results: a table on stdout and .cache/bench/load_engines.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from lakehouse import delta_rows  # noqa: E402

from jobs.lakehouse import tables as T  # noqa: E402

ENGINES = ("local", "spark")
BROKER = "bench"


def load(warehouse: Path, store: Path, snapshot_id: str, engine: str) -> float:
    """Wall seconds of one CLI load."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jobs", "--warehouse", str(warehouse), "load",
                    str(store), "--broker", BROKER, "--snapshot-id", snapshot_id,
                    "--engine", engine, "--quiet"], cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - started


def same_rows(left: Path, right: Path) -> bool:
    """Both warehouses hold the same rows in every table a load writes."""
    return all(delta_rows(T.table_location(left, name)) == delta_rows(T.table_location(right, name))
               for name in T.TABLES if name not in T.AUDIT_LOGS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", type=Path,
                        default=ROOT / ".cache" / "stores" / "v5-clean" / "store")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rmq-bench-load-engines-"))
    runs: dict[str, dict[str, list[float]]] = {night: {e: [] for e in ENGINES}
                                               for night in ("first night", "nothing new")}
    try:
        for repeat in range(args.repeat):
            for engine in (ENGINES if repeat % 2 == 0 else ENGINES[::-1]):
                warehouse = work / f"{engine}-{repeat}"
                runs["first night"][engine].append(load(warehouse, args.store, "n1", engine))
                runs["nothing new"][engine].append(load(warehouse, args.store, "n2", engine))
        identical = same_rows(work / "local-0", work / "spark-0")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results = {night: {engine: round(statistics.median(values), 2)
                       for engine, values in by_engine.items()}
               for night, by_engine in runs.items()}
    print(f"store {args.store}, {args.repeat} run(s) per night and engine (median wall s)")
    print(f"{'night':14} {'local':>8} {'spark':>8} {'spark/local':>12}")
    for night, by_engine in results.items():
        print(f"{night:14} {by_engine['local']:8.2f} {by_engine['spark']:8.2f} "
              f"{by_engine['spark'] / by_engine['local']:12.1f}")
    print(f"same rows in both warehouses: {identical}")
    out = ROOT / ".cache" / "bench" / "load_engines.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"store": str(args.store), "repeat": args.repeat,
                               "median_seconds": results, "runs": runs,
                               "identical_rows": identical}, indent=2))


if __name__ == "__main__":
    main()
