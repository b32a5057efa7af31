"""A fleet's night on one machine: concurrent loads, and the DAG under a real scheduler.

Two measurements, each against its one-broker baseline, run one after the other:

  loads   ``python -m jobs load`` of 1 broker, then of N brokers at once (each a process
          of its own, one fresh warehouse per run, the harness's v5-clean store under N
          names): wall time of the N against N times the one
  dag     ``rmq_nightly`` under the scheduler with the LocalExecutor (each task a process
          of its own; tests/airflow_scheduler.py), for 1 broker and for M brokers (the
          four real-broker variants in turn), pool ``spark_pool_slots`` = 2: wall time
          from trigger to the run's end, peak resident memory of every process of the
          deployment, peak Spark JVMs alive, the most load and check tasks the scheduler
          ran at once

Usage: python bench/fleet.py [--loads 4] [--dag-brokers 8] [--only loads|dag]
Results: tables on stdout and .cache/bench/fleet_results.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from airflow_scheduler import TreeSampler, deployment  # noqa: E402

VARIANTS = ("v5-clean", "v4-clean", "v5-killed", "v4-killed")
POOL, SLOTS = "rmq_spark", 2
WORK = ROOT / ".cache" / "bench" / "fleet"


def stores(count: int, *, same: bool = False) -> list[tuple[str, Path]]:
    """``count`` brokers: the real-broker variants in turn, or (``same``) the first one
    under ``count`` names, so that N loads do exactly N times the work of one."""
    cache = Path(os.environ.get("RMQ_STORE_CACHE", ROOT / ".cache" / "stores"))
    return [(f"fleet-{i}", cache / VARIANTS[0 if same else i % len(VARIANTS)] / "store")
            for i in range(count)]


def concurrent_loads(count: int) -> dict[str, float]:
    """``jobs load`` of ``count`` brokers at once into a fresh warehouse."""
    warehouse = WORK / f"loads-{count}"
    shutil.rmtree(warehouse, ignore_errors=True)
    env = {**os.environ, "RMQ_WAREHOUSE": str(warehouse)}
    clock = time.monotonic()
    running = [subprocess.Popen([sys.executable, "-m", "jobs", "load", "--broker", name,
                                 "--snapshot-id", "n1", str(store)], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for name, store in stores(count, same=True)]
    with TreeSampler([p.pid for p in running]) as sampler:
        failures = [p.stderr.read().decode()[-2000:] for p in running if p.wait() != 0]
        seconds = time.monotonic() - clock
    if failures:
        raise SystemExit("a load failed:\n" + "\n".join(failures))
    return {"brokers": count, "seconds": round(seconds, 1),
            "peak_rss_mib": round(sampler.peak_rss_kib / 1024)}


def dag_run(count: int) -> dict[str, float]:
    work = WORK / f"dag-{count}"
    shutil.rmtree(work, ignore_errors=True)
    brokers = [{"name": name, "store": str(store)} for name, store in stores(count)]
    with deployment(work, brokers, POOL, SLOTS) as airflow:
        run = airflow.run("rmq_nightly", datetime(2026, 11, 24, 2, tzinfo=UTC), 7200)
    if run.state != "success":
        raise SystemExit(f"the DAG run of {count} brokers ended {run.state}: "
                         f"{[(t.task_id, t.map_index, t.state) for t in run.tasks]}")
    return {"brokers": count, "seconds": round(run.seconds, 1),
            "peak_rss_mib": round(run.peak_rss_mib), "peak_spark_jvms": run.peak_spark_jvms,
            "most_spark_tasks_at_once": run.most_at_once(POOL)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", type=int, default=4)
    parser.add_argument("--dag-brokers", type=int, default=8)
    parser.add_argument("--only", choices=("loads", "dag"))
    args = parser.parse_args()
    results: dict[str, list[dict]] = {}
    if args.only in (None, "loads"):
        results["loads"] = [concurrent_loads(1), concurrent_loads(args.loads)]
        one, many = results["loads"]
        print(f"loads: 1 broker {one['seconds']} s ({one['peak_rss_mib']} MiB); "
              f"{many['brokers']} at once {many['seconds']} s ({many['peak_rss_mib']} MiB) = "
              f"{many['seconds'] / one['seconds']:.2f}x one, "
              f"{many['seconds'] / (one['seconds'] * many['brokers']):.2f} of "
              f"{many['brokers']} x one")
    if args.only in (None, "dag"):
        results["dag"] = [dag_run(1), dag_run(args.dag_brokers)]
        for row in results["dag"]:
            print(f"dag: {row['brokers']} broker(s): {row['seconds']} s, peak RSS "
                  f"{row['peak_rss_mib']} MiB, peak Spark JVMs {row['peak_spark_jvms']}, "
                  f"most load/check tasks at once {row['most_spark_tasks_at_once']}")
    out = ROOT / ".cache" / "bench" / "fleet_results.json"
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
