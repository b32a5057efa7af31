"""What unwrapping inner batches costs on top of the Arrow scan, by share of inner records.

``rmqlib.commitlog.arrow.unwrap_inner_batches`` turns every inner-batch record (spec
§2.6, a BatchCQ topic's batch send) into its members. The baseline, run side by side, is
``scan_segment_arrow`` alone over the same file; the figure is the ratio
(scan + unwrap) / scan, for commitlogs where 0 %, 1 %, 10 %, 50 % and 100 % of the records
are inner batches (the rest ordinary 1 KiB messages).

Data: one 64 MiB segment per share, written once into ``.cache/bench/unwrap/`` with the
test encoder (``tests/rmq_encoder.py``); members carry a UNIQ_KEY, TAGS and KEYS like the
5.x client's batch send.

Usage: python bench/unwrap_inner.py [--size-mib 64] [--members 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

MIB = 1024 * 1024
INNER = 0x40 | 0x80
SHARES = (0.0, 0.01, 0.1, 0.5, 1.0)


def _ordinary(index: int):  # type: ignore[no-untyped-def]
    import rmq_encoder as E

    return E.Message(topic="PlainTopic", body=random.Random(index).randbytes(1024),
                     queue_id=index % 4,
                     properties=(("KEYS", f"order-{index}"), ("TAGS", f"t{index % 5}"),
                                 ("UNIQ_KEY", f"0A000001{index:024X}")))


def _inner_batch(index: int, members: int, base: int):  # type: ignore[no-untyped-def]
    import rmq_encoder as E

    from rmqlib.commitlog.innerbatch import encode_inner_batch

    rng = random.Random(index)
    body = encode_inner_batch([
        (0, rng.randbytes(100), {"KEYS": f"k-{index}-{m}", "TAGS": f"t{m % 3}",
                                 "UNIQ_KEY": f"0A000002{index:016X}{m:08X}"})
        for m in range(members)])
    return E.Message(topic="BatchTopic", body=body, sysflag=INNER, queue_offset=base,
                     properties=(("INNER_NUM", str(members)), ("INNER_BASE", str(base)),
                                 ("UNIQ_KEY", f"0A000003{index:024X}")))


def generate(path: Path, share: float, size: int, members: int) -> int:
    """One segment of ``size`` bytes where ``share`` of the records are inner batches."""
    if path.exists():
        return 0
    import rmq_encoder as E

    writer = E.CommitLogWriter(size, assign_queue_offsets=False)
    rng = random.Random(42)
    index = 0
    base = 0
    while len(writer.segments) == 1:
        if rng.random() < share:
            message = _inner_batch(index, members, base)
            base += members
        else:
            message = _ordinary(index)
        writer.append(message)
        index += 1
    writer.segments.pop()  # the roll opened a second file: keep exactly one full segment
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(writer.segments[0]))
    return index


def scan(path: Path) -> int:
    from rmqlib.commitlog.arrow import scan_segment_arrow

    return sum(batch.num_rows for batch in scan_segment_arrow(path))


def scan_and_unwrap(path: Path) -> int:
    from rmqlib.commitlog.arrow import scan_segment_arrow, unwrap_inner_batches

    return sum(unwrap_inner_batches(batch).num_rows for batch in scan_segment_arrow(path))


def best_of(fn, path: Path, repeat: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    times = []
    rows = 0
    for _ in range(repeat):
        start = time.perf_counter()
        rows = fn(path)
        times.append(time.perf_counter() - start)
    return min(times), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| inner share | records | messages out | scan s | scan+unwrap s | ratio |")
    print("|---:|---:|---:|---:|---:|---:|")
    for share in SHARES:
        path = (ROOT / ".cache" / "bench" / "unwrap"
                / f"{args.size_mib}mib-{args.members}m-{share:g}" / f"{0:020d}")
        generate(path, share, args.size_mib * MIB, args.members)
        scan(path)  # page cache and imports warm before either timing
        scan_s, records = best_of(scan, path, args.repeat)
        unwrap_s, messages = best_of(scan_and_unwrap, path, args.repeat)
        print(f"| {share:.0%} | {records:,} | {messages:,} | {scan_s:.2f} | {unwrap_s:.2f} "
              f"| {unwrap_s / scan_s:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
