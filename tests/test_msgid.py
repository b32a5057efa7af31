"""offsetMsgId and UNIQ_KEY (spec §2.7)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqlib.commitlog.msgid import (
    OffsetMsgId,
    UniqKey,
    decode_offset_msg_id,
    decode_uniq_key,
    encode_offset_msg_id,
    encode_uniq_key,
    offset_msg_id_from_bytes,
)
from rmqlib.errors import CorruptDataError


def test_ipv4_offset_msg_id_layout() -> None:
    # 10.0.0.2:10911 at commitlog offset 0x1234: address, i32 port, i64 offset, uppercase.
    msg_id = encode_offset_msg_id("10.0.0.2", 10911, 0x1234)
    assert msg_id == "0A000002" + "00002A9F" + "0000000000001234"
    assert len(msg_id) == 32
    assert decode_offset_msg_id(msg_id) == OffsetMsgId("10.0.0.2", 10911, 0x1234)
    assert decode_offset_msg_id(msg_id.lower()) == OffsetMsgId("10.0.0.2", 10911, 0x1234)


def test_ipv6_offset_msg_id_is_56_chars() -> None:
    msg_id = encode_offset_msg_id("2001:db8::1", 10911, 1 << 40)
    assert len(msg_id) == 56
    assert msg_id.startswith("20010DB8000000000000000000000001")
    assert decode_offset_msg_id(msg_id) == OffsetMsgId("2001:db8::1", 10911, 1 << 40)


def test_offset_msg_id_from_raw_bytes_matches_text_form() -> None:
    assert offset_msg_id_from_bytes(bytes([10, 0, 0, 2]), 10911, 99) == \
        encode_offset_msg_id("10.0.0.2", 10911, 99)


@pytest.mark.parametrize("bad", ["", "0A00", "Z" * 32, "0A000002 0002A9F0000000000001234",
                                 "0" * 40])
def test_bad_offset_msg_ids_raise_corrupt_data(bad: str) -> None:
    with pytest.raises(CorruptDataError):
        decode_offset_msg_id(bad)


def test_java_client_uniq_key_fields() -> None:
    # ip 192.168.1.10, pid 0x1A2B, class-loader hash -2, month offset 0x89ABCDEF (past 2^31:
    # stored wrapped, read unsigned), counter 7.
    text = "C0A8010A" + "1A2B" + "FFFFFFFE" + "89ABCDEF" + "0007"
    key = decode_uniq_key(text)
    assert key == UniqKey("192.168.1.10", 0x1A2B, -2, 0x89ABCDEF, 7)
    assert key.month_start_ms(born_timestamp=0x89ABCDEF + 1000) == 1000
    assert encode_uniq_key("192.168.1.10", 0x1A2B, -2, 0x89ABCDEF, 7) == text


def test_ipv6_uniq_key() -> None:
    text = encode_uniq_key("fe80::1", 70000, 5, 12345, 65536 + 3)
    assert len(text) == 56
    assert decode_uniq_key(text) == UniqKey("fe80::1", 70000 & 0xFFFF, 5, 12345, 3)


@pytest.mark.parametrize("bad", ["", "abc", "G" * 32, "0" * 31])
def test_bad_uniq_keys_raise_corrupt_data(bad: str) -> None:
    with pytest.raises(CorruptDataError):
        decode_uniq_key(bad)


@settings(max_examples=100, deadline=None)
@given(v6=st.booleans(), raw=st.binary(min_size=16, max_size=16),
       port=st.integers(-(2**31), 2**31 - 1), offset=st.integers(0, 2**63 - 1))
def test_offset_msg_id_round_trip(v6: bool, raw: bytes, port: int, offset: int) -> None:
    address = raw if v6 else raw[:4]
    msg_id = offset_msg_id_from_bytes(address, port, offset)
    decoded = decode_offset_msg_id(msg_id)
    assert (decoded.port, decoded.commitlog_offset) == (port, offset)
    assert encode_offset_msg_id(decoded.host, port, offset) == msg_id
