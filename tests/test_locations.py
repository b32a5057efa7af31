"""Locations the product cannot write are refused, never reinterpreted as local paths
(jobs/lakehouse/locations.py): any URI scheme but ``file``; a local path, relative or
absolute, comes back unchanged; ``file://`` URIs are their path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.lakehouse.locations import UnsupportedLocationError, local_directory, warehouse_location

SCHEMES = st.from_regex(r"[A-Za-z][A-Za-z0-9+.-]{0,8}", fullmatch=True).filter(
    lambda s: s.lower() != "file")
SEGMENTS = st.lists(st.text(alphabet="abc_-. 09", min_size=1, max_size=6).filter(
    lambda s: s not in (".", "..")), min_size=1, max_size=4)


@given(scheme=SCHEMES, segments=SEGMENTS, slashes=st.sampled_from(["/", "//", "///"]))
def test_a_uri_is_refused_whatever_its_scheme(scheme: str, segments: list[str],
                                              slashes: str) -> None:
    location = f"{scheme}:{slashes}" + "/".join(segments)
    with pytest.raises(UnsupportedLocationError, match=re.escape(f"{scheme}://")):
        local_directory(location, "--warehouse")
    with pytest.raises(UnsupportedLocationError):  # as Path() leaves it: s3:/bucket
        local_directory(Path(location), "--warehouse")


@given(segments=SEGMENTS, absolute=st.booleans())
def test_a_local_path_is_itself(segments: list[str], absolute: bool) -> None:
    location = ("/" if absolute else "") + "/".join(segments)
    assert local_directory(location, "--warehouse") == Path(location)


def test_a_file_uri_is_its_path() -> None:
    assert local_directory("file:///srv/wh%20a", "x") == Path("/srv/wh a")
    assert local_directory("file://localhost/srv/wh", "x") == Path("/srv/wh")
    with pytest.raises(UnsupportedLocationError):
        local_directory("file://otherhost/srv/wh", "x")


BUCKETS = st.from_regex(r"[a-z0-9][a-z0-9-]{1,20}[a-z0-9]", fullmatch=True)


@given(bucket=BUCKETS, segments=SEGMENTS, trailing=st.booleans())
def test_an_s3_warehouse_is_a_location_never_a_path(bucket: str, segments: list[str],
                                                    trailing: bool) -> None:
    text = f"s3://{bucket}/" + "/".join(segments) + ("/" if trailing else "")
    location = warehouse_location(text, "--warehouse")
    assert location.uri == f"s3://{bucket}/" + "/".join(segments)
    assert not location.is_local and location.native() is location
    table = location / "rmq.db" / "messages"
    assert str(table) == f"{location.uri}/rmq.db/messages"
    assert table.parent.parent == location and table.name == "messages"
    with pytest.raises(TypeError):
        _ = location.path


@given(scheme=SCHEMES.filter(lambda s: s.lower() != "s3"), segments=SEGMENTS)
def test_a_warehouse_uri_of_another_store_is_refused(scheme: str, segments: list[str]) -> None:
    with pytest.raises(UnsupportedLocationError, match=re.escape(f"{scheme}://")):
        warehouse_location(f"{scheme}://" + "/".join(segments), "--warehouse")


@given(segments=SEGMENTS)
def test_a_local_warehouse_is_its_absolute_path(segments: list[str]) -> None:
    location = warehouse_location("/".join(segments), "--warehouse")
    assert location.is_local and location.native() == (Path.cwd() / "/".join(segments)).resolve()
