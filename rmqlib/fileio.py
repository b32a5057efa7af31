"""Small byte helpers shared by the fixed-layout decoders (queues, index, checkpoint).

Kept apart so that every format module reads files and reports runs of bad units the
same way: missing/unreadable paths become :class:`NotAStoreFileError`, never a raw
``OSError``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rmqlib.errors import NotAStoreFileError


def read_bytes(path: str | Path) -> bytes:
    """Whole file contents, or NotAStoreFileError when it is missing or unreadable."""
    path = Path(path)
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise NotAStoreFileError("file does not exist", path=path) from exc
    except IsADirectoryError as exc:
        raise NotAStoreFileError("expected a file, found a directory", path=path) from exc
    except OSError as exc:
        raise NotAStoreFileError(f"cannot read file: {exc.strerror}", path=path) from exc


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of each run of True in a 1-D boolean array."""
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
