"""Small byte helpers shared by the fixed-layout decoders (queues, index, checkpoint).

Kept apart so that every format module reads files and reports runs of bad units the
same way: missing/unreadable paths become :class:`NotAStoreFileError`, never a raw
``OSError``.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from rmqlib.common.bytesource import ByteSource, FileTarget, reading
from rmqlib.errors import NotAStoreFileError

if TYPE_CHECKING:  # imported where used: `rmq dump checkpoint` starts without numpy
    import numpy as np


def read_bytes(path: FileTarget) -> bytes:
    """Whole file contents, or NotAStoreFileError when it is missing or unreadable."""
    return read_range(path, 0)


def read_range(path: FileTarget, begin: int, end: int | None = None) -> bytes:
    """Bytes [begin, end) of a file (clipped to its size), without reading the rest;
    NotAStoreFileError when it is missing or unreadable. ``path`` may be a
    :class:`~rmqlib.common.bytesource.ByteSource`.

    Lets the Spark jobs decode only the new part of a growing queue file.
    """
    if isinstance(path, ByteSource):
        return path.read_at(begin, (path.size if end is None else end) - begin)
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            handle.seek(begin)
            return handle.read(-1 if end is None else max(0, end - begin))
    except FileNotFoundError as exc:
        raise NotAStoreFileError("file does not exist", path=path) from exc
    except IsADirectoryError as exc:
        raise NotAStoreFileError("expected a file, found a directory", path=path) from exc
    except OSError as exc:
        raise NotAStoreFileError(f"cannot read file: {exc.strerror}", path=path) from exc


def map_read_only(handle: BinaryIO) -> mmap.mmap:
    """The whole open file as a buffer for reading, safe on every filesystem.

    A file without holes is mapped read only, as the broker maps it. A file with holes (a
    snapshot copies a mapped file's zero tail as one) is not: on tmpfs the first touch of a
    hole through a mapping allocates a page, and with the filesystem full the kernel
    answers with SIGBUS, which ends the process without a word (seen in the chaos soak: a
    load died decoding an index file while its disk was full). It becomes anonymous private
    memory instead, its data extents read in; its holes stay untouched pages, which read
    as the kernel's one zero page and take no memory. Do not write to the result."""
    fd = handle.fileno()
    size = os.fstat(fd).st_size
    if size == 0 or os.lseek(fd, 0, os.SEEK_HOLE) >= size:  # mmap refuses an empty file
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    image = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = memoryview(image)
    try:
        for begin, end in _data_extents(fd, size):
            while begin < end:
                read = os.preadv(fd, [view[begin:end]], begin)
                if read == 0:  # the file shrank meanwhile: the rest reads as zeros
                    break
                begin += read
    finally:
        view.release()
    return image


def _data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """[begin, end) of each run of data in the file, by SEEK_DATA and SEEK_HOLE."""
    extents, position = [], 0
    while position < size:
        try:
            begin = os.lseek(fd, position, os.SEEK_DATA)
        except OSError as error:
            if error.errno == errno.ENXIO:  # only a hole from here to the end
                break
            raise
        position = min(os.lseek(fd, begin, os.SEEK_HOLE), size)
        extents.append((begin, position))
    return extents


def has_nonzero_after(path: FileTarget, position: int, stop: int | None = None,
                      chunk: int = 1 << 20) -> bool:
    """True when any byte in [position, stop) (default: to the end) is non-zero."""
    with reading(path) as source:
        stop = source.size if stop is None else min(stop, source.size)
        while position < stop:
            block = source.read_at(position, min(chunk, stop - position))
            if not block:
                break
            if block.strip(b"\x00"):
                return True
            position += len(block)
    return False


def last_nonzero_end(path: str | Path, size: int | None = None, chunk: int = 1 << 20) -> int:
    """End of a file's last non-zero byte (0 when it holds none): where its written data
    ends. The end of the file's last data extent (``SEEK_DATA``/``SEEK_HOLE``) bounds the
    search first, so a large sparse file (a pre-allocated mapped file) is not read through
    its holes; zeros written as bytes are then read back from that end."""
    import os

    with open(path, "rb") as handle:
        end = os.fstat(handle.fileno()).st_size if size is None else size
        end = min(end, _data_extent_end(handle.fileno(), end))
        while end > 0:
            begin = max(0, end - chunk)
            handle.seek(begin)
            block = handle.read(end - begin).rstrip(b"\x00")
            if block:
                return begin + len(block)
            end = begin
    return 0


def _data_extent_end(fd: int, size: int) -> int:
    """End of the last data extent of a file (its size where holes cannot be asked for)."""
    import os

    if not hasattr(os, "SEEK_DATA"):
        return size
    end, position = 0, 0
    try:
        while position < size:
            start = os.lseek(fd, position, os.SEEK_DATA)
            position = os.lseek(fd, start, os.SEEK_HOLE)
            end = position
    except OSError as error:  # ENXIO: no data after position; others: cannot tell
        import errno

        if error.errno != errno.ENXIO:
            return size
    return end


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of each run of True in a 1-D boolean array."""
    import numpy as np

    if mask.size == 0:
        return []
    padded = np.concatenate(([False], mask, [False])).astype(np.int8)
    edges = np.flatnonzero(np.diff(padded))
    return [(int(s), int(e - s)) for s, e in zip(edges[::2], edges[1::2], strict=True)]


def nonzero_span(data: bytes, start: int = 0) -> tuple[int, int] | None:
    """(first, end) of the non-zero bytes in ``data[start:]``, or None if all zero."""
    rest = data[start:]
    stripped = rest.rstrip(b"\x00")
    if not stripped:
        return None
    first = start + len(rest) - len(rest.lstrip(b"\x00"))
    return first, start + len(stripped)
