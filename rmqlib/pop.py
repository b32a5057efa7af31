"""Pop consumers' in-flight messages (5.x classic pop), rebuilt from checkpoint and ack records.

A pop consumer (the gRPC clients' SimpleConsumer, a push consumer in pop mode, a low-level
pop) takes messages without owning a queue: the broker moves its consumer offset at pop time
and remembers which messages are out in a **checkpoint** record; each ack is an **ack** record.
Both are ordinary commitlog records (RocketMQ 5.5.0 ``broker/.../processor/PopMessageProcessor``
``#appendCheckPoint``, ``AckMessageProcessor#appendAck``, ``PopBufferMergeService``), tags
``ck``, ``ack`` and ``bAck`` (batch), with a JSON body, stored first under the timer topic
``rmq_sys_wheel_timer`` (property ``REAL_TOPIC`` = ``rmq_sys_REVIVE_LOG_<cluster>``,
``REAL_QID`` = the revive queue) and, when due, again under the revive topic itself
(``TimerMessageStore#convertMessage``). The revive service reads the revive topic as group
``CID_RMQ_SYS_REVIVE_GROUP`` and re-sends every unacked message of a checkpoint to the retry
topic once it is due (``PopReviveService#mergeAndRevive``), committing that queue offset.

So the messages in flight at a snapshot are: the offsets of every checkpoint whose revive copy
the revive group has not passed, minus the offsets acked for it. A checkpoint and its acks
match on topic + group + queue + start offset + pop time + broker name (``PopReviveService
#consumeReviveMessage``); the same checkpoint seen under both topics (and re-rolled by the
timer) is one. docs/pop.md has the layouts.

Limits (the broker's, not the reader's): with ``enablePopBufferMerge=true`` a checkpoint
lives in memory for up to 10 s and one acked within that time is never written, so after a
hard kill the store lacks it; orderly pop writes no checkpoint (its state is
``consumerOrderInfo.json``); KV pop (``popConsumerKVServiceEnable``) keeps its state in
``kvStore/`` instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"   # PopAckConstants.REVIVE_TOPIC + cluster
TIMER_TOPIC = "rmq_sys_wheel_timer"           # TimerMessageStore.TIMER_TOPIC
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"     # PopAckConstants.REVIVE_GROUP
CHECKPOINT_TAG, ACK_TAG, BATCH_ACK_TAG = "ck", "ack", "bAck"   # PopAckConstants
REAL_TOPIC, REAL_QUEUE_ID = "REAL_TOPIC", "REAL_QID"         # MessageConst
TAGS = "TAGS"


@dataclass(frozen=True)
class PopRecord:
    """What the reader needs of one commitlog record: where it is and what it says."""

    topic: str
    queue_id: int
    queue_offset: int
    properties: Mapping[str, str]
    body: bytes
    physical_offset: int


@dataclass
class Checkpoint:
    """One pop: the messages a group took from a queue at ``pop_time``, invisible for
    ``invisible_time`` ms, and what has been acked of them."""

    group: str
    topic: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    broker_name: str
    offsets: tuple[int, ...]
    revive_queue_id: int
    revive_offset: int | None = None      # its queue offset in the revive topic, once there
    acked: set[int] = field(default_factory=set)
    physical_offset: int = -1             # the first record that carried it

    @property
    def key(self) -> tuple:
        return merge_key(self.topic, self.group, self.queue_id, self.start_offset,
                         self.pop_time, self.broker_name)

    @property
    def visible_at(self) -> int:
        """When the broker revives what is still unacked (popTime + invisibleTime)."""
        return self.pop_time + self.invisible_time

    @property
    def in_flight(self) -> list[int]:
        return sorted(set(self.offsets) - self.acked)


@dataclass(frozen=True)
class InFlight:
    """A message popped and neither acked nor revived yet."""

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    pop_time: int
    visible_at: int
    revive_queue_id: int  # its checkpoint's revive queue (-1 for KV pop)
    kv: bool = False      # kept in kvStore/ (KV pop), not by checkpoint records


@dataclass
class PopState:
    """Every checkpoint found, acks without a checkpoint, and records that are no pop state."""

    checkpoints: dict[tuple, Checkpoint] = field(default_factory=dict)
    orphan_acks: int = 0
    unreadable: list[tuple[int, str]] = field(default_factory=list)  # (physical offset, why)

    def in_flight(self, revive_offsets: Mapping[int, int]) -> list[InFlight]:
        """The messages in flight, given the revive group's committed offset per revive
        queue (the revive-topic offset of the last checkpoint it processed: PopReviveService
        #mergeAndRevive; -1 when none): a checkpoint at or below it was revived (its unacked
        messages went to the retry topic, to be popped from there)."""
        found = []
        for ck in self.checkpoints.values():
            processed = revive_offsets.get(ck.revive_queue_id, -1)
            if ck.revive_offset is not None and ck.revive_offset <= processed:
                continue
            found += [InFlight(ck.group, ck.topic, ck.queue_id, offset, ck.pop_time,
                               ck.visible_at, ck.revive_queue_id) for offset in ck.in_flight]
        return sorted(found, key=lambda m: (m.group, m.topic, m.queue_id, m.queue_offset))


def merge_key(topic: str, group: str, queue_id: int, start_offset: int, pop_time: int,
              broker_name: str) -> tuple:
    return (topic, group, queue_id, start_offset, pop_time, broker_name)


def revive_queue(record: PopRecord) -> tuple[int, int | None] | None:
    """(revive queue, queue offset in the revive topic) of a pop-state record; None for a
    record that is none (the offset is None while it waits in the timer topic)."""
    if record.topic.startswith(REVIVE_TOPIC_PREFIX):
        return record.queue_id, record.queue_offset
    if record.topic == TIMER_TOPIC and \
            record.properties.get(REAL_TOPIC, "").startswith(REVIVE_TOPIC_PREFIX):
        queue = record.properties.get(REAL_QUEUE_ID, "")
        return (int(queue), None) if queue.lstrip("-").isdigit() else None
    return None


def read_pop_state(records: Iterable[PopRecord]) -> PopState:
    """Checkpoints and acks from the pop-state records among ``records`` (any order)."""
    state = PopState()
    acks: list[tuple[tuple, list[int]]] = []
    for record in records:
        where = revive_queue(record)
        if where is None:
            continue
        tag = record.properties.get(TAGS)
        if tag not in (CHECKPOINT_TAG, ACK_TAG, BATCH_ACK_TAG):
            continue
        body = _json_object(record.body)
        if body is None:
            if tag != CHECKPOINT_TAG:  # the old cancel form of a ck body is "rqid-offset"
                state.unreadable.append((record.physical_offset, f"{tag} body is not JSON"))
            continue
        try:
            if tag == CHECKPOINT_TAG:
                _add_checkpoint(state, body, where, record.physical_offset)
            else:
                acks.append(_ack(body, tag))
        except (KeyError, TypeError, ValueError) as error:
            state.unreadable.append((record.physical_offset, f"{tag} body: {error!r}"))
    for key, offsets in acks:
        checkpoint = state.checkpoints.get(key)
        if checkpoint is None:
            state.orphan_acks += 1
        else:
            checkpoint.acked.update(offsets)
    return state


def _add_checkpoint(state: PopState, body: dict[str, Any], where: tuple[int, int | None],
                    physical_offset: int) -> None:
    """PopCheckPoint's JSON: so start offset, pt pop time, it invisible time, n count,
    q queue, t topic, c group, bn broker, d offset diffs (message i is at so + d[i])."""
    start, count = int(body["so"]), int(body["n"])
    diffs = body.get("d") or list(range(count))
    checkpoint = Checkpoint(
        str(body["c"]), str(body["t"]), int(body["q"]), start, int(body["pt"]),
        int(body["it"]), str(body.get("bn") or ""),
        tuple(start + int(d) for d in diffs[:count]), where[0], None,
        physical_offset=physical_offset)
    known = state.checkpoints.setdefault(checkpoint.key, checkpoint)
    if where[1] is not None:
        known.revive_offset = where[1] if known.revive_offset is None else \
            min(known.revive_offset, where[1])


def _ack(body: dict[str, Any], tag: str) -> tuple[tuple, list[int]]:
    """AckMsg's JSON (ao acked offset; so, pt: the checkpoint's start offset and pop time)
    or BatchAckMsg's (aol: the acked offsets)."""
    offsets = [int(o) for o in body["aol"]] if tag == BATCH_ACK_TAG else [int(body["ao"])]
    key = merge_key(str(body["t"]), str(body["c"]), int(body["q"]), int(body["so"]),
                    int(body["pt"]), str(body.get("bn") or ""))
    return key, offsets


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


# KV pop (popConsumerKVServiceEnable; broker/.../pop/PopConsumerService, PopConsumerRocksdbStore,
# PopConsumerRecord): one record per popped, unacked message in kvStore/'s column family popState;
# an ack or a revive deletes it. Key: visible-again time (int64 BE) | group "@" topic "@" | queue
# id (int32 BE) | "@" | queue offset (int64 BE); value: the record as JSON.
KV_DIRECTORY, KV_FAMILY = "kvStore", "popState"
KV_VALUE_FIELDS = ("groupId", "topicId", "queueId", "offset", "popTime", "invisibleTime")


def decode_kv_records(pairs: Iterable[tuple[bytes, bytes]]
                      ) -> tuple[list[InFlight], list[tuple[bytes, str]]]:
    """The in-flight messages of KV pop records (key, value) and the records that are none
    (key, reason): the value's JSON names the message; its key must agree."""
    found: list[InFlight] = []
    bad: list[tuple[bytes, str]] = []
    for key, value in pairs:
        body = _json_object(value)
        if body is None or any(name not in body for name in KV_VALUE_FIELDS):
            bad.append((key, "value is not a pop record's JSON"))
            continue
        try:
            message = InFlight(str(body["groupId"]), str(body["topicId"]), int(body["queueId"]),
                               int(body["offset"]), int(body["popTime"]),
                               int(body["popTime"]) + int(body["invisibleTime"]), -1, kv=True)
        except (TypeError, ValueError) as error:
            bad.append((key, f"value: {error}"))
            continue
        if key != kv_key(message):
            bad.append((key, "key does not name the message its value holds"))
            continue
        found.append(message)
    return sorted(found, key=lambda m: (m.group, m.topic, m.queue_id, m.queue_offset)), bad


def kv_key(message: InFlight) -> bytes:
    """PopConsumerRecord#getKeyBytes of a message."""
    names = f"{message.group}@{message.topic}@".encode()
    return (message.visible_at.to_bytes(8, "big", signed=True) + names
            + message.queue_id.to_bytes(4, "big", signed=True) + b"@"
            + message.queue_offset.to_bytes(8, "big", signed=True))


def revive_offsets(offsets: Iterable[tuple[str, str, int, int]]) -> dict[int, int]:
    """The revive group's committed offset per revive queue, from (topic, group, queue id,
    offset) consumer-offset rows."""
    return {queue: offset for topic, group, queue, offset in offsets
            if group == REVIVE_GROUP and topic.startswith(REVIVE_TOPIC_PREFIX)}
