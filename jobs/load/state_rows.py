"""Rows of the small per-snapshot tables, built on the driver from rmqlib's typed views.

Config JSON, checkpoint, abort marker and the inventory are a few kilobytes; turning them
into rows on the driver is cheaper than a Spark job. Each function returns plain tuples
in the order of the table's data contract, so ``spark.createDataFrame(rows, schema)``
checks them against it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from rmqlib.checkpoint import read_checkpoint
from rmqlib.compaction.layout import COMPACTION_DIR
from rmqlib.compaction.store import CompactionScan, read_compaction
from rmqlib.config import ConfigDir, ConfigSource
from rmqlib.controller import BAK_SUFFIX as EPOCH_BAK_SUFFIX
from rmqlib.controller import (
    EPOCH_FILE,
    IDENTITY_FILE,
    BrokerIdentity,
    EpochFile,
    read_broker_identity,
    read_epoch_file,
)
from rmqlib.errors import StoreError
from rmqlib.markers import read_abort
from rmqlib.rocksdb.state_store import StateStore
from rmqlib.store.inventory import Inventory

Row = tuple[object, ...]
# Quarantine stream of a compacted queue's unit, record or file that breaks the layout.
COMPACTION_STREAM = "compaction"
# Quarantine stream of controller mode's files (epochFileCheckpoint, brokerIdentity).
CONTROLLER_STREAM = "controller"
# Quarantine stream of the 5.5.x state store (rocksdbstore/) and its entries.
STATE_STORE_STREAM = "rocksdbstore"
#: (file relative to the store, offset or entry number, length, reason).
Problem = tuple[str, int, int, str]


def utc(ms: int | None) -> datetime | None:
    """Epoch milliseconds as an aware UTC datetime (None and 0 stay None)."""
    if not ms:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _config_file(store: Path, source: ConfigSource | None, default: str) -> str:
    if source is None:
        return default
    try:
        return Path(source.used).resolve().relative_to(store).as_posix()
    except ValueError:
        return source.used


def topic_rows(broker: str, snapshot_id: str, store: Path, config: ConfigDir) -> list[Row]:
    topics = config.topics
    if topics is None:
        return []
    where = _config_file(store, topics.source, "config/topics.json")
    return [
        (broker, snapshot_id, name, t.read_queue_nums, t.write_queue_nums, t.perm,
         t.readable, t.writable, t.topic_filter_type, t.topic_sys_flag, t.order,
         t.queue_type, dict(t.attributes), where)
        for name, t in sorted(topics.topics.items())
    ]


def subscription_group_rows(broker: str, snapshot_id: str, store: Path,
                            config: ConfigDir) -> list[Row]:
    groups = config.subscription_groups
    if groups is None:
        return []
    where = _config_file(store, groups.source, "config/subscriptionGroup.json")
    return [
        (broker, snapshot_id, name, g.consume_enable, g.consume_from_min_enable,
         g.consume_broadcast_enable, g.consume_message_orderly, g.retry_queue_nums,
         g.retry_max_times, g.broker_id, g.which_broker_when_consume_slowly,
         g.notify_consumer_ids_changed_enable, g.group_sys_flag, g.consume_timeout_minute,
         dict(g.attributes), json.dumps(g.raw, sort_keys=True, ensure_ascii=False), where)
        for name, g in sorted(groups.groups.items())
    ]


def consumer_offset_rows(broker: str, snapshot_id: str, store: Path,
                         config: ConfigDir) -> list[Row]:
    rows: dict[tuple[str, str, int], Row] = {}
    for offsets, default in ((config.consumer_offsets, "config/consumerOffset.json"),
                             (config.lmq_consumer_offsets, "config/lmqConsumerOffset.json")):
        if offsets is None:
            continue
        where = _config_file(store, offsets.source, default)
        for o in offsets.offsets:
            # lmqConsumerOffset.json replaces consumerOffset.json when LMQ is on: its
            # rows win where both name the same queue.
            rows[(o.group, o.topic, o.queue_id)] = (
                broker, snapshot_id, o.group, o.topic, o.queue_id, o.offset, o.lmq,
                o.ambiguous, where, None if o.lmq else offsets.pull_offset(o))
    return [rows[key] for key in sorted(rows)]


def delay_offset_rows(broker: str, snapshot_id: str, store: Path,
                      config: ConfigDir) -> list[Row]:
    delays = config.delay_offsets
    if delays is None:
        return []
    where = _config_file(store, delays.source, "config/delayOffset.json")
    return [(broker, snapshot_id, level, level - 1, offset, where)
            for level, offset in sorted(delays.offsets.items())]


def pending_timer_rows(broker: str, snapshot_id: str, store: Path,
                       state: StateStore | None) -> list[Row]:
    """Timer messages the broker still has to deliver (rmqlib.timers.timer_store): timer log units
    whose tick is not read yet, then wheel-topic records not enqueued yet. A store without
    timer files has none. Bad timer bytes are the verify's business (quarantine does not
    cover them); what cannot be read yields no rows rather than guessed ones. ``state``: the
    store's rocksdbstore/ (its RocksDB timeline replaces the timer log when it has one)."""
    from rmqlib.timers.timer_store import read_timer_store

    if state is not None and state.timer_scan_offset is not None:
        return _timeline_rows(broker, snapshot_id, store, state)
    if not (store / "timerlog").is_dir():
        return []
    timers = read_timer_store(store)
    pending = timers.pending()
    if pending is None:
        return []
    rows: dict[int, Row] = {}
    for timer in pending.pending:
        rows[timer.commitlog_offset] = (
            broker, snapshot_id, timer.commitlog_offset, "pending", timer.commitlog_size,
            utc(timer.delivery_ms), utc(timer.write_time_ms), timer.roll,
            timer.may_be_cancelled, timer.topic_hash, timer.position)
    for record in timers.unenqueued():
        rows.setdefault(record.commitlog_offset, (
            broker, snapshot_id, record.commitlog_offset, "unenqueued", record.size, None,
            None, False, False, None, None))
    return [rows[offset] for offset in sorted(rows)]


def read_state_store_safely(store: Path) -> tuple[StateStore | None, list[Problem]]:
    """The store's rocksdbstore/ (None without one) and what of it could not be read: the
    whole database (a damaged or inconsistent copy; its state is then left out: no rows
    from it rather than guessed ones), or entries off the layout, each a problem."""
    from rmqlib.rocksdb.state_store import STATE_STORE_DIR, read_state_store

    try:
        state = read_state_store(store)
    except StoreError as error:
        return None, [(STATE_STORE_DIR, 0, 0, f"rocksdbstore/ not read: {error}")]
    if state is None:
        return None, []
    return state, [(STATE_STORE_DIR, number, len(bad.key),
                    f"RocksDB {bad.family} key {bad.key[:64]!r}: {bad.reason}")
                   for number, bad in enumerate(state.bad)]


def _timeline_rows(broker: str, snapshot_id: str, store: Path, state: StateStore) -> list[Row]:
    """5.5.x ``timerRocksDBEnable``: the timer log is no longer written; the RocksDB
    timeline (rmqlib.rocksdb.state_store) holds the timer messages not delivered yet, and
    the wheel topic's units past its scan checkpoint are not on the timeline yet."""
    from rmqlib.timers.timer_store import timer_queue_units

    rows: dict[int, Row] = {}
    for entry in state.pending_timers():
        rows[entry.commitlog_offset] = (
            broker, snapshot_id, entry.commitlog_offset, "pending", entry.size,
            utc(entry.delivery_ms), None, False, False, None, None)
    for unit in timer_queue_units(store, state.timer_scan_offset or 0):
        rows.setdefault(unit.commitlog_offset, (
            broker, snapshot_id, unit.commitlog_offset, "unenqueued", unit.size, None, None,
            False, False, None, None))
    return [rows[offset] for offset in sorted(rows)]


def config_problems(config: ConfigDir) -> list[tuple[str, str]]:
    """(file name, reason) of every config file that could not be used."""
    problems = [(name, str(error)) for name, error in sorted(config.errors.items())]
    problems += [(str(item.path), str(item)) for item in config.unsupported]
    problems += [(name, note) for name, notes in sorted(config.left_out.items())
                 for note in notes]
    problems += config.mid_rewrite  # "hot copy: ..." (rmqlib.common.races)
    return problems


def snapshot_row(broker: str, snapshot_id: str, seq: int, store: Path, store_label: str,
                 inventory: Inventory, taken_at: datetime | None, status: str,
                 commitlog_min: int | None, commitlog_max: int | None,
                 load_errors: list[str]) -> Row:
    """The ``snapshots`` row: what the snapshot is, before and after its load;
    ``store_label`` is where it is (the store's directory, or its URI in a bucket)."""
    abort = read_abort(store).abort
    checkpoint_values: list[object] = [None] * 6
    if (store / "checkpoint").is_file():
        try:
            ckp = read_checkpoint(store / "checkpoint")
            checkpoint_values = [utc(ckp.physic_msg_timestamp), utc(ckp.logics_msg_timestamp),
                                 utc(ckp.index_msg_timestamp), ckp.master_flushed_offset,
                                 ckp.confirm_phy_offset, ckp.logics_physical_offset]
        except StoreError as error:
            load_errors = [*load_errors, f"checkpoint: {error}"]
    totals = inventory.totals()
    return (
        broker, snapshot_id, seq, taken_at or newest_mtime(inventory), store_label,
        inventory.generation, list(inventory.evidence), sorted(inventory.features),
        abort is not None, abort.pid if abort is not None else None,
        *checkpoint_values,
        len(inventory.files), sum(f.size for f in inventory.files),
        {kind: v["files"] for kind, v in totals.items()},
        {kind: v["bytes"] for kind, v in totals.items()},
        commitlog_min, commitlog_max, status, load_errors,
    )


def newest_mtime(inventory: Inventory) -> datetime | None:
    """When a snapshot was taken, if nobody said: the newest file modification time."""
    times = [(inventory.root / f.path).stat().st_mtime for f in inventory.files]
    return datetime.fromtimestamp(max(times), tz=UTC) if times else None


def read_compaction_state(store: Path) -> CompactionScan | None:
    """The store's compacted queues (rmqlib.compaction), None when it has none."""
    if not (store / COMPACTION_DIR).is_dir():
        return None
    return read_compaction(store)


def compacted_entry_rows(broker: str, snapshot_id: str, store: Path,
                         scan: CompactionScan | None) -> list[Row]:
    """What consumers of each compacted queue are served at the snapshot: every unit of
    its sparse queue with the KEYS and UNIQ_KEY of the record it points at (null when no
    record is there: that unit is also a quarantine row). A damaged queue repeating a queue
    offset keeps its first unit (the others are quarantined too)."""
    rows: dict[tuple[str, int, int], Row] = {}
    for queue in scan.queues if scan is not None else ():
        for unit in queue.units:
            record = queue.record_of(unit)
            properties = record.properties if record is not None else {}
            rows.setdefault((queue.topic, queue.queue_id, unit.queue_offset), (
                broker, snapshot_id, queue.topic, queue.queue_id, unit.queue_offset,
                unit.position, unit.size, unit.tags_code, utc(unit.store_timestamp),
                properties.get("KEYS"), properties.get("UNIQ_KEY"),
                _relative(store, unit.queue_file), unit.file_position))
    return [rows[key] for key in sorted(rows)]


def compaction_problems(store: Path, scan: CompactionScan | None
                        ) -> list[tuple[str, int, int, str]]:
    """(file, offset, length, reason) of everything in the compacted queues that breaks
    their layout or pairing, for the quarantine (stream ``compaction``); what a running
    broker leaves (a record whose unit is not written yet) is not a problem."""
    if scan is None:
        return []
    issues = [*scan.issues, *(i for q in scan.queues for i in q.issues)]
    return [(_relative(store, i.path), i.offset or 0, i.length, i.reason)
            for i in issues if not i.expected]


def _relative(store: Path, path: str) -> str:
    try:
        return Path(path).relative_to(store).as_posix()
    except ValueError:
        return path


@dataclass
class ControllerState:
    """A controller-mode broker's epoch history and identity, and what could not be read
    of them (file, offset, length, reason) for the quarantine (stream ``controller``)."""

    epochs: EpochFile | None = None
    identity: BrokerIdentity | None = None
    problems: list[tuple[str, int, int, str]] = field(default_factory=list)


def read_controller_state(store: Path) -> ControllerState | None:
    """epochFileCheckpoint (or the .bak the broker would fall back to) and brokerIdentity;
    None for a broker not in controller mode (neither file)."""
    epoch_files = [store / EPOCH_FILE, store / (EPOCH_FILE + EPOCH_BAK_SUFFIX)]
    if not any(p.exists() for p in epoch_files) and not (store / IDENTITY_FILE).exists():
        return None
    state = ControllerState()
    accounts = []
    if any(p.exists() for p in epoch_files):
        try:
            state.epochs = read_epoch_file(store / EPOCH_FILE)
            accounts += state.epochs.accounts
        except StoreError as error:
            state.problems.append(_problem(store, error))
    if (store / IDENTITY_FILE).is_file():
        try:
            state.identity = read_broker_identity(store / IDENTITY_FILE)
            accounts.append(state.identity.account)
        except StoreError as error:
            state.problems.append(_problem(store, error))
    state.problems += [(_relative(store, r.path), r.offset, r.length, r.reason)
                       for account in accounts for r in account.unreadable]
    return state


def _problem(store: Path, error: StoreError) -> tuple[str, int, int, str]:
    path = Path(error.path) if error.path else store / EPOCH_FILE
    size = path.stat().st_size if path.is_file() else 0
    return (_relative(store, str(path)), error.offset or 0, size - (error.offset or 0),
            error.reason)


def broker_epoch_rows(broker: str, snapshot_id: str, store: Path,
                      state: ControllerState | None) -> list[Row]:
    """One row per master term the broker would load, with its commitlog range and the
    broker's controller-assigned identity."""
    if state is None or state.epochs is None:
        return []
    identity = state.identity
    used = _relative(store, state.epochs.used_path or str(store / EPOCH_FILE))
    rows: dict[int, Row] = {}
    for entry in state.epochs.entries:
        rows.setdefault(entry.epoch, (
            broker, snapshot_id, entry.epoch, entry.start_offset, entry.end_offset, used,
            identity.broker_id if identity else None, identity.cluster if identity else None))
    return [rows[epoch] for epoch in sorted(rows)]


def pop_in_flight_rows(broker: str, snapshot_id: str, store: Path,
                       config: ConfigDir) -> list[Row]:
    """Messages pop consumers took and have neither acked nor got back, read from what is
    still open in the store (rmqlib.store.pop_state.read_open_pop_state): the timer's
    pending records, the revive topic past the revive group's offset, kvStore/. Records
    that are no pop state are the verify's business; what cannot be read yields no row."""
    from rmqlib.store.pop_state import read_open_pop_state

    rows: dict[tuple[str, str, int, int], Row] = {}
    for m in read_open_pop_state(store)[1]:
        rows.setdefault((m.group, m.topic, m.queue_id, m.queue_offset), (
            broker, snapshot_id, m.group, m.topic, m.queue_id, m.queue_offset, utc(m.pop_time),
            utc(m.visible_at), "kv" if m.kv else "checkpoint",
            None if m.kv else m.revive_queue_id))
    return [rows[key] for key in sorted(rows)]
