"""Test-only writers for consume queues, index files, checkpoints and fastjson text.

Written from docs/store-format.md (§4, §5, §6, §7) and the broker code it cites, *not*
from rmqlib, so round-trip tests compare two independent readings of the spec. Each
writer mimics what the broker does (e.g. ``IndexWriter.put`` follows ``IndexFile.putKey``
step by step), including the quirks (indexCount starts at 1, seeded header).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field

# ----------------------------------------------------------------------------- Java hash


def java_hash(text: str) -> int:
    """String.hashCode by code point, splitting supplementary chars into surrogates."""
    h = 0
    for char in text:
        cp = ord(char)
        if cp >= 0x10000:
            cp -= 0x10000
            units: tuple[int, ...] = (0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF))
        else:
            units = (cp,)
        for unit in units:
            h = (h * 31 + unit) % 2**32
    return h - 2**32 if h >= 2**31 else h


def index_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: Math.abs, negative (MIN_VALUE) result -> 0."""
    h = java_hash(key)
    positive = -h if h < 0 else h
    return 0 if positive >= 2**31 else positive


# ----------------------------------------------------------------------------- consume queue

FILLER = (0, 0x7FFFFFFF, 0)


def cq_unit(offset: int, size: int, tags_code: int) -> bytes:
    return struct.pack(">qiq", offset, size, tags_code)


def cq_file(units: list[tuple[int, int, int]], file_size: int | None = None) -> bytes:
    body = b"".join(cq_unit(*unit) for unit in units)
    if file_size is None:
        return body
    assert len(body) <= file_size
    return body + bytes(file_size - len(body))


def ext_address(file_offset: int) -> int:
    """ConsumeQueueExt.decorate: offset + Long.MIN_VALUE."""
    return file_offset - 2**63


def cqx_unit(tags_code: int, store_time: int, bitmap: bytes = b"") -> bytes:
    return struct.pack(">hqqh", 20 + len(bitmap), tags_code, store_time, len(bitmap)) + bitmap


def bcq_unit(
    offset: int,
    size: int,
    tags_code: int,
    store_time: int,
    base: int,
    batch: int,
    compacted: int = -1,
    reserved: int = 0,
) -> bytes:
    return struct.pack(">qiqqqhii", offset, size, tags_code, store_time, base, batch,
                       compacted, reserved)


# ----------------------------------------------------------------------------- index file


@dataclass
class IndexWriter:
    """An in-memory index file written exactly like IndexFile.putKey."""

    hash_slot_num: int
    index_num: int
    seed_end_phy_offset: int = 0
    seed_end_timestamp: int = 0
    buf: bytearray = field(init=False)
    begin_timestamp: int = field(init=False, default=0)
    end_timestamp: int = field(init=False, default=0)
    begin_phy_offset: int = field(init=False, default=0)
    end_phy_offset: int = field(init=False, default=0)
    hash_slot_count: int = field(init=False, default=0)
    index_count: int = field(init=False, default=1)
    written_index_count: int = field(init=False, default=0)  # header field on disk

    def __post_init__(self) -> None:
        self.buf = bytearray(40 + 4 * self.hash_slot_num + 20 * self.index_num)
        if self.seed_end_phy_offset > 0:
            self.begin_phy_offset = self.end_phy_offset = self.seed_end_phy_offset
        if self.seed_end_timestamp > 0:
            self.begin_timestamp = self.end_timestamp = self.seed_end_timestamp
        self._write_header()

    @classmethod
    def resume(cls, data: bytes, hash_slot_num: int, index_num: int) -> IndexWriter:
        """A writer that goes on with an index file already written (as the broker maps
        the last file again after a restart): header, slots and entries as they are."""
        writer = cls(hash_slot_num, index_num)
        writer.buf[:] = data
        (writer.begin_timestamp, writer.end_timestamp, writer.begin_phy_offset,
         writer.end_phy_offset, writer.hash_slot_count,
         writer.written_index_count) = struct.unpack_from(">qqqqii", data, 0)
        writer.index_count = max(writer.written_index_count, 1)
        return writer

    @property
    def full(self) -> bool:
        """IndexFile.isWriteFull: no entry left."""
        return self.index_count >= self.index_num

    def _write_header(self) -> None:
        struct.pack_into(
            ">qqqqii", self.buf, 0, self.begin_timestamp, self.end_timestamp,
            self.begin_phy_offset, self.end_phy_offset, self.hash_slot_count,
            self.written_index_count,
        )

    def put(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        if self.index_count >= self.index_num:
            return False
        key_hash = index_hash(key)
        slot_pos = key_hash % self.hash_slot_num
        abs_slot = 40 + 4 * slot_pos
        (slot_value,) = struct.unpack_from(">i", self.buf, abs_slot)
        if slot_value <= 0 or slot_value > self.index_count:
            slot_value = 0
        diff = store_timestamp - self.begin_timestamp
        diff = abs(diff) // 1000 * (1 if diff >= 0 else -1)  # Java long division
        if self.begin_timestamp <= 0:
            diff = 0
        elif diff > 2**31 - 1:
            diff = 2**31 - 1
        elif diff < 0:
            diff = 0
        abs_index = 40 + 4 * self.hash_slot_num + 20 * self.index_count
        struct.pack_into(">iqii", self.buf, abs_index, key_hash, phy_offset, diff, slot_value)
        struct.pack_into(">i", self.buf, abs_slot, self.index_count)
        if self.index_count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if slot_value == 0:
            self.hash_slot_count += 1
        self.index_count += 1
        self.written_index_count = self.index_count
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self._write_header()
        return True

    def data(self) -> bytes:
        return bytes(self.buf)


# ----------------------------------------------------------------------------- checkpoints


def checkpoint_bytes(
    physic: int,
    logics: int,
    index: int,
    master_flushed: int | None = None,
    confirm: int | None = None,
    size: int = 4096,
    logics_physical: int | None = None,
) -> bytes:
    values = [physic, logics, index]
    if master_flushed is not None or confirm is not None or logics_physical is not None:
        values += [master_flushed or 0, confirm or 0]
    if logics_physical is not None:
        values.append(logics_physical)
    body = struct.pack(f">{len(values)}q", *values)
    return body + bytes(size - len(body))


def timercheck_bytes(*values: int, size: int = 4096) -> bytes:
    body = struct.pack(f">{len(values)}q", *values)
    return body + bytes(size - len(body))


# ----------------------------------------------------------------------------- fastjson


def _string(text: str, browser_compatible: bool) -> str:
    return json.dumps(text, ensure_ascii=browser_compatible)


def render_fastjson(
    value: object, pretty: bool = True, browser_compatible: bool = False, _depth: int = 0
) -> str:
    """fastjson-style text: int dict keys unquoted, tab-indented when pretty."""
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = []
        for key, item in value.items():
            rendered_key = str(key) if isinstance(key, int) else _string(key, browser_compatible)
            rendered = render_fastjson(item, pretty, browser_compatible, _depth + 1)
            items.append(f"{rendered_key}:{rendered}")
        return _container("{", "}", items, pretty, _depth)
    if isinstance(value, list):
        if not value:
            return "[]"
        items = [render_fastjson(v, pretty, browser_compatible, _depth + 1) for v in value]
        return _container("[", "]", items, pretty, _depth)
    if isinstance(value, str):
        return _string(value, browser_compatible)
    return json.dumps(value)


def _container(open_: str, close: str, items: list[str], pretty: bool, depth: int) -> str:
    if not pretty:
        return open_ + ",".join(items) + close
    inner = "\t" * (depth + 1)
    return open_ + "\n" + ",\n".join(inner + i for i in items) + "\n" + "\t" * depth + close
