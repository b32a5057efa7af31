"""`rmq` as a user feels it: start-up time of the small commands, and dump speed against
the record path that decodes the same file, side by side.

* start-up: ``rmq --help``, ``rmq dump config FILE``, ``rmq dump checkpoint STORE`` against
  ``python -c pass`` (the interpreter alone), each ``--repeat`` times, median;
* dumps: ``rmq dump commitlog`` (text and ``--json``, output to /dev/null) of a 256 MiB
  segment of 1 KiB bodies against ``scan_segment`` iterating the same file (the record
  path), interleaved ``--repeat`` times, median. The segment is the first 256 MiB of the
  load benchmark's 1 GiB segment (``bench/load_delta.py`` makes it), cut at a record
  boundary, the rest zeros: a clean file, exit code 0.

Usage: python bench/rmq_cli.py [--repeat 5]
Results: printed, and .cache/bench/rmq_cli_results.json. See bench/README.md.
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
sys.path[:0] = [str(ROOT)]

BENCH = ROOT / ".cache" / "bench"
SOURCE = BENCH / "load" / "body1024-1024mib" / "store" / "commitlog" / "00000000000000000000"
SEGMENT = BENCH / "dump" / "00000000000000000000"
STORE = ROOT / ".cache" / "stores" / "v5-clean" / "store"
SIZE = 256 * 2**20
RMQ = str(Path(sys.executable).parent / "rmq")


def prepare() -> int:
    """The 256 MiB segment, cut after its last whole record; returns the record count."""
    from rmqlib.commitlog.records import scan_segment

    if not SEGMENT.exists() or SEGMENT.stat().st_size != SIZE:
        SEGMENT.parent.mkdir(parents=True, exist_ok=True)
        with open(SOURCE, "rb") as source:
            data = bytearray(source.read(SIZE))
        SEGMENT.write_bytes(bytes(data))
        end = max(r.position + r.total_size for r in scan_segment(SEGMENT))
        data[end:] = bytes(SIZE - end)
        SEGMENT.write_bytes(bytes(data))
    return sum(1 for _ in scan_segment(SEGMENT))


def seconds(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {done.returncode}: {done.stderr.decode()}")
    return elapsed


def median_of(commands: dict[str, list[str]], repeat: int) -> dict[str, float]:
    runs: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeat):  # interleaved: drift hits every mode alike
        for name, command in commands.items():
            runs[name].append(seconds(command))
    return {name: statistics.median(times) for name, times in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    startup = median_of({
        "python -c pass": [sys.executable, "-c", "pass"],
        "rmq --help": [RMQ, "--help"],
        "rmq dump config": [RMQ, "dump", "config", str(STORE / "config" / "topics.json")],
        "rmq dump checkpoint": [RMQ, "dump", "checkpoint", str(STORE)],
    }, args.repeat * 2)
    print("start-up (median of", args.repeat * 2, "runs):")
    for name, value in startup.items():
        print(f"  {name:<22} {value:6.3f} s")
    records = prepare()
    scan = ("from rmqlib.commitlog.records import scan_segment; "
            f"n = sum(1 for _ in scan_segment({str(SEGMENT)!r}))")
    dumps = median_of({
        "record path": [sys.executable, "-c", scan],
        "dump text": [RMQ, "dump", "commitlog", str(SEGMENT)],
        "dump --json": [RMQ, "dump", "commitlog", str(SEGMENT), "--json"],
    }, args.repeat)
    print(f"256 MiB segment, {records} records of 1 KiB bodies (median of {args.repeat}):")
    baseline = dumps["record path"]
    for name, value in dumps.items():
        print(f"  {name:<12} {value:6.2f} s  {records / value:>9,.0f} records/s  "
              f"{baseline / value:5.2f}x the record path's rate")
    out = BENCH / "rmq_cli_results.json"
    out.write_text(json.dumps({"startup": startup, "dumps": dumps, "records": records},
                              indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
