"""The 5.x timer store as a whole: which timer messages are still pending, and the checks
``verify`` runs over ``timerlog/``, ``timerwheel`` and ``config/timercheck``.

How a timer message travels (``TimerMessageStore``, 5.3.3 to 5.5):

1. The producer's record is stored in topic ``rmq_sys_wheel_timer`` queue 0 with
   ``TIMER_OUT_MS`` (delivery time), ``REAL_TOPIC`` and ``REAL_QID``.
2. *Enqueue* reads that queue from ``lastTimerQueueOffset`` on. A record whose delivery
   time already passed (before the current write second) is delivered at once and never
   gets a timer log unit; any other gets one unit (``rmqlib.timers.timerlog``) and its wheel slot
   (``rmqlib.timers.timerwheel``) is updated. A delivery beyond the roll window
   (``timerRollWindowSlot`` ticks, 2 days by default) is written as a ROLL unit due
   within the window instead.
3. *Dequeue* walks the wheel one tick (``timerPrecisionMs``) at a time from
   ``currReadTimeMs``: it reads the slot of that tick, follows the chain of its units,
   delivers them (DELETE units first: they cancel the messages of the same tick whose
   ``REAL_TOPIC+UNIQ_KEY`` equals their ``TIMER_DEL_UNIQKEY``; ROLL units are written back
   to ``rmq_sys_wheel_timer`` as new records, to be enqueued again) and only then moves
   to the next tick. The checkpoint stores that read time as ``lastReadTimeMs``.

Hence the rule :func:`pending_timers` applies: a unit is **pending** when

* it survives recovery: it lies before :func:`rmqlib.timers.timerlog.recovery_end` (the broker
  truncates the timer log at the first unit it rejects after ``lastTimerLogFlushPos``);
* its tick is not read yet: ``delivery_ms // precision >= lastReadTimeMs // precision``
  (the tick at ``lastReadTimeMs`` itself is still to be read; with an aligned
  ``lastReadTimeMs`` this is ``delivery_ms >= lastReadTimeMs``);
* it is a message, not a cancellation: DELETE units that are not ROLL units are not
  listed; they cancel messages of the same tick (resolved only when a way to read the
  commitlog records is given, otherwise those messages are flagged ``may_be_cancelled``);
* a ROLL unit is pending as a roll: at ``delivery_ms`` the message is re-enqueued, its
  real delivery time is its record's ``TIMER_OUT_MS``.

Records of ``rmq_sys_wheel_timer`` from the queue offset the broker re-enqueues from
(:func:`requeue_start`: one past the record of the last surviving unit, at most the
checkpoint's ``masterTimerQueueOffset``) were not enqueued as far as the files know: they
have no unit yet and are pending too (:func:`unenqueued_timer_records`).

The on-disk checkpoint lags the broker by up to a flush interval (1 s by default) and the
wheel is not flushed at shutdown: after a crash "pending" means "the broker will deliver
it (again) when it restarts" (at least once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmqlib.checkpoint import TimerCheckpoint, read_timercheck
from rmqlib.commitlog.properties import REAL_TOPIC, TIMER_OUT_MS, UNIQ_KEY
from rmqlib.common.accounting import FileAccount
from rmqlib.common.javahash import java_string_hash
from rmqlib.common.segments import UNSIZED_FILE_REASON, segment_issues, unsized_last_file
from rmqlib.errors import StoreError
from rmqlib.timers.timerlog import (
    MAGIC_DEFAULT,
    NO_PREV_POS,
    TIMERLOG_DIR,
    TimerLogColumns,
    TimerLogFileDecode,
    TimerLogUnit,
    decode_timerlog_file,
    is_delete_marker,
    list_timerlog,
    recovery_end,
    timerlog_columns,
    timerlog_dir,
)
from rmqlib.timers.timerwheel import (
    DEFAULT_PRECISION_MS,
    TIMERWHEEL_FILE,
    TimerWheelDecode,
    read_timerwheel,
)

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMERCHECK_FILE = Path("config") / "timercheck"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
ERROR, WARNING = "error", "warning"

#: Properties of the commitlog record at (offset, size), or None when it cannot be read.
PropertiesOf = Callable[[int, int], Mapping[str, str] | None]


def delete_key(real_topic: str, uniq_key: str) -> str:
    """``TimerMessageStore.buildDeleteKey``: what a DELETE record's TIMER_DEL_UNIQKEY holds."""
    return f"{real_topic}+{uniq_key}"


# --------------------------------------------------------------------------- pending


@dataclass(frozen=True)
class PendingTimer:
    """A timer log unit the broker has not delivered yet."""

    position: int  # global timer log position
    commitlog_offset: int  # the rmq_sys_wheel_timer record
    commitlog_size: int
    delivery_ms: int  # for a ROLL unit: when it is rolled over again
    write_time_ms: int
    magic: int
    topic_hash: int
    roll: bool
    may_be_cancelled: bool = False  # a DELETE unit shares its tick; records not read

    def as_dict(self) -> dict[str, object]:
        return {"position": self.position, "commitlog_offset": self.commitlog_offset,
                "commitlog_size": self.commitlog_size, "delivery_ms": self.delivery_ms,
                "write_time_ms": self.write_time_ms, "magic": self.magic,
                "topic_hash": self.topic_hash, "roll": self.roll,
                "may_be_cancelled": self.may_be_cancelled}


@dataclass
class PendingTimers:
    """The answer to "which timer messages are pending", with what it was based on."""

    last_read_time_ms: int
    precision_ms: int
    recovery_end: int
    pending: list[PendingTimer] = field(default_factory=list)
    cancelled: list[PendingTimer] = field(default_factory=list)  # by a DELETE unit
    delete_markers: int = 0  # pending DELETE units (cancellations, not messages)
    dropped: int = 0  # units past the recovery end: the broker truncates them
    delivered: int = 0  # units whose tick was read already


def pending_timers(decodes: Sequence[TimerLogFileDecode], checkpoint: TimerCheckpoint, *,
                   precision_ms: int = DEFAULT_PRECISION_MS,
                   properties_of: PropertiesOf | None = None) -> PendingTimers:
    """The timer log units not delivered yet (the rule is in the module docstring).

    ``decodes`` are the timer log files in start order; ``properties_of`` (optional)
    reads a commitlog record's properties, which lets DELETE units cancel the messages
    they name instead of only flagging them. Units are filtered as arrays: only the
    pending ones become objects.
    """
    end = recovery_end(decodes, checkpoint.last_timer_log_flush_pos)
    result = PendingTimers(checkpoint.last_read_time_ms, precision_ms, end)
    columns = timerlog_columns(decodes)
    tick = columns.delivery_ms // precision_ms
    survives = columns.position < end
    unread = survives & (tick >= checkpoint.last_read_time_ms // precision_ms)
    result.dropped = int(np.count_nonzero(~survives))
    result.delivered = int(np.count_nonzero(survives & ~unread))
    index = np.flatnonzero(unread)
    index = index[np.lexsort((columns.position[index], tick[index]))]
    ticks = tick[index]
    for group in np.split(index, np.flatnonzero(np.diff(ticks)) + 1) if index.size else []:
        _pending_of_tick([columns.unit(int(i)) for i in group], result, properties_of)
    return result


def _pending_of_tick(units: list[TimerLogUnit], result: PendingTimers,
                     properties_of: PropertiesOf | None) -> None:
    """One tick, as ``dequeue`` handles it: DELETE units first, then the messages."""
    markers = [u for u in units if is_delete_marker(u.magic)]
    result.delete_markers += len(markers)
    keys = _delete_keys(markers, properties_of) if properties_of else set()
    for unit in units:
        if is_delete_marker(unit.magic):
            continue
        entry = PendingTimer(unit.position, unit.commitlog_offset, unit.commitlog_size,
                             unit.delivery_ms, unit.write_time_ms, unit.magic,
                             unit.topic_hash, unit.is_roll,
                             may_be_cancelled=bool(markers) and properties_of is None)
        if keys and not unit.is_roll and _message_key(unit, properties_of) in keys:
            result.cancelled.append(entry)
        else:
            result.pending.append(entry)


def _delete_keys(markers: list[TimerLogUnit], properties_of: PropertiesOf) -> set[str]:
    keys = set()
    for unit in markers:
        props = properties_of(unit.commitlog_offset, unit.commitlog_size) or {}
        if TIMER_DEL_UNIQKEY in props:
            keys.add(props[TIMER_DEL_UNIQKEY])
    return keys


def _message_key(unit: TimerLogUnit, properties_of: PropertiesOf | None) -> str | None:
    props = properties_of(unit.commitlog_offset, unit.commitlog_size) if properties_of else None
    if not props or UNIQ_KEY not in props or REAL_TOPIC not in props:
        return None
    return delete_key(props[REAL_TOPIC], props[UNIQ_KEY])


def commitlog_properties(commitlog_dir: str | Path) -> PropertiesOf:
    """A :data:`PropertiesOf` reading records from a commitlog directory (None for an
    offset with no valid record there or whose TOTALSIZE is not ``size``)."""
    from rmqlib.commitlog.records import read_record_at

    def properties_of(offset: int, size: int) -> Mapping[str, str] | None:
        try:
            record = read_record_at(commitlog_dir, offset, verify_crc=False)
        except StoreError:
            return None
        return record.properties if record.total_size == size else None

    return properties_of


@dataclass(frozen=True)
class UnenqueuedTimer:
    """A record of ``rmq_sys_wheel_timer`` the timer checkpoint has not enqueued yet."""

    queue_offset: int
    commitlog_offset: int
    size: int


def requeue_start(store: str | Path, checkpoint: TimerCheckpoint,
                  decodes: Sequence[TimerLogFileDecode] = ()) -> int:
    """The ``rmq_sys_wheel_timer`` queue offset the broker enqueues from after a restart.

    ``recover``: one past the queue offset of the record of the last unit before the
    recovery end (``reviseQueueOffset``; the checkpoint's ``lastTimerQueueOffset`` when
    there is no such unit or record), then at most ``masterTimerQueueOffset``.
    """
    from rmqlib.commitlog.records import read_record_at

    start = checkpoint.last_timer_queue_offset
    end = recovery_end(decodes, checkpoint.last_timer_log_flush_pos)
    last = None
    for decode in decodes:
        for unit in decode.units():
            if unit.position < end:
                last = unit
    if last is not None:
        try:
            record = read_record_at(Path(store) / "commitlog", last.commitlog_offset,
                                    verify_crc=False)
            start = record.queue_offset + 1
        except StoreError:
            pass
    return min(start, checkpoint.master_timer_queue_offset)


def unenqueued_timer_records(store: str | Path, checkpoint: TimerCheckpoint,
                             decodes: Sequence[TimerLogFileDecode] = ()
                             ) -> list[UnenqueuedTimer]:
    """Units of the ``rmq_sys_wheel_timer`` consume queue from :func:`requeue_start` on:
    records the broker will (re-)enqueue, and so deliver, when it starts again."""
    return timer_queue_units(store, requeue_start(store, checkpoint, decodes))


def timer_queue_units(store: str | Path, first: int) -> list[UnenqueuedTimer]:
    """Units of the ``rmq_sys_wheel_timer`` consume queue at queue offset ``first`` or later
    (fillers left out)."""
    from rmqlib.common.segments import list_segments
    from rmqlib.queues.consumequeue import decode_cq_file

    queue_dir = Path(store) / "consumequeue" / TIMER_TOPIC / "0"
    if not queue_dir.is_dir():
        return []
    found = []
    for seg in list_segments(queue_dir):
        decode = decode_cq_file(seg.path, topic=TIMER_TOPIC, queue_id=0)
        for unit in decode.units():
            if unit.queue_offset >= first and not unit.is_filler:
                found.append(UnenqueuedTimer(unit.queue_offset, unit.commitlog_offset,
                                             unit.size))
    return found


# --------------------------------------------------------------------------- whole store


@dataclass
class TimerStore:
    """What a store holds of the timer machinery (each part None when absent)."""

    root: Path
    log: list[TimerLogFileDecode] = field(default_factory=list)
    wheel: TimerWheelDecode | None = None
    checkpoint: TimerCheckpoint | None = None
    log_issues: list[str] = field(default_factory=list)
    unsized_log_file: Path | None = None  # a 0-byte last timer log file (a kill)
    errors: list[StoreError] = field(default_factory=list)  # files that could not be read

    @property
    def accounts(self) -> list[FileAccount]:
        """Byte accounts of the timer log files and the wheel (the checkpoint's account is
        ``checkpoint.account``; verify may already keep it with the other config files)."""
        accounts = [decode.account for decode in self.log]
        if self.wheel is not None:
            accounts.append(self.wheel.account)
        return accounts

    def unenqueued(self) -> list[UnenqueuedTimer]:
        """:func:`unenqueued_timer_records` of this store ([] without a checkpoint)."""
        if self.checkpoint is None:
            return []
        return unenqueued_timer_records(self.root, self.checkpoint, self.log)

    def pending(self, *, with_commitlog: bool = True) -> PendingTimers | None:
        """:func:`pending_timers` over this store (None without a timer checkpoint)."""
        if self.checkpoint is None:
            return None
        precision = self.wheel.precision_ms if self.wheel else DEFAULT_PRECISION_MS
        props = commitlog_properties(self.root / "commitlog") if with_commitlog else None
        return pending_timers(self.log, self.checkpoint, precision_ms=precision,
                              properties_of=props)


def read_timer_store(root: str | Path, *, precision_ms: int = DEFAULT_PRECISION_MS
                     ) -> TimerStore:
    """Decode ``timerlog/``, ``timerwheel`` and ``config/timercheck`` of a store root.

    Never raises for bad bytes (they are in the accounts); a file that cannot be read at
    all (or a timercheck too short for its fields) is kept in ``errors`` and left None.
    """
    root = Path(root)
    store = TimerStore(root)
    if (root / TIMERLOG_DIR).is_dir():
        segments = list_timerlog(root)
        store.log_issues = segment_issues(segments)
        unsized = unsized_last_file(segments)
        store.unsized_log_file = unsized.path if unsized else None
        for seg in segments:
            try:
                store.log.append(decode_timerlog_file(seg.path))
            except StoreError as error:
                store.errors.append(error)
    if (root / TIMERWHEEL_FILE).is_file():
        try:
            store.wheel = read_timerwheel(root / TIMERWHEEL_FILE, precision_ms=precision_ms)
        except StoreError as error:
            store.errors.append(error)
    if (root / TIMERCHECK_FILE).is_file():
        try:
            store.checkpoint = read_timercheck(root / TIMERCHECK_FILE)
        except StoreError as error:
            store.errors.append(error)
    return store


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class TimerFinding:
    """One timer inconsistency, shaped like ``rmqlib.store.verify.Finding``."""

    severity: str  # "error" or "warning"
    check: str
    path: str | None
    offset: int | None
    message: str


def check_timer_store(store: TimerStore, *, properties_of: PropertiesOf | None = None
                      ) -> list[TimerFinding]:
    """Everything wrong with the timer files, for ``rmq verify``.

    Byte accounts are not reported here (take them from ``store.accounts``). Checks:
    files that could not be read and file naming (error), unit fields the writer never
    produces (magic without DEFAULT, reserved != 0: warning), slot chains (prevPos must
    point back to a unit of the same tick: error), wheel slots still to be read that do
    not point at a unit of their tick (warning: the wheel is flushed periodically, not at
    shutdown), and, with ``properties_of``, every unit against its commitlog record
    (missing record, size, TIMER_OUT_MS, REAL_TOPIC hash: error; one read per unit).
    """
    findings = [TimerFinding(ERROR, "timer_files", error.path, error.offset, error.reason)
                for error in store.errors]
    directory = str(timerlog_dir(store.root))
    for issue in store.log_issues:
        findings.append(TimerFinding(ERROR, "timerlog_files", directory, None, issue))
    if store.unsized_log_file is not None:
        findings.append(TimerFinding(WARNING, "timerlog_files", str(store.unsized_log_file),
                                     None, UNSIZED_FILE_REASON))
    columns = timerlog_columns(store.log)
    precision = store.wheel.precision_ms if store.wheel else DEFAULT_PRECISION_MS
    findings.extend(_unit_findings(columns, precision))
    if properties_of is not None:
        for i in range(columns.count):
            findings.extend(_record_findings(columns, i, properties_of))
    if store.wheel is not None and store.checkpoint is not None and store.log:
        findings.extend(_wheel_findings(store.wheel, store.checkpoint, columns,
                                        store.log[0].start))
    return findings


def _where(columns: TimerLogColumns, i: int) -> tuple[str, int]:
    return columns.paths[int(columns.file_index[i])], int(columns.file_position[i])


def _unit_findings(columns: TimerLogColumns, precision: int) -> list[TimerFinding]:
    """Field and chain checks over all units at once (objects only for the bad ones)."""
    f = columns.fields
    tick = columns.delivery_ms // precision
    prev = f["prev_pos"]
    target = columns.find(prev)
    other_tick = (target >= 0) & (tick[np.maximum(target, 0)] != tick)
    broken = (prev != NO_PREV_POS) & ((prev >= columns.position) | (prev < NO_PREV_POS)
                                      | other_tick)
    found = []
    for i in np.flatnonzero((f["magic"] & MAGIC_DEFAULT) == 0):
        found.append(TimerFinding(WARNING, "timerlog_unit", *_where(columns, i),
                                  f"magic {int(f['magic'][i])} lacks the DEFAULT bit every "
                                  f"unit has"))
    for i in np.flatnonzero(f["reserved"] != 0):
        found.append(TimerFinding(WARNING, "timerlog_unit", *_where(columns, i),
                                  f"reserved field is {int(f['reserved'][i])}, the broker "
                                  f"writes 0"))
    for i in np.flatnonzero(broken):
        found.append(TimerFinding(ERROR, "timerlog_chain", *_where(columns, i),
                                  f"prevPos {int(prev[i])} is not an earlier unit of the same "
                                  f"tick ({int(tick[i])})"))
    return found


def _record_findings(columns: TimerLogColumns, i: int,
                     properties_of: PropertiesOf) -> list[TimerFinding]:
    unit = columns.unit(i)
    where = _where(columns, i)
    props = properties_of(unit.commitlog_offset, unit.commitlog_size)
    if props is None:
        return [TimerFinding(ERROR, "timerlog_record", *where,
                             f"no {unit.commitlog_size}-byte commitlog record at offset "
                             f"{unit.commitlog_offset}")]
    found = []
    out_ms = props.get(TIMER_OUT_MS)
    if not unit.is_roll and out_ms != str(unit.delivery_ms):
        found.append(TimerFinding(ERROR, "timerlog_record", *where,
                                  f"delivery time {unit.delivery_ms} != the record's "
                                  f"TIMER_OUT_MS {out_ms}"))
    topic = props.get(REAL_TOPIC)
    expected = java_string_hash(topic) if topic is not None else 0
    if expected != unit.topic_hash:
        found.append(TimerFinding(ERROR, "timerlog_record", *where,
                                  f"topic hash {unit.topic_hash} != hash {expected} of the "
                                  f"record's REAL_TOPIC {topic!r}"))
    return found


def _wheel_findings(wheel: TimerWheelDecode, checkpoint: TimerCheckpoint,
                    columns: TimerLogColumns, lowest: int) -> list[TimerFinding]:
    """Slots the broker will still read must point at units of their own tick (positions
    below ``lowest``, the first timer log file's start, were deleted by retention)."""
    read_tick = checkpoint.last_read_time_ms // wheel.precision_ms
    ticks = columns.delivery_ms // wheel.precision_ms
    found = []
    for slot in wheel.slots():
        if slot.tick < read_tick:
            continue
        for name, pos in (("firstPos", slot.first_pos), ("lastPos", slot.last_pos)):
            if pos < lowest:
                continue
            hit = int(columns.find(np.array([pos], dtype=np.int64))[0])
            if hit < 0 or int(ticks[hit]) != slot.tick:
                found.append(TimerFinding(
                    WARNING, "timerwheel_slot", wheel.path, slot.file_position,
                    f"slot {slot.slot} (tick {slot.tick}) {name} {pos} is not a timer log "
                    f"unit of that tick"))
    return found
