"""Topics, subscription groups and consumer offsets a 5.x broker keeps in RocksDB.

A 5.x broker keeps these three tables in RocksDB instead of their JSON files in one of three
layouts (docs/rocksdb.md has each one's source):

- **v1, one database per table** (``storeType=defaultRocksDB``, the default
  ``configManagerVersion=v1``; RocketMQ ``broker/.../config/v1/RocksDBConfigManager`` on
  ``common/.../config/ConfigRocksDBStorage``): ``config/topics/``,
  ``config/subscriptionGroups/``, ``config/consumerOffsets/``; column family ``default``,
  keys UTF-8 (the topic, the group, ``topic@group``), values JSON (a TopicConfig, a group
  config, ``{"offsetTable": {queue: offset}}``); the data version is the JSON value of key
  ``kvDataVersionKey`` in column family ``kvDataVersion``.
- **v1, one database for every table** (``useSingleRocksDBForAllConfigs=true``, 5.5.0):
  ``config/metadata/``, the same keys and values in column families ``topic``,
  ``subscriptionGroup`` and ``consumerOffset``, each table's data version in
  ``<family>Version``.
- **v2** (``configManagerVersion=v2``, any ``storeType``; ``broker/.../config/v2/``):
  ``config/rdb/``, one column family, binary big-endian keys ``01 | table id (int16) |
  record type`` (``01`` data version, ``02`` data) then the name(s): a topic or group is
  ``len (int16) | name`` with the value ``01`` (JSON) + the JSON config; a consumer offset is
  ``len | group | 01 | len | topic | 01 | queue id (int32)`` with an int64 value. A v2
  broker persists only what the admin API created or changed (topics, groups); the ones it
  creates itself (system topics, retry topics, auto-created groups) stay in its memory.

:func:`read_config_document` turns a table back into the document its JSON file would hold
(``topicConfigTable``, ``subscriptionGroupTable``, ``offsetTable`` and ``dataVersion``; v2
also ``pullOffsetTable``, as consumerOffset.json has), so the JSON parsers read every
layout. A record that breaks its layout is kept out of the document and returned in
``bad`` with the reason: never dropped silently.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqlib.rocksdb.database import Database, is_database, open_readonly

# The three layouts (in the order a reader prefers them when a store holds several).
V2, V1_SINGLE, V1 = "v2", "v1-single", "v1"
V2_DIRECTORY, SINGLE_DIRECTORY = "rdb", "metadata"

# v1: the data version of a table (JSON), in its version column family.
VERSION_FAMILY, VERSION_KEY = "kvDataVersion", b"kvDataVersionKey"
SINGLE_VERSION_SUFFIX = "Version"

# v2 keys (broker/.../config/v2/TablePrefix, TableId, RecordPrefix, ConfigStorage).
V2_TABLE_PREFIX = 0x01
V2_RECORD_VERSION, V2_RECORD_DATA = 0x01, 0x02
V2_HEADER = struct.Struct(">BhB")          # table prefix, table id, record type
V2_LENGTH = struct.Struct(">h")            # a name's byte length
V2_QUEUE_ID = struct.Struct(">i")
V2_OFFSET = struct.Struct(">q")            # a consumer / pull offset value
V2_VERSION = struct.Struct(">qqq")         # stateVersion, timestamp, counter
V2_VERSION_KEY = b"data_version"
V2_SERIALIZATION_JSON = 0x01               # SerializationType.JSON
V2_SEPARATOR = 0x01                        # AbstractRocksDBStorage.CTRL_1
V2_CONSUMER_OFFSET, V2_PULL_OFFSET, V2_TOPIC, V2_GROUP = 1, 2, 3, 4
V2_TABLE_IDS = frozenset((V2_CONSUMER_OFFSET, V2_PULL_OFFSET, V2_TOPIC, V2_GROUP))


@dataclass(frozen=True)
class ConfigTable:
    """Where one JSON config file's table lives in each RocksDB layout."""

    json_file: str      # the file it replaces
    table: str          # the document's table field
    directory: str      # v1: its database, config/<directory>/
    family: str         # v1 single database: its column family
    table_id: int       # v2: its TableId


TABLES = (
    ConfigTable("topics.json", "topicConfigTable", "topics", "topic", V2_TOPIC),
    ConfigTable("subscriptionGroup.json", "subscriptionGroupTable", "subscriptionGroups",
                "subscriptionGroup", V2_GROUP),
    ConfigTable("consumerOffset.json", "offsetTable", "consumerOffsets", "consumerOffset",
                V2_CONSUMER_OFFSET),
)
BY_JSON_FILE = {table.json_file: table for table in TABLES}
#: Every directory of config/ that can be a RocksDB config database.
CONFIG_DATABASES = (V2_DIRECTORY, SINGLE_DIRECTORY, *(t.directory for t in TABLES))


@dataclass(frozen=True)
class TableLocation:
    """The database a table is read from, in which layout, and the databases that also
    hold it but are not read (left from an earlier layout of the same broker)."""

    table: ConfigTable
    layout: str
    path: Path
    superseded: tuple[Path, ...] = ()


@dataclass
class RocksConfigDocument:
    """One table read from RocksDB as the JSON document its file would hold, and the keys
    whose records break the layout (kept out of the document, with the reason)."""

    data: dict[str, Any]
    path: Path
    layout: str = V1
    bad: list[tuple[bytes, str]] = field(default_factory=list)


def _candidates(config_dir: Path, table: ConfigTable) -> list[tuple[str, Path]]:
    return [(V2, config_dir / V2_DIRECTORY), (V1_SINGLE, config_dir / SINGLE_DIRECTORY),
            (V1, config_dir / table.directory)]


def locate_table(config_dir: str | Path, json_file: str) -> TableLocation | None:
    """The RocksDB database standing in for ``json_file`` in ``config_dir``, if any.

    The store does not say which layout its broker runs now; when several databases exist
    (a broker moved from one layout to another leaves the old one behind), the newest
    layout is read (v2, then the single database, then the per-table one) and the others
    are named in ``superseded``.
    """
    table = BY_JSON_FILE.get(json_file)
    if table is None:
        return None
    present = [(layout, path) for layout, path in _candidates(Path(config_dir), table)
               if is_database(path)]
    if not present:
        return None
    (layout, path), *others = present
    return TableLocation(table, layout, path, tuple(p for _, p in others))


def read_config_document(location: TableLocation) -> RocksConfigDocument:
    """The document of a table rebuilt from the database ``location`` names."""
    with open_readonly(location.path) as db:
        if location.layout == V2:
            return _read_v2(db, location)
        family = "default" if location.layout == V1 else location.table.family
        version = (VERSION_FAMILY if location.layout == V1
                   else location.table.family + SINGLE_VERSION_SUFFIX)
        return _read_v1(db, location, family, version)


def _read_v1(db: Database, location: TableLocation, family: str,
             version_family: str) -> RocksConfigDocument:
    offsets = location.table.table == "offsetTable"
    rows: dict[str, Any] = {}
    bad: list[tuple[bytes, str]] = []
    for key, value in db.items(family):
        parsed = _json_object(value)
        if isinstance(parsed, str):
            bad.append((key, parsed))
            continue
        name = key.decode("utf-8", errors="replace")
        rows[name] = parsed["offsetTable"] if offsets and \
            isinstance(parsed.get("offsetTable"), dict) else parsed
    data: dict[str, Any] = {location.table.table: rows}
    raw = db.get(version_family, VERSION_KEY)
    version = None if raw is None else _json_object(raw)
    if isinstance(version, dict):
        data["dataVersion"] = version
    return RocksConfigDocument(data, location.path, location.layout, bad)


def _read_v2(db: Database, location: TableLocation) -> RocksConfigDocument:
    table = location.table
    data, bad = decode_v2_table(table, db.items(start=v2_start_key(table)))
    return RocksConfigDocument(data, location.path, V2, bad)


def v2_start_key(table: ConfigTable) -> bytes | None:
    """Where a table's read starts in config/rdb (None: at the first key). Keys sort by
    table id, so a table is read from its first key to its last; the consumer offsets'
    read (table 1, the first) goes over the whole database instead and also accounts for
    the records that belong to no table."""
    if table.table_id == V2_CONSUMER_OFFSET:
        return None
    return V2_HEADER.pack(V2_TABLE_PREFIX, table.table_id, 0)


def decode_v2_table(table: ConfigTable, pairs: Iterable[tuple[bytes, bytes]]
                    ) -> tuple[dict[str, Any], list[tuple[bytes, str]]]:
    """One table's document from config/rdb's (key, value) pairs in key order from
    :func:`v2_start_key`, and the records that break the layout (key, reason): every
    record of the table (and, for the consumer offsets, of no table) is in one or the
    other."""
    wanted = {table.table_id: table.table}
    if table.table_id == V2_CONSUMER_OFFSET:
        wanted[V2_PULL_OFFSET] = "pullOffsetTable"
    accounts_all = v2_start_key(table) is None
    data: dict[str, Any] = {name: {} for name in wanted.values()}
    bad: list[tuple[bytes, str]] = []
    for key, value in pairs:
        if len(key) < V2_HEADER.size or key[0] != V2_TABLE_PREFIX:
            if accounts_all:
                bad.append((key, "a record of no table: no 0x01 table prefix and id"))
            continue
        _, table_id, record = V2_HEADER.unpack_from(key)
        if table_id not in wanted:
            if accounts_all and table_id not in V2_TABLE_IDS:
                bad.append((key, f"a record of table id {table_id}, which no table has"))
            if not accounts_all:
                break
            continue
        problem = _read_v2_record(key, value, record, table_id, wanted, data)
        if problem is not None:
            bad.append((key, problem))
    return data, bad


def _read_v2_record(key: bytes, value: bytes, record: int, table_id: int,
                    wanted: dict[int, str], data: dict[str, Any]) -> str | None:
    """Put one v2 record into ``data``; the reason when it breaks the layout."""
    body = key[V2_HEADER.size:]
    if record == V2_RECORD_VERSION:
        if table_id != next(iter(wanted)):
            return None  # the pull-offset table's own version
        if body != V2_VERSION_KEY or len(value) != V2_VERSION.size:
            return f"data version record of {len(value)} bytes under key {body!r}"
        state, timestamp, counter = V2_VERSION.unpack(value)
        data["dataVersion"] = {"stateVersion": state, "timestamp": timestamp,
                               "counter": counter}
        return None
    if record != V2_RECORD_DATA:
        return f"record type {record:#04x} is neither data version nor data"
    if table_id in (V2_CONSUMER_OFFSET, V2_PULL_OFFSET):
        return _read_v2_offset(body, value, data[wanted[table_id]])
    names = _v2_names(body, 1)
    if isinstance(names, str):
        return names
    if not value or value[0] != V2_SERIALIZATION_JSON:
        return "value is not of serialization type JSON (0x01)"
    parsed = _json_object(value[1:])
    if isinstance(parsed, str):
        return parsed
    data[wanted[table_id]][names[0]] = parsed
    return None


def _read_v2_offset(body: bytes, value: bytes, table: dict[str, Any]) -> str | None:
    names = _v2_names(body, 2, V2_QUEUE_ID.size)
    if isinstance(names, str):
        return names
    if len(value) != V2_OFFSET.size:
        return f"offset value of {len(value)} bytes, not {V2_OFFSET.size}"
    group, topic = names
    (queue_id,) = V2_QUEUE_ID.unpack_from(body, len(body) - V2_QUEUE_ID.size)
    table.setdefault(f"{topic}@{group}", {})[str(queue_id)] = V2_OFFSET.unpack(value)[0]
    return None


def _v2_names(body: bytes, count: int, tail: int = 0) -> list[str] | str:
    """``count`` length-prefixed UTF-8 names (separated by 0x01) that fill ``body`` up to
    ``tail`` bytes; or why they do not."""
    names: list[str] = []
    at = 0
    for index in range(count):
        if index:
            if at >= len(body) or body[at] != V2_SEPARATOR:
                return f"no 0x01 separator after name {index}"
            at += 1
        if at + V2_LENGTH.size > len(body):
            return f"key ends inside the length of name {index + 1}"
        (length,) = V2_LENGTH.unpack_from(body, at)
        at += V2_LENGTH.size
        if length < 0 or at + length > len(body):
            return f"name {index + 1} of {length} bytes runs past the key"
        try:
            names.append(body[at:at + length].decode("utf-8"))
        except UnicodeDecodeError as error:
            return f"name {index + 1} is not UTF-8: {error}"
        at += length
    if tail:
        if at >= len(body) or body[at] != V2_SEPARATOR:
            return f"no 0x01 separator after name {count}"
        at += 1
    if len(body) - at != tail:
        return f"{len(body) - at} bytes after the names, not {tail}"
    return names


def _json_object(value: bytes) -> dict[str, Any] | str:
    """The JSON object a value holds, or why it holds none."""
    try:
        parsed = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"value is not JSON: {error}"
    return parsed if isinstance(parsed, dict) else "value is JSON but not an object"
