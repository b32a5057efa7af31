"""Body compression: which codec a record used and how to undo it (spec §2.3).

SYSFLAG bit 0x1 says the stored body is compressed; bits 0x700 (from 4.9.4) name the
codec: 1 LZ4 (frame format), 2 ZSTD (frame), 3 ZLIB. Type 0 with the compressed bit set
is the pre-4.9.4 legacy client, which always used ZLIB. BODYCRC covers the *stored*
(compressed) bytes, so a CRC check never needs decompression.

Failures raise CorruptDataError (never a codec's own exception type), and a size limit
keeps a corrupt or hostile body from inflating without bound.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from enum import IntEnum

import lz4.frame
import zstandard

from rmqlib.errors import CorruptDataError

COMPRESSED_FLAG = 0x1
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_TYPE_SHIFT = 8

# Far above the broker's default maxMessageSize (4 MiB), which clients check before
# compressing; a body that inflates beyond it is treated as corrupt.
DEFAULT_MAX_DECOMPRESSED = 256 * 1024 * 1024


class CompressionType(IntEnum):
    """Codec ids of ``CompressionType`` (sysflag bits 0x700 >> 8)."""

    LZ4 = 1
    ZSTD = 2
    ZLIB = 3


def compression_type(sysflag: int) -> int | None:
    """The codec of a record's body, or None when the body is stored uncompressed.

    Known codes come back as :class:`CompressionType` members; an unknown code (4-7)
    comes back as a plain int, which :func:`decompress` rejects as corrupt.
    """
    if not sysflag & COMPRESSED_FLAG:
        return None
    code = (sysflag & COMPRESSION_TYPE_MASK) >> COMPRESSION_TYPE_SHIFT
    if code == 0:
        return CompressionType.ZLIB  # legacy clients: compressed bit only, always zlib
    try:
        return CompressionType(code)
    except ValueError:
        return code


def decompress(
    data: bytes | bytearray | memoryview,
    codec: CompressionType | int,
    *,
    max_size: int = DEFAULT_MAX_DECOMPRESSED,
    path: str | None = None,
    offset: int | None = None,
) -> bytes:
    """Undo ``codec``; CorruptDataError (with path/offset) if the bytes do not decode."""
    where = {"path": path, "offset": offset, "length": len(data)}
    try:
        codec = CompressionType(codec)
    except ValueError:
        raise CorruptDataError(f"unknown compression type {codec}", **where) from None
    try:
        if codec is CompressionType.ZLIB:
            return _zlib(bytes(data), max_size)
        if codec is CompressionType.LZ4:
            return _lz4(bytes(data), max_size)
        return _zstd(bytes(data), max_size)
    except _Incomplete as exc:
        raise CorruptDataError(f"{codec.name} body {exc}", **where) from None
    except (zlib.error, RuntimeError, zstandard.ZstdError, ValueError) as exc:
        raise CorruptDataError(f"{codec.name} body does not decompress: {exc}",
                               **where) from None


class _Incomplete(Exception):
    """Internal: the stream ended early or grew past the limit."""


def _zlib(data: bytes, max_size: int) -> bytes:
    inflater = zlib.decompressobj()
    out = inflater.decompress(data, max_size + 1)
    if len(out) > max_size:
        raise _Incomplete(f"inflates beyond {max_size} bytes")
    if not inflater.eof:
        raise _Incomplete("is truncated (zlib stream has no end)")
    # Bytes after the stream end are ignored, as InflaterInputStream does.
    return out


def _frames(data: bytes, max_size: int, codec: str,
            open_frame: Callable[[bytes, int], tuple[bytes, bool, bytes]]) -> bytes:
    """Decode concatenated frames (both Java compressors may emit more than one).

    ``open_frame(remaining, budget)`` decodes one frame, producing at most ``budget``
    bytes, and returns (output, reached the frame's end mark, bytes after the frame).
    """
    parts: list[bytes] = []
    size = 0
    remaining = data
    while remaining:
        out, ended, remaining = open_frame(remaining, max_size + 1 - size)
        size += len(out)
        parts.append(out)
        if size > max_size:
            raise _Incomplete(f"inflates beyond {max_size} bytes")
        if not ended:
            raise _Incomplete(f"is truncated ({codec} frame has no end mark)")
    if not parts:
        raise _Incomplete(f"is empty (no {codec} frame)")
    return b"".join(parts)


def _lz4(data: bytes, max_size: int) -> bytes:
    def one_frame(remaining: bytes, budget: int) -> tuple[bytes, bool, bytes]:
        frame = lz4.frame.LZ4FrameDecompressor()
        out = frame.decompress(remaining, max_length=budget)
        return out, frame.eof, frame.unused_data or b""

    return _frames(data, max_size, "LZ4", one_frame)


def _zstd(data: bytes, max_size: int) -> bytes:
    def one_frame(remaining: bytes, budget: int) -> tuple[bytes, bool, bytes]:
        declared = zstandard.frame_content_size(remaining)
        if declared >= budget:  # budget = what is left of max_size, plus one
            raise _Incomplete(f"declares {declared} bytes, beyond {max_size}")
        frame = zstandard.ZstdDecompressor().decompressobj()
        out = frame.decompress(remaining)
        return out, frame.eof, frame.unused_data

    return _frames(data, max_size, "zstd", one_frame)
