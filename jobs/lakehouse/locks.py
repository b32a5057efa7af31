"""Named, non-blocking OS locks in ``<warehouse>/_rmq_locks``: who may do what at once.

A lock is ``flock`` on a small file, so the kernel drops it when the holding process
dies, however it dies: a killed job never leaves a lock behind for its re-run. ``flock``
works across the processes of one host and on NFSv4; a warehouse on an object store has
no such lock and relies on the DAG's own guarantees instead (see ``docs/fleet.md``).
"""

from __future__ import annotations

import fcntl
import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

LOCK_DIR = "_rmq_locks"


def lock_file(warehouse: str | Path, name: str) -> Path:
    """The file of lock ``name``; names that are not file-safe are made so, and kept apart."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    suffix = "" if safe == name else "-" + hashlib.sha256(name.encode()).hexdigest()[:12]
    return Path(warehouse) / LOCK_DIR / f"{safe}{suffix}.lock"


@contextmanager
def try_lock(warehouse: str | Path, name: str) -> Iterator[IO[str] | None]:
    """Hold lock ``name`` for the block and yield its open file, or yield None at once
    when another process holds it."""
    path = lock_file(warehouse, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield handle  # closing the file at the end of the block releases the lock
