"""Where a decoder reads a store file's bytes from: a path, or any source of byte ranges.

Every range decoder of rmqlib (commitlog segments, consume queues, batch consume queues,
index files) takes a ``str | Path`` or a :class:`ByteSource`: an object that knows its
``size`` and answers ``read_at(position, length)``. A path is read with ``pread``; a
Python or fsspec file object, or a pyarrow ``NativeFile`` from any pyarrow filesystem,
through :class:`FileObjectSource`; an object in a bucket through a source the caller
writes in a few lines (``jobs.snapshot.bucket.ObjectSource`` reads ranges with GETs). The
decoders never learn which: the same bytes give the same rows (tests/test_bytesource.py
decodes every file both ways).

``name`` is what errors and rows call the file; parsers take a file's identity (segment
start, topic, queue id) from its last components, so a source's name ends like the path
it stands for.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rmqlib.errors import NotAStoreFileError, TruncatedDataError


@runtime_checkable
class ByteSource(Protocol):
    """Random access to one file's bytes."""

    name: str
    size: int

    def read_at(self, position: int, length: int) -> bytes:
        """Bytes ``[position, position + length)``, clipped to ``size``."""
        ...

    def close(self) -> None: ...


FileTarget = str | Path | ByteSource


class LocalFile:
    """A local file, read with ``pread`` (no shared file position: safe across threads)."""

    def __init__(self, path: str | Path, what: str = "file") -> None:
        self.name = str(path)
        try:
            self._fd = os.open(self.name, os.O_RDONLY)
        except FileNotFoundError:
            raise NotAStoreFileError(f"{what} does not exist", path=path) from None
        except OSError as exc:
            raise NotAStoreFileError(f"cannot open {what}: {exc.strerror}", path=path) from None
        info = os.fstat(self._fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(self._fd)
            raise NotAStoreFileError(f"{what} is not a regular file", path=path)
        self.size = info.st_size

    def read_at(self, position: int, length: int) -> bytes:
        length = max(0, min(length, self.size - position))
        data = os.pread(self._fd, length, position)
        while len(data) < length:
            more = os.pread(self._fd, length - len(data), position + len(data))
            if not more:
                raise TruncatedDataError("file shrank while being read", path=self.name,
                                         offset=position + len(data),
                                         length=length - len(data))
            data += more
        return data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class FileObjectSource:
    """Any binary file object with ``seek`` and ``read`` (a Python file, an fsspec file,
    a pyarrow ``NativeFile``); ``read_at`` is used where the object has it."""

    def __init__(self, handle: Any, name: str, size: int | None = None) -> None:
        self.handle = handle
        self.name = name
        self.size = handle.seek(0, os.SEEK_END) if size is None else size

    def read_at(self, position: int, length: int) -> bytes:
        length = max(0, min(length, self.size - position))
        if hasattr(self.handle, "read_at"):  # pyarrow: a positional read, no seek
            data = bytes(self.handle.read_at(length, position))
        else:
            self.handle.seek(position)
            data = self.handle.read(length)
        if len(data) < length:
            raise TruncatedDataError("file shrank while being read", path=self.name,
                                     offset=position + len(data), length=length - len(data))
        return bytes(data)

    def close(self) -> None:
        """The caller who opened the file object closes it."""


def source_name(target: FileTarget) -> str:
    return target.name if isinstance(target, ByteSource) else str(target)


@contextmanager
def reading(target: FileTarget, what: str = "file") -> Iterator[ByteSource]:
    """``target`` as a source for the block; a path is opened and closed here, a source
    given by the caller is left open (it is the caller's)."""
    if isinstance(target, ByteSource):
        yield target
        return
    source = LocalFile(target, what)
    try:
        yield source
    finally:
        source.close()
