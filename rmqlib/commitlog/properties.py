"""Message properties, parsed exactly the way the broker parses them (spec §2.4, §2.5).

The stored PROPERTIES field is ``name 0x01 value 0x02`` repeated. Writers from 4.9.1 to
5.1.4 drop the final 0x02, older and newer ones keep it, so both styles must parse the
same. The broker decodes the bytes as UTF-8 *with replacement* first, then splits; pairs
without 0x01, with an empty name or an empty value are dropped, and a repeated name keeps
its last value (Java ``HashMap.put``). Batch members really do carry repeated names
(batch-level ``UNIQ_KEY``/``CLUSTER`` appended after the member's own), so "last wins"
decides which UNIQ_KEY a message has.

From 5.2.0 a broker may append a 20-byte ``__CRC32#`` trailer whose decimal digits are
written least-significant first. It is read from the last 20 bytes, never from the parsed
map: on batch members it is glued onto the last value.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
NAME_VALUE_SEPARATOR_BYTE = b"\x01"
PROPERTY_SEPARATOR_BYTE = b"\x02"
KEY_SEPARATOR = " "

# Well-known names (MessageConst); only the ones a decoder or checker reads.
KEYS = "KEYS"
TAGS = "TAGS"
UNIQ_KEY = "UNIQ_KEY"
WAIT = "WAIT"
DELAY = "DELAY"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
TRANSACTION_ID = "__transactionId__"
TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
CLUSTER = "CLUSTER"
INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
INNER_NUM = "INNER_NUM"
INNER_BASE = "INNER_BASE"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
SHARDING_KEY = "__SHARDINGKEY"
DUP_INFO = "DUP_INFO"
CRC32 = "__CRC32#"
TRANSIENT_PREFIX = "__RMQ.TRANSIENT."

# The 5.x property CRC trailer: "__CRC32#" 0x01 + ten digits + 0x02 (CRC32_RESERVED_LEN).
CRC32_RESERVED_LEN = 20
CRC32_TRAILER_PREFIX = b"__CRC32#\x01"
CRC32_DIGITS = 10


class PropertyAccess:
    """``tags``, ``keys`` and ``uniq_key`` of anything with a parsed ``properties`` map:
    a commitlog record and an inner-batch member read them the same way."""

    __slots__ = ()
    properties: Mapping[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(UNIQ_KEY)


def parse_properties(raw: bytes | bytearray | memoryview) -> dict[str, str]:
    """Properties as the broker's ``string2messageProperties`` sees them.

    Accepts both trailing styles (final 0x02 present or not). Never raises: undecodable
    bytes become U+FFFD, malformed pairs are dropped, later duplicates win.
    """
    text = bytes(raw).decode("utf-8", "replace")
    result: dict[str, str] = {}
    for chunk in text.split(PROPERTY_SEPARATOR):
        name, sep, value = chunk.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            result[name] = value
    return result


def encode_properties(properties: dict[str, str], *, trailing_separator: bool = True) -> bytes:
    """Serialize like ``messageProperties2String`` (``trailing_separator=False`` = 4.9.1-5.1.4)."""
    text = "".join(
        f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}"
        for name, value in properties.items()
    )
    if not trailing_separator and text:
        text = text[:-1]
    return text.encode("utf-8")


def split_keys(keys: str | None) -> list[str]:
    """KEYS split on single spaces, empty pieces dropped (what the index builder indexes)."""
    if not keys:
        return []
    return [key for key in keys.split(KEY_SEPARATOR) if key]


@dataclass(frozen=True)
class CrcTrailer:
    """The ``__CRC32#`` trailer found in the last 20 bytes of a PROPERTIES field.

    ``value`` is None when the marker is there but the digits are not ten ASCII digits.
    """

    value: int | None


def find_crc_trailer(raw: bytes | bytearray | memoryview) -> CrcTrailer | None:
    """The CRC trailer of a PROPERTIES field, or None when the field has none."""
    if len(raw) < CRC32_RESERVED_LEN:
        return None
    tail = bytes(raw[-CRC32_RESERVED_LEN:])
    if not tail.startswith(CRC32_TRAILER_PREFIX) or tail[-1:] != PROPERTY_SEPARATOR_BYTE:
        return None
    return CrcTrailer(decode_crc_digits(tail[len(CRC32_TRAILER_PREFIX) : -1]))


def decode_crc_digits(digits: bytes) -> int | None:
    """Ten ASCII digits, least-significant first (123 is stored as ``3210000000``)."""
    if len(digits) != CRC32_DIGITS or not digits.isdigit():
        return None
    return int(digits[::-1].decode("ascii"))


def encode_crc_digits(value: int) -> bytes:
    """Inverse of :func:`decode_crc_digits`."""
    return str(value).encode("ascii")[::-1].ljust(CRC32_DIGITS, b"0")


def masked_crc32(data: bytes | bytearray | memoryview) -> int:
    """``UtilAll.crc32``: java.util.zip.CRC32 masked with 0x7FFFFFFF."""
    return zlib.crc32(data) & 0x7FFFFFFF


def verify_property_crc(record: bytes | bytearray | memoryview, stored: int | None) -> bool:
    """True if ``stored`` equals the masked CRC32 of all record bytes but the last 20.

    ``record`` is the whole record (TOTALSIZE bytes); the trailer covers everything
    before itself, after QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP were filled in.
    """
    if stored is None:
        return False
    return masked_crc32(memoryview(record)[: len(record) - CRC32_RESERVED_LEN]) == stored
