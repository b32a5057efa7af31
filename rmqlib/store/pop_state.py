"""A store's pop consumers: the checkpoint and ack records of its commitlog (rmqlib.pop)
against the revive group's offsets in its config, and, with KV pop, kvStore/'s records."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from rmqlib.commitlog.records import CommitLogRecord, read_record_at, scan_store
from rmqlib.config import load_config_dir
from rmqlib.errors import StoreError
from rmqlib.pop import (
    KV_DIRECTORY,
    KV_FAMILY,
    REVIVE_TOPIC_PREFIX,
    TIMER_TOPIC,
    InFlight,
    PopRecord,
    PopState,
    decode_kv_records,
    read_pop_state,
    revive_offsets,
    revive_queue,
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
    state = read_pop_state(_pop_record(r) for r in every_record(store))
    revived = _revive_offsets(store)
    return state, state.in_flight(revived) + _kv_in_flight(store, state)


def read_open_pop_state(store: str | Path) -> tuple[PopState, list[InFlight]]:
    """The messages in flight, read from only the records that can still matter (the
    nightly load's way: its cost follows what is in flight, not the commitlog's size):
    the checkpoints and acks still waiting in the timer (its pending and not yet enqueued
    records, rmqlib.timers), the revive topic's records after the revive group's offset
    (read at their queue units), and the records no queue indexes yet (a copy of a running
    broker: after the last unit of the timer and revive queues, all dispatched before
    them); then kvStore/. A checkpoint reaches the revive topic before its acks, so these
    hold every ack of every open checkpoint. A part that cannot be read is named in the
    state's ``unreadable``, never raised.
    """
    store = Path(store)
    unreadable: list[tuple[int, str]] = []
    revived = _revive_offsets(store)
    offsets: set[int] = set()
    frontier = -1
    try:
        timer = _pending_timer_offsets(store)
        after, frontier = _indexed_pop_units(store, revived, every_timer_unit=timer is None)
        offsets |= after | (timer or set())
    except StoreError as error:
        unreadable.append((-1, f"{error.reason} ({error.path})"))
    directory = commitlog_source(store).directory
    records = []
    for offset in sorted(offsets):
        try:
            records.append(_pop_record(read_record_at(directory, offset, verify_crc=False)))
        except StoreError as error:
            unreadable.append((offset, error.reason))
    if frontier >= 0:
        try:
            tail = (_pop_record(r) for r in _records_from(store, frontier))
            records += [r for r in tail if revive_queue(r) is not None]
        except StoreError as error:
            unreadable.append((frontier, error.reason))
    found = read_pop_state(records)
    found.unreadable[:0] = unreadable
    flying = found.in_flight(revived)
    try:
        flying += _kv_in_flight(store, found)
    except StoreError as error:
        found.unreadable.append((-1, f"{error.reason} ({error.path})"))
    return found, flying


def _pop_record(r: CommitLogRecord) -> PopRecord:
    return PopRecord(r.topic, r.queue_id, r.queue_offset, r.properties, r.body,
                     r.physical_offset)


def _records_from(store: Path, frontier: int) -> Iterator[CommitLogRecord]:
    """The records at and after ``frontier`` (a record boundary), in log order."""
    source = commitlog_source(store)
    if source.dledger:
        yield from (r for r in every_record(store) if r.physical_offset >= frontier)
    else:
        yield from scan_store(source.directory, start_offset=frontier, verify_crc=False)


def _revive_offsets(store: Path) -> dict[int, int]:
    config = load_config_dir(store / "config")
    tables = [t for t in (config.consumer_offsets, config.lmq_consumer_offsets) if t]
    return revive_offsets((o.topic, o.group, o.queue_id, o.offset)
                          for table in tables for o in table.offsets)


def _pending_timer_offsets(store: Path) -> set[int] | None:
    """Commitlog offsets of the timer's pending and not yet enqueued records (a copy taken
    before the timer wrote its log has only the latter); None without a timer checkpoint:
    the timer never ran, and every record of its queue is still to come."""
    timers = read_timer_store(store)
    pending = timers.pending(with_commitlog=False)
    if pending is None:
        return None
    return {t.commitlog_offset for t in pending.pending} | {
        r.commitlog_offset for r in timers.unenqueued()}


def _indexed_pop_units(store: Path, revived: dict[int, int], *, every_timer_unit: bool
                       ) -> tuple[set[int], int]:
    """Commitlog offsets of the revive topic's units after the revive group's offset (and
    of every timer unit, when asked), and the end of the last record the timer queue or a
    revive queue indexes (every record before it was dispatched: the broker dispatches the
    log in order); from file queues or a RocksDB queue. A store with neither queue has no
    pop state to find: (set(), -1)."""
    after: set[int] = set()
    frontier = -1
    for topic, queue_id, queue_offsets, positions, sizes in _pop_queues(store):
        if len(positions):
            frontier = max(frontier, int(positions[-1]) + int(sizes[-1]))
        if topic.startswith(REVIVE_TOPIC_PREFIX):
            keep = queue_offsets > revived.get(queue_id, -1)
            after |= set(positions[keep].tolist())
        elif every_timer_unit:
            after |= set(positions[sizes > 0].tolist())
    return after, frontier


def _pop_queues(store: Path) -> Iterator[tuple[str, int, np.ndarray, np.ndarray, np.ndarray]]:
    """(topic, queue id, queue offsets, commitlog offsets, sizes) of the timer topic's and
    the revive topics' queues."""
    root = store / "consumequeue"

    def wanted(topic: str) -> bool:
        return topic == TIMER_TOPIC or topic.startswith(REVIVE_TOPIC_PREFIX)

    if is_database(root):
        for q in read_queues(root).queues:
            if wanted(q.topic):
                yield q.topic, q.queue_id, q.queue_offset, q.commitlog_offset, q.size
        return
    for queue in walk_queue_tree(root).queues if root.is_dir() else ():
        if wanted(queue.topic):
            decodes = decode_queue(queue)
            yield (queue.topic, queue.queue_id,
                   np.concatenate([d.queue_offset for d in decodes] or [np.zeros(0, np.int64)]),
                   np.concatenate([d.commitlog_offset for d in decodes]
                                  or [np.zeros(0, np.int64)]),
                   np.concatenate([d.size for d in decodes] or [np.zeros(0, np.int64)]))


def _kv_in_flight(store: Path, state: PopState) -> list[InFlight]:
    """KV pop's records (kvStore/, on a clone); those that are none go to ``state``."""
    if not is_database(store / KV_DIRECTORY):
        return []
    with open_readonly(store / KV_DIRECTORY) as db:
        flying, bad = decode_kv_records(db.items(KV_FAMILY))
    state.unreadable += [(-1, f"{KV_DIRECTORY}/{KV_FAMILY} record {key[:40].hex()}: {why}")
                         for key, why in bad]
    return flying
