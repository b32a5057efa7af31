"""The store ``checkpoint`` (§6.1) and the timer ``config/timercheck`` (§6.4).

Both are a few big-endian i64 fields at the start of a file the broker maps as one
4096-byte page (``OS_PAGE_SIZE``), so on disk they are 4096 bytes with the unused rest
zero. 4.9.x writes three checkpoint fields (24 bytes); 5.x adds masterFlushedOffset
(≥5.0.0) and confirmPhyOffset (≥5.1.1); newer 5.x (seen in real 5.5.0 stores, beyond
the spec's 5.3.x) adds logicsPhysicalOffset at 40, the commitlog offset CQ dispatch
had reached. The file does not say which version wrote it:
a 5.x file whose extra fields are still 0 is indistinguishable from a 4.x one, so
``layout`` is "5.x" only when one of them is non-zero.

Accounting: the fields of the detected layout → ``decoded``; the rest of the page and
anything beyond it → ``zero_tail`` when zero, else ``unreadable`` (from the first to
the last non-zero byte). Fewer bytes than the mandatory fields → TruncatedDataError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from rmqlib.common.accounting import FileAccount
from rmqlib.common.fileio import nonzero_span, read_bytes
from rmqlib.errors import TruncatedDataError

PAGE_SIZE = 4096  # MappedFile.OS_PAGE_SIZE
FIELD_LENGTH = 8

# StoreCheckpoint layout.
CKP_PHYSIC_MSG_TIMESTAMP_OFFSET = 0
CKP_LOGICS_MSG_TIMESTAMP_OFFSET = 8
CKP_INDEX_MSG_TIMESTAMP_OFFSET = 16
CKP_MASTER_FLUSHED_OFFSET_OFFSET = 24  # ≥5.0.0
CKP_CONFIRM_PHY_OFFSET_OFFSET = 32  # ≥5.1.1
CKP_LOGICS_PHYSICAL_OFFSET_OFFSET = 40  # 5.5.x (not in the spec; read off real stores)
CKP_V4_SIZE = 24
CKP_V5_SIZE = 48
CKP_FIELDS = (
    "physic_msg_timestamp",
    "logics_msg_timestamp",
    "index_msg_timestamp",
    "master_flushed_offset",
    "confirm_phy_offset",
    "logics_physical_offset",
)
RECOVERY_SLACK_MS = 3000  # StoreCheckpoint.getMinTimestamp subtracts 3 s

# TimerCheckpoint layout (config/timercheck).
TCK_LAST_READ_TIME_MS_OFFSET = 0
TCK_LAST_TIMER_LOG_FLUSH_POS_OFFSET = 8
TCK_LAST_TIMER_QUEUE_OFFSET_OFFSET = 16
TCK_MASTER_TIMER_QUEUE_OFFSET_OFFSET = 24
TCK_STATE_VERSION_OFFSET = 32
TCK_DATA_VERSION_TIMESTAMP_OFFSET = 40
TCK_DATA_VERSION_COUNTER_OFFSET = 48
TCK_SIZE = 56
TCK_FIELDS = (
    "last_read_time_ms",
    "last_timer_log_flush_pos",
    "last_timer_queue_offset",
    "master_timer_queue_offset",
    "state_version",
    "data_version_timestamp",
    "data_version_counter",
)


@dataclass
class Checkpoint:
    """Decoded ``checkpoint``; 5.x fields are None when the file is too short for them."""

    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int | None
    confirm_phy_offset: int | None
    logics_physical_offset: int | None
    layout: str  # "4.x" (extra fields zero or absent) or "5.x"
    fields_set: tuple[str, ...]
    account: FileAccount
    issues: list[str] = field(default_factory=list)

    @property
    def min_timestamp(self) -> int:
        """``getMinTimestamp``: min(physic, logics) - 3 s, floored at 0 (recovery start)."""
        return max(min(self.physic_msg_timestamp, self.logics_msg_timestamp)
                   - RECOVERY_SLACK_MS, 0)

    @property
    def min_timestamp_index(self) -> int:
        """``getMinTimestampIndex``: also bounded by the index timestamp (messageIndexSafe)."""
        return min(self.min_timestamp, self.index_msg_timestamp)


@dataclass
class TimerCheckpoint:
    """Decoded ``config/timercheck`` (5.x timer wheel progress)."""

    last_read_time_ms: int
    last_timer_log_flush_pos: int
    last_timer_queue_offset: int
    master_timer_queue_offset: int
    state_version: int | None
    data_version_timestamp: int | None
    data_version_counter: int | None
    account: FileAccount
    issues: list[str] = field(default_factory=list)


def _read_fields(data: bytes, count: int) -> list[int | None]:
    """The first ``count`` i64 fields; None for those the data does not fully hold."""
    values: list[int | None] = []
    for i in range(count):
        start = i * FIELD_LENGTH
        if start + FIELD_LENGTH <= len(data):
            values.append(struct.unpack_from(">q", data, start)[0])
        else:
            values.append(None)
    return values


def _account_rest(account: FileAccount, data: bytes, used: int) -> None:
    """Bytes after the decoded fields: zero → zero tail, else one unreadable region."""
    span = nonzero_span(data, used)
    rest = len(data) - used
    if span is None:
        account.zero_tail += rest
        return
    first, end = span
    account.zero_tail += rest - (end - first)
    account.add_unreadable(first, end - first, "non-zero bytes after the known fields")


def _size_issues(size: int) -> list[str]:
    if size == PAGE_SIZE:
        return []
    return [f"file is {size} bytes; the broker maps exactly {PAGE_SIZE}"]


def decode_checkpoint_bytes(data: bytes, path: str | Path = "<memory>") -> Checkpoint:
    """Decode checkpoint bytes (see module docstring for layout detection)."""
    if len(data) < CKP_V4_SIZE:
        raise TruncatedDataError(
            f"checkpoint has {len(data)} bytes, needs at least {CKP_V4_SIZE}",
            path=path, offset=0, length=len(data),
        )
    values = _read_fields(data, len(CKP_FIELDS))
    v5_extra = any(value for value in values[3:])
    present = sum(1 for value in values if value is not None)
    used = present * FIELD_LENGTH if v5_extra else CKP_V4_SIZE
    account = FileAccount(str(path), len(data), decoded=used)
    _account_rest(account, data, used)
    account.check()
    physic, logics, index, master, confirm, logics_physical = values
    return Checkpoint(
        physic_msg_timestamp=physic or 0,
        logics_msg_timestamp=logics or 0,
        index_msg_timestamp=index or 0,
        master_flushed_offset=master,
        confirm_phy_offset=confirm,
        logics_physical_offset=logics_physical,
        layout="5.x" if v5_extra else "4.x",
        fields_set=tuple(name for name, v in zip(CKP_FIELDS, values, strict=True) if v),
        account=account,
        issues=_size_issues(len(data)),
    )


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Decode the store's ``checkpoint`` file."""
    return decode_checkpoint_bytes(read_bytes(path), path)


def decode_timercheck_bytes(data: bytes, path: str | Path = "<memory>") -> TimerCheckpoint:
    """Decode timercheck bytes; the dataVersion triple may be absent in a short file."""
    mandatory = TCK_STATE_VERSION_OFFSET
    if len(data) < mandatory:
        raise TruncatedDataError(
            f"timercheck has {len(data)} bytes, needs at least {mandatory}",
            path=path, offset=0, length=len(data),
        )
    values = _read_fields(data, len(TCK_FIELDS))
    used = sum(FIELD_LENGTH for value in values if value is not None)
    account = FileAccount(str(path), len(data), decoded=used)
    _account_rest(account, data, used)
    account.check()
    read_time, flush_pos, queue_offset, master_offset, state, stamp, counter = values
    return TimerCheckpoint(
        last_read_time_ms=read_time or 0,
        last_timer_log_flush_pos=flush_pos or 0,
        last_timer_queue_offset=queue_offset or 0,
        master_timer_queue_offset=master_offset or 0,
        state_version=state,
        data_version_timestamp=stamp,
        data_version_counter=counter,
        account=account,
        issues=_size_issues(len(data)),
    )


def read_timercheck(path: str | Path) -> TimerCheckpoint:
    """Decode ``config/timercheck``."""
    return decode_timercheck_bytes(read_bytes(path), path)
