"""Column batches of a DLedger data file: the commitlog records inside its entries.

The same batches (``COMMITLOG_SCHEMA``) and the same scan result as a commitlog segment's
:func:`rmqlib.commitlog.arrow.scan_segment_arrow`, so everything downstream of the
commitlog (the load, the checks, ``rmq verify``) reads a DLedger broker unchanged.

How: the entry walk (:func:`rmqlib.dledger.entries.scan_data_file`) frames the entries of
a byte range; their bodies are gathered window by window and handed to the commitlog
decoder's vectorised validation (:func:`rmqlib.commitlog.walk.validate_run`) and column
builder (:func:`rmqlib.commitlog.arrow.run_to_batch`) as a run of records at the bodies'
positions. A body's PHYSICALOFFSET is its own file offset (entry POS + 48), which is what
that validation checks, so a record is accepted here exactly when it would be accepted in
a commitlog file at that offset, and it must fill its entry's body exactly.

Accounting: an entry whose body is a valid record is ``decoded`` (its 48-byte header and
the record), one whose body is not is ``unreadable`` (``corrupt: ...``; ``torn tail: ...``
for the last entry of the written data, a copy taken mid-append), never dropped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from rmqlib.commitlog import layout as CL
from rmqlib.commitlog.arrow import run_to_batch
from rmqlib.commitlog.walk import (
    DEFAULT_MAX_RUN,
    DEFAULT_WINDOW_SIZE,
    Gap,
    GapKind,
    Run,
    RunFields,
    ScanResult,
    SegmentFile,
    Window,
    validate_run,
)
from rmqlib.dledger import layout as L
from rmqlib.dledger.entries import DataFileScan, DLedgerEntry, scan_data_file

BAD_BODY_REASON = ("DLedger entry {index} (file position {position}, {size} bytes): its body "
                   "is no valid commitlog record filling it")


class DLedgerArrowScan:
    """RecordBatches of the records inside the entries starting in [start, end) of one
    DLedger data file; iterate once, then read :attr:`result` (a commitlog ScanResult:
    its account, BLANK, gaps, logical end and CRC failures, in file positions)."""

    def __init__(self, path: str | Path, start: int = 0, end: int | None = None, *,
                 verify_crc: bool = True, batch_size: int = DEFAULT_MAX_RUN,
                 window_size: int = DEFAULT_WINDOW_SIZE) -> None:
        self.path = str(path)
        self.start, self.end = start, end
        self.verify_crc = verify_crc
        self.batch_size = batch_size
        self.window_size = window_size
        self._result: ScanResult | None = None
        self._started = False
        self.entries: list[DLedgerEntry] = []  # every entry the range owns, after iterating

    @property
    def result(self) -> ScanResult:
        if self._result is None:
            raise RuntimeError("iterate the scan to its end before reading its result")
        return self._result

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._started:
            raise RuntimeError("a DLedgerArrowScan can be iterated only once")
        self._started = True
        return self._scan()

    def _scan(self) -> Iterator[pa.RecordBatch]:
        entries, walk = scan_data_file(self.path, self.start, self.end)
        self.entries = entries
        result = _result_of(walk, self.start, self.end)
        body_failures: list[int] = []
        property_failures: list[int] = []
        with SegmentFile(self.path, walk.file_start) as seg:
            for group in _groups(entries, self.batch_size, self.window_size):
                window = _window(seg, group)
                fields, bad = _valid_bodies(window, group, seg.start)
                for entry in bad:
                    _quarantine(result, entry, walk)
                if fields is None:
                    continue
                batch, bad_body, bad_props = run_to_batch(Run(window, fields), seg.path,
                                                          seg.start, self.verify_crc)
                body_failures += bad_body
                property_failures += bad_props
                result.records += batch.num_rows
                yield batch
        result.body_crc_failures = body_failures
        result.property_crc_failures = property_failures
        result.account.check()
        self._result = result


def scan_dledger_arrow(path: str | Path, start: int = 0, end: int | None = None, *,
                       verify_crc: bool = True, batch_size: int = DEFAULT_MAX_RUN,
                       window_size: int = DEFAULT_WINDOW_SIZE) -> DLedgerArrowScan:
    """Batches (COMMITLOG_SCHEMA) of the records in the entries starting in [start, end)
    of one DLedger data file."""
    return DLedgerArrowScan(path, start, end, verify_crc=verify_crc, batch_size=batch_size,
                            window_size=window_size)


def _result_of(walk: DataFileScan, start: int, end: int | None) -> ScanResult:
    """The entry walk's findings in the commitlog scan's terms."""
    gaps = [Gap(region.offset, region.length,
                GapKind.TORN_TAIL if region.reason.startswith("torn tail") else GapKind.CORRUPT,
                region.reason) for region in walk.account.unreadable]
    if walk.account.zero_tail:
        gaps.append(Gap(walk.file_size - walk.account.zero_tail, walk.account.zero_tail,
                        GapKind.ZERO_TAIL, "unwritten zeros up to the end of file"))
    return ScanResult(
        walk.path, walk.file_start, walk.file_size, start,
        walk.file_size if end is None else min(end, walk.file_size),
        walk.span_start, walk.span_end, walk.account,
        blanks=[] if walk.blank_at is None else [walk.blank_at],
        gaps=sorted(gaps, key=lambda gap: gap.offset),
        # A file ending in a BLANK has its written data end after the BLANK's head.
        logical_end=(walk.blank_at + L.MIN_BLANK_LENGTH if walk.blank_at is not None
                     else walk.logical_end))


def _groups(entries: list[DLedgerEntry], batch_size: int,
            window_size: int) -> Iterator[list[DLedgerEntry]]:
    """Consecutive entries whose bytes fit one window (an oversized entry alone)."""
    group: list[DLedgerEntry] = []
    for entry in entries:
        if group and (len(group) >= batch_size or entry.end - group[0].pos > window_size):
            yield group
            group = []
        group.append(entry)
    if group:
        yield group


def _window(seg: SegmentFile, group: list[DLedgerEntry]) -> Window:
    base = group[0].pos - seg.start
    return Window.load(seg, base, group[-1].end - group[0].pos)


def _valid_bodies(window: Window, group: list[DLedgerEntry], seg_start: int
                  ) -> tuple[RunFields | None, list[DLedgerEntry]]:
    """The run fields of the bodies that hold a valid record filling them, and the
    entries whose bodies do not."""
    rel = np.array([e.body_offset - seg_start - window.base for e in group], dtype=np.int64)
    body_size = np.array([e.body_size for e in group], dtype=np.int64)
    room = body_size >= CL.MIN_RECORD_LENGTH
    fits = np.zeros(len(group), dtype=bool)
    fits[room] = window.i32[rel[room]] == body_size[room]  # TOTALSIZE fills the body
    keep = np.flatnonzero(fits)
    while True:
        fields = validate_run(window, rel[keep], seg_start)
        if len(fields) == len(keep):
            break
        fits[keep[len(fields)]] = False  # the first one validation rejects: bad body
        keep = np.flatnonzero(fits)
    bad = [entry for entry, ok in zip(group, fits.tolist(), strict=True) if not ok]
    return (fields if len(fields) else None), bad


def _quarantine(result: ScanResult, entry: DLedgerEntry, walk: DataFileScan) -> None:
    """Move an entry whose body is no record from decoded to unreadable."""
    position = entry.pos - walk.file_start
    torn = walk.logical_end is not None and position + entry.size == walk.logical_end \
        and walk.blank_at is None
    kind = GapKind.TORN_TAIL if torn else GapKind.CORRUPT
    reason = BAD_BODY_REASON.format(index=entry.index, position=position, size=entry.size)
    if torn:
        reason += "; the last entry of the written data (a copy taken mid-append?)"
    result.account.decoded -= entry.size
    result.account.add_unreadable(position, entry.size, f"{kind.value}: {reason}")
    result.gaps.append(Gap(position, entry.size, kind, reason))
    result.gaps.sort(key=lambda gap: gap.offset)
