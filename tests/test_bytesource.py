"""rmqlib's range decoders read a path or any ByteSource (rmqlib.common.bytesource) and
give the same rows and the same byte accounts either way: every commitlog segment and
queue file of real-broker stores decoded from its path, from a Python file object, from a
pyarrow file and from an in-memory buffer, over whole files and over arbitrary ranges
(hypothesis)."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqlib.commitlog.arrow import read_table
from rmqlib.common.bytesource import ByteSource, FileObjectSource, LocalFile
from rmqlib.common.fileio import has_nonzero_after, read_range
from rmqlib.errors import NotAStoreFileError, TruncatedDataError
from rmqlib.queues.batchconsumequeue import BCQ_UNIT_SIZE, decode_bcq_range
from rmqlib.queues.consumequeue import CQ_UNIT_SIZE, decode_cq_range

pytestmark = [pytest.mark.broker]

STORES = ("v4-clean", "v5-clean", "v5-killed")


def python_file(path: Path) -> ByteSource:
    return FileObjectSource(open(path, "rb"), str(path))


def arrow_file(path: Path) -> ByteSource:
    return FileObjectSource(pa.OSFile(str(path)), str(path))


def in_memory(path: Path) -> ByteSource:
    return FileObjectSource(io.BytesIO(path.read_bytes()), str(path))


SOURCES: dict[str, Callable[[Path], ByteSource]] = {
    "python file": python_file, "pyarrow file": arrow_file, "in memory": in_memory,
    "local file": lambda path: LocalFile(path)}


@pytest.fixture(scope="module")
def stores(broker_stores, features_store) -> list[Path]:  # type: ignore[no-untyped-def]
    """The stores whose files are decoded: the features store holds batch queues."""
    return [broker_stores[variant] / "store" for variant in STORES] + [
        features_store / "store"]


def files(stores: list[Path], stream: str) -> list[Path]:
    return [p for root in stores for p in sorted((root / stream).rglob("*"))
            if p.is_file() and p.name.isdigit()]


def decoded(decode) -> dict:  # type: ignore[no-untyped-def]
    """A queue decode as plain values (arrays as lists), for equality."""
    values = {}
    for name, value in vars(decode).items():
        if isinstance(value, np.ndarray):
            value = value.tolist()
        elif isinstance(value, dict):
            value = {k: v.tolist() for k, v in value.items()}
        elif hasattr(value, "__dataclass_fields__"):
            value = asdict(value)
        values[name] = value
    return values


def test_every_segment_decodes_the_same_from_every_source(stores) -> None:  # type: ignore[no-untyped-def]
    segments = files(stores, "commitlog")
    assert len(segments) >= 8
    for path in segments:
        expected, result = read_table(path)
        for kind, opener in SOURCES.items():
            table, theirs = read_table(opener(path))
            assert table.equals(expected), (kind, path)
            assert asdict(theirs) == asdict(result), (kind, path)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_range_of_a_segment_decodes_the_same_from_a_source(stores, data) -> None:  # type: ignore[no-untyped-def]
    path = data.draw(st.sampled_from(files(stores, "commitlog")))
    size = path.stat().st_size
    start = data.draw(st.integers(0, size))
    end = data.draw(st.one_of(st.none(), st.integers(start, size)))
    window = data.draw(st.sampled_from([4096, 65536, 8 * 2**20]))
    expected, result = read_table(path, start, end, window_size=window)
    table, theirs = read_table(in_memory(path), start, end, window_size=window)
    assert table.equals(expected)
    assert asdict(theirs) == asdict(result)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_unit_range_of_a_queue_decodes_the_same_from_a_source(stores, data) -> None:  # type: ignore[no-untyped-def]
    batch = data.draw(st.booleans())
    stream, unit, decode = (("batchconsumequeue", BCQ_UNIT_SIZE, decode_bcq_range) if batch
                            else ("consumequeue", CQ_UNIT_SIZE, decode_cq_range))
    path = data.draw(st.sampled_from(files(stores, stream)))
    units = path.stat().st_size // unit
    begin = data.draw(st.integers(0, units)) * unit
    end = data.draw(st.one_of(st.none(), st.integers(begin // unit, units).map(
        lambda n: n * unit)))
    source = data.draw(st.sampled_from(sorted(SOURCES)))
    assert decoded(decode(SOURCES[source](path), begin, end)) == \
        decoded(decode(path, begin, end))


def test_bytes_helpers_read_sources_as_paths(stores) -> None:  # type: ignore[no-untyped-def]
    path = files(stores, "consumequeue")[0]
    size = path.stat().st_size
    source = in_memory(path)
    for begin, end in ((0, None), (20, 4000), (size - 7, size + 100), (size, None)):
        assert read_range(source, begin, end) == read_range(path, begin, end)
    for position in (0, 40, size // 2, size - 1):
        assert has_nonzero_after(source, position) == has_nonzero_after(path, position)


def test_a_source_that_comes_up_short_is_a_typed_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "00000000000000000000"
    path.write_bytes(b"\1" * 100)
    short = FileObjectSource(io.BytesIO(b"\1" * 60), str(path), size=100)
    with pytest.raises(TruncatedDataError, match="shrank"):
        short.read_at(50, 50)
    with pytest.raises(NotAStoreFileError, match="does not exist"):
        LocalFile(tmp_path / "missing")
    with pytest.raises(NotAStoreFileError, match="not a regular file"):
        LocalFile(tmp_path)
