"""A throttling proxy in front of the local S3 server: some requests get ``503 SlowDown``.

Real S3 answers a prefix that is written too fast with ``503 SlowDown`` and expects the
client to back off and retry; every client here is configured to (delta-rs' and obstore's
retry settings, pyarrow's and S3A's SDK retry strategies). versitygw never throttles, so
this proxy does: it reads each request whole (head and body, ``Content-Length`` or
chunked), and either answers it with S3's SlowDown error itself or passes the very bytes
on to the server and its answer back. Signatures stay valid: nothing of the request is
changed, the ``Host`` header included (the clients signed the proxy's address).

Which requests are throttled is decided by a seeded random generator (``rate``), so a
run is reproducible in the number of requests it throttles, if not in which (clients run
requests concurrently).

The proxy runs as a process of its own: in the clients' process it would need their GIL
to answer, and delta-rs holds the GIL through some of its requests (``is_deltatable``),
so the two would wait for each other for ever.
"""

from __future__ import annotations

import json
import random
import signal
import socket
import socketserver
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from airflow_scheduler import wait_for_port
from endpoints import free_port

SLOW_DOWN = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
             b"<Message>Please reduce your request rate.</Message></Error>")
NO_BODY_STATUSES = (204, 304)


@dataclass
class Throttle:
    """What the proxy did: requests passed on and requests answered with SlowDown."""

    rate: float
    seed: int = 0
    forwarded: int = 0
    throttled: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def decide(self) -> bool:
        """Whether to throttle the next request (and count it either way)."""
        with self.lock:
            throttle = self._random.random() < self.rate
            if throttle:
                self.throttled += 1
            else:
                self.forwarded += 1
            return throttle


class _Connection:
    """A socket read as an HTTP/1.1 byte stream: heads, sized and chunked bodies."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def read_until(self, marker: bytes) -> bytes | None:
        while marker not in self.buffer:
            if not self._fill():
                return None
        head, self.buffer = self.buffer.split(marker, 1)
        return head + marker

    def read_exactly(self, count: int) -> bytes:
        while len(self.buffer) < count:
            if not self._fill():
                raise ConnectionError("connection closed inside a body")
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def read_chunked(self) -> bytes:
        """A chunked body as sent (sizes, extensions and trailers kept)."""
        raw = b""
        while True:
            line = self.read_until(b"\r\n")
            if line is None:
                raise ConnectionError("connection closed inside a chunked body")
            raw += line
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while True:  # trailers, up to an empty line
                    trailer = self.read_until(b"\r\n")
                    if trailer is None:
                        raise ConnectionError("connection closed in the trailers")
                    raw += trailer
                    if trailer == b"\r\n":
                        return raw
            raw += self.read_exactly(size + 2)

    def read_body(self, head: bytes) -> bytes:
        """The body that follows ``head``, as sent."""
        headers = _headers(head)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return self.read_chunked()
        return self.read_exactly(int(headers.get("content-length", "0")))


def _headers(head: bytes) -> dict[str, str]:
    lines = head.decode("iso-8859-1").split("\r\n")[1:]
    return {name.strip().lower(): value.strip()
            for name, _, value in (line.partition(":") for line in lines if ":" in line)}


class _Handler(socketserver.BaseRequestHandler):
    server: _ProxyServer

    def handle(self) -> None:
        client = _Connection(self.request)
        upstream: _Connection | None = None
        try:
            while (head := client.read_until(b"\r\n\r\n")) is not None:
                waits = _headers(head).get("expect", "").lower() == "100-continue"
                if self.server.throttle.decide():
                    if not waits:  # one waiting for "100 Continue" sends none: answer, close
                        client.read_body(head)  # consumed, not passed on
                    self.request.sendall(_slow_down(head, close=waits))
                    if waits:
                        return
                    continue
                if upstream is None:
                    upstream = _Connection(socket.create_connection(
                        ("127.0.0.1", self.server.upstream_port)))
                if waits:  # relay the server's interim answer before the body
                    upstream.sock.sendall(head)
                    interim = _response(upstream, head)
                    self.request.sendall(b"".join(interim))
                    if int(interim[0].split(b" ", 2)[1]) != 100:
                        continue  # refused before the body: the client sends none
                    upstream.sock.sendall(client.read_body(head))
                else:
                    upstream.sock.sendall(head + client.read_body(head))
                self.request.sendall(b"".join(_response(upstream, head)))
        except (ConnectionError, OSError):
            pass
        finally:
            if upstream is not None:
                upstream.sock.close()


def _slow_down(request_head: bytes, close: bool) -> bytes:
    """S3's SlowDown answer to a request (no body for a HEAD, as HTTP requires)."""
    body = b"" if request_head.startswith(b"HEAD ") else SLOW_DOWN
    return (b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
            + (b"Connection: close\r\n" if close else b"")
            + b"Content-Length: " + str(len(SLOW_DOWN)).encode() + b"\r\n\r\n" + body)


def _response(upstream: _Connection, request_head: bytes) -> list[bytes]:
    head = upstream.read_until(b"\r\n\r\n")
    if head is None:
        raise ConnectionError("the server closed the connection")
    status = int(head.split(b" ", 2)[1])
    headers = _headers(head)
    if request_head.startswith(b"HEAD ") or status in NO_BODY_STATUSES or status < 200:
        return [head]
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return [head, upstream.read_chunked()]
    return [head, upstream.read_exactly(int(headers.get("content-length", "0")))]


class _ProxyServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, upstream_port: int, throttle: Throttle) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.upstream_port, self.throttle = upstream_port, throttle


@contextmanager
def throttling_proxy(upstream_port: int, rate: float, counts: Path, seed: int = 0
                     ) -> Iterator[tuple[str, Throttle]]:
    """A proxy process on a free loopback port in front of ``upstream_port``, answering a
    share ``rate`` of requests with SlowDown; yields its endpoint and, once the block has
    ended, its counts (kept in the file ``counts``)."""
    port = free_port()
    process = subprocess.Popen([sys.executable, __file__, str(port), str(upstream_port),
                                str(rate), str(seed), str(counts)])
    throttle = Throttle(rate, seed)
    try:
        wait_for_port(port, process, 15)
        yield f"http://127.0.0.1:{port}", throttle
    finally:
        process.terminate()
        process.wait(timeout=15)
    done = json.loads(counts.read_text())
    throttle.forwarded, throttle.throttled = done["forwarded"], done["throttled"]


def main() -> None:
    """``python tests/s3_throttle.py PORT UPSTREAM_PORT RATE SEED COUNTS``: serve until
    SIGTERM, then write the counts to the file COUNTS."""
    port, upstream, rate, seed, counts = sys.argv[1:]
    throttle = Throttle(float(rate), int(seed))
    server = _ProxyServer(int(port), int(upstream), throttle)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    Path(counts).write_text(json.dumps({"forwarded": throttle.forwarded,
                                        "throttled": throttle.throttled}))


if __name__ == "__main__":
    main()
