"""Snapshot retention: delete a broker's snapshots older than the configured days.

Never the current snapshot nor the newest one (the next snapshot reuses its files), never
one made by hand; leftover partial directories of interrupted snapshots go too.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from jobs.snapshot.manifest import (
    PARTIAL_PREFIX,
    broker_dir,
    complete_snapshots,
    snapshot_dir,
    snapshot_time,
)


@dataclass
class Cleanup:
    removed: list[str]
    kept: list[str]
    partials_removed: list[str]
    objects_removed: int = 0  # in a bucket: objects no kept manifest names


def clean_up_snapshots(root: str | Path, broker: str, current: str,
                       retention_days: float) -> Cleanup:
    """Delete the broker's snapshots older than ``retention_days`` before ``current``.

    Never the current snapshot, nor the newest one (the next snapshot reuses its files),
    nor one whose id is not a DAG-made date (made by hand: left to its owner). Leftover
    partial directories of other snapshot ids are removed.
    """
    root = Path(root)
    removed, kept = expired(complete_snapshots(root, broker), current, retention_days)
    for snapshot in removed:
        _remove_tree(snapshot_dir(root, broker, snapshot))
    partials = []
    directory = broker_dir(root, broker)
    for partial in directory.glob(f"{PARTIAL_PREFIX}*") if directory.is_dir() else []:
        if partial.name != f"{PARTIAL_PREFIX}{current}":
            _remove_tree(partial)
            partials.append(partial.name)
    return Cleanup(removed, kept, partials)


def expired(snapshots: list[str], current: str,
            retention_days: float) -> tuple[list[str], list[str]]:
    """(the snapshots to delete, the ones to keep) of ``snapshots`` (oldest first): those
    taken more than ``retention_days`` before ``current``, except ``current``, the newest
    and any whose id is not a DAG-made date."""
    now = snapshot_time(current)
    protected = {current, *(snapshots[-1:])}
    removed, kept = [], []
    for snapshot in snapshots:
        taken = snapshot_time(snapshot)
        too_old = (now is not None and taken is not None
                   and (now - taken).total_seconds() > retention_days * 86400)
        (removed if too_old and snapshot not in protected else kept).append(snapshot)
    return removed, kept


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path)  # read-only files go with their (writable) directories
