"""Baseline for the benchmark: a naive commitlog parser in the style of the seed blog post.

Like the blog's ``rocketmq_parser.py`` it reads each field from a buffered file object with
``f.read`` + ``struct.unpack``, one call per field, and builds a dict per record. Unlike
it, it is correct for the layouts the benchmark data uses (IPv4/IPv6 hosts per SYSFLAG,
v1/v2 magic, i32 port, i32 RECONSUMETIMES, BLANK -> next file). It verifies no CRC (the
blog's parser does not either) and does no resynchronisation: it stops at the first
record it cannot read.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from pathlib import Path

MESSAGE_MAGIC_V1 = -626843481
MESSAGE_MAGIC_V2 = -626843477
BLANK_MAGIC = -875286124


def _ip(raw: bytes) -> str:
    return socket.inet_ntop(socket.AF_INET6 if len(raw) == 16 else socket.AF_INET, raw)


def parse_file(path: Path, start: int = 0, end: int | None = None) -> Iterator[dict]:
    """Records starting in [start, end); ``start`` must be a record boundary."""
    with open(path, "rb") as f:
        f.seek(start)
        while end is None or f.tell() < end:
            head = f.read(4)
            if len(head) < 4:
                return
            (total,) = struct.unpack(">i", head)
            (magic,) = struct.unpack(">i", f.read(4))
            if magic not in (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2):
                return  # BLANK, zeros or garbage: end of this file's data
            (body_crc,) = struct.unpack(">i", f.read(4))
            (queue_id,) = struct.unpack(">i", f.read(4))
            (flag,) = struct.unpack(">i", f.read(4))
            (queue_offset,) = struct.unpack(">q", f.read(8))
            (physical_offset,) = struct.unpack(">q", f.read(8))
            (sysflag,) = struct.unpack(">i", f.read(4))
            (born_timestamp,) = struct.unpack(">q", f.read(8))
            born_ip = _ip(f.read(16 if sysflag & 0x10 else 4))
            (born_port,) = struct.unpack(">i", f.read(4))
            (store_timestamp,) = struct.unpack(">q", f.read(8))
            store_ip = _ip(f.read(16 if sysflag & 0x20 else 4))
            (store_port,) = struct.unpack(">i", f.read(4))
            (reconsume_times,) = struct.unpack(">i", f.read(4))
            (prepared_offset,) = struct.unpack(">q", f.read(8))
            (body_length,) = struct.unpack(">i", f.read(4))
            body = f.read(max(body_length, 0))
            if magic == MESSAGE_MAGIC_V2:
                (topic_length,) = struct.unpack(">h", f.read(2))
            else:
                (topic_length,) = struct.unpack(">b", f.read(1))
            topic = f.read(topic_length).decode("utf-8", "replace")
            (props_length,) = struct.unpack(">h", f.read(2))
            text = f.read(max(props_length, 0)).decode("utf-8", "replace")
            properties = {}
            for pair in text.split("\x02"):
                name, sep, value = pair.partition("\x01")
                if sep and name and value:
                    properties[name] = value
            yield {
                "total_size": total, "magic": magic, "body_crc": body_crc,
                "queue_id": queue_id, "flag": flag, "queue_offset": queue_offset,
                "physical_offset": physical_offset, "sysflag": sysflag,
                "born_timestamp": born_timestamp, "born_host": born_ip,
                "born_port": born_port, "store_timestamp": store_timestamp,
                "store_host": store_ip, "store_port": store_port,
                "reconsume_times": reconsume_times,
                "prepared_transaction_offset": prepared_offset, "body": body,
                "topic": topic, "properties": properties,
                "tags": properties.get("TAGS"), "keys": properties.get("KEYS", "").split(),
                "uniq_key": properties.get("UNIQ_KEY"),
            }
