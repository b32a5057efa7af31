"""Properties parsing (spec §2.5) and the 5.x CRC32 trailer (§2.4)."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqlib.commitlog import properties as P


def oracle(raw: bytes) -> dict[str, str]:
    """The spec's rule, written out naively: decode, split, first 0x01, drop, last wins."""
    result: dict[str, str] = {}
    for chunk in raw.decode("utf-8", "replace").split("\x02"):
        if "\x01" not in chunk:
            continue
        index = chunk.index("\x01")
        name, value = chunk[:index], chunk[index + 1 :]
        if name and value:
            result[name] = value
    return result


def test_both_trailing_styles_parse_the_same() -> None:
    with_final = b"KEYS\x01k1 k2\x02TAGS\x01tagA\x02UNIQ_KEY\x01ABC\x02"
    without_final = with_final[:-1]
    expected = {"KEYS": "k1 k2", "TAGS": "tagA", "UNIQ_KEY": "ABC"}
    assert P.parse_properties(with_final) == expected
    assert P.parse_properties(without_final) == expected


def test_malformed_pairs_are_dropped() -> None:
    raw = b"\x02novalue\x01\x02\x01noname\x02noseparator\x02a\x01b\x02\x02"
    assert P.parse_properties(raw) == {"a": "b"}


def test_value_keeps_later_separators_and_last_duplicate_wins() -> None:
    raw = b"A\x01x\x01y\x02UNIQ_KEY\x01first\x02CLUSTER\x01c\x02UNIQ_KEY\x01batch"
    parsed = P.parse_properties(raw)
    assert parsed == {"A": "x\x01y", "UNIQ_KEY": "batch", "CLUSTER": "c"}


def test_invalid_utf8_is_replaced_not_raised() -> None:
    parsed = P.parse_properties(b"\xffname\x01v\xc3\x02ok\x01\xe4\xbd\xa0")
    assert parsed == {"\ufffdname": "v\ufffd", "ok": "你"}


def test_encode_properties_round_trips_and_drops_final_separator() -> None:
    props = {"KEYS": "a b", "TAGS": "t", "é": "ü"}
    assert P.encode_properties(props, trailing_separator=False).endswith("ü".encode())
    assert P.encode_properties(props).endswith(b"\x02")
    for trailing in (True, False):
        assert P.parse_properties(P.encode_properties(props, trailing_separator=trailing)) \
            == props


@pytest.mark.parametrize(("keys", "expected"), [
    (None, []), ("", []), ("k1", ["k1"]), ("k1 k2", ["k1", "k2"]),
    ("  k1   k2 ", ["k1", "k2"]), ("a\tb c", ["a\tb", "c"]),
])
def test_split_keys(keys: str | None, expected: list[str]) -> None:
    assert P.split_keys(keys) == expected


@pytest.mark.parametrize(("value", "digits"), [
    (0, b"0000000000"), (123, b"3210000000"), (2147483647, b"7463847412"),
    (1000000000, b"0000000001"),
])
def test_crc_digits_are_least_significant_first(value: int, digits: bytes) -> None:
    assert P.encode_crc_digits(value) == digits
    assert P.decode_crc_digits(digits) == value


def test_crc_trailer_is_read_from_the_last_20_bytes() -> None:
    trailer = b"__CRC32#\x01" + P.encode_crc_digits(987654) + b"\x02"
    assert len(trailer) == P.CRC32_RESERVED_LEN
    found = P.find_crc_trailer(b"TAGS\x01t\x02" + trailer)
    assert found is not None and found.value == 987654
    # Batch member of a <=5.1.4 client: no final 0x02 before the trailer, so the map
    # sees the trailer glued to the last value, but the trailer is still found.
    glued = b"TAGS\x01t" + trailer
    assert P.find_crc_trailer(glued) == P.CrcTrailer(987654)
    assert P.parse_properties(glued)["TAGS"].startswith("t__CRC32#")


def test_crc_trailer_absent_or_damaged() -> None:
    assert P.find_crc_trailer(b"TAGS\x01t\x02") is None
    assert P.find_crc_trailer(b"") is None
    bad_digits = b"__CRC32#\x0112345abcde\x02"
    assert P.find_crc_trailer(bad_digits) == P.CrcTrailer(None)


def test_verify_property_crc_covers_all_but_the_trailer() -> None:
    head = b"x" * 50
    value = zlib.crc32(head) & 0x7FFFFFFF
    record = head + b"__CRC32#\x01" + P.encode_crc_digits(value) + b"\x02"
    assert P.verify_property_crc(record, value)
    assert not P.verify_property_crc(record, value ^ 1)
    assert not P.verify_property_crc(record, None)


_names = st.text(st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)),
                 max_size=8)
_values = st.text(st.characters(blacklist_characters="\x02", blacklist_categories=("Cs",)),
                  max_size=12)


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(_names, _values), max_size=8), trailing=st.booleans(),
       noise=st.binary(max_size=6))
def test_parse_matches_the_spec_rule(pairs: list[tuple[str, str]], trailing: bool,
                                     noise: bytes) -> None:
    raw = "".join(f"{n}\x01{v}\x02" for n, v in pairs).encode()
    if not trailing and raw:
        raw = raw[:-1]
    raw += noise  # arbitrary trailing bytes, possibly invalid UTF-8 or separators
    assert P.parse_properties(raw) == oracle(raw)


@settings(max_examples=100, deadline=None)
@given(raw=st.binary(max_size=64))
def test_parse_never_raises_on_arbitrary_bytes(raw: bytes) -> None:
    assert P.parse_properties(raw) == oracle(raw)
