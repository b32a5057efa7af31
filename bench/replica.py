"""Replica comparison: how fast a slave's commitlog is compared with its master's, against
GNU ``cmp`` on the same files, side by side; and what a night costs when it compares only
what is new.

Data (generated once into ``.cache/bench/replica/``, the broker's layout, with
``bench/commitlog_decode.py``'s generator): a master commitlog of ``--size-mib`` in
``--segment-mib`` files, and a slave that is a byte copy of it (separate files, not links).

Modes, each in a fresh process, ``--repeat`` times interleaved, fastest reported:

  cmp           ``cmp -s`` on each pair of files (the baseline: what an operator would run)
  compare       ``rmqlib.store.replica.compare_commitlogs`` from offset 0: the first night
  night         the same from the write position minus ``--night-mib``: a later night, which
                compares only the bytes past the previous night's end
  data-end      ``commitlog_data_end`` of both sides alone (the write positions)

Results: a table on stdout and ``.cache/bench/replica/results.json``; figures in
bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
MIB = 2**20
MODES = ("cmp", "compare", "night", "data-end")


def prepare(cache: Path, size: int, segment: int) -> tuple[Path, Path]:
    """The master's and the slave's store roots (generated once)."""
    from commitlog_decode import generate

    master, slave = cache / "master", cache / "slave"
    marker = cache / "master.json"
    generate(master / "commitlog", 100, size, segment, marker=marker)
    copied = cache / "slave.json"
    if not copied.exists() or copied.read_text() != marker.read_text():
        shutil.rmtree(slave, ignore_errors=True)
        shutil.copytree(master, slave)
        copied.write_text(marker.read_text())
    return master, slave


def run_mode(mode: str, master: Path, slave: Path, night: int) -> dict[str, object]:
    from rmqlib.common.segments import list_segments
    from rmqlib.store.replica import commitlog_data_end, compare_commitlogs

    started = time.perf_counter()
    if mode == "cmp":
        pairs = zip(sorted((master / "commitlog").glob("0*")),
                    sorted((slave / "commitlog").glob("0*")), strict=True)
        compared = 0
        for left, right in pairs:
            subprocess.run(["cmp", "-s", str(left), str(right)], check=True)
            compared += left.stat().st_size
        result: dict[str, object] = {"bytes": compared}
    elif mode == "data-end":
        ends = [commitlog_data_end(list_segments(s / "commitlog")) for s in (master, slave)]
        result = {"bytes": 0, "end": ends[0], "same": ends[0] == ends[1]}
    else:
        end = commitlog_data_end(list_segments(master / "commitlog")) or 0
        start = 0 if mode == "compare" else max(end - night, 0)
        comparison = compare_commitlogs(master, slave, start=start)
        assert comparison.diverged_at is None and comparison.lag_bytes == 0
        result = {"bytes": comparison.bytes_compared}
    result["seconds"] = time.perf_counter() - started
    return result


def child(mode: str, master: Path, slave: Path, night: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, __file__, "--child", mode, "--master", str(master),
                          "--slave", str(slave), "--night-mib", str(night // MIB)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--segment-mib", type=int, default=256)
    parser.add_argument("--night-mib", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cache", default=str(ROOT / ".cache" / "bench" / "replica"))
    parser.add_argument("--child", choices=MODES)
    parser.add_argument("--master")
    parser.add_argument("--slave")
    args = parser.parse_args()
    night = args.night_mib * MIB
    if args.child:
        print(json.dumps(run_mode(args.child, Path(args.master), Path(args.slave), night)))
        return
    cache = Path(args.cache)
    master, slave = prepare(cache, args.size_mib * MIB, args.segment_mib * MIB)
    child("cmp", master, slave, night)  # warm the page cache with both copies
    best: dict[str, dict] = {}
    for _ in range(args.repeat):
        for mode in MODES:
            run = child(mode, master, slave, night)
            if mode not in best or run["seconds"] < best[mode]["seconds"]:
                best[mode] = run
    baseline = best["cmp"]["seconds"]
    print(f"{args.size_mib} MiB commitlog in {args.segment_mib} MiB files, master and slave, "
          f"page cache warm; night = last {args.night_mib} MiB; best of {args.repeat}")
    print(f"{'mode':<10} {'seconds':>8} {'MiB compared':>13} {'MiB/s':>8} {'x cmp':>6}")
    for mode, run in best.items():
        mib = int(run["bytes"]) / MIB
        rate = f"{mib / run['seconds']:8.0f}" if run["bytes"] else f"{'':>8}"
        print(f"{mode:<10} {run['seconds']:8.2f} {mib:13.0f} {rate} "
              f"{run['seconds'] / baseline:6.2f}")
    (cache / "results.json").write_text(json.dumps(best, indent=2))


if __name__ == "__main__":
    main()
