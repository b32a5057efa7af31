"""The two message ids of RocketMQ (spec §2.7).

* offsetMsgId: what the broker calls msgId. Uppercase hex of store-host address (4 or
  16 bytes), i32 port and i64 commitlog offset: 32 hex chars for IPv4, 56 for IPv6. The
  decoder picks the address length from the string length, like ``decodeMessageId``.
* UNIQ_KEY: the id clients see, made by the Java client's ``MessageClientIDSetter``:
  client IP (4|16), low 16 bits of the PID, class-loader hash (i32), ms since the start
  of the producer's current month as a *wrapped u32*, and a 16-bit counter. Other SDKs
  use other layouts, so decoding a UNIQ_KEY is best effort.
"""

from __future__ import annotations

import ipaddress
import re
import struct
from dataclasses import dataclass

from rmqlib.errors import CorruptDataError

IPV4_OFFSET_MSG_ID_LEN = 32
IPV6_OFFSET_MSG_ID_LEN = 56
IPV4_UNIQ_KEY_LEN = 32
IPV6_UNIQ_KEY_LEN = 56

_HEX = re.compile(r"[0-9A-Fa-f]*")
_PORT_OFFSET = struct.Struct(">iq")
_UNIQ_TAIL = struct.Struct(">HiIH")  # pid, class-loader hash, month offset, counter


def ip_to_string(address: bytes) -> str:
    """Dotted IPv4 or compressed IPv6 text for 4 or 16 network-order bytes."""
    return str(ipaddress.ip_address(bytes(address)))


def encode_offset_msg_id(host: str, port: int, commitlog_offset: int) -> str:
    """offsetMsgId for a record stored by ``host:port`` at ``commitlog_offset``."""
    packed = ipaddress.ip_address(host).packed
    return (packed + _PORT_OFFSET.pack(port, commitlog_offset)).hex().upper()


def offset_msg_id_from_bytes(store_host: bytes, port: int, commitlog_offset: int) -> str:
    """offsetMsgId from raw address bytes (the form the record stores)."""
    return (bytes(store_host) + _PORT_OFFSET.pack(port, commitlog_offset)).hex().upper()


@dataclass(frozen=True)
class OffsetMsgId:
    """A decoded offsetMsgId."""

    host: str
    port: int
    commitlog_offset: int


def decode_offset_msg_id(msg_id: str) -> OffsetMsgId:
    """Split an offsetMsgId; CorruptDataError if it is not 32 or 56 hex chars."""
    raw = _hex_bytes(msg_id, (IPV4_OFFSET_MSG_ID_LEN, IPV6_OFFSET_MSG_ID_LEN), "offsetMsgId")
    address_len = len(raw) - _PORT_OFFSET.size
    port, offset = _PORT_OFFSET.unpack_from(raw, address_len)
    return OffsetMsgId(ip_to_string(raw[:address_len]), port, offset)


@dataclass(frozen=True)
class UniqKey:
    """A UNIQ_KEY made by the Java client's layout."""

    client_ip: str
    pid: int  # low 16 bits of the producer's PID
    class_loader_hash: int  # signed i32
    month_offset_ms: int  # u32: ms since the producer's local month start, wrapped
    counter: int  # u16

    def month_start_ms(self, born_timestamp: int) -> int:
        """Approximate producer-local start of month, from the record's born time.

        The month is not encoded; the id is made just before sending, so
        ``bornTimestamp - offset`` lands near that month start (spec §2.7). The u32
        wrap (after ~49.7 days, impossible within one month) is not undone.
        """
        return born_timestamp - self.month_offset_ms


def decode_uniq_key(uniq_key: str) -> UniqKey:
    """Decode a Java-client UNIQ_KEY; CorruptDataError for any other shape."""
    raw = _hex_bytes(uniq_key, (IPV4_UNIQ_KEY_LEN, IPV6_UNIQ_KEY_LEN), "UNIQ_KEY")
    address_len = len(raw) - _UNIQ_TAIL.size
    pid, class_loader_hash, month_offset, counter = _UNIQ_TAIL.unpack_from(raw, address_len)
    return UniqKey(ip_to_string(raw[:address_len]), pid, class_loader_hash, month_offset,
                   counter)


def encode_uniq_key(client_ip: str, pid: int, class_loader_hash: int, month_offset_ms: int,
                    counter: int) -> str:
    """Build a UNIQ_KEY with the Java client's layout (values are wrapped to their widths)."""
    packed = ipaddress.ip_address(client_ip).packed
    tail = _UNIQ_TAIL.pack(pid & 0xFFFF, _to_i32(class_loader_hash),
                           month_offset_ms & 0xFFFFFFFF, counter & 0xFFFF)
    return (packed + tail).hex().upper()


def _to_i32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _hex_bytes(text: str, lengths: tuple[int, ...], what: str) -> bytes:
    if len(text) not in lengths:
        raise CorruptDataError(
            f"{what} {text!r} must be {' or '.join(map(str, lengths))} hex chars"
        )
    if not _HEX.fullmatch(text):
        raise CorruptDataError(f"{what} {text!r} is not hexadecimal")
    return bytes.fromhex(text)
