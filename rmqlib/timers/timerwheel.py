"""The 5.x timer wheel (``timerwheel``, one file at the store root): 32-byte slots (spec §6.4).

``TimerWheel`` keeps one slot per ``timerPrecisionMs`` tick (1 s by default) for two
rounds of 7 days: 2 x 604 800 = 1 209 600 slots, 38 707 200 bytes, mapped whole and
updated in place. Slot ``i`` describes the tick ``t`` with ``t % slots == i``:

  i64 t = delivery time / precisionMs, i64 firstPos and i64 lastPos (global timer log
  positions of the first and last unit of that tick; units chain backwards through
  their prevPos), i32 num (units counted in, DELETE units counted out), i32 magic (unused).

A slot is never cleared: after its tick passed it keeps describing that old tick until a
unit for ``t + slots`` reuses it (the broker checks ``t`` before trusting a slot). So a
wheel holds used slots of the past as well as of the future; only the timer checkpoint
(``config/timercheck``, ``lastReadTimeMs``) says which ticks were already delivered.
The file is mostly zeros: it is read as one numpy array and only the non-zero slots are
looked at (no Python loop over a million slots).

Accounting: slots holding a tick → ``decoded``; all-zero slots (never used) → ``blank``
(format-defined empty slots, as for the index's hash slots); slots whose fields
contradict the format (tick not > 0 or not hashing to this slot, negative positions,
lastPos before firstPos) → ``unreadable``, as is a partial slot at the end of a file
whose size is not a multiple of 32. The slot count is derived from the file size; the
broker refuses to start with any size but ``2 x 604 800 x 32``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from rmqlib.common.accounting import FileAccount
from rmqlib.common.fileio import runs
from rmqlib.errors import NotAStoreFileError

# Slot layout (Slot.SIZE = 32), big-endian.
SLOT_SIZE = 32
SLOT_TIME_OFFSET = 0
SLOT_FIRST_POS_OFFSET = 8
SLOT_LAST_POS_OFFSET = 16
SLOT_NUM_OFFSET = 24
SLOT_MAGIC_OFFSET = 28

TIMER_WHEEL_TTL_DAYS = 7  # TimerMessageStore.TIMER_WHEEL_TTL_DAY
DEFAULT_SLOT_COUNT = 2 * TIMER_WHEEL_TTL_DAYS * 86_400  # slotsTotal * 2 = 1 209 600
DEFAULT_WHEEL_SIZE = DEFAULT_SLOT_COUNT * SLOT_SIZE  # 38 707 200
DEFAULT_PRECISION_MS = 1000  # timerPrecisionMs
TIMERWHEEL_FILE = "timerwheel"

SLOT_DTYPE = np.dtype(
    [("time", ">i8"), ("first_pos", ">i8"), ("last_pos", ">i8"), ("num", ">i4"),
     ("magic", ">i4")]
)
assert SLOT_DTYPE.itemsize == SLOT_SIZE

WHEEL_SCHEMA = pa.schema(
    [
        pa.field("slot", pa.int64(), nullable=False),
        pa.field("tick", pa.int64(), nullable=False),  # delivery time / precisionMs
        pa.field("time_ms", pa.int64(), nullable=False),  # tick x precisionMs
        pa.field("first_pos", pa.int64(), nullable=False),
        pa.field("last_pos", pa.int64(), nullable=False),
        pa.field("num", pa.int32(), nullable=False),
        pa.field("magic", pa.int32(), nullable=False),
        pa.field("file", pa.string(), nullable=False),
        pa.field("file_position", pa.int64(), nullable=False),
    ]
)

_BAD_SLOT = ("not a timer wheel slot: tick <= 0 or not hashing to this slot, negative "
             "position, or lastPos before firstPos")


@dataclass(frozen=True)
class WheelSlot:
    """One used slot; ``time_ms`` is the tick in milliseconds at the wheel's precision."""

    slot: int
    tick: int
    time_ms: int
    first_pos: int
    last_pos: int
    num: int
    magic: int
    file_position: int


@dataclass
class TimerWheelDecode:
    """The used slots of a timer wheel as arrays (slot order), plus the account."""

    path: str
    slot_count: int
    precision_ms: int
    slot: np.ndarray
    fields: dict[str, np.ndarray]
    account: FileAccount
    issues: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return int(self.slot.size)

    @property
    def empty_slots(self) -> int:
        return int(self.account.blank // SLOT_SIZE)

    @property
    def time_ms(self) -> np.ndarray:
        return self.fields["time"] * self.precision_ms

    def slot_index(self, time_ms: int) -> int:
        """``getSlotIndex``: the slot a delivery time hashes to."""
        return time_ms // self.precision_ms % self.slot_count

    def get(self, time_ms: int) -> WheelSlot | None:
        """``getSlot``: the slot of this tick, or None when the slot holds another tick."""
        hit = np.flatnonzero(self.slot == self.slot_index(time_ms))
        if not hit.size:
            return None
        found = self._slot(int(hit[0]))
        return found if found.tick == time_ms // self.precision_ms else None

    def _slot(self, i: int) -> WheelSlot:
        f = self.fields
        tick = int(f["time"][i])
        return WheelSlot(int(self.slot[i]), tick, tick * self.precision_ms,
                         int(f["first_pos"][i]), int(f["last_pos"][i]), int(f["num"][i]),
                         int(f["magic"][i]), int(self.slot[i]) * SLOT_SIZE)

    def slots(self) -> Iterator[WheelSlot]:
        """The used slots one by one, in slot order."""
        for i in range(self.count):
            yield self._slot(i)

    def to_record_batch(self) -> pa.RecordBatch:
        """The used slots as a RecordBatch with :data:`WHEEL_SCHEMA`."""
        n, f = self.count, self.fields
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.slot, pa.int64()),
                pa.array(f["time"], pa.int64()),
                pa.array(self.time_ms, pa.int64()),
                pa.array(f["first_pos"], pa.int64()),
                pa.array(f["last_pos"], pa.int64()),
                pa.array(f["num"], pa.int32()),
                pa.array(f["magic"], pa.int32()),
                pa.repeat(pa.scalar(self.path, pa.string()), n),
                pa.array(self.slot * SLOT_SIZE, pa.int64()),
            ],
            schema=WHEEL_SCHEMA,
        )

    def empty_runs(self) -> list[tuple[int, int]]:
        """(first slot, slot count) of each run of empty slots, in file order: what a dump
        prints instead of listing a million empty slots."""
        used = np.zeros(self.slot_count, dtype=bool)
        used[self.slot] = True
        for region in self.account.unreadable:  # bad slots are neither used nor empty
            first = region.offset // SLOT_SIZE
            used[first:first + -(-region.length // SLOT_SIZE)] = True
        return runs(~used)


def decode_timerwheel_bytes(data: bytes | bytearray | memoryview | np.ndarray, *,
                            path: str | Path = "<memory>",
                            precision_ms: int = DEFAULT_PRECISION_MS) -> TimerWheelDecode:
    """Decode a whole timer wheel held in memory; the slot count is size // 32."""
    if precision_ms <= 0:
        raise ValueError(f"timer precision must be positive, got {precision_ms}")
    buffer = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    size = int(buffer.size)
    account = FileAccount(str(path), size)
    n_slots = size // SLOT_SIZE
    whole = buffer[: n_slots * SLOT_SIZE]
    # Four u64 words per slot: one vectorised any() finds the slots in use.
    used = whole.view(np.uint64).reshape(n_slots, 4).any(axis=1) if n_slots else (
        np.zeros(0, dtype=bool))
    index = np.flatnonzero(used)
    raw = whole.view(SLOT_DTYPE)[index]
    native = {name: raw[name].astype(raw.dtype[name].newbyteorder("="))
              for name in SLOT_DTYPE.names or ()}
    good = ((native["time"] > 0) & (native["time"] % max(n_slots, 1) == index)
            & (native["first_pos"] >= 0) & (native["last_pos"] >= native["first_pos"]))
    account.decoded = int(np.count_nonzero(good)) * SLOT_SIZE
    account.blank = (n_slots - int(index.size)) * SLOT_SIZE
    bad_mask = np.zeros(n_slots, dtype=bool)
    bad_mask[index[~good]] = True
    for first, length in runs(bad_mask):
        account.add_unreadable(first * SLOT_SIZE, length * SLOT_SIZE, _BAD_SLOT)
    account.add_unreadable(n_slots * SLOT_SIZE, size - n_slots * SLOT_SIZE,
                           f"partial slot: file size is not a multiple of {SLOT_SIZE}")
    account.check()
    issues = [] if size == DEFAULT_WHEEL_SIZE else [
        f"timer wheel is {size} bytes; a stock broker maps exactly {DEFAULT_WHEEL_SIZE} "
        f"({DEFAULT_SLOT_COUNT} slots)"]
    return TimerWheelDecode(
        path=str(path), slot_count=n_slots, precision_ms=precision_ms, slot=index[good],
        fields={name: values[good] for name, values in native.items()}, account=account,
        issues=issues,
    )


def timerwheel_path(path: str | Path) -> Path:
    """``timerwheel`` of a store root, or the path itself."""
    path = Path(path)
    return path / TIMERWHEEL_FILE if path.is_dir() else path


def read_timerwheel(path: str | Path, *, precision_ms: int = DEFAULT_PRECISION_MS
                    ) -> TimerWheelDecode:
    """Decode the ``timerwheel`` file (or the one in a store root) with one numpy read."""
    file = timerwheel_path(path)
    try:
        buffer = np.fromfile(file, dtype=np.uint8)
    except FileNotFoundError as exc:
        raise NotAStoreFileError("timer wheel file does not exist", path=file) from exc
    except IsADirectoryError as exc:
        raise NotAStoreFileError("expected a file, found a directory", path=file) from exc
    except OSError as exc:
        raise NotAStoreFileError(f"cannot read timer wheel: {exc.strerror}", path=file) from exc
    return decode_timerwheel_bytes(buffer, path=file, precision_ms=precision_ms)
