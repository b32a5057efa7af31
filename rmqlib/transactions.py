"""Transactional messages as the broker keeps them: half messages, op messages, discards.

A transactional send is stored twice or more, never in place (broker module,
``org.apache.rocketmq.broker.transaction.queue``; topics from ``TopicValidator``):

* the **half** message: the producer's message put to ``RMQ_SYS_TRANS_HALF_TOPIC`` (queue
  0), its own topic and queue kept as the properties ``REAL_TOPIC`` and ``REAL_QID``, with
  ``TRAN_MSG=true`` and the producer group ``PGROUP``; each time the broker checks it back
  with the producer it is put again at the half queue's end (``TRANSACTION_CHECK_TIMES``
  counting the checks, ``TRAN_PREPARED_QUEUE_OFFSET`` the first copy's queue offset);
* the **op** message: once the producer commits or rolls back (or a check answers), an
  ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` message tagged ``d`` (``REMOVE_TAG``) in the queue of
  the same id, whose body names the half queue offsets now done: ``"<offset>,"``
  repeated in 5.x (``TransactionalMessageServiceImpl.deletePrepareMessage`` batches them,
  ``OFFSET_SEPARATOR``), one bare ``"<offset>"`` in 4.9.x
  (``TransactionalMessageBridge.addRemoveTagInTransactionOp``); read back with
  ``String.split(",")`` and ``Long.parseLong`` (``fillOpRemoveMap``);
* on commit, the real message in ``REAL_TOPIC`` (``buildTransactionalMessageFromHalfMessage``:
  the half's body and properties, same ``UNIQ_KEY``); on rollback, nothing more;
* a half message checked ``transactionCheckMax`` times without an answer is put to
  ``TRANS_CHECK_MAX_TIME_TOPIC`` and no longer checked.

:func:`decode_op_body` reads an op message's body; every byte is either an offset (with
its separator) or an unreadable region with the reason (the broker's own reader skips a
token it cannot parse: ``getLong`` answers -1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rmqlib.common.accounting import FileAccount

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
# 5.5.x with transRocksDBEnable and transWriteOriginTransHalfEnable=false: half messages go
# here instead, their state to rocksdbstore/ (rmqlib.rocksdb.state_store), and an op names
# its half by commitlog offset (TRANS_OFFSET property; the body is one 0x00 byte).
ROCKSDB_HALF_TOPIC = "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC"
ROCKSDB_OP_HALF_TOPIC = "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC"
TRANS_OFFSET = "TRANS_OFFSET"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
REMOVE_TAG = "d"
OFFSET_SEPARATOR = b","
# Properties (MessageConst) a half message carries.
REAL_TOPIC = "REAL_TOPIC"
REAL_QUEUE_ID = "REAL_QID"
TRANSACTION_PREPARED = "TRAN_MSG"
PRODUCER_GROUP = "PGROUP"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
TRANSACTION_ID = "__transactionId__"
CHECK_IMMUNITY_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"

_OFFSET = re.compile(rb"[+-]?[0-9]+")
_LONG = 2**63


@dataclass
class OpBodyDecode:
    """The half queue offsets an op message marks done, in body order, and the account."""

    offsets: list[int] = field(default_factory=list)
    account: FileAccount = field(default_factory=lambda: FileAccount("", 0))


def decode_op_body(body: bytes, name: str = "<op body>") -> OpBodyDecode:
    """The half queue offsets of an op message's ``body`` (see the module docstring)."""
    result = OpBodyDecode(account=FileAccount(name, len(body)))
    position = 0
    while position < len(body):
        end = body.find(OFFSET_SEPARATOR, position)
        stop = len(body) if end < 0 else end + 1
        token = body[position:end if end >= 0 else len(body)]
        reason = _bad_offset(token)
        if reason is None:
            result.offsets.append(int(token))
            result.account.decoded += stop - position
        else:
            result.account.add_unreadable(position, stop - position, f"op body: {reason}")
        position = stop
    result.account.check()
    return result


def _bad_offset(token: bytes) -> str | None:
    """Why ``token`` is no half queue offset (Long.parseLong), or None."""
    if _OFFSET.fullmatch(token) is None:
        return f"not a queue offset: {token[:40]!r}"
    value = int(token)
    if not -_LONG <= value < _LONG:
        return f"queue offset out of range: {token[:40]!r}"
    if value < 0:
        return f"negative queue offset {value}"
    return None


# --------------------------------------------------------------------------- state

PENDING, COMMITTED, ROLLED_BACK, DISCARDED = "pending", "committed", "rolled_back", "discarded"
STATES = (PENDING, COMMITTED, ROLLED_BACK, DISCARDED)
# What a record is to a transaction (TransactionRecord.kind).
HALF, OP, COMMIT_COPY, DISCARD = "half", "op", "commit", "discard"


@dataclass(frozen=True)
class TransactionRecord:
    """A commitlog record that says something about transactions, in log order: a half
    message (first put or a check's re-put), an op message (the half queue offsets it marks
    done), a committed copy (sysflag transaction type COMMIT) or a discarded half."""

    kind: str
    physical_offset: int
    store_ms: int
    msg_id: str | None = None
    queue_id: int = 0
    queue_offset: int = 0
    topic: str = ""
    born_ms: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    op_offsets: tuple[int, ...] = ()  # half queue offsets an op marks done
    op_half_offsets: tuple[int, ...] = ()  # half commitlog offsets (RocksDB mode's TRANS_OFFSET)


@dataclass
class Transaction:
    """One transactional message as far as the store has told so far.

    Its identity is the half message's ``UNIQ_KEY`` (msgId): every copy of it (the check
    re-puts, the committed copy, the discarded copy) carries the same one. Times are the
    broker's store times in epoch milliseconds (``born_ms``: the producer's, of the half).
    """

    msg_id: str
    transaction_id: str | None
    producer_group: str | None
    topic: str | None
    queue_id: int | None
    half_offset: int
    half_queue_id: int
    half_queue_offsets: list[int]
    born_ms: int
    half_ms: int
    checks: int = 0
    last_check_ms: int | None = None
    state: str = PENDING
    decided_ms: int | None = None
    committed_offset: int | None = None
    committed_queue_offset: int | None = None
    changed: bool = False  # a record of the latest fold touched it

    @property
    def seconds_to_decision(self) -> float | None:
        """From the first half message's store time to the decision's."""
        if self.decided_ms is None:
            return None
        return (self.decided_ms - self.half_ms) / 1000

    def decide(self, state: str, at_ms: int) -> None:
        if self.state == PENDING:
            self.state, self.decided_ms = state, at_ms


def fold_transactions(carried: list[Transaction], records: list[TransactionRecord],
                      *, continued: bool = False) -> list[Transaction]:
    """The transactions after ``records`` (in log order), starting from ``carried`` (those
    still pending before them): every carried one, and every one a record touched.

    * a half message opens a transaction (or, a check's re-put, counts a check: its
      ``TRANSACTION_CHECK_TIMES``) and adds its queue offset to those ops may name;
    * a committed copy commits it; an op naming one of its half queue offsets, before any
      committed copy, rolls it back (the broker writes the copy before the op:
      ``EndTransactionProcessor``); a copy in ``TRANS_CHECK_MAX_TIME_TOPIC`` discards it.

    A decision is final: a later record of a decided transaction changes nothing. Records
    of transactions neither carried nor opened here (decided before ``carried`` was taken)
    are left alone. ``continued``: ``carried`` is an earlier snapshot's pending state, so a
    check's re-put (a half copy with ``TRANSACTION_CHECK_TIMES``) of a msgId it does not hold
    is such a record too: a check that raced the transaction's decision (the check service
    read the op queue before the decision's op was stored and asked the producer again), not
    a transaction of its own.
    """
    by_id = {t.msg_id: t for t in carried}
    for t in carried:
        t.changed = False
    by_copy = {(t.half_queue_id, offset): t for t in carried for offset in t.half_queue_offsets}
    by_half = {t.half_offset: t for t in carried}
    for record in sorted(records, key=lambda r: r.physical_offset):
        if record.kind == HALF and record.msg_id:
            t = by_id.get(record.msg_id)
            if t is None and continued and TRANSACTION_CHECK_TIMES in record.properties:
                continue
            if t is None:
                t = by_id[record.msg_id] = _opened(record)
            _add_copy(t, record)
            by_copy[(record.queue_id, record.queue_offset)] = t
            by_half.setdefault(t.half_offset, t)
        elif record.kind == OP:
            named = [by_copy.get((record.queue_id, offset)) for offset in record.op_offsets]
            named += [by_half.get(offset) for offset in record.op_half_offsets]
            for t in named:
                if t is not None:
                    t.decide(ROLLED_BACK, record.store_ms)
                    t.changed = True
        elif record.msg_id in by_id:
            t = by_id[record.msg_id]
            if record.kind == COMMIT_COPY and t.state == PENDING:
                t.committed_offset, t.committed_queue_offset = (record.physical_offset,
                                                                record.queue_offset)
                _count_checks(t, record)  # the copy carries the checks (RocksDB mode: only it)
            t.decide(COMMITTED if record.kind == COMMIT_COPY else DISCARDED, record.store_ms)
            t.changed = True
    return list(by_id.values())


def settle_with_state_store(transactions: list[Transaction], undecided: dict[int, int],
                            indexed_to: int | None, at_ms: int) -> None:
    """RocksDB mode (``rocksdbstore/``'s ``trans`` family, ``undecided``: half offset ->
    check times): a pending transaction the family still holds has its check count from
    there; one whose half it indexed (at or below ``indexed_to``) but no longer holds, with
    no op and no committed copy, was dropped by the check loop after its last check:
    discarded, found at ``at_ms`` (the broker records no time for it)."""
    for t in transactions:
        if t.state != PENDING:
            continue
        if t.half_offset in undecided:
            if undecided[t.half_offset] != t.checks:
                t.checks, t.changed = undecided[t.half_offset], True
        elif indexed_to is not None and t.half_offset <= indexed_to:
            t.decide(DISCARDED, at_ms)
            t.changed = True


def _opened(record: TransactionRecord) -> Transaction:
    props = record.properties
    queue_id = props.get(REAL_QUEUE_ID)
    return Transaction(
        msg_id=str(record.msg_id), transaction_id=props.get(TRANSACTION_ID),
        producer_group=props.get(PRODUCER_GROUP), topic=props.get(REAL_TOPIC),
        queue_id=int(queue_id) if queue_id and queue_id.lstrip("-").isdigit() else None,
        half_offset=record.physical_offset, half_queue_id=record.queue_id,
        half_queue_offsets=[], born_ms=record.born_ms, half_ms=record.store_ms)


def _add_copy(t: Transaction, record: TransactionRecord) -> None:
    t.half_queue_offsets.append(record.queue_offset)
    t.changed = True
    if _count_checks(t, record):
        t.last_check_ms = record.store_ms


def _count_checks(t: Transaction, record: TransactionRecord) -> bool:
    """Take the record's TRANSACTION_CHECK_TIMES; whether it had one."""
    times = record.properties.get(TRANSACTION_CHECK_TIMES)
    if times is None or not times.isdigit():
        return False
    t.checks = max(t.checks, int(times))
    return True
