"""A night on object storage against a night on local disk, side by side.

One synthetic broker (bench/growing_broker.py: 5,000 messages a night, three nights of
commitlog kept) runs the DAG's step functions (``jobs.pipeline``: snapshot, load, check,
maintain, clean up; no Spark) into two warehouses each night, in alternating order: one
in a directory, one in a bucket of the local S3 server (versitygw on 127.0.0.1, its POSIX
backend on the same disk, so the difference is the S3 protocol and the clients, not the
storage). The server's access log gives the requests of every step, by operation. After
the last night the saved queries are timed on both (the local engine, a new one per call
as the CLI, best of 3), and the bucket's objects are counted.

Usage: python bench/object_store.py [--nights 10] [--messages-per-night 5000]
Results: .cache/bench/object_store.jsonl (a line per night and warehouse) and a summary.
See bench/README.md ("Object storage").
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from growing_broker import GrowingBroker  # noqa: E402
from s3_server import running_s3, s3_environment  # noqa: E402
from years import (  # noqa: E402
    FIRST_NIGHT,
    STEPS,
    pipeline_config,
    query_seconds,
)
from years import one_night as years_night  # noqa: E402

BROKER = "bench-s3"


def _no_spark() -> object:
    raise AssertionError("the bench runs without Spark")


class AccessLog:
    """The S3 server's access log, read from where it was last read: requests by operation."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def since_last(self) -> Counter[str]:
        time.sleep(0.2)  # the server writes each line as it answers; let the last land
        with self.path.open("rb") as log:
            log.seek(self.offset)
            lines = log.read().decode("utf-8", "replace").splitlines()
            self.offset = log.tell()
        return Counter(line.split()[7] for line in lines if len(line.split()) > 7
                       and line.split()[7].startswith("s3_"))


def one_night(config, broker, snapshot_id: str, night_time, log: AccessLog | None):  # type: ignore[no-untyped-def]
    """The broker's task group into ``config``'s warehouse (bench/years.py's night):
    seconds, and on S3 the requests, of every step."""
    requests: dict[str, dict[str, int]] = {}

    def count_requests(step: str) -> None:
        if log is not None:
            requests[step] = dict(log.since_last())

    if log is not None:
        log.since_last()  # what came before this night is not its
    seconds = years_night(_no_spark, config, broker, snapshot_id, night_time, count_requests)
    return seconds, requests


def run(nights: int, per_night: int, work: Path) -> Path:
    from jobs.lakehouse.locations import Location
    from jobs.snapshot.manifest import snapshot_id_for

    shutil.rmtree(work, ignore_errors=True)
    disk = pipeline_config(work / "disk", [BROKER])
    store = GrowingBroker(work / "store", per_night)
    broker = replace(disk.brokers[0], store=str(work / "store" / "store"))
    results = work.parent / f"{work.name}.jsonl"
    with running_s3(work / "s3", access_log=work / "access.log") as server, \
            s3_environment(server), results.open("w") as out:
        server.bucket("lake")
        bucket = replace(pipeline_config(work / "bucket", [BROKER]),
                         warehouse=Location("s3://lake/warehouse"),
                         checks_output_setting=work / "bucket" / "checks")
        log = AccessLog(work / "access.log")
        for night in range(1, nights + 1):
            night_time = FIRST_NIGHT + timedelta(days=night - 1)
            snapshot_id = snapshot_id_for(night_time)
            store.grow()
            order = [("disk", disk, None), ("s3", bucket, log)]
            for kind, config, requests_log in order if night % 2 else order[::-1]:
                seconds, requests = one_night(config, broker, snapshot_id, night_time,
                                              requests_log)
                out.write(json.dumps({"night": night, "warehouse": kind, "seconds": seconds,
                                      "requests": requests}) + "\n")
            print(f"night {night} done", flush=True)
        queries = {"disk": query_seconds(disk.warehouse)["local"],
                   "s3": query_seconds(bucket.warehouse)["local"]}
        objects = Location("s3://lake/warehouse").files()
        out.write(json.dumps({"queries": queries, "objects": len(objects),
                              "object_bytes": sum(f.size for f in objects),
                              "nights": nights}) + "\n")
    return results


def summarize(results: Path) -> None:
    records = [json.loads(line) for line in results.read_text().splitlines()]
    last = records[-1]
    nights = [r for r in records if "night" in r and r["night"] > 1]  # night 1 creates tables
    print(f"{last['nights']} nights; medians of nights 2-{last['nights']} (seconds, and "
          "requests per night on S3)")
    print("| step | disk s | S3 s | S3 / disk | S3 requests | of which PUT | GET | HEAD | LIST |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    total_requests = 0.0
    for step in STEPS:
        on_disk = statistics.median(r["seconds"][step] for r in nights if r["warehouse"] == "disk")
        on_s3 = statistics.median(r["seconds"][step] for r in nights if r["warehouse"] == "s3")
        counts = [Counter(r["requests"][step]) for r in nights if r["warehouse"] == "s3"]

        def median_of(*operations: str, counts: list[Counter] = counts) -> float:
            return statistics.median(sum(c[o] for o in operations) for c in counts)

        every = statistics.median(sum(c.values()) for c in counts)
        total_requests += every
        print(f"| {step} | {on_disk:.2f} | {on_s3:.2f} | {on_s3 / max(on_disk, 1e-3):.2f} | "
              f"{every:.0f} | {median_of('s3_PutObject', 's3_CopyObject'):.0f} | "
              f"{median_of('s3_GetObject'):.0f} | {median_of('s3_HeadObject'):.0f} | "
              f"{median_of('s3_ListObjectsV2', 's3_ListObjects'):.0f} |")
    print(f"requests per night: {total_requests:.0f}; a year: {365 * total_requests:,.0f}")
    print(f"objects in the bucket after {last['nights']} nights: {last['objects']:,} "
          f"({last['object_bytes'] / 2**20:.1f} MiB)")
    print("| saved query | disk s | S3 s |")
    print("|---|---:|---:|")
    for name, seconds in last["queries"]["disk"].items():
        print(f"| {name} | {seconds:.3f} | {last['queries']['s3'][name]:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", type=int, default=10)
    parser.add_argument("--messages-per-night", type=int, default=5000)
    parser.add_argument("--summary-only", action="store_true")
    args = parser.parse_args()
    work = ROOT / ".cache" / "bench" / "object_store"
    results = work.parent / f"{work.name}.jsonl"
    if not args.summary_only:
        results = run(args.nights, args.messages_per_night, work)
    summarize(results)


if __name__ == "__main__":
    main()
