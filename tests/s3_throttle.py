"""A faulty network in front of the local S3 server: throttling and outages on cue.

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

An answer can be lost on cue: the first request matching ``lose_answer_at`` is passed to
the server, which does it, and the connection is then closed without its answer (a
network cut after the write): the client must find out what happened by itself.

An outage arrives on cue: the first request whose request line matches ``down_at`` (say,
the PUT of a table's next commit) finds the store gone, and so does every request after
it (the connection is closed unanswered, as a store that died would leave it) until the
test brings the store back (:meth:`Proxy.restore`), or for a given number of requests (a
store restarting while the clients retry). The outage is a file the proxy makes
and the test removes, so it is seen alike by the proxy and the test.

The proxy runs as a process of its own: in the clients' process it would need their GIL
to answer, and delta-rs holds the GIL through some of its requests (``is_deltatable``),
so the two would wait for each other for ever.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
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
class Counts:
    """What the proxy did: requests passed on, answered with SlowDown, dropped, or passed
    on with the server's answer lost."""

    forwarded: int = 0
    throttled: int = 0
    dropped: int = 0
    lost: int = 0


@dataclass
class Throttle:
    """The proxy's decisions, shared by its connections' threads."""

    rate: float
    seed: int = 0
    down_at: re.Pattern[bytes] | None = None
    outage: Path | None = None  # exists while the store is "down"
    down_for: int | None = None  # requests the store is away for (None: until restored)
    down_at_match: int = 1  # the store goes away at this match of ``down_at`` (1: the first)
    lose_answer_at: re.Pattern[bytes] | None = None  # done by the server, answer lost (once)
    counts: Counts = field(default_factory=Counts)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def is_down(self, request_line: bytes) -> bool:
        """Whether the store is away for this request (and count it if so); the
        ``down_at_match``-th request matching ``down_at`` takes it away, for ``down_for``
        requests or until the test restores it."""
        with self.lock:
            if self.down_at is not None and self.down_at.search(request_line):
                self.down_at_match -= 1
                if self.down_at_match == 0:
                    self.down_at = None  # once
                    assert self.outage is not None
                    self.outage.touch()
            if self.outage is not None and self.outage.exists():
                self.counts.dropped += 1
                if self.down_for is not None and self.counts.dropped >= self.down_for:
                    self.outage.unlink()  # back after this one
                return True
            return False

    def loses_answer(self, request_line: bytes) -> bool:
        """Whether this request is the one whose answer is lost: the server does it, the
        client never hears (a connection cut after the write; once)."""
        with self.lock:
            if self.lose_answer_at is not None and self.lose_answer_at.search(request_line):
                self.lose_answer_at = None
                self.counts.lost += 1
                return True
            return False

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def decide(self) -> bool:
        """Whether to throttle the next request (and count it either way)."""
        with self.lock:
            throttle = self._random.random() < self.rate
            if throttle:
                self.counts.throttled += 1
            else:
                self.counts.forwarded += 1
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
                if self.server.throttle.is_down(head.split(b"\r\n", 1)[0]):
                    return  # closed unanswered
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
                answer = b"".join(_response(upstream, head))
                if self.server.throttle.loses_answer(head.split(b"\r\n", 1)[0]):
                    return  # done upstream, closed unanswered here
                self.request.sendall(answer)
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


@dataclass
class Proxy:
    """A running proxy: its endpoint, and (once it has ended) its counts."""

    endpoint: str
    outage: Path
    counts: Counts = field(default_factory=Counts)

    def restore(self) -> None:
        """Bring the store back after an outage."""
        self.outage.unlink(missing_ok=True)

    @property
    def is_down(self) -> bool:
        return self.outage.exists()


@contextmanager
def faulty_proxy(upstream_port: int, work: Path, rate: float = 0.0, seed: int = 0,
                 down_at: str | None = None, down_for: int | None = None,
                 lose_answer_at: str | None = None, down_at_match: int = 1
                 ) -> Iterator[Proxy]:
    """A proxy process on a free loopback port in front of ``upstream_port``, answering a
    share ``rate`` of requests with SlowDown, losing the server's answer to the first
    request matching ``lose_answer_at``, and taking the store away at the
    ``down_at_match``-th request matching ``down_at`` (for ``down_for`` requests, or until
    :meth:`Proxy.restore`); its files (counts, the outage flag) go in ``work``."""
    port = free_port()
    counts, outage = work / f"proxy-{port}.json", work / f"proxy-{port}.down"
    process = subprocess.Popen([sys.executable, __file__, str(port), str(upstream_port),
                                str(rate), str(seed), str(counts), str(outage),
                                down_at or "", str(down_for or ""), lose_answer_at or "",
                                str(down_at_match)])
    proxy = Proxy(f"http://127.0.0.1:{port}", outage)
    try:
        wait_for_port(port, process, 15)
        yield proxy
    finally:
        process.terminate()
        process.wait(timeout=15)
        outage.unlink(missing_ok=True)
    proxy.counts = Counts(**json.loads(counts.read_text()))


def main() -> None:
    """``python tests/s3_throttle.py PORT UPSTREAM_PORT RATE SEED COUNTS OUTAGE DOWN_AT
    DOWN_FOR LOSE_ANSWER_AT DOWN_AT_MATCH``: serve until SIGTERM, then write the counts to
    COUNTS."""
    port, upstream, rate, seed, counts, outage, down_at, down_for, lose, match = sys.argv[1:]
    throttle = Throttle(float(rate), int(seed), outage=Path(outage),
                        down_at=re.compile(down_at.encode()) if down_at else None,
                        down_for=int(down_for) if down_for else None,
                        lose_answer_at=re.compile(lose.encode()) if lose else None,
                        down_at_match=int(match))
    server = _ProxyServer(int(port), int(upstream), throttle)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    Path(counts).write_text(json.dumps(dataclasses.asdict(throttle.counts)))


if __name__ == "__main__":
    main()
