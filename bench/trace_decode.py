"""Trace bodies against the commitlog: how fast rmqlib.traces decodes what clients write.

Generates trace bodies as a traced client's ``AsyncTraceDispatcher`` sends them (contexts
encoded as ``TraceDataEncoder`` writes them, by the encoder of tests/test_traces.py,
joined into bodies of up to 128,000 characters: one send and one consumption, Pub +
SubBefore + SubAfter, per message), then measures side by side, best of ``--repeat``: the
bodies through ``decode_trace_body`` (the reference, record by record), through
``decode_trace_bodies`` (the columnar path), and the commitlog of the embedded real-broker store
through ``scan_segment_arrow`` (rmqlib's Arrow scan, the load's path), in MB/s of input.

Usage: python bench/trace_decode.py [--messages 200000] [--repeat 3]
Results: printed. See bench/README.md ("Trace bodies").
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_traces import encode  # noqa: E402

from rmqlib.commitlog.arrow import scan_segment_arrow  # noqa: E402
from rmqlib.traces import PUB, SUB_AFTER, SUB_BEFORE, TraceRecord, decode_trace_body  # noqa: E402
from rmqlib.traces_arrow import decode_trace_bodies  # noqa: E402

BODY_CHARS = 128_000  # AsyncTraceDispatcher's maxMsgSize
STORE = ROOT / ".cache" / "stores" / "v5-clean" / "store" / "commitlog"


def bodies(messages: int) -> list[bytes]:
    """The trace bodies of ``messages`` traced sends, each consumed once."""
    rng = random.Random(7)
    out, current = [], []
    size = 0
    for number in range(messages):
        msg_id = f"7F00000100002A9F0000{number:012X}"
        now = 1_764_000_000_000 + number
        contexts = [
            TraceRecord(0, 0, PUB, timestamp_ms=now, region_id="DefaultRegion",
                        group="PG_ORDERS", topic="TopicOrders", msg_id=msg_id,
                        tags=f"tag{number % 5}", keys=f"order-{number}",
                        store_host="10.0.0.7:10911", body_length=rng.randint(100, 2000),
                        cost_ms=rng.randint(0, 20), msg_type="Normal_Msg",
                        offset_msg_id=f"0A00000700002A9F{number * 300:016X}", success=True),
            TraceRecord(0, 0, SUB_BEFORE, timestamp_ms=now + 5, region_id="DefaultRegion",
                        group="CG_BILLING", request_id=f"req-{number}", msg_id=msg_id,
                        retry_times=0, keys=f"order-{number}"),
            TraceRecord(0, 0, SUB_AFTER, request_id=f"req-{number}", msg_id=msg_id,
                        cost_ms=rng.randint(0, 50), success=True, keys=f"order-{number}",
                        context_code=0, timestamp_ms=now + 9, group="CG_BILLING")]
        for context in contexts:
            text = encode(context)
            current.append(text)
            size += len(text)
            if size >= BODY_CHARS:
                out.append("".join(current).encode("utf-8"))
                current, size = [], 0
    if current:
        out.append("".join(current).encode("utf-8"))
    return out


def best(repeat: int, run) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    data = bodies(args.messages)
    body_bytes = sum(map(len, data))

    def decode_all() -> None:
        for body in data:
            decode_trace_body(body)

    contexts = sum(len(decode_trace_body(body).records) for body in data)
    trace_s = best(args.repeat, decode_all)
    assert decode_trace_bodies(data).records.num_rows == contexts
    columns_s = best(args.repeat, lambda: decode_trace_bodies(data))
    segments = sorted(STORE.iterdir())
    scan_bytes = sum(p.stat().st_size for p in segments)

    def scan_all() -> None:
        for segment in segments:
            for _batch in scan_segment_arrow(segment):
                pass

    scan_s = best(args.repeat, scan_all)
    print(f"trace bodies: {len(data)} bodies, {contexts:,} contexts, {body_bytes / 1e6:.1f} MB "
          f"in {trace_s:.2f} s = {body_bytes / 1e6 / trace_s:.1f} MB/s, "
          f"{contexts / trace_s / 1e3:.0f} k contexts/s")
    print(f"the same, columnar (rmqlib.traces_arrow): {columns_s:.2f} s = "
          f"{body_bytes / 1e6 / columns_s:.1f} MB/s, {contexts / columns_s / 1e3:.0f} k "
          f"contexts/s, {trace_s / columns_s:.1f}x the reference")
    print(f"commitlog scan (v5-clean, {len(segments)} segments, {scan_bytes / 1e6:.1f} MB with "
          f"zero tails): {scan_s:.2f} s = {scan_bytes / 1e6 / scan_s:.1f} MB/s")


if __name__ == "__main__":
    main()
