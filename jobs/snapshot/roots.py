"""Where a fleet's snapshots live: a local directory or a bucket, behind one interface.

:func:`snapshots_at` gives the snapshots under ``snapshot_root`` as
:class:`LocalSnapshots` (dated directories, :mod:`jobs.snapshot.copier`) or
:class:`jobs.snapshot.bucket.BucketSnapshots` (objects and manifests). The pipeline's
steps take, read and clean up snapshots only through it, so a night runs the same on both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from jobs.lakehouse.locations import Location, warehouse_location
from jobs.snapshot.bucket import BucketSnapshots, Progress
from jobs.snapshot.copier import SnapshotError, take_snapshot
from jobs.snapshot.manifest import (
    MANIFEST,
    Manifest,
    complete_snapshots,
    snapshot_dir,
    snapshot_store,
)
from jobs.snapshot.retention import Cleanup, clean_up_snapshots
from jobs.snapshot.sources import StoreSource


class Snapshots(Protocol):
    """What the pipeline does with a night's snapshots, wherever they are."""

    def ids(self, broker: str) -> list[str]: ...

    def manifest(self, broker: str, snapshot_id: str) -> Manifest | None: ...

    def describe(self, broker: str, snapshot_id: str) -> str: ...

    def take(self, source: StoreSource, broker: str, snapshot_id: str, *,
             progress: Progress | None = None,
             make_room: Callable[[], object] | None = None) -> Manifest: ...

    def local_store(self, broker: str, snapshot_id: str, *,
                    progress: Progress | None = None) -> Path: ...

    def clean_up(self, broker: str, current: str, retention_days: float) -> Cleanup: ...


@dataclass(frozen=True)
class LocalSnapshots:
    """Snapshots as dated directories under a local (or shared) directory."""

    root: Path

    def ids(self, broker: str) -> list[str]:
        return complete_snapshots(self.root, broker)

    def manifest(self, broker: str, snapshot_id: str) -> Manifest | None:
        path = snapshot_dir(self.root, broker, snapshot_id) / MANIFEST
        return Manifest.load(path) if path.is_file() else None

    def describe(self, broker: str, snapshot_id: str) -> str:
        return str(snapshot_store(self.root, broker, snapshot_id))

    def take(self, source: StoreSource, broker: str, snapshot_id: str, *,
             progress: Progress | None = None,
             make_room: Callable[[], object] | None = None) -> Manifest:
        return take_snapshot(source, self.root, broker, snapshot_id, progress=progress,
                             make_room=make_room)

    def local_store(self, broker: str, snapshot_id: str, *,
                    progress: Progress | None = None) -> Path:
        if self.manifest(broker, snapshot_id) is None:
            raise SnapshotError(f"{broker}: no snapshot {snapshot_id} in {self.root / broker}")
        return snapshot_store(self.root, broker, snapshot_id)

    def clean_up(self, broker: str, current: str, retention_days: float) -> Cleanup:
        return clean_up_snapshots(self.root, broker, current, retention_days)


def snapshots_at(root: str | Path | Location) -> Snapshots:
    """The snapshots under ``root``: an ``s3://`` URI or a local directory."""
    location = warehouse_location(root, "snapshot_root")
    return LocalSnapshots(location.path) if location.is_local else BucketSnapshots(location)
