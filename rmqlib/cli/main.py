"""``rmq``: inspect, dump, look up and verify a RocketMQ broker store offline.

In the spirit of Kafka's DumpLogSegments: one command, clear modes, human-readable lines
by default and ``--json`` lines for machines. Exit codes:

  0  success (verify: no errors)          1  verify found errors / get found nothing
  2  bad command line                      3  bad input: missing path, not a store file
  4  unexpected internal error (set RMQ_DEBUG=1 for the traceback)
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from json.encoder import encode_basestring as _encode_string  # C, ensure_ascii=False
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmqlib.common.numbers import is_decimal
from rmqlib.errors import StoreError

# Each command imports the decoders it needs when it runs: `rmq --help` and the small
# dumps (config, checkpoint) start without numpy, pyarrow or pandas.
if TYPE_CHECKING:
    from rmqlib.cli.dump import Output, Window
    from rmqlib.commitlog.innerbatch import InnerMessage
    from rmqlib.commitlog.records import CommitLogRecord
    from rmqlib.common.accounting import FileAccount

# 0 clean; 1 findings (verify: an invariant broken; dump: unreadable bytes met; get: no
# match); 2 bad command line; 3 bad input (a path that is not a store file, a corrupt
# header); 4 internal error.
EXIT_OK, EXIT_FINDINGS, EXIT_USAGE, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3, 4


class CliError(Exception):
    """A problem with what the user asked for, reported as one line (exit 3)."""


# --------------------------------------------------------------------------- output


def emit(args: argparse.Namespace, row: dict[str, Any], text: str) -> None:
    print(json.dumps(row, ensure_ascii=False, default=str) if args.json else text)


def millis(value: int) -> str:
    try:
        return datetime.fromtimestamp(value / 1000, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(value)


def record_row(record: CommitLogRecord, with_body: bool = False) -> dict[str, Any]:
    """A record as a JSON-ready dict: every header field, properties, body digest."""
    row: dict[str, Any] = {
        "kind": "record", "file": record.path, "position": record.position,
        "physical_offset": record.physical_offset, "total_size": record.total_size,
        "message_version": record.version, "topic": record.topic, "queue_id": record.queue_id,
        "queue_offset": record.queue_offset, "sysflag": record.sysflag,
        "transaction_type": record.transaction_type.name,
        "compression": record.compression, "flag": record.flag,
        "born_timestamp": record.born_timestamp, "born_host": record.born_address,
        "store_timestamp": record.store_timestamp, "store_host": record.store_address,
        "reconsume_times": record.reconsume_times,
        "prepared_transaction_offset": record.prepared_transaction_offset,
        "tags": record.tags, "keys": record.keys, "uniq_key": record.uniq_key,
        "offset_msg_id": record.offset_msg_id, "properties": dict(record.properties),
        "body_length": record.body_length, "body_crc": record.body_crc,
        "body_crc_ok": record.body_crc_ok, "property_crc_ok": record.property_crc_ok,
    }
    try:
        body = record.decompressed_body()
    except StoreError as error:  # a damaged compressed body: say so, show the stored bytes
        body = record.body
        row["body_error"] = str(error)
    row["body_sha256"] = hashlib.sha256(body).hexdigest()
    if with_body:
        try:
            row["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            row["body_base64"] = base64.b64encode(body).decode("ascii")
    return row


def _json_text(value: str | None) -> str:
    return "null" if value is None else _encode_string(value)


_JSON_FLAG = {None: "null", True: "true", False: "false"}
_TX_NAMES = ("NOT", "PREPARED", "COMMIT", "ROLLBACK")  # TransactionType by sysflag bits 2-3


def record_json(record: CommitLogRecord, with_body: bool = False) -> str:
    """``record_row`` as one JSON line, formatted field by field: the same object
    (tests/test_dump.py parses both and compares) at the speed a dump needs. Numbers are
    written as they are, strings through json's C string encoder."""
    s = _encode_string
    props = record.properties
    properties = ", ".join([f"{s(k)}: {s(v)}" for k, v in props.items()])
    keys = ", ".join([s(k) for k in record.keys])
    tags, uniq_key = props.get("TAGS"), props.get("UNIQ_KEY")
    compression = record.compression
    head = (
        f'{{"kind": "record", "file": {s(record.path)}, "position": {record.position}, '
        f'"physical_offset": {record.physical_offset}, "total_size": {record.total_size}, '
        f'"message_version": {record.version}, "topic": {s(record.topic)}, '
        f'"queue_id": {record.queue_id}, "queue_offset": {record.queue_offset}, '
        f'"sysflag": {record.sysflag}, '
        f'"transaction_type": "{_TX_NAMES[(record.sysflag & 0x00C) >> 2]}", '
        f'"compression": {"null" if compression is None else compression}, '
        f'"flag": {record.flag}, "born_timestamp": {record.born_timestamp}, '
        f'"born_host": "{record.born_address}", "store_timestamp": {record.store_timestamp}, '
        f'"store_host": "{record.store_address}", '
        f'"reconsume_times": {record.reconsume_times}, '
        f'"prepared_transaction_offset": {record.prepared_transaction_offset}, '
        f'"tags": {"null" if tags is None else s(tags)}, "keys": [{keys}], '
        f'"uniq_key": {"null" if uniq_key is None else s(uniq_key)}, '
        f'"offset_msg_id": "{record.offset_msg_id}", "properties": {{{properties}}}, '
        f'"body_length": {record.body_length}, "body_crc": {record.body_crc}, '
        f'"body_crc_ok": {_JSON_FLAG[record.body_crc_ok]}, '
        f'"property_crc_ok": {_JSON_FLAG[record.property_crc_ok]}')
    if compression is None and not with_body:  # the common case: no decoding
        return f'{head}, "body_sha256": "{hashlib.sha256(record.body).hexdigest()}"}}'
    rest = record_row(record, with_body)
    tail = {k: rest[k] for k in ("body_error", "body_sha256", "body", "body_base64") if k in rest}
    return f"{head}, {json.dumps(tail, ensure_ascii=False)[1:]}"


def record_line(record: CommitLogRecord) -> str:
    crc = {True: "ok", False: "MISMATCH", None: "unchecked"}[record.body_crc_ok]
    return (f"offset: {record.physical_offset} position: {record.position} "
            f"size: {record.total_size} v{record.version} topic: {record.topic} "
            f"queue: {record.queue_id} queueOffset: {record.queue_offset} "
            f"tx: {record.transaction_type.name} storeTime: {millis(record.store_timestamp)} "
            f"tags: {record.tags} keys: {record.keys} uniqKey: {record.uniq_key} "
            f"msgId: {record.offset_msg_id} crc: {crc}")


def row_text(row: dict[str, Any]) -> str:
    """A dump row as one ``key: value`` line (its kind is implied by the line)."""
    return " ".join(f"{k}: {v}" for k, v in row.items() if k != "kind")


def existing(path: str) -> Path:
    resolved = Path(path)
    if not resolved.exists():
        raise CliError(f"no such file or directory: {path}")
    return resolved


# --------------------------------------------------------------------------- inspect


def rocksdb_queues(store: Path) -> tuple[set[tuple[str, int]], str | None]:
    """The queues a RocksDB consume queue has written to (its ``max`` bounds), and why
    they could not be read (``rmq verify`` says more); none without such a database."""
    from rmqlib.rocksdb.consume_queue import read_bounds
    from rmqlib.rocksdb.database import is_database

    database = store / "consumequeue"
    if not is_database(database):
        return set(), None
    try:
        return set(read_bounds(database).max_offsets), None
    except StoreError as error:
        return set(), f"RocksDB consume queue not readable: {error.reason}"


def cmd_inspect(args: argparse.Namespace) -> int:
    from rmqlib.store.inventory import take_inventory

    inventory = take_inventory(existing(args.store))
    rocks, rocks_problem = (rocksdb_queues(inventory.root) if not inventory.queues
                            else (set(), None))  # file queues: they are the queues read
    queues = sorted(set(inventory.queues) | rocks)
    summary = {
        "store": str(inventory.root), "generation": inventory.generation,
        "evidence": inventory.evidence, "features": sorted(inventory.features),
        "totals": inventory.totals(), "queues": len(queues), "queues_problem": rocks_problem,
        "not_decoded": [{"path": str(where), "reason": reason, "files": files, "bytes": size}
                        for where, reason, files, size in inventory.not_decoded_groups()],
    }
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
        return EXIT_OK
    print(f"store: {inventory.root}")
    print(f"generation: {inventory.generation}  ({'; '.join(inventory.evidence)})")
    print(f"features: {', '.join(sorted(inventory.features)) or 'none'}")
    where = " (RocksDB)" if rocks else ""
    print(f"consume queues{where}: {len(queues)} over {len({t for t, _ in queues})} topics")
    if rocks_problem:
        print(rocks_problem)
    for kind, total in inventory.totals().items():
        print(f"  {kind:<18} {total['files']:>6} files {total['bytes']:>14,} bytes")
    for item in summary["not_decoded"]:
        print(f"present, not decoded: {item['path']} ({item['files']} files): {item['reason']}")
    return EXIT_OK


# --------------------------------------------------------------------------- dump


def _dump(args: argparse.Namespace, noun: str,
          files: Callable[[Window, Output], Iterator[tuple[FileAccount, int]]]) -> int:
    """Run one dump: items and regions of each file, then the account line."""
    from rmqlib.cli.dump import Output, Totals, Window

    out, window, totals = Output(args.json), Window(args.offset, args.limit), Totals(noun)
    try:
        for account, items in files(window, out):
            totals.add(account, items)
            if window.full:
                break
        totals.stopped = window.full
        out.item(totals.row, totals.text)
    finally:
        out.flush()
    return EXIT_FINDINGS if out.unreadable else EXIT_OK


def _show(window: Window, out: Output, item: Any, row: Callable[[], dict[str, Any]],
          text: Callable[[], str]) -> bool:
    """Show a region, or an item inside the window; False once the window is full."""
    from rmqlib.cli.dump import Region

    if isinstance(item, Region):
        if window.seen >= window.offset:
            out.region(item)
        return True
    if window.take():
        out.item(row, text)
    return not window.full


def dump_commitlog(args: argparse.Namespace) -> int:
    from rmqlib.cli.dump import BLANK, UNREADABLE, ZERO_TAIL, Region
    from rmqlib.commitlog.records import scan_segment
    from rmqlib.commitlog.walk import Gap
    from rmqlib.common.segments import list_segments

    path = existing(args.path)
    if path.is_file():
        files = [path]
    else:
        directory = path / "commitlog" if (path / "commitlog").is_dir() else path
        files = [segment.path for segment in list_segments(directory)]
        if not files and records_dir(path) != path / "commitlog":
            raise CliError(f"{path}: the commitlog of this store is a DLedger log: "
                           f"rmq dump dledger {path}")
    kinds = {"zero tail": ZERO_TAIL, "blank": BLANK}

    def each(window: Window, out: Output) -> Iterator[tuple[FileAccount, int]]:
        for file in files:
            scan = scan_segment(file, verify_crc=not args.no_crc)
            for item in scan.interleaved():
                if isinstance(item, Gap):
                    region = Region(str(file), item.offset, item.length,
                                    kinds.get(item.kind.value, UNREADABLE),
                                    f"{item.kind.value}: {item.reason}")
                    _show(window, out, region, region.row, region.text)
                    continue
                if window.take():  # the hot path: one line per record, nothing else
                    out.line(record_json(item, args.body) if out.as_json
                             else record_line(item))
                    if item.inner_batch:
                        _show_members(out, item, args.body)
                if window.full:
                    return
            yield scan.account, scan.result.records

    return _dump(args, "records", each)


def _show_members(out: Output, record: CommitLogRecord, with_body: bool) -> None:
    """The messages inside an inner-batch record, each on its own line after it: what a
    consumer receives. A body that does not split into members is reported (exit 1)."""
    from rmqlib.commitlog.innerbatch import inner_num, split_inner_batch

    try:
        members = split_inner_batch(record.decompressed_body(), record.queue_offset,
                                    expected=inner_num(record.properties),
                                    path=record.path, offset=record.position)
    except StoreError as error:
        out.unreadable += 1
        reason = str(error)
        row = {"kind": "member_error", "physical_offset": record.physical_offset,
               "reason": reason}
        out.item(lambda: row, lambda: f"   -- inner batch not unwrapped: {reason}")
        return
    for member in members:
        row = member_row(record, member, with_body)
        out.item(lambda r=row: r, lambda r=row: "   member " + row_text(r))


def member_row(record: CommitLogRecord, member: InnerMessage,
               with_body: bool = False) -> dict[str, Any]:
    """One inner-batch member as a dump row: its own fields; the rest is the record's."""
    row: dict[str, Any] = {
        "kind": "member", "physical_offset": record.physical_offset,
        "inner_index": member.index, "topic": record.topic, "queue_id": record.queue_id,
        "queue_offset": member.queue_offset, "flag": member.flag, "tags": member.tags,
        "keys": member.keys, "uniq_key": member.uniq_key,
        "properties": dict(member.properties), "body_length": len(member.body),
        "body_sha256": hashlib.sha256(member.body).hexdigest(),
    }
    if with_body:
        try:
            row["body"] = member.body.decode("utf-8")
        except UnicodeDecodeError:
            row["body_base64"] = base64.b64encode(member.body).decode("ascii")
    return row


def _dump_unit_files(args: argparse.Namespace, noun: str, decode_file: Callable[[Path], Any],
                     rows: Callable[[Any], Iterable[dict[str, Any]]]) -> int:
    """Dump queue-like files (consume queue, batch consume queue, ext): their units with
    every region of the file's account between them. The path may be one file, a queue
    directory, a topic directory or the whole root (``consumequeue/``): every queue under
    it is dumped, each row naming its topic and queue id."""
    from rmqlib.cli.dump import account_regions, merged
    from rmqlib.cli.queue_paths import queue_files

    targets = queue_files(existing(args.path))

    def each(window: Window, out: Output) -> Iterator[tuple[FileAccount, int]]:
        for region in targets.skipped:
            _show(window, out, region, region.row, region.text)
        for file in targets.files:
            decode = decode_file(file)
            where = {"topic": decode.topic, "queue_id": decode.queue_id}
            units = ((row["file_position"], {"kind": "unit", **where, **row})
                     for row in rows(decode))
            count = 0
            for _position, item in merged(units, account_regions(decode.account)):
                row = item if isinstance(item, dict) else {}
                count += bool(row)
                if not _show(window, out, item, lambda r=row: r, lambda r=row: row_text(r)):
                    return
            yield decode.account, count

    return _dump(args, noun, each)


def dump_consumequeue(args: argparse.Namespace) -> int:
    """Consume-queue units; ext addresses resolved to their ext unit. A path under
    ``batchconsumequeue/`` or ``consumequeue_ext/`` is dumped with that file's decoder."""
    from rmqlib.cli.queue_paths import BATCH_ROOT, EXT_ROOT, queue_root_kind
    from rmqlib.queues.consumequeue import decode_cq_file
    from rmqlib.queues.consumequeue_ext import ExtResolver

    kind = queue_root_kind(existing(args.path))
    if kind == BATCH_ROOT:
        return dump_batchconsumequeue(args)
    if kind == EXT_ROOT:
        return dump_consumequeue_ext(args)
    resolver = ExtResolver()

    def rows(decode: Any) -> Iterator[dict[str, Any]]:
        for unit in decode.units():
            row = {"file": decode.path, **dataclasses.asdict(unit)}
            if unit.is_ext_addr:
                row.update(resolver.describe(decode.path, decode.topic, decode.queue_id,
                                             unit.tags_code))
            yield row

    return _dump_unit_files(args, "units", decode_cq_file, rows)


def dump_batchconsumequeue(args: argparse.Namespace) -> int:
    from rmqlib.queues.batchconsumequeue import decode_bcq_file

    return _dump_unit_files(args, "units", decode_bcq_file, lambda decode: (
        {k: v for k, v in row.items() if k not in ("topic", "queue_id")}
        for row in decode.to_record_batch().to_pylist()))


def dump_consumequeue_ext(args: argparse.Namespace) -> int:
    from rmqlib.queues.consumequeue_ext import decode_cqx_file

    return _dump_unit_files(args, "units", decode_cqx_file, lambda decode: (
        {"file": decode.path, **dataclasses.asdict(unit),
         "filter_bitmap": unit.filter_bitmap.hex()} for unit in decode.units))


def dump_index(args: argparse.Namespace) -> int:
    from rmqlib.cli.dump import BLANK, Region, account_regions, merged
    from rmqlib.indexfile import (
        INDEX_ENTRY_SIZE,
        INDEX_HEADER_SIZE,
        INDEX_SLOT_SIZE,
        IndexFile,
        list_index_files,
    )

    path = existing(args.path)
    files = [path] if path.is_file() else [info.path for info in list_index_files(path).files]

    def each(window: Window, out: Output) -> Iterator[tuple[FileAccount, int]]:
        for file in files:
            with IndexFile.open(file) as index:
                geometry, account = index.geometry, index.account()
                header = {"kind": "header", "file": str(file), **dataclasses.asdict(index.header)}
                out.item(lambda h=header: h,
                         lambda h=header: row_text(h))
                used = index.header.hash_slot_count
                slots = Region(str(file), INDEX_HEADER_SIZE,
                               geometry.hash_slot_num * INDEX_SLOT_SIZE, "slots",
                               f"hash slot table, not listed: {used} used, "
                               f"{geometry.hash_slot_num - used} empty (blank)")
                unused = Region(str(file), geometry.entries_offset, INDEX_ENTRY_SIZE, BLANK,
                                "entry 0 is never used")
                entries = ((geometry.entry_position(e.number), e) for e in index.entries())
                regions = [slots, unused, *account_regions(account)]
                for _position, item in merged(entries, regions):
                    row = {} if isinstance(item, Region) else {"kind": "entry",
                                                                **dataclasses.asdict(item)}
                    if not _show(window, out, item, lambda r=row: r,
                                 lambda r=row: row_text(r)):
                        return
                yield account, index.entry_count

    return _dump(args, "entries", each)


def dump_config(args: argparse.Namespace) -> int:
    from rmqlib import config as cfg
    from rmqlib.rocksdb.config_store import TABLES, locate_table, read_config_document

    path = existing(args.path)
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if file.suffix in (".bak", ".tmp") or file.name == "timercheck":
            continue
        document = cfg.load_config_json(file)
        row = {"file": str(file), "source": dataclasses.asdict(document.source),
               "data": document.data}
        emit(args, row, f"== {file} (read from {document.source.used})\n"
             + json.dumps(document.data, indent=2, ensure_ascii=False))
    locations = [locate_table(path, t.json_file) for t in TABLES] if path.is_dir() else []
    for location in filter(None, locations):  # 5.x: the RocksDB tables standing in for files
        rocks = read_config_document(location)
        row = {"file": str(path / location.table.json_file), "source": str(rocks.path),
               "layout": rocks.layout, "data": rocks.data,
               "bad": [[k.hex(), why] for k, why in rocks.bad],
               "superseded": [str(p) for p in location.superseded]}
        emit(args, row, f"== {path / location.table.json_file} (read from RocksDB "
             f"{rocks.path}, layout {rocks.layout})\n"
             + json.dumps(rocks.data, indent=2, ensure_ascii=False))
    return EXIT_OK


def dump_checkpoint(args: argparse.Namespace) -> int:
    from rmqlib.checkpoint import read_checkpoint
    from rmqlib.cli.dump import account_regions

    path = existing(args.path)
    file = path / "checkpoint" if path.is_dir() else path

    def each(window: Window, out: Output) -> Iterator[tuple[FileAccount, int]]:
        state = read_checkpoint(file)
        row = {"kind": "checkpoint", **{k: v for k, v in dataclasses.asdict(state).items()
                                        if k != "account"}}
        out.item(lambda: row, lambda: "\n".join(
            f"{key}: {value}" + (f" ({millis(value)})" if "timestamp" in key and value
                                 else "") for key, value in row.items() if key != "kind"))
        for region in account_regions(state.account):
            out.region(region)
        yield state.account, 1

    return _dump(args, "checkpoints", each)


def dump_timerlog(args: argparse.Namespace) -> int:
    """Timer log units (a file, ``timerlog/`` or the store root), with the end-of-file
    blank, zero tails and unreadable slots as regions in between."""
    from rmqlib.cli.dump import BLANK, Region, account_regions, merged
    from rmqlib.timers.timerlog import decode_timerlog_file, list_timerlog, magic_names

    path = existing(args.path)
    files = [path] if path.is_file() else [seg.path for seg in list_timerlog(path)]

    def each(window: Window, out: Output) -> Iterator[tuple[FileAccount, int]]:
        for file in files:
            decode = decode_timerlog_file(file)
            regions = account_regions(decode.account)
            if decode.blank_position is not None:  # the blank and the zeros after it
                regions.append(Region(str(file), decode.blank_position, decode.account.blank,
                                      BLANK, "end-of-file blank: the broker moved on to the "
                                      "next file"))
            units = ((u.file_position, {"kind": "unit", "file": str(file), **dataclasses.asdict(
                u), "magic_names": magic_names(u.magic), "delivery_ms": u.delivery_ms})
                for u in decode.units())
            for _position, item in merged(units, regions):
                row = item if isinstance(item, dict) else {}
                if not _show(window, out, item, lambda r=row: r, lambda r=row: row_text(r)):
                    return
            yield decode.account, decode.count

    return _dump(args, "units", each)


def dump_timerwheel(args: argparse.Namespace) -> int:
    """Used timer wheel slots; runs of empty slots are counted as blank regions."""
    from rmqlib.cli.dump import BLANK, Region, account_regions, merged
    from rmqlib.timers.timerwheel import SLOT_SIZE, read_timerwheel

    wheel = read_timerwheel(existing(args.path))

    def each(window: Window, out: Output) -> Iterator[tuple[FileAccount, int]]:
        empty = [Region(wheel.path, first * SLOT_SIZE, count * SLOT_SIZE, BLANK,
                        f"{count} empty slots ({first}..{first + count - 1}), not listed")
                 for first, count in wheel.empty_runs()]
        slots = ((s.file_position, {"kind": "slot", "file": wheel.path, **dataclasses.asdict(s)})
                 for s in wheel.slots())
        for _position, item in merged(slots, [*empty, *account_regions(wheel.account)]):
            row = item if isinstance(item, dict) else {}
            if not _show(window, out, item, lambda r=row: r, lambda r=row: row_text(r)):
                return
        yield wheel.account, wheel.count

    return _dump(args, "slots", each)


def dump_dledger(args: argparse.Namespace) -> int:
    """A DLedger log (a store root, its dledger-<id>/ or data/ directory, or one data file):
    each entry's header, then the commitlog record in its body."""
    from rmqlib.cli.dump import BLANK, UNREADABLE, ZERO_TAIL, Region
    from rmqlib.commitlog.records import decode_record
    from rmqlib.common.segments import list_segments
    from rmqlib.dledger.entries import read_body, scan_data_file
    from rmqlib.dledger.records import dledger_dirs

    path = existing(args.path)
    if path.is_file():
        files = [path]
    else:
        logs = dledger_dirs(path) or ([path] if (path / "data").is_dir() else [])
        directories = [log / "data" for log in logs] or [path]
        files = [s.path for d in directories for s in list_segments(d)]

    def each(window: Window, out: Output) -> Iterator[tuple[FileAccount, int]]:
        for file in files:
            entries, scan = scan_data_file(file)
            start = scan.file_start
            for entry in entries:
                if not window.take():
                    continue
                head = (f"entry index={entry.index} term={entry.term} pos={entry.pos} "
                        f"size={entry.size} channel={entry.channel} "
                        f"chain_crc={entry.chain_crc} body_crc={entry.body_crc}")
                try:
                    record = decode_record(read_body(file, entry, start), segment_start=start,
                                           position=entry.body_offset - start, path=str(file),
                                           verify_crc=not args.no_crc)
                except StoreError as error:
                    out.unreadable += 1
                    out.line(json.dumps({"kind": "entry", "index": entry.index,
                                         "pos": entry.pos, "error": str(error)})
                             if out.as_json else f"{head}\n   -- body: {error}")
                    continue
                out.line(json.dumps({"kind": "entry", "index": entry.index,
                                     "term": entry.term, "pos": entry.pos,
                                     "size": entry.size, "channel": entry.channel,
                                     "chain_crc": entry.chain_crc, "body_crc": entry.body_crc,
                                     "record": json.loads(record_json(record, args.body))})
                         if out.as_json else f"{head}\n   {record_line(record)}")
                if window.full:
                    return
            account = scan.account
            for region in account.unreadable:
                shown = Region(str(file), region.offset, region.length, UNREADABLE,
                               region.reason)
                _show(window, out, shown, shown.row, shown.text)
            if scan.blank_at is not None:
                blank = Region(str(file), scan.blank_at, account.blank, BLANK,
                               "BLANK: end of the file")
                _show(window, out, blank, blank.row, blank.text)
            if account.zero_tail:
                tail = Region(str(file), account.size - account.zero_tail, account.zero_tail,
                              ZERO_TAIL, "zero tail: unwritten")
                _show(window, out, tail, tail.row, tail.text)
            yield account, scan.entries

    return _dump(args, "entries", each)


def dump_rocksdb(args: argparse.Namespace) -> int:
    """A RocksDB consume queue (storeType=defaultRocksDB; a store root or the database
    directory): every unit in key order (topic, queue, offset), then each queue's bounds,
    then every entry off the layout. Read on a clone: the directory is never opened."""
    from rmqlib.common.accounting import FileAccount
    from rmqlib.rocksdb.consume_queue import read_queues
    from rmqlib.rocksdb.database import is_database

    path = existing(args.path)
    database = path / "consumequeue" if is_database(path / "consumequeue") else path
    scan = read_queues(database)

    def each(window: Window, out: Output) -> Iterator[tuple[FileAccount, int]]:
        for queue in scan.queues:
            columns = zip(queue.queue_offset.tolist(), queue.commitlog_offset.tolist(),
                          queue.size.tolist(), queue.tags_code.tolist(),
                          queue.store_time_ms.tolist(), strict=True)
            for offset, phys, size, tags, stored in columns:
                row = {"kind": "unit", "topic": queue.topic, "queue_id": queue.queue_id,
                       "queue_offset": offset, "commitlog_offset": phys, "size": size,
                       "tags_code": tags, "store_time": stored}
                text = (f"{queue.topic}/{queue.queue_id} offset {offset}: commitlog {phys} "
                        f"size {size} tagsCode {tags} stored {millis(stored)}")
                if not _show(window, out, row, lambda r=row: r, lambda t=text: t):
                    return
        for kind, bounds in (("max", scan.max_offsets), ("min", scan.min_offsets)):
            for (topic, queue_id), (phys, offset) in sorted(bounds.items()):
                row = {"kind": kind, "topic": topic, "queue_id": queue_id,
                       "commitlog_offset": phys, "queue_offset": offset}
                out.item(lambda r=row: r, lambda r=row: (
                    f"{r['kind']} {r['topic']}/{r['queue_id']}: queue offset "
                    f"{r['queue_offset']}, commitlog {r['commitlog_offset']}"))
        for bad in scan.bad:
            out.unreadable += 1
            row = {"kind": "bad", "family": bad.family, "key": bad.key.hex(),
                   "reason": bad.reason}
            out.item(lambda r=row: r, lambda r=row: f"-- {r['family']} {r['key']}: {r['reason']}")
        yield FileAccount(str(database), 0), scan.units

    return _dump(args, "units", each)


def dump_compaction(args: argparse.Namespace) -> int:
    """Compacted topics (a store root or its compaction/ directory): every queue's kept
    messages in queue-offset order (the unit and the record it points at), then every
    disagreement between a queue's files, then the position checkpoint."""
    from rmqlib.common.accounting import FileAccount
    from rmqlib.compaction.layout import COMPACTION_DIR
    from rmqlib.compaction.store import read_compaction

    path = existing(args.path)
    scan = read_compaction(path.parent if path.name == COMPACTION_DIR else path)

    def each(window: Window, out: Output) -> Iterator[tuple[FileAccount, int]]:
        for queue in scan.queues:
            for unit in queue.units:
                record = queue.record_of(unit)
                row = {"kind": "unit", "topic": queue.topic, "queue_id": queue.queue_id,
                       **dataclasses.asdict(unit),
                       "keys": record.properties.get("KEYS") if record else None,
                       "tags": record.properties.get("TAGS") if record else None,
                       "msg_id": record.properties.get("UNIQ_KEY") if record else None}
                text = (f"{queue.topic}/{queue.queue_id} offset {unit.queue_offset}: log "
                        f"{unit.position} size {unit.size} keys {row['keys']} tags "
                        f"{row['tags']} stored {millis(unit.store_timestamp)}")
                if not _show(window, out, row, lambda r=row: r, lambda t=text: t):
                    return
            for issue in queue.issues:
                out.unreadable += 1
                row = {"kind": "issue", **dataclasses.asdict(issue)}
                out.item(lambda r=row: r, lambda r=row: f"-- {r['path']}@{r['offset']}: "
                                                        f"{r['reason']}")
        for key, offset in sorted(scan.checkpoint.items()):
            row = {"kind": "checkpoint", "queue": key, "compacted_to": offset}
            out.item(lambda r=row: r, lambda r=row: f"checkpoint {r['queue']}: compacted up "
                                                    f"to queue offset {r['compacted_to']}")
        accounts = [a for q in scan.queues for a in q.accounts] or [FileAccount(str(path), 0)]
        for number, account in enumerate(accounts, 1):
            yield account, sum(len(q.units) for q in scan.queues) if number == len(accounts) else 0

    return _dump(args, "units", each)


def dump_controller(args: argparse.Namespace) -> int:
    """Controller mode (a store root): the epoch history the broker would load (from
    epochFileCheckpoint, or its .bak when the broker would fall back), each entry with the
    commitlog range it covers, then the broker's identity files."""
    from rmqlib.common.accounting import FileAccount
    from rmqlib.controller import (
        EPOCH_FILE,
        IDENTITY_FILE,
        TEMP_IDENTITY_FILE,
        read_broker_identity,
        read_epoch_file,
    )

    root = existing(args.path)
    root = root.parent if root.is_file() else root

    def each(window: Window, out: Output) -> Iterator[tuple[FileAccount, int]]:
        epochs = read_epoch_file(root / EPOCH_FILE)
        for entry in epochs.entries:
            row = {"kind": "epoch", "epoch": entry.epoch, "start_offset": entry.start_offset,
                   "end_offset": entry.end_offset, "source": epochs.source}
            text = (f"epoch {entry.epoch}: commitlog [{entry.start_offset}, "
                    f"{'end' if entry.end_offset is None else entry.end_offset})")
            if not _show(window, out, row, lambda r=row: r, lambda t=text: t):
                return
        if epochs.fallback:
            row = {"kind": "fallback", "used": epochs.used_path, "reason": epochs.fallback}
            out.item(lambda r=row: r, lambda r=row: f"-- read {r['used']}: {r['reason']}")
        for finding in epochs.findings:
            row = {"kind": "finding", **dataclasses.asdict(finding)}
            out.item(lambda r=row: r, lambda r=row: f"-- {r['severity']} {r['code']}: "
                                                    f"{r['message']}")
        accounts = list(epochs.accounts)
        for name in (IDENTITY_FILE, TEMP_IDENTITY_FILE):
            if (root / name).is_file():
                identity = read_broker_identity(root / name)
                row = {"kind": "identity", "file": name, "cluster": identity.cluster,
                       "broker_name": identity.broker_name, "broker_id": identity.broker_id,
                       "register_check_code": identity.register_check_code}
                out.item(lambda r=row: r, lambda r=row: (
                    f"{r['file']}: cluster {r['cluster']}, broker {r['broker_name']}, replica "
                    f"id {r['broker_id']}"))
                accounts.append(identity.account)
        for number, account in enumerate(accounts or [FileAccount(str(root), 0)], 1):
            yield account, len(epochs.entries) if number == max(len(accounts), 1) else 0

    return _dump(args, "epochs", each)


def dump_pop(args: argparse.Namespace) -> int:
    """Pop consumers (a store root): every message popped and neither acked nor revived
    yet, by group, topic, queue and queue offset (rmqlib.pop: the checkpoint and ack
    records still open, against the revive group's offsets; KV pop's kvStore/), then what
    could not be read."""
    from rmqlib.common.accounting import FileAccount
    from rmqlib.store.pop_state import read_open_pop_state

    root = existing(args.path)
    state, flying = read_open_pop_state(root)

    def each(window: Window, out: Output) -> Iterator[tuple[FileAccount, int]]:
        for message in flying:
            row = {"kind": "in_flight", **dataclasses.asdict(message)}
            text = (f"{message.group} {message.topic}/{message.queue_id} offset "
                    f"{message.queue_offset}: popped {millis(message.pop_time)}, visible again "
                    f"{millis(message.visible_at)}")
            if not _show(window, out, row, lambda r=row: r, lambda t=text: t):
                return
        for offset, reason in state.unreadable:
            out.unreadable += 1
            row = {"kind": "unreadable", "physical_offset": offset, "reason": reason}
            out.item(lambda r=row: r, lambda r=row: f"-- record {r['physical_offset']}: "
                                                    f"{r['reason']}")
        yield FileAccount(str(root), 0), len(flying)

    return _dump(args, "in-flight messages", each)


DUMPERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "commitlog": dump_commitlog, "consumequeue": dump_consumequeue, "cq": dump_consumequeue,
    "batchconsumequeue": dump_batchconsumequeue, "bcq": dump_batchconsumequeue,
    "consumequeue_ext": dump_consumequeue_ext, "ext": dump_consumequeue_ext,
    "index": dump_index, "config": dump_config, "checkpoint": dump_checkpoint,
    "timerlog": dump_timerlog, "timerwheel": dump_timerwheel, "dledger": dump_dledger,
    "rocksdb": dump_rocksdb, "compaction": dump_compaction, "controller": dump_controller,
    "pop": dump_pop,
}


def cmd_dump(args: argparse.Namespace) -> int:
    return DUMPERS[args.what](args)


# --------------------------------------------------------------------------- get


def find_by_queue(store: Path, topic: str, queue_id: int, queue_offset: int) -> int:
    """Physical offset of the record holding ``queue_offset`` of ``topic``/``queue_id``:
    from ``consumequeue/``, or for a BatchCQ topic from the ``batchconsumequeue/`` unit
    whose batch [base, base + size) covers it."""
    from rmqlib.common.segments import list_segments
    from rmqlib.queues.consumequeue import CQ_UNIT_SIZE, decode_cq_file
    from rmqlib.rocksdb.consume_queue import find_unit
    from rmqlib.rocksdb.database import is_database

    batch_dir = store / "batchconsumequeue" / topic / str(queue_id)
    if batch_dir.is_dir():
        return _find_in_batch_queue(batch_dir, topic, queue_id, queue_offset)
    queue_dir = store / "consumequeue" / topic / str(queue_id)
    if not queue_dir.is_dir() and is_database(store / "consumequeue"):
        unit = find_unit(store / "consumequeue", topic, queue_id, queue_offset)
        if unit is None:
            raise CliError(f"{topic}/{queue_id} has no unit at queue offset {queue_offset} "
                           "in the RocksDB consume queue")
        return unit[0]
    byte_offset = queue_offset * CQ_UNIT_SIZE
    for segment in list_segments(existing(str(queue_dir))):
        if segment.start <= byte_offset < segment.end:
            decode = decode_cq_file(segment.path, topic=topic, queue_id=queue_id)
            for unit in decode.units():
                if unit.queue_offset == queue_offset:
                    return unit.commitlog_offset
    raise CliError(f"{topic}/{queue_id} has no unit at queue offset {queue_offset}")


def _find_in_batch_queue(directory: Path, topic: str, queue_id: int, queue_offset: int) -> int:
    from rmqlib.common.segments import list_segments
    from rmqlib.queues.batchconsumequeue import decode_bcq_file

    for segment in list_segments(directory):
        fields = decode_bcq_file(segment.path, topic=topic, queue_id=queue_id).fields
        base, size = fields["msg_base_offset"], fields["batch_size"].astype("int64")
        hits = ((base <= queue_offset) & (queue_offset < base + size)).nonzero()[0]
        if hits.size:
            return int(fields["commitlog_offset"][hits[0]])
    raise CliError(f"{topic}/{queue_id} has no batch unit covering queue offset {queue_offset}")


def find_by_key(store: Path, topic: str, key: str) -> list[int]:
    """Physical offsets the index lists for ``topic#key`` (hash matches, unconfirmed)."""
    from rmqlib.indexfile import IndexFile, list_index_files

    offsets: list[int] = []
    for info in list_index_files(store / "index").files:
        with IndexFile.open(info.path) as index:
            offsets.extend(index.lookup_key(topic, key).offsets)
    return sorted(set(offsets))


def records_dir(store: Path) -> Path:
    """Where the store's records are: ``commitlog/``, or a DLedger broker's data files
    (a record is read at its PHYSICALOFFSET inside its entry there too)."""
    from rmqlib.store.commitlog_source import commitlog_source

    return commitlog_source(store).directory


def records_for(store: Path, offsets: Iterable[int]) -> Iterator[CommitLogRecord]:
    from rmqlib.commitlog.records import read_record_at

    directory = records_dir(store)
    for offset in offsets:
        yield read_record_at(directory, offset)


Match = tuple["CommitLogRecord", "InnerMessage | None"]  # a record, or one member of it


def members_of(record: CommitLogRecord) -> list[InnerMessage]:
    """The members of an inner-batch record ([] for any other, or an unsplittable body)."""
    from rmqlib.commitlog.innerbatch import inner_num, split_inner_batch

    if not record.inner_batch:
        return []
    try:
        return split_inner_batch(record.decompressed_body(), record.queue_offset,
                                 expected=inner_num(record.properties))
    except StoreError:
        return []


def cmd_get(args: argparse.Namespace) -> int:
    from rmqlib.commitlog.records import read_record_at

    store = existing(args.store)
    matches: list[Match]
    if args.phys is not None:
        matches = [(read_record_at(records_dir(store), args.phys), None)]
    elif args.queue:
        topic, queue_id, queue_offset = args.queue
        if not (is_decimal(queue_id) and is_decimal(queue_offset)):
            raise CliError("--queue takes TOPIC QUEUE_ID QUEUE_OFFSET with integer ids")
        [record] = records_for(store, [find_by_queue(store, topic, int(queue_id),
                                                     int(queue_offset))])
        member = next((m for m in members_of(record)
                       if m.queue_offset == int(queue_offset)), None)
        matches = [(record, member)]
    elif args.key is not None:
        if not args.topic:
            raise CliError("--key needs --topic (the index hashes topic#key)")
        matches = [(r, None) for r in records_for(store, find_by_key(store, args.topic, args.key))
                   if args.key in r.keys]
    else:
        matches = get_by_msg_id(store, args.msg_id, args.topic)
    for record, member in matches:
        if member is None:
            emit(args, record_row(record, args.body), record_line(record))
        else:
            row = member_row(record, member, args.body)
            emit(args, row, record_line(record) + "\n   member " + row_text(row))
    if not matches:
        print("no matching message", file=sys.stderr)
        return EXIT_FINDINGS
    return EXIT_OK


def get_by_msg_id(store: Path, msg_id: str, topic: str | None) -> list[Match]:
    """An offsetMsgId names its record's offset; a UNIQ_KEY is found via the index (with
    --topic) or by scanning the commitlog. Inner-batch members are not in the index (the
    broker indexes the batch's UNIQ_KEY only): for them the scan looks inside batches."""
    from rmqlib.commitlog.msgid import decode_offset_msg_id
    from rmqlib.commitlog.records import read_record_at

    try:
        decoded = decode_offset_msg_id(msg_id)
        record = read_record_at(records_dir(store), decoded.commitlog_offset)
        if record.offset_msg_id.upper() == msg_id.upper():
            return [(record, None)]
    except StoreError:
        pass
    if topic:
        found: list[Match] = [(r, None) for r in records_for(store, find_by_key(store, topic,
                                                                                  msg_id))
                              if r.uniq_key == msg_id]
        if found or not (store / "batchconsumequeue" / topic).is_dir():
            return found
        print(f"not in the index: scanning {topic}'s inner batches", file=sys.stderr)
    else:
        print("no --topic given: scanning the whole commitlog for UNIQ_KEY", file=sys.stderr)
    from rmqlib.store.commitlog_source import every_record

    matches: list[Match] = []
    for record in every_record(store):
        if topic and record.topic != topic:
            continue
        if record.uniq_key == msg_id:
            matches.append((record, None))
        matches += [(record, m) for m in members_of(record) if m.uniq_key == msg_id]
    return matches


# --------------------------------------------------------------------------- verify


def cmd_verify(args: argparse.Namespace) -> int:
    from rmqlib.store.verify import verify_store

    report = verify_store(existing(args.store), verify_crc=not args.no_crc)
    if args.json:
        for finding in report.findings:
            print(json.dumps(finding.as_dict(), ensure_ascii=False))
        print(json.dumps({"summary": dict(report.counts), "errors": len(report.errors),
                          "warnings": len(report.warnings)}))
        return EXIT_OK if report.ok else EXIT_FINDINGS
    shown = report.findings[: args.max_findings]
    for finding in shown:
        where = f"{finding.path or ''}{'' if finding.offset is None else f'@{finding.offset}'}"
        print(f"{finding.severity.upper():7} {finding.check:<16} {where} {finding.message}")
    if len(report.findings) > len(shown):
        print(f"... {len(report.findings) - len(shown)} more findings (--max-findings)")
    counts = report.counts
    optional = ", ".join(f"{counts[key]} {label}" for key, label in (
        ("bcq_units", "batch consume-queue units"), ("cq_ext_units", "ext addresses"),
        ("timers_pending", "pending timer messages"),
        ("compacted_units", "units of compacted topics"),
        ("epochs", "controller epochs"),
        ("pop_in_flight", "KV pop messages in flight")) if counts.get(key))
    print(f"verified {report.root} ({report.inventory.generation}): "
          f"{counts['commitlog_records']} commitlog records, {counts['cq_units']} "
          f"consume-queue units, {counts['index_entries']} index entries, "
          f"{counts['consumer_offsets']} consumer offsets, "
          f"{optional + ', ' if optional else ''}{len(report.accounts)} files "
          f"accounted; {len(report.errors)} errors, {len(report.warnings)} warnings")
    print("OK" if report.ok else "FAILED")
    return EXIT_OK if report.ok else EXIT_FINDINGS


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rmq", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    inspect = sub.add_parser("inspect", help="inventory of a store and totals")
    inspect.add_argument("store")
    inspect.set_defaults(func=cmd_inspect)

    dump = sub.add_parser("dump", help="print the contents of store files")
    dump.add_argument("what", choices=sorted(DUMPERS))
    dump.add_argument("path", help="a file, its directory, or (commitlog) the store root")
    dump.add_argument("--offset", type=int, default=0, help="skip this many rows")
    dump.add_argument("--limit", type=int, default=None, help="print at most this many rows")
    dump.add_argument("--no-crc", action="store_true", help="skip CRC verification")
    dump.add_argument("--body", action="store_true", help="include message bodies")
    dump.set_defaults(func=cmd_dump)

    get = sub.add_parser("get", help="find one message")
    get.add_argument("store")
    how = get.add_mutually_exclusive_group(required=True)
    how.add_argument("--phys", type=int, help="commitlog physical offset")
    how.add_argument("--queue", nargs=3, metavar=("TOPIC", "QUEUE_ID", "QUEUE_OFFSET"))
    how.add_argument("--key", help="a message key (needs --topic)")
    how.add_argument("--msg-id", help="offsetMsgId or UNIQ_KEY")
    get.add_argument("--topic", help="topic for --key / UNIQ_KEY index lookups")
    get.add_argument("--body", action="store_true", help="include the message body")
    get.set_defaults(func=cmd_get)

    verify = sub.add_parser("verify", help="check every invariant; exit 1 on any error")
    verify.add_argument("store")
    verify.add_argument("--no-crc", action="store_true", help="skip CRC verification")
    verify.add_argument("--max-findings", type=int, default=50)
    verify.set_defaults(func=cmd_verify)

    for command in (inspect, dump, get, verify):
        command.add_argument("--json", action="store_true", help="JSON lines output")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CliError, StoreError) as error:
        print(f"rmq: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return EXIT_OK
    except Exception as error:
        if os.environ.get("RMQ_DEBUG"):
            traceback.print_exc()
        print(f"rmq: internal error: {type(error).__name__}: {error} "
              "(set RMQ_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
