"""DLedger index files, and the two small text files beside them.

``index/`` holds one 32-byte unit per Raft index (unit i at byte 32 * i of the index log,
files named by their start byte like every mapped-file queue): MAGIC, POS, SIZE, INDEX,
TERM of entry i (:mod:`rmqlib.dledger.layout`). The log begins at the ledger's first index
(a truncated ledger's earlier files are gone), and unwritten units are zeros.

``checkpoint`` and ``currterm`` are ``java.util.Properties`` text (``IOUtils.string2File``):
``endIndex`` / ``committedIndex``, and ``currTerm`` / ``voteLeader``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rmqlib.common.fileio import last_nonzero_end, read_bytes
from rmqlib.common.segments import list_segments
from rmqlib.dledger import layout as L
from rmqlib.dledger.entries import DLedgerEntry


@dataclass(frozen=True)
class IndexUnit:
    index: int      # the Raft index this unit's position stands for (byte offset / 32)
    magic: int
    pos: int
    size: int
    entry_index: int
    term: int

    @property
    def written(self) -> bool:
        return not (self.magic == 0 and self.pos == 0 and self.size == 0)


def read_index_units(index_dir: str | Path) -> Iterator[IndexUnit]:
    """Every unit of the index log up to each file's written end (the index file is 160 MiB
    by default and sparse: only its written part is read)."""
    import numpy as np

    dtype = np.dtype([("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"),
                      ("term", ">i8")])
    for segment in list_segments(index_dir):
        units_end = -(-last_nonzero_end(segment.path, segment.size) // L.INDEX_UNIT_SIZE)  # up
        with open(segment.path, "rb") as handle:
            data = handle.read(min(units_end * L.INDEX_UNIT_SIZE,
                                   segment.size - segment.size % L.INDEX_UNIT_SIZE))
        units = np.frombuffer(data, dtype=dtype)
        first = segment.start // L.INDEX_UNIT_SIZE
        for number, unit in enumerate(units.tolist()):
            yield IndexUnit(first + number, *unit)


@dataclass(frozen=True)
class IndexMismatch:
    index: int
    reason: str


def check_index(entries: Sequence[DLedgerEntry], units: Sequence[IndexUnit]) -> list[IndexMismatch]:
    """Every entry has its unit (same position, size, index and term), and every written
    unit points at an entry: what ``DLedgerMmapFileStore.recover`` checks on start."""
    by_index = {u.index: u for u in units if u.written}
    problems = []
    for entry in entries:
        unit = by_index.pop(entry.index, None)
        if unit is None:
            problems.append(IndexMismatch(entry.index, "entry has no index unit"))
        elif (unit.magic, unit.pos, unit.size, unit.entry_index, unit.term) != (
                L.ENTRY_MAGIC, entry.pos, entry.size, entry.index, entry.term):
            problems.append(IndexMismatch(entry.index, (
                f"index unit says pos {unit.pos} size {unit.size} index {unit.entry_index} "
                f"term {unit.term}, the entry is at {entry.pos} size {entry.size} term "
                f"{entry.term}")))
    problems += [IndexMismatch(i, f"index unit points at {u.pos}, where no entry is")
                 for i, u in sorted(by_index.items())]
    return problems


def read_properties(path: str | Path) -> dict[str, str]:
    """A ``java.util.Properties`` text file as a dict (comments and blank lines left out)."""
    text = read_bytes(path).decode("iso-8859-1")
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=len(line))
        values[line[:cut].strip()] = line[cut + 1:].strip()
    return values
