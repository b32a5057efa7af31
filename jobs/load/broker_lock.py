"""One load per broker at a time: an exclusive lock held for the whole load.

Loads of *different* brokers run side by side (their Delta writes touch disjoint
partitions or are blind appends). Two loads of the *same* broker must not: both would
append the same snapshot's facts and move the same high-water marks. A re-run after a
crash must still be able to finish the snapshot, so the lock cannot be a row in a table
(a killed load would leave it behind): it is the lock ``load-<broker>`` of
:mod:`jobs.lakehouse.locks`, which the kernel drops when the process dies (on a local
warehouse) or which expires one lease period after its holder stopped renewing it (in an
object store). The lock names its holder (pid, host, snapshot, since) for the refusal.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobs.lakehouse.locations import Location
from jobs.lakehouse.locks import holder, lock_holder, try_lock


class BrokerBusyError(RuntimeError):
    """Another load of the same broker holds the lock."""


@contextmanager
def broker_load_lock(warehouse: str | Path | Location, broker: str,
                     snapshot_id: str) -> Iterator[None]:
    """Hold the broker's load lock, or raise :class:`BrokerBusyError` at once."""
    name = f"load-{broker}"
    with try_lock(warehouse, name, holder(snapshot_id=snapshot_id)) as held:
        if not held:
            raise BrokerBusyError(
                f"another load of broker {broker!r} is running ({lock_holder(warehouse, name)}); "
                "two loads of one broker must not overlap: wait for it, or stop it and re-run")
        yield
