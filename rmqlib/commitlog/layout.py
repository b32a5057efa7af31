"""Byte layout of a commitlog record: magic codes, field positions, SYSFLAG bits (spec §2).

Every integer is big-endian and signed. A MESSAGE record is::

    0  TOTALSIZE i32          36 SYSFLAG i32              48+B  STORETIMESTAMP i64
    4  MAGICCODE i32          40 BORNTIMESTAMP i64        56+B  STOREHOST (S bytes)
    8  BODYCRC i32            48 BORNHOST (B bytes)       56+B+S RECONSUMETIMES i32
    12 QUEUEID i32                                        60+B+S PREPARED TX OFFSET i64
    16 FLAG i32                                           68+B+S BODYLENGTH i32, BODY
    20 QUEUEOFFSET i64                                    then TOPICLENGTH (i8 v1 / i16 v2),
    28 PHYSICALOFFSET i64                                 TOPIC, PROPERTIESLENGTH i16, PROPS

B and S are 8 (IPv4 address + i32 port) or 20 (IPv6 + i32 port), chosen per field by
SYSFLAG bits 0x10 / 0x20. The IPV4_* constants give the positions when both are IPv4.
A BLANK record is only 8 bytes: i32 bytes-remaining-in-file and the BLANK magic.
"""

from __future__ import annotations

from enum import IntEnum

# Magic codes (CommitLog / MessageDecoder / MessageVersion), as signed i32.
MESSAGE_MAGIC_CODE_V1 = -626843481  # 0xDAA320A7, 1-byte topic length
MESSAGE_MAGIC_CODE_V2 = -626843477  # 0xDAA320AB, 2-byte topic length (>= 5.1.0)
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194, end-of-file filler
MESSAGE_MAGIC_CODES = frozenset((MESSAGE_MAGIC_CODE_V1, MESSAGE_MAGIC_CODE_V2))
MAGIC_BYTES_V1 = b"\xda\xa3\x20\xa7"
MAGIC_BYTES_V2 = b"\xda\xa3\x20\xab"
MAGIC_BYTES_BLANK = b"\xcb\xd4\x31\x94"

# BLANK: a message is appended only if TOTALSIZE + 8 <= bytes left; otherwise 8 bytes.
END_FILE_MIN_BLANK_LENGTH = 8
BLANK_RECORD_LENGTH = 8

# Fixed field positions (same for every layout).
TOTALSIZE_POS = 0
MAGICCODE_POS = 4
BODYCRC_POS = 8
QUEUEID_POS = 12
FLAG_POS = 16
QUEUEOFFSET_POS = 20
PHYSICALOFFSET_POS = 28
SYSFLAG_POS = 36
BORNTIMESTAMP_POS = 40
BORNHOST_POS = 48

# Host field lengths: address + i32 port.
IPV4_HOST_LENGTH = 8
IPV6_HOST_LENGTH = 20

# Positions when born and store host are both IPv4 (DEC constants use these).
IPV4_STORETIMESTAMP_POS = 56
IPV4_STOREHOST_POS = 64
IPV4_RECONSUMETIMES_POS = 72
IPV4_PREPARED_TX_OFFSET_POS = 76
IPV4_BODYLENGTH_POS = 84
IPV4_BODY_POS = 88

# Length rule (calMsgLength): TOTALSIZE = 74 + B + S + k + max(L,0) + T + max(P,0).
LENGTH_RULE_CONSTANT = 74
MIN_RECORD_LENGTH = LENGTH_RULE_CONSTANT + 2 * IPV4_HOST_LENGTH + 1  # 91: v1, IPv4, empty
MAX_RECORD_OVERHEAD = LENGTH_RULE_CONSTANT + 2 * IPV6_HOST_LENGTH + 2  # 116: v2, IPv6

# SYSFLAG bits (MessageSysFlag; the compression bits live in rmqlib.commitlog.compression).
COMPRESSED_FLAG = 0x001
MULTI_TAGS_FLAG = 0x002
TRANSACTION_TYPE_MASK = 0x00C
BORNHOST_V6_FLAG = 0x010
STOREHOSTADDRESS_V6_FLAG = 0x020
NEED_UNWRAP_FLAG = 0x040
INNER_BATCH_FLAG = 0x080


class TransactionType(IntEnum):
    """``MessageSysFlag.getTransactionValue`` = sysflag & 0xC."""

    NOT = 0x0
    PREPARED = 0x4
    COMMIT = 0x8
    ROLLBACK = 0xC


def host_lengths(sysflag: int) -> tuple[int, int]:
    """(B, S): born-host and store-host field lengths selected by SYSFLAG."""
    born = IPV6_HOST_LENGTH if sysflag & BORNHOST_V6_FLAG else IPV4_HOST_LENGTH
    store = IPV6_HOST_LENGTH if sysflag & STOREHOSTADDRESS_V6_FLAG else IPV4_HOST_LENGTH
    return born, store


def topic_length_size(magic: int) -> int:
    """k: bytes of TOPICLENGTH, 1 for v1 and 2 for v2."""
    return 2 if magic == MESSAGE_MAGIC_CODE_V2 else 1


def message_version(magic: int) -> int:
    """1 or 2, from the magic code."""
    return 2 if magic == MESSAGE_MAGIC_CODE_V2 else 1


def store_timestamp_pos(born: int) -> int:
    return BORNHOST_POS + born


def store_host_pos(born: int) -> int:
    return BORNHOST_POS + born + 8


def reconsume_times_pos(born: int, store: int) -> int:
    return BORNHOST_POS + born + 8 + store


def prepared_tx_offset_pos(born: int, store: int) -> int:
    return reconsume_times_pos(born, store) + 4


def body_length_pos(born: int, store: int) -> int:
    return reconsume_times_pos(born, store) + 12


def min_record_length(born: int, store: int, k: int) -> int:
    """TOTALSIZE of a record with empty body, topic and properties in this layout."""
    return LENGTH_RULE_CONSTANT + born + store + k


def expected_total_size(born: int, store: int, k: int, body_length: int, topic_length: int,
                        properties_length: int) -> int:
    """The length rule; negative BODYLENGTH / PROPERTIESLENGTH count as 0, as in the broker."""
    return (min_record_length(born, store, k) + max(body_length, 0) + topic_length
            + max(properties_length, 0))
