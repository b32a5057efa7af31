"""Real alert endpoints on 127.0.0.1 for the tests: an SMTP server (aiosmtpd) and an
HTTP server standing in for a Slack-compatible webhook, with the Airflow connections
(``AIRFLOW_CONN_<ID>``) that reach them."""

from __future__ import annotations

import fcntl
import json
import os
import random
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

#: Where reserved ports' lock files live: one machine, every test process of it.
PORT_LOCKS = Path(tempfile.gettempdir()) / "rmq-test-ports"
_reserved: list[int] = []  # the lock files' descriptors; the kernel drops the locks at exit


def free_port() -> int:
    """A loopback port no server listens on, reserved for this process's life.

    A port the kernel hands out for a bind to port 0 comes from its ephemeral range, where
    every other process's bind to port 0 and every outgoing connection also take theirs: a
    port found free there can be taken before the server that was given it binds it (the
    Airflow deployment binds its API server seconds after the test chose its port).
    Measured beside a fleet DAG run: 2 of 1,868 such ports taken within 30 s. So the port
    comes from below that range, where no process is given a port it did not ask for, and a
    lock on a file of its own keeps the suite's other processes (the other lane, a test's
    children) from choosing it too."""
    _make_port_locks()
    candidates = _unassigned_ports()
    for _ in range(500):
        port = random.choice(candidates)
        lock = os.open(PORT_LOCKS / str(port), os.O_CREAT | os.O_RDONLY, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            continue
        if _can_bind(port):
            _reserved.append(lock)
            return port
        os.close(lock)
    raise RuntimeError(f"no free loopback port in {candidates} (locks in {PORT_LOCKS})")


def _make_port_locks() -> None:
    """The locks' directory, writable by every user (a root and a user's test process
    share the ports); its files are opened read only, which is all a lock needs."""
    try:
        PORT_LOCKS.mkdir()
    except FileExistsError:
        return
    PORT_LOCKS.chmod(0o1777)


def ephemeral_ports() -> tuple[int, int]:
    """The first and last port of the kernel's ephemeral range."""
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    return low, high


def _unassigned_ports() -> range:
    """Ports the kernel never assigns by itself: below its ephemeral range (above it when
    the range starts too low to leave room)."""
    low, high = ephemeral_ports()
    if low >= 4096:
        return range(low // 2, low)
    if high <= 61439:
        return range(high + 1, 65536)
    raise RuntimeError(f"the ephemeral port range {low}-{high} leaves no ports to reserve")


def _can_bind(port: int) -> bool:
    """Nothing listens there, on any address, and no earlier server's socket lingers."""
    with socket.socket() as sock:
        try:
            sock.bind(("", port))  # every address: RocketMQ and others bind the wildcard
        except OSError:
            return False
    return True


@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """This process's environment with ``values`` set for the block, then as it was (the
    clients read their endpoints and Airflow its connections from the environment)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class Mailbox:
    """aiosmtpd handler keeping every envelope it accepted."""

    def __init__(self) -> None:
        self.envelopes: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"


class _WebhookHandler(BaseHTTPRequestHandler):
    received: list[dict[str, Any]]
    status: int

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append({"path": self.path, "content_type": self.headers["Content-Type"],
                              "json": json.loads(body)})
        reply = b"ok" if self.status == 200 else b"invalid_payload"
        self.send_response(self.status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:  # keep pytest output quiet
        pass


def start_webhook(status: int = 200) -> tuple[ThreadingHTTPServer, list[dict[str, Any]]]:
    received: list[dict[str, Any]] = []
    handler = type("Handler", (_WebhookHandler,), {"received": received, "status": status})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received




def smtp_connection(port: int) -> str:
    """An SMTP connection in URI form: plain SMTP (no SSL, no STARTTLS) on 127.0.0.1."""
    return (f"smtp://127.0.0.1:{port}?disable_ssl=true&disable_tls=true"
            "&timeout=5&retry_limit=0")


def webhook_connection(port: int) -> str:
    """A webhook connection in JSON form; the whole URL in the password, as Slack's."""
    return json.dumps({"conn_type": "slackwebhook",
                       "password": f"http://127.0.0.1:{port}/services/T000/B000/XXXX"})
