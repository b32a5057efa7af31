"""Framing of one commitlog segment: where records start, and what every byte is.

This is the engine under :mod:`rmqlib.commitlog.records` (one record at a time) and
:mod:`rmqlib.commitlog.arrow` (column batches). It never decodes field *values*; it finds
valid record frames, BLANKs and gaps, and accounts for every byte of a byte range.

Validity (one predicate, used for sequential scanning *and* resynchronisation):
  a MESSAGE frame at file position p is valid iff MAGICCODE (i32@p+4) is v1 or v2,
  91 <= TOTALSIZE <= bytes left, PHYSICALOFFSET (i64@p+28) == segment start + p, and
  TOTALSIZE equals the length rule computed from SYSFLAG, BODYLENGTH, TOPICLENGTH and
  PROPERTIESLENGTH (each length read inside the record). A BLANK frame is valid iff its
  magic is BLANK and its length field equals the bytes left in the file. CRCs are *not*
  part of framing (a bad CRC is reported on the record), so ``verify_crc`` never moves a
  boundary. Random bytes pass the MESSAGE rule with odds of about 2**-96 (magic and the
  self-referencing offset); only a body that embeds a forged record header whose
  PHYSICALOFFSET equals its own position could fool it.

Walk and gaps: from a valid MESSAGE frame the walk advances by TOTALSIZE; a valid BLANK
ends the file (its whole length, to the file end, is what the broker skips). At an invalid
position q it searches forward for the next valid position r (or the file end) and
reports the *gap* [q, r):
  * r < file end: ``CORRUPT`` (valid data follows, so this is damage, not the end),
  * r = file end: the logical end of written data. Trailing zeros are ``ZERO_TAIL``; the
    bytes before them (a torn record at the write position, or stale bytes) are
    ``TORN_TAIL``. Whether a torn tail in a *non-last* file is corruption is decided by
    the store-level scan (:func:`rmqlib.commitlog.records.scan_store`).
ZERO_TAIL counts as ``zero_tail`` in the FileAccount, a BLANK's whole length (its 8-byte
header and the filler up to the file end) as ``blank``, CORRUPT and TORN_TAIL as
``unreadable`` regions whose reason starts with the kind.
Whatever the BLANK's filler holds (normally zeros; stale bytes when recovery truncated
without zeroing, spec §2.2) is the broker's to skip: ``CommitLog.checkMessageAndReturnSize``
returns size 0 for a BLANK and every reader (recovery, the reput service) goes on with the
next file. So nothing in it is decoded, torn or corrupt; record frames found in it are only
counted, in ``records_after_blank`` (stale records, never read). Valid records past a
torn/zero region are stale data too, preceded by a CORRUPT gap, so the store-level scan can
report them.

Byte ranges (splits): define resync(x) = 0 for x = 0, else the first valid position >= x.
A scan of [start, end) owns the bytes [resync(start), resync(end)): every record that
starts inside the range (even if it ends after ``end``) and every gap that starts inside
what it owns (a gap may run past ``end`` up to the next valid position, a BLANK to the
file end). Bytes before resync(start) belong to the previous range. A position inside a
BLANK's filler is no resync point: a range whose first valid position lies within
``BLANK_LOOKBACK`` of the file end looks back for a BLANK before it (a BLANK is shorter than
the record that did not fit plus 8, and records are at most ``maxMessageSize``, 4 MiB by
default, plus their header), and owns nothing when one is there. So the scans of adjacent ranges
[0, a), [a, b), ... [z, size) yield exactly the records of a whole-file scan and their
accounts add up to the file, unless a body contains a forged record (see above). A range
with no valid position inside owns nothing (empty span).

Memory: the file is read through windows of ``window_size`` bytes (plus one record when
a record is larger), never mapped or read whole.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Generic, TypeVar

import numpy as np

from rmqlib.commitlog import layout as L
from rmqlib.common.accounting import FileAccount
from rmqlib.common.bytesource import ByteSource, FileTarget, LocalFile, source_name
from rmqlib.common.segments import parse_segment_name
from rmqlib.errors import NotAStoreFileError

DEFAULT_WINDOW_SIZE = 8 * 1024 * 1024
DEFAULT_MAX_RUN = 16384
# A window stops this far past the range end: the record that crosses the end is usually
# inside it; a longer one gets a window of its own.
RANGE_END_MARGIN = 64 * 1024
SEARCH_CHUNK = 4 * 1024 * 1024
# How far before the file end a BLANK can start: below the longest record plus 8 bytes
# (spec §2.2); twice the default maxMessageSize (4 MiB), for a raised limit.
BLANK_LOOKBACK = 8 * 1024 * 1024 + L.MAX_RECORD_OVERHEAD + L.BLANK_RECORD_LENGTH
WINDOW_PADDING = 16
# Bytes a scalar check reads at once: the whole fixed header in the widest layout.
_MAX_FIXED_HEADER = L.body_length_pos(L.IPV6_HOST_LENGTH, L.IPV6_HOST_LENGTH) + 4

# The fixed part of a record whose born and store hosts are both IPv4, up to BODYLENGTH:
# gathered once per record (one 88-byte copy) instead of field by field.
HEADER_V4 = np.dtype([
    ("total_size", ">i4"), ("magic", ">i4"), ("body_crc", ">i4"), ("queue_id", ">i4"),
    ("flag", ">i4"), ("queue_offset", ">i8"), ("physical_offset", ">i8"),
    ("sysflag", ">i4"), ("born_timestamp", ">i8"), ("born_ip", ">u4"), ("born_port", ">i4"),
    ("store_timestamp", ">i8"), ("store_ip", ">u4"), ("store_port", ">i4"),
    ("reconsume_times", ">i4"), ("prepared_transaction_offset", ">i8"),
    ("body_length", ">i4"),
])
assert HEADER_V4.itemsize == L.IPV4_BODY_POS
_V6_FLAGS = L.BORNHOST_V6_FLAG | L.STOREHOSTADDRESS_V6_FLAG

_II = struct.Struct(">ii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I8 = struct.Struct(">b")
_I64 = struct.Struct(">q")


class SegmentFile:
    """Random access to one commitlog file (a path or a
    :class:`~rmqlib.common.bytesource.ByteSource`), with the segment start offset from its
    name."""

    first_readable = 0  # the first file position read() can serve

    def __init__(self, path: FileTarget, base_offset: int | None = None) -> None:
        self.path = source_name(path)
        self.start = parse_segment_name(self.path) if base_offset is None else base_offset
        self._owned = not isinstance(path, ByteSource)
        self._source: ByteSource | None = LocalFile(path, "commitlog segment") \
            if self._owned else path  # type: ignore[assignment]
        self.size = self._source.size

    def read(self, pos: int, length: int) -> bytes:
        """Bytes [pos, pos + length) clipped to the file; raises if the file shrank."""
        assert self._source is not None
        return self._source.read_at(pos, length)

    def close(self) -> None:
        if self._source is not None and self._owned:
            self._source.close()
        self._source = None

    def __enter__(self) -> SegmentFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MemorySegment(SegmentFile):
    """The same interface over bytes already in memory (single records, tests)."""

    def __init__(self, data: bytes, start: int = 0, path: str = "<memory>",
                 data_pos: int = 0) -> None:
        """``data`` holds the file bytes from position ``data_pos`` to the file end."""
        self.path = path
        self.start = start
        self.size = data_pos + len(data)
        self._data = bytes(data)
        self._data_pos = self.first_readable = data_pos
        self._source = None

    def read(self, pos: int, length: int) -> bytes:
        rel = pos - self._data_pos
        if rel < 0:
            raise ValueError("MemorySegment holds no bytes before its data_pos")
        return self._data[rel : rel + max(0, length)]


class Window:
    """A slice [base, end) of a segment file held in memory, with strided views for gathers.

    ``data`` runs WINDOW_PADDING bytes past ``end`` (file bytes, or zeros at the file
    end) so fixed-width gathers near the end never need bounds checks.
    """

    def __init__(self, base: int, data: bytes, end: int) -> None:
        self.base = base
        self.data = data
        self.end = end
        self.u8 = np.frombuffer(data, dtype=np.uint8)
        self.i8 = self.u8.view(np.int8)
        self.i16 = strided_view(data, ">i2")
        self.i32 = strided_view(data, ">i4")
        self.i64 = strided_view(data, ">i8")
        # Gathered as opaque 88-byte rows (a plain memcpy each), viewed as HEADER_V4 after:
        # fancy indexing a structured dtype directly copies field by field, 6x slower.
        self.header_bytes = strided_view(data, f"V{HEADER_V4.itemsize}")

    @classmethod
    def load(cls, seg: SegmentFile, pos: int, length: int) -> Window:
        length = max(0, min(length, seg.size - pos))
        data = seg.read(pos, length + WINDOW_PADDING)
        if len(data) < length + WINDOW_PADDING:
            data += bytes(length + WINDOW_PADDING - len(data))
        return cls(pos, data, pos + length)


def strided_view(data: bytes | np.ndarray, dtype: str | np.dtype) -> np.ndarray:
    """View of ``data`` where element i is the value starting at byte i (for gathers)."""
    width = np.dtype(dtype).itemsize
    count = max(len(data) - width + 1, 0)
    if count == 0:
        return np.zeros(0, dtype=dtype)
    return np.ndarray((count,), dtype=dtype, buffer=data, strides=(1,))


class FrameKind(Enum):
    MESSAGE = "message"
    BLANK = "blank"
    INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class Frame:
    """What starts at one file position: a valid record, a BLANK, or nothing valid (why)."""

    kind: FrameKind
    total: int = 0
    reason: str = ""


def _invalid(reason: str) -> Frame:
    return Frame(FrameKind.INVALID, 0, reason)


def classify_at(seg: SegmentFile, pos: int) -> Frame:
    """Apply the validity predicate at ``pos`` with scalar reads (the slow path)."""
    left = seg.size - pos
    if left < L.BLANK_RECORD_LENGTH:
        return _invalid(f"only {left} bytes left, a record needs at least 8")
    head = seg.read(pos, min(left, _MAX_FIXED_HEADER))
    total, magic = _II.unpack_from(head)
    if magic == L.BLANK_MAGIC_CODE:
        if total == left:
            return Frame(FrameKind.BLANK, L.BLANK_RECORD_LENGTH)
        return _invalid(f"BLANK length field {total} != {left} bytes left in file")
    if magic not in L.MESSAGE_MAGIC_CODES:
        if head[:8] == bytes(8):
            return _invalid("zero bytes where a record should start")
        return _invalid(f"no record magic (found 0x{magic & 0xFFFFFFFF:08X})")
    if total < L.MIN_RECORD_LENGTH:
        return _invalid(f"TOTALSIZE {total} below the minimum {L.MIN_RECORD_LENGTH}")
    if total > left:
        return _invalid(f"TOTALSIZE {total} runs past the end of file ({left} bytes left)")
    (physical,) = _I64.unpack_from(head, L.PHYSICALOFFSET_POS)
    if physical != seg.start + pos:
        return _invalid(f"PHYSICALOFFSET {physical} != own offset {seg.start + pos} (a "
                        f"segment named {physical - pos} would match: misnamed file?)")
    (sysflag,) = _I32.unpack_from(head, L.SYSFLAG_POS)
    born, store = L.host_lengths(sysflag)
    k = L.topic_length_size(magic)
    if total < L.min_record_length(born, store, k):
        return _invalid(f"TOTALSIZE {total} too small for the layout SYSFLAG {sysflag:#x} "
                        "selects")
    (body_length,) = _I32.unpack_from(head, L.body_length_pos(born, store))
    topic_len_pos = L.body_length_pos(born, store) + 4 + max(body_length, 0)
    if topic_len_pos + k + 2 > total:
        return _invalid(f"BODYLENGTH {body_length} leaves no room in TOTALSIZE {total}")
    raw = seg.read(pos + topic_len_pos, k)
    (topic_length,) = (_I16 if k == 2 else _I8).unpack(raw)
    if topic_length < 0:
        return _invalid(f"negative TOPICLENGTH {topic_length}")
    props_len_pos = topic_len_pos + k + topic_length
    if props_len_pos + 2 > total:
        return _invalid(f"TOPICLENGTH {topic_length} runs past TOTALSIZE {total}")
    (props_length,) = _I16.unpack(seg.read(pos + props_len_pos, 2))
    expected = L.expected_total_size(born, store, k, body_length, topic_length, props_length)
    if expected != total:
        return _invalid(f"length rule: TOTALSIZE {total} != {expected} (body {body_length}, "
                        f"topic {topic_length}, properties {props_length})")
    return Frame(FrameKind.MESSAGE, total)


@dataclass
class RunFields:
    """Framing fields of consecutive valid records in one window (numpy int64 arrays).

    Positions (``rel``, ``body_pos``, ...) are relative to the window start.
    """

    rel: np.ndarray
    total: np.ndarray
    magic: np.ndarray
    sysflag: np.ndarray
    born_len: np.ndarray
    store_len: np.ndarray
    topic_len_size: np.ndarray
    body_length: np.ndarray  # as stored (may be negative, then no body)
    body_pos: np.ndarray
    body_size: np.ndarray
    topic_pos: np.ndarray
    topic_size: np.ndarray
    props_pos: np.ndarray
    props_length: np.ndarray  # as stored (may be negative, then no properties)
    props_size: np.ndarray
    header: np.ndarray  # HEADER_V4 rows; fields past BORNHOST valid only if all_ipv4

    @property
    def all_ipv4(self) -> bool:
        return not (self.sysflag & _V6_FLAGS).any()

    def __len__(self) -> int:
        return len(self.rel)

    def head(self, n: int) -> RunFields:
        return RunFields(**{name: getattr(self, name)[:n] for name in _RUN_FIELD_NAMES})


_RUN_FIELD_NAMES = tuple(RunFields.__dataclass_fields__)


def _ok_prefix(ok: np.ndarray) -> int:
    return len(ok) if ok.all() else int(np.argmin(ok))


def validate_run(win: Window, rel: np.ndarray, seg_start: int) -> RunFields:
    """The longest prefix of chained positions that pass the validity predicate.

    The chain walk already checked, per position, a message magic, TOTALSIZE >= 91 and
    that the record lies inside the window; this checks the rest, vectorised.
    """
    rel = rel.astype(np.int64, copy=False)
    header = win.header_bytes[rel].view(HEADER_V4)
    total = header["total_size"].astype(np.int64)
    magic = header["magic"].astype(np.int64)
    sysflag = header["sysflag"].astype(np.int64)
    v6 = sysflag & _V6_FLAGS
    if v6.any():
        born = np.where(v6 & L.BORNHOST_V6_FLAG, L.IPV6_HOST_LENGTH, L.IPV4_HOST_LENGTH)
        store = np.where(v6 & L.STOREHOSTADDRESS_V6_FLAG, L.IPV6_HOST_LENGTH,
                         L.IPV4_HOST_LENGTH)
    else:  # the common case: every host IPv4
        born = store = np.broadcast_to(np.int64(L.IPV4_HOST_LENGTH), rel.shape)
    k = np.where(magic == L.MESSAGE_MAGIC_CODE_V2, 2, 1)
    fixed = L.LENGTH_RULE_CONSTANT + born + store + k
    n = _ok_prefix((header["physical_offset"] == seg_start + win.base + rel)
                   & ((magic == L.MESSAGE_MAGIC_CODE_V1) | (magic == L.MESSAGE_MAGIC_CODE_V2))
                   & (total >= fixed))
    rel, header, total, magic, sysflag, v6, born, store, k, fixed = (
        a[:n] for a in (rel, header, total, magic, sysflag, v6, born, store, k, fixed))

    body_length = header["body_length"].astype(np.int64)
    odd = np.flatnonzero(v6)
    if len(odd):
        body_length[odd] = win.i32[rel[odd] + L.BORNHOST_POS + 20 + born[odd] + store[odd]]
    body_size = np.maximum(body_length, 0)
    body_pos = rel + L.BORNHOST_POS + 24 + born + store
    topic_len_pos = body_pos + body_size
    end = rel + total
    n = _ok_prefix(topic_len_pos + k + 2 <= end)
    (rel, header, total, magic, sysflag, born, store, k, fixed, body_length, body_size,
     body_pos, topic_len_pos, end) = (
        a[:n] for a in (rel, header, total, magic, sysflag, born, store, k, fixed, body_length,
                        body_size, body_pos, topic_len_pos, end))

    if (k == 1).all():
        topic_size = win.i8[topic_len_pos].astype(np.int64)
    else:
        topic_size = np.where(k == 2, win.i16[topic_len_pos], win.i8[topic_len_pos]).astype(
            np.int64)
    props_len_pos = topic_len_pos + k + topic_size
    n = _ok_prefix((topic_size >= 0) & (props_len_pos + 2 <= end))
    (rel, header, total, magic, sysflag, born, store, k, fixed, body_length, body_size,
     body_pos, topic_len_pos, topic_size, props_len_pos) = (
        a[:n] for a in (rel, header, total, magic, sysflag, born, store, k, fixed, body_length,
                        body_size, body_pos, topic_len_pos, topic_size, props_len_pos))

    props_length = win.i16[props_len_pos].astype(np.int64)
    props_size = np.maximum(props_length, 0)
    n = _ok_prefix(fixed + body_size + topic_size + props_size == total)
    return RunFields(
        rel=rel[:n], total=total[:n], magic=magic[:n], sysflag=sysflag[:n],
        born_len=born[:n], store_len=store[:n], topic_len_size=k[:n],
        body_length=body_length[:n], body_pos=body_pos[:n], body_size=body_size[:n],
        topic_pos=(topic_len_pos + k)[:n], topic_size=topic_size[:n],
        props_pos=(props_len_pos + 2)[:n], props_length=props_length[:n],
        props_size=props_size[:n], header=header[:n],
    )


def _chain(data: bytes, rel: int, rel_stop: int, limit: int, max_n: int) -> list[int]:
    """Follow TOTALSIZE from ``rel`` while frames look like messages that fit the window.

    The hot loop of every scan: kept to one unpack and a few comparisons per record; the
    full predicate is checked afterwards, vectorised, by :func:`validate_run`.
    """
    out: list[int] = []
    append = out.append
    unpack = _II.unpack_from
    v1, v2, minimum = L.MESSAGE_MAGIC_CODE_V1, L.MESSAGE_MAGIC_CODE_V2, L.MIN_RECORD_LENGTH
    for _ in itertools.repeat(None, max_n):
        if rel >= rel_stop:
            break
        total, magic = unpack(data, rel)
        if (magic != v1 and magic != v2) or total < minimum or rel + total > limit:
            break
        append(rel)
        rel += total
    return out


def _magic_hits(data: bytes, begin: int, stop: int) -> Iterator[int]:
    """Indexes i in [begin, stop) where data[i:i+4] is a v1, v2 or BLANK magic, in order."""
    patterns = (L.MAGIC_BYTES_V1, L.MAGIC_BYTES_V2, L.MAGIC_BYTES_BLANK)
    found = [data.find(p, begin, stop + 3) for p in patterns]
    while True:
        live = [i for i in found if i >= 0]
        if not live:
            return
        hit = min(live)
        yield hit
        for index, value in enumerate(found):
            if value == hit:
                found[index] = data.find(patterns[index], hit + 1, stop + 3)


def next_valid(seg: SegmentFile, begin: int, limit: int) -> int | None:
    """First position p in [begin, limit) where :func:`classify_at` finds a valid frame."""
    limit = min(limit, seg.size - L.BLANK_RECORD_LENGTH + 1)
    pos = max(begin, 0)
    while pos < limit:
        chunk_end = min(limit, pos + SEARCH_CHUNK)
        data = seg.read(pos, chunk_end - pos + L.BLANK_RECORD_LENGTH)
        # A candidate p has its magic at p + 4.
        for hit in _magic_hits(data, L.MAGICCODE_POS, chunk_end - pos + L.MAGICCODE_POS):
            candidate = pos + hit - L.MAGICCODE_POS
            if candidate < chunk_end and classify_at(seg, candidate).kind is not \
                    FrameKind.INVALID:
                return candidate
        pos = chunk_end
    return None


def blank_before(seg: SegmentFile, pos: int) -> int | None:
    """Position of a valid BLANK that starts before ``pos`` (so ``pos`` lies in its
    filler), looked for within ``BLANK_LOOKBACK`` of the file end; None when none does."""
    begin = max(seg.first_readable, seg.size - BLANK_LOOKBACK)
    if pos <= begin:
        return None
    data = seg.read(begin, pos - begin + L.BLANK_RECORD_LENGTH)
    at = data.find(L.MAGIC_BYTES_BLANK, L.MAGICCODE_POS)
    while 0 <= at - L.MAGICCODE_POS < pos - begin:
        candidate = begin + at - L.MAGICCODE_POS
        (total,) = _I32.unpack_from(data, at - L.MAGICCODE_POS)
        if total == seg.size - candidate:
            return candidate
        at = data.find(L.MAGIC_BYTES_BLANK, at + 1)
    return None


def stale_records(seg: SegmentFile, blank: int) -> int:
    """Record frames inside the filler of the BLANK at ``blank`` (stale data the broker
    never reads: recovery truncates without zeroing); none when the filler is zeros."""
    found, pos = 0, blank + L.BLANK_RECORD_LENGTH
    while pos < seg.size and not _all_zero(seg, pos, seg.size):
        following = next_valid(seg, pos, seg.size)
        if following is None:
            break
        frame = classify_at(seg, following)
        if frame.kind is not FrameKind.MESSAGE:
            break
        found += 1
        pos = following + frame.total
    return found


def _nonzero_end(seg: SegmentFile, begin: int, end: int) -> int:
    """Position just after the last non-zero byte in [begin, end), or ``begin``."""
    pos = end
    while pos > begin:
        chunk_start = max(begin, pos - SEARCH_CHUNK)
        stripped = len(seg.read(chunk_start, pos - chunk_start).rstrip(b"\0"))
        if stripped:
            return chunk_start + stripped
        pos = chunk_start
    return begin


def _all_zero(seg: SegmentFile, begin: int, end: int) -> bool:
    return _nonzero_end(seg, begin, end) == begin


class GapKind(Enum):
    ZERO_TAIL = "zero tail"  # unwritten zeros after the last valid frame
    TORN_TAIL = "torn tail"  # non-zero bytes after the last valid frame: logical end
    CORRUPT = "corrupt"  # invalid bytes followed by valid records: damage
    BLANK = "blank"  # a BLANK frame (end-of-file filler): only in interleaved scans


@dataclass(frozen=True)
class Gap:
    """A region that holds no valid frame; ``offset`` is a position in the file."""

    offset: int
    length: int
    kind: GapKind
    reason: str


@dataclass
class ScanResult:
    """What a scan of [start, end) of one segment found, besides the records themselves.

    ``span_start``/``span_end``: the file positions this range owns (see module doc);
    ``account`` covers exactly that span. ``logical_end``: where written data ends in
    this file, if this range owns the trailing gap (None otherwise).
    """

    path: str
    segment_start: int
    file_size: int
    start: int
    end: int
    span_start: int
    span_end: int
    account: FileAccount
    records: int = 0
    blanks: list[int] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    logical_end: int | None = None
    records_after_blank: int = 0
    body_crc_failures: list[int] = field(default_factory=list)
    property_crc_failures: list[int] = field(default_factory=list)

    @property
    def corrupt(self) -> list[Gap]:
        return [gap for gap in self.gaps if gap.kind is GapKind.CORRUPT]


@dataclass
class Run:
    """Consecutive valid records inside one window."""

    window: Window
    fields: RunFields


class RangeWalk:
    """Walks the byte range [start, end) of one segment; iterate :meth:`runs`, then read
    :attr:`result`."""

    def __init__(self, seg: SegmentFile, start: int = 0, end: int | None = None, *,
                 window_size: int = DEFAULT_WINDOW_SIZE,
                 max_run: int = DEFAULT_MAX_RUN) -> None:
        size = seg.size
        end = size if end is None else end
        if start < 0 or end < start:
            raise ValueError(f"bad byte range [{start}, {end})")
        if window_size < 4096 or max_run < 1:
            raise ValueError("window_size must be >= 4096 and max_run >= 1")
        self.seg = seg
        self.start = min(start, size)
        self.end = min(end, size)
        self.window_size = window_size
        self.max_run = max_run
        self._result: ScanResult | None = None
        self.live: ScanResult | None = None

    @property
    def result(self) -> ScanResult:
        if self._result is None:
            raise RuntimeError("iterate the scan to its end before reading its result")
        return self._result

    def _new_result(self, span_start: int) -> ScanResult:
        seg = self.seg
        return ScanResult(seg.path, seg.start, seg.size, self.start, self.end, span_start,
                          span_start, FileAccount(seg.path, 0))

    def runs(self) -> Iterator[Run]:
        seg, size, end = self.seg, self.seg.size, self.end
        pos: int | None = 0 if self.start == 0 else next_valid(seg, self.start, end)
        if pos is not None and pos > 0 and blank_before(seg, pos) is not None:
            pos = None  # inside a BLANK's filler: the range holding the BLANK owns it
        if pos is None:  # no frame starts inside the range: it owns nothing
            self._result = self._new_result(end)
            return
        result = self._new_result(pos)
        self.live = result  # readable while walking: gaps and BLANKs found so far
        window: Window | None = None
        reloaded_at = -1
        while pos < size:
            if pos < end:
                if window is None or pos < window.base or pos + 8 > window.end:
                    window = self._load(pos, end)
                base = window.base
                chain = _chain(window.data, pos - base, min(end, window.end - 8) - base,
                               window.end - base, self.max_run)
                if chain:
                    fields = validate_run(window, np.asarray(chain, dtype=np.int64),
                                          seg.start)
                    if len(fields):
                        result.records += len(fields)
                        if result.blanks:
                            result.records_after_blank += len(fields)
                        result.account.decoded += int(fields.total.sum())
                        pos = base + int(fields.rel[-1] + fields.total[-1])
                        yield Run(window, fields)
                    if len(fields) == len(chain):
                        continue
            frame = classify_at(seg, pos)
            if frame.kind is FrameKind.MESSAGE and pos != reloaded_at:
                if pos >= end:
                    break
                # Valid but not in the window (too long, or crosses its end): reload.
                window = self._load(pos, end, frame.total)
                reloaded_at = pos
                continue
            if frame.kind is FrameKind.BLANK:
                if pos >= end:
                    break
                result.blanks.append(pos)
                result.account.blank += size - pos  # the broker skips it all
                result.records_after_blank += stale_records(seg, pos)
                result.logical_end = pos + L.BLANK_RECORD_LENGTH  # what the broker wrote
                pos = size
                continue
            reason = frame.reason or "record rejected by vectorised validation"
            following = next_valid(seg, pos + 1, size)
            self._gap(result, pos, size if following is None else following, reason)
            pos = size if following is None else following
        result.span_end = pos
        result.account.size = result.span_end - result.span_start
        self._result = result

    def _load(self, pos: int, end: int, need: int = 0) -> Window:
        """Window from ``pos``: up to window_size, not far past the range end, >= need."""
        length = min(self.window_size, max(end - pos + RANGE_END_MARGIN, 0))
        return Window.load(self.seg, pos, max(length, need, L.MAX_RECORD_OVERHEAD))

    def _gap(self, result: ScanResult, begin: int, end: int, reason: str) -> None:
        seg, account = self.seg, result.account
        if end < seg.size:
            if _all_zero(seg, begin, end):
                reason = "zero-filled region inside written data"
            reason = f"{reason}; next valid record at file position {end}"
            result.gaps.append(Gap(begin, end - begin, GapKind.CORRUPT, reason))
            account.add_unreadable(begin, end - begin, f"{GapKind.CORRUPT.value}: {reason}")
            return
        result.logical_end = begin
        nonzero_end = _nonzero_end(seg, begin, end)
        if nonzero_end > begin:
            reason = f"{reason}; no valid record follows in this file"
            length = nonzero_end - begin
            result.gaps.append(Gap(begin, length, GapKind.TORN_TAIL, reason))
            account.add_unreadable(begin, length, f"{GapKind.TORN_TAIL.value}: {reason}")
        if nonzero_end < end:
            length = end - nonzero_end
            result.gaps.append(Gap(nonzero_end, length, GapKind.ZERO_TAIL,
                                   "unwritten zeros up to the end of file"))
            account.zero_tail += length


Item = TypeVar("Item")


class SegmentRangeScan(Generic[Item]):
    """One pass over the records starting in [start, end) of one segment file.

    The framing (``RangeWalk``) and the bookkeeping are shared; subclasses only turn a
    run of valid records into items (``CommitLogRecord`` objects or RecordBatches) via
    :meth:`decode_run`. Iterate once, then read :attr:`result` / :attr:`account`.
    """

    def __init__(self, path: FileTarget, start: int = 0, end: int | None = None, *,
                 verify_crc: bool = True, base_offset: int | None = None,
                 window_size: int = DEFAULT_WINDOW_SIZE,
                 max_run: int = DEFAULT_MAX_RUN) -> None:
        self.target = path
        self.path = source_name(path)
        self.base_offset = parse_segment_name(self.path) if base_offset is None \
            else base_offset
        if not isinstance(path, ByteSource) and not os.path.isfile(path):
            raise NotAStoreFileError("commitlog segment is missing or not a file", path=path)
        if start < 0 or (end is not None and end < start) or max_run < 1:
            raise ValueError(f"bad byte range [{start}, {end}) or run size {max_run}")
        self.start, self.end = start, end
        self.verify_crc = verify_crc
        self.window_size = window_size
        self.max_run = max_run
        self._result: ScanResult | None = None
        self._started = False

    def decode_run(self, run: Run, seg: SegmentFile) -> tuple[list[Item], list[int], list[int]]:
        """Items for one run, plus file positions of body / property CRC failures."""
        raise NotImplementedError

    def __iter__(self) -> Iterator[Item]:
        if self._started:
            raise RuntimeError(f"a {type(self).__name__} can be iterated only once")
        self._started = True
        return self._scan()

    def interleaved(self) -> Iterator[Item | Gap]:
        """Iterate the items with every gap and BLANK (a ``Gap`` of kind ``BLANK``) at its
        place in file order: what a dump prints so that no byte goes unmentioned."""
        if self._started:
            raise RuntimeError(f"a {type(self).__name__} can be iterated only once")
        self._started = True
        return self._scan(regions=True)

    def _scan(self, regions: bool = False) -> Iterator[Item | Gap]:
        crc_failures: list[int] = []
        prop_failures: list[int] = []
        shown = [0, 0]  # gaps and blanks already yielded
        with SegmentFile(self.target, self.base_offset) as seg:
            walk = RangeWalk(seg, self.start, self.end, window_size=self.window_size,
                             max_run=self.max_run)
            for run in walk.runs():
                items, bad_body, bad_props = self.decode_run(run, seg)
                crc_failures.extend(bad_body)
                prop_failures.extend(bad_props)
                if regions and walk.live is not None:  # what the walk met before this run
                    yield from _new_regions(walk.live, shown)
                yield from items
            result = walk.result
            if regions:
                yield from _new_regions(result, shown)
        result.body_crc_failures = crc_failures
        result.property_crc_failures = prop_failures
        self._result = result

    @property
    def result(self) -> ScanResult:
        if self._result is None:
            raise RuntimeError("iterate the scan to its end before reading its result")
        return self._result

    @property
    def account(self) -> FileAccount:
        return self.result.account


def blank_reason(result: ScanResult) -> str:
    reason = "end-of-file filler (BLANK): the broker skips it to the next file"
    if result.records_after_blank:
        reason += (f"; its filler holds {result.records_after_blank} stale record frame(s), "
                   "never read")
    return reason


def _new_regions(result: ScanResult, shown: list[int]) -> list[Gap]:
    """Gaps and BLANKs of ``result`` not yielded yet, in file order; updates ``shown``."""
    gaps = result.gaps[shown[0]:]
    blanks = [Gap(at, result.file_size - at, GapKind.BLANK, blank_reason(result))
              for at in result.blanks[shown[1]:]]
    shown[0], shown[1] = len(result.gaps), len(result.blanks)
    return sorted(gaps + blanks, key=lambda gap: gap.offset)
