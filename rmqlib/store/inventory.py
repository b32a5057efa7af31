"""Store inventory: walk a broker store root once and say what every file is.

Every file under the root gets exactly one :class:`FileKind`; nothing is skipped, so
an unexpected file shows up as ``UNKNOWN`` rather than disappearing. Files rmqlib knows
but does not decode (RocksDB metadata or consume queues of 5.x ``storeType=defaultRocksDB``,
compaction logs) are listed as "present, not decoded" with a message; the 5.x timer files
(``rmqlib.timers``) and a DLedger broker's Raft log (``rmqlib.dledger``) are decoded.
The broker generation (4.x or 5.x) is inferred from evidence that only one of them
writes (spec §9), and each piece of evidence is reported.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from rmqlib.controller import BAK_SUFFIX as EPOCH_BAK_SUFFIX
from rmqlib.controller import EPOCH_FILE, IDENTITY_FILE, TEMP_IDENTITY_FILE
from rmqlib.dledger import layout as DL
from rmqlib.errors import NotAStoreFileError
from rmqlib.markers import MarkerContent, read_abort
from rmqlib.pop import KV_DIRECTORY
from rmqlib.rocksdb.config_store import CONFIG_DATABASES, V2_DIRECTORY
from rmqlib.rocksdb.state_store import STATE_STORE_DIR

SEGMENT_NAME = re.compile(r"^\d{20}$")
INDEX_NAME = re.compile(r"^\d{17}$")
QUEUE_ID_NAME = re.compile(r"^\d+$")
ROCKSDB_NAME = re.compile(
    r"^(CURRENT|IDENTITY|LOCK|LOG(\.old\.\d+)?|MANIFEST-\d+|OPTIONS-\d+|\d+\.(sst|log|blob))$"
)

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TIMER_TOPIC = "rmq_sys_wheel_timer"

DLEDGER_PREFIX, DLEDGER_DATA, DLEDGER_INDEX = DL.DIR_PREFIX, DL.DATA_DIR, DL.INDEX_DIR
# The RocksDB config databases rmqlib.rocksdb.config_store reads.
ROCKSDB_CONFIG_TABLES = frozenset(CONFIG_DATABASES)
# The properties files, and the .bak DLedger's IOUtils.string2File keeps of each.
DLEDGER_STATE_FILES = frozenset(name + suffix for name in (DL.CHECKPOINT_FILE, DL.TERM_FILE)
                                for suffix in ("", ".bak", ".tmp"))


class FileKind(StrEnum):
    COMMITLOG = "commitlog"
    CONSUME_QUEUE = "consumequeue"
    CONSUME_QUEUE_EXT = "consumequeue_ext"
    BATCH_CONSUME_QUEUE = "batchconsumequeue"
    INDEX = "index"
    CHECKPOINT = "checkpoint"
    ABORT = "abort"
    LOCK = "lock"
    CONFIG_JSON = "config"
    CONFIG_BACKUP = "config_backup"
    CONFIG_TMP = "config_tmp"
    TIMERCHECK = "timercheck"
    TIMER_WHEEL = "timer_wheel"
    TIMER_LOG = "timer_log"
    # A DLedger broker's Raft log (rmqlib.dledger): entries holding its commitlog records,
    # their index units, and the checkpoint / currterm properties files.
    DLEDGER_DATA = "dledger_data"
    DLEDGER_INDEX = "dledger_index"
    DLEDGER_STATE = "dledger_state"
    # RocksDB databases of storeType=defaultRocksDB (rmqlib.rocksdb): the consume queue in
    # consumequeue/, and topics, groups and offsets in config/<table>/ (configManagerVersion=v1).
    ROCKSDB_CQ = "rocksdb_cq"
    ROCKSDB_CONFIG = "rocksdb_config"
    # KV pop's kvStore/ (popConsumerKVServiceEnable; rmqlib.pop).
    ROCKSDB_POP = "rocksdb_pop"
    # 5.5.x rocksdbstore/: RocksDB transactions and timeline (rmqlib.rocksdb.state_store).
    ROCKSDB_STATE = "rocksdb_state"
    # The compaction log and sparse queue of a 5.x compacted topic (rmqlib.compaction).
    COMPACTION = "compaction"
    # Controller mode's epochFileCheckpoint and brokerIdentity (rmqlib.controller).
    HA_STATE = "ha_state"
    # Present, not decoded by rmqlib:
    ROCKSDB = "rocksdb"
    UNKNOWN = "unknown"


#: Every kind that is a RocksDB database's file (the snapshot copier copies them alike).
ROCKSDB_KINDS = frozenset((FileKind.ROCKSDB, FileKind.ROCKSDB_CQ, FileKind.ROCKSDB_CONFIG,
                           FileKind.ROCKSDB_POP, FileKind.ROCKSDB_STATE))

NOT_DECODED: dict[FileKind, str] = {
    FileKind.ROCKSDB: "RocksDB data (5.x): present, not decoded",
    FileKind.UNKNOWN: "not a file a RocketMQ broker writes here",
}


ROCKSDB_REASONS: dict[str, str] = {
    "consumequeue": "RocksDB consume queue (5.x storeType=defaultRocksDB): present, not "
    "decoded; queue positions held only in RocksDB are not read",
    "config": "a RocksDB directory of config/ that is no config table's database: present, "
    "not decoded",
}


@dataclass(frozen=True)
class StoreFile:
    """One file of the store, classified."""

    path: Path  # relative to the store root
    kind: FileKind
    size: int
    topic: str | None = None
    queue_id: int | None = None

    @property
    def decoded(self) -> bool:
        return self.kind not in NOT_DECODED

    @property
    def not_decoded_reason(self) -> str | None:
        """Why rmqlib leaves this file alone, naming what is therefore not read."""
        if self.decoded:
            return None
        if self.kind is FileKind.ROCKSDB:
            return ROCKSDB_REASONS.get(self.path.parts[0], NOT_DECODED[self.kind])
        return NOT_DECODED[self.kind]


@dataclass
class Inventory:
    """Everything found under one store root."""

    root: Path
    files: list[StoreFile] = field(default_factory=list)
    generation: str = "unknown"  # "4.x", "5.x" or "unknown"
    evidence: list[str] = field(default_factory=list)
    features: set[str] = field(default_factory=set)

    def of_kind(self, kind: FileKind) -> list[StoreFile]:
        return [f for f in self.files if f.kind is kind]

    @property
    def not_decoded(self) -> list[tuple[StoreFile, str]]:
        return [(f, f.not_decoded_reason or "") for f in self.files if not f.decoded]

    def not_decoded_groups(self) -> list[tuple[Path, str, int, int]]:
        """Not-decoded files grouped by top directory and reason: (dir, reason, files, bytes)."""
        groups: dict[tuple[Path, str], list[int]] = {}
        for f, reason in self.not_decoded:
            key = (Path(f.path.parts[0]), reason)
            groups.setdefault(key, []).append(f.size)
        return [(where, reason, len(sizes), sum(sizes))
                for (where, reason), sizes in sorted(groups.items())]

    @property
    def queues(self) -> list[tuple[str, int]]:
        """(topic, queue id) of every consume queue with at least one file."""
        return sorted({(f.topic, f.queue_id) for f in self.of_kind(FileKind.CONSUME_QUEUE)
                       if f.topic is not None and f.queue_id is not None})

    def totals(self) -> dict[str, dict[str, int]]:
        counts: Counter[str] = Counter()
        sizes: Counter[str] = Counter()
        for f in self.files:
            counts[f.kind.value] += 1
            sizes[f.kind.value] += f.size
        return {kind: {"files": counts[kind], "bytes": sizes[kind]} for kind in sorted(counts)}


def classify(relative: Path, size: int) -> StoreFile:
    """Classify one file by its path relative to the store root."""
    parts = relative.parts
    top, name = parts[0], parts[-1]
    kind = FileKind.UNKNOWN
    topic: str | None = None
    queue_id: int | None = None
    if len(parts) == 1:
        kind = _classify_root_file(name)
    elif top == "commitlog" and len(parts) == 2 and SEGMENT_NAME.match(name):
        kind = FileKind.COMMITLOG
    elif top in ("consumequeue", "consumequeue_ext", "batchconsumequeue"):
        kind, topic, queue_id = _classify_queue_file(parts)
    elif top == "index" and len(parts) == 2 and INDEX_NAME.match(name):
        kind = FileKind.INDEX
    elif top == "config":
        kind = _classify_config_file(parts)
    elif top == "timerlog" and len(parts) == 2 and SEGMENT_NAME.match(name):
        kind = FileKind.TIMER_LOG
    elif top == "compaction":
        kind = FileKind.COMPACTION
    elif top == KV_DIRECTORY:
        kind = FileKind.ROCKSDB_POP
    elif top == STATE_STORE_DIR:  # every 5.5.x store
        kind = FileKind.ROCKSDB_STATE
    elif top.startswith(DLEDGER_PREFIX):
        kind = _classify_dledger_file(parts)
    return StoreFile(relative, kind, size, topic, queue_id)


def _classify_dledger_file(parts: tuple[str, ...]) -> FileKind:
    if len(parts) == 3 and SEGMENT_NAME.match(parts[2]):
        return {DLEDGER_DATA: FileKind.DLEDGER_DATA,
                DLEDGER_INDEX: FileKind.DLEDGER_INDEX}.get(parts[1], FileKind.UNKNOWN)
    if len(parts) == 2 and parts[1] in DLEDGER_STATE_FILES:
        return FileKind.DLEDGER_STATE
    return FileKind.UNKNOWN


def _classify_root_file(name: str) -> FileKind:
    return {
        "checkpoint": FileKind.CHECKPOINT,
        "abort": FileKind.ABORT,
        "abort.bak": FileKind.ABORT,
        "lock": FileKind.LOCK,
        "timerwheel": FileKind.TIMER_WHEEL,
        EPOCH_FILE: FileKind.HA_STATE,
        EPOCH_FILE + EPOCH_BAK_SUFFIX: FileKind.HA_STATE,
        IDENTITY_FILE: FileKind.HA_STATE,
        TEMP_IDENTITY_FILE: FileKind.HA_STATE,
    }.get(name, FileKind.UNKNOWN)


def _classify_queue_file(parts: tuple[str, ...]) -> tuple[FileKind, str | None, int | None]:
    kind = {
        "consumequeue": FileKind.CONSUME_QUEUE,
        "consumequeue_ext": FileKind.CONSUME_QUEUE_EXT,
        "batchconsumequeue": FileKind.BATCH_CONSUME_QUEUE,
    }[parts[0]]
    if len(parts) == 2 and ROCKSDB_NAME.match(parts[1]):
        return (FileKind.ROCKSDB_CQ if parts[0] == "consumequeue" else FileKind.ROCKSDB), None, \
            None
    if len(parts) == 4 and QUEUE_ID_NAME.match(parts[2]) and SEGMENT_NAME.match(parts[3]):
        return kind, parts[1], int(parts[2])
    if parts[0] == "consumequeue" and len(parts) >= 2 and ROCKSDB_NAME.match(parts[-1]):
        return FileKind.ROCKSDB, None, None
    return FileKind.UNKNOWN, None, None


def _classify_config_file(parts: tuple[str, ...]) -> FileKind:
    if len(parts) > 2:  # config/topics/, config/rdb/ ...: RocksDB metadata (5.x)
        return FileKind.ROCKSDB_CONFIG if parts[1] in ROCKSDB_CONFIG_TABLES else FileKind.ROCKSDB
    name = parts[1]
    if name == "timercheck":
        return FileKind.TIMERCHECK
    if name.endswith(".bak"):
        return FileKind.CONFIG_BACKUP
    if name.endswith(".tmp"):
        return FileKind.CONFIG_TMP
    if name.endswith(".json") or name in ("timermetrics", "transactionMetrics"):
        return FileKind.CONFIG_JSON
    return FileKind.UNKNOWN


def take_inventory(root: str | Path) -> Inventory:
    """Walk ``root`` (a broker storePathRootDir) and classify every file under it."""
    root = Path(root)
    if not root.is_dir():
        raise NotAStoreFileError("store root is not a directory", path=root)
    inventory = Inventory(root)
    # Follow symlinks: snapshots may link commitlog/ to another disk (storePathCommitLog).
    for directory, subdirs, filenames in os.walk(root, followlinks=True):
        subdirs.sort()
        for filename in sorted(filenames):
            absolute = Path(directory, filename)
            inventory.files.append(
                classify(absolute.relative_to(root), absolute.lstat().st_size)
            )
    if not any(f.kind in (FileKind.COMMITLOG, FileKind.CONSUME_QUEUE, FileKind.CHECKPOINT,
                          FileKind.DLEDGER_DATA) for f in inventory.files):
        raise NotAStoreFileError(
            "not a RocketMQ store: no commitlog, DLedger log, consumequeue or checkpoint "
            "found", path=root
        )
    inventory.features = detect_features(inventory)
    inventory.generation, inventory.evidence = detect_generation(inventory)
    return inventory


def detect_features(inventory: Inventory) -> set[str]:
    """Broker features whose traces are visible in the file tree."""
    topics = {f.topic for f in inventory.files if f.topic}
    kinds = {f.kind for f in inventory.files}
    checks = {
        "delayed_messages": SCHEDULE_TOPIC in topics,
        "transactions": bool({TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC} & topics),
        "retry": any(t.startswith("%RETRY%") for t in topics),
        "dead_letter": any(t.startswith("%DLQ%") for t in topics),
        "lmq": any(t.startswith("%LMQ%") for t in topics),
        "pop": any(t.startswith("rmq_sys_REVIVE_LOG_") for t in topics),
        "timer": TIMER_TOPIC in topics or FileKind.TIMER_LOG in kinds,
        "batch_consume_queue": FileKind.BATCH_CONSUME_QUEUE in kinds,
        "consume_queue_ext": FileKind.CONSUME_QUEUE_EXT in kinds,
        "compaction": FileKind.COMPACTION in kinds,
        "rocksdb": bool(ROCKSDB_KINDS & kinds),
        "rocksdb_consume_queue": FileKind.ROCKSDB_CQ in kinds,
        "rocksdb_config_v2": any(f.kind is FileKind.ROCKSDB_CONFIG
                                 and f.path.parts[1] == V2_DIRECTORY for f in inventory.files),
        "dledger": FileKind.DLEDGER_DATA in kinds,
        "abnormal_shutdown": any(f.path == Path("abort") for f in inventory.files),
    }
    return {name for name, present in checks.items() if present}


def detect_generation(inventory: Inventory) -> tuple[str, list[str]]:
    """Infer 4.x or 5.x from traces only one generation leaves (spec §9)."""
    root = inventory.root
    five: list[str] = []
    names = {f.path.as_posix() for f in inventory.files}
    abort = read_abort(root).abort
    for path in ("abort.bak", "timerwheel", "config/timercheck", "config/timermetrics"):
        if path in names:
            five.append(f"{path} exists (5.x only)")
    if abort is not None and abort.kind == "pid":
        five.append("abort holds a PID (5.x writes its PID; 4.x leaves it empty)")
    if {FileKind.TIMER_LOG, FileKind.BATCH_CONSUME_QUEUE, FileKind.COMPACTION,
            *ROCKSDB_KINDS} & {f.kind for f in inventory.files}:
        five.append("5.x-only directories present (timerlog/batchconsumequeue/compaction/RocksDB)")
    five.extend(_config_evidence(root))
    four = _four_evidence(root, abort)
    if five:
        return "5.x", five
    if four:
        return "4.x", four
    return "unknown", ["no generation-specific trace found"]


def _config_evidence(root: Path) -> list[str]:
    evidence = []
    for name in ("topics.json", "consumerOffset.json", "subscriptionGroup.json"):
        text = _read_text(root / "config" / name)
        if text and '"stateVersion"' in text:
            evidence.append(f"config/{name} dataVersion has stateVersion (5.x only)")
            break
    return evidence


def _four_evidence(root: Path, abort: MarkerContent | None) -> list[str]:
    text = _read_text(root / "config" / "consumerOffset.json")
    if text and '"dataVersion"' not in text:
        return ["config/consumerOffset.json has no dataVersion (4.x writes only offsetTable)"]
    if abort is not None and abort.kind == "empty":
        return ["abort is empty (4.x)"]
    return []


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
