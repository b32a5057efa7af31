"""Broker ``config/*.json`` files (spec §7): fastjson text, ``.bak`` fallback, typed views.

fastjson writes ``Map<Integer, …>`` / ``Map<Long, …>`` keys unquoted (``{0:123}``),
which standard JSON rejects. :func:`quote_int_keys` fixes exactly that: a scanner that
jumps over whole string literals (escapes included) and quotes an integer only where an
object key may start (right after ``{`` or an object-level ``,``) and a ``:`` follows.
Nothing inside a string literal is ever touched.

Which file is used mirrors ``ConfigManager.load``: ``X``, unless it is missing, empty
(or whitespace only) or unparsable, then ``X.bak``; :class:`ConfigSource` says which
and why. A leftover ``X.tmp`` (4.9.x-5.0 rotation, may be *newer*) is only noted.

``topic@group`` keys (consumer offsets, pop order info) are split at the **first**
``@``: the broker builds them as ``topic + "@" + group`` and validates topic names
against ``^[%|a-zA-Z0-9_-]+$`` on send/create (TopicValidator), so a topic holds no
``@``, while group names are not checked on every path (e.g. offset commits). Keys with
several ``@`` are kept but flagged ``ambiguous`` (the broker's own ``split("@")``
ignores them when it maps groups to topics); keys without ``@`` are listed in
``invalid_keys``, never dropped silently.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from rmqlib.common import races
from rmqlib.errors import ConfigError, StoreError, UnsupportedFormatError
from rmqlib.rocksdb.config_store import CONFIG_DATABASES as ROCKSDB_CONFIG_DATABASES
from rmqlib.rocksdb.config_store import TABLES as ROCKSDB_TABLES
from rmqlib.rocksdb.config_store import locate_table, read_config_document
from rmqlib.rocksdb.database import is_database

T = TypeVar("T")

TOPIC_GROUP_SEPARATOR = "@"
BAK_SUFFIX = ".bak"
TMP_SUFFIX = ".tmp"

# config/ file names (BrokerPathConfigHelper, StorePathConfigHelper).
TOPICS_FILE = "topics.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
LMQ_CONSUMER_OFFSET_FILE = "lmqConsumerOffset.json"
DELAY_OFFSET_FILE = "delayOffset.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
CONSUMER_FILTER_FILE = "consumerFilter.json"
CONSUMER_ORDER_INFO_FILE = "consumerOrderInfo.json"
TIMER_METRICS_FILE = "timermetrics"
TRANSACTION_METRICS_FILE = "transactionMetrics"
# Topics, groups and offsets a 5.x broker keeps in RocksDB instead (rmqlib.rocksdb.config_store).
ROCKSDB_NOTE = "read from RocksDB, config layout"
LEFT_OUT_NOTE = "left out: the RocksDB record of key"

# PermName bits.
PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1

# TopicConfig / SubscriptionGroupConfig defaults (fields absent from older files).
DEFAULT_QUEUE_NUMS = 16
DEFAULT_PERM = PERM_READ | PERM_WRITE

_STRING_OR_PUNCT = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\],]', re.DOTALL)
_INT_KEY = re.compile(r"[ \t\r\n]*(-?\d+)(?=[ \t\r\n]*:)")


# --------------------------------------------------------------------------- fastjson text


def quote_int_keys(text: str) -> tuple[str, list[int]]:
    """Quote bare integer object keys outside string literals.

    Returns the new text and the positions (in the new text) of the inserted quote
    characters, so parse-error positions can be mapped back to the original.
    """
    pieces: list[str] = []
    inserted: list[int] = []
    stack: list[str] = []
    last = 0
    shift = 0
    for match in _STRING_OR_PUNCT.finditer(text):
        token = match.group()
        if token in ("{", "["):
            stack.append(token)
        elif token in ("}", "]"):
            if stack:
                stack.pop()
            continue
        if token != "{" and not (token == "," and stack and stack[-1] == "{"):
            continue
        key = _INT_KEY.match(text, match.end())
        if key is None:
            continue
        begin, end = key.span(1)
        pieces += [text[last:begin], '"', text[begin:end], '"']
        inserted += [begin + shift, end + shift + 1]
        shift += 2
        last = end
    pieces.append(text[last:])
    return "".join(pieces), inserted


def _original_position(position: int, inserted: list[int]) -> int:
    return position - bisect.bisect_left(inserted, position)


def parse_fastjson(text: str, path: str | Path | None = None) -> Any:
    """Parse fastjson output (unquoted integer keys allowed); ConfigError on bad syntax."""
    fixed, inserted = quote_int_keys(text)
    try:
        return json.loads(fixed)
    except json.JSONDecodeError as exc:
        original = _original_position(exc.pos, inserted)
        line = text.count("\n", 0, original) + 1
        column = original - (text.rfind("\n", 0, original) + 1) + 1
        raise ConfigError(
            f"invalid JSON: {exc.msg} at line {line} column {column}",
            path=path,
            offset=len(text[:original].encode("utf-8", "surrogatepass")),
        ) from exc


# --------------------------------------------------------------------------- file choice


@dataclass(frozen=True)
class ConfigSource:
    """Which file a config was read from, and why the main file was not used."""

    requested: str
    used: str
    from_backup: bool
    main_rejected: str | None = None
    tmp_present: bool = False
    notes: tuple[str, ...] = ()
    # Entries of the table that were left out (a RocksDB value that is no JSON object).
    left_out: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConfigDocument:
    """A parsed config file (a JSON object) and where it came from."""

    data: dict[str, Any]
    source: ConfigSource


def _read_candidate(path: Path) -> tuple[dict[str, Any] | None, str | None, tuple[str, ...]]:
    """(data, rejection reason, notes) for one candidate file."""
    if not path.exists():
        return None, "missing", ()
    if not path.is_file():
        return None, "not a regular file", ()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, f"unreadable: {exc.strerror}", ()
    notes: tuple[str, ...] = ()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="replace")  # as Java's new String(bytes, UTF-8)
        notes = ("invalid UTF-8 replaced with U+FFFD",)
    if not text.strip():
        return None, "empty", notes
    try:
        data = parse_fastjson(text, path)
    except ConfigError as exc:
        return None, f"unparsable: {exc}", notes
    if not isinstance(data, dict):
        return None, f"unparsable: top-level JSON value is {type(data).__name__}", notes
    return data, None, notes


def load_config_json(path: str | Path, *, missing_ok: bool = False) -> ConfigDocument | None:
    """Load ``X`` with the broker's fallback to ``X.bak``; report what was used.

    Raises ConfigError when neither file is usable (unless both are missing and
    ``missing_ok``, then returns None, as the broker starts with an empty table).
    """
    main = Path(path)
    bak = main.with_name(main.name + BAK_SUFFIX)
    tmp_present = main.with_name(main.name + TMP_SUFFIX).exists()
    data, main_reason, notes = _read_candidate(main)
    if data is not None:
        return ConfigDocument(data, ConfigSource(str(main), str(main), False, None,
                                                 tmp_present, notes))
    bak_data, bak_reason, bak_notes = _read_candidate(bak)
    if bak_data is not None:
        source = ConfigSource(str(main), str(bak), True, main_reason, tmp_present, bak_notes)
        return ConfigDocument(bak_data, source)
    if main_reason == "missing" and bak_reason == "missing" and missing_ok:
        return None
    raise ConfigError(
        f"no usable config: {main.name} {main_reason}; {bak.name} {bak_reason}", path=main
    )


def rewrite_races(name: str, source: ConfigSource) -> list[str]:
    """How a config file read mid-rewrite shows (ConfigManager.persist/load, MixAll.
    string2File): the main file unusable and the ``.bak`` used, as the broker does at its
    next start (the changes since that generation are not in it), or a ``.tmp`` left by
    the 4.9.x-5.0 rotation (write X.tmp, X -> X.bak, delete X, rename X.tmp -> X)."""
    found = []
    if source.from_backup:
        found.append(races.hot_copy(
            f"{name} {source.main_rejected} (caught mid-rewrite): read from {name}{BAK_SUFFIX}, "
            "the previous generation, as the broker's ConfigManager.load does"))
    if source.tmp_present:
        found.append(races.hot_copy(
            f"{name}{TMP_SUFFIX} present (a rewrite in progress, or one a kill interrupted): "
            f"not read; it may be newer than {name} (ConfigManager.persist up to 5.0)"))
    return found


# --------------------------------------------------------------------------- field helpers


def _get(obj: dict[str, Any], name: str, kind: type[T], default: T, where: str) -> T:
    """A typed field (ints accepted as text, like fastjson), or ConfigError."""
    value = obj.get(name, default)
    if value is None:
        return default
    if kind is bool:
        if isinstance(value, bool):
            return value  # type: ignore[return-value]
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return (value.lower() == "true")  # type: ignore[return-value]
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value  # type: ignore[return-value]
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
            return int(value)  # type: ignore[return-value]
    elif isinstance(value, kind):
        return value
    raise ConfigError(f"{where}.{name}: expected {kind.__name__}, got {value!r}")


def _int_key(key: str, where: str) -> int:
    if re.fullmatch(r"-?\d+", key):
        return int(key)
    raise ConfigError(f"{where}: expected an integer key, got {key!r}")


def _table(data: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    table = data.get(name)
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ConfigError(f"{where}.{name}: expected an object, got {type(table).__name__}")
    return table


def _wrap(source: ConfigSource, parse: Callable[[dict[str, Any]], T], data: dict[str, Any]) -> T:
    """Run a typed parser, attaching the file path to its ConfigErrors."""
    try:
        return parse(data)
    except ConfigError as exc:
        raise ConfigError(exc.reason, path=source.used) from exc


@dataclass(frozen=True)
class DataVersion:
    """``dataVersion``: counter, timestamp ms and (5.x) stateVersion."""

    counter: int
    timestamp: int
    state_version: int | None


def parse_data_version(data: dict[str, Any]) -> DataVersion | None:
    raw = data.get("dataVersion")
    if not isinstance(raw, dict):
        return None
    state = raw.get("stateVersion")
    return DataVersion(
        _get(raw, "counter", int, 0, "dataVersion"),
        _get(raw, "timestamp", int, 0, "dataVersion"),
        None if state is None else _get(raw, "stateVersion", int, 0, "dataVersion"),
    )


def split_topic_group(key: str) -> tuple[str, str, bool] | None:
    """``topic@group`` → (topic, group, ambiguous) split at the first '@'; None if no '@'."""
    topic, sep, group = key.partition(TOPIC_GROUP_SEPARATOR)
    if not sep:
        return None
    return topic, group, TOPIC_GROUP_SEPARATOR in group


# --------------------------------------------------------------------------- topics.json


@dataclass(frozen=True)
class TopicConfig:
    """One ``topicConfigTable`` entry (``perm`` also decoded into flags)."""

    key: str
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str
    topic_sys_flag: int
    order: bool
    attributes: dict[str, str]

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def inherited(self) -> bool:
        return bool(self.perm & PERM_INHERIT)

    @property
    def priority(self) -> bool:
        return bool(self.perm & PERM_PRIORITY)

    @property
    def queue_type(self) -> str:
        """5.x ``queue.type`` attribute; SimpleCQ when unset."""
        return self.attributes.get("queue.type", "SimpleCQ")


@dataclass(frozen=True)
class TopicsFile:
    topics: dict[str, TopicConfig]
    data_version: DataVersion | None
    source: ConfigSource | None = None

    @property
    def name_mismatches(self) -> list[str]:
        """Map keys whose ``topicName`` differs (the broker trusts the key)."""
        return [k for k, t in self.topics.items() if t.topic_name != k]


def _parse_topic(key: str, raw: Any) -> TopicConfig:
    where = f"topicConfigTable[{key!r}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected an object")
    attributes = raw.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise ConfigError(f"{where}.attributes: expected an object")
    return TopicConfig(
        key=key,
        topic_name=_get(raw, "topicName", str, key, where),
        read_queue_nums=_get(raw, "readQueueNums", int, DEFAULT_QUEUE_NUMS, where),
        write_queue_nums=_get(raw, "writeQueueNums", int, DEFAULT_QUEUE_NUMS, where),
        perm=_get(raw, "perm", int, DEFAULT_PERM, where),
        topic_filter_type=_get(raw, "topicFilterType", str, "SINGLE_TAG", where),
        topic_sys_flag=_get(raw, "topicSysFlag", int, 0, where),
        order=_get(raw, "order", bool, False, where),
        attributes={str(k): str(v) for k, v in attributes.items()},
    )


def parse_topics(data: dict[str, Any]) -> TopicsFile:
    table = _table(data, "topicConfigTable", "topics")
    topics = {key: _parse_topic(key, raw) for key, raw in table.items()}
    return TopicsFile(topics, parse_data_version(data))


# --------------------------------------------------------------------------- offsets


@dataclass(frozen=True)
class ConsumerOffset:
    """One committed offset: the next message ``group`` will consume in the queue."""

    topic: str
    group: str
    queue_id: int
    offset: int
    ambiguous: bool = False  # key had more than one '@'
    lmq: bool = False  # from lmqOffsetTable (single queue 0)


@dataclass(frozen=True)
class ConsumerOffsets:
    offsets: list[ConsumerOffset]
    data_version: DataVersion | None
    group_topic_map: dict[str, list[str]]
    invalid_keys: list[str]
    source: ConfigSource | None = None
    # pullOffsetTable (5.x ConsumerOffsetManager#getPullOffsetTable, v2's pull-offset table):
    # the next offset a group pulled (popped, for a KV pop group) from each queue, by
    # (topic, group, queue id); None when the store keeps no such table (4.x, RocksDB v1).
    pull_offsets: dict[tuple[str, str, int], int] | None = None

    def pull_offset(self, row: ConsumerOffset) -> int | None:
        """The pull offset the broker reports for ``row``'s queue (queryPullOffset: the
        table's entry, else the consumer offset); None without a pull table."""
        if self.pull_offsets is None:
            return None
        return self.pull_offsets.get((row.topic, row.group, row.queue_id), row.offset)


def _offset_rows(
    table: dict[str, Any], where: str, invalid: list[str]
) -> list[ConsumerOffset]:
    rows: list[ConsumerOffset] = []
    for key, queues in table.items():
        parts = split_topic_group(key)
        if parts is None:
            invalid.append(key)
            continue
        topic, group, ambiguous = parts
        if not isinstance(queues, dict):
            raise ConfigError(f"{where}[{key!r}]: expected an object of queueId: offset")
        for queue_key, value in queues.items():
            queue_id = _int_key(queue_key, f"{where}[{key!r}]")
            offset = _get({"v": value}, "v", int, -1, f"{where}[{key!r}][{queue_key}]")
            rows.append(ConsumerOffset(topic, group, queue_id, offset, ambiguous))
    return rows


def _lmq_rows(table: dict[str, Any], invalid: list[str]) -> list[ConsumerOffset]:
    rows: list[ConsumerOffset] = []
    for key, value in table.items():
        parts = split_topic_group(key)
        if parts is None:
            invalid.append(key)
            continue
        topic, group, ambiguous = parts
        offset = _get({"v": value}, "v", int, -1, f"lmqOffsetTable[{key!r}]")
        rows.append(ConsumerOffset(topic, group, 0, offset, ambiguous, lmq=True))
    return rows


def parse_consumer_offsets(data: dict[str, Any]) -> ConsumerOffsets:
    """consumerOffset.json or lmqConsumerOffset.json (adds ``lmqOffsetTable``)."""
    invalid: list[str] = []
    rows = _offset_rows(_table(data, "offsetTable", "consumerOffset"), "offsetTable", invalid)
    rows += _lmq_rows(_table(data, "lmqOffsetTable", "consumerOffset"), invalid)
    group_topics = {
        str(group): [str(t) for t in topics] if isinstance(topics, list) else []
        for group, topics in _table(data, "groupTopicMap", "consumerOffset").items()
    }
    pulls = None
    if isinstance(data.get("pullOffsetTable"), dict):
        pulls = {(p.topic, p.group, p.queue_id): p.offset for p in _offset_rows(
            data["pullOffsetTable"], "pullOffsetTable", invalid)}
    return ConsumerOffsets(rows, parse_data_version(data), group_topics, invalid,
                           pull_offsets=pulls)


@dataclass(frozen=True)
class DelayOffsets:
    """delayOffset.json: level → next offset of queue level-1 of SCHEDULE_TOPIC_XXXX."""

    offsets: dict[int, int]
    data_version: DataVersion | None
    source: ConfigSource | None = None

    def by_queue(self) -> dict[int, int]:
        return {level - 1: offset for level, offset in self.offsets.items()}


def parse_delay_offsets(data: dict[str, Any]) -> DelayOffsets:
    table = _table(data, "offsetTable", "delayOffset")
    offsets = {
        _int_key(k, "offsetTable"): _get({"v": v}, "v", int, 0, f"offsetTable[{k}]")
        for k, v in table.items()
    }
    return DelayOffsets(offsets, parse_data_version(data))


# --------------------------------------------------------------------------- groups


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    """One subscription group; ``raw`` keeps every field (retry policy, subscriptions…)."""

    group_name: str
    consume_enable: bool
    consume_from_min_enable: bool
    consume_broadcast_enable: bool
    consume_message_orderly: bool
    retry_queue_nums: int
    retry_max_times: int
    broker_id: int
    which_broker_when_consume_slowly: int
    notify_consumer_ids_changed_enable: bool
    group_sys_flag: int
    consume_timeout_minute: int
    attributes: dict[str, str]
    raw: dict[str, Any]


@dataclass(frozen=True)
class SubscriptionGroups:
    groups: dict[str, SubscriptionGroupConfig]
    forbidden: dict[str, dict[str, int]]
    data_version: DataVersion | None
    source: ConfigSource | None = None


def _parse_group(key: str, raw: Any) -> SubscriptionGroupConfig:
    where = f"subscriptionGroupTable[{key!r}]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected an object")
    attributes = raw.get("attributes") or {}
    if not isinstance(attributes, dict):
        raise ConfigError(f"{where}.attributes: expected an object")
    return SubscriptionGroupConfig(
        group_name=_get(raw, "groupName", str, key, where),
        consume_enable=_get(raw, "consumeEnable", bool, True, where),
        consume_from_min_enable=_get(raw, "consumeFromMinEnable", bool, True, where),
        consume_broadcast_enable=_get(raw, "consumeBroadcastEnable", bool, True, where),
        consume_message_orderly=_get(raw, "consumeMessageOrderly", bool, False, where),
        retry_queue_nums=_get(raw, "retryQueueNums", int, 1, where),
        retry_max_times=_get(raw, "retryMaxTimes", int, 16, where),
        broker_id=_get(raw, "brokerId", int, 0, where),
        which_broker_when_consume_slowly=_get(raw, "whichBrokerWhenConsumeSlowly", int, 1,
                                              where),
        notify_consumer_ids_changed_enable=_get(raw, "notifyConsumerIdsChangedEnable", bool,
                                                True, where),
        group_sys_flag=_get(raw, "groupSysFlag", int, 0, where),
        consume_timeout_minute=_get(raw, "consumeTimeoutMinute", int, 15, where),
        attributes={str(k): str(v) for k, v in attributes.items()},
        raw=raw,
    )


def parse_subscription_groups(data: dict[str, Any]) -> SubscriptionGroups:
    table = _table(data, "subscriptionGroupTable", "subscriptionGroup")
    groups = {key: _parse_group(key, raw) for key, raw in table.items()}
    forbidden: dict[str, dict[str, int]] = {}
    for group, topics in _table(data, "forbiddenTable", "subscriptionGroup").items():
        if not isinstance(topics, dict):
            raise ConfigError(f"forbiddenTable[{group!r}]: expected an object")
        forbidden[group] = {
            str(t): _get({"v": v}, "v", int, 0, f"forbiddenTable[{group!r}]")
            for t, v in topics.items()
        }
    return SubscriptionGroups(groups, forbidden, parse_data_version(data))


# --------------------------------------------------------------------------- filters / pop


@dataclass(frozen=True)
class ConsumerFilterRow:
    """One (topic, group) SQL92/tag filter from consumerFilter.json."""

    topic: str
    group: str
    expression: str | None
    expression_type: str | None
    born_time: int
    dead_time: int
    client_version: int
    bloom_bit_num: int | None
    bloom_bit_pos: tuple[int, ...]


@dataclass(frozen=True)
class ConsumerFilters:
    rows: list[ConsumerFilterRow]
    data_version: DataVersion | None
    source: ConfigSource | None = None


def parse_consumer_filters(data: dict[str, Any]) -> ConsumerFilters:
    rows: list[ConsumerFilterRow] = []
    for topic, by_topic in _table(data, "filterDataByTopic", "consumerFilter").items():
        if not isinstance(by_topic, dict):
            raise ConfigError(f"filterDataByTopic[{topic!r}]: expected an object")
        groups = _table(by_topic, "groupFilterData", f"filterDataByTopic[{topic!r}]")
        for group, raw in groups.items():
            where = f"filterDataByTopic[{topic!r}][{group!r}]"
            if not isinstance(raw, dict):
                raise ConfigError(f"{where}: expected an object")
            bloom = raw.get("bloomFilterData") if isinstance(raw.get("bloomFilterData"),
                                                             dict) else None
            rows.append(ConsumerFilterRow(
                topic=topic,
                group=_get(raw, "consumerGroup", str, group, where),
                expression=raw.get("expression"),
                expression_type=raw.get("expressionType"),
                born_time=_get(raw, "bornTime", int, 0, where),
                dead_time=_get(raw, "deadTime", int, 0, where),
                client_version=_get(raw, "clientVersion", int, 0, where),
                bloom_bit_num=None if bloom is None else _get(bloom, "bitNum", int, 0, where),
                bloom_bit_pos=tuple(int(b) for b in (bloom or {}).get("bitPos") or ()),
            ))
    return ConsumerFilters(rows, parse_data_version(data))


@dataclass(frozen=True)
class OrderInfoRow:
    """Pop-orderly state of one queue for a (topic, group) (consumerOrderInfo.json)."""

    topic: str
    group: str
    queue_id: int
    pop_time: int
    invisible_time: int | None
    offsets: tuple[int, ...]
    offset_next_visible_time: dict[int, int]
    offset_consumed_count: dict[int, int]
    last_consume_timestamp: int
    commit_offset_bit: int
    attempt_id: str | None
    ambiguous: bool = False


@dataclass(frozen=True)
class ConsumerOrderInfo:
    rows: list[OrderInfoRow]
    invalid_keys: list[str]
    data_version: DataVersion | None
    source: ConfigSource | None = None


def _int_map(raw: Any, where: str) -> dict[int, int]:
    if not isinstance(raw, dict):
        return {}
    return {_int_key(k, where): _get({"v": v}, "v", int, 0, where) for k, v in raw.items()}


def parse_consumer_order_info(data: dict[str, Any]) -> ConsumerOrderInfo:
    rows: list[OrderInfoRow] = []
    invalid: list[str] = []
    for key, queues in _table(data, "table", "consumerOrderInfo").items():
        parts = split_topic_group(key)
        if parts is None or not isinstance(queues, dict):
            invalid.append(key)
            continue
        topic, group, ambiguous = parts
        for queue_key, info in queues.items():
            where = f"table[{key!r}][{queue_key}]"
            if not isinstance(info, dict):
                raise ConfigError(f"{where}: expected an object")
            invisible = info.get("i")
            rows.append(OrderInfoRow(
                topic=topic,
                group=group,
                queue_id=_int_key(queue_key, where),
                pop_time=_get(info, "popTime", int, 0, where),
                invisible_time=None if invisible is None else _get(info, "i", int, 0, where),
                offsets=tuple(int(o) for o in info.get("o") or ()),
                offset_next_visible_time=_int_map(info.get("ot"), where + ".ot"),
                offset_consumed_count=_int_map(info.get("oc"), where + ".oc"),
                last_consume_timestamp=_get(info, "l", int, 0, where),
                commit_offset_bit=_get(info, "cm", int, 0, where),
                attempt_id=info.get("a"),
                ambiguous=ambiguous,
            ))
    return ConsumerOrderInfo(rows, invalid, parse_data_version(data))


# --------------------------------------------------------------------------- metrics


@dataclass(frozen=True)
class MetricRow:
    """One per-topic counter of timermetrics / transactionMetrics."""

    topic: str
    count: int
    time_stamp: int


@dataclass(frozen=True)
class Metrics:
    rows: list[MetricRow]
    data_version: DataVersion | None
    source: ConfigSource | None = None


def _parse_metrics(data: dict[str, Any], table_name: str) -> Metrics:
    rows = []
    for topic, raw in _table(data, table_name, table_name).items():
        where = f"{table_name}[{topic!r}]"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected an object")
        rows.append(MetricRow(topic, _get(raw, "count", int, 0, where),
                              _get(raw, "timeStamp", int, 0, where)))
    return Metrics(rows, parse_data_version(data))


def parse_timer_metrics(data: dict[str, Any]) -> Metrics:
    """config/timermetrics: ``timingCount:{topic:{count,timeStamp}}``."""
    return _parse_metrics(data, "timingCount")


def parse_transaction_metrics(data: dict[str, Any]) -> Metrics:
    """config/transactionMetrics: ``transactionCount:{topic:{count,timeStamp}}``."""
    return _parse_metrics(data, "transactionCount")


# --------------------------------------------------------------------------- loaders


def _load(path: str | Path, parse: Callable[[dict[str, Any]], Any], missing_ok: bool) -> Any:
    # A RocksDB table wins over its JSON file: a broker writes the JSON only while it runs
    # without RocksDB config, and imports it into RocksDB when it moves to a RocksDB layout
    # (the file is then left behind, stale; reported by load_config_dir).
    document = _rocksdb_document(path)
    if document is None:
        document = load_config_json(path, missing_ok=missing_ok)
    if document is None:
        return None
    return replace(_wrap(document.source, parse, document.data), source=document.source)


def _rocksdb_document(path: str | Path) -> ConfigDocument | None:
    """The file's table from the RocksDB database that replaces it, as the document the
    file would hold; None when there is none."""
    path = Path(path)
    location = locate_table(path.parent, path.name)
    if location is None:
        return None
    try:
        document = read_config_document(location)
    except StoreError as exc:
        raise ConfigError(exc.reason, path=location.path) from exc
    left_out = tuple(f"{LEFT_OUT_NOTE} {key[:80]!r}: {reason}" for key, reason in document.bad)
    notes = (f"{ROCKSDB_NOTE} {location.layout}", *left_out)
    return ConfigDocument(document.data, ConfigSource(str(path), str(location.path), False,
                                                      None, False, notes, left_out))


def load_topics(path: str | Path, *, missing_ok: bool = False) -> TopicsFile | None:
    return _load(path, parse_topics, missing_ok)


def load_consumer_offsets(
    path: str | Path, *, missing_ok: bool = False
) -> ConsumerOffsets | None:
    """consumerOffset.json, or lmqConsumerOffset.json which replaces it with enableLmq."""
    return _load(path, parse_consumer_offsets, missing_ok)


def load_delay_offsets(path: str | Path, *, missing_ok: bool = False) -> DelayOffsets | None:
    return _load(path, parse_delay_offsets, missing_ok)


def load_subscription_groups(
    path: str | Path, *, missing_ok: bool = False
) -> SubscriptionGroups | None:
    return _load(path, parse_subscription_groups, missing_ok)


def load_consumer_filters(
    path: str | Path, *, missing_ok: bool = False
) -> ConsumerFilters | None:
    return _load(path, parse_consumer_filters, missing_ok)


def load_consumer_order_info(
    path: str | Path, *, missing_ok: bool = False
) -> ConsumerOrderInfo | None:
    return _load(path, parse_consumer_order_info, missing_ok)


def load_timer_metrics(path: str | Path, *, missing_ok: bool = False) -> Metrics | None:
    return _load(path, parse_timer_metrics, missing_ok)


def load_transaction_metrics(path: str | Path, *, missing_ok: bool = False) -> Metrics | None:
    return _load(path, parse_transaction_metrics, missing_ok)


@dataclass
class ConfigDir:
    """Every known config file of ``config/`` that exists, loaded, plus load failures."""

    topics: TopicsFile | None = None
    consumer_offsets: ConsumerOffsets | None = None
    lmq_consumer_offsets: ConsumerOffsets | None = None
    delay_offsets: DelayOffsets | None = None
    subscription_groups: SubscriptionGroups | None = None
    consumer_filters: ConsumerFilters | None = None
    consumer_order_info: ConsumerOrderInfo | None = None
    timer_metrics: Metrics | None = None
    transaction_metrics: Metrics | None = None
    errors: dict[str, ConfigError] = field(default_factory=dict)
    unsupported: list[UnsupportedFormatError] = field(default_factory=list)
    # Entries left out of a table that was otherwise read (a RocksDB value that is not a
    # JSON object), by the file the table stands for: reported, never dropped silently.
    left_out: dict[str, list[str]] = field(default_factory=dict)
    # Files read as the broker would mid-rewrite: ``X`` empty, cut or missing and its
    # previous generation ``X.bak`` used, or a leftover ``X.tmp``: (name, reason), each
    # reason a ``hot copy: ...`` race (rmqlib.common.races).
    mid_rewrite: list[tuple[str, str]] = field(default_factory=list)


_KNOWN: tuple[tuple[str, str, Callable[..., Any]], ...] = (
    ("topics", TOPICS_FILE, load_topics),
    ("consumer_offsets", CONSUMER_OFFSET_FILE, load_consumer_offsets),
    ("lmq_consumer_offsets", LMQ_CONSUMER_OFFSET_FILE, load_consumer_offsets),
    ("delay_offsets", DELAY_OFFSET_FILE, load_delay_offsets),
    ("subscription_groups", SUBSCRIPTION_GROUP_FILE, load_subscription_groups),
    ("consumer_filters", CONSUMER_FILTER_FILE, load_consumer_filters),
    ("consumer_order_info", CONSUMER_ORDER_INFO_FILE, load_consumer_order_info),
    ("timer_metrics", TIMER_METRICS_FILE, load_timer_metrics),
    ("transaction_metrics", TRANSACTION_METRICS_FILE, load_transaction_metrics),
)


def load_config_dir(config_dir: str | Path) -> ConfigDir:
    """Load every known config file present; failures are collected, not raised.

    The RocksDB tables of a 5.x broker (``config/topics/`` ..., ``config/metadata/``,
    ``config/rdb/``) stand in for their missing JSON files
    (:mod:`rmqlib.rocksdb.config_store`); a RocksDB config directory nothing is read from
    (superseded by a newer layout's, or holding no database) is listed in ``unsupported``.
    """
    config_dir = Path(config_dir)
    result = ConfigDir()
    for attribute, name, loader in _KNOWN:
        try:
            setattr(result, attribute, loader(config_dir / name, missing_ok=True))
        except ConfigError as exc:
            result.errors[name] = exc
    for attribute, name, _ in _KNOWN:
        source = getattr(getattr(result, attribute), "source", None)
        if source is not None and source.left_out:
            result.left_out[name] = list(source.left_out)
        if source is not None:
            result.mid_rewrite += [(name, reason) for reason in rewrite_races(name, source)]
    result.unsupported += _unread_rocksdb_config(config_dir)
    return result


def _unread_rocksdb_config(config_dir: Path) -> list[UnsupportedFormatError]:
    """The RocksDB config directories nothing was read from: a database superseded by a
    newer layout's (left behind when the broker changed layout), a directory holding no
    database."""
    unread: dict[Path, str] = {}
    for table in ROCKSDB_TABLES:
        location = locate_table(config_dir, table.json_file)
        if location is None:
            continue
        for path in location.superseded:
            unread.setdefault(path, f"a RocksDB config database superseded by "
                                    f"{location.path.name}/ ({location.layout}): not read")
        for path in (config_dir / table.json_file,
                     config_dir / (table.json_file + BAK_SUFFIX)):
            if path.exists():
                unread[path] = (f"a JSON config file superseded by the RocksDB table in "
                                f"{location.path.name}/ ({location.layout}): not read")
    for name in ROCKSDB_CONFIG_DATABASES:
        path = config_dir / name
        if path.is_dir() and not is_database(path):
            unread[path] = ("a RocksDB config directory holding no database (no CURRENT "
                            "file): not read")
    return [UnsupportedFormatError(reason, path=path) for path, reason in sorted(unread.items())]
