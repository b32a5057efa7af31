"""A full disk, said in one line: which step, where, how much is free, how much it needed.

A step that runs out of space meets ENOSPC in whatever writes for it: Python's own files
(``OSError`` errno 28), Arrow (``OSError`` "No space left on device"), delta-rs and DuckDB
(their own exceptions, "No space left on device (os error 28)"). :func:`disk_full_said`
turns any of them into :class:`DiskFullError`, whose message names the step, the path (the
file the writer named, else the step's directory), the space free on that filesystem and,
when the step knows it, about how much it needed. The steps' writes already leave nothing
half-committed when they stop anywhere: a snapshot is a directory renamed into place after
its manifest, a Delta commit is a table's last write (files written before it are not part
of the table; staged ones are cleared by the next attempt), so once space is freed the
re-run gives the night's tables (tests/test_full_disk.py).
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jobs.lakehouse.locations import Location

#: How writers that are not Python's say ENOSPC (Arrow, delta-rs and object_store, DuckDB).
FULL_DISK_TEXTS = ("No space left on device", "os error 28")


class DiskFullError(RuntimeError):
    """A step ran out of disk space; the message is one line (see the module docstring)."""

    def __init__(self, step: str, path: str | Path, needed: int | None = None) -> None:
        self.step, self.path, self.needed = step, Path(path), needed
        free, total = space_of(self.path)
        wanted = f", about {human(needed)} needed" if needed else ""
        super().__init__(f"{step}: out of disk space on the device of {self.path}: "
                         f"{human(free)} free of {human(total)}{wanted}")


def space_of(path: Path) -> tuple[int, int]:
    """(free, total) bytes of the filesystem holding ``path`` (or its nearest existing
    parent: the path itself may be what could not be written)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            usage = shutil.disk_usage(candidate)
            return usage.free, usage.total
    return 0, 0


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from, is ENOSPC (or says it)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DiskFullError):
            return True
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(text in str(current) for text in FULL_DISK_TEXTS):
            return True
        current = current.__cause__ or current.__context__
    return False


def written_path(error: BaseException, default: str | Path) -> Path:
    """The file ``error`` says could not be written, else ``default``."""
    current: BaseException | None = error
    while current is not None:
        if isinstance(current, OSError) and current.filename:
            return Path(str(current.filename))
        current = current.__cause__ or current.__context__
    return Path(default)


#: What a step writes besides its data: a commit and a small file for each of the ~30
#: tables, lock files, the load's task reports.
BOOKKEEPING_ROOM = 4 << 20


def disk_of(location: str | Path | Location) -> Path | None:
    """The local directory of a warehouse ``location``; None for a bucket."""
    where = location if isinstance(location, Location) else Location(str(location))
    return where.path if where.is_local else None


def ensure_room(step: str, directory: Path | None, needed: int) -> None:
    """Refuse ``step`` before it writes when the filesystem of ``directory`` (a local one;
    None for a bucket, which never fills) has less than ``needed`` bytes free.

    Not only for the clearer message: delta-rs meeting ENOSPC in a write fails the write
    cleanly, then object_store's buffered writer panics in a background thread as it is
    closed ("Already shut down", apache/arrow-rs-object-store#810) and Rust prints that on
    stderr. A step that can tell it will not fit does not start."""
    if directory is None:
        return
    free, _ = space_of(directory)
    if free < needed:
        raise DiskFullError(step, directory, needed)


@contextmanager
def disk_full_said(step: str, path: str | Path, needed: int | None = None) -> Iterator[None]:
    """Raise :class:`DiskFullError` for ``step`` when the block runs out of space under
    ``path`` (a local directory; nothing to do for a bucket, whose writes never meet it)."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as error:
        if is_disk_full(error):
            raise DiskFullError(step, written_path(error, path), needed) from error
        raise


def human(count: int) -> str:
    """``count`` bytes in the largest binary unit that keeps it at least 1."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
