"""Hypothesis strategies for commitlog messages (built on tests/rmq_encoder.py)."""

from __future__ import annotations

import string

import rmq_encoder as E
from hypothesis import strategies as st

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_ipv4 = st.ip_addresses(v=4).map(str)
_ipv6 = st.ip_addresses(v=6).map(str)
_i32 = st.integers(-(2**31), 2**31 - 1)
_i64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def topics(draw: st.DrawFn) -> str | bytes:
    kind = draw(st.sampled_from(["short", "unicode", "long", "raw"]))
    if kind == "short":
        return draw(st.text(string.ascii_letters + "%_-|", min_size=1, max_size=40))
    if kind == "unicode":
        text = draw(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1,
                            max_size=30))
        return text.encode("utf-8")[:127]
    if kind == "long":  # v2 magic: retry topics of 128-255 bytes
        return "%RETRY%" + draw(st.text(string.ascii_letters, min_size=121, max_size=248))
    return draw(st.binary(min_size=1, max_size=60))  # possibly invalid UTF-8


@st.composite
def property_lists(draw: st.DrawFn) -> list[tuple[str, str]] | bytes:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=80))  # arbitrary bytes, parsed leniently
    well_known = st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "CLUSTER", "WAIT", "DELAY",
                                  "INNER_MULTI_DISPATCH", "TRAN_MSG"])
    names = st.one_of(well_known, _text)
    values = st.one_of(_text, st.text(string.ascii_letters + " \x01", max_size=20))
    return draw(st.lists(st.tuples(names, values), max_size=7))


@st.composite
def messages(draw: st.DrawFn, max_body: int = 400) -> E.Message:
    return E.Message(
        topic=draw(topics()),
        body=draw(st.binary(max_size=max_body)),
        properties=draw(property_lists()),
        trailing_separator=draw(st.booleans()),
        queue_id=draw(st.integers(0, 1023)),
        flag=draw(_i32),
        queue_offset=draw(st.integers(0, 2**40)),
        sysflag=draw(st.sampled_from([0, 0x2, 0x4, 0x8, 0xC, 0xC0, 0x8 | 0x2])),
        born_timestamp=draw(_i64),
        born_host=draw(st.one_of(_ipv4, _ipv6)),
        born_port=draw(_i32),
        store_timestamp=draw(_i64),
        store_host=draw(st.one_of(_ipv4, _ipv6)),
        store_port=draw(st.integers(0, 65535)),
        reconsume_times=draw(_i32),
        prepared_transaction_offset=draw(_i64),
        compression=draw(st.sampled_from([None, None, None, "zlib", "zlib-legacy", "lz4",
                                          "zstd"])),
        crc_trailer=draw(st.booleans()),
        body_crc=draw(st.sampled_from([None, None, None, 7])),
    )
