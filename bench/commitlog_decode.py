"""Commitlog decoding benchmark: naive parser vs raw read vs rmqlib record API vs Arrow.

One run generates (once, cached) commitlogs laid out the broker's way with the test
encoder, then measures side by side, each mode in a fresh subprocess so its peak RSS
(VmHWM) is its own:

  naive    bench/naive_commitlog.py: f.read + struct.unpack per field (seed blog style)
  raw      reading the files' bytes into memory, one split-sized buffer (upper bound)
  records  rmqlib.commitlog.records.scan_segment per split: every field, body + property CRCs
  arrow    rmqlib.commitlog.arrow.scan_segment_arrow per split: full-schema batches, CRCs
  arrow-whole   the same with one split per file, to show memory does not follow the range
  arrow-nocrc   arrow with verify_crc=False (informational: what CRC verification costs)

Usage: python bench/commitlog_decode.py [--size-mib 512] [--split-mib 64] [--repeat 2]
Results: a table on stdout and .cache/bench/results.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

MIB = 1024 * 1024
MODES = ("naive", "raw", "records", "arrow", "arrow-whole", "arrow-nocrc")


# ----------------------------------------------------------------------------- data


def uniq_key(index: int) -> str:
    """The UNIQ_KEY (client msgId) of generated message ``index``."""
    return f"0A0000011A2B00000000{index:012X}"


def message_keys(index: int) -> tuple[str, str]:
    """The KEYS of generated message ``index``: one of its own, one shared by every 97th."""
    return f"order-{index:012d}", f"user-{index % 97:04d}"


def _template_message(index: int, body_size: int,  # type: ignore[no-untyped-def]
                      time_step_ms: int = 1):
    import rmq_encoder as E

    return E.Message(
        topic=("OrderTopic", "PaymentTopic", "AuditTopic")[index % 3],
        body=random.Random(index).randbytes(body_size),
        properties=[("KEYS", " ".join(message_keys(index))),
                    ("TAGS", f"tag{index % 5}"),
                    ("UNIQ_KEY", uniq_key(index)),
                    ("CLUSTER", "DefaultCluster"), ("WAIT", "true")],
        queue_id=index % 4, queue_offset=index // 12,
        born_timestamp=1_700_000_000_000 + index * time_step_ms,
        store_timestamp=1_700_000_000_007 + index * time_step_ms,
        trailing_separator=False,
    )


class FastRecords:
    """Records made by the test encoder once per (topic, queue) template, then patched
    per message (offsets, timestamps, body, CRC, keys, id): same bytes as encoding each
    message from scratch (checked on the first ones), 50x faster. Message ``i`` is born
    and stored ``i * time_step_ms`` ms after the first (a larger step spans more days)."""

    def __init__(self, body_size: int, time_step_ms: int = 1) -> None:
        import rmq_encoder as E

        self.E = E
        self.body_size = body_size
        self.time_step_ms = time_step_ms
        self.templates = {}
        for index in range(12):
            built = E.build(_template_message(index, body_size), 0)
            props_at = len(built.record) - len(built.properties)
            self.templates[index] = (built.record, props_at)

    def record(self, index: int, physical_offset: int) -> bytes:
        template, props_at = self.templates[index % 12]
        out = bytearray(template)
        body = random.Random(index).randbytes(self.body_size)
        struct.pack_into(">i", out, 8, zlib.crc32(body) & 0x7FFFFFFF)
        struct.pack_into(">q", out, 20, index // 12)
        struct.pack_into(">q", out, 28, physical_offset)
        struct.pack_into(">q", out, 40, 1_700_000_000_000 + index * self.time_step_ms)
        struct.pack_into(">q", out, 56, 1_700_000_000_007 + index * self.time_step_ms)
        out[88 : 88 + self.body_size] = body
        keys = " ".join(message_keys(index)).encode()
        out[props_at + 5 : props_at + 5 + len(keys)] = keys
        tag_at = props_at + 5 + len(keys) + 1 + 5
        out[tag_at : tag_at + 4] = f"tag{index % 5}".encode()
        uniq_at = tag_at + 4 + 1 + 9
        out[uniq_at : uniq_at + 32] = uniq_key(index).encode()
        return bytes(out)

    def check(self, count: int) -> None:
        for index in range(count):
            expected = self.E.encode(
                _template_message(index, self.body_size, self.time_step_ms), index * 7)
            assert self.record(index, index * 7) == expected, f"template patch differs {index}"


def generate(directory: Path, body_size: int, size: int, segment_size: int, *,
             time_step_ms: int = 1, marker: Path | None = None) -> int:
    """Segments of ``segment_size`` filled the broker's way until ``size`` bytes; returns
    the record count. Cached: reused when the marker file (default ``DONE.json`` in
    ``directory``; put it elsewhere when ``directory`` is a store's ``commitlog/``)
    matches."""
    marker = marker or directory / "DONE.json"
    wanted = {"body_size": body_size, "size": size, "segment": segment_size, "v": 1}
    if time_step_ms != 1:
        wanted["time_step_ms"] = time_step_ms
    if marker.exists() and json.loads(marker.read_text()).get("params") == wanted:
        return json.loads(marker.read_text())["records"]
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.iterdir():
        old.unlink()
    maker = FastRecords(body_size, time_step_ms)
    maker.check(200)
    index = 0
    for start in range(0, size, segment_size):
        segment = bytearray(segment_size)
        position = 0
        while True:
            record = maker.record(index, start + position)
            if position + len(record) + 8 > segment_size:
                struct.pack_into(">iI", segment, position, segment_size - position,
                                 0xCBD43194)  # BLANK: the rest of the file
                break
            segment[position : position + len(record)] = record
            position += len(record)
            index += 1
        (directory / f"{start:020d}").write_bytes(segment)
    marker.write_text(json.dumps({"params": wanted, "records": index}))
    return index


# ----------------------------------------------------------------------------- modes


def segment_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.isdigit())


def run_mode(mode: str, directory: Path, split: int) -> dict[str, object]:
    """Run one mode in this process; returns counts, seconds and peak RSS."""
    from rmqlib.commitlog.arrow import scan_segment_arrow
    from rmqlib.commitlog.records import scan_segment, split_ranges

    files = segment_files(directory)
    records = crc_failures = 0
    started = time.perf_counter()
    if mode == "naive":
        from naive_commitlog import parse_file

        for path in files:
            for _ in parse_file(path):
                records += 1
    elif mode == "raw":
        buffer = bytearray(split)
        for path in files:
            with open(path, "rb", buffering=0) as f:
                while f.readinto(buffer):
                    pass
    elif mode == "records":
        for path in files:
            for start, end in split_ranges(path.stat().st_size, split):
                scan = scan_segment(path, start, end)
                for _ in scan:
                    records += 1
                crc_failures += len(scan.result.body_crc_failures)
    elif mode.startswith("arrow"):
        for path in files:
            size = path.stat().st_size
            for start, end in split_ranges(size, size if mode == "arrow-whole" else split):
                scan = scan_segment_arrow(path, start, end, verify_crc=mode != "arrow-nocrc")
                for batch in scan:
                    records += batch.num_rows
                crc_failures += len(scan.result.body_crc_failures)
    elif mode != "idle":
        raise ValueError(mode)
    seconds = time.perf_counter() - started
    return {"mode": mode, "records": records, "crc_failures": crc_failures,
            "bytes": sum(p.stat().st_size for p in files), "seconds": seconds,
            "peak_rss_mib": _vm_hwm_kib() / 1024}


def _vm_hwm_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def child(mode: str, directory: Path, split: int) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--data", str(directory),
         "--split-mib", str(split // MIB)],
        check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- report


def measure(directory: Path, expected: int, split: int, repeat: int) -> dict[str, dict]:
    child("raw", directory, split)  # warm the page cache
    best: dict[str, dict] = {"idle": child("idle", directory, split)}
    for _ in range(repeat):
        for mode in MODES:
            result = child(mode, directory, split)
            if mode != "raw":
                assert result["records"] == expected, (mode, result["records"], expected)
                assert result["crc_failures"] == 0, result
            previous = best.get(mode)
            if previous is None or result["seconds"] < previous["seconds"]:
                if previous is not None:
                    result["peak_rss_mib"] = max(result["peak_rss_mib"],
                                                 previous["peak_rss_mib"])
                best[mode] = result
    for result in best.values():
        seconds = result["seconds"] or 1e-9
        result["records_per_s"] = expected / seconds
        result["mb_per_s"] = result["bytes"] / seconds / 1e6
    return best


def print_table(title: str, best: dict[str, dict]) -> None:
    print(f"\n{title}")
    print(f"{'mode':12s} {'seconds':>8s} {'records/s':>11s} {'MB/s':>8s} {'peak RSS MiB':>13s}")
    for mode in ("idle", *MODES):
        r = best[mode]
        rate = "" if mode in ("idle", "raw") else f"{r['records_per_s']:11,.0f}"
        print(f"{mode:12s} {r['seconds']:8.2f} {rate:>11s} {r['mb_per_s']:8.0f} "
              f"{r['peak_rss_mib']:13.0f}")
    naive, raw, arrow = best["naive"], best["raw"], best["arrow"]
    print(f"arrow / naive records/s: {arrow['records_per_s'] / naive['records_per_s']:.2f}x;"
          f" records / naive: {best['records']['records_per_s'] / naive['records_per_s']:.2f}x;"
          f" arrow / raw MB/s: {arrow['mb_per_s'] / raw['mb_per_s']:.3f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=512)
    parser.add_argument("--segment-mib", type=int, default=256)
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
    cache = Path(args.cache)
    results = {}
    for body in (int(b) for b in args.bodies.split(",")):
        directory = cache / f"commitlog-body{body}"
        started = time.perf_counter()
        count = generate(directory, body, args.size_mib * MIB, args.segment_mib * MIB)
        print(f"data: {body}-byte bodies, {count:,} records, {args.size_mib} MiB in "
              f"{args.segment_mib} MiB segments ({time.perf_counter() - started:.0f}s to "
              f"prepare); split {args.split_mib} MiB", flush=True)
        best = measure(directory, count, split, args.repeat)
        print_table(f"{body}-byte bodies", best)
        results[f"body{body}"] = best
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "results.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
