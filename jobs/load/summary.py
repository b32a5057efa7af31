"""The one-screen summary of a load (text for people, a dict for JSON and tests)."""

from __future__ import annotations

from jobs.load.job import LoadSummary


def summary_dict(summary: LoadSummary) -> dict[str, object]:
    return {
        "broker": summary.broker,
        "snapshot_id": summary.snapshot_id,
        "snapshot_seq": summary.snapshot_seq,
        "run_id": summary.run_id,
        "skipped": summary.skipped,
        "seconds": round(summary.seconds, 2),
        "bytes_read": summary.bytes_read,
        "quarantined_bytes": summary.quarantined_bytes,
        "retention_gap_bytes": summary.retention_gap_bytes,
        "tables": {name: {"rows_added": r.rows, "bytes_read": r.bytes_read, "tasks": r.tasks,
                          "seconds": round(r.seconds, 2), "outcome": r.outcome,
                          "detail": r.detail}
                   for name, r in summary.results.items()},
    }


def format_summary(summary: LoadSummary) -> str:
    head = (f"broker {summary.broker!r}, snapshot {summary.snapshot_id!r} "
            f"(#{summary.snapshot_seq})")
    if summary.skipped:
        return f"{head}: already loaded, nothing changed ({summary.seconds:.1f} s)"
    lines = [head, "",
             f"{'table':22} {'rows added':>12} {'MiB read':>9} {'tasks':>6} {'seconds':>8}  "
             "outcome"]
    for r in summary.results.values():
        lines.append(f"{r.table:22} {r.rows:>12,} {r.bytes_read / 2**20:>9.1f} {r.tasks:>6} "
                     f"{r.seconds:>8.1f}  {r.outcome}")
    rate = summary.bytes_read / summary.seconds / 1e6 if summary.seconds else 0.0
    lines += ["",
              f"read {summary.bytes_read / 2**20:.1f} MiB in {summary.seconds:.1f} s "
              f"({rate:.1f} MB/s); quarantined {summary.quarantined_bytes:,} bytes; "
              f"retention gap {summary.retention_gap_bytes:,} commitlog bytes",
              "query: python -m jobs sql \"SELECT topic, count(*) FROM rmq.messages "
              "GROUP BY topic\""]
    return "\n".join(lines)
