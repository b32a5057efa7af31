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

from rmqlib.common import races
from rmqlib.common.fileio import last_nonzero_end, read_bytes, read_range
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


def read_units_for(index_dir: str | Path, first: int, last: int) -> list[IndexUnit]:
    """The units of Raft indexes [first, last] (those the index files hold): what one
    range of entries is checked against, without reading the rest of the index log."""
    units: list[IndexUnit] = []
    begin, end = first * L.INDEX_UNIT_SIZE, (last + 1) * L.INDEX_UNIT_SIZE
    for segment in list_segments(index_dir):
        lo, hi = max(begin, segment.start), min(end, segment.start + segment.size)
        if lo >= hi:
            continue
        data = read_range(segment.path, lo - segment.start, hi - segment.start)
        for number, at in enumerate(range(0, len(data) - L.INDEX_UNIT_SIZE + 1,
                                          L.INDEX_UNIT_SIZE)):
            units.append(IndexUnit(lo // L.INDEX_UNIT_SIZE + number,
                                   *L.INDEX_UNIT.unpack_from(data, at)))
    return units


def check_entries(entries: Sequence[DLedgerEntry], units: Sequence[IndexUnit]
                  ) -> list[IndexMismatch]:
    """Each entry against its unit, where the index has been written that far.

    DLedger appends an entry, then its unit: a hot copy (index copied before data, see
    ``rmqlib.store.growth``) ends its index below its data, so entries past the last
    written unit are not yet indexed, not wrong. A missing unit before a written one is.
    """
    by_index = {u.index: u for u in units if u.written}
    indexed_up_to = max(by_index, default=-1)
    problems = []
    for entry in entries:
        unit = by_index.get(entry.index)
        if unit is None:
            if entry.index < indexed_up_to:
                problems.append(IndexMismatch(entry.index, "entry has no index unit"))
        else:
            got = (unit.magic, unit.pos, unit.size, unit.entry_index, unit.term)
            want = (L.ENTRY_MAGIC, entry.pos, entry.size, entry.index, entry.term)
            if got == want:
                continue
            reason = _disagreement(unit, entry)
            if entry.index == indexed_up_to and all(g in (w, 0) for g, w in zip(
                    got, want, strict=True)):
                # the newest unit, its fields right or still zero: the one being written
                reason = races.torn_tail(f"the last index unit is incomplete (the unit being "
                                         f"written when the copy read it, or a kill): {reason}")
            problems.append(IndexMismatch(entry.index, reason))
    return problems


def _disagreement(unit: IndexUnit, entry: DLedgerEntry) -> str:
    return (f"index unit says magic {unit.magic} pos {unit.pos} size {unit.size} index "
            f"{unit.entry_index} term {unit.term}, the entry is at {entry.pos} size "
            f"{entry.size} term {entry.term}")


@dataclass(frozen=True)
class UnitProblem:
    """An index unit that disagrees with its entry, where it is in the index files."""

    path: str
    position: int   # file position of the unit (of the index directory: -1)
    index: int
    reason: str


def check_entries_in(index_dir: str | Path, entries: Sequence[DLedgerEntry]
                     ) -> list[UnitProblem]:
    """:func:`check_entries` for a run of entries (a load task's), reading only their
    units, each problem placed at its unit's file and position."""
    index_dir = Path(index_dir)
    if not entries:
        return []
    if not index_dir.is_dir():
        return [UnitProblem(str(index_dir), -1, entries[0].index,
                            "no DLedger index directory beside the data")]
    segments = list_segments(index_dir)
    problems = []
    for problem in check_entries(entries, read_units_for(index_dir, entries[0].index,
                                                         entries[-1].index)):
        byte = problem.index * L.INDEX_UNIT_SIZE
        segment = next((s for s in segments if s.start <= byte < s.end), None)
        problems.append(UnitProblem(
            str(segment.path if segment else index_dir),
            byte - segment.start if segment else -1, problem.index, problem.reason))
    return problems


def check_index(entries: Sequence[DLedgerEntry], units: Sequence[IndexUnit]) -> list[IndexMismatch]:
    """Every entry against its unit (:func:`check_entries`), and every written unit points
    at an entry: what ``DLedgerMmapFileStore.recover`` checks on start."""
    known = {entry.index for entry in entries}
    nowhere = [IndexMismatch(u.index, f"index unit points at {u.pos}, where no entry is")
               for u in units if u.written and u.index not in known]
    return sorted(check_entries(entries, units) + nowhere, key=lambda p: p.index)


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
