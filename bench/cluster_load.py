"""The Spark load on a standalone cluster of 1 and 2 workers: does it scale with executors?

A generated broker store (bench/load_delta.py's, cached under .cache/bench/load/) is loaded
by ``python -m jobs --master spark://... load --engine spark`` into a fresh warehouse, on a
real standalone cluster on 127.0.0.1 (tests/spark_standalone.py) of 1, then 2 workers of
one core each, interleaved ``--repeat`` times. Measured: the command's wall seconds (Spark
session start included, as a DAG task pays it), MB/s of commitlog, and the machine's busy
CPU seconds over the command per GB: everything that ran (driver, daemons, executors and
the Python workers they fork, which leave the process tree when an executor is killed, so
a per-process count misses them); run it on an otherwise idle machine.

The machine has two cores: with two workers, the driver and the executors share them, so
this measures whether the load spreads its tasks over the executors, not how far it would
scale on a real cluster.

Usage: python bench/cluster_load.py [--size-mib 4096] [--workers 1,2] [--repeat 1]
Results: a table on stdout, each load's own lines in .cache/bench/cluster_load/. See
bench/README.md.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from load_delta import BROKER, MIB, dataset_dir, prepare_store, store_bytes  # noqa: E402
from spark_standalone import PYTHON, standalone_cluster  # noqa: E402


def load_on(cluster_url: str, env: dict[str, str], store: Path, warehouse: Path,
            log: Path) -> float:
    """Seconds of one whole load command against the cluster."""
    command = [PYTHON, "-m", "jobs", "--master", cluster_url, "--warehouse", str(warehouse),
               "load", "--broker", BROKER, "--snapshot-id", "s1", "--engine", "spark",
               str(store)]
    started = time.perf_counter()
    with log.open("wb") as out:
        result = subprocess.run(command, cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, check=False)
    seconds = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"the load failed ({result.returncode}); see {log}")
    return seconds


def busy_cpu_seconds() -> float:
    """CPU seconds the whole machine has spent not idle since boot."""
    import psutil

    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def run(workers: int, store: Path, work: Path, log: Path) -> dict:
    """One load on a fresh cluster of ``workers`` one-core workers; its step lines (the
    session's start, each table's seconds) kept in ``log``."""
    root = work / f"cluster-{workers}"
    shutil.rmtree(root, ignore_errors=True)
    with standalone_cluster(root, workers=workers, cores=1, memory="2g") as cluster:
        before = busy_cpu_seconds()
        seconds = load_on(cluster.url, cluster.env, store, root / "warehouse", log)
        cpu = busy_cpu_seconds() - before
        executors = sum(1 for _ in cluster.work_dir.glob("*/*/stderr"))
    shutil.rmtree(root / "warehouse", ignore_errors=True)
    return {"workers": workers, "seconds": seconds, "cpu": cpu, "executors": executors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=4096)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--cache", default=str(ROOT / ".cache" / "bench"))
    args = parser.parse_args()
    base = dataset_dir(Path(args.cache), args.body, args.size_mib)
    records = prepare_store(base, args.body, args.size_mib * MIB, 1024 * MIB)
    store = base / "store"
    size = store_bytes(store)
    print(f"store: {args.body}-byte bodies, {records:,} records, {size / MIB:,.0f} MiB")
    results = []
    logs = Path(args.cache) / "cluster_load"
    logs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cluster-load-") as scratch:
        for round_number in range(args.repeat):
            for workers in (int(n) for n in args.workers.split(",")):
                log = logs / f"{workers}-workers-{round_number + 1}.log"
                result = run(workers, store, Path(scratch), log)
                results.append(result)
                print(f"  [{round_number + 1}/{args.repeat}] {workers} worker(s): "
                      f"{result['seconds']:.1f} s, {result['cpu']:.0f} CPU-s, "
                      f"{result['executors']} executor(s); {log}", flush=True)
    print("\n| workers | best s | MB/s | CPU-s/GB | executors |\n|---:|---:|---:|---:|---:|")
    for workers in sorted({r["workers"] for r in results}):
        runs = [r for r in results if r["workers"] == workers]
        best = min(runs, key=lambda r: r["seconds"])
        print(f"| {workers} | {best['seconds']:.1f} | {size / 1e6 / best['seconds']:.1f} | "
              f"{best['cpu'] / (size / 1e9):.1f} | {best['executors']} |")


if __name__ == "__main__":
    main()
