"""Store marker files: ``abort`` (+ ``abort.bak``) and ``lock`` (§6.2, §6.3).

``abort`` exists while the broker runs and is removed on a clean shutdown, so its
presence in a snapshot means the broker was running or died (abnormal recovery on next
start). 4.9.x leaves it empty; 5.x writes the decimal PID with ``MixAll.string2File``,
which also leaves ``abort.bak`` holding the previous content. ``lock`` holds ASCII
``lock`` at offset 0 and is otherwise meaningless; rmqlib never tries to take its lock.

Accounting: empty/PID abort content and the ``lock`` text → ``decoded``; zero bytes
after ``lock`` → ``zero_tail``; anything else → ``unreadable``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rmqlib.common.accounting import FileAccount

ABORT_FILE = "abort"
ABORT_BAK_FILE = "abort.bak"
LOCK_FILE = "lock"
LOCK_TEXT = b"lock"
PID_TEXT = re.compile(rb"^\s*(\d{1,19})\s*$")


@dataclass(frozen=True)
class MarkerContent:
    """One marker file: ``kind`` is "empty", "pid" or "other"."""

    path: str
    kind: str
    pid: int | None
    raw: bytes
    account: FileAccount


@dataclass(frozen=True)
class AbortState:
    """The abort marker and its backup; ``abnormal`` = the broker did not shut down cleanly."""

    abort: MarkerContent | None
    abort_bak: MarkerContent | None

    @property
    def abnormal(self) -> bool:
        return self.abort is not None


@dataclass(frozen=True)
class LockState:
    """The lock file; ``valid`` when it starts with ``lock``."""

    path: str
    valid: bool
    size: int
    account: FileAccount


def decode_marker(raw: bytes, path: str | Path = "<memory>") -> MarkerContent:
    """Classify abort content: empty (4.9.x), a decimal PID (5.x) or other bytes."""
    account = FileAccount(str(path), len(raw))
    match = PID_TEXT.match(raw)
    if not raw:
        kind, pid = "empty", None
    elif match:
        kind, pid = "pid", int(match.group(1))
        account.decoded = len(raw)
    else:
        kind, pid = "other", None
        account.add_unreadable(0, len(raw), "abort content is neither empty nor a PID")
    return MarkerContent(str(path), kind, pid, raw, account.check())


def _read_optional(path: Path) -> bytes | None:
    try:
        return path.read_bytes() if path.is_file() else None
    except FileNotFoundError:
        return None


def read_abort(store_root: str | Path) -> AbortState:
    """``abort`` and ``abort.bak`` of a store root (either may be absent)."""
    root = Path(store_root)
    markers = []
    for name in (ABORT_FILE, ABORT_BAK_FILE):
        raw = _read_optional(root / name)
        markers.append(None if raw is None else decode_marker(raw, root / name))
    return AbortState(*markers)


def decode_lock(raw: bytes, path: str | Path = "<memory>") -> LockState:
    """The lock file: ``lock`` at offset 0, zero or nothing after it."""
    account = FileAccount(str(path), len(raw))
    valid = raw.startswith(LOCK_TEXT)
    used = len(LOCK_TEXT) if valid else 0
    account.decoded = used
    rest = raw[used:]
    if rest.count(0) == len(rest):
        account.zero_tail = len(rest)
    else:
        account.add_unreadable(used, len(rest), "lock file content is not 'lock'")
    return LockState(str(path), valid, len(raw), account.check())


def read_lock(store_root: str | Path) -> LockState | None:
    """The store's ``lock`` file, or None when absent."""
    path = Path(store_root) / LOCK_FILE
    raw = _read_optional(path)
    return None if raw is None else decode_lock(raw, path)
