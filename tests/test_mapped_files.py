"""Files read through a mapping (rmqlib.common.fileio.map_read_only): the same bytes as a
read gives, and no SIGBUS on a full tmpfs.

Found by the chaos soak (bench/soak.py, seed 629401): a load died without a word while
the tmpfs under its snapshots was full. The index file it was decoding had holes (the
snapshot copies a mapped file's zero pages as holes), and on tmpfs the first touch of a
hole through a mapping allocates a page: with no space the kernel sends SIGBUS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tmpfs import fill, mounted_tmpfs

from rmqlib.common.fileio import map_read_only

REPO = Path(__file__).resolve().parent.parent
PAGE = 4096


def has_holes(path: Path) -> bool:
    with open(path, "rb") as handle:
        return os.lseek(handle.fileno(), 0, os.SEEK_HOLE) < os.fstat(handle.fileno()).st_size


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(1, 24 * PAGE),
       writes=st.lists(st.tuples(st.integers(0, 24 * PAGE), st.binary(min_size=1, max_size=9000)),
                       max_size=6))
def test_a_mapped_file_reads_as_the_file_holes_or_not(tmp_path: Path, size: int,
                                                      writes: list[tuple[int, bytes]]) -> None:
    path = tmp_path / "file"
    with open(path, "wb") as out:  # holes wherever nothing is written
        out.truncate(size)
        for offset, data in writes:
            out.seek(offset)
            out.write(data)
    expected = path.read_bytes()
    with open(path, "rb") as handle, map_read_only(handle) as mapped:
        assert mapped[:] == expected


def test_a_file_of_two_far_apart_writes_has_holes_and_reads_the_same(tmp_path: Path) -> None:
    """The case the property needs to mean something: this filesystem keeps holes."""
    path = tmp_path / "sparse"
    with open(path, "wb") as out:
        out.write(b"head")
        out.seek(64 * PAGE)
        out.write(b"tail")
    assert has_holes(path)
    with open(path, "rb") as handle, map_read_only(handle) as mapped:
        assert mapped[:] == path.read_bytes()


@pytest.mark.broker
@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")
def test_an_index_file_with_holes_decodes_on_a_full_tmpfs(broker_stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A real broker's index file copied with holes onto a tmpfs, the tmpfs then filled:
    decoding it in a process of its own gives the rows of the broker's own file (it died
    of SIGBUS, exit -7, when the file was mapped)."""
    originals = sorted((broker_stores["v5-clean"] / "store" / "index").iterdir())
    with mounted_tmpfs(tmp_path / "disk", 1) as disk:
        copies = []
        for original in originals:
            copy = disk / original.name
            subprocess.run(["cp", "--sparse=always", str(original), str(copy)], check=True)
            copies.append(copy)
        assert any(has_holes(copy) for copy in copies)
        fill(disk)
        script = ("import sys; from rmqlib.indexfile import IndexFile\n"
                  "for path in sys.argv[1:]:\n"
                  "    with IndexFile.open(path) as index:\n"
                  "        bytes_of = index.account()\n"
                  "        print(index.to_record_batch().num_rows, bytes_of.decoded, "
                  "bytes_of.zero_tail)")
        decoded = subprocess.run([sys.executable, "-c", script, *map(str, copies)],
                                 capture_output=True, text=True, cwd=REPO)
        assert decoded.returncode == 0, decoded.stderr[-2000:]
        broker = subprocess.run([sys.executable, "-c", script, *map(str, originals)],
                                capture_output=True, text=True, cwd=REPO, check=True)
        assert decoded.stdout == broker.stdout
        assert len(decoded.stdout.splitlines()) == len(originals)
