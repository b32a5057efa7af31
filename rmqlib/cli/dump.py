"""What ``rmq dump`` prints: every record, unit or entry of a file and, at its place in
file order, every region that is not one (unreadable bytes, BLANKs, filler, zero tails),
then a one-line account per dump. Modelled on Kafka's DumpLogSegments: a dump never
hides a byte, and one that met unreadable bytes says so in its exit code.

Rows are built only in the form asked for (text or ``--json``) and written through one
buffered stream: formatting, not decoding, is what a dump spends its time on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from rmqlib.common.accounting import FileAccount

UNREADABLE, ZERO_TAIL, BLANK, NOTE = "unreadable", "zero tail", "blank", "note"
FLUSH_EVERY = 512
# One encoder for every row: json.dumps with options builds a new one per call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, default=str).encode


@dataclass(frozen=True)
class Region:
    """A stretch of a file that holds no listed item, and why."""

    path: str
    offset: int
    length: int
    kind: str        # unreadable | zero tail | blank | (a file-specific kind)
    reason: str

    def row(self) -> dict[str, Any]:
        return {"kind": "region", "region": self.kind, "file": self.path,
                "offset": self.offset, "length": self.length, "reason": self.reason}

    def text(self) -> str:
        return (f"-- {self.kind}: file: {self.path} offset: {self.offset} "
                f"length: {self.length} reason: {self.reason}")


def account_regions(account: FileAccount) -> list[Region]:
    """The unreadable regions of an account, its notes (named states of decoded bytes,
    e.g. index entries beyond a lagging header: no byte, no exit 1), and its zero tail."""
    regions = [Region(r.path, r.offset, r.length, UNREADABLE, r.reason)
               for r in account.unreadable]
    regions += [Region(r.path, r.offset, 0, NOTE, r.reason) for r in account.notes]
    if account.zero_tail:
        regions.append(Region(account.path, account.size - account.zero_tail,
                              account.zero_tail, ZERO_TAIL, "unwritten zeros up to the end"))
    return regions


@dataclass
class Totals:
    """The closing account of a dump, summed over its files."""

    noun: str
    files: int = 0
    items: int = 0
    decoded: int = 0
    blank: int = 0
    unreadable: int = 0
    zero_tail: int = 0
    stopped: bool = False  # --limit cut the dump short: the account is partial

    def add(self, account: FileAccount, items: int) -> None:
        self.files += 1
        self.items += items
        self.decoded += account.decoded
        self.blank += account.blank
        self.unreadable += account.unreadable_bytes
        self.zero_tail += account.zero_tail

    def row(self) -> dict[str, Any]:
        return {"kind": "account", "files": self.files, self.noun: self.items,
                "decoded_bytes": self.decoded, "blank_bytes": self.blank,
                "unreadable_bytes": self.unreadable, "zero_tail_bytes": self.zero_tail,
                "complete": not self.stopped}

    def text(self) -> str:
        line = (f"account: {self.files} file(s), {self.items} {self.noun}, {self.decoded} "
                f"bytes decoded, {self.blank} blank, {self.unreadable} unreadable, "
                f"{self.zero_tail} zero tail")
        return line + (" (stopped by --limit: the files were not read to their end)"
                       if self.stopped else "")


class Output:
    """Rows to stdout as text or JSON lines, buffered; counts what was shown."""

    def __init__(self, as_json: bool, stream: TextIO | None = None) -> None:
        self.as_json = as_json
        self.stream = stream or sys.stdout
        self.buffer: list[str] = []
        self.unreadable = 0

    def item(self, row: Callable[[], dict[str, Any] | str], text: Callable[[], str]) -> None:
        """Only the form asked for is built; ``row`` may return a ready JSON line."""
        if self.as_json:
            built = row()
            self.buffer.append(built if isinstance(built, str) else _ENCODE(built))
        else:
            self.buffer.append(text())
        if len(self.buffer) >= FLUSH_EVERY:
            self.flush()

    def line(self, line: str) -> None:
        """A row already formatted in the form asked for."""
        self.buffer.append(line)
        if len(self.buffer) >= FLUSH_EVERY:
            self.flush()

    def region(self, region: Region) -> None:
        if region.kind == UNREADABLE:
            self.unreadable += 1
        self.item(region.row, region.text)

    def flush(self) -> None:
        if self.buffer:
            self.stream.write("\n".join(self.buffer) + "\n")
            self.buffer.clear()


class Window:
    """--offset / --limit over the listed items (regions are always shown while the
    window is open, so a limited dump still names what it passed over)."""

    def __init__(self, offset: int, limit: int | None) -> None:
        self.offset, self.limit = offset, limit
        self.seen = 0

    @property
    def full(self) -> bool:
        return self.limit is not None and self.seen >= self.offset + self.limit

    def take(self) -> bool:
        """Count one item; True when it is to be shown."""
        self.seen += 1
        return self.seen > self.offset and not (
            self.limit is not None and self.seen > self.offset + self.limit)


def merged(items: Iterable[tuple[int, Any]], regions: Iterable[Region]
           ) -> Iterator[tuple[int, Any]]:
    """(position, item or Region) in file order: items already sorted, regions any order."""
    pending = sorted(regions, key=lambda r: r.offset)
    index = 0
    for position, item in items:
        while index < len(pending) and pending[index].offset <= position:
            yield pending[index].offset, pending[index]
            index += 1
        yield position, item
    for region in pending[index:]:
        yield region.offset, region
