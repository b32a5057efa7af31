"""A small filesystem of a test's own: a tmpfs mounted (as root) for a block, and filled to
its last byte, for the tests and the soak that meet a full disk."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def mounted_tmpfs(directory: Path, mib: int) -> Iterator[Path]:
    """``directory`` (made if missing) as a tmpfs of ``mib`` MiB for the block."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={mib}m", "tmpfs", str(directory)],
                   check=True)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "--lazy", str(directory)], check=True)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file (removed to give the space back)."""
    filler = disk / "filler"
    with filler.open("ab") as out:
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        os.posix_fallocate(out.fileno(), filler.stat().st_size, free)
    assert os.statvfs(disk).f_bavail == 0
    return filler
