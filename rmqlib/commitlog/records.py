"""CommitLog records, one at a time: scan a segment (or a byte range of it), a whole
store, or look one record up by physical offset (spec §2, §8).

Framing, resynchronisation and byte accounting are done by :mod:`rmqlib.commitlog.walk`
(its docstring is the reference for the rules); this module turns valid frames into
:class:`CommitLogRecord` objects. In short:

* A record is accepted only if its magic, its PHYSICALOFFSET (= its own global offset)
  and the length rule all agree; CRCs are checked and *reported* on the record
  (``body_crc_ok``, ``property_crc_ok``), never used to drop it.
* Nothing is skipped silently and nothing raises for bad bytes inside a file: a position
  where no valid record starts opens a gap that runs to the next valid position; the gap
  is listed in ``scan.result.gaps`` and as an unreadable region of ``scan.account``
  (file, offset, length, reason). A gap followed by valid records is ``corrupt``; one
  that runs to the end of the file is the logical end (``zero tail`` / ``torn tail``).
* ``scan_segment(path, start, end)`` yields the records that *start* in [start, end); its
  account covers the bytes it owns, so adjacent ranges add up to the whole file.

Files that cannot be segments at all (missing, a directory, a name that is not a 20-digit
offset) raise :class:`~rmqlib.errors.NotAStoreFileError` before any byte is read.
"""

from __future__ import annotations

import itertools
import socket
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path

from rmqlib.commitlog import compression as codecs
from rmqlib.commitlog import layout as L
from rmqlib.commitlog import properties as props
from rmqlib.commitlog.layout import (
    BLANK_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V1,
    MESSAGE_MAGIC_CODE_V2,
    TransactionType,
)
from rmqlib.commitlog.msgid import ip_to_string, offset_msg_id_from_bytes
from rmqlib.commitlog.walk import (
    DEFAULT_WINDOW_SIZE,
    FrameKind,
    Gap,
    GapKind,
    MemorySegment,
    RangeWalk,
    Run,
    ScanResult,
    SegmentFile,
    SegmentRangeScan,
    classify_at,
)
from rmqlib.common.segments import Segment, list_segments
from rmqlib.errors import CorruptDataError, StoreError

__all__ = [
    "BLANK_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE_V1",
    "MESSAGE_MAGIC_CODE_V2",
    "CommitLogRecord",
    "Gap",
    "GapKind",
    "OffsetNotFoundError",
    "ScanResult",
    "SegmentScan",
    "StoreIssue",
    "StoreScan",
    "TransactionType",
    "decode_record",
    "naming_issues",
    "read_record_at",
    "scan_segment",
    "scan_store",
    "split_ranges",
    "tail_issues",
]


class OffsetNotFoundError(StoreError, LookupError):
    """No commitlog segment of the store holds the requested physical offset."""


@dataclass(slots=True)
class CommitLogRecord(props.PropertyAccess):
    """One MESSAGE record, every field as stored plus what can be derived from them.

    Treat it as read-only. (Not ``frozen``: a frozen dataclass's ``__init__`` sets each
    of these 27 fields through ``object.__setattr__``, which made it 8x slower to build
    and dominated the per-record scan.) ``body`` is the stored body (compressed when
    ``compression`` is set; BODYCRC covers these bytes); :meth:`decompressed_body`
    undoes the codec. Hosts are an IP string and
    a port. ``body_crc_ok`` / ``property_crc_ok`` are None when not verified (and the
    latter also when the record has no ``__CRC32#`` trailer).
    """

    path: str
    segment_start: int
    position: int  # byte position inside the segment file
    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sysflag: int
    born_timestamp: int
    born_host: str
    born_port: int
    store_timestamp: int
    store_host: str
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    body_length: int  # BODYLENGTH as stored (negative means no body)
    body: bytes
    topic: str
    raw_properties: bytes
    properties: Mapping[str, str]
    body_crc_ok: bool | None
    property_crc: int | None
    property_crc_ok: bool | None

    @property
    def version(self) -> int:
        return L.message_version(self.magic)

    @property
    def transaction_type(self) -> TransactionType:
        return TransactionType(self.sysflag & L.TRANSACTION_TYPE_MASK)

    @property
    def compression(self) -> int | None:
        """A :class:`~rmqlib.commitlog.compression.CompressionType` (or unknown int),
        None if plain."""
        return codecs.compression_type(self.sysflag)

    @property
    def multi_tags(self) -> bool:
        return bool(self.sysflag & L.MULTI_TAGS_FLAG)

    @property
    def inner_batch(self) -> bool:
        return bool(self.sysflag & L.INNER_BATCH_FLAG)

    @property
    def need_unwrap(self) -> bool:
        return bool(self.sysflag & L.NEED_UNWRAP_FLAG)

    @property
    def born_address(self) -> str:
        return _address(self.born_host, self.born_port)

    @property
    def store_address(self) -> str:
        return _address(self.store_host, self.store_port)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id_from_bytes(_ip_bytes(self.store_host), self.store_port,
                                        self.physical_offset)

    def decompressed_body(self, max_size: int = codecs.DEFAULT_MAX_DECOMPRESSED) -> bytes:
        """The body as the producer sent it; CorruptDataError if the codec fails."""
        codec = self.compression
        if codec is None:
            return self.body
        return codecs.decompress(self.body, codec, max_size=max_size, path=self.path,
                                      offset=self.position)


@lru_cache(maxsize=4096)  # few distinct hosts and ports: dumps format millions of records
def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@lru_cache(maxsize=4096)
def _ip_bytes(host: str) -> bytes:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.inet_pton(family, host)


_TRAILER_MARK = props.CRC32_TRAILER_PREFIX
_TRAILER_AT = props.CRC32_RESERVED_LEN
_TRAILER_MARK_END = props.CRC32_RESERVED_LEN - len(props.CRC32_TRAILER_PREFIX)


@cache
def _fixed_header(born: int, store: int) -> struct.Struct:
    """Struct for bytes [0, BODYLENGTH end) in one host layout."""
    return struct.Struct(f">iiiiiqqiq{born - 4}siq{store - 4}siiqi")


@lru_cache(maxsize=4096)
def _ip(raw: bytes) -> str:
    """IP text of 4 or 16 address bytes (few distinct hosts: cached)."""
    return socket.inet_ntoa(raw) if len(raw) == 4 else ip_to_string(raw)


def _decode(data: bytes, rel: int, born: int, store: int, body_pos: int, body_size: int,
            topic_pos: int, topic_size: int, props_pos: int, props_size: int, *,
            path: str, segment_start: int, position: int,
            verify_crc: bool) -> CommitLogRecord:
    """Build a record from a frame already validated by the walker."""
    (total, magic, body_crc, queue_id, flag, queue_offset, physical, sysflag, born_ts,
     born_ip, born_port, store_ts, store_ip, store_port, reconsume, prepared,
     body_length) = _fixed_header(born, store).unpack_from(data, rel)
    body = data[body_pos : body_pos + body_size]
    raw_props = data[props_pos : props_pos + props_size]
    body_crc_ok = (zlib.crc32(body) & 0x7FFFFFFF) == body_crc if verify_crc else None
    trailer = (props.find_crc_trailer(raw_props)
               if raw_props[-_TRAILER_AT:-_TRAILER_MARK_END] == _TRAILER_MARK else None)
    prop_crc = prop_ok = None
    if trailer is not None:
        prop_crc = trailer.value
        if verify_crc:
            prop_ok = props.verify_property_crc(
                memoryview(data)[rel : rel + total], trailer.value)
    return CommitLogRecord(
        path, segment_start, position, total, magic, body_crc, queue_id, flag,
        queue_offset, physical, sysflag, born_ts, _ip(born_ip), born_port, store_ts,
        _ip(store_ip), store_port, reconsume, prepared, body_length, body,
        data[topic_pos : topic_pos + topic_size].decode("utf-8", "replace"), raw_props,
        props.parse_properties(raw_props), body_crc_ok, prop_crc, prop_ok,
    )


def _decode_run(run: Run, path: str, segment_start: int,
                verify_crc: bool) -> Iterator[CommitLogRecord]:
    f, data, base = run.fields, run.window.data, run.window.base
    columns = zip(f.rel.tolist(), f.born_len.tolist(), f.store_len.tolist(),
                  f.body_pos.tolist(), f.body_size.tolist(), f.topic_pos.tolist(),
                  f.topic_size.tolist(), f.props_pos.tolist(), f.props_size.tolist(),
                  strict=True)
    for rel, *layout in columns:
        yield _decode(data, rel, *layout, path=path, segment_start=segment_start,
                      position=base + rel, verify_crc=verify_crc)


def decode_record(data: bytes, *, segment_start: int = 0, position: int = 0,
                  path: str = "<memory>", verify_crc: bool = True) -> CommitLogRecord:
    """Decode the record at the start of ``data`` (bytes taken from ``position`` of the
    segment starting at ``segment_start``); CorruptDataError if it is not a valid record."""
    memory = MemorySegment(bytes(data), segment_start, path, data_pos=position)
    return _read_one(memory, position, verify_crc)


def _read_one(seg: SegmentFile, pos: int, verify_crc: bool) -> CommitLogRecord:
    frame = classify_at(seg, pos)
    if frame.kind is FrameKind.BLANK:
        raise CorruptDataError("BLANK end-of-file filler, not a message", path=seg.path,
                               offset=pos, length=seg.size - pos)
    if frame.kind is FrameKind.INVALID:
        raise CorruptDataError(f"no valid record: {frame.reason}", path=seg.path, offset=pos)
    walk = RangeWalk(seg, pos, pos + 1, window_size=max(4096, frame.total), max_run=1)
    run = next(walk.runs())
    return next(_decode_run(run, seg.path, seg.start, verify_crc))


class SegmentScan(SegmentRangeScan[CommitLogRecord]):
    """Records starting in [start, end) of one segment; iterate once, then read
    :attr:`result` / :attr:`account`."""

    def decode_run(self, run: Run, seg: SegmentFile
                   ) -> tuple[list[CommitLogRecord], list[int], list[int]]:
        records = list(_decode_run(run, seg.path, seg.start, self.verify_crc))
        bad_body = [r.position for r in records if r.body_crc_ok is False]
        bad_props = [r.position for r in records if r.property_crc_ok is False]
        return records, bad_body, bad_props


def scan_segment(path: str | Path, start: int = 0, end: int | None = None, *,
                 verify_crc: bool = True, base_offset: int | None = None,
                 window_size: int = DEFAULT_WINDOW_SIZE) -> SegmentScan:
    """Records that start in bytes [start, end) of one segment file (see module doc).

    ``base_offset`` overrides the start offset normally taken from the file name.
    """
    return SegmentScan(path, start, end, verify_crc=verify_crc, base_offset=base_offset,
                       window_size=window_size)


def split_ranges(size: int, split_size: int) -> list[tuple[int, int]]:
    """[start, end) byte ranges of at most ``split_size`` covering a file of ``size``."""
    if split_size <= 0:
        raise ValueError("split_size must be positive")
    return [(s, min(s + split_size, size)) for s in range(0, size, split_size)] or [(0, 0)]


@dataclass(frozen=True)
class StoreIssue:
    """A store-level inconsistency (spec §8 invariants 1-3), found across segments."""

    path: str
    offset: int | None
    reason: str


@dataclass
class StoreScan(Iterable[CommitLogRecord]):
    """All records of a commitlog (one or several dirs), in offset order.

    After iteration: ``segments`` (one ScanResult per file), ``issues`` (file-level
    problems: non-contiguous names, odd sizes, corruption, torn tail before the last
    file) and ``logical_end`` (global offset just after the last valid record).
    """

    directories: list[str]
    start_offset: int = 0
    verify_crc: bool = True
    segments: list[ScanResult] = field(default_factory=list)
    issues: list[StoreIssue] = field(default_factory=list)
    logical_end: int | None = None

    def __iter__(self) -> Iterator[CommitLogRecord]:
        files = list_segments([Path(d) for d in self.directories])
        self.issues.extend(naming_issues(files))
        last_end: int | None = None
        for seg in files:
            if seg.end <= self.start_offset:
                continue
            start = max(self.start_offset - seg.start, 0)
            scan = scan_segment(seg.path, start, verify_crc=self.verify_crc)
            for record in scan:
                last_end = record.physical_offset + record.total_size
                yield record
            self.segments.append(scan.result)
        self.logical_end = last_end
        self.issues.extend(tail_issues(self.segments, last_end))


def scan_store(directories: str | Path | list[str | Path], *, start_offset: int = 0,
               verify_crc: bool = True) -> StoreScan:
    """Iterate every record of a commitlog from global ``start_offset`` (a record
    boundary, e.g. a previous run's high-water mark) to its logical end."""
    dirs = directories if isinstance(directories, list) else [directories]
    return StoreScan([str(d) for d in dirs], start_offset, verify_crc)


def naming_issues(files: list[Segment]) -> list[StoreIssue]:
    """Invariant 1: contiguous names, one size (a zero-length last file is tolerated)."""
    issues: list[StoreIssue] = []
    for before, after in itertools.pairwise(files):
        if before.end != after.start:
            issues.append(StoreIssue(str(after.path), None,
                                     f"segment starts at {after.start} but the previous one "
                                     f"ends at {before.end}"))
    sizes = [seg.size for seg in files]
    if sizes and sizes[-1] == 0:
        sizes.pop()
    if len(set(sizes)) > 1:
        issues.append(StoreIssue(str(files[0].path.parent), None,
                                 f"segment files differ in size: {sorted(set(sizes))}"))
    return issues


def tail_issues(results: list[ScanResult], logical_end: int | None) -> list[StoreIssue]:
    """Invariant 3: files before the one holding the logical end end with a BLANK; a torn
    tail is the logical end only in that last data file. What a BLANK's filler holds is
    no issue (the broker skips it; stale record frames there are only counted in
    ``records_after_blank``)."""
    issues: list[StoreIssue] = []
    for result in results:
        for gap in result.corrupt:
            issues.append(StoreIssue(result.path, gap.offset, f"corrupt: {gap.reason}"))
        holds_end = logical_end is not None and (
            result.segment_start < logical_end <= result.segment_start + result.file_size)
        before_end = logical_end is not None and (
            result.segment_start + result.file_size < logical_end)
        torn = [gap for gap in result.gaps if gap.kind is GapKind.TORN_TAIL]
        if before_end and not result.blanks:
            issues.append(StoreIssue(result.path, result.logical_end,
                                     "completed segment does not end with a BLANK record"))
        if torn and not holds_end:
            where = "before" if before_end else "after"
            for gap in torn:
                issues.append(StoreIssue(
                    result.path, gap.offset,
                    f"non-zero bytes after the last valid record in a segment {where} the "
                    f"logical end of the commitlog: {gap.reason}"))
    return issues


def read_record_at(commitlog_dir: str | Path | list[str | Path], physical_offset: int, *,
                   verify_crc: bool = True) -> CommitLogRecord:
    """The record whose PHYSICALOFFSET is ``physical_offset`` (e.g. from a CQ unit).

    OffsetNotFoundError if no segment holds the offset (deleted by retention, or beyond
    the end); CorruptDataError if no valid record starts exactly there.
    """
    dirs = commitlog_dir if isinstance(commitlog_dir, list) else [commitlog_dir]
    for seg in list_segments(list(dirs)):
        if seg.start <= physical_offset < seg.end:
            with SegmentFile(seg.path) as opened:
                return _read_one(opened, physical_offset - seg.start, verify_crc)
    raise OffsetNotFoundError(f"no commitlog segment holds physical offset {physical_offset}",
                              path=str(dirs[0]), offset=physical_offset)
