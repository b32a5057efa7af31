"""``rmqlib.store.replica``: a slave's bytes against its master's, on a real broker's store.

The "slave" of each example is made from the real 5.5.0 store the way replication leaves
one: the master's commitlog up to some byte (HA sends byte ranges, so the cut may fall
inside a record), zeros after it, later files absent; then, optionally, one byte damaged.
The oracle is the master's own bytes: where the copy stops and which byte was changed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqlib.commitlog.records import scan_store
from rmqlib.common.segments import list_segments
from rmqlib.store.replica import (
    commitlog_data_end,
    compare_commitlogs,
    compare_queues,
    first_difference,
    read_span,
)

pytestmark = pytest.mark.broker
EXAMPLES = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def master(broker_stores: dict[str, Path]) -> Path:
    return broker_stores["v5-clean"] / "store"


@pytest.fixture(scope="module")
def record_ends(master: Path) -> list[int]:
    return [r.physical_offset + r.total_size for r in scan_store(master / "commitlog")]


@pytest.fixture(scope="module")
def blank_ends(master: Path) -> dict[int, int]:
    """End of each BLANK the master's scan found -> the end of its file: a copy holding the
    whole BLANK was written up to the file's end (the broker moved to the next file)."""
    scan = scan_store(master / "commitlog")
    for _record in scan:
        pass
    return {s.segment_start + blank + 8: s.segment_start + s.file_size
            for s in scan.segments for blank in s.blanks}


def make_replica(master: Path, target: Path, cut: int, flip: int | None = None) -> Path:
    """A slave store holding the master's commitlog bytes [0, cut), one byte changed at
    ``flip``; its consume queues are the master's (compared separately)."""
    if target.exists():
        shutil.rmtree(target)
    (target / "commitlog").mkdir(parents=True)
    for segment in list_segments(master / "commitlog"):
        if segment.start >= cut and segment.start > 0:
            break
        data = bytearray(segment.size)
        keep = min(cut, segment.end) - segment.start
        data[:keep] = read_span([segment], segment.start, keep)
        if flip is not None and segment.start <= flip < segment.end:
            at = flip - segment.start
            data[at] = 1 if data[at] != 1 else 2
        (target / "commitlog" / segment.path.name).write_bytes(bytes(data))
    return target


@EXAMPLES
@given(data=st.data())
def test_a_replica_cut_anywhere_is_a_prefix_lagging_by_the_bytes_it_misses(
        master: Path, record_ends: list[int], blank_ends: dict[int, int], tmp_path: Path,
        data: st.DataObject) -> None:
    end = record_ends[-1]
    cut = data.draw(st.one_of(st.sampled_from(record_ends), st.sampled_from(sorted(blank_ends)),
                              st.integers(1, end)), label="cut")
    replica = make_replica(master, tmp_path / "replica", cut)
    held = read_span(list_segments(master / "commitlog"), 0, cut)
    received = len(held.rstrip(b"\x00"))  # the write position: bytes received ...
    expected_end = blank_ends.get(received, received)  # ... or a closed file's end

    result = compare_commitlogs(master, replica)

    assert result.master_end == end
    assert result.replica_end == expected_end
    assert result.lag_bytes == end - expected_end
    assert result.diverged_at is None
    assert (result.compared_from, result.compared_to) == (0, expected_end)


@EXAMPLES
@given(data=st.data())
def test_one_damaged_byte_is_found_at_its_offset(
        master: Path, record_ends: list[int], tmp_path: Path, data: st.DataObject) -> None:
    cut = data.draw(st.sampled_from(record_ends[1:]), label="cut")
    flip = data.draw(st.integers(0, cut - 1), label="flip")
    replica = make_replica(master, tmp_path / "replica", cut, flip)

    result = compare_commitlogs(master, replica)

    assert result.diverged_at == flip
    # from a later start (an earlier night compared what is below it), the damage is not
    # looked at again: the nightly check reads only what is new
    later = compare_commitlogs(master, replica, start=max(e for e in record_ends if e <= cut))
    assert later.diverged_at is None or later.diverged_at == flip


def test_identical_stores_agree_and_the_data_end_is_the_scan_end(master: Path,
                                                                 record_ends: list[int]) -> None:
    result = compare_commitlogs(master, master)
    assert (result.diverged_at, result.lag_bytes) == (None, 0)
    segments = list_segments(master / "commitlog")
    assert commitlog_data_end(segments) == record_ends[-1]
    queues = compare_queues(master, master)
    assert queues.mismatches == [] and queues.queues > 20
    assert queues.replica_max_offsets == queues.master_max_offsets


@EXAMPLES
@given(data=st.data())
def test_a_damaged_queue_unit_is_named_by_queue_and_offset(
        master: Path, tmp_path: Path, data: st.DataObject) -> None:
    replica = tmp_path / "replica"
    if replica.exists():
        shutil.rmtree(replica)
    shutil.copytree(master / "consumequeue", replica / "consumequeue")
    files = sorted(p for p in (replica / "consumequeue").rglob("*") if p.is_file()
                   and p.read_bytes().rstrip(b"\x00"))
    victim = data.draw(st.sampled_from(files), label="file")
    raw = bytearray(victim.read_bytes())
    used = len(bytes(raw).rstrip(b"\x00"))
    at = data.draw(st.integers(0, used - 1), label="byte")
    raw[at] = 1 if raw[at] != 1 else 2
    victim.write_bytes(bytes(raw))

    result = compare_queues(master, replica)

    topic, queue_id = victim.parent.parent.name, int(victim.parent.name)
    assert [(m.topic, m.queue_id, m.queue_offset) for m in result.mismatches] == \
        [(topic, queue_id, (int(victim.name) + at) // 20)]


def test_first_difference_counts_a_missing_byte_as_a_difference(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / f"{0:020d}").write_bytes(b"x" * 100)
    (tmp_path / "b" / f"{0:020d}").write_bytes(b"x" * 60)
    left, right = list_segments(tmp_path / "a"), list_segments(tmp_path / "b")
    assert first_difference(left, right, 0, 60, chunk=7) is None
    assert first_difference(left, right, 0, 100, chunk=7) == 60


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(st.tuples(st.integers(0, 3 << 20), st.binary(min_size=1, max_size=64)),
                       max_size=6),
       size=st.integers(0, 4 << 20))
def test_the_written_end_of_a_sparse_file_is_its_last_non_zero_byte(
        tmp_path: Path, writes: list[tuple[int, bytes]], size: int) -> None:
    from rmqlib.common.fileio import last_nonzero_end

    path = tmp_path / "sparse"
    with open(path, "wb") as handle:  # holes between the writes, and after them
        for offset, data in writes:
            handle.seek(offset)
            handle.write(data)
        handle.truncate(max(size, handle.tell()))
    assert last_nonzero_end(path) == len(path.read_bytes().rstrip(b"\x00"))
