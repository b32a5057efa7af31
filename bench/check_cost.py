"""What one night's check reads: seconds, files opened and bytes read, step by step.

Runs ``jobs.check_job.check_snapshot`` for one snapshot of a warehouse (by default the
broker's latest) in a child process, on a copy of the warehouse (the check rewrites its
own rows, and the original stays as it was; the check's output, ``_checks``, is in it,
as in the DAG's default), and again under ``strace`` when the machine
has it (seconds and bytes come from the first run, files from the second).
The child marks the start of every step (the check job's five, and the reconcile's
views, checks and lag) with a failing ``open`` of ``/rmq-check-step/<step>`` that strace
records, so the files opened between two marks are that step's. Bytes are the process's
``rchar`` (/proc/self/io: every byte a read system call returned, page cache or disk).

Usage: python bench/check_cost.py WAREHOUSE BROKER [--snapshot ID] [--json OUT]
       (bench/years.py --keep-nights 10,100 copies the series' warehouse after those nights)
Prints a table per step: seconds, files opened (data files, Delta log files, and the
other files and directories of the warehouse: the GX project, the reports; each counted
once per step), bytes read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "/rmq-check-step/"


# ----------------------------------------------------------------------- in the child


def _mark(step: str, clock: list[float], marks: list[dict]) -> None:
    """Close the previous step's figures and open ``step``'s."""
    now, read = time.monotonic(), _rchar()
    if marks:
        marks[-1]["seconds"] = round(now - clock[0], 3)
        marks[-1]["rchar"] = read - marks[-1]["rchar"]
    clock[0] = now
    marks.append({"step": step, "rchar": read})
    with contextlib.suppress(OSError):  # it fails: strace records the attempt
        os.open(MARK + step, os.O_RDONLY)


def _rchar() -> int:
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar"))


def child(warehouse: Path, broker: str, snapshot_id: str) -> list[dict]:
    """Run the check with a mark before each step (module functions wrapped in place)."""
    sys.path[:0] = [str(ROOT)]
    import jobs.check.reconcile as reconcile
    import jobs.check_job as check_job

    clock: list[float] = [time.monotonic()]
    marks: list[dict] = []

    def marked(module, name: str, step: str) -> None:  # type: ignore[no-untyped-def]
        original = getattr(module, name)

        def run(*args, **kwargs):  # type: ignore[no-untyped-def]
            _mark(step, clock, marks)
            return original(*args, **kwargs)

        setattr(module, name, run)

    for name, step in (("snapshot_scope", "scope"), ("reconcile_snapshot", "reconcile"),
                       ("judge_snapshot", "consumer status"),
                       ("run_expectations", "expectations"), ("write_report", "report"),
                       ("condition_history", "alert history"), ("evaluate", "alert")):
        marked(check_job, name, step)
    for name, step in (("create_views", "reconcile: views"),
                       ("findings_sql", "reconcile: checks"),
                       ("consumer_lag_sql", "reconcile: lag")):
        marked(reconcile, name, step)
    _mark("setup", clock, marks)
    check_job.check_snapshot(lambda: None, warehouse, broker, snapshot_id,  # type: ignore[arg-type]
                             engine="local")
    _mark("end", clock, marks)
    return marks[:-1]


# ----------------------------------------------------------------------- in the parent


def latest_snapshot(warehouse: Path, broker: str) -> str:
    sys.path[:0] = [str(ROOT)]
    from jobs.lakehouse import tables as T
    from jobs.lakehouse.driver_rows import read_rows

    rows = read_rows(T.table_location(warehouse, T.SNAPSHOTS), broker=broker)
    return max((r for r in rows if r["status"] == "loaded"),
               key=lambda r: r["snapshot_seq"])["snapshot_id"]


def opened_per_step(trace: Path, warehouse: Path) -> dict[str, dict[str, set[str]]]:
    """{step: {"data": paths, "log": paths}} from strace's openat lines."""
    opened: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    step, root = "setup", str(warehouse)
    pattern = re.compile(r'open(?:at)?\((?:[^,]+, )?"([^"]+)"')
    for line in trace.read_text(errors="replace").splitlines():
        found = pattern.search(line)
        if not found:
            continue
        path = found.group(1)
        if path.startswith(MARK):
            step = path[len(MARK):]
        elif path.startswith(root) and "= -1" not in line:
            relative = path[len(root) + 1:]
            kind = "log" if "/_delta_log/" in path else \
                "data" if path.endswith(".parquet") else "other"
            opened[step][kind].add(relative)
    return opened


def _earlier_reports(directory: str, names: list[str]) -> list[str]:
    """What the copy leaves out: the report pages of earlier nights (a few MiB each, never
    read by a check). The GX project and its stores are copied: they are history too."""
    return names if Path(directory).parent.name == "reports" else []


def measure(warehouse: Path, broker: str, snapshot_id: str | None,
            trace: bool = True) -> list[dict]:
    """The check's steps (seconds, bytes read; with ``trace``, files opened, from a second
    run under strace)."""
    snapshot_id = snapshot_id or latest_snapshot(warehouse, broker)
    with tempfile.TemporaryDirectory(prefix="check-cost-") as scratch:
        copy = Path(scratch) / "warehouse"
        shutil.copytree(warehouse, copy, ignore=_earlier_reports)
        trace, out = Path(scratch) / "strace.txt", Path(scratch) / "marks.json"
        command = [sys.executable, __file__, "--child", str(copy), broker, snapshot_id,
                   "--json", str(out)]
        # timed without strace (it slows every system call); traced on a second copy
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        marks = json.loads(out.read_text())
        opened: dict[str, dict[str, set[str]]] = {}
        if trace and shutil.which("strace"):
            shutil.rmtree(copy)
            shutil.copytree(warehouse, copy, ignore=_earlier_reports)
            subprocess.run(["strace", "-f", "-qq", "-e", "trace=open,openat", "-o",
                            str(trace), *command], check=True, stdout=subprocess.DEVNULL)
            opened = opened_per_step(trace, copy)
    for mark in marks:
        files = opened.get(mark["step"], {})
        mark["data_files"] = len(files.get("data", ()))
        mark["log_files"] = len(files.get("log", ()))
        mark["other_files"] = len(files.get("other", ()))
        mark["tables"] = sorted({p.split("/")[0] for kind in files.values() for p in kind})
    return marks


def print_table(marks: list[dict], title: str) -> None:
    print(f"\n{title}\n| step | s | data files | Delta log files | other files and "
          "directories | MiB read |\n|---|---:|---:|---:|---:|---:|")
    for m in [*marks, _total(marks)]:
        print(f"| {m['step']} | {m['seconds']:.2f} | {m['data_files']} | {m['log_files']} "
              f"| {m.get('other_files', 0)} | {m['rchar'] / 2**20:.1f} |")


def _total(marks: list[dict]) -> dict:
    return {"step": "total", **{field: sum(m.get(field, 0) for m in marks) for field in
                                ("seconds", "data_files", "log_files", "other_files", "rchar")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("warehouse", type=Path)
    parser.add_argument("broker")
    parser.add_argument("snapshot", nargs="?")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.child:
        args.json.write_text(json.dumps(child(args.warehouse, args.broker, args.snapshot)))
        return
    marks = measure(args.warehouse, args.broker, args.snapshot)
    print_table(marks, f"check of {args.broker} {args.snapshot or '(latest)'} in {args.warehouse}")
    if args.json:
        args.json.write_text(json.dumps(marks, indent=1))


if __name__ == "__main__":
    main()
