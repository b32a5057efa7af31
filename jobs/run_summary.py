"""The one-screen summary after a pipeline run (``python -m jobs summary``, ``make run``).

Read with delta-rs on the driver, no Spark: tables and row counts, the snapshot's check
results by severity, its consumer lag per group, the alert raised, and where the report,
the Data Docs and the SQL command are. Every number comes from the Delta tables and the
snapshot's manifest, so it shows what the run left behind, not what it meant to do.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import arrow_dataset, exists, read_rows
from jobs.lakehouse.tables import table_location
from jobs.pipeline_config import PipelineConfig
from jobs.snapshot.roots import snapshots_at

LAG_ROWS = 12


def _rows(warehouse: Path, table: str, **equal: object) -> list[dict[str, Any]]:
    return read_rows(table_location(warehouse, table), **equal)


def _count(warehouse: Path, table: str) -> int | None:
    location = table_location(warehouse, table)
    if not exists(location):
        return None
    return arrow_dataset(location).count_rows()


def format_run_summary(config: PipelineConfig, broker: str, snapshot_id: str) -> str:
    warehouse = config.warehouse
    lines = [f"== rmq_nightly: broker {broker}, snapshot {snapshot_id}"]
    manifest = snapshots_at(config.snapshot_root).manifest(broker, snapshot_id)
    if manifest is not None:
        lines.append(manifest.summary())
        lines += [f"  note: {note}" for note in manifest.notes]
    lines += ["", f"tables ({warehouse / (T.DATABASE + '.db')}):"]
    for table in T.TABLES:
        count = _count(warehouse, table)
        lines.append(f"  rmq.{table:<20} {'-' if count is None else f'{count:>10,}'} rows")
    lines += ["", *_check_lines(warehouse, broker, snapshot_id)]
    lines += ["", *_lag_lines(warehouse, broker, snapshot_id)]
    lines += ["", *_status_lines(warehouse, broker, snapshot_id)]
    lines += ["", *_alert_lines(warehouse, broker, snapshot_id)]
    report = config.checks_output / "reports" / broker / f"{snapshot_id}.html"
    docs = config.checks_output / "gx" / broker / "gx" / "uncommitted" / "data_docs" / "local_site"
    lines += ["", f"report:    {report}" + ("" if report.is_file() else " (not written)"),
              f"data docs: {docs / 'index.html'}",
              f"SQL:       RMQ_WAREHOUSE={warehouse} .venv/bin/python -m jobs sql "
              f"\"SELECT topic, count(*) FROM rmq.messages WHERE broker = '{broker}' "
              "GROUP BY topic\"",
              "           (.venv/bin/python -m jobs sql --list: the saved queries)"]
    return "\n".join(lines)


def _check_lines(warehouse: Path, broker: str, snapshot_id: str) -> list[str]:
    rows = _rows(warehouse, T.CHECK_RESULTS, broker=broker, snapshot_id=snapshot_id)
    by_severity: dict[str, Counter[str]] = defaultdict(Counter)
    for row in rows:
        by_severity[row["severity"]][row["check_name"]] += 1
    lines = [f"check results: {len(rows)} finding(s)"]
    for severity in ("error", "warning", "info"):
        checks = by_severity.get(severity)
        if checks:
            names = ", ".join(f"{name} x{n}" if n > 1 else name for name, n in checks.items())
            lines.append(f"  {severity:<8} {sum(checks.values()):>4}: {names}")
    return lines


def _lag_lines(warehouse: Path, broker: str, snapshot_id: str) -> list[str]:
    rows = _rows(warehouse, T.CONSUMER_LAG, broker=broker, snapshot_id=snapshot_id)
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["group_name"], row["topic"])
        group = groups.setdefault(key, {"queues": 0, "lag": 0, "seconds": 0.0,
                                        "statuses": Counter()})
        group["queues"] += 1
        group["lag"] += row["lag_messages"] or 0
        group["seconds"] = max(group["seconds"], row["lag_seconds"] or 0.0)
        group["statuses"][row["status"]] += 1
    lines = [f"consumer lag ({len(rows)} queue rows; largest first):",
             f"  {'group':<28} {'topic':<28} {'queues':>6} {'lag msgs':>9} {'oldest':>9}  status"]
    ranked = sorted(groups.items(), key=lambda item: (-item[1]["lag"], item[0]))
    for (group_name, topic), group in ranked[:LAG_ROWS]:
        statuses = ",".join(f"{s}" if n == group["queues"] else f"{s}:{n}"
                            for s, n in sorted(group["statuses"].items()))
        lines.append(f"  {group_name[:28]:<28} {topic[:28]:<28} {group['queues']:>6} "
                     f"{group['lag']:>9,} {group['seconds'] / 60:>7.1f}m  {statuses}")
    if len(ranked) > LAG_ROWS:
        lines.append(f"  ... {len(ranked) - LAG_ROWS} more (rmq.consumer_lag)")
    return lines


def _status_lines(warehouse: Path, broker: str, snapshot_id: str) -> list[str]:
    """Each group's consumer status (worst first), lag and catch-up estimate."""
    from jobs.alerts.evaluation import catch_up_text
    from jobs.check.consumer_status import RANK

    rows = [r for r in _rows(warehouse, T.CONSUMER_STATUS, broker=broker,
                             snapshot_id=snapshot_id) if r["level"] == "group"]
    if not rows:
        return ["consumer status: none judged"]
    rows.sort(key=lambda r: (-RANK.get(str(r["status"]), 0), str(r["group_name"])))
    lines = [f"consumer status ({len(rows)} groups; worst first):"]
    for row in rows[:LAG_ROWS]:
        lines.append(f"  {str(row['group_name'])[:28]:<28} {row['status']:<6} since "
                     f"{row['status_since_snapshot_id']}  lag {row['lag_messages']:,}; "
                     f"{catch_up_text(row)}")
    if len(rows) > LAG_ROWS:
        lines.append(f"  ... {len(rows) - LAG_ROWS} more (rmq.consumer_status)")
    return lines


def _alert_lines(warehouse: Path, broker: str, snapshot_id: str) -> list[str]:
    rows = _rows(warehouse, T.ALERTS, broker=broker, snapshot_id=snapshot_id)
    if not rows:
        return ["alerts: none raised"]
    row = rows[0]
    delivery = dict(row["delivery"] or [])
    lines = [f"alert [{row['severity']}]: {row['title']}"]
    lines += [f"  - {finding}" for finding in row["findings"] or []]
    lines.append("  delivery: " + (", ".join(f"{c}={s}" for c, s in delivery.items())
                                   or "no channel configured"))
    return lines
