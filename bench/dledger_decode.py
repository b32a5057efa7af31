"""DLedger decoding benchmark: the same records in a commitlog and in a DLedger log.

The records of ``bench/commitlog_decode.py`` (same encoder, same bodies and properties) are
laid out twice, cached in ``.cache/bench/``: as commitlog segments, and as DLedger data
files (each record in an entry: a 48-byte header, PHYSICALOFFSET = entry POS + 48, a
DLedger BLANK when entry + 8 bytes no longer fit). Each mode runs in a fresh subprocess,
side by side, ``--repeat`` times interleaved (the fastest run counts):

  commitlog-arrow   rmqlib.commitlog.arrow.scan_segment_arrow per split: the load's path
                    for a commitlog (the baseline)
  dledger-arrow     rmqlib.dledger.arrow.scan_dledger_arrow per split: the load's path for
                    a DLedger broker (entry walk, then the commitlog's vectorised decoding)
  dledger-walk      rmqlib.dledger.entries.scan_data_file per split: the entry walk alone

Usage: python bench/dledger_decode.py [--size-mib 256] [--bodies 100,1024] [--repeat 2]
Results: a table on stdout and .cache/bench/dledger-results.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

MIB = 1024 * 1024
MODES = ("commitlog-arrow", "dledger-arrow", "dledger-walk")
ENTRY_HEADER = struct.Struct(">iiqqqiiii")  # the layout, written out here on purpose


def generate_dledger(directory: Path, body_size: int, size: int, file_size: int) -> int:
    """DLedger data files of ``file_size`` holding the commitlog benchmark's records, one
    per entry, until ``size`` bytes; returns the entry count (cached by a marker)."""
    from commitlog_decode import FastRecords

    marker = directory / "DONE.json"
    wanted = {"body_size": body_size, "size": size, "file": file_size, "v": 1}
    if marker.exists() and json.loads(marker.read_text()).get("params") == wanted:
        return json.loads(marker.read_text())["records"]
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    maker = FastRecords(body_size)
    index = 0
    for start in range(0, size, file_size):
        data = bytearray(file_size)
        position = 0
        while True:
            pos = start + position
            record = maker.record(index, pos + ENTRY_HEADER.size)
            entry_size = ENTRY_HEADER.size + len(record)
            if position + entry_size + 8 > file_size:
                struct.pack_into(">ii", data, position, -1, file_size - position)  # BLANK
                break
            ENTRY_HEADER.pack_into(data, position, 1, entry_size, index, 0, pos, 0, 0, 0,
                                   len(record))
            data[position + ENTRY_HEADER.size:position + entry_size] = record
            position += entry_size
            index += 1
        (directory / f"{start:020d}").write_bytes(data)
    marker.write_text(json.dumps({"params": wanted, "records": index}))
    return index


def run_mode(mode: str, directory: Path, split: int) -> dict[str, object]:
    from rmqlib.commitlog.arrow import scan_segment_arrow
    from rmqlib.commitlog.records import split_ranges
    from rmqlib.dledger.arrow import scan_dledger_arrow
    from rmqlib.dledger.entries import scan_data_file

    files = sorted(p for p in directory.iterdir() if p.name.isdigit())
    records = crc_failures = 0
    started = time.perf_counter()
    if mode != "idle":
        for path in files:
            for start, end in split_ranges(path.stat().st_size, split):
                if mode == "dledger-walk":
                    records += len(scan_data_file(path, start, end)[0])
                    continue
                scan_of = scan_dledger_arrow if mode == "dledger-arrow" else scan_segment_arrow
                scan = scan_of(path, start, end)
                records += sum(batch.num_rows for batch in scan)
                crc_failures += len(scan.result.body_crc_failures)
    seconds = time.perf_counter() - started
    return {"mode": mode, "records": records, "crc_failures": crc_failures,
            "bytes": sum(p.stat().st_size for p in files), "seconds": seconds}


def child(mode: str, directory: Path, split: int) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--data", str(directory),
         "--split-mib", str(split // MIB)], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from commitlog_decode import generate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--file-mib", type=int, default=128)
    parser.add_argument("--split-mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--bodies", default="100,1024")
    parser.add_argument("--cache", default=str(ROOT / ".cache" / "bench"))
    parser.add_argument("--child", choices=("idle", *MODES))
    parser.add_argument("--data")
    args = parser.parse_args()
    split = args.split_mib * MIB
    if args.child:
        print(json.dumps(run_mode(args.child, Path(args.data), split)))
        return
    cache, results = Path(args.cache), {}
    for body in (int(b) for b in args.bodies.split(",")):
        size, file_size = args.size_mib * MIB, args.file_mib * MIB
        dledger = cache / f"dledger-body{body}-{args.size_mib}"
        commitlog = cache / f"commitlog-body{body}-{args.size_mib}"
        entries = generate_dledger(dledger, body, size, file_size)
        # The same records as commitlog segments: as many as the DLedger log holds (its
        # entries are 48 bytes longer, so the commitlog is a little shorter).
        records = generate(commitlog, body, size, file_size)
        print(f"data: {body}-byte bodies, {entries:,} entries / {records:,} records, "
              f"{args.size_mib} MiB in {args.file_mib} MiB files; split {args.split_mib} MiB",
              flush=True)
        dirs = {mode: dledger if mode.startswith("dledger") else commitlog for mode in MODES}
        best = measure(dirs, {"commitlog": records, "dledger": entries}, split, args.repeat)
        _print(body, best)
        results[f"body{body}"] = best
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "dledger-results.json").write_text(json.dumps(results, indent=2))


def measure(dirs: dict[str, Path], counts: dict[str, int], split: int,
            repeat: int) -> dict[str, dict]:
    """Every mode ``repeat`` times, interleaved; the fastest run of each, checked for
    its layout's record count and no CRC failure."""
    best: dict[str, dict] = {}
    for mode in MODES:
        child("idle", dirs[mode], split)
    for _ in range(repeat):
        for mode in MODES:
            expected = counts["dledger" if mode.startswith("dledger") else "commitlog"]
            result = child(mode, dirs[mode], split)
            assert result["records"] == expected, (mode, result["records"], expected)
            assert result["crc_failures"] == 0, result
            if mode not in best or result["seconds"] < best[mode]["seconds"]:
                best[mode] = {**result, "records_per_s": expected / result["seconds"],
                              "mb_per_s": result["bytes"] / result["seconds"] / 1e6}
    return best


def _print(body: int, best: dict[str, dict]) -> None:
    print(f"\n{body}-byte bodies")
    print(f"{'mode':16s} {'seconds':>8s} {'records/s':>11s} {'MB/s':>8s}")
    for mode in MODES:
        r = best[mode]
        print(f"{mode:16s} {r['seconds']:8.2f} {r['records_per_s']:11,.0f} {r['mb_per_s']:8.0f}")
    ratio = best["dledger-arrow"]["records_per_s"] / best["commitlog-arrow"]["records_per_s"]
    print(f"dledger-arrow / commitlog-arrow records/s: {ratio:.2f}x")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
