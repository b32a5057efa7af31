"""Fuzz targets: one function per rmqlib decoder, taking arbitrary bytes.

Each target decodes the bytes the way the library's callers do and checks the properties
every decoder promises:

* only rmqlib's documented exceptions (``StoreError`` and its subclasses) escape;
* every byte is accounted for exactly once (``FileAccount.check()``: decoded + blank +
  zero tail + unreadable == size, and unreadable regions neither overlap nor leave the file);
* the commitlog's record path and Arrow path agree on every record (offsets, sizes,
  topics, CRC verdicts) and on the byte account;
* a dump of the bytes tiles the file (the same check as tests/test_dump.py).

Hangs and runaway memory are caught by the runner (``-timeout``, ``-rss_limit_mb``).
Targets are plain functions: tests/test_fuzz.py replays the saved inputs through them,
tests/fuzz/run.py drives them with atheris (coverage-guided, libFuzzer).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from jsonl import json_lines

from rmqlib.common.accounting import FileAccount
from rmqlib.errors import StoreError

SCRATCH = Path(os.environ.get("RMQ_FUZZ_SCRATCH", tempfile.gettempdir())) / (
    f"rmq-fuzz-{os.getpid()}")
SEGMENT_NAME = "00000000000000000000"


class PropertyViolation(AssertionError):
    """A decoder broke one of its promises on these bytes."""


def _check_account(account: FileAccount, size: int) -> None:
    account.check()
    if account.size != size:
        raise PropertyViolation(f"account covers {account.size} bytes of {size}")
    spans = sorted((r.offset, r.offset + r.length) for r in account.unreadable)
    end = 0
    for begin, stop in spans:
        if begin < end or begin < 0 or stop > size:
            raise PropertyViolation(f"unreadable region [{begin}, {stop}) overlaps or leaves "
                                    f"the file of {size} bytes")
        end = stop


def _scratch_file(data: bytes, name: str = SEGMENT_NAME) -> Path:
    SCRATCH.mkdir(parents=True, exist_ok=True)
    path = SCRATCH / name
    path.write_bytes(data)
    return path


def commitlog(data: bytes) -> None:
    """Whole segment: record path and Arrow path agree, accounts balance."""
    from rmqlib.commitlog.arrow import scan_segment_arrow
    from rmqlib.commitlog.records import scan_segment

    path = _scratch_file(data)
    scan = scan_segment(path)
    records = [(r.position, r.total_size, r.topic, r.queue_id, r.queue_offset,
                r.body_crc_ok, r.property_crc_ok) for r in scan]
    _check_account(scan.account, len(data))
    arrow = scan_segment_arrow(path, batch_size=7)
    rows = []
    for batch in arrow:
        columns = batch.to_pydict()
        rows += list(zip(columns["file_position"], columns["total_size"], columns["topic"],
                         columns["queue_id"], columns["queue_offset"], columns["body_crc_ok"],
                         columns["property_crc_ok"], strict=True))
    if rows != records:
        raise PropertyViolation(f"record path {len(records)} records, Arrow path {len(rows)}; "
                                f"first difference at {_first_difference(records, rows)}")
    if arrow.account.as_dict() != scan.account.as_dict():
        raise PropertyViolation("the record and Arrow paths account differently")


def forged_frame_inside(path: str | Path, records: list[tuple[int, int]]) -> bool:
    """Whether a body of these (position, total_size) records holds a valid frame image at
    its own offset: a range starting inside that body resyncs onto it while the whole-file
    walk hops over it, the one documented limit of splitting (rmqlib/commitlog/walk.py)."""
    from rmqlib.commitlog.walk import SegmentFile, next_valid

    with SegmentFile(path) as segment:
        return any(next_valid(segment, position + 1, position + size) is not None
                   for position, size in records)


def commitlog_ranges(data: bytes) -> None:
    """The segment cut in byte ranges (as the Spark load splits it): together the ranges
    yield each record of the whole-file scan exactly once and account every byte once."""
    from rmqlib.commitlog.records import scan_segment, split_ranges

    if len(data) < 2:
        return
    path = _scratch_file(data)
    whole = [(r.position, r.total_size) for r in scan_segment(path)]
    # A range size the input chooses, at most 32 ranges (a load uses a handful per file).
    split = max(len(data) // 32, 1 + data[0] * 97 % len(data))
    parts, owned = [], 0
    for start, end in split_ranges(len(data), split):
        scan = scan_segment(path, start, end)
        parts += [(r.position, r.total_size) for r in scan]
        scan.account.check()
        owned += scan.account.size
    if (parts != whole or owned != len(data)) and forged_frame_inside(path, whole):
        return  # the documented limit, not a violation
    if parts != whole:
        raise PropertyViolation(f"ranges of {split} bytes: {len(parts)} records, whole file "
                                f"{len(whole)}")
    if owned != len(data):
        raise PropertyViolation(f"ranges own {owned} bytes of {len(data)}")


def consumequeue(data: bytes) -> None:
    from rmqlib.queues.consumequeue import decode_cq_bytes

    decode = decode_cq_bytes(data, path="fuzz/cq", start=0, topic="T", queue_id=0)
    _check_account(decode.account, len(data))
    if decode.count and int(decode.file_position.max()) + 20 > len(data):
        raise PropertyViolation("a unit past the end of the data")


def batchconsumequeue(data: bytes) -> None:
    from rmqlib.queues.batchconsumequeue import decode_bcq_bytes

    decode = decode_bcq_bytes(data, path="fuzz/bcq", start=0, topic="T", queue_id=0)
    _check_account(decode.account, len(data))
    decode.to_record_batch()


def consumequeue_ext(data: bytes) -> None:
    from rmqlib.queues.consumequeue_ext import decode_cqx_bytes

    decode = decode_cqx_bytes(data, path="fuzz/ext", start=0, topic="T", queue_id=0)
    _check_account(decode.account, len(data))
    decode.to_record_batch()


def indexfile(data: bytes) -> None:
    from rmqlib.indexfile import IndexFile

    index = IndexFile.from_bytes(data)
    account = index.account()
    _check_account(account, len(data))
    for entry in index.entries():
        if entry.number < 1 or entry.number > index.entry_count:
            raise PropertyViolation(f"entry number {entry.number} outside the header's count")
    index.validate()


def checkpoint(data: bytes) -> None:
    from rmqlib.checkpoint import decode_checkpoint_bytes, decode_timercheck_bytes

    _check_account(decode_checkpoint_bytes(data).account, len(data))
    _check_account(decode_timercheck_bytes(data).account, len(data))


def config_json(data: bytes) -> None:
    """Broker config files: fastjson text (UTF-8 or not) through the loader, then every
    parser (the first input byte picks which, so one corpus serves them all)."""
    from rmqlib import config as cfg

    parsers = [cfg.parse_topics, cfg.parse_consumer_offsets, cfg.parse_delay_offsets,
               cfg.parse_subscription_groups, cfg.parse_consumer_filters,
               cfg.parse_consumer_order_info, cfg.parse_timer_metrics,
               cfg.parse_transaction_metrics]
    path = _scratch_file(data, "topics.json")
    document = cfg.load_config_json(path, missing_ok=True)
    if document is not None and isinstance(document.data, dict):
        parsers[(data[0] if data else 0) % len(parsers)](document.data)


def dump_commitlog(data: bytes) -> None:
    """`rmq dump commitlog --json` on the bytes: exit 0/1 only, every byte printed once."""
    import contextlib
    import io

    from rmqlib.cli.main import main

    path = _scratch_file(data)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["dump", "commitlog", str(path), "--json"])
    if code not in (0, 1):
        raise PropertyViolation(f"dump exited {code}")
    check_tiles(json_lines(out.getvalue()), len(data))


def timerlog(data: bytes) -> None:
    """A timer log file (and the same bytes as a timer wheel): accounts balance, units lie
    inside the data, the Arrow batch builds, and `rmq dump timerlog --json` tiles the file."""
    import io

    from rmqlib.cli.main import main
    from rmqlib.timers.timerlog import TL_UNIT_SIZE, decode_timerlog_bytes
    from rmqlib.timers.timerwheel import decode_timerwheel_bytes

    decode = decode_timerlog_bytes(data, path="fuzz/timerlog", start=0)
    _check_account(decode.account, len(data))
    if decode.count and int(decode.file_position.max()) + TL_UNIT_SIZE > len(data):
        raise PropertyViolation("a timer log unit past the end of the data")
    if decode.to_record_batch().num_rows != decode.count:
        raise PropertyViolation("the Arrow batch and the units disagree")
    _check_account(decode_timerwheel_bytes(data).account, len(data))
    path = _scratch_file(data)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["dump", "timerlog", str(path), "--json"])
    if code not in (0, 1):
        raise PropertyViolation(f"dump timerlog exited {code}")
    rows = json_lines(out.getvalue())
    check_tiles([{**row, "position": row["file_position"], "total_size": TL_UNIT_SIZE}
                 if row["kind"] == "unit" else row for row in rows], len(data))


def innerbatch(data: bytes) -> None:
    """An inner-batch body: members tile it exactly, each re-encodes to its own bytes, and
    the count check (INNER_NUM) only ever raises CorruptDataError."""
    from rmqlib.commitlog.innerbatch import split_inner_batch

    members = split_inner_batch(data, 7)
    if sum(m.size for m in members) != len(data):
        raise PropertyViolation("members do not tile the body")
    for m in members:
        if data[m.body_position + 20 : m.body_position + 20 + len(m.body)] != m.body:
            raise PropertyViolation(f"member {m.index}: body is not where its header says")
    split_inner_batch(data, 7, expected=len(members))


def dledger(data: bytes) -> None:
    """A DLedger data file: accounts balance, entries tile forward from position 0 with
    their own positions, each body decodes as a commitlog record or is a StoreError."""
    from rmqlib.commitlog.records import decode_record
    from rmqlib.dledger.entries import read_body, scan_data_file
    from rmqlib.errors import StoreError

    path = _scratch_file(data)
    entries, scan = scan_data_file(path)
    _check_account(scan.account, len(data))
    end = 0
    for entry in entries:
        if entry.pos < end or entry.end > len(data) or entry.body_size != entry.size - 48:
            raise PropertyViolation(f"entry at {entry.pos} (size {entry.size}) overlaps, "
                                    f"leaves the file or misstates its body")
        end = entry.end
        try:
            record = decode_record(read_body(path, entry, 0), position=entry.body_offset)
        except StoreError:
            continue
        if record.physical_offset != entry.body_offset:
            raise PropertyViolation(f"record at {entry.body_offset} says "
                                    f"{record.physical_offset}")


def dledger_arrow(data: bytes) -> None:
    """A DLedger data file through the load's path (rmqlib.dledger.arrow), whole and cut
    in three ranges: the ranges' accounts add up to the file and their records are the
    whole scan's, which are the entries' bodies that decode record by record."""
    from rmqlib.commitlog.records import decode_record
    from rmqlib.dledger.arrow import scan_dledger_arrow
    from rmqlib.dledger.entries import read_body

    path = _scratch_file(data)
    whole = scan_dledger_arrow(path)
    offsets = [o for batch in whole for o in batch.column("physical_offset").to_pylist()]
    _check_account(whole.result.account, len(data))
    singly = []
    for entry in whole.entries:
        with contextlib.suppress(StoreError):
            decode_record(read_body(path, entry, 0), position=entry.body_offset)
            singly.append(entry.body_offset)
    if offsets != singly:
        raise PropertyViolation(f"Arrow path records {_first_difference(offsets, singly)} "
                                "differ from the record decoder's")
    cuts = sorted({0, len(data) // 3, 2 * len(data) // 3, len(data)})
    pieces, bytes_owned = [], 0
    for begin, end in itertools.pairwise(cuts):
        part = scan_dledger_arrow(path, begin, end)
        pieces += [o for batch in part for o in batch.column("physical_offset").to_pylist()]
        part.result.account.check()
        bytes_owned += part.result.account.size
    if pieces != offsets or bytes_owned != len(data):
        raise PropertyViolation("the ranges' records or accounts differ from the whole scan")


def rocksdb_consume_queue(data: bytes) -> None:
    """RocksDB consume-queue entries (the bytes cut into (key, value) pairs by 1-byte
    lengths, the first half for the ``offset`` family, the rest for units): a pair off the
    layout is a bad entry, never an exception; decoded units re-encode to their keys."""
    from rmqlib.rocksdb.consume_queue import decode_entries, unit_key

    pairs, position = [], 0
    while position + 2 <= len(data):
        key_length, value_length = data[position], data[position + 1]
        key = data[position + 2:position + 2 + key_length]
        value = data[position + 2 + key_length:position + 2 + key_length + value_length]
        pairs.append((key, value))
        position += 2 + key_length + value_length
    half = len(pairs) // 2
    scan = decode_entries(pairs[:half], pairs[half:])
    units = sum(len(q) for q in scan.queues)
    if units + len([b for b in scan.bad if b.family == "default"]) != len(pairs) - half:
        raise PropertyViolation("a unit pair was neither decoded nor reported bad")
    for queue in scan.queues:
        for offset in queue.queue_offset.tolist():
            key = unit_key(queue.topic, queue.queue_id, offset)
            if key not in {k for k, _ in pairs} and "\ufffd" not in queue.topic:
                raise PropertyViolation(f"unit {queue.topic}/{queue.queue_id}/{offset} "
                                        "does not re-encode to a key it came from")


def rocksdb_config_v2(data: bytes) -> None:
    """The v2 config database (config/rdb): the bytes cut into (key, value) pairs by 1-byte
    lengths, kept in key order as RocksDB holds them; for every table each record of the
    table is either in its document or reported bad, never an exception, and the consumer
    offsets' read also reports every record of no table."""
    from rmqlib.rocksdb import config_store as CS

    records: dict[bytes, bytes] = {}
    position = 0
    while position + 2 <= len(data):
        key_length, value_length = data[position], data[position + 1]
        key = data[position + 2:position + 2 + key_length]
        records[key] = data[position + 2 + key_length:position + 2 + key_length + value_length]
        position += 2 + key_length + value_length
    pairs = sorted(records.items())
    header = CS.V2_HEADER
    owners: dict[int, set[int]] = {t.table_id: {t.table_id} for t in CS.TABLES}
    owners[CS.V2_CONSUMER_OFFSET].add(CS.V2_PULL_OFFSET)
    for table in CS.TABLES:
        start = CS.v2_start_key(table)
        document, bad = CS.decode_v2_table(
            table, [(k, v) for k, v in pairs if start is None or k >= start])
        mine = [k for k, _ in pairs if len(k) >= header.size and k[0] == 1
                and header.unpack_from(k)[1] in owners[table.table_id]]
        quiet = [k for k in mine if header.unpack_from(k)[1] == CS.V2_PULL_OFFSET
                 and header.unpack_from(k)[2] == CS.V2_RECORD_VERSION]
        held = sum(len(queues) if table.table_id == CS.V2_CONSUMER_OFFSET else 1
                   for name in (table.table, "pullOffsetTable") if name in document
                   for queues in document[name].values())
        held += "dataVersion" in document
        foreign = [k for k, _ in pairs if k not in mine] if start is None else []
        foreign = [k for k in foreign if len(k) < header.size or k[0] != 1
                   or header.unpack_from(k)[1] not in CS.V2_TABLE_IDS]
        if held + len(bad) + len(quiet) != len(mine) + len(foreign):
            raise PropertyViolation(f"table {table.table_id}: {len(mine)} records and "
                                    f"{len(foreign)} of no table, {held} read, {len(bad)} bad")


def compaction_queue(data: bytes) -> None:
    """A compacted topic's sparse queue file (46-byte units, end units as filler): every
    byte accounted, every unit returned is valid by the broker's rule and lies in the
    account's decoded bytes."""
    from rmqlib.compaction.store import decode_queue_bytes

    units, account = decode_queue_bytes(data, "compaction-cq")
    account.check()
    if len(units) * 46 != account.decoded:
        raise PropertyViolation(f"{len(units)} units, {account.decoded} decoded bytes")
    for unit in units:
        if unit.position < 0 or unit.size <= 0 or unit.queue_offset < 0 or unit.batch_size <= 0:
            raise PropertyViolation(f"an invalid unit was returned at {unit.file_position}")


def epoch_file(data: bytes) -> None:
    """Controller mode's epochFileCheckpoint: entries, a rejection (the broker falls back
    to the .bak) or a typed error where the broker fails to start; never another exception,
    every byte accounted; an accepted file's entries increase as the broker keeps them."""
    from rmqlib.controller import decode_epoch_bytes

    copy = decode_epoch_bytes(data, "epochFileCheckpoint")
    copy.account.check()
    if copy.fatal is not None:
        raise copy.fatal
    epochs = [entry.epoch for entry in copy.entries]
    if epochs != sorted(set(epochs)):
        raise PropertyViolation(f"entries not one per epoch in order: {epochs[:8]}")


def check_tiles(rows: list[dict], size: int) -> None:
    """Dump rows (records and regions) cover [0, size) in order, each byte once."""
    position = 0
    for row in rows:
        if row["kind"] == "region" or "total_size" in row:
            offset = row["offset"] if row["kind"] == "region" else row["position"]
            length = row["length"] if row["kind"] == "region" else row["total_size"]
            if offset != position:
                raise PropertyViolation(f"dump: {row['kind']} at {offset}, expected {position}")
            position += length
    if position != size:
        raise PropertyViolation(f"dump printed {position} bytes of {size}")


def _first_difference(left: list, right: list) -> object:
    for a, b in zip(left, right, strict=False):
        if a != b:
            return (a, b)
    return "length"


TARGETS: dict[str, Callable[[bytes], None]] = {
    "commitlog": commitlog, "commitlog_ranges": commitlog_ranges,
    "consumequeue": consumequeue, "batchconsumequeue": batchconsumequeue,
    "consumequeue_ext": consumequeue_ext, "indexfile": indexfile, "checkpoint": checkpoint,
    "config_json": config_json, "dump_commitlog": dump_commitlog, "timerlog": timerlog,
    "innerbatch": innerbatch, "dledger": dledger, "dledger_arrow": dledger_arrow,
    "rocksdb_consume_queue": rocksdb_consume_queue, "rocksdb_config_v2": rocksdb_config_v2,
    "compaction_queue": compaction_queue, "epoch_file": epoch_file,
}


COMBINED = "combined"  # every target behind one selector byte: one process fuzzes all


def run_one(target: str, data: bytes) -> None:
    """Run a target; a StoreError is a documented outcome, anything else propagates."""
    if target == COMBINED:
        if not data:
            return
        names = list(TARGETS)
        target, data = names[data[0] % len(names)], data[1:]
    with contextlib.suppress(StoreError):
        TARGETS[target](data)
