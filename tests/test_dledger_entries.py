"""DLedger data files (rmqlib/dledger): entries written the way DLedgerMmapFileStore lays
them out, each holding a commitlog record whose PHYSICALOFFSET is the entry's body offset;
then cut, torn and damaged. The real broker's DLedger store is tested once the harness
writes one; these hold the walk to its rules on every layout hypothesis draws."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rmq_encoder import Message, encode

from rmqlib.commitlog.records import decode_record
from rmqlib.dledger import layout as L
from rmqlib.dledger.entries import read_body, scan_data_file

EXAMPLES = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def entry_bytes(index: int, term: int, pos: int, body: bytes) -> bytes:
    size = L.ENTRY_HEADER_SIZE + len(body)
    return L.ENTRY_HEADER.pack(L.ENTRY_MAGIC, size, index, term, pos, 0, 0, 0, len(body)) + body


def write_data_file(directory: Path, start: int, file_size: int, bodies: list[int],
                    first_index: int = 0) -> tuple[Path, list[tuple[int, int, int]]]:
    """A data file at ``start`` with an entry per body size (a commitlog record padded by
    its properties), a BLANK when the next one no longer fits; returns the file and each
    entry's (pos, size, index)."""
    data = bytearray(file_size)
    placed, position = [], 0
    for index, extra in enumerate(bodies, start=first_index):
        pos = start + position
        record = encode(Message(topic="TopicD", body=b"x" * extra, queue_offset=index,
                                 properties=(("UNIQ_KEY", f"ID{index:08d}"),)),
                        pos + L.ENTRY_HEADER_SIZE)
        entry = entry_bytes(index, 1, pos, record)
        if position + len(entry) + L.MIN_BLANK_LENGTH > file_size:
            struct.pack_into(">ii", data, position, L.BLANK_MAGIC, file_size - position)
            break
        data[position:position + len(entry)] = entry
        placed.append((pos, len(entry), index))
        position += len(entry)
    path = directory / f"{start:020d}"
    path.write_bytes(bytes(data))
    return path, placed


layouts = st.tuples(st.integers(0, 3).map(lambda k: k * 65536),
                    st.lists(st.integers(0, 3000), min_size=0, max_size=40))


@EXAMPLES
@given(layout=layouts)
def test_every_entry_is_found_and_every_byte_accounted(tmp_path: Path, layout) -> None:
    start, bodies = layout
    path, placed = write_data_file(tmp_path, start, 65536, bodies)
    entries, scan = scan_data_file(path)
    assert [(e.pos, e.size, e.index) for e in entries] == placed
    assert scan.account.balanced and not scan.account.unreadable
    assert scan.account.decoded == sum(size for _, size, _ in placed)
    for entry in entries:
        record = decode_record(read_body(path, entry, start), segment_start=start,
                               position=entry.body_offset - start)
        assert record.physical_offset == entry.body_offset
        assert record.queue_offset == entry.index


@EXAMPLES
@given(layout=layouts, data=st.data())
def test_a_torn_write_position_and_a_damaged_entry_are_reported_not_skipped(
        tmp_path: Path, layout, data: st.DataObject) -> None:
    start, bodies = layout
    path, placed = write_data_file(tmp_path, start, 65536, [*bodies, 100])
    raw = bytearray(path.read_bytes())
    if not placed:
        return
    victim = data.draw(st.sampled_from(placed), label="damaged entry")
    pos, size, _ = victim
    at = pos - start + data.draw(st.sampled_from([0, 4, 24]), label="field")  # magic, size, pos
    raw[at] ^= 0x40
    path.write_bytes(bytes(raw))

    entries, scan = scan_data_file(path)

    assert scan.account.balanced
    assert (pos, size) not in [(e.pos, e.size) for e in entries]
    assert [e.pos for e in entries] == [p for p, _, _ in placed if p != pos]
    lost = scan.account.unreadable_bytes
    assert lost >= 1 and all(region.offset == pos - start for region in scan.account.unreadable)


@EXAMPLES
@given(layout=layouts, data=st.data())
def test_the_index_units_match_the_entries_and_a_wrong_one_is_named(
        tmp_path: Path, layout, data: st.DataObject) -> None:
    from rmqlib.dledger.index import check_index, read_index_units

    start, bodies = layout
    path, placed = write_data_file(tmp_path, start, 65536, bodies)
    entries, _ = scan_data_file(path)
    units = bytearray(L.INDEX_UNIT_SIZE * (len(placed) + 3))  # unwritten units: zeros
    for pos, size, index in placed:
        L.INDEX_UNIT.pack_into(units, index * L.INDEX_UNIT_SIZE, L.ENTRY_MAGIC, pos, size,
                               index, 1)
    index_dir = tmp_path / "index"
    index_dir.mkdir(exist_ok=True)
    (index_dir / f"{0:020d}").write_bytes(bytes(units))
    assert check_index(entries, list(read_index_units(index_dir))) == []
    if not placed:
        return
    wrong = data.draw(st.sampled_from(placed), label="unit")[2]
    struct.pack_into(">q", units, wrong * L.INDEX_UNIT_SIZE + 4, 7)  # its POS, now 7
    (index_dir / f"{0:020d}").write_bytes(bytes(units))
    problems = check_index(entries, list(read_index_units(index_dir)))
    assert [p.index for p in problems] == [wrong]


def test_checkpoint_and_term_files_are_java_properties(tmp_path: Path) -> None:
    from rmqlib.dledger.index import read_properties

    (tmp_path / "checkpoint").write_text("#comment\nendIndex=41\ncommittedIndex=40\n")
    assert read_properties(tmp_path / "checkpoint") == {"endIndex": "41", "committedIndex": "40"}


@EXAMPLES
@given(layout=st.lists(st.integers(0, 3000), min_size=1, max_size=60))
def test_a_data_directory_yields_each_entrys_record_across_files(tmp_path: Path,
                                                                 layout) -> None:
    from rmqlib.dledger.records import scan_dledger

    data = tmp_path / "dledger-n0" / "data"
    data.mkdir(parents=True, exist_ok=True)
    for old in data.iterdir():
        old.unlink()
    file_size, start, placed, left = 32768, 0, [], list(layout)
    while left:
        _, here = write_data_file(data, start, file_size, left, len(placed))
        placed += here
        left = left[len(here):]
        start += file_size
    scan = scan_dledger(data)
    found = [(entry.pos, record.physical_offset) for entry, record in scan]
    assert found == [(pos, pos + L.ENTRY_HEADER_SIZE) for pos, _, _ in placed]
    assert scan.bad_bodies == [] and all(f.account.balanced for f in scan.files)


def dledger_store(root: Path, bodies: list[int], file_size: int = 32768) -> list[tuple]:
    """A store root holding only a DLedger log (data, index, checkpoint), like a DLedger
    broker's before it dispatched anything; returns the entries (pos, size, index)."""
    data = root / "dledger-n0" / "data"
    data.mkdir(parents=True)
    placed, start, left = [], 0, list(bodies)
    while left:
        _, here = write_data_file(data, start, file_size, left, len(placed))
        placed += here
        left = left[len(here):]
        start += file_size
    units = bytearray(L.INDEX_UNIT_SIZE * (len(placed) + 4))
    for pos, size, index in placed:
        L.INDEX_UNIT.pack_into(units, index * L.INDEX_UNIT_SIZE, L.ENTRY_MAGIC, pos, size,
                               index, 1)
    (root / "dledger-n0" / "index").mkdir()
    (root / "dledger-n0" / "index" / f"{0:020d}").write_bytes(bytes(units))
    (root / "dledger-n0" / "checkpoint").write_text(
        f"committedIndex={len(placed) - 1}\nendIndex={len(placed) - 1}\n")
    return placed


def test_verify_reads_a_dledger_log_and_names_a_damaged_entry(tmp_path: Path) -> None:
    from rmqlib.store.verify import verify_store

    placed = dledger_store(tmp_path / "ok", [300] * 120)
    report = verify_store(tmp_path / "ok")
    assert report.errors == []
    assert report.counts["dledger_entries"] == report.counts["commitlog_records"] == len(placed)
    assert not any("not decoded" in f.message or "checked by rmq verify" in f.message
                   for f in report.findings)

    placed = dledger_store(tmp_path / "bad", [300] * 120)
    pos = placed[50][0]
    segment = tmp_path / "bad" / "dledger-n0" / "data" / f"{pos - pos % 32768:020d}"
    raw = bytearray(segment.read_bytes())
    raw[pos % 32768 + L.ENTRY_HEADER_SIZE + 100] ^= 0x01  # a byte of the record's body
    segment.write_bytes(bytes(raw))
    errors = verify_store(tmp_path / "bad").errors
    assert [(e.check, e.offset) for e in errors] == [
        ("body-crc", pos % 32768 + L.ENTRY_HEADER_SIZE)]


def test_rmq_dump_dledger_shows_each_entry_and_its_record(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    placed = dledger_store(tmp_path, [300] * 120)

    def rmq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rmqlib.cli.main", *args],
                              capture_output=True, text=True, timeout=120, check=False)

    text = rmq("dump", "dledger", str(tmp_path), "--limit", "2")
    assert text.returncode == 0, text.stderr
    assert f"entry index=1 term=1 pos={placed[1][0]} size={placed[1][1]}" in text.stdout
    rows = [json.loads(line) for line in rmq("dump", "dledger", str(tmp_path),
                                               "--json").stdout.splitlines()]
    entries = [r for r in rows if r.get("kind") == "entry"]
    assert [(r["index"], r["pos"], r["record"]["physical_offset"]) for r in entries] == \
        [(index, pos, pos + L.ENTRY_HEADER_SIZE) for pos, _, index in placed]


@EXAMPLES
@given(layout=layouts, cuts=st.lists(st.integers(1, 65535), max_size=4, unique=True))
def test_arrow_batches_over_any_split_are_the_records_of_a_whole_scan(
        tmp_path: Path, layout, cuts: list[int]) -> None:
    """The load's path (rmqlib.dledger.arrow, vectorised) against the record-at-a-time
    decoder: the same records, field by field, however the file is split into ranges,
    and the ranges' accounts add up to the file."""
    import pyarrow as pa

    from rmqlib.dledger.arrow import scan_dledger_arrow

    start, bodies = layout
    path, placed = write_data_file(tmp_path, start, 65536, bodies)
    bounds = [0, *sorted(cuts), 65536]
    batches, accounted, owned = [], 0, []
    for lo, hi in itertools.pairwise(bounds):
        scan = scan_dledger_arrow(path, lo, hi)
        batches += [b for b in scan if b.num_rows]
        accounted += scan.result.account.size
        owned.append((scan.result.span_start, scan.result.span_end))
        assert scan.result.account.balanced and not scan.result.account.unreadable
    assert accounted == 65536
    spans = [span for span in owned if span[0] < span[1]]  # a range may own nothing
    assert spans[0][0] == 0 and spans[-1][1] == 65536
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    table = pa.Table.from_batches(batches) if batches else None
    rows = table.to_pylist() if table is not None else []
    assert [r["physical_offset"] for r in rows] == [pos + L.ENTRY_HEADER_SIZE
                                                    for pos, _, _ in placed]
    entries, _ = scan_data_file(path)
    for row, entry in zip(rows, entries, strict=True):
        record = decode_record(read_body(path, entry, start), segment_start=start,
                               position=entry.body_offset - start)
        assert (row["topic"], row["queue_offset"], row["total_size"], row["body_crc"],
                row["uniq_key"], row["body"]) == (
            record.topic, record.queue_offset, record.total_size, record.body_crc,
            record.properties.get("UNIQ_KEY"), record.body)
        assert row["file_position"] == entry.body_offset - start


@EXAMPLES
@given(layout=st.lists(st.integers(0, 3000), min_size=2, max_size=40), data=st.data())
def test_an_entry_whose_body_is_no_record_is_quarantined_and_the_rest_load(
        tmp_path: Path, layout, data: st.DataObject) -> None:
    from rmqlib.dledger.arrow import scan_dledger_arrow

    path, placed = write_data_file(tmp_path, 0, 65536, layout)
    if len(placed) < 2:
        return
    victim = data.draw(st.sampled_from(placed[:-1]), label="entry")  # not the tail one
    raw = bytearray(path.read_bytes())
    raw[victim[0] + L.ENTRY_HEADER_SIZE + 4] ^= 0x40  # the record's MAGICCODE
    path.write_bytes(bytes(raw))
    scan = scan_dledger_arrow(path)
    offsets = [o for b in scan for o in b.column("physical_offset").to_pylist()]
    assert offsets == [pos + L.ENTRY_HEADER_SIZE for pos, _, _ in placed if pos != victim[0]]
    account = scan.result.account
    assert account.balanced
    assert [(r.offset, r.length) for r in account.unreadable] == [(victim[0], victim[1])]
    assert account.unreadable[0].reason.startswith("corrupt: DLedger entry")
