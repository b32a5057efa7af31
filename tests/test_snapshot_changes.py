"""Snapshots of stores that change under the copier: never a hybrid of two stores.

The copier reuses bytes of the previous snapshot (hard links of finished files, the prefix
of a growing one); a broker that truncated and rewrote its files, was reset or restored
must still be copied byte for byte, and the rewritten files named with the first byte
where they differ from the previous copy.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from changing_broker import ChangingBroker, nights_changes, rewrite_within_the_listings_tick, stamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.snapshot.copier import take_snapshot
from jobs.snapshot.manifest import GROWN, LINKED, snapshot_store
from jobs.snapshot.sources import LocalSource

NIGHTS = [f"2026-11-{day:02d}T0200Z" for day in range(1, 29)]


def sha256_of_every_file(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def first_difference(old: bytes, new: bytes) -> int | None:
    for index, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return index
    return None if len(old) == len(new) else min(len(old), len(new))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.integers(1, 80), nights=st.lists(nights_changes(), min_size=1, max_size=5),
       seed=st.integers(0, 2**16))
def test_every_snapshot_equals_its_source_and_names_what_was_rewritten(
        tmp_path_factory, first, nights, seed):  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("changing")
    broker = ChangingBroker(work / "store", seed=seed)
    broker.change(("grow", first))
    broker.write()
    take_snapshot(LocalSource(broker.root), work / "snap", "b", NIGHTS[0])
    for night, change in enumerate(nights, start=1):
        before = {name: (broker.root / name).read_bytes()
                  for name in sha256_of_every_file(broker.root)}
        broker.change(change)
        broker.write()
        manifest = take_snapshot(LocalSource(broker.root), work / "snap", "b", NIGHTS[night])
        copy = snapshot_store(work / "snap", "b", NIGHTS[night])
        assert sha256_of_every_file(copy) == sha256_of_every_file(broker.root)
        for entry in manifest.files:
            now = (broker.root / entry.path).read_bytes()
            if entry.how in (LINKED, GROWN):
                assert entry.rewritten_at is None
                # what was reused was the broker's: its old bytes are a prefix of the new
                kept = entry.reused if entry.how == GROWN else entry.data_length
                assert before[entry.path][:kept] == now[:kept]
            elif entry.rewritten_at is not None:  # a real difference, and the first one
                assert entry.rewritten_at == first_difference(before[entry.path], now)


def test_a_night_with_nothing_rewritten_reads_only_the_probes_and_the_new_bytes(tmp_path):  # type: ignore[no-untyped-def]
    broker = ChangingBroker(tmp_path / "store", file_size=256 * 1024)
    broker.grow(400)
    broker.write()
    take_snapshot(LocalSource(broker.root), tmp_path / "snap", "b", NIGHTS[0])
    broker.grow(10)
    broker.write()
    manifest = take_snapshot(LocalSource(broker.root), tmp_path / "snap", "b", NIGHTS[1])
    assert manifest.rewritten == []
    assert manifest.count(LINKED) > 0 and manifest.count(GROWN) > 0
    # Finished files unchanged since (same size and mtime) are not read at all; each grown
    # file costs its probes, at most the head and the window.
    grown = [f for f in manifest.files if f.how == GROWN]
    assert 0 < manifest.confirm_bytes <= sum(4096 + 64 * 1024 for _ in grown)


def test_a_truncated_and_rewritten_commitlog_is_copied_whole_and_named(tmp_path):  # type: ignore[no-untyped-def]
    broker = ChangingBroker(tmp_path / "store", file_size=1024 * 1024)
    broker.grow(300)
    layout = broker.write()
    take_snapshot(LocalSource(broker.root), tmp_path / "snap", "b", NIGHTS[0])
    broker.truncate(200)
    broker.grow(150)
    broker.write()
    manifest = take_snapshot(LocalSource(broker.root), tmp_path / "snap", "b", NIGHTS[1])
    truncated_at = layout.placed[200].physical_offset
    rewritten = {f.path: f.rewritten_at for f in manifest.rewritten}
    segment = f"commitlog/{0:020d}"
    # the new record at the cut starts with its length: the first differing byte is
    # inside the record's header, at or after the cut
    assert truncated_at <= rewritten[segment] < truncated_at + 91
    assert any(segment in note and "rewritten" in note for note in manifest.notes)
    assert "rewritten since then" in manifest.summary()
    copy = snapshot_store(tmp_path / "snap", "b", NIGHTS[1])
    assert sha256_of_every_file(copy) == sha256_of_every_file(broker.root)


def test_a_rewrite_in_the_tick_of_the_listing_is_not_hidden_by_its_mtime(tmp_path):  # type: ignore[no-untyped-def]
    broker = ChangingBroker(tmp_path / "store", file_size=1024 * 1024)
    manifest = rewrite_within_the_listings_tick(broker, broker.clock_ns, LocalSource,
                                                tmp_path / "snap", NIGHTS[:2])
    copy = snapshot_store(tmp_path / "snap", "b", NIGHTS[1])
    assert sha256_of_every_file(copy) == sha256_of_every_file(broker.root)
    assert f"commitlog/{0:020d}" in {f.path for f in manifest.rewritten}


@pytest.mark.parametrize("directories_later", [True, False])
def test_an_mtime_is_trusted_alone_only_once_the_listing_saw_a_later_one(
        tmp_path, directories_later):  # type: ignore[no-untyped-def]
    broker = ChangingBroker(tmp_path / "store", file_size=256 * 1024)
    broker.grow(400)
    broker.write()
    tick = broker.clock_ns
    stamp(broker.root, tick, tick + 10**9 if directories_later else tick)
    first = take_snapshot(LocalSource(broker.root), tmp_path / "snap", "b", NIGHTS[0])
    assert all(f.mtime_settled == directories_later for f in first.files)
    again = take_snapshot(LocalSource(broker.root), tmp_path / "snap", "b", NIGHTS[1])
    assert again.rewritten == []
    # nothing changed: settled files are not read at all; the others are probed
    assert (again.confirm_bytes == 0) == directories_later
