"""Named, non-blocking locks in ``<warehouse>/_rmq_locks``: who may do what at once.

On a local (or NFSv4) warehouse a lock is ``flock`` on a small file, so the kernel drops
it when the holding process dies, however it dies: a killed job never leaves a lock
behind for its re-run. ``flock`` works across the processes of one host only; a
warehouse in an object store is written by many hosts, and there a lock is a lease object
created with ``If-None-Match: *`` and renewed while held (:mod:`jobs.lakehouse.leases`):
a killed holder's lease expires after one lease period.

Either way the lock records its holder (pid, host, what, since), which a refused caller
names in its message.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from jobs.lakehouse.leases import describe_holder, try_lease
from jobs.lakehouse.locations import Location, warehouse_location

LOCK_DIR = "_rmq_locks"


def lock_location(warehouse: str | Path | Location, name: str) -> Location:
    """Where lock ``name`` lives; names that are not file-safe are made so, and kept
    apart. A lease object's name ends in ``.lease``, a lock file's in ``.lock``."""
    root = warehouse_location(warehouse, "warehouse")
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    suffix = "" if safe == name else "-" + hashlib.sha256(name.encode()).hexdigest()[:12]
    return root / LOCK_DIR / f"{safe}{suffix}.{'lock' if root.is_local else 'lease'}"


def holder(**what: object) -> dict[str, object]:
    """This process as a lock's holder: pid, host, since, and ``what`` it does."""
    return {"pid": os.getpid(), "host": socket.gethostname(), **what,
            "since": datetime.now(UTC).isoformat(timespec="seconds")}


@contextmanager
def try_lock(warehouse: str | Path | Location, name: str,
             held_by: Mapping[str, object] | None = None) -> Iterator[bool]:
    """Hold lock ``name`` for the block and yield True, or yield False at once when
    another process (of any host, for an object-store warehouse) holds it."""
    location = lock_location(warehouse, name)
    if not location.is_local:
        with try_lease(location, held_by or holder()) as lease:
            yield lease is not None
        return
    location.path.parent.mkdir(parents=True, exist_ok=True)
    with location.path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(held_by or holder()))
        handle.flush()
        yield True  # closing the file at the end of the block releases the lock


def lock_holder(warehouse: str | Path | Location, name: str) -> str:
    """Who holds lock ``name``, as its holder recorded it (informative only)."""
    location = lock_location(warehouse, name)
    if not location.is_local:
        return describe_holder(location)
    try:
        recorded = json.loads(location.read_text())
    except (OSError, ValueError):
        return "holder unknown"
    return ", ".join(f"{k} {v}" for k, v in recorded.items()) if isinstance(recorded, dict) \
        else "holder unknown"
