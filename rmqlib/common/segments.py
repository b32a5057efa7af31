"""Mapped-file queues: directories of fixed-size files named by their start offset.

The commitlog, consume queues, consumequeue_ext, batchconsumequeue and timerlog all
name each file by the byte offset of its first byte in the logical stream, as a
20-digit zero-padded decimal (spec §1.1). This module lists and validates such
directories once, so each format module only decodes bytes.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Sequence
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


#: Why a 0-byte last file of a mapped-file queue is a state, not damage: the broker creates
#: a new file by opening it (0 bytes) and then mapping it at full size (MappedFile.init); a
#: broker killed between the two leaves it empty. It holds nothing. On start a 5.1.3+
#: broker deletes it; an older one refuses to load the queue (spec §1.1, MFQ.doLoad).
UNSIZED_FILE_REASON = ("last file of 0 bytes: created but not yet sized when the broker "
                       "stopped (killed while rolling to a new file); it holds nothing. A "
                       "5.1.3+ broker deletes it on start, an older one does not start until "
                       "it is removed")


def unsized_last_file(segments: Sequence[Segment]) -> Segment | None:
    """The queue's last file when it has 0 bytes (see :data:`UNSIZED_FILE_REASON`)."""
    return segments[-1] if segments and segments[-1].size == 0 else None


def segment_issues(segments: Sequence[Segment], unit_size: int = 1,
                   file_size: int | None = None) -> list[str]:
    """What the broker's ``MappedFileQueue.load/checkSelf`` would complain about.

    Sizes must all equal the configured size (the first file's when not given) and be a
    multiple of the unit; each file must start where the previous one ends. A 0-byte last
    file is left to :func:`unsized_last_file`.
    """
    if unsized_last_file(segments):
        segments = segments[:-1]
    issues: list[str] = []
    if not segments:
        return issues
    expected = file_size if file_size is not None else segments[0].size
    for seg in segments:
        if seg.size != expected:
            issues.append(f"{seg.path.name}: size {seg.size} != file size {expected}")
        if seg.start % unit_size:
            issues.append(f"{seg.path.name}: start {seg.start} not a multiple of {unit_size}")
    for prev, nxt in itertools.pairwise(segments):
        if nxt.start != prev.start + expected:
            issues.append(
                f"{nxt.path.name}: starts at {nxt.start}, expected {prev.start + expected}"
            )
    return issues
