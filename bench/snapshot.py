"""Nightly snapshot cost: a full copy of a store vs the incremental snapshot the DAG takes.

Store: the reconcile benchmark's (``bench/reconcile.py`` prepares it): a 1 GiB commitlog of
1 KiB bodies with its consume queues and config. "Night 1" is the same store with every
append-only file's data cut at ``--cut`` (default 90 %, the rest zeros, as the broker's
preallocated files look), "night 2" is the whole store, "night 3" is night 2 unchanged.
Side by side, each ``--repeat`` times (the fastest kept):

* full: night 2 snapshotted with no earlier snapshot (what a plain copy reads);
* incremental: night 2 after night 1's snapshot, and night 3 after night 2's.

Reported: bytes read from the broker, bytes taken from the previous snapshot, seconds,
and the ratios. The source is in the page cache (1 GiB on a 24 GiB machine), so seconds
measure the copier, not a disk; bytes read from the broker are what crosses SSH for a
remote broker.

Usage: python bench/snapshot.py [--cut 0.9] [--repeat 3]
Results: printed, and .cache/bench/snapshot_results.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from jobs.snapshot import take_snapshot  # noqa: E402
from jobs.store_source import LocalSource  # noqa: E402
from rmqlib.growth import growth_of  # noqa: E402
from rmqlib.inventory import classify  # noqa: E402

BENCH = ROOT / ".cache" / "bench"
STORE = BENCH / "load" / "body1024-1024mib" / "with-queues" / "store"
MIB = 2**20


def cut_store(source: Path, target: Path, fraction: float) -> None:
    """Night 1: append-only files keep ``fraction`` of their data, then zeros (sparse)."""
    if target.exists():
        return
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        relative = path.relative_to(source)
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        if not growth_of(classify(relative, path.stat().st_size).kind).append_only:
            shutil.copyfile(path, destination)
            continue
        data_end = len(path.read_bytes().rstrip(b"\0"))
        keep = int(data_end * fraction)
        with open(path, "rb") as old, open(destination, "wb") as new:
            new.write(old.read(keep))
            new.truncate(path.stat().st_size)


def timed(source: Path, root: Path, snapshot_id: str) -> dict[str, float]:
    started = time.perf_counter()
    manifest = take_snapshot(LocalSource(source), root, "bench", snapshot_id,
                             progress=lambda _message: None)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "from_broker": manifest.from_broker,
            "reused": manifest.reused, "linked": manifest.count("linked"),
            "grown": manifest.count("grown"), "files": len(manifest.files),
            "data_bytes": manifest.data_bytes}


def one_round(night1: Path, night2: Path, work: Path) -> dict[str, dict[str, float]]:
    shutil.rmtree(work, ignore_errors=True)
    full = timed(night2, work / "full", "2026-11-21T0200Z")
    timed(night1, work / "inc", "2026-11-20T0200Z")
    incremental = timed(night2, work / "inc", "2026-11-21T0200Z")
    unchanged = timed(night2, work / "inc", "2026-11-22T0200Z")
    return {"full": full, "incremental": incremental, "unchanged": unchanged}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cut", type=float, default=0.9)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not STORE.is_dir():
        sys.exit(f"{STORE} missing: run `python bench/reconcile.py` first (it prepares it)")
    night1 = BENCH / "snapshot" / f"night1-cut{args.cut}"
    cut_store(STORE, night1, args.cut)
    rounds = [one_round(night1, STORE, BENCH / "snapshot" / "work")
              for _ in range(args.repeat)]
    shutil.rmtree(BENCH / "snapshot" / "work", ignore_errors=True)
    best = {mode: min((r[mode] for r in rounds), key=lambda m: m["seconds"])
            for mode in rounds[0]}
    new_bytes = best["full"]["data_bytes"] * (1 - args.cut)
    print(f"store: {STORE} ({best['full']['data_bytes'] / MIB:.0f} MiB of data, "
          f"{best['full']['files']} files); night 1 = {args.cut:.0%} of each append-only file")
    print(f"{'mode':<12} {'from broker':>12} {'reused':>10} {'linked':>7} {'grown':>6} "
          f"{'seconds':>8}")
    for mode, m in best.items():
        print(f"{mode:<12} {m['from_broker'] / MIB:>10.1f} M {m['reused'] / MIB:>8.1f} M "
              f"{m['linked']:>7} {m['grown']:>6} {m['seconds']:>8.2f}")
    inc, full = best["incremental"], best["full"]
    print(f"incremental/full: bytes from the broker {inc['from_broker'] / full['from_broker']:.3f}"
          f" (new data ~{new_bytes / MIB:.0f} MiB), seconds {inc['seconds'] / full['seconds']:.2f}")
    out = BENCH / "snapshot_results.json"
    out.write_text(json.dumps({"cut": args.cut, "rounds": rounds, "best": best,
                               "cpu_count": os.cpu_count()}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
