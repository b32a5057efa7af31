"""Locks of a warehouse in an object store are leases (jobs/lakehouse/leases.py), on the
local S3 server: held across processes that share no host lock, renewed while held,
expired one period after a killed holder stopped, taken over by exactly one of many,
and lost (loudly) when someone else took it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import obstore
import pytest
from s3_server import serving_bucket

from jobs.lakehouse.leases import LeaseLostError, try_lease
from jobs.lakehouse.locations import warehouse_location
from jobs.lakehouse.locks import lock_location, try_lock
from jobs.load.broker_lock import BrokerBusyError, broker_load_lock

PERIOD = 4.0  # seconds; renewed every third of it


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with serving_bucket(tmp_path_factory.mktemp("s3") / "root", "leases") as server:
        os.environ["RMQ_LEASE_SECONDS"] = str(PERIOD)
        try:
            yield server
        finally:
            os.environ.pop("RMQ_LEASE_SECONDS", None)


_HOLDER = textwrap.dedent("""
    import sys, time
    from jobs.load.broker_lock import broker_load_lock
    with broker_load_lock(sys.argv[1], "broker-a", "s9"):
        print("held", flush=True)
        time.sleep(600)
""")


def test_a_broker_lease_holds_across_processes_until_its_killed_holder_expires(s3):
    warehouse = "s3://leases/wh-load"
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, warehouse],
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, **s3.environment()})
    try:
        assert holder.stdout.readline().strip() == "held"
        # Refused for two and a half periods: the holder renews its lease meanwhile.
        until = time.monotonic() + 2.5 * PERIOD
        refusals = 0
        while time.monotonic() < until:
            with pytest.raises(BrokerBusyError, match=r"broker-a.*snapshot_id s9.*expires at"), \
                    broker_load_lock(warehouse, "broker-a", "s10"):
                pass
            refusals += 1
            time.sleep(0.5)
        assert refusals >= 8
        with broker_load_lock(warehouse, "broker-b", "s10"):
            pass  # other brokers' leases are free
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # Its last renewal was at most a third of a period ago: still held.
    with pytest.raises(BrokerBusyError), broker_load_lock(warehouse, "broker-a", "s10"):
        pass
    deadline = time.monotonic() + 3 * PERIOD
    while True:
        try:
            with broker_load_lock(warehouse, "broker-a", "s10"):
                break
        except BrokerBusyError:
            assert time.monotonic() < deadline, "the killed holder's lease never expired"
            time.sleep(0.25)
    assert not lock_location(warehouse, "load-broker-a").exists()  # released at the end


def test_an_expired_lease_is_taken_over_by_exactly_one(s3):
    warehouse = warehouse_location("s3://leases/wh-race", "test")
    lock = lock_location(warehouse, "maintain-messages")
    lock.write_text('{"pid": 1, "host": "gone"}')  # a holder that died long ago ...
    time.sleep(PERIOD + 1.5)  # ... and whose lease has expired
    results: list[bool] = []
    barrier = threading.Barrier(6)
    done = threading.Event()

    def taker() -> None:
        barrier.wait()
        with try_lock(warehouse, "maintain-messages") as held:
            results.append(held)
            if held:
                done.wait(timeout=30)  # keep it while the others try

    threads = [threading.Thread(target=taker) for _ in range(6)]
    for thread in threads:
        thread.start()
    while len(results) < 6 and any(t.is_alive() for t in threads):
        time.sleep(0.05)
    done.set()
    for thread in threads:
        thread.join()
    assert sorted(results) == [False] * 5 + [True]


def test_a_lease_taken_over_while_held_is_lost_loudly(s3):
    lease_object = warehouse_location("s3://leases/wh-lost", "test") / "_rmq_locks" / "x.lease"
    store, key = lease_object.store_and_key()
    with pytest.raises(LeaseLostError, match="taken over"), \
            try_lease(lease_object, {"who": "first"}) as lease:
        assert lease is not None
        obstore.put(store, key, b'{"who": "second"}')  # another host took it over
        time.sleep(PERIOD / 3 + 1.5)  # the first holder's next renewal fails
    # The first holder neither renewed nor deleted the second one's lease.
    assert lease_object.read_text() == '{"who": "second"}'
