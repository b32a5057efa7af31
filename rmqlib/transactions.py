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
