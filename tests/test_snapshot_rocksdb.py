"""Snapshots of a RocksDB database that another process is writing (the way a running
5.x broker with ``storeType=defaultRocksDB`` writes its queues and config).

A writer process appends keys 0, 1, 2, ... with the write-ahead log on, flushing every
0.1 s and compacting every second (far more often than a broker's queue or config
databases, so tables, MANIFEST edits and WALs appear and vanish during the copies);
the snapshot copier takes nightly copies meanwhile. Every copy must be a state the
database passed through, i.e. open and hold exactly the keys 0..n-1 for some n (a torn copy
would lose keys in the middle or fail to open), unless its manifest says it could not be
copied consistently; the n of later copies never go back.
"""

from __future__ import annotations

import multiprocessing
import struct
import time
from pathlib import Path

import pytest

from jobs.snapshot.copier import take_snapshot
from jobs.snapshot.manifest import snapshot_store
from jobs.snapshot.sources import LocalSource
from rmqlib.errors import CorruptDataError
from rmqlib.rocksdb.database import open_readonly

KEY = struct.Struct(">q")


def write_forever(path: str, stop: str, started: str) -> None:
    from rocksdict import Options, Rdict

    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(path, options=options)
    Path(started).touch()
    number, flushed, compacted = 0, time.monotonic(), time.monotonic()
    while not Path(stop).exists():
        for _ in range(20):
            db[KEY.pack(number)] = b"v" * 100
            number += 1
        if time.monotonic() - flushed > 0.1:
            db.flush()  # a new table file, a MANIFEST edit, the old WAL dropped
            flushed = time.monotonic()
        if time.monotonic() - compacted > 1.0:
            db.compact_range(None, None)  # tables replaced by one
            compacted = time.monotonic()
        time.sleep(0.01)
    db.close()


def test_copies_of_a_database_being_written_are_states_it_passed_through(tmp_path: Path
                                                                          ) -> None:
    store = tmp_path / "store"
    (store / "config").mkdir(parents=True)
    (store / "checkpoint").write_bytes(bytes(4096))
    database = store / "config" / "consumerOffsets"
    stop, started = tmp_path / "stop", tmp_path / "started"
    writer = multiprocessing.get_context("spawn").Process(
        target=write_forever, args=(str(database), str(stop), str(started)))
    writer.start()
    try:
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        counts, inconsistent = [], 0
        for night in range(6):
            time.sleep(0.2)
            snapshot_id = f"2026-11-2{night}T0200Z"
            manifest = take_snapshot(LocalSource(store), tmp_path / "snapshots", "b",
                                     snapshot_id)
            copy = snapshot_store(tmp_path / "snapshots", "b", snapshot_id) / "config" / \
                "consumerOffsets"
            if any("not copied consistently" in note for note in manifest.notes):
                inconsistent += 1  # then the copy is marked, and no reader takes it
                with pytest.raises(CorruptDataError, match="not consistent"):
                    open_readonly(copy).__enter__()
                continue
            with open_readonly(copy) as db:
                keys = [KEY.unpack(key)[0] for key, _ in db.items()]
            assert keys == list(range(len(keys))), "a copy lost keys in the middle"
            counts.append(len(keys))
    finally:
        stop.touch()
        writer.join(60)
    assert counts == sorted(counts)
    assert len(counts) >= 1 and inconsistent < 6
