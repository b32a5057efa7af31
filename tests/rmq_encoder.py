"""Test-only encoder of RocketMQ commitlog bytes, written from docs/store-format.md §2.

Deliberately independent of rmqlib (no imports from it), so decoder bugs cannot cancel
out. It writes what the broker writes: MESSAGE records (v1 / v2 magic, IPv4 / IPv6 per
host, every compression codec, transaction sysflags, properties with or without the final
0x02, optional 5.x ``__CRC32#`` trailer), 8-byte BLANK records, and whole segment files
laid out the broker's way (records tile from 0, a BLANK when record + 8 bytes no longer
fit, zeros after it, an all-zero pre-allocated next file).
"""

from __future__ import annotations

import ipaddress
import os
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import lz4.frame
import zstandard

MAGIC_V1 = 0xDAA320A7
MAGIC_V2 = 0xDAA320AB
MAGIC_BLANK = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 8

SF_COMPRESSED = 0x1
SF_MULTI_TAGS = 0x2
SF_TX_PREPARED = 0x4
SF_TX_COMMIT = 0x8
SF_TX_ROLLBACK = 0xC
SF_BORN_V6 = 0x10
SF_STORE_V6 = 0x20
SF_NEED_UNWRAP = 0x40
SF_INNER_BATCH = 0x80

CODEC_IDS = {"zlib-legacy": 0, "lz4": 1, "zstd": 2, "zlib": 3}


def java_crc32(data: bytes) -> int:
    """UtilAll.crc32: CRC32 & 0x7FFFFFFF."""
    return zlib.crc32(data) & 0x7FFFFFFF


def compress(body: bytes, codec: str) -> bytes:
    if codec in ("zlib", "zlib-legacy"):
        return zlib.compress(body)
    if codec == "lz4":
        return lz4.frame.compress(body)
    if codec == "zstd":
        # zstd-jni streams do not always record the content size; do the same.
        return zstandard.ZstdCompressor(write_content_size=False).compress(body)
    raise ValueError(codec)


def encode_properties(pairs: Sequence[tuple[str, str]], trailing_separator: bool) -> bytes:
    text = "".join(f"{name}\x01{value}\x02" for name, value in pairs)
    if not trailing_separator and text:
        text = text[:-1]
    return text.encode("utf-8")


def crc_digits(value: int) -> bytes:
    """Decimal digits least-significant first, right-padded with '0' to 10."""
    return str(value)[::-1].ljust(10, "0").encode("ascii")


def host_bytes(host: str, port: int) -> bytes:
    return ipaddress.ip_address(host).packed + struct.pack(">i", port)


@dataclass
class Message:
    """Everything the broker writes into one MESSAGE record."""

    topic: str | bytes = "TopicTest"
    body: bytes = b"hello"
    properties: Sequence[tuple[str, str]] | bytes = (("UNIQ_KEY", "0A00000100002A9F0000000001"),)
    trailing_separator: bool = True
    queue_id: int = 0
    flag: int = 0
    queue_offset: int = 0
    sysflag: int = 0  # tx type / multi-tags / batch bits; host & codec bits are derived
    born_timestamp: int = 1_700_000_000_000
    born_host: str = "10.0.0.1"
    born_port: int = 50123
    store_timestamp: int = 1_700_000_000_005
    store_host: str = "10.0.0.2"
    store_port: int = 10911
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    version: int | None = None  # None: v2 iff the topic is longer than 127 bytes
    compression: str | None = None  # zlib, zlib-legacy, lz4, zstd
    crc_trailer: bool = False
    body_crc: int | None = None  # override the computed BODYCRC (fault tests)

    def topic_bytes(self) -> bytes:
        return self.topic if isinstance(self.topic, bytes) else self.topic.encode("utf-8")

    def stored_body(self) -> bytes:
        return compress(self.body, self.compression) if self.compression else self.body

    def full_sysflag(self) -> int:
        flag = self.sysflag
        if ":" in self.born_host:
            flag |= SF_BORN_V6
        if ":" in self.store_host:
            flag |= SF_STORE_V6
        if self.compression:
            flag |= SF_COMPRESSED | (CODEC_IDS[self.compression] << 8)
        return flag

    def property_bytes(self) -> bytes:
        if isinstance(self.properties, bytes):
            return self.properties
        return encode_properties(self.properties, self.trailing_separator)

    def encoded_length(self) -> int:
        return len(encode(self, 0))


@dataclass(frozen=True)
class Encoded:
    """One encoded record and the parts a test wants to compare against."""

    record: bytes
    stored_body: bytes
    properties: bytes  # final PROPERTIES bytes, trailer included
    sysflag: int
    version: int
    body_crc: int


def build(msg: Message, physical_offset: int) -> Encoded:
    """Encode one MESSAGE record stored at global ``physical_offset``."""
    topic = msg.topic_bytes()
    version = msg.version or (2 if len(topic) > 127 else 1)
    body = msg.stored_body()
    props = msg.property_bytes()
    if msg.crc_trailer:
        if props and not props.endswith(b"\x02"):
            props += b"\x02"
        props += b"__CRC32#\x01" + b"0" * 10 + b"\x02"
    sysflag = msg.full_sysflag()
    born = host_bytes(msg.born_host, msg.born_port)
    store = host_bytes(msg.store_host, msg.store_port)
    topic_len = (struct.pack(">h", len(topic)) if version == 2
                 else struct.pack(">B", len(topic) & 0xFF))
    total = (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(born) + 8 + len(store) + 4 + 8
             + 4 + len(body) + len(topic_len) + len(topic) + 2 + len(props))
    body_crc = java_crc32(body) if msg.body_crc is None else msg.body_crc
    record = bytearray()
    record += struct.pack(">iIiiiqqiq", total, MAGIC_V2 if version == 2 else MAGIC_V1,
                          body_crc, msg.queue_id, msg.flag, msg.queue_offset,
                          physical_offset, sysflag, msg.born_timestamp)
    record += born
    record += struct.pack(">q", msg.store_timestamp)
    record += store
    record += struct.pack(">iqi", msg.reconsume_times, msg.prepared_transaction_offset,
                          len(body))
    record += body + topic_len + topic + struct.pack(">h", len(props)) + props
    assert len(record) == total
    if msg.crc_trailer:
        record[-11:-1] = crc_digits(java_crc32(bytes(record[:-20])))
        props = props[:-11] + bytes(record[-11:])
    return Encoded(bytes(record), body, props, sysflag, version, body_crc)


def encode(msg: Message, physical_offset: int) -> bytes:
    return build(msg, physical_offset).record


def expected_properties(raw: bytes) -> dict[str, str]:
    """The spec's parsing rule (§2.5), written out independently of rmqlib."""
    result: dict[str, str] = {}
    for chunk in raw.decode("utf-8", "replace").split("\x02"):
        name, sep, value = chunk.partition("\x01")
        if sep and name and value:
            result[name] = value
    return result


def encode_blank(remaining: int) -> bytes:
    return struct.pack(">iI", remaining, MAGIC_BLANK)


@dataclass
class Placed:
    """Where the writer put a message, and what it wrote."""

    physical_offset: int
    segment_start: int
    position: int
    message: Message
    encoded: Encoded

    @property
    def length(self) -> int:
        return len(self.encoded.record)


@dataclass
class CommitLogWriter:
    """Lays messages out over fixed-size segment files like the broker's append path.

    Queue offsets are assigned per (topic, queue) in append order; PREPARED/ROLLBACK
    records get 0 (CL doAppend).
    """

    file_size: int
    segments: list[bytearray] = field(default_factory=list)
    placed: list[Placed] = field(default_factory=list)
    position: int = 0
    assign_queue_offsets: bool = True
    _next_queue_offset: dict[tuple[bytes, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.segments.append(bytearray(self.file_size))

    @property
    def offset(self) -> int:
        return (len(self.segments) - 1) * self.file_size + self.position

    def append(self, msg: Message) -> Placed:
        if self.assign_queue_offsets:
            msg = self._with_queue_offset(msg)
        length = msg.encoded_length()
        if length + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise ValueError(f"a {length}-byte record never fits a {self.file_size}-byte file")
        if self.position + length + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            self.roll()
        encoded = build(msg, self.offset)
        self.segments[-1][self.position : self.position + length] = encoded.record
        placed = Placed(self.offset, self.offset - self.position, self.position, msg, encoded)
        self.placed.append(placed)
        self.position += length
        return placed

    def roll(self) -> None:
        """Write the BLANK and continue in a new file."""
        remaining = self.file_size - self.position
        self.segments[-1][self.position : self.position + 8] = encode_blank(remaining)
        self.segments.append(bytearray(self.file_size))
        self.position = 0

    def _with_queue_offset(self, msg: Message) -> Message:
        if msg.sysflag & 0xC in (SF_TX_PREPARED, SF_TX_ROLLBACK):
            return replace(msg, queue_offset=0)
        key = (msg.topic_bytes(), msg.queue_id)
        offset = self._next_queue_offset.get(key, 0)
        self._next_queue_offset[key] = offset + 1
        return replace(msg, queue_offset=offset)

    def write(self, directory: str | Path, *, preallocate_next: bool = True,
              trim_last: int | None = None) -> list[Path]:
        """Write the segment files; optionally one extra all-zero pre-created file, and
        ``trim_last`` cuts the last written file to that many bytes (a truncated copy)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        paths = []
        buffers: list[bytes | bytearray] = list(self.segments)
        if preallocate_next:
            buffers.append(bytes(self.file_size))
        for index, data in enumerate(buffers):
            path = directory / f"{index * self.file_size:020d}"
            if trim_last is not None and index == len(self.segments) - 1:
                data = data[:trim_last]
            path.write_bytes(bytes(data))
            paths.append(path)
        return paths


def write_messages(directory: str | Path, messages: Iterable[Message], file_size: int,
                   **kwargs: object) -> CommitLogWriter:
    writer = CommitLogWriter(file_size)
    for msg in messages:
        writer.append(msg)
    writer.write(directory, **kwargs)  # type: ignore[arg-type]
    return writer


def sample_messages(count: int, *, body_size: int = 100, seed: int = 0) -> list[Message]:
    """Ordinary-looking traffic: a few topics and queues, tags, keys, unique ids."""
    import random

    rng = random.Random(seed)
    topics = ["OrderTopic", "PaymentTopic", "AuditTopic"]
    out = []
    for i in range(count):
        body = rng.randbytes(body_size) if body_size else b""
        props = [("KEYS", f"order-{i} user-{i % 97}"), ("TAGS", f"tag{i % 5}"),
                 ("UNIQ_KEY", f"0A000001{os.getpid() & 0xFFFF:04X}00000000{i:012X}"),
                 ("CLUSTER", "DefaultCluster")]
        out.append(Message(topic=topics[i % 3], body=body, properties=props,
                           queue_id=i % 4, born_timestamp=1_700_000_000_000 + i,
                           store_timestamp=1_700_000_000_010 + i,
                           trailing_separator=bool(i % 2)))
    return out
