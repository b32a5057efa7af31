"""One load per broker at a time: an exclusive OS lock held for the whole load.

Loads of *different* brokers run side by side (their Delta writes touch disjoint
partitions or are blind appends). Two loads of the *same* broker must not: both would
append the same snapshot's facts and move the same high-water marks. A re-run after a
crash must still be able to finish the snapshot, so the lock cannot be a row in a table
(a killed load would leave it behind). It is ``flock`` on
``<warehouse>/_rmq_locks/load-<broker>.lock``: the kernel drops it when the holding
process dies, however it dies. The file names the holder (pid, host, snapshot, since) for
the refusal message; its content is informative only, the lock is the ``flock``.

``flock`` works across processes of one host and on NFSv4 (``local_lock=none``); a
warehouse on an object store needs the DAG's guarantee instead (one task group per
broker, ``max_active_runs=1``), which the default deployment also has.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

LOCK_DIR = "_rmq_locks"


class BrokerBusyError(RuntimeError):
    """Another load of the same broker holds the lock."""


def lock_path(warehouse: str | Path, broker: str) -> Path:
    """The lock file of a broker (names are made safe for a file name, and kept apart)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", broker)
    suffix = "" if safe == broker else "-" + hashlib.sha256(broker.encode()).hexdigest()[:12]
    return Path(warehouse) / LOCK_DIR / f"load-{safe}{suffix}.lock"


@contextmanager
def broker_load_lock(warehouse: str | Path, broker: str, snapshot_id: str) -> Iterator[None]:
    """Hold the broker's load lock, or raise :class:`BrokerBusyError` at once."""
    path = lock_path(warehouse, broker)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = path.open("a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown holder"
            raise BrokerBusyError(
                f"another load of broker {broker!r} is running ({holder}); two loads of one "
                "broker must not overlap: wait for it, or kill it and re-run") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "snapshot_id": snapshot_id,
                                 "since": datetime.now(UTC).isoformat(timespec="seconds")}))
        handle.flush()
        yield
    finally:
        handle.close()  # closing the descriptor releases the flock
