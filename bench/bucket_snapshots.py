"""Snapshots in a bucket against snapshots on a local disk, night after night, side by side.

N nights of bench/growing_broker.py's store (``--segment-mib`` commitlog files, twelve
queues, index files, three nights retained), each night snapshotted twice, alternating
which goes first: by the local copier into a directory (what ``snapshot_root`` on a disk
does) and by jobs.snapshot.bucket into a bucket of the local S3 server (versitygw,
tests/s3_server.py), then read back on a second "host" (a mirror of its own) as a load on
another machine would. Per night: seconds of each, bytes read from the broker, objects
and bytes uploaded, requests by operation (the server's access log), and what the
second host downloaded.

Growing files are uploaded whole (bytes [0, data length)). What S3's ``UploadPartCopy``
would have saved is computed from the manifests: a grown file's reused prefix (at least
5 MiB, S3's smallest part) copied server-side and only the rest uploaded; reported next to
what was uploaded, not measured (obstore has no part copy).

Usage: python bench/bucket_snapshots.py [--nights 6] [--per-night 20000] [--segment-mib 64]
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
from jobs.snapshot.bucket import MIRROR_ENV, BucketSnapshots  # noqa: E402
from jobs.snapshot.copier import take_snapshot  # noqa: E402
from jobs.snapshot.manifest import GROWN, Manifest  # noqa: E402
from jobs.snapshot.sources import LocalSource  # noqa: E402

BENCH = ROOT / ".cache" / "bench"
MIB = 2**20
MIN_PART = 5 * MIB
BROKER = "bench"


def part_copy_bytes(manifest: Manifest, previous: Manifest | None) -> int:
    """Bytes a night would upload if grown files copied their reused prefix server-side
    (UploadPartCopy, parts of at least 5 MiB) instead of uploading it again."""
    named = {f.object for f in previous.files} if previous else set()
    total = 0
    for entry in manifest.files:
        if entry.object in named:
            continue
        reused = entry.reused if entry.how == GROWN and entry.reused >= MIN_PART else 0
        total += entry.data_length - reused
    return total


def nights(count: int, per_night: int, segment_mib: int) -> list[dict]:
    work = BENCH / "bucket_snapshots"
    shutil.rmtree(work, ignore_errors=True)
    broker = GrowingBroker(work / "broker", per_night, segment_size=segment_mib * MIB)
    rows: list[dict] = []
    with running_s3(work / "s3", access_log=work / "access.log") as server, \
            s3_environment(server):
        server.bucket("snaps")
        log = AccessLog(work / "access.log")
        bucket = BucketSnapshots(Location("s3://snaps/fleet"))
        previous: Manifest | None = None
        for night in range(1, count + 1):
            broker.grow()
            snapshot_id = (datetime(2026, 1, 1) + timedelta(days=night)).strftime(
                "%Y-%m-%dT0200Z")
            row: dict = {"night": night, "store_bytes": broker.disk_bytes()}
            order = ("local", "bucket") if night % 2 else ("bucket", "local")
            for mode in order:
                log.since_last()
                started = time.perf_counter()
                if mode == "local":
                    manifest = take_snapshot(LocalSource(broker.store), work / "local", BROKER,
                                             snapshot_id, progress=lambda _m: None)
                else:
                    os.environ[MIRROR_ENV] = str(work / "host-a")
                    manifest = bucket.take(LocalSource(broker.store), BROKER, snapshot_id,
                                           progress=lambda _m: None)
                row[f"{mode}_s"] = time.perf_counter() - started
                row[f"{mode}_from_broker"] = manifest.from_broker
                if mode == "bucket":
                    row["requests"] = dict(log.since_last())
                    row["uploaded_objects"] = manifest.uploaded_objects
                    row["uploaded_bytes"] = manifest.uploaded_bytes
                    row["part_copy_bytes"] = part_copy_bytes(manifest, previous)
                    row["data_bytes"] = manifest.data_bytes
                    previous = manifest
            os.environ[MIRROR_ENV] = str(work / "host-b")
            lines: list[str] = []
            started = time.perf_counter()
            bucket.local_store(BROKER, snapshot_id, progress=lines.append)
            row["read_back_s"] = time.perf_counter() - started
            row["read_back_requests"] = dict(log.since_last())
            row["read_back"] = lines[0] if lines else "nothing to download"
            bucket.clean_up(BROKER, snapshot_id, retention_days=3)
            row["cleanup_requests"] = dict(log.since_last())
            rows.append(row)
            print(f"night {night:>2}: store {row['store_bytes'] / MIB:6.1f} MiB; local "
                  f"{row['local_s']:.2f} s, bucket {row['bucket_s']:.2f} s; uploaded "
                  f"{row['uploaded_objects']} objects {row['uploaded_bytes'] / MIB:.1f} MiB "
                  f"(part copy would: {row['part_copy_bytes'] / MIB:.1f} MiB) of "
                  f"{row['data_bytes'] / MIB:.1f} MiB; requests {sum(row['requests'].values())}"
                  f"; host B read back in {row['read_back_s']:.2f} s", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nights", type=int, default=6)
    parser.add_argument("--per-night", type=int, default=20_000)
    parser.add_argument("--segment-mib", type=int, default=64)
    args = parser.parse_args()
    rows = nights(args.nights, args.per_night, args.segment_mib)
    later = rows[1:]
    for key in ("local_s", "bucket_s", "uploaded_bytes", "part_copy_bytes", "data_bytes"):
        print(f"nights 2-{args.nights} total {key}: "
              f"{sum(r[key] for r in later) / (MIB if 'bytes' in key else 1):.2f}")
    out = BENCH / "bucket_snapshots.json"
    out.write_text(json.dumps({"args": vars(args), "rows": rows,
                               "cpu_count": os.cpu_count()}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
