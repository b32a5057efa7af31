"""Body codecs selected by SYSFLAG (spec §2.3)."""

from __future__ import annotations

import zlib

import lz4.frame
import pytest
import zstandard

from rmqlib.commitlog.compression import (
    CompressionType,
    compression_type,
    decompress,
)
from rmqlib.errors import CorruptDataError

BODY = b"RocketMQ body " * 500


@pytest.mark.parametrize(("sysflag", "expected"), [
    (0x000, None), (0x100, None),  # codec bits without the compressed bit: plain body
    (0x001, CompressionType.ZLIB),  # legacy clients: type 0 means zlib
    (0x101, CompressionType.LZ4), (0x201, CompressionType.ZSTD),
    (0x301, CompressionType.ZLIB), (0x401, 4), (0x30D, CompressionType.ZLIB),
])
def test_compression_type_from_sysflag(sysflag: int, expected: int | None) -> None:
    assert compression_type(sysflag) == expected


@pytest.mark.parametrize(("codec", "packed"), [
    (CompressionType.ZLIB, zlib.compress(BODY)),
    (CompressionType.LZ4, lz4.frame.compress(BODY)),
    (CompressionType.ZSTD, zstandard.ZstdCompressor().compress(BODY)),
    (CompressionType.ZSTD, zstandard.ZstdCompressor(write_content_size=False).compress(BODY)),
])
def test_each_codec_round_trips(codec: CompressionType, packed: bytes) -> None:
    assert decompress(packed, codec) == BODY


@pytest.mark.parametrize(("codec", "packed"), [
    (CompressionType.ZLIB, zlib.compress(BODY)[:-10]),
    (CompressionType.LZ4, lz4.frame.compress(BODY)[:-10]),
    (CompressionType.ZSTD, zstandard.ZstdCompressor(write_content_size=False)
     .compress(BODY)[:-10]),
    (CompressionType.ZLIB, b"not zlib at all"),
    (CompressionType.LZ4, b"not lz4 at all!"),
    (CompressionType.ZSTD, b"not zstd at all"),
    (CompressionType.LZ4, b""),
    (4, zlib.compress(BODY)),
])
def test_damaged_or_unknown_bodies_raise_corrupt_data(codec: int, packed: bytes) -> None:
    with pytest.raises(CorruptDataError) as caught:
        decompress(packed, codec, path="/x/00000000000000000000", offset=42)
    assert caught.value.path == "/x/00000000000000000000"
    assert caught.value.offset == 42


def test_size_limit_stops_inflation() -> None:
    bomb = zlib.compress(bytes(1_000_000))
    with pytest.raises(CorruptDataError, match="beyond"):
        decompress(bomb, CompressionType.ZLIB, max_size=1000)
    with pytest.raises(CorruptDataError, match="beyond"):
        decompress(lz4.frame.compress(bytes(1_000_000)), CompressionType.LZ4, max_size=1000)
    with pytest.raises(CorruptDataError, match="beyond"):
        decompress(zstandard.ZstdCompressor().compress(bytes(1_000_000)),
                   CompressionType.ZSTD, max_size=1000)
