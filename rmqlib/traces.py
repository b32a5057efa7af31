"""Message trace records: the bodies RocketMQ clients write to the trace topic.

With tracing on in a client (``new DefaultMQProducer(group, true)``, a consumer's
``enableMsgTrace``) every send, every consumption and every transaction decision becomes a
*trace context*, encoded by ``TraceDataEncoder.encoderFromContextBean`` (client module,
``org.apache.rocketmq.client.trace``; 4.9.x and 5.x write the same layout) and sent by
``AsyncTraceDispatcher`` as the body of a message of ``RMQ_SYS_TRACE_TOPIC`` (or the topic
the client names; ``TRACE_TOPIC_PREFIX + region`` for the cloud channel): many contexts
concatenated, up to 128,000 characters a body, UTF-8. The body's layout:

* a context ends with ``FIELD_SPLITOR`` (``\\x02``); its fields are separated by
  ``CONTENT_SPLITOR`` (``\\x01``), the first one its ``TraceType``;
* ``Pub`` (a send): time, region, producer group, topic, msgId, tags, keys, store host,
  body length, cost (ms), message type (``MessageType`` ordinal), offsetMsgId, success;
* ``SubBefore`` (a consumption starts, one per message of the batch): time, region,
  consumer group, request id, msgId, retry times, keys;
* ``SubAfter`` (it ended): request id, msgId, cost (ms), success, keys, context code
  (``ConsumeReturnType`` ordinal), then time and consumer group (not on the cloud
  channel);
* ``EndTransaction`` (a local transaction's decision): time, region, producer group,
  topic, msgId, tags, keys, store host, message type, transaction id, state
  (``LocalTransactionState`` name), whether it answered a broker's check;
* ``Recall`` (5.x, a recalled delay message): time, region, group, topic, msgId, success.

A Java ``null`` is written as the text ``null``: it reads back as None here. Fields are
taken as ``TraceDataEncoder.decoderFromTraceDataString`` takes them (``String.split``
drops trailing empty fields; a ``Pub`` of 13 fields has no offsetMsgId, of 15 or more a
client host). A context that Java's decoder would fail on (a missing field, a number or a
type it cannot parse) is an unreadable region of the body with the reason, never a
guess; every byte of a body is either a decoded context or such a region.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rmqlib.common.accounting import FileAccount

CONTENT_SPLITOR = b"\x01"
FIELD_SPLITOR = b"\x02"
DEFAULT_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
TRACE_TOPIC_PREFIX = "rmq_sys_TRACE_DATA_"  # + region: the cloud access channel's topics
PUB, SUB_BEFORE, SUB_AFTER, END_TRANSACTION, RECALL = (
    "Pub", "SubBefore", "SubAfter", "EndTransaction", "Recall")
#: ``org.apache.rocketmq.common.message.MessageType`` by ordinal.
MESSAGE_TYPES = ("Normal_Msg", "Trans_Msg_Half", "Trans_msg_Commit", "Delay_Msg", "Order_Msg")
#: ``org.apache.rocketmq.client.producer.LocalTransactionState``.
TRANSACTION_STATES = ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW")
JAVA_NULL = "null"
_INTEGER = re.compile(r"[+-]?[0-9]+")


class TraceFieldError(ValueError):
    """A context Java's decoder could not read either (the reason names the field)."""


@dataclass(frozen=True)
class TraceRecord:
    """One trace context of a body: where it is (byte position and length, separator
    included) and its fields (None where its type has none, or Java wrote ``null``)."""

    position: int
    length: int
    trace_type: str
    timestamp_ms: int | None = None
    region_id: str | None = None
    group: str | None = None
    request_id: str | None = None
    topic: str | None = None
    msg_id: str | None = None
    tags: str | None = None
    keys: str | None = None
    store_host: str | None = None
    client_host: str | None = None
    body_length: int | None = None
    cost_ms: int | None = None
    msg_type: str | None = None
    offset_msg_id: str | None = None
    success: bool | None = None
    retry_times: int | None = None
    context_code: int | None = None
    transaction_id: str | None = None
    transaction_state: str | None = None
    from_transaction_check: bool | None = None


@dataclass
class TraceBodyDecode:
    """The contexts of one body, and the account of its bytes."""

    records: list[TraceRecord] = field(default_factory=list)
    account: FileAccount = field(default_factory=lambda: FileAccount("", 0))


def decode_trace_body(body: bytes, name: str = "<trace body>") -> TraceBodyDecode:
    """Every trace context of ``body`` (a trace message's body, decompressed); ``name``
    says which message it is in the account's regions."""
    result = TraceBodyDecode(account=FileAccount(name, len(body)))
    position = 0
    while position < len(body):
        end = body.find(FIELD_SPLITOR, position)
        stop = len(body) if end < 0 else end + 1  # the separator belongs to its context
        segment = body[position:end if end >= 0 else len(body)]
        try:
            if end < 0:
                raise TraceFieldError("no field separator (\\x02) after the last context: "
                                      "the body was cut")
            result.records.append(_record(segment, position, stop - position))
            result.account.decoded += stop - position
        except TraceFieldError as error:
            result.account.add_unreadable(position, stop - position, f"trace context: {error}")
        position = stop
    result.account.check()
    return result


def _record(segment: bytes, position: int, length: int) -> TraceRecord:
    try:
        text = segment.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TraceFieldError(f"not UTF-8 at byte {error.start}") from None
    fields = text.split("\x01")
    while len(fields) > 1 and fields[-1] == "":  # Java's String.split drops trailing ""
        fields.pop()
    kind = fields[0]
    decode = _DECODERS.get(kind)
    if decode is None:
        raise TraceFieldError(f"unknown trace type {kind[:40]!r}")
    return decode(_Fields(kind, fields), position, length)


class _Fields:
    """A context's fields, read as Java's decoder reads them."""

    def __init__(self, kind: str, values: list[str]) -> None:
        self.kind, self.values = kind, values

    def __len__(self) -> int:
        return len(self.values)

    def text(self, index: int) -> str | None:
        value = self._get(index)
        return None if value == JAVA_NULL else value

    def integer(self, index: int, bits: int = 32) -> int:
        """Integer.parseInt (``bits`` 32) or Long.parseLong (64): an optional sign and
        ASCII digits, in range (Python's int() would also take spaces and underscores)."""
        value = self._get(index)
        if _INTEGER.fullmatch(value) is None or not \
                -(2 ** (bits - 1)) <= int(value) < 2 ** (bits - 1):
            raise TraceFieldError(f"{self.kind} field {index} is not a {bits}-bit number: "
                                  f"{value[:40]!r}")
        return int(value)

    def boolean(self, index: int) -> bool:
        return self._get(index).lower() == "true"  # Boolean.parseBoolean

    def choice(self, index: int, names: tuple[str, ...], by_ordinal: bool) -> str:
        if by_ordinal:
            ordinal = self.integer(index)
            if 0 <= ordinal < len(names):
                return names[ordinal]
            raise TraceFieldError(f"{self.kind} field {index}: no value of ordinal {ordinal}")
        value = self._get(index)
        if value in names:
            return value
        raise TraceFieldError(f"{self.kind} field {index}: unknown value {value[:40]!r}")

    def _get(self, index: int) -> str:
        if index >= len(self.values):
            raise TraceFieldError(f"{self.kind} with {len(self.values)} fields has no "
                                  f"field {index}")
        return self.values[index]


def _pub(f: _Fields, position: int, length: int) -> TraceRecord:
    offset_msg_id = f.text(12) if len(f) >= 14 else None
    success = f.boolean(13) if len(f) >= 14 else f.boolean(12) if len(f) == 13 else None
    return TraceRecord(
        position, length, PUB, timestamp_ms=f.integer(1, 64), region_id=f.text(2),
        group=f.text(3), topic=f.text(4), msg_id=f.text(5), tags=f.text(6), keys=f.text(7),
        store_host=f.text(8), body_length=f.integer(9), cost_ms=f.integer(10),
        msg_type=f.choice(11, MESSAGE_TYPES, by_ordinal=True), offset_msg_id=offset_msg_id,
        success=success, client_host=f.text(14) if len(f) >= 15 else None)


def _sub_before(f: _Fields, position: int, length: int) -> TraceRecord:
    return TraceRecord(
        position, length, SUB_BEFORE, timestamp_ms=f.integer(1, 64), region_id=f.text(2),
        group=f.text(3), request_id=f.text(4), msg_id=f.text(5), retry_times=f.integer(6),
        keys=f.text(7))


def _sub_after(f: _Fields, position: int, length: int) -> TraceRecord:
    later = len(f) >= 9  # the time and group, written unless on the cloud channel
    return TraceRecord(
        position, length, SUB_AFTER, request_id=f.text(1), msg_id=f.text(2),
        cost_ms=f.integer(3), success=f.boolean(4), keys=f.text(5),
        context_code=f.integer(6) if len(f) >= 7 else None,
        timestamp_ms=f.integer(7, 64) if later else None, group=f.text(8) if later else None)


def _end_transaction(f: _Fields, position: int, length: int) -> TraceRecord:
    return TraceRecord(
        position, length, END_TRANSACTION, timestamp_ms=f.integer(1, 64), region_id=f.text(2),
        group=f.text(3), topic=f.text(4), msg_id=f.text(5), tags=f.text(6), keys=f.text(7),
        store_host=f.text(8), msg_type=f.choice(9, MESSAGE_TYPES, by_ordinal=True),
        transaction_id=f.text(10),
        transaction_state=f.choice(11, TRANSACTION_STATES, by_ordinal=False),
        from_transaction_check=f.boolean(12))


def _recall(f: _Fields, position: int, length: int) -> TraceRecord:
    return TraceRecord(
        position, length, RECALL, timestamp_ms=f.integer(1, 64), region_id=f.text(2),
        group=f.text(3), topic=f.text(4), msg_id=f.text(5), success=f.boolean(6))


_DECODERS = {PUB: _pub, SUB_BEFORE: _sub_before, SUB_AFTER: _sub_after,
             END_TRANSACTION: _end_transaction, RECALL: _recall}
