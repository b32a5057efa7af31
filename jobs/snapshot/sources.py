"""Where a snapshot reads a broker store from: a local directory or a remote host by SFTP.

A source is only ever read: files are opened read-only (locally) or through SFTP reads,
never written, renamed or locked. The SFTP source takes any client with paramiko's
``SFTPClient`` methods (the DAG gets one from Airflow's ``SSHHook``), so this module needs
no Airflow and no SSH library of its own.
"""

from __future__ import annotations

import fcntl
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

# struct flock on Linux x86_64/aarch64: short l_type, short l_whence, off_t l_start,
# off_t l_len, pid_t l_pid (+ padding to 32 bytes).
_FLOCK = struct.Struct("hhqqi4x")
SFTP_REQUEST = 32 * 1024   # paramiko's largest single read; readv pipelines these
MAX_DEPTH = 8              # a store is 4 levels deep at most (consumequeue/topic/queue/file)


@dataclass(frozen=True)
class SourceFile:
    """One regular file of the store: path relative to the store root (POSIX form).

    ``mtime_settled``: a write to the file after it was listed would change its mtime.
    The source's listing saw, before this file, an entry modified strictly later than
    this file was: the broker host's clock had passed this mtime's tick by then, so any
    later write stamps a later one. An mtime written in the tick the file was listed in
    (git's "racy clean" files) is not settled: the next snapshot does not trust it alone.
    The rule needs no clock of this machine, so it holds for SFTP's whole seconds and for
    a mount whose file server keeps the time.
    """

    relative: str
    size: int
    mtime_ns: int
    mtime_settled: bool = False
    # Bytes the file takes on its disk, where the source can tell (a sparse file's zero
    # tail takes none, nor does it in the copy); None over SFTP.
    allocated: int | None = None


class ListingClock:
    """The newest mtime among the entries a walk has listed so far (the broker's clock
    had reached it), in the order the source read their attributes."""

    def __init__(self) -> None:
        self.newest_ns = -1

    def settled(self, mtime_ns: int) -> bool:
        """Whether ``mtime_ns`` is strictly older than an entry listed before; then note
        it as listed."""
        settled = mtime_ns < self.newest_ns
        self.newest_ns = max(self.newest_ns, mtime_ns)
        return settled


class FileReader(Protocol):
    def read_at(self, offset: int, length: int) -> bytes: ...
    def close(self) -> None: ...


class StoreSource(Protocol):
    """What the snapshot copier needs from a store, wherever it is."""

    label: str   # for logs, errors and the manifest: a path or ssh://conn/path
    skipped: list[str]  # what list_files found but cannot copy, with why

    def list_files(self) -> list[SourceFile]: ...
    def open(self, relative: str) -> FileReader: ...
    def lock_holder(self) -> str | None: ...
    def close(self) -> None: ...


class SourceError(OSError):
    """The store cannot be read (missing root, permission, connection); names the place."""


# --------------------------------------------------------------------------- local


class _LocalReader:
    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def read_at(self, offset: int, length: int) -> bytes:
        return os.pread(self.fd, length, offset)

    def close(self) -> None:
        os.close(self.fd)


class LocalSource:
    """A store directory on this machine (or a read-only mount of the broker's volume)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.label = str(self.root)
        self.skipped: list[str] = []

    def list_files(self) -> list[SourceFile]:
        """Regular files, following symbolic links (a commitlog directory on another disk
        is often a link); anything else found is listed in ``skipped`` with why."""
        if not self.root.is_dir():
            raise SourceError(f"{self.root}: not a directory (is the store path right?)")
        found = []
        seen: set[tuple[int, int]] = set()
        clock = ListingClock()
        for directory, dirs, names in os.walk(self.root, followlinks=True):
            info = os.stat(directory)
            clock.settled(info.st_mtime_ns)
            if (info.st_dev, info.st_ino) in seen:  # a link loop: walked already
                self.skipped.append(f"{Path(directory).relative_to(self.root)}: directory "
                                    "reached twice through links, not copied again")
                dirs.clear()
                continue
            seen.add((info.st_dev, info.st_ino))
            for name in names:
                path = Path(directory) / name
                relative = path.relative_to(self.root).as_posix()
                try:
                    info = path.stat()
                except OSError as error:
                    self.skipped.append(f"{relative}: cannot be read ({error})")
                    continue
                settled = clock.settled(info.st_mtime_ns)
                if stat.S_ISREG(info.st_mode):
                    found.append(SourceFile(relative, info.st_size, info.st_mtime_ns,
                                            settled, info.st_blocks * 512))
                else:
                    self.skipped.append(f"{relative}: not a regular file, not copied")
        return sorted(found, key=lambda f: f.relative)

    def open(self, relative: str) -> FileReader:
        return _LocalReader(self.root / relative)

    def lock_holder(self) -> str | None:
        """"pid N" when a process holds the store's ``lock`` file (a running broker).

        Queried with ``F_GETLK``, which tests for a conflicting lock without taking one;
        the broker locks with Java's ``FileChannel.tryLock``, an fcntl record lock.
        """
        path = self.root / "lock"
        if not path.is_file():
            return None
        with open(path, "rb") as handle:
            query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
            answer = fcntl.fcntl(handle.fileno(), fcntl.F_GETLK, query)
        kind, _whence, _start, _length, pid = _FLOCK.unpack(answer)
        return None if kind == fcntl.F_UNLCK else f"pid {pid}"

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------- SFTP


class _SftpReader:
    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def read_at(self, offset: int, length: int) -> bytes:
        # readv pipelines the 32 KiB requests instead of one round trip each.
        requests = [(start, min(SFTP_REQUEST, offset + length - start))
                    for start in range(offset, offset + length, SFTP_REQUEST)]
        return b"".join(self.handle.readv(requests))

    def close(self) -> None:
        self.handle.close()


def _whole_seconds_ns(mtime: float | int | None) -> int:
    """SFTP v3 carries whole seconds only."""
    return int(mtime or 0) * 1_000_000_000


class SftpSource:
    """A store on another host, read through an SFTP client (paramiko's interface)."""

    def __init__(self, sftp: Any, root: str, label: str) -> None:
        self.sftp = sftp
        self.root = PurePosixPath(root)
        self.label = label
        self.skipped: list[str] = []

    def list_files(self) -> list[SourceFile]:
        try:
            return sorted(self._walk(self.root, ListingClock()), key=lambda f: f.relative)
        except OSError as error:
            raise SourceError(f"{self.label}: cannot list the store: {error}") from error

    def _walk(self, directory: PurePosixPath, clock: ListingClock,
              depth: int = 0) -> Iterator[SourceFile]:
        # The server read a directory's attributes in its listing's order, before any
        # subdirectory's: the clock follows that order, then the walk descends.
        listed = [(entry, clock.settled(_whole_seconds_ns(entry.st_mtime)))
                  for entry in self.sftp.listdir_attr(str(directory))]
        for entry, settled in listed:
            path = directory / entry.filename
            relative = str(path.relative_to(self.root))
            if stat.S_ISLNK(entry.st_mode):  # follow it, as the local source does
                entry = self.sftp.stat(str(path))
                settled = clock.settled(_whole_seconds_ns(entry.st_mtime))
            if stat.S_ISDIR(entry.st_mode):
                if depth >= MAX_DEPTH:
                    self.skipped.append(f"{relative}: deeper than {MAX_DEPTH} directories "
                                        "(a link loop?), not copied")
                else:
                    yield from self._walk(path, clock, depth + 1)
            elif stat.S_ISREG(entry.st_mode):
                yield SourceFile(relative, entry.st_size, _whole_seconds_ns(entry.st_mtime),
                                 settled)
            else:
                self.skipped.append(f"{relative}: not a regular file, not copied")

    def open(self, relative: str) -> FileReader:
        return _SftpReader(self.sftp.open(str(self.root / relative), "rb"))

    def lock_holder(self) -> str | None:
        """Not visible over SFTP: the abort file is the sign of a running broker there."""
        return None

    def close(self) -> None:
        self.sftp.close()
