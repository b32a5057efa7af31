"""Java ``String.hashCode`` and the two broker hashes built on it (spec §4.3, §5).

The broker hashes Java strings, i.e. sequences of UTF-16 code units: a character
outside the Basic Multilingual Plane contributes two surrogates. Results are Java
``int`` values (signed 32-bit), so every function here returns a Python int in
[-2**31, 2**31 - 1] — except :func:`tags_code`, which is that int sign-extended to
the i64 stored in consume-queue units (same Python value).
"""

from __future__ import annotations

import struct

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
