"""The commitlog records of a DLedger store, one per entry, in log order.

A DLedger broker's commitlog is its Raft log: each entry's body is one commitlog record
(spec §2) whose PHYSICALOFFSET is the entry's body offset, which is what consume queues,
the index file and offsetMsgIds point at. :func:`scan_dledger` walks every data file of
``<store>/dledger-<selfId>/data/`` (:mod:`rmqlib.dledger.entries`) and decodes each body
with the commitlog decoder, so a record here is the same object a commitlog scan yields.
An entry whose body is no valid record is reported with its offset, never skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rmqlib.commitlog.records import CommitLogRecord, decode_record
from rmqlib.common.segments import Segment, list_segments
from rmqlib.dledger import layout as L
from rmqlib.dledger.entries import DataFileScan, DLedgerEntry, scan_data_file
from rmqlib.errors import StoreError


def dledger_dirs(store: str | Path) -> list[Path]:
    """The ``dledger-<selfId>`` directories of a store root (one per self id it ever had)."""
    root = Path(store)
    return sorted(p for p in root.glob(f"{L.DIR_PREFIX}*") if (p / L.DATA_DIR).is_dir())


@dataclass(frozen=True)
class BadBody:
    """An entry whose body is not a valid commitlog record."""

    entry: DLedgerEntry
    path: str
    reason: str


@dataclass
class DLedgerScan:
    """Iterate for (entry, record) pairs; afterwards ``files`` and ``bad_bodies`` say what
    else was found."""

    data_dir: Path
    verify_crc: bool = True
    files: list[DataFileScan] = field(default_factory=list)
    bad_bodies: list[BadBody] = field(default_factory=list)

    def __iter__(self) -> Iterator[tuple[DLedgerEntry, CommitLogRecord]]:
        for segment in list_segments(self.data_dir):
            entries, scan = scan_data_file(segment.path)
            self.files.append(scan)
            with open(segment.path, "rb") as handle:
                yield from self._records(segment, entries, handle.fileno())

    def _records(self, segment: Segment, entries: list[DLedgerEntry], fd: int
                 ) -> Iterator[tuple[DLedgerEntry, CommitLogRecord]]:
        for entry in entries:
            position = entry.body_offset - segment.start
            body = os.pread(fd, entry.body_size, position)
            try:
                record = decode_record(body, segment_start=segment.start, position=position,
                                       path=str(segment.path), verify_crc=self.verify_crc)
            except StoreError as error:
                self.bad_bodies.append(BadBody(entry, str(segment.path), str(error)))
                continue
            yield entry, record


def scan_dledger(data_dir: str | Path, *, verify_crc: bool = True) -> DLedgerScan:
    """Every entry's record of a DLedger data directory (``dledger-<id>/data``)."""
    return DLedgerScan(Path(data_dir), verify_crc)
