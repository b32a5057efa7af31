"""IndexFile: the broker's on-disk hash index from ``topic#key`` to commitlog offsets (§5).

Layout (byte-identical in 4.9.8 and 5.x): a 40-byte header, ``hashSlotNum`` i32 slots,
then ``indexNum`` 20-byte entries. Neither count is stored in the file, so the geometry
comes from the broker config (defaults 5 000 000 / 20 000 000) or is inferred from the
file size. ``indexCount`` in the header is the *next* entry number: entries are
1 … indexCount - 1 and entry 0 is never used. Each slot holds its newest entry; entries
chain to older ones of the same slot through ``prevIndex`` (0 ends a chain).

Accounting per file: header → ``decoded`` (``unreadable`` when it contradicts the
entries); non-empty slots → ``decoded``, empty slots → ``blank``, out-of-range slots →
``unreadable``; unused entry 0 → ``blank``; used entries → ``decoded`` unless a field is
impossible (negative hash/offset/timeDiff, prevIndex not below its own number) →
``unreadable``; unused entries after the last one → ``zero_tail`` when all zero, else
``unreadable``. Chain/slot-head mismatches and ordering violations (§8.11) are reported
as :class:`IndexProblem` without changing the account, since which side is wrong is
ambiguous. A header whose indexCount cannot be right (negative or above indexNum)
raises :class:`CorruptDataError`.

Hot copies (rmqlib.common.races). ``IndexFile.putKey`` writes an entry, then its slot, then
the header's count and end fields, and a copy reads the file from the header on: a copy
of an index being written holds entries beyond the indexCount it read, and slots pointing
at some of them. The entries after the header's count that continue it consistently
(fields possible, prevIndex the previous entry of the same slot, commitlog offsets not
decreasing) are entries like the others: they are decoded, the header is checked against
the entries it counts, a slot may point at any entry of its chain from the newest the
header counts to the newest decoded, and the account notes ``hot copy: index header lags
its entries``. What follows them: zeros (the zero tail); one non-zero entry and only
zeros after it, the entry being written (``torn tail``); anything else is damage
("non-zero entries beyond indexCount").
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from rmqlib.common import races
from rmqlib.common.accounting import FileAccount
from rmqlib.common.fileio import map_read_only, runs
from rmqlib.common.javahash import index_key, index_key_hash
from rmqlib.errors import CorruptDataError, NotAStoreFileError, StoreError

# IndexHeader layout (big-endian).
INDEX_HEADER_SIZE = 40
IH_BEGIN_TIMESTAMP_OFFSET = 0
IH_END_TIMESTAMP_OFFSET = 8
IH_BEGIN_PHY_OFFSET_OFFSET = 16
IH_END_PHY_OFFSET_OFFSET = 24
IH_HASH_SLOT_COUNT_OFFSET = 32
IH_INDEX_COUNT_OFFSET = 36
_HEADER = struct.Struct(">qqqqii")

# Slot table and entries (IndexFile.hashSlotSize / indexSize).
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
IE_KEY_HASH_OFFSET = 0
IE_PHY_OFFSET_OFFSET = 4
IE_TIME_DIFF_OFFSET = 12
IE_PREV_INDEX_OFFSET = 16
_ENTRY = struct.Struct(">iqii")
INDEX_ENTRY_DTYPE = np.dtype(
    [("key_hash", ">i4"), ("commitlog_offset", ">i8"), ("time_diff", ">i4"), ("prev_index", ">i4")]
)
assert INDEX_ENTRY_DTYPE.itemsize == INDEX_ENTRY_SIZE

INVALID_INDEX = 0
DEFAULT_HASH_SLOT_NUM = 5_000_000
DEFAULT_INDEX_NUM = 20_000_000
INDEX_FILE_NAME = re.compile(r"^\d{17}$")  # yyyyMMddHHmmssSSS, broker local time
_INT_MAX = 2**31 - 1
_SCAN_ENTRIES = 1 << 20  # entries per chunk when scanning the unused area

INDEX_SCHEMA = pa.schema(
    [
        pa.field("file", pa.string(), nullable=False),
        pa.field("entry_number", pa.int32(), nullable=False),
        pa.field("key_hash", pa.int32(), nullable=False),
        pa.field("slot", pa.int32(), nullable=False),
        pa.field("commitlog_offset", pa.int64(), nullable=False),
        pa.field("time_diff", pa.int32(), nullable=False),
        pa.field("prev_index", pa.int32(), nullable=False),
        pa.field("store_time_ms", pa.int64(), nullable=False),
    ]
)


KEY_SEPARATOR = " "  # MessageConst.KEY_SEPARATOR
INDEX_TAG_TYPE = "T"  # MessageConst.INDEX_TAG_TYPE (5.5.0+)


def tag_index_key(topic: str, tags: str) -> str:
    """The tag key 5.5.0+ brokers also index: ``topic#T#tags``.

    Not in the spec (which stops at 5.3.x); found in real 5.5.0 stores, where every
    record with TAGS has an index entry whose hash is that of this string.
    """
    return f"{topic}#{INDEX_TAG_TYPE}#{tags}"


def record_index_keys(
    topic: str, keys: str | None, uniq_key: str | None, tags: str | None = None
) -> list[str]:
    """The strings ``IndexService.buildIndex`` puts for one record, in order.

    ``topic#UNIQ_KEY`` first (if present), then ``topic#k`` for every non-empty k of
    KEYS split on single spaces (duplicates are indexed again, as the broker does),
    then, when ``tags`` is given (5.5.0+ brokers), the tag key ``topic#T#tags``.
    """
    result = [index_key(topic, uniq_key)] if uniq_key is not None else []
    if keys:
        result += [index_key(topic, k) for k in keys.split(KEY_SEPARATOR) if k]
    if tags:
        result.append(tag_index_key(topic, tags))
    return result


# --------------------------------------------------------------------------- geometry


@dataclass(frozen=True)
class IndexGeometry:
    """Slot and entry counts of an index file (broker ``maxHashSlotNum``/``maxIndexNum``)."""

    hash_slot_num: int
    index_num: int

    @property
    def file_size(self) -> int:
        return INDEX_HEADER_SIZE + INDEX_SLOT_SIZE * self.hash_slot_num + (
            INDEX_ENTRY_SIZE * self.index_num
        )

    @property
    def entries_offset(self) -> int:
        return INDEX_HEADER_SIZE + INDEX_SLOT_SIZE * self.hash_slot_num

    def slot_position(self, slot: int) -> int:
        return INDEX_HEADER_SIZE + INDEX_SLOT_SIZE * slot

    def entry_position(self, number: int) -> int:
        return self.entries_offset + INDEX_ENTRY_SIZE * number

    @classmethod
    def infer(
        cls,
        file_size: int,
        hash_slot_num: int | None = None,
        index_num: int | None = None,
        *,
        path: str | Path | None = None,
    ) -> IndexGeometry:
        """Geometry from config values, else from the size (defaults, then the 1:4 ratio).

        Raises NotAStoreFileError when the size fits none of them.
        """
        body = file_size - INDEX_HEADER_SIZE
        candidates: list[IndexGeometry] = []
        if hash_slot_num is not None and index_num is not None:
            candidates.append(cls(hash_slot_num, index_num))
        elif hash_slot_num is not None:
            rest = body - INDEX_SLOT_SIZE * hash_slot_num
            if rest >= 0 and rest % INDEX_ENTRY_SIZE == 0:
                candidates.append(cls(hash_slot_num, rest // INDEX_ENTRY_SIZE))
        elif index_num is not None:
            rest = body - INDEX_ENTRY_SIZE * index_num
            if rest >= 0 and rest % INDEX_SLOT_SIZE == 0:
                candidates.append(cls(rest // INDEX_SLOT_SIZE, index_num))
        else:
            candidates.append(cls(DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM))
            per_slot = INDEX_SLOT_SIZE + 4 * INDEX_ENTRY_SIZE
            if body > 0 and body % per_slot == 0:
                candidates.append(cls(body // per_slot, 4 * (body // per_slot)))
        for geometry in candidates:
            if geometry.file_size == file_size and geometry.hash_slot_num > 0 and (
                geometry.index_num > 0
            ):
                return geometry
        raise NotAStoreFileError(
            f"file size {file_size} does not fit an index file geometry "
            f"(hashSlotNum={hash_slot_num}, indexNum={index_num})",
            path=path,
        )


# --------------------------------------------------------------------------- header / entry


@dataclass(frozen=True)
class IndexHeader:
    """The 40-byte IndexHeader."""

    begin_timestamp: int
    end_timestamp: int
    begin_phy_offset: int
    end_phy_offset: int
    hash_slot_count: int
    index_count: int

    @classmethod
    def parse(cls, data: bytes | bytearray | memoryview | mmap.mmap) -> IndexHeader:
        return cls(*_HEADER.unpack_from(data, 0))

    @property
    def entry_count(self) -> int:
        """Entries in use: indexCount - 1 (the broker reads indexCount ≤ 0 as 1)."""
        return max(self.index_count, 1) - 1


@dataclass(frozen=True)
class IndexEntry:
    """One 20-byte entry; ``number`` is its ordinal (≥ 1) in the file."""

    number: int
    key_hash: int
    commitlog_offset: int
    time_diff: int
    prev_index: int
    store_time_ms: int


@dataclass(frozen=True)
class IndexProblem:
    """An invariant (§8.11) that does not hold, with the byte range it concerns."""

    kind: str
    offset: int
    length: int
    detail: str


@dataclass(frozen=True)
class IndexLookup:
    """Result of following one slot chain; ``problem`` is set when the chain was cut."""

    key: str
    key_hash: int
    slot: int
    entries: list[IndexEntry]
    visited: int
    problem: str | None = None

    @property
    def offsets(self) -> list[int]:
        return [entry.commitlog_offset for entry in self.entries]


@dataclass
class IndexValidation:
    """What :meth:`IndexFile.validate` found: problems and the regions judged unreadable."""

    problems: list[IndexProblem] = field(default_factory=list)
    header_ok: bool = True
    bad_entries: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    bad_slots: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def add(self, kind: str, offset: int, length: int, detail: str) -> None:
        self.problems.append(IndexProblem(kind, offset, length, detail))


def java_div(numerator: int, denominator: int) -> int:
    """Java integer division (truncates toward zero)."""
    q = abs(numerator) // abs(denominator)
    return q if (numerator >= 0) == (denominator > 0) else -q


def expected_time_diff(store_timestamp: int, begin_timestamp: int) -> int:
    """timeDiff the broker writes: seconds since header begin, clamped to [0, i32 max]."""
    if begin_timestamp <= 0:
        return 0
    return min(max(java_div(store_timestamp - begin_timestamp, 1000), 0), _INT_MAX)


# --------------------------------------------------------------------------- the file


class IndexFile:
    """Read-only view of one index file (mmap'd from disk, or bytes in memory)."""

    def __init__(
        self,
        data: bytes | bytearray | mmap.mmap,
        geometry: IndexGeometry,
        path: str | Path = "<memory>",
    ) -> None:
        self._data = data
        self.geometry = geometry
        self.path = str(path)
        self.header = IndexHeader.parse(data)
        if self.header.index_count < 0 or self.header.index_count > geometry.index_num:
            raise CorruptDataError(
                f"header indexCount {self.header.index_count} outside "
                f"[0, indexNum={geometry.index_num}]",
                path=self.path,
                offset=IH_INDEX_COUNT_OFFSET,
                length=4,
            )
        self._validation: IndexValidation | None = None
        self._lagging: int | None = None

    # ---- construction

    @classmethod
    def open(
        cls, path: str | Path, hash_slot_num: int | None = None, index_num: int | None = None
    ) -> IndexFile:
        """Map an index file read-only; the geometry is inferred when not given."""
        path = Path(path)
        if not path.is_file():
            raise NotAStoreFileError("index file does not exist or is not a file", path=path)
        size = path.stat().st_size
        if size == 0:
            raise NotAStoreFileError(UNSIZED_INDEX_REASON, path=path)
        if size < INDEX_HEADER_SIZE:
            raise NotAStoreFileError(f"index file of {size} bytes has no header", path=path)
        geometry = IndexGeometry.infer(size, hash_slot_num, index_num, path=path)
        try:
            with open(path, "rb") as handle:
                mapped = map_read_only(handle)
        except OSError as exc:
            raise NotAStoreFileError(f"cannot map file: {exc.strerror}", path=path) from exc
        try:
            return cls(mapped, geometry, path)
        except StoreError:
            mapped.close()
            raise

    @classmethod
    def from_bytes(
        cls,
        data: bytes | bytearray,
        hash_slot_num: int | None = None,
        index_num: int | None = None,
        path: str | Path = "<memory>",
    ) -> IndexFile:
        if len(data) < INDEX_HEADER_SIZE:
            raise NotAStoreFileError(f"index data of {len(data)} bytes has no header", path=path)
        return cls(data, IndexGeometry.infer(len(data), hash_slot_num, index_num, path=path), path)

    def close(self) -> None:
        if isinstance(self._data, mmap.mmap):
            self._data.close()

    def __enter__(self) -> IndexFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- raw access

    @property
    def entry_count(self) -> int:
        """Entries decoded: those the header counts, and the ones that continue them
        consistently past it in a hot copy (:attr:`lagging_entries`)."""
        return self.header.entry_count + self.lagging_entries

    @property
    def lagging_entries(self) -> int:
        """Consistent entries beyond the header's indexCount (see the module doc)."""
        if self._lagging is None:
            self._lagging = _lagging_entries(self)
        return self._lagging

    def slot(self, slot: int) -> int:
        (value,) = struct.unpack_from(">i", self._data, self.geometry.slot_position(slot))
        return value

    def slots(self) -> np.ndarray:
        """The whole slot table as native int32 (a copy)."""
        view = np.frombuffer(
            self._data, dtype=">i4", count=self.geometry.hash_slot_num, offset=INDEX_HEADER_SIZE
        )
        return view.astype(np.int32)

    def entry(self, number: int) -> IndexEntry:
        """Entry ``number`` as stored (no validation beyond being inside the file)."""
        if not 0 <= number < self.geometry.index_num:
            raise IndexError(number)
        key_hash, offset, time_diff, prev = _ENTRY.unpack_from(
            self._data, self.geometry.entry_position(number)
        )
        return IndexEntry(
            number, key_hash, offset, time_diff, prev, self.store_time_ms(time_diff)
        )

    def store_time_ms(self, time_diff: int) -> int:
        """Store time an entry implies: header begin + timeDiff seconds.

        Second precision, and off for entry 1 of a file seeded from its predecessor
        (its timeDiff was computed before the first put overwrote beginTimestamp).
        """
        return self.header.begin_timestamp + 1000 * time_diff

    def entry_arrays(self, count: int | None = None) -> dict[str, np.ndarray]:
        """Used entries 1 … entry_count (or ``count``) as native arrays, plus ``number``."""
        n = self.entry_count if count is None else count
        view = np.frombuffer(
            self._data,
            dtype=INDEX_ENTRY_DTYPE,
            count=n,
            offset=self.geometry.entry_position(1),
        )
        arrays = {
            name: view[name].astype(view.dtype[name].newbyteorder("="))
            for name in INDEX_ENTRY_DTYPE.names
        }
        del view
        arrays["number"] = np.arange(1, n + 1, dtype=np.int32)
        return arrays

    def entries(self) -> Iterator[IndexEntry]:
        """Used entries in number order (slow path; see :meth:`entry_arrays`)."""
        for number in range(1, self.entry_count + 1):
            yield self.entry(number)

    # ---- lookup

    def lookup(
        self,
        key: str,
        begin: int | None = None,
        end: int | None = None,
        max_num: int | None = None,
    ) -> IndexLookup:
        """Entries whose keyHash matches ``key`` (a full ``topic#key``), newest first.

        Follows the broker's ``selectPhyOffset``: slot = keyHash mod hashSlotNum, walk
        prevIndex, keep entries with the same keyHash (and store time in [begin, end]
        when given). The walk stops at a pointer outside 1 … entries or one that does
        not decrease, so corrupt or cyclic chains end after at most ``entry_count`` steps.
        """
        key_hash = index_key_hash(key)
        slot = key_hash % self.geometry.hash_slot_num
        found: list[IndexEntry] = []
        current = self.slot(slot)
        n = self.entry_count
        if current <= INVALID_INDEX or n == 0:
            return IndexLookup(key, key_hash, slot, found, 0)
        if current > n:
            return IndexLookup(key, key_hash, slot, found, 0, f"slot head {current} > {n}")
        visited = 0
        while True:
            entry = self.entry(current)
            visited += 1
            if entry.time_diff < 0:
                return IndexLookup(key, key_hash, slot, found, visited,
                                   f"entry {current} has negative timeDiff")
            in_time = (begin is None or entry.store_time_ms >= begin) and (
                end is None or entry.store_time_ms <= end
            )
            if entry.key_hash == key_hash and in_time:
                found.append(entry)
                if max_num is not None and len(found) >= max_num:
                    break
            prev = entry.prev_index
            if prev <= INVALID_INDEX or (begin is not None and entry.store_time_ms < begin):
                break
            if prev >= current or prev > n:
                return IndexLookup(key, key_hash, slot, found, visited,
                                   f"entry {current} has prevIndex {prev} (corrupt chain)")
            current = prev
        return IndexLookup(key, key_hash, slot, found, visited)

    def lookup_key(self, topic: str, key: str, **kwargs: int | None) -> IndexLookup:
        """Look up a message key or UNIQ_KEY of ``topic`` (the broker indexes ``topic#key``)."""
        return self.lookup(index_key(topic, key), **kwargs)

    # ---- validation and accounting

    def validate(self) -> IndexValidation:
        """Check the §8.11 invariants with numpy (cached)."""
        if self._validation is None:
            self._validation = _validate(self)
        return self._validation

    def account(self) -> FileAccount:
        """Classify every byte (see module docstring)."""
        validation = self.validate()
        geo = self.geometry
        account = FileAccount(self.path, geo.file_size)
        if validation.header_ok:
            account.decoded += INDEX_HEADER_SIZE
        else:
            account.add_unreadable(0, INDEX_HEADER_SIZE, "header contradicts its entries")
        _account_slots(self, account, validation)
        _account_entry_zero(self, account)
        bad = validation.bad_entries
        account.decoded += int(np.count_nonzero(~bad)) * INDEX_ENTRY_SIZE
        for first, length in runs(bad):
            account.add_unreadable(
                geo.entry_position(first + 1),
                length * INDEX_ENTRY_SIZE,
                "entries with impossible fields (hash/offset/timeDiff < 0 or bad prevIndex)",
            )
        _account_unused(self, account)
        if self.lagging_entries:
            h = self.header.entry_count
            races.note(account, geo.entry_position(h + 1), races.hot_copy(
                f"index header lags its entries: indexCount {self.header.index_count} counts "
                f"{h} entries, {self.lagging_entries} more follow consistently (written while "
                "the copy read the file: IndexFile.putKey writes the entry, its slot, then "
                "the header) and are decoded"))
        return account.check()

    def to_record_batch(self) -> pa.RecordBatch:
        """Structurally valid used entries with :data:`INDEX_SCHEMA`."""
        arrays = self.entry_arrays()
        keep = ~self.validate().bad_entries
        key_hash = arrays["key_hash"][keep]
        n = int(np.count_nonzero(keep))
        return pa.RecordBatch.from_arrays(
            [
                pa.repeat(pa.scalar(self.path, pa.string()), n),
                pa.array(arrays["number"][keep], pa.int32()),
                pa.array(key_hash, pa.int32()),
                pa.array(key_hash % self.geometry.hash_slot_num, pa.int32()),
                pa.array(arrays["commitlog_offset"][keep], pa.int64()),
                pa.array(arrays["time_diff"][keep], pa.int32()),
                pa.array(arrays["prev_index"][keep], pa.int32()),
                pa.array(
                    self.header.begin_timestamp
                    + 1000 * arrays["time_diff"][keep].astype(np.int64),
                    pa.int64(),
                ),
            ],
            schema=INDEX_SCHEMA,
        )


# --------------------------------------------------------------------------- validation


def _validate(index: IndexFile) -> IndexValidation:
    result = IndexValidation()
    geo = index.geometry
    arrays = index.entry_arrays()
    n = index.entry_count
    number = arrays["number"].astype(np.int64)
    key_hash = arrays["key_hash"].astype(np.int64)
    prev = arrays["prev_index"].astype(np.int64)
    offsets = arrays["commitlog_offset"]
    bad = (
        (key_hash < 0)
        | (offsets < 0)
        | (arrays["time_diff"] < 0)
        | (prev < 0)
        | (prev >= number)
    )
    result.bad_entries = bad
    for i in np.flatnonzero(bad)[:100]:
        result.add("entry", geo.entry_position(int(number[i])), INDEX_ENTRY_SIZE,
                   f"entry {int(number[i])} has an impossible field")
    _check_chains(index, result, number, key_hash, prev, bad)
    _check_order(index, result, offsets, bad)
    _check_header(index, result, arrays, bad, n)
    return result


def _check_chains(
    index: IndexFile,
    result: IndexValidation,
    number: np.ndarray,
    key_hash: np.ndarray,
    prev: np.ndarray,
    bad: np.ndarray,
) -> None:
    """Every good entry's prevIndex is the previous entry of its slot; heads are newest."""
    geo = index.geometry
    n = index.entry_count
    slots = index.slots()
    out_of_range = np.flatnonzero((slots < 0) | (slots > n))
    result.bad_slots = out_of_range
    for s in out_of_range[:100]:
        result.add("slot", geo.slot_position(int(s)), INDEX_SLOT_SIZE,
                   f"slot {int(s)} points to entry {int(slots[s])} outside 0…{n}")
    good = np.flatnonzero(~bad)
    slot_of = key_hash[good] % geo.hash_slot_num
    order = np.lexsort((number[good], slot_of))
    sorted_slot = slot_of[order]
    sorted_number = number[good][order]
    same = np.concatenate(([False], sorted_slot[1:] == sorted_slot[:-1]))
    expected_prev = np.where(same, np.concatenate(([0], sorted_number[:-1])), 0)
    actual_prev = prev[good][order]
    for i in np.flatnonzero(expected_prev != actual_prev)[:100]:
        num = int(sorted_number[i])
        result.add("chain", geo.entry_position(num) + IE_PREV_INDEX_OFFSET, 4,
                   f"entry {num} prevIndex {int(actual_prev[i])}, "
                   f"expected {int(expected_prev[i])}")
    is_last = np.concatenate((sorted_slot[1:] != sorted_slot[:-1], [True]))
    expected_heads = np.zeros(geo.hash_slot_num, dtype=np.int64)
    if sorted_slot.size:
        expected_heads[sorted_slot[is_last]] = sorted_number[is_last]
    in_range = (slots >= 0) & (slots <= n)
    wrong = in_range & (slots != expected_heads)
    h = index.header.entry_count
    if index.lagging_entries and wrong.any():
        # A hot copy read the slots before some of the entries after the header's count:
        # a slot may point at any entry of its chain from the newest the header counts.
        counted = sorted_number <= h
        heads_h = np.zeros(geo.hash_slot_num, dtype=np.int64)
        last_h = counted & np.concatenate((~counted[1:] | (sorted_slot[1:] != sorted_slot[:-1]),
                                           [True]))
        heads_h[sorted_slot[last_h]] = sorted_number[last_h]
        slot_of_entry = np.full(n + 1, -1, dtype=np.int64)
        slot_of_entry[sorted_number] = sorted_slot
        cand = np.flatnonzero(wrong)
        actual = slots[cand].astype(np.int64)
        in_chain = (actual == 0) | (slot_of_entry[np.clip(actual, 0, n)] == cand)
        wrong[cand] = ~((heads_h[cand] <= actual) & (actual <= expected_heads[cand]) & in_chain)
    for s in np.flatnonzero(wrong)[:100]:
        result.add("slot", geo.slot_position(int(s)), INDEX_SLOT_SIZE,
                   f"slot {int(s)} head {int(slots[s])}, expected {int(expected_heads[s])}")
    used = int(np.count_nonzero(slots > 0))
    if index.lagging_entries:  # slots read after the header: count the header's entries
        used = int(np.unique(sorted_slot[sorted_number <= h]).size)
    if index.header.hash_slot_count != used and n > 0:
        result.header_ok = False
        result.add("header", IH_HASH_SLOT_COUNT_OFFSET, 4,
                   f"hashSlotCount {index.header.hash_slot_count} != {used} used slots")


def _check_order(
    index: IndexFile, result: IndexValidation, offsets: np.ndarray, bad: np.ndarray
) -> None:
    good = np.flatnonzero(~bad)
    decreasing = np.flatnonzero(np.diff(offsets[good]) < 0)
    for i in decreasing[:100]:
        num = int(good[i + 1]) + 1
        result.add("order", index.geometry.entry_position(num), INDEX_ENTRY_SIZE,
                   f"entry {num} commitlog offset decreases")


def _check_header(
    index: IndexFile,
    result: IndexValidation,
    arrays: dict[str, np.ndarray],
    bad: np.ndarray,
    n: int,
) -> None:
    header = index.header
    n = header.entry_count  # the header describes the entries it counts
    if n == 0:
        return
    first_off = int(arrays["commitlog_offset"][0])
    last_off = int(arrays["commitlog_offset"][n - 1])
    checks = [
        (header.begin_phy_offset == first_off, IH_BEGIN_PHY_OFFSET_OFFSET,
         f"beginPhyOffset {header.begin_phy_offset} != first entry offset {first_off}"),
        (header.end_phy_offset == last_off, IH_END_PHY_OFFSET_OFFSET,
         f"endPhyOffset {header.end_phy_offset} != last entry offset {last_off}"),
        (header.begin_timestamp <= header.end_timestamp, IH_BEGIN_TIMESTAMP_OFFSET,
         "beginTimestamp > endTimestamp"),
    ]
    if n >= 2 and not bad[n - 1]:
        want = expected_time_diff(header.end_timestamp, header.begin_timestamp)
        got = int(arrays["time_diff"][n - 1])
        checks.append((got == want, IH_BEGIN_TIMESTAMP_OFFSET,
                       f"last entry timeDiff {got} != {want} from header timestamps"))
    for ok, offset, detail in checks:
        if not ok:
            result.header_ok = False
            result.add("header", offset, 8, detail)


# --------------------------------------------------------------------------- accounting parts


def _account_slots(index: IndexFile, account: FileAccount, validation: IndexValidation) -> None:
    slots = index.slots()
    n_bad = int(validation.bad_slots.size)
    empty = int(np.count_nonzero(slots == 0))
    account.blank += empty * INDEX_SLOT_SIZE
    account.decoded += (slots.size - empty - n_bad) * INDEX_SLOT_SIZE
    for s in validation.bad_slots:
        account.add_unreadable(index.geometry.slot_position(int(s)), INDEX_SLOT_SIZE,
                               "slot value outside 0 … entry count")


def _account_entry_zero(index: IndexFile, account: FileAccount) -> None:
    position = index.geometry.entry_position(0)
    raw = bytes(index._data[position : position + INDEX_ENTRY_SIZE])
    if raw.count(0) == INDEX_ENTRY_SIZE:
        account.blank += INDEX_ENTRY_SIZE
    else:
        account.add_unreadable(position, INDEX_ENTRY_SIZE, "entry 0 (never used) is not zero")


TORN_ENTRY = ("index entry at the write position is incomplete (the entry being written: "
              "a copy taken while the broker indexed, or a kill)")


def has_nonzero_after(index: IndexFile, number: int) -> bool:
    """Does any entry from ``number`` on hold a non-zero byte?"""
    geo = index.geometry
    for chunk_start in range(number, geo.index_num, _SCAN_ENTRIES):
        count = min(_SCAN_ENTRIES, geo.index_num - chunk_start)
        view = np.frombuffer(index._data, dtype=np.uint8, count=count * INDEX_ENTRY_SIZE,
                             offset=geo.entry_position(chunk_start))
        found = bool(view.any())
        del view
        if found:
            return True
    return False


def _lagging_entries(index: IndexFile) -> int:
    """How many entries after the header's count continue it consistently: non-zero, no
    impossible field, prevIndex the previous entry of the same slot (0 when none),
    commitlog offset not below the previous entry's."""
    geo = index.geometry
    h = index.header.entry_count
    following = h + 1
    limit = geo.index_num
    # the non-zero run right after the header's entries
    end = following
    while end < limit:
        count = min(_SCAN_ENTRIES, limit - end)
        view = np.frombuffer(index._data, dtype=np.uint8, count=count * INDEX_ENTRY_SIZE,
                             offset=geo.entry_position(end))
        nonzero = view.reshape(count, INDEX_ENTRY_SIZE).any(axis=1)
        del view
        zeros = np.flatnonzero(~nonzero)
        if zeros.size:
            end += int(zeros[0])
            break
        end += count
    if end == following:
        return 0
    arrays = index.entry_arrays(end - 1)
    number = arrays["number"].astype(np.int64)
    key_hash = arrays["key_hash"].astype(np.int64)
    prev = arrays["prev_index"].astype(np.int64)
    offsets = arrays["commitlog_offset"]
    possible = ((key_hash >= 0) & (offsets >= 0) & (arrays["time_diff"] >= 0)
                & (prev >= 0) & (prev < number))
    slot_of = np.where(possible, key_hash % geo.hash_slot_num, -1)
    # the previous entry of each entry's slot, among the possible entries before it
    order = np.lexsort((number, slot_of))
    sorted_slot = slot_of[order]
    same = np.concatenate(([False], sorted_slot[1:] == sorted_slot[:-1]))
    expected = np.zeros(len(number), dtype=np.int64)
    expected[order] = np.where(same, np.concatenate(([0], number[order][:-1])), 0)
    last_good = int(np.flatnonzero(possible[:h])[-1]) if possible[:h].any() else -1
    floor = int(offsets[last_good]) if last_good >= 0 else 0
    k = 0
    for i in range(h, len(number)):
        if not possible[i] or prev[i] != expected[i] or offsets[i] < floor:
            break
        floor = int(offsets[i])
        k += 1
    return k


def _account_unused(index: IndexFile, account: FileAccount) -> None:
    """Entries after the last used one: zero → zero tail, otherwise unreadable."""
    geo = index.geometry
    first = index.entry_count + 1
    for chunk_start in range(first, geo.index_num, _SCAN_ENTRIES):
        count = min(_SCAN_ENTRIES, geo.index_num - chunk_start)
        view = np.frombuffer(
            index._data,
            dtype=np.uint8,
            count=count * INDEX_ENTRY_SIZE,
            offset=geo.entry_position(chunk_start),
        )
        nonzero = view.reshape(count, INDEX_ENTRY_SIZE).any(axis=1)
        del view
        account.zero_tail += int(np.count_nonzero(~nonzero)) * INDEX_ENTRY_SIZE
        for start, length in runs(nonzero):
            number = chunk_start + start
            torn = number == first and length == 1 and not has_nonzero_after(
                index, number + 1)
            account.add_unreadable(
                geo.entry_position(number),
                length * INDEX_ENTRY_SIZE,
                races.torn_tail(TORN_ENTRY) if torn else "non-zero entries beyond indexCount",
            )


# --------------------------------------------------------------------------- directory


@dataclass(frozen=True)
class IndexFileInfo:
    """An index file found in ``index/`` with its header (for ordering)."""

    path: Path
    header: IndexHeader
    geometry: IndexGeometry

    @property
    def name_is_timestamp(self) -> bool:
        return bool(INDEX_FILE_NAME.match(self.path.name))


@dataclass
class IndexListing:
    """Index files ordered by header timestamps, the files that could not be opened, and
    the empty files a broker created but had not yet sized (:data:`UNSIZED_INDEX_REASON`)."""

    files: list[IndexFileInfo] = field(default_factory=list)
    rejected: list[tuple[Path, StoreError]] = field(default_factory=list)
    unsized: list[Path] = field(default_factory=list)


#: Why a 0-byte file in ``index/`` is a state, not damage. The broker creates a new index
#: file by opening it (0 bytes) and then mapping it at full size (MappedFile.init); a broker
#: killed between the two leaves it empty. On restart IndexService.load maps it full size
#: (all zero) and IndexHeader.load raises its indexCount 0 to 1: an index with no entries,
#: which the broker goes on filling. Seen on a killed 4.9.7 broker of the harness.
UNSIZED_INDEX_REASON = ("index file of 0 bytes: created but not yet sized when the broker "
                        "stopped (killed while rolling to a new index file); the broker "
                        "maps it as an empty index on restart")


def list_index_files(
    directory: str | Path, hash_slot_num: int | None = None, index_num: int | None = None
) -> IndexListing:
    """Every regular file of ``index/``, ordered by (beginTimestamp, endTimestamp, name).

    Names come from the broker's local clock and are only hints (§5), so order by the
    header. Files whose size or header is impossible are listed in ``rejected``; 0-byte
    files in ``unsized`` (no entries, see :data:`UNSIZED_INDEX_REASON`).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise NotAStoreFileError("index directory does not exist", path=directory)
    listing = IndexListing()
    for entry in os.scandir(directory):
        if not entry.is_file():
            continue
        path = Path(entry.path)
        if entry.stat().st_size == 0:
            listing.unsized.append(path)
            continue
        try:
            with IndexFile.open(path, hash_slot_num, index_num) as index:
                listing.files.append(IndexFileInfo(path, index.header, index.geometry))
        except StoreError as exc:
            listing.rejected.append((path, exc))
    listing.files.sort(key=_order_key)
    return listing


def _order_key(info: IndexFileInfo) -> tuple[int, int, int, str]:
    h = info.header
    return (h.begin_timestamp, h.end_timestamp, h.begin_phy_offset, info.path.name)


def order_index_files(infos: Sequence[IndexFileInfo]) -> list[IndexFileInfo]:
    """Sort already-opened files by header timestamps (names are not trusted)."""
    return sorted(infos, key=_order_key)
