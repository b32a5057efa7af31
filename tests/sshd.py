"""A real OpenSSH server on 127.0.0.1 for the SFTP snapshot tests.

Debian's ``/usr/sbin/sshd`` (``make sshd`` installs it) runs in the foreground with its own
config, host key and authorized key in a temporary directory, on a free port, accepting
only that key. Airflow reaches it through an ``ssh`` connection given as
``AIRFLOW_CONN_<ID>`` (JSON form) that pins the host key, so host-key checking is on.
"""

from __future__ import annotations

import getpass
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from endpoints import free_port

SSHD = Path("/usr/sbin/sshd")


@dataclass(frozen=True)
class SshServer:
    port: int
    user: str
    client_key: Path
    host_public_key: str   # "ssh-ed25519 AAAA..." without the comment

    def airflow_connection(self) -> str:
        """The connection as AIRFLOW_CONN_<ID> JSON: key file, pinned host key."""
        return json.dumps({
            "conn_type": "ssh", "host": "127.0.0.1", "port": self.port, "login": self.user,
            "extra": {"key_file": str(self.client_key), "host_key": self.host_public_key,
                      "no_host_key_check": False, "look_for_keys": False},
        })


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                   check=True)


@contextmanager
def running_sshd(directory: Path) -> Iterator[SshServer]:
    """Start sshd on a free loopback port; stop it on exit."""
    if not SSHD.is_file():
        raise RuntimeError(f"{SSHD} missing: run `make sshd` (apt-get install openssh-server)")
    directory.mkdir(parents=True, exist_ok=True)
    host_key, client_key = directory / "host_ed25519", directory / "client_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    authorized = directory / "authorized_keys"
    authorized.write_text(client_key.with_suffix(".pub").read_text())
    authorized.chmod(0o600)
    port = free_port()
    config = directory / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
        f"AuthorizedKeysFile {authorized}", f"PidFile {directory / 'sshd.pid'}",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password", "UsePAM no", "StrictModes no",
        "Subsystem sftp internal-sftp", "LogLevel ERROR", ""]))
    Path("/run/sshd").mkdir(exist_ok=True)  # privilege separation directory
    server = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)],
                              stderr=open(directory / "sshd.log", "wb"))  # noqa: SIM115
    try:
        _wait_for(port, server, directory / "sshd.log")
        public = host_key.with_suffix(".pub").read_text().split()
        yield SshServer(port, getpass.getuser(), client_key, " ".join(public[:2]))
    finally:
        server.terminate()
        server.wait(timeout=10)


def _wait_for(port: int, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"sshd exited: {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"sshd did not listen on 127.0.0.1:{port}: {log.read_text()}")


def connection_env(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


__all__ = ["SshServer", "connection_env", "running_sshd"]
