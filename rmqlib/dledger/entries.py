"""DLedger data files: where entries start, and what every byte is.

One walk per data file, like the commitlog's (:mod:`rmqlib.commitlog.walk`), with the rules
of :mod:`rmqlib.dledger.layout`. An ENTRY frame at file position p is valid iff MAGIC is 1,
48 <= SIZE <= bytes left, POS == file start + p and BODY SIZE == SIZE - 48. A BLANK is
valid iff MAGIC is -1 and its length field equals the bytes left in the file. From a valid
frame the walk moves on by SIZE (a BLANK ends the file); at an invalid position it looks
for the next valid frame: none but zeros after it is the end of the written data (zero
tail; non-zero bytes before the zeros are a torn tail), a valid frame after it makes the
gap corrupt. Every byte of the file lands in its FileAccount: entry bytes are ``decoded``,
the BLANK and its padding ``blank``, unwritten zeros ``zero_tail``, gaps ``unreadable``.

Byte ranges (splits), as for the commitlog (:mod:`rmqlib.commitlog.walk`): with
resync(x) = 0 for x = 0, else the first position >= x where an entry or the BLANK is framed
(and that lies in no BLANK's filler), a scan of [begin, end) owns the bytes
[resync(begin), resync(end)): every entry starting there and every gap starting there (a
gap may run past ``end`` to the next frame, the BLANK to the file end: whatever its filler
holds, the broker's reader moves on to the next file at a BLANK, so it is all ``blank``). The
scans of adjacent ranges together yield a whole-file scan's entries and their accounts add
up to the file.

The file is read through windows (a few MiB plus one entry), never whole. Inside a window
the walk hops SIZE in a tight loop and checks the rest of the predicate vectorised
(``_run``); the scalar path takes over at anything that loop stops at (a BLANK, a gap, an
entry crossing the window), so both paths follow the one predicate.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rmqlib.common.accounting import FileAccount
from rmqlib.common.segments import parse_segment_name
from rmqlib.dledger import layout as L

WINDOW = 4 << 20
MAGIC_BYTES = L.ENTRY_MAGIC.to_bytes(4, "big", signed=True)
BLANK_BYTES = L.BLANK_MAGIC.to_bytes(4, "big", signed=True)
_unpack_header = L.ENTRY_HEADER.unpack_from
_MAGIC_SIZE = struct.Struct(">ii")
# The entry header as numpy reads it (DLedgerEntryCoder.encode's order).
_HEADER_DTYPE = np.dtype([("magic", ">i4"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8"),
                          ("pos", ">i8"), ("channel", ">i4"), ("chain_crc", ">i4"),
                          ("body_crc", ">i4"), ("body_size", ">i4")])
assert _HEADER_DTYPE.itemsize == L.ENTRY_HEADER_SIZE


class DLedgerEntry(NamedTuple):
    """One entry's header; its body is bytes [body_offset, pos + size) of the data log.

    A NamedTuple, not a dataclass: a data file holds millions of entries and the walk
    builds one per entry (about three times cheaper to make)."""

    pos: int          # logical offset in the data log (file start + position)
    size: int
    index: int
    term: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int

    @property
    def body_offset(self) -> int:
        """Where the body starts: the PHYSICALOFFSET of the commitlog record inside."""
        return self.pos + L.ENTRY_HEADER_SIZE

    @property
    def end(self) -> int:
        return self.pos + self.size


@dataclass
class DataFileScan:
    """What the walk of one data file (or of a byte range of it) found besides its entries.

    ``span_start``/``span_end``: the file positions this scan owns (see the module doc);
    ``account`` covers exactly those bytes.
    """

    path: str
    file_start: int
    file_size: int
    account: FileAccount
    entries: int = 0
    blank_at: int | None = None          # file position of the BLANK, if any
    logical_end: int | None = None       # file position where written data ends
    corrupt: list[tuple[int, int, str]] = field(default_factory=list)  # position, length, why
    span_start: int = 0
    span_end: int = 0


class _File:
    """Windowed positional reads of one file."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._fd = os.open(self.path, os.O_RDONLY)
        self.size = os.fstat(self._fd).st_size
        self._base, self._data = 0, b""

    def read(self, pos: int, length: int) -> bytes:
        data, at = self.locate(pos, length)
        return data[at:at + length]

    def locate(self, pos: int, length: int) -> tuple[bytes, int]:
        """The window holding bytes [pos, pos + length) and where they start in it (no
        copy: the walk unpacks headers in place)."""
        if not (self._base <= pos and pos + length <= self._base + len(self._data)):
            self._base = pos
            self._data = os.pread(self._fd, max(WINDOW, length), pos)
        return self._data, pos - self._base

    def close(self) -> None:
        os.close(self._fd)


def scan_data_file(path: str | Path, begin: int = 0, end: int | None = None
                   ) -> tuple[list[DLedgerEntry], DataFileScan]:
    """Every valid entry starting in the bytes [begin, end) of one data file owns (the
    whole file by default), in order, and the byte account of what it owns."""
    handle = _File(path)
    try:
        start = parse_segment_name(path)
        end = handle.size if end is None else min(end, handle.size)
        first = 0 if begin <= 0 else _next_frame(handle, start, begin)
        if first is not None and first > 0 and _blank_before(handle, first) is not None:
            first = None  # inside the BLANK's filler: the scan holding the BLANK owns it
        span_start = end if first is None or first >= end else first
        scan = DataFileScan(handle.path, start, handle.size, FileAccount(handle.path, 0),
                            span_start=span_start, span_end=span_start)
        entries = list(_walk(handle, start, scan, end)) if span_start < end else []
    finally:
        handle.close()
    scan.account.size = scan.span_end - scan.span_start
    scan.account.check()
    return entries, scan


def _walk(f: _File, start: int, scan: DataFileScan, end: int) -> Iterator[DLedgerEntry]:
    """Entries from ``scan.span_start`` until a frame at or past ``end``; sets span_end."""
    position, size = scan.span_start, f.size
    while position < size:
        run = _run(f, start, position, end)
        if run:
            scan.entries += len(run)
            scan.account.decoded += run[-1].end - run[0].pos
            position = run[-1].end - start
            yield from run
            continue
        entry = entry_at(f, start, position)
        if entry is not None:
            if position >= end:
                break
            scan.entries += 1
            scan.account.decoded += entry.size
            position += entry.size
            yield entry
            continue
        if _is_blank(f, position):
            if position >= end:
                break
            scan.blank_at = position
            scan.logical_end = position
            scan.account.blank += size - position
            position = size
            break
        following = _next_frame(f, start, position + 1)
        if following is None:
            _tail(f, position, scan)
            position = size
            break
        reason = "no valid DLedger entry (magic, size, own position); next entry at file " \
                 f"position {following}"
        scan.corrupt.append((position, following - position, reason))
        scan.account.add_unreadable(position, following - position, f"corrupt: {reason}")
        position = following
    else:
        scan.logical_end = size
    scan.span_end = position


def _run(f: _File, start: int, position: int, end: int) -> list[DLedgerEntry]:
    """The valid entries chained from ``position`` inside the window that holds it (none
    when ``position`` frames none): SIZE hops in a tight loop, then the rest of the
    predicate (own POS, BODY SIZE) checked vectorised; the walk's fast path. Entries that
    start at or past ``end``, or do not fit the window, are left to the scalar path."""
    left = f.size - position
    if left < L.ENTRY_HEADER_SIZE or position >= end:
        return []
    data, at = f.locate(position, L.ENTRY_HEADER_SIZE)
    limit = min(len(data), at + left)
    stop = at + (end - position)
    rels = _chain(data, at, stop, limit)
    if not rels:
        return []
    headers = _header_rows(data)[np.asarray(rels)].view(_HEADER_DTYPE)
    base = start + position - at  # data[0]'s offset in the data log
    ok = (headers["pos"] == base + np.asarray(rels)) & \
        (headers["body_size"] == headers["size"] - L.ENTRY_HEADER_SIZE)
    n = len(ok) if ok.all() else int(np.argmin(ok))
    columns = [headers[name][:n].tolist() for name in DLedgerEntry._fields]
    return list(map(DLedgerEntry._make, zip(*columns, strict=True)))  # no per-entry lambda


def _chain(data: bytes, rel: int, stop: int, limit: int) -> list[int]:
    """Positions in ``data`` of entries hopped by SIZE from ``rel`` while each has MAGIC 1,
    a SIZE of at least a header, fits before ``limit`` and starts before ``stop``."""
    out: list[int] = []
    append, unpack = out.append, _MAGIC_SIZE.unpack_from
    header, magic_1 = L.ENTRY_HEADER_SIZE, L.ENTRY_MAGIC
    while rel < stop and rel + header <= limit:
        magic, size = unpack(data, rel)
        if magic != magic_1 or size < header or rel + size > limit:
            break
        append(rel)
        rel += size
    return out


def _header_rows(data: bytes) -> np.ndarray:
    """Row i is the 48 bytes starting at byte i of ``data`` (for gathering headers)."""
    count = max(len(data) - L.ENTRY_HEADER_SIZE + 1, 0)
    return np.ndarray((count,), dtype=f"V{L.ENTRY_HEADER_SIZE}", buffer=data, strides=(1,))


def entry_at(f: _File, start: int, position: int) -> DLedgerEntry | None:
    """The entry framed at ``position``, or None when none is (see the module doc)."""
    left = f.size - position
    if left < L.ENTRY_HEADER_SIZE:
        return None
    data, at = f.locate(position, L.ENTRY_HEADER_SIZE)
    magic, size, index, term, pos, channel, chain, body_crc, body_size = \
        _unpack_header(data, at)
    if (magic != L.ENTRY_MAGIC or not L.ENTRY_HEADER_SIZE <= size <= left
            or pos != start + position or body_size != size - L.ENTRY_HEADER_SIZE):
        return None
    return DLedgerEntry(pos, size, index, term, channel, chain, body_crc, body_size)


def _is_blank(f: _File, position: int) -> bool:
    left = f.size - position
    if left < L.MIN_BLANK_LENGTH:
        return False
    magic, length = L.BLANK_HEAD.unpack(f.read(position, L.BLANK_HEAD.size))
    return magic == L.BLANK_MAGIC and length == left


# How far before the file end a BLANK can start: below the longest entry (a record of at
# most maxMessageSize, 4 MiB by default, in a 48-byte header) plus 8 bytes; twice that.
BLANK_LOOKBACK = 8 * 1024 * 1024 + 1024


def _blank_before(f: _File, position: int) -> int | None:
    """A valid BLANK starting before ``position`` (which then lies in its filler)."""
    begin = max(0, f.size - BLANK_LOOKBACK)
    if position <= begin:
        return None
    data = f.read(begin, position - begin)
    at = data.find(BLANK_BYTES)
    while at >= 0:
        if _is_blank(f, begin + at):
            return begin + at
        at = data.find(BLANK_BYTES, at + 1)
    return None


def _next_frame(f: _File, start: int, begin: int) -> int | None:
    """The next file position >= begin where an entry or the BLANK is framed."""
    position = begin
    while position < f.size:
        chunk = f.read(position, min(WINDOW, f.size - position))
        hits = sorted(position + at for magic in (MAGIC_BYTES, BLANK_BYTES)
                      for at in _finds(chunk, magic))
        for hit in hits:
            if entry_at(f, start, hit) is not None or _is_blank(f, hit):
                return hit
        position += max(len(chunk) - 3, 1)
    return None


def _finds(data: bytes, pattern: bytes) -> Iterator[int]:
    at = data.find(pattern)
    while at >= 0:
        yield at
        at = data.find(pattern, at + 1)


def _tail(f: _File, position: int, scan: DataFileScan) -> None:
    """No entry follows ``position``: zeros are the unwritten tail, anything before them
    a torn entry at the write position."""
    scan.logical_end = position
    end = f.size
    while end > position:
        block = f.read(max(position, end - WINDOW), end - max(position, end - WINDOW))
        stripped = block.rstrip(b"\x00")
        if stripped:
            end = max(position, end - WINDOW) + len(stripped)
            break
        end = max(position, end - WINDOW)
    if end > position:
        scan.account.add_unreadable(position, end - position,
                                    "torn tail: bytes after the last entry that frame none")
    scan.account.zero_tail += f.size - end


def read_body(path: str | Path, entry: DLedgerEntry, file_start: int) -> bytes:
    """The body bytes of ``entry`` from its data file."""
    with open(path, "rb") as handle:
        handle.seek(entry.body_offset - file_start)
        return handle.read(entry.body_size)
