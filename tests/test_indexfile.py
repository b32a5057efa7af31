"""IndexFile: header, slots, entries, lookup, validation and accounting."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_encoders import IndexWriter, index_hash

from rmqlib.errors import CorruptDataError, NotAStoreFileError
from rmqlib.indexfile import (
    DEFAULT_HASH_SLOT_NUM,
    DEFAULT_INDEX_NUM,
    INDEX_SCHEMA,
    IndexFile,
    IndexGeometry,
    expected_time_diff,
    list_index_files,
    record_index_keys,
)

SLOTS, ENTRIES = 8, 40
T0 = 1_700_000_000_000


def build(records: list[tuple[str, list[str], int, int]], **kw: int) -> IndexWriter:
    """records: (topic, keys, commitlog offset, store timestamp), indexed like IS.buildIndex."""
    writer = IndexWriter(kw.get("slots", SLOTS), kw.get("entries", ENTRIES),
                         kw.get("seed_offset", 0), kw.get("seed_time", 0))
    for topic, keys, offset, stamp in records:
        for key in keys:
            writer.put(f"{topic}#{key}", offset, stamp)
    return writer


def open_mem(data: bytes, slots: int = SLOTS, entries: int = ENTRIES) -> IndexFile:
    return IndexFile.from_bytes(data, slots, entries)


def sample() -> IndexWriter:
    return build([
        ("TopicA", ["k1", "k2"], 0, T0),
        ("TopicA", ["k1"], 300, T0 + 1500),
        ("TopicB", ["k1", "UNIQ01"], 700, T0 + 4200),
        ("TopicA", ["k3"], 900, T0 + 9000),
    ])


# --------------------------------------------------------------------------- happy path


def test_header_and_entries() -> None:
    index = open_mem(sample().data())
    header = index.header
    assert header.index_count == 7 and index.entry_count == 6
    assert (header.begin_phy_offset, header.end_phy_offset) == (0, 900)
    assert (header.begin_timestamp, header.end_timestamp) == (T0, T0 + 9000)
    entries = list(index.entries())
    assert [e.number for e in entries] == [1, 2, 3, 4, 5, 6]
    assert [e.commitlog_offset for e in entries] == [0, 0, 300, 700, 700, 900]
    assert [e.time_diff for e in entries] == [0, 0, 1, 4, 4, 9]
    assert entries[3].store_time_ms == T0 + 4000
    assert index.validate().problems == []


def test_lookup_follows_chain_newest_first() -> None:
    index = open_mem(sample().data())
    assert index.lookup_key("TopicA", "k1").offsets == [300, 0]
    assert index.lookup_key("TopicB", "k1").offsets == [700]
    assert index.lookup_key("TopicB", "UNIQ01").offsets == [700]
    assert index.lookup_key("TopicC", "k1").offsets == []
    assert index.lookup_key("TopicA", "k1", max_num=1).offsets == [300]
    assert index.lookup_key("TopicA", "k1", begin=T0 + 1000).offsets == [300]
    assert index.lookup_key("TopicA", "k1", end=T0 + 999).offsets == [0]


def test_account_of_clean_file() -> None:
    writer = sample()
    index = open_mem(writer.data())
    account = index.account()
    used_slots = writer.hash_slot_count
    assert account.decoded == 40 + 4 * used_slots + 20 * 6
    assert account.blank == 4 * (SLOTS - used_slots) + 20  # empty slots + entry 0
    assert account.zero_tail == 20 * (ENTRIES - 7)
    assert account.unreadable == []


def test_record_batch() -> None:
    batch = open_mem(sample().data()).to_record_batch()
    assert batch.schema == INDEX_SCHEMA
    assert batch.column("entry_number").to_pylist() == [1, 2, 3, 4, 5, 6]
    assert batch.column("store_time_ms").to_pylist()[-1] == T0 + 9000
    assert batch.column("key_hash").to_pylist()[0] == index_hash("TopicA#k1")
    assert batch.column("slot").to_pylist()[0] == index_hash("TopicA#k1") % SLOTS


def test_new_file_has_no_entries_and_seeded_header() -> None:
    writer = IndexWriter(SLOTS, ENTRIES, 5000, T0)
    index = open_mem(writer.data())
    assert index.header.index_count == 0 and index.entry_count == 0
    assert index.header.begin_phy_offset == 5000
    assert index.lookup("T#k").entries == []
    account = index.account()
    assert account.decoded == 40 and account.unreadable == []


def test_first_entry_time_diff_uses_seeded_begin() -> None:
    writer = build([("T", ["a"], 10_000, T0 + 5000), ("T", ["b"], 10_100, T0 + 8000)],
                   seed_offset=9000, seed_time=T0)
    index = open_mem(writer.data())
    first, second = index.entries()
    assert first.time_diff == 5  # computed against the seeded begin timestamp
    assert index.header.begin_timestamp == T0 + 5000  # then overwritten by the first put
    assert second.time_diff == 3
    assert index.validate().problems == []


def test_full_file_stops_accepting() -> None:
    writer = build([("T", [f"k{i}"], i, T0) for i in range(10)], entries=5)
    assert writer.index_count == 5
    index = open_mem(writer.data(), entries=5)
    assert index.entry_count == 4 and index.account().zero_tail == 0


KEYS = st.lists(
    st.tuples(st.sampled_from(["TopicA", "TopicB", "%RETRY%g"]),
              st.text(min_size=1, max_size=6)),
    min_size=1, max_size=30,
)


@settings(max_examples=120, deadline=None)
@given(keys=KEYS, slots=st.integers(1, 7))
def test_every_inserted_key_is_found(keys: list[tuple[str, str]], slots: int) -> None:
    writer = IndexWriter(slots, 64)
    expected: dict[str, list[int]] = {}
    for i, (topic, key) in enumerate(keys):
        full = f"{topic}#{key}"
        writer.put(full, 100 * i, T0 + 1000 * i)
        expected.setdefault(full, []).insert(0, 100 * i)
    index = open_mem(writer.data(), slots, 64)
    assert index.validate().problems == []
    assert index.account().unreadable == []
    by_hash: dict[int, list[int]] = {}
    for full, offsets in expected.items():
        by_hash.setdefault(index_hash(full), []).extend(offsets)
    for full in expected:
        found = index.lookup(full)
        assert found.problem is None
        assert sorted(found.offsets) == sorted(by_hash[index_hash(full)])
        assert found.offsets == sorted(found.offsets, reverse=True)


# --------------------------------------------------------------------------- geometry


def test_geometry_inference() -> None:
    default = IndexGeometry(DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM)
    assert default.file_size == 420_000_040
    assert IndexGeometry.infer(420_000_040) == default
    assert IndexGeometry.infer(40 + 84 * 10) == IndexGeometry(10, 40)
    assert IndexGeometry.infer(40 + 4 * 3 + 20 * 7, hash_slot_num=3) == IndexGeometry(3, 7)
    assert IndexGeometry.infer(40 + 4 * 3 + 20 * 7, index_num=7) == IndexGeometry(3, 7)
    for size, kw in ((41, {}), (40 + 4 * 3 + 20 * 7, {"hash_slot_num": 4, "index_num": 7})):
        with pytest.raises(NotAStoreFileError):
            IndexGeometry.infer(size, **kw)


def test_short_or_missing_files(tmp_path: Path) -> None:
    with pytest.raises(NotAStoreFileError):
        IndexFile.from_bytes(b"\x00" * 10)
    with pytest.raises(NotAStoreFileError):
        IndexFile.open(tmp_path / "missing")
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(NotAStoreFileError, match="created but not yet sized"):
        IndexFile.open(tmp_path / "empty")  # a kill while rolling: says so, not "corrupt"
    (tmp_path / "short").write_bytes(b"\x01" * 10)
    with pytest.raises(NotAStoreFileError, match="of 10 bytes has no header"):
        IndexFile.open(tmp_path / "short")


# --------------------------------------------------------------------------- corruption


def patch(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, value)
    return bytes(buf)


ENTRY_BASE = 40 + 4 * SLOTS


@pytest.mark.parametrize("count", [-1, ENTRIES + 1])
def test_impossible_index_count_raises(count: int) -> None:
    with pytest.raises(CorruptDataError) as info:
        open_mem(patch(sample().data(), 36, ">i", count))
    assert info.value.offset == 36


def test_flipped_header_offset_makes_header_unreadable() -> None:
    index = open_mem(patch(sample().data(), 16, ">q", 12345))
    assert not index.validate().header_ok
    account = index.account()
    assert [(r.offset, r.length) for r in account.unreadable] == [(0, 40)]


def test_flipped_hash_slot_count_is_reported() -> None:
    index = open_mem(patch(sample().data(), 32, ">i", 99))
    assert any(p.kind == "header" for p in index.validate().problems)


def test_slot_out_of_range_is_unreadable() -> None:
    data = sample().data()
    slot = index_hash("TopicA#k1") % SLOTS
    index = open_mem(patch(data, 40 + 4 * slot, ">i", 1000))
    account = index.account()
    assert (40 + 4 * slot, 4) in [(r.offset, r.length) for r in account.unreadable]
    assert account.balanced
    lookup = index.lookup_key("TopicA", "k1")
    assert lookup.entries == [] and lookup.problem


def test_wrong_but_in_range_slot_is_a_problem() -> None:
    data = sample().data()
    slot = index_hash("TopicA#k1") % SLOTS
    index = open_mem(patch(data, 40 + 4 * slot, ">i", 1))
    kinds = {p.kind for p in index.validate().problems}
    assert "slot" in kinds
    assert index.account().unreadable == []


def test_cyclic_prev_index_chain_terminates() -> None:
    writer = build([("T", ["same"], 10 * i, T0 + i) for i in range(6)], slots=1)
    data = writer.data()
    # entry 2 points "back" to 5 (a cycle 5 -> 4 -> 3 -> 2 -> 5 ...)
    cyclic = patch(data, 44 + 20 * 2 + 16, ">i", 5)  # entries start at 40 + 4 * 1
    index = open_mem(cyclic, slots=1)
    lookup = index.lookup("T#same")
    assert lookup.problem and "prevIndex 5" in lookup.problem
    assert lookup.visited <= index.entry_count
    assert lookup.offsets == [50, 40, 30, 20, 10]
    bad = index.validate().bad_entries
    assert bad.tolist() == [False, True, False, False, False, False]
    assert index.account().unreadable[0].length == 20


def test_self_loop_prev_index() -> None:
    writer = build([("T", ["x"], 1, T0), ("T", ["x"], 2, T0)], slots=1)
    looped = patch(writer.data(), 40 + 4 + 20 * 2 + 16, ">i", 2)
    lookup = open_mem(looped, slots=1).lookup("T#x")
    assert lookup.problem and lookup.visited == 1


def test_negative_prev_and_hash_are_unreadable_entries() -> None:
    data = patch(sample().data(), ENTRY_BASE + 20 * 3 + 16, ">i", -4)
    data = patch(data, ENTRY_BASE + 20 * 4, ">i", -9)
    index = open_mem(data)
    assert index.validate().bad_entries.tolist() == [False, False, True, True, False, False]
    regions = [(r.offset, r.length) for r in index.account().unreadable]
    assert (ENTRY_BASE + 60, 40) in regions
    assert index.to_record_batch().num_rows == 4


def test_garbage_beyond_index_count_and_in_entry_zero() -> None:
    data = patch(sample().data(), ENTRY_BASE + 20 * 20, ">q", 77)
    data = patch(data, ENTRY_BASE, ">i", 5)
    account = open_mem(data).account()
    reasons = {(r.offset, r.reason) for r in account.unreadable}
    assert (ENTRY_BASE + 400, "non-zero entries beyond indexCount") in reasons
    assert any(offset == ENTRY_BASE for offset, _ in reasons)
    assert account.balanced


def test_decreasing_offsets_and_chain_mismatch_reported() -> None:
    data = patch(sample().data(), ENTRY_BASE + 20 * 3 + 4, ">q", 10**9)
    problems = open_mem(data).validate().problems
    assert any(p.kind == "order" for p in problems)
    other = patch(sample().data(), ENTRY_BASE + 20 * 3 + 16, ">i", 0)  # cut k1 chain
    assert any(p.kind == "chain" for p in open_mem(other).validate().problems)


@settings(max_examples=80, deadline=None)
@given(position=st.integers(0, 40 + 4 * SLOTS + 20 * ENTRIES - 1), value=st.integers(1, 255))
def test_any_flipped_byte_is_typed_error_or_balanced(position: int, value: int) -> None:
    buf = bytearray(sample().data())
    buf[position] ^= value
    try:
        index = open_mem(bytes(buf))
    except CorruptDataError:
        return
    assert index.account().balanced
    for key in ("TopicA#k1", "TopicB#UNIQ01", "TopicA#k3"):
        assert index.lookup(key).visited <= index.entry_count


# --------------------------------------------------------------------------- directory


def test_files_ordered_by_header_not_name(tmp_path: Path) -> None:
    older = build([("T", ["a"], 0, T0)])
    newer = build([("T", ["b"], 100, T0 + 60_000)], seed_offset=0, seed_time=T0)
    (tmp_path / "20991231235959999").write_bytes(older.data())
    (tmp_path / "19700101000000000").write_bytes(newer.data())
    (tmp_path / "not-an-index").write_bytes(b"short")
    (tmp_path / "subdir").mkdir()
    listing = list_index_files(tmp_path, SLOTS, ENTRIES)
    assert [f.path.name for f in listing.files] == ["20991231235959999", "19700101000000000"]
    assert all(f.name_is_timestamp for f in listing.files)
    assert [p.name for p, _ in listing.rejected] == ["not-an-index"]
    with IndexFile.open(listing.files[1].path, SLOTS, ENTRIES) as index:
        assert index.lookup("T#b").offsets == [100]
        assert index.account().balanced


def test_expected_time_diff_clamps() -> None:
    assert expected_time_diff(T0 - 5000, T0) == 0
    assert expected_time_diff(T0 + 1999, T0) == 1
    assert expected_time_diff(T0, 0) == 0
    assert expected_time_diff(2**62, 1) == 2**31 - 1


def test_record_index_keys_like_build_index() -> None:
    assert record_index_keys("T", "a  b a", "U1") == ["T#U1", "T#a", "T#b", "T#a"]
    assert record_index_keys("T", None, None) == []
    assert record_index_keys("T", "", "U") == ["T#U"]


# --------------------------------------------------------------------------- hot copies


def hot_copy(states: list[bytes], header_at: int, slots_at: int, entries_at: int,
             slots: int = SLOTS) -> bytes:
    """The bytes a copy reads from an index being written: the header as it was after
    ``header_at`` puts, the slot table after ``slots_at``, the entries after
    ``entries_at`` (IndexFile.putKey writes entry, slot, header; a copy reads the file
    from the header on, so header_at <= slots_at <= entries_at)."""
    slot_end = 40 + 4 * slots
    return states[header_at][:40] + states[slots_at][40:slot_end] + states[entries_at][slot_end:]


@settings(max_examples=150, deadline=None)
@given(keys=KEYS, slots=st.integers(1, 7), data=st.data())
def test_a_header_lagging_by_k_entries_decodes_them_with_one_note(
        keys: list[tuple[str, str]], slots: int, data: st.DataObject) -> None:
    """A hot copy whose header counts k entries fewer than it holds: every entry is
    decoded (the same rows as the finished file), the account balances with no unreadable
    byte, the validation finds nothing, and one ``hot copy`` note names the lag."""
    writer = IndexWriter(slots, 64)
    states = [writer.data()]
    for i, (topic, key) in enumerate(keys):
        writer.put(f"{topic}#{key}", 100 * i, T0 + 1000 * i)
        states.append(writer.data())
    n = len(keys)
    header_at = data.draw(st.integers(0, n), label="header_at")
    slots_at = data.draw(st.integers(header_at, n), label="slots_at")
    copy = hot_copy(states, header_at, slots_at, n, slots)
    index = open_mem(copy, slots, 64)
    k = n - header_at
    assert (index.header.entry_count, index.lagging_entries, index.entry_count) == (
        header_at, k, n)
    assert index.validate().problems == []
    account = index.account()
    assert account.balanced and account.unreadable == []
    assert [note.reason.startswith("hot copy: index header lags its entries")
            for note in account.notes] == ([True] if k else [])
    rows = index.to_record_batch().to_pylist()
    final = open_mem(states[n], slots, 64).to_record_batch().to_pylist()
    if header_at == 0:  # no beginTimestamp in the header read yet: times are relative
        for row in rows + final:
            row.pop("store_time_ms")
    assert rows == final
    for topic, key in keys:  # lookups reach the lagging entries through their chains
        assert index.lookup(f"{topic}#{key}").problem is None


@pytest.mark.parametrize("cut", [4, 16])
def test_the_entry_being_written_is_a_torn_tail_and_damage_is_not(cut: int) -> None:
    """Past the consistent entries: one incomplete entry with only zeros after it is the
    entry being written (torn tail); non-zero bytes further on are damage. (An entry cut
    after its offset whose zero timeDiff and prevIndex happen to fit its chain cannot be
    told from a whole one: it is decoded.)"""
    writer = sample()
    states = [writer.data()]
    writer.put("TopicC#k9", 1000, T0 + 10_000)
    states.append(writer.data())
    position = ENTRY_BASE + 20 * 7
    torn = bytearray(hot_copy([states[0], states[0], states[1]], 0, 0, 0))
    torn[position:position + 20] = states[1][position:position + cut] + bytes(20 - cut)
    if cut == 16:  # prevIndex missing but slot empty: fields still possible; make it wrong
        torn[position + 4:position + 12] = (5).to_bytes(8, "big")  # offset decreases
    index = open_mem(bytes(torn))
    assert index.lagging_entries == 0
    (region,) = index.account().unreadable
    assert (region.offset, region.length) == (position, 20)
    assert region.reason.startswith("torn tail: index entry at the write position")
    torn[ENTRY_BASE + 20 * 30] = 1  # and something further on: damage, not a write
    (first, second) = open_mem(bytes(torn)).account().unreadable
    assert first.reason == second.reason == "non-zero entries beyond indexCount"
