"""The tests' servers get ports no other process is given meanwhile (tests/endpoints.py).

A port found free in the kernel's ephemeral range can be taken by any process's next
connection or bind to port 0 before our server binds it; under two test lanes that is a
test failing by chance. ``free_port`` hands out ports below that range, each reserved by a
lock its process holds until it exits."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from endpoints import PORT_LOCKS, ephemeral_ports

TESTS = Path(__file__).resolve().parent
#: Ports each process reserves: drawn at random from ~16 K ports, two processes without
#: the reservation would share about 10 of them, none only once in ~20,000 runs.
PER_PROCESS = 400


def reserving(count: int) -> tuple[subprocess.Popen, list[int]]:
    """A process that reserves ``count`` ports, prints them and holds them until killed."""
    script = (f"import json, sys; sys.path.insert(0, {str(TESTS)!r}); "
              "from endpoints import free_port; "
              f"print(json.dumps([free_port() for _ in range({count})]), flush=True); "
              "sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    return child, json.loads(child.stdout.readline())


def lockable(port: int) -> bool:
    descriptor = os.open(PORT_LOCKS / str(port), os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(descriptor)


def test_two_processes_never_get_the_same_port_and_a_killed_one_frees_its_own() -> None:
    low, _ = ephemeral_ports()
    first, first_ports = reserving(PER_PROCESS)
    second, second_ports = reserving(PER_PROCESS)
    try:
        assert len(set(first_ports)) == len(set(second_ports)) == PER_PROCESS
        assert set(first_ports).isdisjoint(second_ports)
        # none the kernel could give another process meanwhile
        assert max(first_ports + second_ports) < low
        assert not any(lockable(port) for port in first_ports[:20])
    finally:
        for child in (first, second):
            child.send_signal(signal.SIGKILL)
            child.wait()
    # the kernel dropped the killed processes' locks: nothing stays reserved
    assert all(lockable(port) for port in first_ports + second_ports)
