"""A store's pop consumers: the checkpoint and ack records of its commitlog (rmqlib.pop)
against the revive group's offsets in its config, and, with KV pop, kvStore/'s records."""

from __future__ import annotations

from pathlib import Path

from rmqlib.commitlog.records import read_record_at
from rmqlib.config import load_config_dir
from rmqlib.errors import StoreError
from rmqlib.pop import (
    KV_DIRECTORY,
    KV_FAMILY,
    REVIVE_TOPIC_PREFIX,
    InFlight,
    PopRecord,
    PopState,
    decode_kv_records,
    read_pop_state,
    revive_offsets,
)
from rmqlib.queues.consumequeue import decode_queue, walk_queue_tree
from rmqlib.rocksdb.consume_queue import read_queues
from rmqlib.rocksdb.database import is_database, open_readonly
from rmqlib.store.commitlog_source import commitlog_source, every_record
from rmqlib.timers.timer_store import read_timer_store


def read_store_pop_state(store: str | Path) -> tuple[PopState, list[InFlight]]:
    """The pop state of every record of ``store`` (a full scan) and the messages in flight:
    classic pop's (the revive offsets from consumerOffset.json, or lmqConsumerOffset.json
    which replaces it with enableLmq; a store without either has revived nothing yet), then
    KV pop's (kvStore/, read on a clone), whose unreadable records are named in the state."""
    store = Path(store)
    state = read_pop_state(PopRecord(r.topic, r.queue_id, r.queue_offset, r.properties,
                                     r.body, r.physical_offset) for r in every_record(store))
    revived = _revive_offsets(store)
    return state, state.in_flight(revived) + _kv_in_flight(store, state)


def read_open_pop_state(store: str | Path) -> tuple[PopState, list[InFlight]]:
    """The messages in flight, read from only the records that can still matter (the
    nightly load's way: its cost follows what is in flight, not the commitlog's size):
    the checkpoints and acks still waiting in the timer (its pending and not yet enqueued
    records, rmqlib.timers), then the revive topic's records after the revive group's
    offset, read at their queue units; then kvStore/. A checkpoint is delivered to the
    revive topic before its acks, so the two sets hold every ack of every open checkpoint.
    """
    store = Path(store)
    revived = _revive_offsets(store)
    offsets = _pending_timer_offsets(store) | _revive_units_after(store, revived)
    state = PopState()
    records = []
    directory = commitlog_source(store).directory
    for offset in sorted(offsets):
        try:
            r = read_record_at(directory, offset, verify_crc=False)
        except StoreError as error:
            state.unreadable.append((offset, error.reason))
            continue
        records.append(PopRecord(r.topic, r.queue_id, r.queue_offset, r.properties, r.body,
                                 r.physical_offset))
    found = read_pop_state(records)
    found.unreadable[:0] = state.unreadable
    flying = found.in_flight(revived) + _kv_in_flight(store, found)
    return found, flying


def _revive_offsets(store: Path) -> dict[int, int]:
    config = load_config_dir(store / "config")
    tables = [t for t in (config.consumer_offsets, config.lmq_consumer_offsets) if t]
    return revive_offsets((o.topic, o.group, o.queue_id, o.offset)
                          for table in tables for o in table.offsets)


def _pending_timer_offsets(store: Path) -> set[int]:
    """Commitlog offsets of the timer's pending and not yet enqueued records."""
    if not (store / "timerlog").is_dir():
        return set()
    timers = read_timer_store(store)
    pending = timers.pending(with_commitlog=False)
    offsets = {t.commitlog_offset for t in pending.pending} if pending else set()
    return offsets | {r.commitlog_offset for r in timers.unenqueued()}


def _revive_units_after(store: Path, revived: dict[int, int]) -> set[int]:
    """Commitlog offsets of the revive topic's units after the revive group's offset, from
    file queues or a RocksDB queue."""
    root = store / "consumequeue"
    if is_database(root):
        scan = read_queues(root)
        return {int(phys) for q in scan.queues if q.topic.startswith(REVIVE_TOPIC_PREFIX)
                for off, phys in zip(q.queue_offset.tolist(), q.commitlog_offset.tolist(),
                                     strict=True) if off > revived.get(q.queue_id, -1)}
    offsets: set[int] = set()
    for queue in walk_queue_tree(root).queues if root.is_dir() else ():
        if not queue.topic.startswith(REVIVE_TOPIC_PREFIX):
            continue
        for decode in decode_queue(queue):
            after = decode.queue_offset > revived.get(queue.queue_id, -1)
            offsets |= set(decode.commitlog_offset[after].tolist())
    return offsets


def _kv_in_flight(store: Path, state: PopState) -> list[InFlight]:
    """KV pop's records (kvStore/, on a clone); those that are none go to ``state``."""
    if not is_database(store / KV_DIRECTORY):
        return []
    with open_readonly(store / KV_DIRECTORY) as db:
        flying, bad = decode_kv_records(db.items(KV_FAMILY))
    state.unreadable += [(-1, f"{KV_DIRECTORY}/{KV_FAMILY} record {key[:40].hex()}: {why}")
                         for key, why in bad]
    return flying
