"""A real S3-compatible server on 127.0.0.1 for the tests, the benches and ``make run-s3``.

versitygw (Apache-2.0; ``make s3`` builds the pinned release from the Go module proxy)
serves a directory as object storage with its POSIX backend: every top-level directory
of the root is a bucket, every object a file below it. It honours the conditional writes
the lakehouse's commits and leases rely on (``If-None-Match: *`` and ``If-Match``;
tests/test_s3_server.py races them). The server is a process of its own on a free port:
:meth:`S3Server.stop` and :meth:`S3Server.start` take it away and bring it back on the
same port and data, as an outage does.

Clients reach it the way the ecosystem does: the standard ``AWS_*`` environment variables
(:meth:`S3Server.environment`), read by delta-rs, pyarrow and obstore alike.
"""

from __future__ import annotations

import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from airflow_scheduler import wait_for_port
from endpoints import environment, free_port

REPO = Path(__file__).resolve().parent.parent
VERSITYGW_VERSION = "v1.8.0"  # = VERSITYGW_VERSION in the Makefile
VERSITYGW = REPO / ".cache" / "bin" / f"versitygw-{VERSITYGW_VERSION}"
REGION = "us-east-1"


@dataclass
class S3Server:
    """One versitygw process serving ``root``; buckets are ``root``'s directories."""

    root: Path
    port: int
    access_key: str = field(default_factory=lambda: "rmq" + secrets.token_hex(6))
    secret_key: str = field(default_factory=lambda: secrets.token_hex(20))
    access_log: Path | None = None  # one line per request (bench/object_store.py counts them)
    process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """The ``AWS_*`` variables that point a client at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": REGION,
                "AWS_ALLOW_HTTP": "true"}

    def bucket(self, name: str) -> str:
        """Create bucket ``name`` (a directory of the root) and return ``s3://name``."""
        (self.root / name).mkdir(parents=True, exist_ok=True)
        return f"s3://{name}"

    def start(self) -> None:
        if not VERSITYGW.is_file():
            raise RuntimeError(f"{VERSITYGW} missing: run `make s3`")
        self.root.mkdir(parents=True, exist_ok=True)
        log = open(self.root.parent / f"versitygw-{self.port}.log", "ab")  # noqa: SIM115
        logged = ["--access-log", str(self.access_log)] if self.access_log else []
        self.process = subprocess.Popen(
            [str(VERSITYGW), "--access", self.access_key, "--secret", self.secret_key,
             "--region", REGION, "--port", f"127.0.0.1:{self.port}", "--quiet", *logged,
             "posix", str(self.root)], stdout=log, stderr=log)
        wait_for_port(self.port, self.process, 15)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None


@contextmanager
def running_s3(root: Path, port: int | None = None,
               access_log: Path | None = None) -> Iterator[S3Server]:
    """Start versitygw over ``root`` (made if missing) on a free loopback port."""
    server = S3Server(root, port or free_port(), access_log=access_log)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def s3_environment(server: S3Server) -> Iterator[None]:
    """This process's ``AWS_*`` variables pointed at ``server`` for the block."""
    with environment(server.environment()):
        yield


@contextmanager
def serving_bucket(root: Path, bucket: str) -> Iterator[S3Server]:
    """A server over ``root`` with ``bucket`` made, this process pointed at it: what a test
    module's fixture needs."""
    with running_s3(root) as server:
        server.bucket(bucket)
        with s3_environment(server):
            yield server


def main() -> None:
    """``python tests/s3_server.py ROOT [PORT] [BUCKET]``: serve in the foreground and print
    the environment a shell needs (``make run-s3``)."""
    root = Path(sys.argv[1]).resolve()
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 7070
    # SIGTERM (`make run-s3` ending) unwinds like Ctrl-C, so the server is stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with running_s3(root, port) as server:
        for bucket in sys.argv[3:]:
            server.bucket(bucket)
        for key, value in server.environment().items():
            print(f"export {key}={value}", flush=True)
        with suppress(KeyboardInterrupt):
            server.process.wait()


if __name__ == "__main__":
    main()
