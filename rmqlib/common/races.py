"""Races of a hot copy: which states a copy of a running (or killed) broker explains, and
the severity every finding about them gets. This is the one rule; the checks
(``jobs.check.checks``), ``rmq verify`` (``rmqlib.store.verify``) and the decoders that
name regions all take it from here.

A copy read while the broker writes sees each file at a slightly different moment, and a
killed broker stops in the middle of a write. The decoders name what that leaves by the
first words of a region's reason (``FileAccount`` regions, quarantine rows):

``torn tail: ...``
    the record, unit or entry the broker was writing at the file's write position (the
    last bytes of data of the file being written, only zeros after them): the copy read
    it half done, or the broker died writing it. The broker's recovery cuts it too
    (``CommitLog.recoverAbnormally``, ``ConsumeQueue.recover``,
    ``TimerMessageStore.recoverAndRevise``); the next snapshot reads it whole.
``hot copy: ...``
    whole data a counter or a partner file had not caught up with when the copy read it:
    index entries beyond the header's indexCount (``IndexFile.putKey`` writes the entry,
    then its slot, then the header, and the copy reads the header first), consume-queue
    units ahead of the copied commitlog, a config file read mid-rewrite (``X`` empty or
    cut, its previous generation in ``X.bak`` used, ``ConfigManager.load``). Decoded,
    or deferred to the next snapshot, and named.
anything else
    damage: bytes no race explains (a gap followed by valid data, a torn tail in a
    finished file, non-zero bytes past the write position that are no partial write).

Severity: a race is a ``warning`` in a hot store, i.e. one whose ``abort`` file is present
(``DefaultMessageStore.start`` creates it, only a clean ``shutdown`` deletes it: the broker
was running, or it was killed) or whose ``lock`` is held (the snapshot manifest's
``broker_running``; the running broker holds it, ``DefaultMessageStore.start``). In a store
the broker stopped cleanly nothing was racing it, so the same region is an ``error``.
Damage is an ``error`` either way. A region's place decides whether it can be a race at
all: only the write position of the file being written; a trailing gap of a finished file
(a later file holds data) is relabelled damage by :func:`in_finished_file`.

Bytes the broker itself skips are not findings at all: a valid end-of-file BLANK and
whatever its filler holds (``CommitLog.checkMessageAndReturnSize`` returns size 0 for it and
the readers go on with the next file), the DLedger data file's BLANK, the timer log's
end-of-file blank (``recoverAndRevise`` breaks on its magic) and the ext file's end marker
(``ConsumeQueueExt.recover`` moves on at a size <= 0) are ``blank`` bytes, whatever they hold.
"""

from __future__ import annotations

import fcntl
import os
import struct
from dataclasses import dataclass, replace
from pathlib import Path

from rmqlib.common.accounting import FileAccount, UnreadableRegion

ERROR, WARNING, INFO = "error", "warning", "info"

TORN_TAIL = "torn tail"
HOT_COPY = "hot copy"
# What a torn tail in a finished file is called instead (relabelled by in_finished_file).
FINISHED_FILE = "corrupt: torn tail in a finished file (a later file holds data, so this " \
                "was no write in progress)"

RACE_PREFIXES = (TORN_TAIL, HOT_COPY)


def is_race(reason: str) -> bool:
    """Does the reason name a race of a hot copy (rather than damage)?"""
    return reason.startswith(RACE_PREFIXES)


def severity(reason: str, hot: bool) -> str:
    """The severity of a finding about a region with this reason, in a hot store or not."""
    return WARNING if hot and is_race(reason) else ERROR


def severity_sql(reason: str, hot: str, *, after_label: bool = False) -> str:
    """:func:`severity` as SQL over a reason column and a boolean SQL expression;
    ``after_label``: the reason follows a label (``"<label>: torn tail: ..."``)."""
    lead = "%: " if after_label else ""
    races = " OR ".join(f"{reason} LIKE '{lead}{prefix}%'" for prefix in RACE_PREFIXES)
    return f"CASE WHEN ({hot}) AND ({races}) THEN '{WARNING}' ELSE '{ERROR}' END"


def torn_tail(detail: str) -> str:
    return f"{TORN_TAIL}: {detail}"


def hot_copy(detail: str) -> str:
    return f"{HOT_COPY}: {detail}"


def in_finished_file(account: FileAccount) -> FileAccount:
    """Relabel the torn tails of a file that is not the one being written as damage: the
    broker moves to the next file only after it ends this one (a BLANK, a full file), so
    no write was in progress there."""
    account.unreadable = [
        replace(region, reason=f"{FINISHED_FILE}; {region.reason}")
        if region.reason.startswith(TORN_TAIL) else region
        for region in account.unreadable]
    return account


# --------------------------------------------------------------------------- the store


@dataclass(frozen=True)
class StoreState:
    """How the broker was when its store was read: running (``lock`` held) and/or not
    stopped cleanly (``abort`` present)."""

    broker_running: bool = False
    abort_present: bool = False

    @property
    def hot(self) -> bool:
        return self.broker_running or self.abort_present


_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux x86-64 / arm64


def lock_held(store_root: str | Path) -> bool:
    """Does a process hold the store's ``lock`` (a running broker)? Asked with
    ``F_GETLK``, which tests for a conflicting lock without taking one."""
    path = Path(store_root) / "lock"
    try:
        with open(path, "rb") as handle:
            query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
            answer = fcntl.fcntl(handle.fileno(), fcntl.F_GETLK, query)
    except OSError:
        return False
    return _FLOCK.unpack(answer)[0] != fcntl.F_UNLCK


def store_state(store_root: str | Path) -> StoreState:
    """The state of a store directory (a broker's, or a snapshot's copy of one)."""
    root = Path(store_root)
    return StoreState(lock_held(root), (root / "abort").is_file())


def note(account: FileAccount, offset: int, reason: str) -> None:
    """A named state of decoded bytes (no byte of its own): listed with the account's
    regions so that it reaches the findings, counted nowhere."""
    account.notes.append(UnreadableRegion(account.path, offset, 0, reason))
