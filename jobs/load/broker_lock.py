"""One load per broker at a time: an exclusive OS lock held for the whole load.

Loads of *different* brokers run side by side (their Delta writes touch disjoint
partitions or are blind appends). Two loads of the *same* broker must not: both would
append the same snapshot's facts and move the same high-water marks. A re-run after a
crash must still be able to finish the snapshot, so the lock cannot be a row in a table
(a killed load would leave it behind): it is the lock ``load-<broker>`` of
:mod:`jobs.lakehouse.locks`, which the kernel drops when the process dies. The lock file
names its holder (pid, host, snapshot, since) for the refusal message; its content is
informative only.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from jobs.lakehouse.locks import lock_file, try_lock


class BrokerBusyError(RuntimeError):
    """Another load of the same broker holds the lock."""


@contextmanager
def broker_load_lock(warehouse: str | Path, broker: str, snapshot_id: str) -> Iterator[None]:
    """Hold the broker's load lock, or raise :class:`BrokerBusyError` at once."""
    with try_lock(warehouse, f"load-{broker}") as handle:
        if handle is None:
            raise BrokerBusyError(
                f"another load of broker {broker!r} is running ({_holder(warehouse, broker)}); "
                "two loads of one broker must not overlap: wait for it, or stop it and re-run")
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "snapshot_id": snapshot_id,
                                 "since": datetime.now(UTC).isoformat(timespec="seconds")}))
        handle.flush()
        yield


def _holder(warehouse: str | Path, broker: str) -> str:
    try:
        return lock_file(warehouse, f"load-{broker}").read_text().strip() or "holder unknown"
    except OSError:
        return "holder unknown"
