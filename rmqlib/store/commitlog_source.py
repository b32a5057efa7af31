"""Where a store's commitlog records are: ``commitlog/``, or a DLedger broker's Raft log.

A broker with ``enableDLegerCommitLog=true`` keeps no ``commitlog/``: its records are the
bodies of the entries in ``dledger-<selfId>/data/`` (:mod:`rmqlib.dledger`), files named
by their start offset like commitlog segments, and the records' PHYSICALOFFSETs are
offsets in that log. Everything that walks a store's records by file asks here which
directory and which framing to use.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rmqlib.commitlog.records import CommitLogRecord, scan_store
from rmqlib.common.segments import list_segments
from rmqlib.dledger import layout as DL
from rmqlib.dledger.index import read_properties, read_units_for
from rmqlib.dledger.records import dledger_dirs, scan_dledger
from rmqlib.errors import StoreError, UnsupportedFormatError

COMMITLOG = "commitlog"
DLEDGER = "dledger"


@dataclass(frozen=True)
class CommitlogSource:
    """The directory holding a store's records and how they are framed there."""

    framing: str                   # COMMITLOG: records tile the files; DLEDGER: entries do
    directory: Path
    # A DLedger broker's commitlog/ left from before it switched to DLedger (its records
    # sit below ``dividedCommitlogOffset``); not read.
    superseded: Path | None = None

    @property
    def dledger(self) -> bool:
        return self.framing == DLEDGER


def commitlog_source(store: str | Path) -> CommitlogSource:
    """The commitlog of ``store``: the DLedger log's data directory if the store has one
    with files, else ``commitlog/`` (which may not exist)."""
    root = Path(store)
    logs = [log for log in dledger_dirs(root) if list_segments(log / DL.DATA_DIR)]
    if len(logs) > 1:
        names = ", ".join(log.name for log in logs)
        raise UnsupportedFormatError(f"several DLedger logs with data ({names}): a store "
                                     "whose dLegerSelfId changed is not supported", path=root)
    if not logs:
        return CommitlogSource(COMMITLOG, root / COMMITLOG)
    old = root / COMMITLOG
    return CommitlogSource(DLEDGER, logs[0] / DL.DATA_DIR,
                           old if old.is_dir() and list_segments(old) else None)


def committed_end(store: str | Path) -> int | None:
    """Where a DLedger log's committed entries end, as a commitlog offset (the data file
    position after the entry of ``checkpoint``'s ``committedIndex``): entries past it were
    appended by a leader its followers never confirmed, so no producer was answered for
    them (a DLedger broker acknowledges a send once a quorum holds it). None for a
    commitlog/ store, or when the checkpoint or its index unit cannot be read."""
    source = commitlog_source(store)
    if not source.dledger:
        return None
    log = source.directory.parent
    try:
        committed = int(read_properties(log / DL.CHECKPOINT_FILE)["committedIndex"])
        (unit,) = read_units_for(log / DL.INDEX_DIR, committed, committed)
    except (OSError, KeyError, ValueError, StoreError):
        return None
    return unit.pos + unit.size if unit.written and unit.entry_index == committed else None


def every_record(store: str | Path) -> Iterator[CommitLogRecord]:
    """Every record of the store in log order, whichever framing holds them (CRCs not
    checked: the callers look for records, verify checks them)."""
    source = commitlog_source(store)
    if source.dledger:
        yield from (record for _, record in scan_dledger(source.directory, verify_crc=False))
    else:
        yield from scan_store(source.directory, verify_crc=False)
