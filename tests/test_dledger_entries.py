"""DLedger data files (rmqlib/dledger): entries written the way DLedgerMmapFileStore lays
them out, each holding a commitlog record whose PHYSICALOFFSET is the entry's body offset;
then cut, torn and damaged. The real broker's DLedger store is tested once the harness
writes one; these hold the walk to its rules on every layout hypothesis draws."""

from __future__ import annotations

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


def write_data_file(directory: Path, start: int, file_size: int,
                    bodies: list[int]) -> tuple[Path, list[tuple[int, int, int]]]:
    """A data file at ``start`` with an entry per body size (a commitlog record padded by
    its properties), a BLANK when the next one no longer fits; returns the file and each
    entry's (pos, size, index)."""
    data = bytearray(file_size)
    placed, position = [], 0
    for index, extra in enumerate(bodies):
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
        _, here = write_data_file(data, start, file_size, left)
        placed += here
        left = left[len(here):]
        start += file_size
    scan = scan_dledger(data)
    found = [(entry.pos, record.physical_offset) for entry, record in scan]
    assert found == [(pos, pos + L.ENTRY_HEADER_SIZE) for pos, _, _ in placed]
    assert scan.bad_bodies == [] and all(f.account.balanced for f in scan.files)
