"""Topics, subscription groups and consumer offsets a 5.x broker keeps in RocksDB.

With ``storeType=defaultRocksDB`` and the default ``configManagerVersion=v1`` the broker's
config managers (RocketMQ ``broker/.../config/v1/RocksDBTopicConfigManager``,
``RocksDBSubscriptionGroupManager``, ``RocksDBConsumerOffsetManager`` on
``common/.../config/ConfigRocksDBStorage``) keep one database per table instead of the
JSON file, and write no JSON file for it:

- ``config/topics/``: key the topic name, value one TopicConfig;
- ``config/subscriptionGroups/``: key the group name, value one group config;
- ``config/consumerOffsets/``: key ``topic@group``, value ``{"offsetTable": {queue: offset}}``;

keys UTF-8, values JSON, in column family ``default``; the table's data version is the JSON
value of key ``kvDataVersionKey`` in column family ``kvDataVersion``.
:func:`read_config_document` turns
each database back into the document its JSON file would hold (``topicConfigTable``,
``subscriptionGroupTable``, ``offsetTable`` and ``dataVersion``), so the JSON parsers read
both. Not decoded yet: the single database of ``useSingleRocksDBForAllConfigs``
(``config/metadata/``) and ``configManagerVersion=v2`` (``config/rdb/``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqlib.rocksdb.database import is_database, open_readonly

VERSION_FAMILY, VERSION_KEY = "kvDataVersion", b"kvDataVersionKey"


@dataclass(frozen=True)
class ConfigTable:
    """Where one JSON config file's table lives in RocksDB, and how its document looks."""

    directory: str      # under config/
    json_file: str      # the file it replaces
    table: str          # the document's table field


TABLES = (
    ConfigTable("topics", "topics.json", "topicConfigTable"),
    ConfigTable("subscriptionGroups", "subscriptionGroup.json", "subscriptionGroupTable"),
    ConfigTable("consumerOffsets", "consumerOffset.json", "offsetTable"),
)
BY_JSON_FILE = {table.json_file: table for table in TABLES}


@dataclass
class RocksConfigDocument:
    """One table read from RocksDB as the JSON document its file would hold, and the keys
    whose values were not JSON objects (kept out of the document, with the reason)."""

    data: dict[str, Any]
    path: Path
    bad: list[tuple[bytes, str]] = field(default_factory=list)


def rocksdb_table(config_dir: str | Path, json_file: str) -> Path | None:
    """The RocksDB database standing in for ``json_file`` in ``config_dir``, if any."""
    table = BY_JSON_FILE.get(json_file)
    if table is None:
        return None
    path = Path(config_dir) / table.directory
    return path if is_database(path) else None


def read_config_document(config_dir: str | Path, json_file: str) -> RocksConfigDocument:
    """The document of ``json_file`` rebuilt from its RocksDB database (which must exist)."""
    table = BY_JSON_FILE[json_file]
    path = Path(config_dir) / table.directory
    rows: dict[str, Any] = {}
    bad: list[tuple[bytes, str]] = []
    version: Any = None
    with open_readonly(path) as db:
        for key, value in db.items():
            parsed = _json_object(value)
            if isinstance(parsed, str):
                bad.append((key, parsed))
                continue
            name = key.decode("utf-8", errors="replace")
            rows[name] = parsed["offsetTable"] if table.table == "offsetTable" and \
                isinstance(parsed.get("offsetTable"), dict) else parsed
        for key, value in db.items(VERSION_FAMILY):
            if key == VERSION_KEY:
                parsed = _json_object(value)
                version = None if isinstance(parsed, str) else parsed
    data: dict[str, Any] = {table.table: rows}
    if version is not None:
        data["dataVersion"] = version
    return RocksConfigDocument(data, path, bad)


def _json_object(value: bytes) -> dict[str, Any] | str:
    """The JSON object a value holds, or why it holds none."""
    try:
        parsed = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"value is not JSON: {error}"
    return parsed if isinstance(parsed, dict) else "value is JSON but not an object"
