"""Real alert endpoints on 127.0.0.1 for the tests: an SMTP server (aiosmtpd) and an
HTTP server standing in for a Slack-compatible webhook, with the Airflow connections
(``AIRFLOW_CONN_<ID>``) that reach them."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def free_port() -> int:
    """A port nothing listens on (bound and released; nothing else binds it here)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
