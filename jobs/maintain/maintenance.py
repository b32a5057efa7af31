"""Table maintenance after a broker's night: compaction, VACUUM, checkpoints, recorded.

``maintain_tables`` runs after the broker's checks (the DAG's ``maintain`` task, or
``python -m jobs maintain --broker NAME``). For every table, per its policy
(:mod:`jobs.maintain.policy`):

1. **compaction**: size-tiered merges of files below the policy's target size
   (:mod:`jobs.maintain.compaction`), in the broker's own partitions (scope ``broker``) or
   across the table (scope ``table``);
2. **VACUUM**: deletes files no version within ``time_travel_days`` refers to, so time
   travel keeps working for that many days and storage stops growing with history. It is
   a *full* VACUUM (what Spark's is): every file the log does not name and older than
   ``time_travel_days`` goes, not only those the tombstones still in the log name. A
   checkpoint drops tombstones older than the table's ``delta.deletedFileRetentionDuration``
   (a week), so with ``time_travel_days`` above that, or a night's maintenance a little
   earlier than the night before's, delta-rs' default VACUUM would leave compacted-away
   files on disk for ever. ``_``- and ``.``-prefixed directories (staging, scratch) are
   never touched, and a load's files not committed yet are younger than a day;
3. **checkpoint**: a checkpoint of the newest version, and log entries older than the
   table's log retention (Delta's default, 30 days) and behind a checkpoint are removed,
   so opening a table reads one checkpoint and a few commits, however old it is.

Two maintenances never work on the same thing at once: each (table, scope) and each
table's VACUUM is taken with a non-blocking lock (:mod:`jobs.lakehouse.locks`); a
maintenance that finds one taken skips it ("skipped": the other one does the work).
A merge commits with ``dataChange = false``, which Delta never counts as a conflict for
blind appends, so loads of other brokers go on meanwhile.

Runs on the driver with delta-rs: no JVM, no Spark application, no pool slot.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jobs.lakehouse import message_lookup
from jobs.lakehouse import tables as T
from jobs.lakehouse.contracts import load_contract
from jobs.lakehouse.disk_space import BOOKKEEPING_ROOM, disk_of, ensure_room
from jobs.lakehouse.driver_rows import append_rows, exists
from jobs.lakehouse.locations import Location, open_delta_table, shared_table_handles
from jobs.lakehouse.locks import try_lock
from jobs.lakehouse.tables import table_location
from jobs.maintain.compaction import (
    CompactionError,
    DataFile,
    clear_scratch,
    data_files,
    merge_files,
    merge_plan,
)
from jobs.maintain.policy import BROKER, POLICIES, TablePolicy
from jobs.maintain.time_travel import MIN_TIME_TRAVEL_DAYS, VACUUM_SAFETY

log = logging.getLogger(__name__)

DONE, SKIPPED = "done", "skipped"
# Parquet settings a table's files are written with, when not the merges' defaults: the
# compaction rewrites them the same way.
PARQUET_OPTIONS = {T.MESSAGE_LOOKUP: message_lookup.parquet_options}
DEFAULT_TIME_TRAVEL_DAYS = 7.0


@dataclass(frozen=True)
class TableState:
    """Files and log of a table at one moment."""

    files: int
    bytes: int
    version: int
    checkpoint_version: int | None
    log_files: int
    log_bytes: int


def table_state(location: str | Path, table: Any = None) -> TableState:
    """The table's files and log now; ``table``: an open delta-rs handle to reuse."""
    table = table if table is not None else open_delta_table(location)
    adds = table.get_add_actions(flatten=True)
    sizes = adds.column("size_bytes").to_pylist() if adds.num_rows else []
    log_entries = [f for f in (Location(str(location)) / "_delta_log").files()
                   if "/" not in f.relative]
    checkpoints = [int(f.relative.split(".")[0]) for f in log_entries
                   if ".checkpoint" in f.relative and f.relative.split(".")[0].isdigit()]
    return TableState(len(sizes), sum(sizes), table.version(),
                      max(checkpoints) if checkpoints else None,
                      len(log_entries), sum(f.size for f in log_entries))


@shared_table_handles()
def maintain_tables(warehouse: str | Path, broker: str, *,
                    time_travel_days: float = DEFAULT_TIME_TRAVEL_DAYS,
                    progress: Callable[[str], None] = log.info) -> list[dict]:
    """Maintain every table for ``broker``'s night and record one row per table."""
    if time_travel_days < MIN_TIME_TRAVEL_DAYS:
        raise ValueError(f"time_travel_days must be at least {MIN_TIME_TRAVEL_DAYS}: "
                         f"{VACUUM_SAFETY}")
    runs = table_location(warehouse, T.MAINTENANCE_RUNS)
    if not exists(runs):
        raise MaintenanceError(f"no table {runs}: maintenance runs after a load, which "
                               "creates the tables")
    ensure_room(f"{broker}: maintenance", disk_of(warehouse), BOOKKEEPING_ROOM)
    run_id = uuid.uuid4().hex
    rows = []
    for name in T.TABLES:
        location = table_location(warehouse, name)
        if not exists(location):
            continue  # never created: nothing to maintain
        row = _maintain_table(str(warehouse), str(location), name, POLICIES[name], broker,
                              time_travel_days)
        progress(f"{name}: {row['outcome']}, files {row['files_before']} -> "
                 f"{row['files_after']} in {row['seconds']:.1f} s"
                 + (f" ({row['detail']})" if row["detail"] else ""))
        rows.append({"run_id": run_id, **row})
    contract = load_contract(T.MAINTENANCE_RUNS)
    append_rows(runs, contract, [tuple(row[c.name] for c in contract.columns)
                                       for row in rows])
    return rows


def compactions(table: Any, policy: TablePolicy, broker: str) -> list[list[DataFile]]:
    """The merges to run now (:func:`jobs.maintain.compaction.merge_plan`): in the broker's
    own partitions (scope broker) or anywhere in the table."""
    files = data_files(table)
    if policy.scope == BROKER:
        files = [f for f in files if dict(f.partition).get("broker") == broker]
    return merge_plan(files, policy.tiers)


def _compact(table: Any, location: str, name: str, policy: TablePolicy, broker: str,
             row: dict) -> list[str]:
    """Run tonight's merges (the scope's lock held); notes on merges not committed."""
    from deltalake.exceptions import CommitFailedError

    scope = broker if policy.scope == BROKER else "table"
    clear_scratch(location, scope)
    layout = PARQUET_OPTIONS.get(name)
    notes: list[str] = []
    for group in compactions(table, policy, broker):
        try:
            written = merge_files(table, location, group, scope, policy.target_file_bytes,
                                  layout() if layout else None)
        except (CommitFailedError, CompactionError) as error:
            notes.append(f"compaction of {len(group)} files not committed ({error}); "
                         "the next maintenance plans again")
            continue
        finally:
            table.update_incremental()
        row["files_compacted"] += len(group)
        row["files_written"] += written
    return notes


class MaintenanceError(RuntimeError):
    """Maintenance cannot run (e.g. the warehouse has no tables yet)."""


def _maintain_table(warehouse: str, location: str, name: str, policy: TablePolicy,
                    broker: str, time_travel_days: float) -> dict:
    started, clock = datetime.now(UTC), time.monotonic()
    table = open_delta_table(location)  # one handle: each step below reads only new commits
    before = table_state(location, table)
    row: dict = {"broker": broker, "table_name": name, "scope": policy.scope,
                 "started_at": started, "outcome": DONE, "detail": None,
                 "files_before": before.files, "bytes_before": before.bytes,
                 "files_compacted": 0, "files_written": 0, "files_vacuumed": 0}
    notes: list[str] = []
    held_by_others = 0
    scope_lock = f"maintain-{name}" + (f"-{broker}" if policy.scope == BROKER else "")
    with try_lock(warehouse, scope_lock) as held:
        if held:
            # Plan from the table as it is now that the lock is ours: another maintenance
            # may have compacted it since this handle was opened, and delta-rs commits a
            # compaction planned on that stale version without a conflict (it removes files
            # already removed and adds their rows again: the partition's rows doubled).
            table.update_incremental()
            notes += _compact(table, location, name, policy, broker, row)
        else:
            notes.append("compaction: another maintenance holds it")
            held_by_others += 1
    with try_lock(warehouse, f"vacuum-{name}") as held:
        if held:
            table.update_incremental()
            row["files_vacuumed"] = len(table.vacuum(
                retention_hours=round(time_travel_days * 24), dry_run=False,
                enforce_retention_duration=False, full=True))
            table.create_checkpoint()
            table.cleanup_metadata()
        else:
            notes.append("VACUUM and checkpoint: another maintenance holds them")
            held_by_others += 1
    table.update_incremental()
    after = table_state(location, table)
    row.update({"files_after": after.files, "bytes_after": after.bytes,
                "delta_version": after.version, "checkpoint_version": after.checkpoint_version,
                "log_files": after.log_files, "log_bytes": after.log_bytes,
                "seconds": round(time.monotonic() - clock, 3),
                "outcome": SKIPPED if held_by_others == 2 else DONE,
                "detail": "; ".join(notes) or None})
    return row
