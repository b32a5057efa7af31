"""Nightly snapshot cost: a full copy of a store vs the incremental snapshot the DAG takes.

Stores: built from the reconcile benchmark's (``bench/reconcile.py`` prepares it: a 1 GiB
commitlog of 1 KiB bodies with its consume queues and config). ``--segments N`` commitlog
files of 1 GiB: the first N-1 finished (hard links of the benchmark's segment: the
snapshot copier only looks at bytes, not at what they mean), the last one being written.
Night 1 has the last segment ``--night1`` full, night 2 ``--night2`` full (the rest
preallocated zeros, as the broker's files look); night 3 is night 2 unchanged. Side by
side, each ``--repeat`` times (the fastest kept):

* full: night 2 snapshotted with no earlier snapshot (what a plain copy reads);
* incremental: night 2 after night 1's snapshot, and night 3 after night 2's.

Reported: bytes read from the broker, bytes taken from the previous snapshot, files
hard-linked, seconds, and the ratios. The sources are in the page cache, so seconds
measure the copier (and the local re-copy of the growing segment), not a disk; bytes read
from the broker are what would cross SSH for a remote broker.

Usage: python bench/snapshot.py [--segments 4] [--night1 0.5] [--night2 0.6] [--repeat 2]
Results: printed, and .cache/bench/snapshot_results.json. See bench/README.md.

``--series N --baseline-ref REF``: the cost of confirming reused bytes against the broker.
N nights of bench/growing_broker.py's store (1 MiB commitlog files, twelve queues of
6,000-byte files, retention of three nights), each snapshotted side by side by the copier
of git ref REF (the baseline, before confirmation) and by this checkout's, alternating
which goes first; bytes read from the broker and seconds per night, and their ratios.
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
sys.path[:0] = [str(ROOT)]

from jobs.snapshot.copier import take_snapshot  # noqa: E402
from jobs.snapshot.sources import LocalSource  # noqa: E402

BENCH = ROOT / ".cache" / "bench"
STORE = BENCH / "load" / "body1024-1024mib" / "with-queues" / "store"
MIB = 2**20


def build_store(source: Path, target: Path, segments: int, last_fraction: float) -> None:
    """The benchmark store with ``segments`` commitlog files, the last ``last_fraction``
    written; queues and config as in the benchmark store."""
    if target.exists():
        return
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("commitlog"))
    segment = next((source / "commitlog").resolve().iterdir())
    size = segment.stat().st_size
    (target / "commitlog").mkdir()
    for number in range(segments):
        name = target / "commitlog" / f"{number * size:020d}"
        if number < segments - 1:
            os.link(segment, name)
            continue
        keep = int(size * last_fraction)
        with open(segment, "rb") as old, open(name, "wb") as new:
            new.write(old.read(keep))
            new.truncate(size)


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


def baseline_copier(ref: str):  # type: ignore[no-untyped-def]
    """``take_snapshot`` of the copier module as it was at git ref ``ref``."""
    import importlib.util
    import subprocess

    source = subprocess.run(["git", "show", f"{ref}:jobs/snapshot/copier.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    path = BENCH / "snapshot" / f"copier_{ref}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"copier_{ref}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.take_snapshot


def timed_load(code_root: Path, warehouse: Path, store: Path, snapshot_id: str) -> float:
    """Seconds the load of ``store`` took (its own summary's: the command's start-up not
    counted), run by the code at ``code_root`` in a process of its own."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "jobs", "--warehouse", str(warehouse), "load", "--broker",
         "bench", "--snapshot-id", snapshot_id, "--engine", "local", "--quiet", "--json",
         str(store)], cwd=code_root, env={**os.environ, "PYTHONPATH": str(code_root)},
        check=True, capture_output=True, text=True)
    return float(json.loads(done.stdout)["seconds"])


def baseline_checkout(ref: str) -> Path:
    """A git worktree of ``ref`` under .cache/bench (made once)."""
    import subprocess

    path = BENCH / "snapshot" / f"worktree-{ref}"
    if not path.is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=ROOT,
                       check=True, capture_output=True)
    return path


def series(nights: int, ref: str, per_night: int, with_load: bool) -> None:
    """Side by side, night after night: the baseline copier and this one (and, with
    ``with_load``, the load of each night's snapshot by the baseline's code and this)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from growing_broker import GrowingBroker

    work = BENCH / "snapshot" / "series"
    shutil.rmtree(work, ignore_errors=True)
    broker = GrowingBroker(work / "broker", per_night)
    copiers = {"baseline": baseline_copier(ref), "confirmed": take_snapshot}
    rows = []
    for night in range(1, nights + 1):
        broker.grow()
        snapshot_id = (datetime(2026, 1, 1) + timedelta(days=night)).strftime("%Y-%m-%dT0200Z")
        order = list(copiers) if night % 2 else list(reversed(copiers))
        row: dict[str, float] = {"night": night}
        for name in order:
            started = time.perf_counter()
            manifest = copiers[name](LocalSource(broker.store), work / name, "bench",
                                     snapshot_id, progress=lambda _message: None)
            row[f"{name}_s"] = time.perf_counter() - started
            row[f"{name}_bytes"] = manifest.from_broker
            row["files"] = len(manifest.files)
            if with_load:
                code = ROOT if name == "confirmed" else baseline_checkout(ref)
                row[f"{name}_load_s"] = timed_load(
                    code, work / f"{name}-warehouse",
                    work / name / "bench" / snapshot_id / "store", snapshot_id)
        rows.append(row)
        print(f"night {night:>3}: {row['files']:>4} files; from the broker "
              f"{row['baseline_bytes'] / MIB:7.2f} -> {row['confirmed_bytes'] / MIB:7.2f} MiB; "
              f"{row['baseline_s']:.3f} -> {row['confirmed_s']:.3f} s"
              + (f"; load {row['baseline_load_s']:.2f} -> {row['confirmed_load_s']:.2f} s"
                 if with_load else ""))
    later = rows[1:]  # night 1 has no earlier snapshot: both copy everything
    total = {k: sum(r[k] for r in later) for k in later[0] if k != "night"}
    print(f"nights 2-{nights}: bytes from the broker {total['confirmed_bytes'] / MIB:.2f} / "
          f"{total['baseline_bytes'] / MIB:.2f} MiB = "
          f"{total['confirmed_bytes'] / total['baseline_bytes']:.3f}x; seconds "
          f"{total['confirmed_s']:.2f} / {total['baseline_s']:.2f} = "
          f"{total['confirmed_s'] / total['baseline_s']:.2f}x")
    if with_load:
        import statistics

        base = statistics.median(r["baseline_load_s"] for r in later)
        mine = statistics.median(r["confirmed_load_s"] for r in later)
        print(f"load seconds per night (median of nights 2-{nights}): {base:.2f} -> "
              f"{mine:.2f} = {mine / base:.2f}x")
    out = BENCH / "snapshot_series_results.json"
    out.write_text(json.dumps({"ref": ref, "per_night": per_night, "rows": rows,
                               "cpu_count": os.cpu_count()}, indent=1))
    print(f"results: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--series", type=int, default=0)
    parser.add_argument("--baseline-ref", default="507fdb6")
    parser.add_argument("--per-night", type=int, default=20_000)
    parser.add_argument("--with-load", action="store_true",
                        help="also load each night's snapshots, baseline code and this")
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--night1", type=float, default=0.5)
    parser.add_argument("--night2", type=float, default=0.6)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    if args.series:
        series(args.series, args.baseline_ref, args.per_night, args.with_load)
        return
    if not STORE.is_dir():
        sys.exit(f"{STORE} missing: run `python bench/reconcile.py` first (it prepares it)")
    work = BENCH / "snapshot"
    night1 = work / f"night1-{args.segments}-{args.night1}"
    night2 = work / f"night2-{args.segments}-{args.night2}"
    build_store(STORE, night1, args.segments, args.night1)
    build_store(STORE, night2, args.segments, args.night2)
    rounds = [one_round(night1, night2, work / "runs") for _ in range(args.repeat)]
    shutil.rmtree(work / "runs", ignore_errors=True)
    best = {mode: min((r[mode] for r in rounds), key=lambda m: m["seconds"])
            for mode in rounds[0]}
    new_bytes = (args.night2 - args.night1) * 2**30
    print(f"store: {args.segments} commitlog files of 1 GiB (the last {args.night1:.0%} -> "
          f"{args.night2:.0%} written) + {best['full']['files'] - args.segments} queue and "
          f"config files: {best['full']['data_bytes'] / MIB:.0f} MiB of data")
    print(f"{'mode':<12} {'from broker':>12} {'reused':>11} {'linked':>7} {'grown':>6} "
          f"{'seconds':>8}")
    for mode, m in best.items():
        print(f"{mode:<12} {m['from_broker'] / MIB:>10.1f} M {m['reused'] / MIB:>9.1f} M "
              f"{m['linked']:>7} {m['grown']:>6} {m['seconds']:>8.2f}")
    inc, full = best["incremental"], best["full"]
    print(f"incremental/full: bytes from the broker {inc['from_broker'] / full['from_broker']:.3f}"
          f" (new data {new_bytes / MIB:.0f} MiB), seconds {inc['seconds'] / full['seconds']:.2f}")
    out = BENCH / "snapshot_results.json"
    out.write_text(json.dumps({"args": vars(args), "rounds": rounds, "best": best,
                               "cpu_count": os.cpu_count()}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
