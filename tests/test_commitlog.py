"""CommitLog decoding (spec §2, §8): records, segments, ranges, stores, faults.

Records are produced by tests/rmq_encoder.py, which is written from the spec and shares
no code with rmqlib.
"""

from __future__ import annotations

import ipaddress
import os
import struct
from pathlib import Path

import pytest
import rmq_encoder as E

from rmqlib.commitlog import layout as L
from rmqlib.commitlog.compression import CompressionType
from rmqlib.commitlog.records import (
    CommitLogRecord,
    GapKind,
    OffsetNotFoundError,
    TransactionType,
    decode_record,
    read_record_at,
    scan_segment,
    scan_store,
)
from rmqlib.errors import CorruptDataError

SEG = 8192  # small segments so files roll often


# ----------------------------------------------------------------------------- helpers


def check_record(record: CommitLogRecord, placed: E.Placed) -> None:
    """Every field of a decoded record against what the encoder wrote."""
    msg, enc = placed.message, placed.encoded
    assert record.physical_offset == placed.physical_offset
    assert record.segment_start == placed.segment_start
    assert record.position == placed.position
    assert record.total_size == len(enc.record)
    assert record.magic == (L.MESSAGE_MAGIC_CODE_V2 if enc.version == 2
                            else L.MESSAGE_MAGIC_CODE_V1)
    assert record.version == enc.version
    assert record.body_crc == enc.body_crc
    assert (record.queue_id, record.flag, record.queue_offset) == (
        msg.queue_id, msg.flag, msg.queue_offset)
    assert record.sysflag == enc.sysflag
    assert record.transaction_type == TransactionType(msg.sysflag & 0xC)
    assert record.born_timestamp == msg.born_timestamp
    assert record.store_timestamp == msg.store_timestamp
    assert record.born_host == str(ipaddress.ip_address(msg.born_host))
    assert record.store_host == str(ipaddress.ip_address(msg.store_host))
    assert (record.born_port, record.store_port) == (msg.born_port, msg.store_port)
    assert record.reconsume_times == msg.reconsume_times
    assert record.prepared_transaction_offset == msg.prepared_transaction_offset
    assert record.body == enc.stored_body
    assert record.body_length == len(enc.stored_body)
    assert record.decompressed_body() == msg.body
    assert record.topic == msg.topic_bytes().decode("utf-8", "replace")
    assert record.raw_properties == enc.properties
    assert dict(record.properties) == E.expected_properties(enc.properties)
    assert record.body_crc_ok is (msg.body_crc is None or
                                  msg.body_crc == E.java_crc32(enc.stored_body))
    if msg.crc_trailer:
        assert record.property_crc is not None and record.property_crc_ok is True
    else:
        assert record.property_crc is None and record.property_crc_ok is None
    store = ipaddress.ip_address(msg.store_host).packed
    assert record.offset_msg_id == (store + struct.pack(">iq", msg.store_port,
                                                         placed.physical_offset)).hex().upper()


def write(tmp_path: Path, messages: list[E.Message], file_size: int = SEG,
          **kwargs: object) -> E.CommitLogWriter:
    writer = E.CommitLogWriter(file_size)
    for msg in messages:
        writer.append(msg)
    writer.write(tmp_path, **kwargs)  # type: ignore[arg-type]
    return writer


def zoo() -> list[E.Message]:
    """One message of every layout and feature the decoder must handle."""
    m = E.Message
    return [
        m(),
        m(topic="%RETRY%" + "g" * 150, body=b"v2 magic, 2-byte topic length"),
        m(born_host="::1", body=b"born v6"),
        m(store_host="2001:db8::7", body=b"store v6"),
        m(born_host="fe80::1", store_host="fe80::2", topic="T" * 250),
        m(compression="zlib", body=b"z" * 3000),
        m(compression="zlib-legacy", body=b"legacy " * 300),
        m(compression="lz4", body=b"l" * 3000),
        m(compression="zstd", body=b"s" * 3000),
        m(sysflag=E.SF_TX_PREPARED, queue_offset=0),
        m(sysflag=E.SF_TX_COMMIT, prepared_transaction_offset=12345),
        m(sysflag=E.SF_TX_ROLLBACK | E.SF_MULTI_TAGS),
        m(sysflag=E.SF_INNER_BATCH | E.SF_NEED_UNWRAP,
          properties=[("INNER_NUM", "3"), ("INNER_BASE", "0")]),
        m(crc_trailer=True, properties=[("TAGS", "t"), ("UNIQ_KEY", "U1")]),
        m(crc_trailer=True, trailing_separator=False, properties=[("TAGS", "t")]),
        m(body=b"", properties=()),
        m(trailing_separator=False,
          properties=[("KEYS", " k1  k2 "), ("TAGS", "ü"), ("A", "x\x01y"), ("A", "last"),
                      ("E", ""), ("", "noname"), ("UNIQ_KEY", "batch")]),
        m(topic="主题", properties=b"\xffbad\x01utf8\x02TAGS\x01\xe4\xbd\xa0"),
        m(body_crc=12345, body=b"crc mismatch"),
        m(reconsume_times=16, flag=-7, queue_id=7, born_timestamp=-1, store_timestamp=2**62),
    ]


# ----------------------------------------------------------------------------- layout


def test_layout_constants_match_the_spec() -> None:
    assert L.MESSAGE_MAGIC_CODE_V1 & 0xFFFFFFFF == 0xDAA320A7
    assert L.MESSAGE_MAGIC_CODE_V2 & 0xFFFFFFFF == 0xDAA320AB
    assert L.BLANK_MAGIC_CODE & 0xFFFFFFFF == 0xCBD43194
    assert (L.IPV4_STORETIMESTAMP_POS, L.IPV4_STOREHOST_POS, L.IPV4_RECONSUMETIMES_POS,
            L.IPV4_PREPARED_TX_OFFSET_POS, L.IPV4_BODYLENGTH_POS) == (56, 64, 72, 76, 84)
    assert L.body_length_pos(20, 20) == 108
    assert L.MIN_RECORD_LENGTH == 91 and L.MAX_RECORD_OVERHEAD == 116
    assert L.expected_total_size(8, 8, 1, -5, 3, -1) == 94  # negative lengths count as 0


@pytest.mark.parametrize("index", range(len(zoo())))
def test_every_layout_decodes_field_by_field(tmp_path: Path, index: int) -> None:
    writer = write(tmp_path, [E.Message(body=b"filler"), zoo()[index]], file_size=65536)
    records = list(scan_segment(tmp_path / "00000000000000000000"))
    assert len(records) == 2
    for record, placed in zip(records, writer.placed, strict=True):
        check_record(record, placed)


def test_derived_fields() -> None:
    msg = E.Message(sysflag=E.SF_TX_COMMIT | E.SF_INNER_BATCH | E.SF_MULTI_TAGS,
                    compression="lz4", body=b"x" * 100, born_host="::1",
                    properties=[("KEYS", "a b"), ("TAGS", "t"), ("UNIQ_KEY", "U")])
    record = decode_record(E.encode(msg, 4096 + 100), segment_start=4096, position=100)
    assert record.transaction_type is TransactionType.COMMIT
    assert record.compression is CompressionType.LZ4
    assert record.inner_batch and record.multi_tags and not record.need_unwrap
    assert (record.tags, record.keys, record.uniq_key) == ("t", ["a", "b"], "U")
    assert record.born_address == "[::1]:50123"
    assert record.store_address == "10.0.0.2:10911"


def test_negative_body_length_counts_as_empty_like_the_broker() -> None:
    record = bytearray(E.encode(E.Message(body=b""), 0))
    struct.pack_into(">i", record, L.IPV4_BODYLENGTH_POS, -1)
    decoded = decode_record(bytes(record))
    assert decoded.body == b"" and decoded.body_length == -1


def test_v1_topic_longer_than_127_bytes_is_not_a_valid_record() -> None:
    # 5.x with autoMessageVersionOnTopicLen=false: the signed i8 length reads negative.
    data = E.encode(E.Message(topic="t" * 200, version=1), 0)
    with pytest.raises(CorruptDataError, match="negative TOPICLENGTH"):
        decode_record(data)


@pytest.mark.parametrize(("patch", "reason"), [
    (lambda r: struct.pack_into(">q", r, 28, 999), "PHYSICALOFFSET 999 != own offset 0"),
    (lambda r: struct.pack_into(">i", r, 0, len(r) + 1), "TOTALSIZE"),
    (lambda r: struct.pack_into(">i", r, 4, 0x12345678), "no record magic"),
    (lambda r: struct.pack_into(">i", r, 84, 1000), "BODYLENGTH 1000"),
    (lambda r: struct.pack_into(">i", r, 36, 0x30), "TOTALSIZE"),  # claims IPv6 hosts
])
def test_decode_record_rejects_broken_framing(patch: object, reason: str) -> None:
    record = bytearray(E.encode(E.Message(body=b"abc"), 0))
    patch(record)  # type: ignore[operator]
    with pytest.raises(CorruptDataError, match=reason) as caught:
        decode_record(bytes(record) + bytes(64))
    assert caught.value.offset == 0


def test_blank_is_not_a_message() -> None:
    with pytest.raises(CorruptDataError, match="BLANK"):
        decode_record(E.encode_blank(8))


def test_body_and_property_crc_damage_is_reported_on_the_record() -> None:
    data = bytearray(E.encode(E.Message(crc_trailer=True, body=b"payload"), 0))
    data[L.IPV4_BODY_POS] ^= 0xFF
    record = decode_record(bytes(data))
    assert record.body_crc_ok is False and record.property_crc_ok is False
    unverified = decode_record(bytes(data), verify_crc=False)
    assert unverified.body_crc_ok is None and unverified.property_crc_ok is None
    assert unverified.property_crc is not None


def test_decompression_failure_raises_typed_error_with_location() -> None:
    msg = E.Message(compression="zstd", body=b"x" * 100)
    data = bytearray(E.encode(msg, 0))
    data[L.IPV4_BODY_POS + 5] ^= 0xFF
    record = decode_record(bytes(data), path="/s/00000000000000000000")
    assert record.body_crc_ok is False
    with pytest.raises(CorruptDataError) as caught:
        record.decompressed_body()
    assert caught.value.path == "/s/00000000000000000000" and caught.value.offset == 0


# ----------------------------------------------------------------------------- segments


def test_broker_layout_store_scans_completely(tmp_path: Path) -> None:
    messages = E.sample_messages(300, body_size=0)
    for i, msg in enumerate(messages):
        msg.body = bytes([i % 251]) * (i * 37 % 700)
    writer = write(tmp_path, messages)
    assert len(writer.segments) > 5
    scan = scan_store(tmp_path)
    records = list(scan)
    assert len(records) == len(writer.placed)
    for record, placed in zip(records, writer.placed, strict=True):
        check_record(record, placed)
    assert scan.issues == []
    assert scan.logical_end == writer.offset
    assert len(scan.segments) == len(writer.segments) + 1  # + the pre-created empty file
    for index, result in enumerate(scan.segments):
        account = result.account.check()
        assert (account.size, result.span_start, result.span_end) == (SEG, 0, SEG)
        in_file = [p for p in writer.placed if p.segment_start == index * SEG]
        assert account.decoded == sum(p.length for p in in_file)
        assert account.unreadable == []
        if index < len(writer.segments) - 1:  # completed: one BLANK right after the data
            end = in_file[-1].position + in_file[-1].length
            assert result.blanks == [end]
            # the BLANK's whole length, to the file end, is what the broker skips
            assert account.blank == SEG - end and account.zero_tail == 0
        else:  # active file and the pre-created one: zeros after the data
            assert result.blanks == [] and account.blank == 0
            assert result.logical_end == (writer.position if in_file else 0)


def test_blank_length_field_is_bytes_remaining(tmp_path: Path) -> None:
    write(tmp_path, [E.Message(body=b"x" * 3000)] * 3, preallocate_next=False)
    data = (tmp_path / "00000000000000000000").read_bytes()
    scan = scan_segment(tmp_path / "00000000000000000000")
    assert len(list(scan)) == 2  # the third message did not fit (+8) and moved on
    (blank,) = scan.result.blanks
    assert struct.unpack_from(">ii", data, blank) == (SEG - blank, L.BLANK_MAGIC_CODE)


@pytest.mark.parametrize(("content", "kind"), [
    (b"", None), (bytes(5), GapKind.ZERO_TAIL), (b"\x01\x02\x03", GapKind.TORN_TAIL),
    (bytes(4096), GapKind.ZERO_TAIL), (os.urandom(4096), GapKind.TORN_TAIL),
])
def test_empty_tiny_and_garbage_files(tmp_path: Path, content: bytes,
                                      kind: GapKind | None) -> None:
    path = tmp_path / "00000000000000000000"
    path.write_bytes(content)
    scan = scan_segment(path)
    assert list(scan) == []
    assert scan.account.check().size == len(content)
    assert [gap.kind for gap in scan.result.gaps][:1] == ([kind] if kind else [])
    if kind is GapKind.TORN_TAIL:
        assert scan.account.unreadable[0].reason.startswith("torn tail")


def test_segments_of_any_size_named_by_start_offset(tmp_path: Path) -> None:
    writer = write(tmp_path, E.sample_messages(40, body_size=50), file_size=3001)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[:2] == ["00000000000000000000", "00000000000000003001"]
    records = list(scan_store(tmp_path))
    assert [r.physical_offset for r in records] == [p.physical_offset for p in writer.placed]


def test_store_spread_over_several_directories(tmp_path: Path) -> None:
    writer = write(tmp_path / "all", E.sample_messages(120, body_size=100))
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    for index, path in enumerate(sorted((tmp_path / "all").iterdir())):
        path.rename((a if index % 2 else b) / path.name)
    records = list(scan_store([a, b]))
    assert [r.physical_offset for r in records] == [p.physical_offset for p in writer.placed]


def test_scan_store_from_a_high_water_mark(tmp_path: Path) -> None:
    writer = write(tmp_path, E.sample_messages(120, body_size=100))
    mark = writer.placed[77].physical_offset
    records = list(scan_store(tmp_path, start_offset=mark))
    assert [r.physical_offset for r in records] == \
        [p.physical_offset for p in writer.placed[77:]]


def test_read_record_at(tmp_path: Path) -> None:
    writer = write(tmp_path, E.sample_messages(60, body_size=100))
    for placed in writer.placed[::7]:
        check_record(read_record_at(tmp_path, placed.physical_offset), placed)
    inside = writer.placed[3].physical_offset + 10
    with pytest.raises(CorruptDataError, match="no valid record") as caught:
        read_record_at(tmp_path, inside)
    assert caught.value.offset == inside % SEG
    with pytest.raises(OffsetNotFoundError):
        read_record_at(tmp_path, 10 * SEG * 1000)
    first_file = [p for p in writer.placed if p.segment_start == 0]
    blank_at = first_file[-1].physical_offset + first_file[-1].length
    with pytest.raises(CorruptDataError, match="BLANK"):
        read_record_at(tmp_path, blank_at)
