"""Leases: who may do what at once when the warehouse is in an object store.

An object store has no ``flock``, and the hosts writing one warehouse share nothing else.
A lease is a small object, ``<warehouse>/_rmq_locks/<name>.lease``, holding its holder
(pid, host, what it does, since when):

* **taken** by creating the object with ``If-None-Match: *``: of many writers exactly one
  creates it (tests/test_s3_server.py races the local server for that);
* **renewed** by a thread of the holder every third of the lease period, each time with
  ``If-Match`` on the version it wrote last: a holder whose lease was taken over learns it
  at its next renewal (:class:`LeaseLostError` when its block ends) and never overwrites
  the new holder;
* **expired** when the object was last written more than one period ago, by the store's
  clock (``Last-Modified``) against the reader's: hosts' clocks must agree within a few
  seconds, as NTP keeps them. An expired lease is **taken over** with ``If-Match`` on the
  version read (of several takers one wins). A killed holder stops renewing, so its re-run
  waits at most one period; the refusal says until when;
* **released** by deleting it, after checking it is still the holder's version.

The period is ``RMQ_LEASE_SECONDS`` (60 s by default).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from jobs.lakehouse.locations import Location

log = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 60.0


def lease_seconds() -> float:
    return float(os.environ.get("RMQ_LEASE_SECONDS") or DEFAULT_LEASE_SECONDS)


class LeaseLostError(RuntimeError):
    """The lease was taken over (or could not be renewed for a whole period) while held."""


@dataclass
class Lease:
    """A lease held by this process, kept alive by a renewal thread."""

    location: Location
    body: dict[str, Any]
    period: float
    e_tag: str
    lost: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def renew_until_stopped(self) -> None:
        """The renewal thread: rewrite the lease every third of a period, If-Match on the
        version written last; give up (``lost``) on a takeover or after a period of
        failures (the store unreachable: someone may take it over by now)."""
        from obstore.exceptions import PreconditionError

        last_renewed = time.monotonic()
        while not self._stop.wait(self.period / 3):
            try:
                self.e_tag = _put(self.location, self.body, {"e_tag": self.e_tag})
                last_renewed = time.monotonic()
            except PreconditionError:
                self.lost = "taken over by another holder"
            except Exception as error:
                if time.monotonic() - last_renewed > self.period:
                    self.lost = f"not renewed for a whole period ({error})"
            if self.lost:
                return

    def release(self) -> None:
        """Stop renewing; delete the lease if it is still this holder's version. A store
        that cannot be reached now leaves the lease to expire (one period), and the error
        that ended the holder's work, if any, is the one reported."""
        self._stop.set()
        try:
            if self.lost is None and (self.location.head() or {}).get("e_tag") == self.e_tag:
                self.location.delete()
        except Exception as error:
            log.warning("lease %s not released (%s); it expires in %.0f s", self.location,
                        str(error).splitlines()[0], self.period)


@contextmanager
def try_lease(location: Location, holder: Mapping[str, Any],
              period: float | None = None) -> Iterator[Lease | None]:
    """Hold the lease at ``location`` for the block, or yield None at once when another
    holder's lease has not expired. Raises :class:`LeaseLostError` after the block when
    the lease was lost meanwhile."""
    period = period or lease_seconds()
    lease = _take(location, {**holder, "lease_seconds": period}, period)
    if lease is None:
        yield None
        return
    renewer = threading.Thread(target=lease.renew_until_stopped, daemon=True,
                               name=f"lease {location.name}")
    renewer.start()
    try:
        yield lease
    finally:
        lease.release()
        renewer.join(timeout=period)
    if lease.lost:
        raise LeaseLostError(f"lease {location} lost while held: {lease.lost}")


def describe_holder(location: Location) -> str:
    """Who holds the lease and until when it is held if its holder stopped renewing."""
    import obstore

    store, key = location.store_and_key()
    try:
        result = obstore.get(store, key)
        body = json.loads(bytes(result.bytes()))
        modified = result.meta["last_modified"]
    except (FileNotFoundError, ValueError):
        return "holder unknown"
    until = modified + timedelta(seconds=float(body.pop("lease_seconds", lease_seconds())))
    described = ", ".join(f"{k} {v}" for k, v in body.items())
    return (f"{described}; its lease expires at {until.isoformat(timespec='seconds')} unless "
            "renewed: a killed holder's re-run waits at most one lease period")


def _take(location: Location, body: dict[str, Any], period: float) -> Lease | None:
    """Create the lease, or take over an expired one; None when it is held."""
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    try:
        return Lease(location, body, period, _put(location, body, "create"))
    except AlreadyExistsError:
        pass
    meta = location.head()
    if meta is None:  # released meanwhile: one more try to create it
        try:
            return Lease(location, body, period, _put(location, body, "create"))
        except AlreadyExistsError:
            return None
    if datetime.now(UTC) - meta["last_modified"] <= timedelta(seconds=period):
        return None
    try:
        return Lease(location, body, period, _put(location, body, {"e_tag": meta["e_tag"]}))
    except PreconditionError:
        return None  # another taker won


def _put(location: Location, body: Mapping[str, Any], mode: Any) -> str:
    import obstore

    store, key = location.store_and_key()
    data = json.dumps({**body, "renewed_at": datetime.now(UTC).isoformat(timespec="seconds")})
    return obstore.put(store, key, data.encode("utf-8"), mode=mode)["e_tag"]


__all__ = ["Lease", "LeaseLostError", "describe_holder", "lease_seconds", "try_lease"]
