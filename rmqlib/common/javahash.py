"""Java ``String.hashCode`` and the two broker hashes built on it (spec §4.3, §5).

The broker hashes Java strings, i.e. sequences of UTF-16 code units: a character
outside the Basic Multilingual Plane contributes two surrogates. Results are Java
``int`` values (signed 32-bit), so every function here returns a Python int in
[-2**31, 2**31 - 1] — except :func:`tags_code`, which is that int sign-extended to
the i64 stored in consume-queue units (same Python value).
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1
_U32 = 0xFFFFFFFF


def java_string_hash(text: str) -> int:
    """``text.hashCode()`` as Java computes it: Σ u·31^k over UTF-16 units, signed i32.

    Lone surrogates (possible in Java strings) are hashed as themselves.
    """
    encoded = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for unit in struct.unpack(f">{len(encoded) // 2}H", encoded):
        h = (31 * h + unit) & _U32
    return h - (1 << 32) if h > INT_MAX else h


def tags_code(tags: str | None) -> int:
    """Consume-queue tagsCode of a TAGS property: its hash sign-extended; 0 if absent/empty."""
    if not tags:
        return 0
    return java_string_hash(tags)


def index_key_hash(key: str) -> int:
    """IndexFile keyHash: ``abs(key.hashCode())``, with Integer.MIN_VALUE (abs overflows) → 0."""
    h = java_string_hash(key)
    if h == INT_MIN:
        return 0
    return abs(h)


def index_key(topic: str, key: str) -> str:
    """The string the broker indexes for one key of a record: ``topic#key`` (IS.buildKey)."""
    return f"{topic}#{key}"


# --------------------------------------------------------------------------- bulk (numpy)

_POWERS_OF_31: np.ndarray = np.ones(1, dtype=np.uint32)


def _powers_of_31(count: int) -> np.ndarray:
    """31**k mod 2**32 for k < count (uint32 arithmetic wraps exactly like Java int)."""
    global _POWERS_OF_31
    if len(_POWERS_OF_31) < count:
        values = [1]
        for _ in range(1, count):
            values.append(values[-1] * 31 & _U32)
        _POWERS_OF_31 = np.array(values, dtype=np.uint32)
    return _POWERS_OF_31[:count]


def java_string_hashes(strings: pa.Array) -> np.ndarray:
    """``hashCode()`` of every string of an Arrow string array, as int32, vectorised.

    For ASCII strings UTF-8 bytes are the UTF-16 code units, so h = Σ c_j·31^(n-1-j) is
    one multiply and one segmented sum over the data buffer; rows with non-ASCII bytes
    (and nulls, hashed as "") go through :func:`java_string_hash`.
    """
    strings = strings.cast(pa.large_string())
    n = len(strings)
    result = np.zeros(n, dtype=np.int32)
    if n == 0:
        return result
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int64)[strings.offset:][: n + 1]
    data_buffer = strings.buffers()[2]
    data = (np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None
            else np.zeros(0, dtype=np.uint8))[offsets[0] : offsets[-1]]
    starts, ends = offsets[:-1] - offsets[0], offsets[1:] - offsets[0]
    lengths = ends - starts
    exponent = np.repeat(ends, lengths) - 1 - np.arange(len(data))
    terms = data.astype(np.uint32) * _powers_of_31(int(lengths.max(initial=0)))[exponent]
    # Row sums as differences of a running sum; uint32 wraps mod 2**32 like Java's int.
    running = np.concatenate([np.zeros(1, dtype=np.uint32), np.cumsum(terms, dtype=np.uint32)])
    result = (running[ends] - running[starts]).view(np.int32)
    high = np.concatenate([[0], np.cumsum(data >= 0x80)])
    non_ascii = high[ends] > high[starts]
    for row in np.flatnonzero(non_ascii).tolist():
        result[row] = java_string_hash(strings[row].as_py())
    return result


def index_key_hashes(keys: pa.Array) -> np.ndarray:
    """:func:`index_key_hash` of every string of an Arrow array (vectorised abs rule)."""
    hashes = java_string_hashes(keys).astype(np.int64)
    return np.where(hashes == INT_MIN, 0, np.abs(hashes)).astype(np.int32)
