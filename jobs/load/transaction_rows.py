"""``transactions``: each transactional message's state at a snapshot, kept incrementally.

A transaction's state follows from records of the commitlog (rmqlib.transactions): its
half message and the checks' re-puts, op messages naming them done, the committed copy,
the discarded copy. Rather than read them all again each night, a snapshot's rows are
folded from two small inputs:

* the previous snapshot's rows still ``pending`` (a decided transaction never changes);
* this snapshot's new records that concern transactions, read from the ``messages`` rows
  the load has just committed (the files of this broker and snapshot only: the Delta log's
  statistics choose them), op message bodies included (the load keeps them whatever the
  body policy).

So a night reads what it added plus the transactions still open, never the history. The
rows written are the transactions this snapshot touched and those still pending; the
latest row of a msgId is its current state.
"""

from __future__ import annotations

from datetime import datetime

import pyarrow.dataset as ds

from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import arrow_dataset, sparse_rows, sql_text
from jobs.lakehouse.tables import Registry
from jobs.load.state_rows import utc
from rmqlib.rocksdb.state_store import StateStore
from rmqlib.transactions import (
    CHECK_MAX_TIME_TOPIC,
    COMMIT_COPY,
    DISCARD,
    HALF,
    HALF_TOPIC,
    OP,
    OP_HALF_TOPIC,
    PENDING,
    REMOVE_TAG,
    ROCKSDB_HALF_TOPIC,
    ROCKSDB_OP_HALF_TOPIC,
    TRANS_OFFSET,
    Transaction,
    TransactionRecord,
    decode_op_body,
    fold_transactions,
    settle_with_state_store,
)

LOADED = "loaded"
#: What a record of each transaction system topic is (any other: a committed copy).
KINDS = {HALF_TOPIC: HALF, ROCKSDB_HALF_TOPIC: HALF, OP_HALF_TOPIC: OP,
         ROCKSDB_OP_HALF_TOPIC: OP, CHECK_MAX_TIME_TOPIC: DISCARD}
RECORD_COLUMNS = ("physical_offset", "topic", "queue_id", "queue_offset", "store_time",
                  "born_time", "msg_id", "tags", "properties", "body", "transaction_type")
Row = tuple[object, ...]


def transaction_rows(registry: Registry, broker: str, snapshot_id: str, seq: int,
                     state: StateStore | None, taken_at: datetime | None) -> list[Row]:
    """The ``transactions`` rows of snapshot ``snapshot_id`` (sequence ``seq``); ``state``:
    the store's rocksdbstore/ (RocksDB mode: check counts and dropped transactions),
    ``taken_at``: when the snapshot was taken (when a drop was found)."""
    previous = _previous_snapshot(registry, broker, seq)
    carried = [_transaction(row) for row in _previous_rows(registry, broker, previous)
               if row["state"] == PENDING]
    records = _records(registry, broker, snapshot_id)
    if not carried and not records:
        return []
    folded = fold_transactions(carried, records, continued=previous is not None)
    if state is not None and (state.undecided or state.trans_indexed_to is not None):
        settle_with_state_store(folded, {h.half_offset: h.check_times for h in state.undecided},
                                state.trans_indexed_to, _ms(taken_at))
    return [_row(broker, snapshot_id, t) for t in sorted(folded, key=lambda t: t.half_offset)]


def _previous_snapshot(registry: Registry, broker: str, seq: int) -> str | None:
    """The broker's latest loaded snapshot before ``seq`` (None: this is its first)."""
    earlier = [row for row in registry.read_rows(T.SNAPSHOTS, broker=broker)
               if row["status"] == LOADED and row["snapshot_seq"] < seq]
    if not earlier:
        return None
    return str(max(earlier, key=lambda row: row["snapshot_seq"])["snapshot_id"])


def _previous_rows(registry: Registry, broker: str, previous: str | None) -> list[dict]:
    """The ``transactions`` rows of snapshot ``previous``."""
    if previous is None:
        return []
    return registry.read_rows(T.TRANSACTIONS, broker=broker, snapshot_id=previous)


def _records(registry: Registry, broker: str, snapshot_id: str) -> list[TransactionRecord]:
    """This snapshot's records that concern transactions, from its ``messages`` rows."""
    messages = arrow_dataset(registry[T.MESSAGES].location,
                             files_where=f"broker = {sql_text(broker)} AND "
                                         f"first_snapshot_id = {sql_text(snapshot_id)}")
    system = ds.field("topic").isin(list(KINDS))
    wanted = ((ds.field("broker") == broker) & (ds.field("first_snapshot_id") == snapshot_id)
              & (system | (ds.field("transaction_type") == "COMMIT")))
    table = sparse_rows(messages, wanted, RECORD_COLUMNS).sort_by("physical_offset")
    return [record for row in table.to_pylist()
            if (record := _record(row)) is not None]


def _record(row: dict) -> TransactionRecord | None:
    topic = row["topic"]
    kind = KINDS.get(topic, COMMIT_COPY)
    properties = dict(row["properties"] or ())
    offsets: tuple[int, ...] = ()
    half_offsets: tuple[int, ...] = ()
    if kind == OP:
        if row["tags"] != REMOVE_TAG:
            return None
        if topic == ROCKSDB_OP_HALF_TOPIC:  # the half by commitlog offset, in a property
            named = properties.get(TRANS_OFFSET, "")
            half_offsets = (int(named),) if named.isdigit() else ()
        elif row["body"] is not None:
            offsets = tuple(decode_op_body(row["body"]).offsets)
    return TransactionRecord(
        kind, row["physical_offset"], _ms(row["store_time"]), row["msg_id"],
        row["queue_id"], row["queue_offset"], topic, _ms(row["born_time"]), properties,
        offsets, half_offsets)


def _ms(value: datetime | None) -> int:
    return 0 if value is None else round(value.timestamp() * 1000)


def _row(broker: str, snapshot_id: str, t: Transaction) -> Row:
    return (broker, snapshot_id, t.msg_id, t.transaction_id, t.producer_group, t.topic,
            t.queue_id, t.state, t.half_offset, t.half_queue_id, list(t.half_queue_offsets),
            utc(t.born_ms), utc(t.half_ms), t.checks, utc(t.last_check_ms),
            utc(t.decided_ms), t.seconds_to_decision, t.committed_offset,
            t.committed_queue_offset, t.changed)


def _transaction(row: dict) -> Transaction:
    """A pending row as the fold's starting state."""
    return Transaction(
        msg_id=row["msg_id"], transaction_id=row["transaction_id"],
        producer_group=row["producer_group"], topic=row["topic"], queue_id=row["queue_id"],
        half_offset=row["half_offset"], half_queue_id=row["half_queue_id"],
        half_queue_offsets=list(row["half_queue_offsets"]),
        born_ms=_ms(row["born_time"]), half_ms=_ms(row["half_time"]), checks=row["checks"],
        last_check_ms=_ms(row["last_check_time"]) if row["last_check_time"] else None)


__all__ = ["transaction_rows"]
