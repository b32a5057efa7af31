"""Snapshots in a bucket against snapshots on a local disk, night after night, side by side.

N nights of bench/growing_broker.py's store (``--segment-mib`` commitlog files, twelve
queues, index files, three nights retained), each night snapshotted three ways, in an
order that rotates every night: by the local copier into a directory (what
``snapshot_root`` on a disk does), and by jobs.snapshot.bucket into a bucket of the local
S3 server (versitygw, tests/s3_server.py) with files stored in chunks of 16 MiB (the
product), of 64 MiB, and, as the baseline, whole (one object per file, so a growing file
is uploaded again in full every night). Each bucket's night is then read back on a second "host" (a
mirror of its own), as a load on another machine would.

Per night: seconds of each, bytes read from the broker, objects and bytes uploaded,
requests by operation (the server's access log), and what the second host downloaded.

Usage: python bench/bucket_snapshots.py [--nights 8] [--per-night 100000] [--segment-mib 1024]
Results: printed, and .cache/bench/bucket_snapshots.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests")]

from growing_broker import GrowingBroker  # noqa: E402
from object_store import AccessLog  # noqa: E402
from s3_server import running_s3, s3_environment  # noqa: E402

from jobs.lakehouse.locations import Location  # noqa: E402
from jobs.snapshot import bucket as bucket_module  # noqa: E402
from jobs.snapshot.bucket import CHUNK_OBJECT_BYTES, MIRROR_ENV, BucketSnapshots  # noqa: E402
from jobs.snapshot.copier import take_snapshot  # noqa: E402
from jobs.snapshot.sources import LocalSource  # noqa: E402

BENCH = ROOT / ".cache" / "bench"
MIB = 2**20
BROKER = "bench"


# The chunk size of each bucket mode: the product's, a larger one, and whole files.
MODES = {"chunked": CHUNK_OBJECT_BYTES, "chunked-64": 64 * MIB, "whole": 2**62}


def take(mode: str, work: Path, store: Path, snapshot_id: str, log: AccessLog) -> dict:
    """One snapshot of ``store`` by ``mode``: seconds, bytes, and (bucket) uploads and
    requests."""
    log.since_last()
    started = time.perf_counter()
    if mode == "local":
        manifest = take_snapshot(LocalSource(store), work / "local", BROKER, snapshot_id,
                                 progress=lambda _m: None)
    else:
        bucket_module.CHUNK_OBJECT_BYTES = MODES[mode]
        os.environ[MIRROR_ENV] = str(work / f"{mode}-host-a")
        manifest = BucketSnapshots(Location(f"s3://snaps/{mode}")).take(
            LocalSource(store), BROKER, snapshot_id, progress=lambda _m: None)
    row = {"s": time.perf_counter() - started, "from_broker": manifest.from_broker,
           "data_bytes": manifest.data_bytes}
    if mode != "local":
        row.update(requests=dict(log.since_last()), uploaded_objects=manifest.uploaded_objects,
                   uploaded_bytes=manifest.uploaded_bytes)
    return row


def read_back(mode: str, work: Path, snapshot_id: str, log: AccessLog) -> dict:
    """The night read on a second host, then retention: seconds and requests."""
    bucket_module.CHUNK_OBJECT_BYTES = MODES[mode]
    os.environ[MIRROR_ENV] = str(work / f"{mode}-host-b")
    bucket = BucketSnapshots(Location(f"s3://snaps/{mode}"))
    lines: list[str] = []
    log.since_last()
    started = time.perf_counter()
    bucket.local_store(BROKER, snapshot_id, progress=lines.append)
    row = {"read_back_s": time.perf_counter() - started,
           "read_back_requests": dict(log.since_last()),
           "read_back": lines[0] if lines else "nothing to download"}
    os.environ[MIRROR_ENV] = str(work / f"{mode}-host-a")
    bucket.clean_up(BROKER, snapshot_id, retention_days=3)
    row["cleanup_requests"] = dict(log.since_last())
    return row


def nights(count: int, per_night: int, segment_mib: int) -> list[dict]:
    work = BENCH / "bucket_snapshots"
    shutil.rmtree(work, ignore_errors=True)
    broker = GrowingBroker(work / "broker", per_night, segment_size=segment_mib * MIB)
    rows: list[dict] = []
    modes = ["local", *MODES]
    with running_s3(work / "s3", access_log=work / "access.log") as server, \
            s3_environment(server):
        server.bucket("snaps")
        log = AccessLog(work / "access.log")
        for night in range(1, count + 1):
            broker.grow()
            snapshot_id = (datetime(2026, 1, 1) + timedelta(days=night)).strftime(
                "%Y-%m-%dT0200Z")
            row: dict = {"night": night, "store_bytes": broker.disk_bytes()}
            for mode in modes[night % len(modes):] + modes[:night % len(modes)]:
                row[mode] = take(mode, work, broker.store, snapshot_id, log)
            for mode in MODES:
                row[mode].update(read_back(mode, work, snapshot_id, log))
            rows.append(row)
            print(f"night {night:>2}: store {row['store_bytes'] / MIB:6.1f} MiB, data "
                  f"{row['local']['data_bytes'] / MIB:6.1f} MiB; local {row['local']['s']:.2f} s; "
                  + "; ".join(f"{mode} {row[mode]['s']:.2f} s, uploaded "
                              f"{row[mode]['uploaded_bytes'] / MIB:.1f} MiB in "
                              f"{row[mode]['uploaded_objects']} objects, "
                              f"{sum(row[mode]['requests'].values())} requests, read back "
                              f"{row[mode]['read_back_s']:.2f} s" for mode in MODES),
                  flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nights", type=int, default=8)
    parser.add_argument("--per-night", type=int, default=100_000)
    parser.add_argument("--segment-mib", type=int, default=1024)
    args = parser.parse_args()
    rows = nights(args.nights, args.per_night, args.segment_mib)
    later = rows[1:]
    for mode in ("local", *MODES):
        seconds = sum(r[mode]["s"] for r in later)
        line = f"nights 2-{args.nights}, {mode}: {seconds:.2f} s"
        if mode != "local":
            line += (f", uploaded {sum(r[mode]['uploaded_bytes'] for r in later) / MIB:.1f} "
                     f"MiB, requests {sum(sum(r[mode]['requests'].values()) for r in later)}, "
                     f"read back {sum(r[mode]['read_back_s'] for r in later):.2f} s")
        print(line)
    out = BENCH / "bucket_snapshots.json"
    out.write_text(json.dumps({"args": vars(args), "rows": rows,
                               "cpu_count": os.cpu_count()}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
