"""Commitlog records as Arrow RecordBatches with one fixed schema (the bulk path).

Same framing, resync and byte accounting as :mod:`rmqlib.commitlog.records` (both sit on
:mod:`rmqlib.commitlog.walk`), but no Python object per record: the walker hands over
runs of validated record positions and every column is gathered with numpy from those
offsets (strided big-endian views, fancy indexing) or built by Arrow compute kernels
(properties split/map, KEYS split). Per record only ``zlib.crc32`` runs (C code, one call
per body); decompression, IPv6 hosts, the ``__CRC32#`` trailer and invalid UTF-8 fall
back to per-record work for the rare records that need it.

Schema (``COMMITLOG_SCHEMA``; "!" = never null):

=============================  ====================  ======================================
file                           string !              path of the segment file
segment_start                  int64 !               start offset from the file name
file_position                  int64 !               record position inside the file
physical_offset                int64 !               PHYSICALOFFSET (= segment_start + pos)
total_size                     int32 !               TOTALSIZE
magic                          int32 !               MAGICCODE (signed, as stored)
message_version                int8 !                1 or 2 (2-byte topic length)
body_crc                       int32 !               BODYCRC as stored
queue_id, flag                 int32 !
queue_offset                   int64 !
sysflag                        int32 !               raw SYSFLAG
transaction_type               string !              NOT / PREPARED / COMMIT / ROLLBACK
compression                    string                ZLIB / LZ4 / ZSTD / UNKNOWN(n); null
                                                     when the body is stored plain
inner_batch                    bool !                SYSFLAG 0x80
born_timestamp                 int64 !               ms since epoch (producer clock)
born_host, born_port           string !, int32 !     IP text ("10.0.0.1", "::1") and port
store_timestamp                int64 !               ms since epoch (broker clock)
store_host, store_port         string !, int32 !
reconsume_times                int32 !
prepared_transaction_offset    int64 !
body_length                    int32 !               BODYLENGTH as stored (compressed size)
body                           binary                the body as the producer sent it:
                                                     *decompressed* when compressed; null
                                                     only if decompression failed
body_error                     string                why decompression failed, else null
body_crc_ok                    bool                  BODYCRC matches the stored bytes; null
                                                     when not verified
topic                          string !              UTF-8, invalid bytes as U+FFFD
properties                     map<string,string> !  parsed like the broker (last wins)
tags                           string                TAGS, null if absent
keys                           list<string> !        KEYS split on " ", empty pieces dropped
uniq_key                       string                UNIQ_KEY, null if absent
offset_msg_id                  string !              store host + port + physical offset hex
property_crc                   int64                 value of the __CRC32# trailer, null if
                                                     the record has none (or bad digits)
property_crc_ok                bool                  trailer CRC matches; null when no
                                                     trailer or not verified
=============================  ====================  ======================================

Batches hold at most ``batch_size`` rows and never span two windows of the file, so a
batch can be shorter. Memory stays bounded by ``window_size`` (+ one record) plus one
batch, whatever the file or range size.
"""

from __future__ import annotations

import socket
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqlib.commitlog import compression as codecs
from rmqlib.commitlog import layout as L
from rmqlib.commitlog import properties as props
from rmqlib.commitlog.msgid import ip_to_string, offset_msg_id_from_bytes
from rmqlib.commitlog.walk import (
    DEFAULT_MAX_RUN,
    DEFAULT_WINDOW_SIZE,
    HEADER_V4,
    Run,
    RunFields,
    ScanResult,
    SegmentFile,
    SegmentRangeScan,
    Window,
    strided_view,
)
from rmqlib.common.bytesource import FileTarget
from rmqlib.errors import CorruptDataError

_NN = False  # nullable=False, for readability of the schema below

COMMITLOG_SCHEMA = pa.schema([
    pa.field("file", pa.string(), _NN),
    pa.field("segment_start", pa.int64(), _NN),
    pa.field("file_position", pa.int64(), _NN),
    pa.field("physical_offset", pa.int64(), _NN),
    pa.field("total_size", pa.int32(), _NN),
    pa.field("magic", pa.int32(), _NN),
    pa.field("message_version", pa.int8(), _NN),
    pa.field("body_crc", pa.int32(), _NN),
    pa.field("queue_id", pa.int32(), _NN),
    pa.field("flag", pa.int32(), _NN),
    pa.field("queue_offset", pa.int64(), _NN),
    pa.field("sysflag", pa.int32(), _NN),
    pa.field("transaction_type", pa.string(), _NN),
    pa.field("compression", pa.string()),
    pa.field("inner_batch", pa.bool_(), _NN),
    pa.field("born_timestamp", pa.int64(), _NN),
    pa.field("born_host", pa.string(), _NN),
    pa.field("born_port", pa.int32(), _NN),
    pa.field("store_timestamp", pa.int64(), _NN),
    pa.field("store_host", pa.string(), _NN),
    pa.field("store_port", pa.int32(), _NN),
    pa.field("reconsume_times", pa.int32(), _NN),
    pa.field("prepared_transaction_offset", pa.int64(), _NN),
    pa.field("body_length", pa.int32(), _NN),
    pa.field("body", pa.binary()),
    pa.field("body_error", pa.string()),
    pa.field("body_crc_ok", pa.bool_()),
    pa.field("topic", pa.string(), _NN),
    pa.field("properties", pa.map_(pa.string(), pa.string()), _NN),
    pa.field("tags", pa.string()),
    pa.field("keys", pa.list_(pa.string()), _NN),
    pa.field("uniq_key", pa.string()),
    pa.field("offset_msg_id", pa.string(), _NN),
    pa.field("property_crc", pa.int64()),
    pa.field("property_crc_ok", pa.bool_()),
])

_TRANSACTION_NAMES = pa.array(["NOT", "PREPARED", "COMMIT", "ROLLBACK"])
_CODEC_NAMES = pa.array(["ZLIB", "LZ4", "ZSTD", "ZLIB", "UNKNOWN(4)", "UNKNOWN(5)",
                         "UNKNOWN(6)", "UNKNOWN(7)"])
_INLINE = 12  # binary_view: values up to 12 bytes live inside the view
_PAD = 16  # bytes readable past the last value of a gather source
_TRAILER_MARK = int.from_bytes(props.CRC32_TRAILER_PREFIX[:8], "big", signed=True)


class ArrowSegmentScan(SegmentRangeScan[pa.RecordBatch]):
    """RecordBatches of the records starting in [start, end) of one segment; iterate
    once, then read :attr:`result` / :attr:`account` (same rules as SegmentScan)."""

    def decode_run(self, run: Run, seg: SegmentFile
                   ) -> tuple[list[pa.RecordBatch], list[int], list[int]]:
        batch, bad_body, bad_props = run_to_batch(run, seg.path, seg.start, self.verify_crc)
        return [batch], bad_body, bad_props


def scan_segment_arrow(path: FileTarget, start: int = 0, end: int | None = None, *,
                       batch_size: int = DEFAULT_MAX_RUN, verify_crc: bool = True,
                       base_offset: int | None = None,
                       window_size: int = DEFAULT_WINDOW_SIZE) -> ArrowSegmentScan:
    """Batches (COMMITLOG_SCHEMA) of the records starting in [start, end) of a segment."""
    return ArrowSegmentScan(path, start, end, verify_crc=verify_crc, base_offset=base_offset,
                            window_size=window_size, max_run=batch_size)


def read_table(path: FileTarget, start: int = 0, end: int | None = None,
               **kwargs: object) -> tuple[pa.Table, ScanResult]:
    """All batches of a range as one Table, with the scan result (small ranges, tests)."""
    scan = scan_segment_arrow(path, start, end, **kwargs)  # type: ignore[arg-type]
    table = pa.Table.from_batches(list(scan), schema=COMMITLOG_SCHEMA)
    return table, scan.result


# --------------------------------------------------------------------------- columns


def run_to_batch(run: Run, path: str, segment_start: int,
                 verify_crc: bool) -> tuple[pa.RecordBatch, list[int], list[int]]:
    """One RecordBatch for a run, plus file positions of body / property CRC failures."""
    win, f = run.window, run.fields
    n = len(f)
    header = f.header
    position = win.base + f.rel
    src = _Source(win.u8, pa.py_buffer(win.data))
    body_crc = header["body_crc"].astype(np.int32)
    crc_ok, bad_body = _body_crc(win, f, body_crc, position, verify_crc)
    body, body_error = _body(win, src, f, path, position)
    parsed = _properties(_slices(src, f.props_pos, f.props_size, pad=True))
    prop_crc, prop_crc_ok, bad_props = _property_crc(win, f, position, verify_crc)
    columns = {
        "file": pa.repeat(pa.scalar(path, pa.string()), n),
        "segment_start": np.full(n, segment_start, dtype=np.int64),
        "file_position": position,
        "physical_offset": header["physical_offset"].astype(np.int64),
        "total_size": f.total.astype(np.int32),
        "magic": f.magic.astype(np.int32),
        "message_version": np.where(f.magic == L.MESSAGE_MAGIC_CODE_V2, 2, 1).astype(np.int8),
        "body_crc": body_crc,
        "queue_id": header["queue_id"].astype(np.int32),
        "flag": header["flag"].astype(np.int32),
        "queue_offset": header["queue_offset"].astype(np.int64),
        "sysflag": f.sysflag.astype(np.int32),
        "transaction_type": _TRANSACTION_NAMES.take(
            pa.array((f.sysflag & L.TRANSACTION_TYPE_MASK) >> 2)),
        "compression": _compression_names(f.sysflag),
        "inner_batch": (f.sysflag & L.INNER_BATCH_FLAG) != 0,
        "born_timestamp": header["born_timestamp"].astype(np.int64),
        **(_host_columns_ipv4(f) if f.all_ipv4 else _host_columns(win, f)),
        "body_length": f.body_length.astype(np.int32),
        "body": body,
        "body_error": body_error,
        "body_crc_ok": crc_ok,
        "topic": _strings(_slices(src, f.topic_pos, f.topic_size)),
        "properties": parsed.map,
        "tags": parsed.tags,
        "keys": parsed.keys,
        "uniq_key": parsed.uniq_key,
        "property_crc": prop_crc,
        "property_crc_ok": prop_crc_ok,
    }
    arrays = [_as_array(columns[fld.name], fld.type) for fld in COMMITLOG_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=COMMITLOG_SCHEMA), bad_body, bad_props


def _host_columns_ipv4(f: RunFields) -> dict[str, object]:
    """Host fields (and offsetMsgId) straight from the gathered IPv4 headers."""
    header = f.header
    n = len(header)
    raw = header.view(np.uint8).reshape(n, HEADER_V4.itemsize)
    store_at = HEADER_V4.fields["store_ip"][1]
    physical_at = HEADER_V4.fields["physical_offset"][1]
    msg_id = np.concatenate([raw[:, store_at : store_at + 8],
                             raw[:, physical_at : physical_at + 8]], axis=1)
    return {
        "born_host": _ipv4_strings(header["born_ip"]),
        "born_port": header["born_port"].astype(np.int32),
        "store_timestamp": header["store_timestamp"].astype(np.int64),
        "store_host": _ipv4_strings(header["store_ip"]),
        "store_port": header["store_port"].astype(np.int32),
        "reconsume_times": header["reconsume_times"].astype(np.int32),
        "prepared_transaction_offset": header["prepared_transaction_offset"].astype(np.int64),
        "offset_msg_id": _hex_strings(msg_id),
    }


def _host_columns(win: Window, f: RunFields) -> dict[str, object]:
    """Host fields when some record has an IPv6 host: positions differ per record."""
    rel = f.rel
    after_born = rel + L.BORNHOST_POS + f.born_len
    after_store = after_born + 8 + f.store_len
    store_v6 = (f.sysflag & L.STOREHOSTADDRESS_V6_FLAG) != 0
    return {
        "born_host": _hosts(win, rel + L.BORNHOST_POS,
                            (f.sysflag & L.BORNHOST_V6_FLAG) != 0),
        "born_port": win.i32[after_born - 4].astype(np.int32),
        "store_timestamp": win.i64[after_born].astype(np.int64),
        "store_host": _hosts(win, after_born + 8, store_v6),
        "store_port": win.i32[after_store - 4].astype(np.int32),
        "reconsume_times": win.i32[after_store].astype(np.int32),
        "prepared_transaction_offset": win.i64[after_store + 4].astype(np.int64),
        "offset_msg_id": _offset_msg_ids(win, rel, after_born + 8, store_v6),
    }


def _as_array(value: object, typ: pa.DataType) -> pa.Array:
    if isinstance(value, pa.Array):
        return value if value.type == typ else value.cast(typ)
    return pa.array(value, type=typ)


class _Source:
    """Bytes that binary views point into: the Arrow buffer plus strided gather views.

    The bytes must run at least 12 bytes past the last value (padding), so that the
    inline 12-byte gathers never need bounds checks.
    """

    def __init__(self, u8: np.ndarray, buffer: pa.Buffer) -> None:
        self.u8 = u8
        self.buffer = buffer
        self.words = strided_view(u8, "<u4")
        self.words12 = strided_view(u8, "V12")
        self.words8 = strided_view(u8, "<u8")

    @classmethod
    def of_bytes(cls, data: bytes) -> _Source:
        return cls(np.frombuffer(data, dtype=np.uint8), pa.py_buffer(data))


def _compression_names(sysflag: np.ndarray) -> pa.Array:
    codes = (sysflag & codecs.COMPRESSION_TYPE_MASK) >> codecs.COMPRESSION_TYPE_SHIFT
    names = _CODEC_NAMES.take(pa.array(codes))
    compressed = pa.array((sysflag & codecs.COMPRESSED_FLAG) != 0)
    return pc.if_else(compressed, names, pa.scalar(None, pa.string()))


def _ipv4_strings(addresses: np.ndarray) -> pa.Array:
    """Dotted IPv4 text, formatted once per distinct address."""
    encoded = pa.array(addresses.astype(np.uint32)).dictionary_encode()
    texts = pa.array([socket.inet_ntoa(v.to_bytes(4, "big"))
                      for v in encoded.dictionary.to_pylist()], pa.string())
    return texts.take(encoded.indices)


def _hosts(win: Window, at: np.ndarray, v6: np.ndarray) -> pa.Array:
    """IP strings for records of mixed layouts."""
    data = win.data
    return pa.array([
        ip_to_string(data[a : a + 16]) if is6 else socket.inet_ntoa(data[a : a + 4])
        for a, is6 in zip(at.tolist(), v6.tolist(), strict=True)
    ], pa.string())


def _hex_strings(raw: np.ndarray) -> pa.Array:
    """Uppercase hex of each row of a fixed-width byte matrix (one hex() call)."""
    n, width = raw.shape
    text = np.ascontiguousarray(raw).tobytes().hex().upper().encode("ascii")
    offsets = np.arange(0, 2 * width * n + 1, 2 * width, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text))


def _offset_msg_ids(win: Window, rel: np.ndarray, store_at: np.ndarray,
                    store_v6: np.ndarray) -> pa.Array:
    """offsetMsgId for records of mixed layouts (IPv6 store hosts are 56 hex chars)."""
    data = win.data
    out = []
    for r, a, is6 in zip(rel.tolist(), store_at.tolist(), store_v6.tolist(), strict=True):
        size = 16 if is6 else 4
        port = int.from_bytes(data[a + size : a + size + 4], "big", signed=True)
        physical = int.from_bytes(data[r + 28 : r + 36], "big", signed=True)
        out.append(offset_msg_id_from_bytes(data[a : a + size], port, physical))
    return pa.array(out, pa.string())


def _slices(src: _Source, pos: np.ndarray, size: np.ndarray, *,
            extra: _Source | None = None, in_extra: np.ndarray | None = None,
            valid: np.ndarray | None = None, inline: np.ndarray | None = None,
            pad: bool = False) -> pa.Array:
    """Binary array of src[pos : pos + size] per row, without a Python loop.

    Writes Arrow binary_view structs with numpy (values up to 12 bytes inline, longer
    ones as buffer index + offset into ``src``, or into ``extra`` for rows flagged
    ``in_extra``), then lets Arrow copy them into a plain binary array in C++. ``pad``
    appends a hidden row so the result's data buffer runs _PAD bytes past its values.
    """
    n = len(pos)
    if pad:
        pos = np.append(pos, 0)
        size = np.append(size, _PAD)
        if valid is not None:
            valid = np.append(valid, True)
    views = np.empty((len(pos), 4), dtype=np.uint32)
    views[:, 0] = size
    if extra is None or in_extra is None:
        _fill_views(views, slice(None), src, pos, size, 0, inline)
    else:
        _fill_views(views, ~in_extra, src, pos[~in_extra], size[~in_extra], 0)
        _fill_views(views, in_extra, extra, pos[in_extra], size[in_extra], 1)
    validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    buffers = [validity, pa.py_buffer(views), src.buffer]
    if extra is not None:
        buffers.append(extra.buffer)
    array = pa.Array.from_buffers(pa.binary_view(), len(pos), buffers).cast(pa.binary())
    return array.slice(0, n) if pad else array


# _WORD_MASKS[k][size]: which bytes of word k (bytes 4k..4k+3) belong to a value of
# ``size`` bytes; index 13 stands for "longer than 12" (all bytes).
_WORD_MASKS = np.array([
    [int.from_bytes(bytes(min(max(size - 4 * k, 0), 4) * [255]).ljust(4, b"\0"), "little")
     for size in range(_INLINE + 2)]
    for k in range(3)
], dtype=np.uint32)


_MASKS_BY_SIZE = np.ascontiguousarray(_WORD_MASKS.T)  # (14, 3)


def _inline_words(words12: np.ndarray, pos: np.ndarray, size: np.ndarray) -> np.ndarray:
    """(n, 3) u32: the 12 bytes a view stores inline, masked to the value's size."""
    gathered = words12[pos].view("<u4").reshape(len(pos), 3)
    return gathered & _MASKS_BY_SIZE[np.minimum(size, _INLINE + 1)]


def _fill_views(views: np.ndarray, rows: np.ndarray | slice, src: _Source,
                pos: np.ndarray, size: np.ndarray, buffer_index: int,
                inline: np.ndarray | None = None) -> None:
    """Fill words 1-3 of binary_view structs: inline bytes, or prefix/buffer/offset."""
    if len(pos) == 0:
        return
    short = size <= _INLINE
    if not short.any():
        views[rows, 1] = src.words[pos]
        views[rows, 2] = buffer_index
        views[rows, 3] = pos
        return
    if inline is None:
        inline = _inline_words(src.words12, pos, size)
    if short.all():
        views[rows, 1:] = inline
        return
    views[rows, 1] = inline[:, 0]  # for long values the mask is all ones: the prefix
    views[rows, 2] = np.where(short, inline[:, 1], buffer_index)
    views[rows, 3] = np.where(short, inline[:, 2], pos)


def _strings(binary: pa.Array) -> pa.Array:
    """binary -> string, replacing invalid UTF-8 like the broker's decoder."""
    try:
        return binary.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if b is None else b.decode("utf-8", "replace")
                         for b in binary.to_pylist()], pa.string())


def _body_crc(win: Window, f: RunFields, stored: np.ndarray, position: np.ndarray,
              verify: bool) -> tuple[pa.Array, list[int]]:
    """BODYCRC check: one zlib.crc32 call per body (the only per-record step left)."""
    if not verify:
        return pa.nulls(len(f), pa.bool_()), []
    view = memoryview(win.data)
    crc32 = zlib.crc32
    crcs = np.array([crc32(view[start:end]) for start, end in
                     zip(f.body_pos.tolist(), (f.body_pos + f.body_size).tolist(),
                         strict=True)], dtype=np.int64)
    ok = (crcs & 0x7FFFFFFF) == stored
    return pa.array(ok), position[~ok].tolist()


def _body(win: Window, src: _Source, f: RunFields, path: str,
          position: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """Bodies, decompressed where SYSFLAG says so (those few rows are done one by one)."""
    n = len(f)
    compressed = (f.sysflag & codecs.COMPRESSED_FLAG) != 0
    if not compressed.any():
        return _slices(src, f.body_pos, f.body_size), pa.nulls(n, pa.string())
    pos, size = f.body_pos.copy(), f.body_size.copy()
    valid = np.ones(n, dtype=bool)
    errors: list[str | None] = [None] * n
    parts: list[bytes] = []
    used = 0
    for row in np.flatnonzero(compressed).tolist():
        stored = win.data[pos[row] : pos[row] + size[row]]
        codec = codecs.compression_type(int(f.sysflag[row]))
        try:
            plain = codecs.decompress(stored, codec if codec is not None else -1, path=path,
                                      offset=int(position[row]))
        except CorruptDataError as exc:
            valid[row], errors[row], size[row] = False, exc.reason, 0
            continue
        parts.append(plain)
        pos[row], size[row] = used, len(plain)
        used += len(plain)
    parts.append(bytes(_INLINE + 4))  # padding for the inline-word gathers
    extra = _Source.of_bytes(b"".join(parts))
    body = _slices(src, pos, size, extra=extra, in_extra=compressed & valid, valid=valid)
    return body, pa.array(errors, pa.string())


class _Parsed:
    """Result of :func:`_properties`."""

    def __init__(self, prop_map: pa.Array, tags: pa.Array, keys: pa.Array,
                 uniq_key: pa.Array) -> None:
        self.map, self.tags, self.keys, self.uniq_key = prop_map, tags, keys, uniq_key


def _properties(raw: pa.Array) -> _Parsed:
    """Properties of every row, parsed like ``string2messageProperties``, vectorised.

    Works on the concatenated property bytes: one numpy scan finds every 0x01/0x02; a
    chunk runs from a row start or a 0x02 to the next 0x02 or row end, and becomes a
    pair at its first 0x01 if name and value are non-empty. Names get exact dictionary
    codes (few distinct names), which make the last-wins rule and the TAGS / KEYS /
    UNIQ_KEY lookups integer comparisons.
    """
    n = len(raw)
    text = _strings(raw)  # invalid UTF-8 replaced first, as the broker decodes first
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32, count=n + 1,
                            offset=4 * text.offset).astype(np.int64)
    value_buffer = text.buffers()[2]
    if value_buffer is not None and value_buffer.size >= offsets[-1] + _PAD:
        cat = np.frombuffer(value_buffer, dtype=np.uint8)  # padded by _slices(pad=True)
        src = _Source(cat, value_buffer)
    else:  # replaced rows were rebuilt without padding: copy once
        body = (np.frombuffer(value_buffer, dtype=np.uint8)[: offsets[-1]]
                if value_buffer is not None else np.zeros(0, dtype=np.uint8))
        cat = np.concatenate([body, np.zeros(_PAD, dtype=np.uint8)])
        src = _Source(cat, pa.py_buffer(cat))
    stored = cat[: offsets[-1]]
    row, name_pos, name_len, value_pos, value_len, zeros = _pairs(stored, offsets)
    dictionary, codes = _name_codes(src, zeros, name_pos, name_len)

    keep = _last_occurrences(row, codes, len(dictionary))
    if keep is not None:
        row, codes, value_pos, value_len = (a[keep] for a in (row, codes, value_pos,
                                                              value_len))
    map_offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(row, minlength=n), out=map_offsets[1:])
    names = dictionary.take(pa.array(codes))
    values = _slices(src, value_pos, value_len).view(pa.string())
    prop_map = pa.MapArray.from_arrays(pa.array(map_offsets), names, values)
    code_of = {name: code for code, name in enumerate(dictionary.to_pylist())}

    def lookup(name: str) -> pa.Array:
        index = np.full(n, -1, dtype=np.int64)
        if name in code_of:
            hits = np.flatnonzero(codes == code_of[name])
            index[row[hits]] = hits
        return values.take(pa.array(index, mask=index < 0))

    keys = lookup(props.KEYS)
    return _Parsed(prop_map, lookup(props.TAGS), _split_keys(keys), lookup(props.UNIQ_KEY))


_MASK8 = np.array([(1 << (8 * size)) - 1 for size in range(9)], dtype=np.uint64)


def _name_codes(src: _Source, zeros: np.ndarray, pos: np.ndarray,
                length: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """Exact dictionary codes for names: (distinct names as strings, code per pair).

    A name of up to 8 bytes without NUL is identified by its bytes as one u64 (a
    NUL-free name's length is its count of leading non-zero bytes), so hashing integers
    suffices; any other name goes through Arrow's exact string dictionary encoding.
    """
    keyable = length <= 8
    if len(zeros) and len(pos):
        owner = np.maximum(np.searchsorted(pos, zeros, side="right") - 1, 0)
        inside = (zeros >= pos[owner]) & (zeros < pos[owner] + length[owner])
        keyable[owner[inside]] = False
    codes = np.empty(len(pos), dtype=np.int64)
    parts: list[pa.Array] = []
    short = np.flatnonzero(keyable)
    if len(short):
        value = src.words8[pos[short]] & _MASK8[length[short]]
        encoded = pa.array(value).dictionary_encode()
        codes[short] = np.asarray(encoded.indices)
        parts.append(pa.array(
            [v.to_bytes(8, "little").rstrip(b"\0").decode("utf-8", "replace")
             for v in encoded.dictionary.to_pylist()], pa.string()))
    other = np.flatnonzero(~keyable)
    if len(other):
        encoded = _slices(src, pos[other], length[other]).view(pa.string()).dictionary_encode()
        codes[other] = np.asarray(encoded.indices) + sum(len(p) for p in parts)
        parts.append(encoded.dictionary)
    dictionary = pa.concat_arrays(parts) if parts else pa.array([], pa.string())
    return dictionary, codes


def _last_occurrences(row: np.ndarray, codes: np.ndarray, distinct: int) -> np.ndarray | None:
    """Mask keeping the last pair of each name per row; None when no row repeats a name.

    With at most 64 distinct names a row repeats one iff its OR of ``1 << code`` has
    fewer bits than it has pairs; otherwise, or for the rows that do, sort on keys.
    """
    if len(row) < 2:
        return None
    if distinct <= 64:
        starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        masks = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), codes.astype(np.uint64)),
                                       starts)
        counts = np.diff(np.r_[starts, len(row)])
        if (np.bitwise_count(masks) == counts).all():
            return None
    key = row * max(distinct, 1) + codes
    _, last_from_end = np.unique(key[::-1], return_index=True)
    if len(last_from_end) == len(key):
        return None
    keep = np.zeros(len(key), dtype=bool)
    keep[len(key) - 1 - last_from_end] = True
    return keep


def _pairs(stored: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, ...]:
    """(row, name_pos, name_len, value_pos, value_len) of every well-formed pair, and
    the positions of 0x00 bytes (which a name must not contain to be keyed as an int)."""
    n = len(offsets) - 1
    sep = np.flatnonzero(stored < 3)  # every 0x01 and 0x02, and the (rare) 0x00
    kind = stored[sep]
    zeros = sep[kind == 0]
    if len(zeros):
        sep, kind = sep[kind != 0], kind[kind != 0]
    is_two = kind == 2
    two_index = np.flatnonzero(is_two)
    two = sep[two_index]
    lo, hi = offsets[:-1], offsets[1:]
    # A chunk starts at a row start or after a 0x02; its first separator is found by one
    # search per row start, and is simply the next separator after a 0x02. Row starts
    # sort before a 0x02 at the same position, so each row's chunks follow its start.
    chunk_starts = np.concatenate([lo, two + 1])
    next_sep = np.concatenate([np.searchsorted(sep, lo), two_index + 1])
    order = np.argsort(chunk_starts, kind="stable")
    starts, next_sep = chunk_starts[order], next_sep[order]
    ends = np.sort(np.concatenate([two, hi]), kind="stable")
    chunk_row = np.cumsum(order < n) - 1
    if len(sep):
        clipped = np.minimum(next_sep, len(sep) - 1)
        first = sep[clipped]
        ok = ((next_sep < len(sep)) & ~is_two[clipped] & (first > starts)
              & (first + 1 < ends))
    else:
        first, ok = starts, np.zeros(len(starts), dtype=bool)
    name_pos, first, row = starts[ok], first[ok], chunk_row[ok]
    return row, name_pos, first - name_pos, first + 1, ends[ok] - first - 1, zeros


def _split_keys(keys: pa.Array) -> pa.Array:
    """KEYS split on " " with empty pieces dropped; rows without KEYS get []."""
    n = len(keys)
    pieces = pc.split_pattern(keys.fill_null(""), " ")
    parent = np.asarray(pc.list_parent_indices(pieces))
    flat = pieces.flatten()
    keep = np.asarray(pc.binary_length(flat)) > 0
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(parent[keep], minlength=n), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), flat.filter(pa.array(keep)))


def _property_crc(win: Window, f: RunFields, position: np.ndarray,
                  verify: bool) -> tuple[pa.Array, pa.Array, list[int]]:
    """The 5.x ``__CRC32#`` trailer: found vectorised, checked per record that has one."""
    n = len(f)
    end = f.props_pos + f.props_size
    # "__CRC32#" compared as one i64 at end - 20 (padding keeps the gather in bounds),
    # then 0x01 after it and 0x02 at the end.
    marked = ((win.i64[end - props.CRC32_RESERVED_LEN] == _TRAILER_MARK)
              & (f.props_size >= props.CRC32_RESERVED_LEN))
    candidates = np.flatnonzero(marked)
    if len(candidates):
        trailer_at = end[candidates] - props.CRC32_RESERVED_LEN
        candidates = candidates[(win.u8[trailer_at + 8] == 1) & (win.u8[end[candidates] - 1]
                                                                 == 2)]
    if not len(candidates):
        return pa.nulls(n, pa.int64()), pa.nulls(n, pa.bool_()), []
    values: list[int | None] = [None] * n
    oks: list[bool | None] = [None] * n
    bad: list[int] = []
    view = memoryview(win.data)
    for row in candidates.tolist():
        trailer = props.find_crc_trailer(view[end[row] - props.CRC32_RESERVED_LEN : end[row]])
        values[row] = trailer.value if trailer else None
        if verify:
            rel, total = int(f.rel[row]), int(f.total[row])
            oks[row] = props.verify_property_crc(view[rel : rel + total], values[row])
            if not oks[row]:
                bad.append(int(position[row]))
    return pa.array(values, pa.int64()), pa.array(oks, pa.bool_()), bad


# --------------------------------------------------------------------------- inner batches

#: Columns an unwrapped batch adds: which member of an inner batch a row is (0 for an
#: ordinary record), how many the batch holds (null for an ordinary record) and the outer
#: record's own properties (INNER_NUM, INNER_BASE, the batch UNIQ_KEY, CLUSTER, ...).
MEMBER_FIELDS = [
    pa.field("inner_index", pa.int32(), _NN),
    pa.field("inner_num", pa.int32()),
    pa.field("batch_properties", pa.map_(pa.string(), pa.string())),
]
MESSAGE_SCHEMA = pa.schema(list(COMMITLOG_SCHEMA) + MEMBER_FIELDS)
#: Columns a member takes from itself; every other column is the outer record's.
_MEMBER_OWN = ("flag", "queue_offset", "body_length", "body", "properties", "tags", "keys",
               "uniq_key")


def unwrap_inner_batches(batch: pa.RecordBatch) -> pa.RecordBatch:
    """One row per message a consumer receives (MESSAGE_SCHEMA): every inner-batch record
    (§2.6) becomes its members, each with its own flag, properties, keys, tags, UNIQ_KEY,
    body and queue offset (base + index), the rest from the record, as the client unwraps
    it. A record whose body does not split into members stays one row, with the reason
    in ``body_error``: nothing is dropped or guessed.

    Only the inner-batch records go to Python (all at once); the ordinary rows stay in
    Arrow, and one ``take`` puts every row in commitlog order.
    """
    inner_rows = np.flatnonzero(batch.column("inner_batch").to_numpy(zero_copy_only=False))
    plain = _as_plain_messages(batch)
    if len(inner_rows) == 0:
        return plain
    expanded, rows_per_record = _members_of(batch.take(pa.array(inner_rows, pa.int64())))
    # where each input row lands: an ordinary row keeps one slot, an inner record as many
    # as it has members; the members sit after the n plain rows in the concatenation
    inner_mask = np.zeros(batch.num_rows, bool)
    inner_mask[inner_rows] = True
    slots = np.ones(batch.num_rows, np.int64)
    slots[inner_rows] = rows_per_record
    order = np.repeat(np.arange(batch.num_rows, dtype=np.int64), slots)
    is_member = np.repeat(inner_mask, slots)
    order[is_member] = batch.num_rows + np.arange(int(is_member.sum()), dtype=np.int64)
    return pa.concat_batches([plain, expanded]).take(pa.array(order, pa.int64()))


def _as_plain_messages(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Records that are not inner batches: each is its own message (index 0, no batch)."""
    n = batch.num_rows
    return _with_member_columns(batch, np.zeros(n, np.int32), pa.nulls(n, pa.int32()),
                                pa.nulls(n, MEMBER_FIELDS[2].type))


def _members_of(records: pa.RecordBatch) -> tuple[pa.RecordBatch, list[int]]:
    """The inner-batch ``records`` as their members, in order, and how many rows each
    became: a record whose body does not split stays one row with the reason in
    ``body_error``."""
    from rmqlib.commitlog.innerbatch import inner_num, split_inner_batch

    take: list[int] = []
    own: dict[str, list[object]] = {name: [] for name in _MEMBER_OWN}
    index: list[int] = []
    count: list[int | None] = []
    outer: list[object] = []
    errors: list[object] = []
    rows_per_record: list[int] = []
    rows = records.select([*_MEMBER_OWN, "body_error", "file_position", "file"]).to_pylist()
    for i, row in enumerate(rows):
        members = None
        error = row["body_error"]
        if row["body"] is not None:
            try:
                members = split_inner_batch(row["body"], row["queue_offset"],
                                            expected=inner_num(dict(row["properties"])),
                                            path=row["file"], offset=row["file_position"])
            except CorruptDataError as exc:
                error = f"inner batch not unwrapped: {exc.reason}"
        if members is None:
            take.append(i)
            for name in _MEMBER_OWN:
                own[name].append(row[name])
            index.append(0)
            count.append(None)
            outer.append(None)
            errors.append(error)
            rows_per_record.append(1)
            continue
        for member in members:
            take.append(i)
            own["flag"].append(member.flag)
            own["queue_offset"].append(member.queue_offset)
            own["body_length"].append(len(member.body))
            own["body"].append(member.body)
            own["properties"].append(list(member.properties.items()))
            own["tags"].append(member.tags)
            own["keys"].append(member.keys)
            own["uniq_key"].append(member.uniq_key)
            index.append(member.index)
            count.append(len(members))
            outer.append(row["properties"])
            errors.append(error)
        rows_per_record.append(len(members))
    own["body_error"] = errors
    expanded = _replace_columns(records.take(pa.array(take, pa.int64())), own)
    return (_with_member_columns(expanded, np.array(index, np.int32),
                                 pa.array(count, pa.int32()),
                                 pa.array(outer, MEMBER_FIELDS[2].type)),
            rows_per_record)


def _replace_columns(batch: pa.RecordBatch, values: dict[str, list[object]]) -> pa.RecordBatch:
    """``batch`` (COMMITLOG_SCHEMA) with the named columns replaced by ``values``."""
    arrays = [pa.array(values[f.name], f.type) if f.name in values else batch.column(f.name)
              for f in COMMITLOG_SCHEMA]
    return pa.RecordBatch.from_arrays(arrays, schema=COMMITLOG_SCHEMA)


def _with_member_columns(batch: pa.RecordBatch, index: np.ndarray, count: pa.Array,
                         outer: pa.Array) -> pa.RecordBatch:
    arrays = [*batch.columns, pa.array(index, pa.int32()), count, outer]
    return pa.RecordBatch.from_arrays(arrays, schema=MESSAGE_SCHEMA)
