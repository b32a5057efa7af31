"""Mapped-file queues: directories of fixed-size files named by their start offset.

The commitlog, consume queues, consumequeue_ext, batchconsumequeue and timerlog all
name each file by the byte offset of its first byte in the logical stream, as a
20-digit zero-padded decimal (spec §1.1). This module lists and validates such
directories once, so each format module only decodes bytes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rmqlib.errors import NotAStoreFileError

SEGMENT_NAME = re.compile(r"^\d{20}$")


@dataclass(frozen=True)
class Segment:
    """One file of a mapped-file queue."""

    path: Path
    start: int  # logical byte offset of the file's first byte (from its name)
    size: int  # actual size on disk

    @property
    def end(self) -> int:
        return self.start + self.size


def parse_segment_name(path: str | Path) -> int:
    """Return the start offset a segment file's name encodes, or raise NotAStoreFileError."""
    name = Path(path).name
    if not SEGMENT_NAME.match(name):
        raise NotAStoreFileError(
            "not a segment file: name must be a 20-digit start offset", path=path
        )
    return int(name)


def list_segments(directory: str | Path | list[str | Path]) -> list[Segment]:
    """All segment files of one stream, ordered by start offset.

    Accepts several directories (the commitlog may be spread over comma-separated
    dirs, spec §1) and merges them by name. Files whose names are not 20-digit offsets
    are not segments and are left to the caller's inventory.
    """
    directories = directory if isinstance(directory, list) else [directory]
    segments: list[Segment] = []
    for one in directories:
        one = Path(one)
        if not one.is_dir():
            raise NotAStoreFileError("segment directory does not exist", path=one)
        for entry in os.scandir(one):
            if entry.is_file() and SEGMENT_NAME.match(entry.name):
                segments.append(Segment(Path(entry.path), int(entry.name), entry.stat().st_size))
    segments.sort(key=lambda segment: segment.start)
    return segments


def segment_name(start: int) -> str:
    """The file name the broker gives the segment starting at ``start``."""
    return f"{start:020d}"
