"""The Arrow bulk path agrees with the per-record API, row for row, column for column."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest
import rmq_encoder as E
from commitlog_strategies import messages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_commitlog import zoo

from rmqlib.commitlog import layout as L
from rmqlib.commitlog.arrow import COMMITLOG_SCHEMA, read_table, scan_segment_arrow
from rmqlib.commitlog.records import CommitLogRecord, scan_segment
from rmqlib.errors import CorruptDataError

NAME = "00000000000000000000"


def as_row(record: CommitLogRecord) -> dict[str, object]:
    """What the Arrow row for ``record`` must contain (see COMMITLOG_SCHEMA docs)."""
    try:
        body, error = record.decompressed_body(), None
    except CorruptDataError as exc:
        body, error = None, exc.reason
    compression = record.compression
    return {
        "file": record.path, "segment_start": record.segment_start,
        "file_position": record.position, "physical_offset": record.physical_offset,
        "total_size": record.total_size, "magic": record.magic,
        "message_version": record.version, "body_crc": record.body_crc,
        "queue_id": record.queue_id, "flag": record.flag, "queue_offset": record.queue_offset,
        "sysflag": record.sysflag, "transaction_type": record.transaction_type.name,
        "compression": None if compression is None else getattr(
            compression, "name", f"UNKNOWN({compression})"),
        "inner_batch": record.inner_batch, "born_timestamp": record.born_timestamp,
        "born_host": record.born_host, "born_port": record.born_port,
        "store_timestamp": record.store_timestamp, "store_host": record.store_host,
        "store_port": record.store_port, "reconsume_times": record.reconsume_times,
        "prepared_transaction_offset": record.prepared_transaction_offset,
        "body_length": record.body_length, "body": body, "body_error": error,
        "body_crc_ok": record.body_crc_ok, "topic": record.topic,
        "properties": dict(record.properties), "tags": record.tags, "keys": record.keys,
        "uniq_key": record.uniq_key, "offset_msg_id": record.offset_msg_id,
        "property_crc": record.property_crc, "property_crc_ok": record.property_crc_ok,
    }


def arrow_rows(path: Path, **kwargs: object) -> list[dict[str, object]]:
    table, _ = read_table(path, **kwargs)
    assert table.schema == COMMITLOG_SCHEMA
    rows = table.to_pylist()
    for row in rows:
        row["properties"] = dict(row["properties"])
    return rows


def record_rows(path: Path, **kwargs: object) -> list[dict[str, object]]:
    return [as_row(r) for r in scan_segment(path, **kwargs)]  # type: ignore[arg-type]


def write(directory: Path, msgs: list[E.Message], size: int = 1 << 20) -> Path:
    writer = E.CommitLogWriter(size)
    for msg in msgs:
        writer.append(msg)
    writer.write(directory, preallocate_next=False)
    return directory / NAME


def test_schema_is_fixed_and_documented() -> None:
    names = COMMITLOG_SCHEMA.names
    assert names[:4] == ["file", "segment_start", "file_position", "physical_offset"]
    assert COMMITLOG_SCHEMA.field("properties").type == pa.map_(pa.string(), pa.string())
    assert COMMITLOG_SCHEMA.field("keys").type == pa.list_(pa.string())
    assert COMMITLOG_SCHEMA.field("body").type == pa.binary()
    import rmqlib.commitlog.arrow as module

    for name in names:
        assert name in module.__doc__, f"column {name} is not documented"


def test_zoo_rows_match_record_api(tmp_path: Path) -> None:
    path = write(tmp_path, zoo() * 3)
    rows = arrow_rows(path, batch_size=5)
    assert len(rows) == 3 * len(zoo())
    assert rows == record_rows(path)


def test_mixed_ipv6_and_duplicates_in_one_batch(tmp_path: Path) -> None:
    msgs = [E.Message(born_host="::1" if i % 3 == 0 else "10.1.1.1",
                      store_host="fe80::9" if i % 5 == 0 else "10.1.1.2",
                      properties=[("UNIQ_KEY", f"A{i}"), ("TAGS", "x"), ("UNIQ_KEY", f"B{i}")])
            for i in range(40)]
    path = write(tmp_path, msgs)
    rows = arrow_rows(path)
    assert rows == record_rows(path)
    assert [row["uniq_key"] for row in rows] == [f"B{i}" for i in range(40)]
    assert len(rows[0]["offset_msg_id"]) == 56 and len(rows[1]["offset_msg_id"]) == 32


def test_batch_size_and_window_size_only_change_batching(tmp_path: Path) -> None:
    msgs = [*E.sample_messages(500, body_size=30), E.Message(body=b"B" * 20000)]
    path = write(tmp_path, msgs)
    batches = list(scan_segment_arrow(path, batch_size=64, window_size=4096))
    assert all(0 < b.num_rows <= 64 for b in batches)
    assert sum(b.num_rows for b in batches) == 501
    small = pa.Table.from_batches(batches).to_pylist()
    assert small == pa.Table.from_batches(list(scan_segment_arrow(path))).to_pylist()


def test_undecompressable_body_is_null_with_error(tmp_path: Path) -> None:
    bad = E.Message(compression="lz4", body=b"x" * 500)
    enc = E.build(bad, 0)
    stored = bytearray(enc.stored_body)
    stored[len(stored) // 2] ^= 0xFF
    bad.compression = None
    bad.body = bytes(stored)  # keep the flipped bytes; mark compressed via sysflag
    bad.sysflag = 0x101
    path = write(tmp_path, [E.Message(), bad, E.Message(compression="zlib", body=b"ok")])
    table, result = read_table(path)
    assert table.column("body").to_pylist()[1] is None
    assert "LZ4" in table.column("body_error").to_pylist()[1]
    assert table.column("body").to_pylist()[2] == b"ok"
    assert table.column("body_crc_ok").to_pylist() == [True, True, True]
    assert result.body_crc_failures == []


def test_unverified_scan_leaves_crc_columns_null(tmp_path: Path) -> None:
    path = write(tmp_path, [E.Message(crc_trailer=True), E.Message(body_crc=3)])
    table, result = read_table(path, verify_crc=False)
    assert table.column("body_crc_ok").null_count == 2
    assert table.column("property_crc_ok").null_count == 2
    assert table.column("property_crc").to_pylist()[0] is not None
    assert result.body_crc_failures == []


def test_empty_and_blank_only_ranges_give_no_batches(tmp_path: Path) -> None:
    (tmp_path / NAME).write_bytes(struct.pack(">iI", 4096, E.MAGIC_BLANK) + bytes(4088))
    scan = scan_segment_arrow(tmp_path / NAME)
    assert list(scan) == []
    assert scan.account.blank == 4096 and scan.account.zero_tail == 0


def test_header_gather_handles_records_ending_near_the_window_end(tmp_path: Path) -> None:
    # Records exactly filling windows exercise the padding of gathered views.
    msgs = [E.Message(body=b"w" * (4096 - 200 - i)) for i in range(30)]
    path = write(tmp_path, msgs)
    assert arrow_rows(path, window_size=4096) == record_rows(path)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(msgs=st.lists(messages(max_body=300), min_size=1, max_size=25),
       batch=st.integers(1, 30))
def test_random_records_round_trip_through_both_paths(
        tmp_path_factory: pytest.TempPathFactory, msgs: list[E.Message], batch: int) -> None:
    directory = tmp_path_factory.mktemp("rt")
    writer = E.CommitLogWriter(1 << 20)
    for msg in msgs:
        writer.append(msg)
    writer.write(directory, preallocate_next=False)
    path = directory / NAME
    rows = arrow_rows(path, batch_size=batch)
    assert rows == record_rows(path)
    assert [row["file_position"] for row in rows] == [p.position for p in writer.placed]
    for row, placed in zip(rows, writer.placed, strict=True):
        assert row["body"] == placed.message.body
        assert row["properties"] == E.expected_properties(placed.encoded.properties)
        assert row["message_version"] == placed.encoded.version
        assert row["total_size"] == placed.length
        assert (row["sysflag"] & L.BORNHOST_V6_FLAG != 0) == (":" in placed.message.born_host)


def test_unusual_property_names_keep_exact_identity(tmp_path: Path) -> None:
    # NUL inside short names (cannot be keyed as integers), names longer than 8 bytes,
    # and more than 64 distinct names in one batch (no bitmask duplicate check).
    msgs = [E.Message(properties=[("A\x00", "nul"), ("A", "plain"), ("A\x00", "again"),
                                  ("TIMER_DELIVER_MS", "1"), ("TIMER_DELIVER_MX", "2"),
                                  (f"name{i}", "v"), (f"name{i}", "w")])
            for i in range(80)]
    path = write(tmp_path, msgs)
    rows = arrow_rows(path, batch_size=100)
    assert rows == record_rows(path)
    assert rows[0]["properties"] == {"A\x00": "again", "A": "plain", "TIMER_DELIVER_MS": "1",
                                     "TIMER_DELIVER_MX": "2", "name0": "w"}


def test_scans_are_single_use_and_results_wait_for_the_end(tmp_path: Path) -> None:
    path = write(tmp_path, [E.Message()])
    scan = scan_segment_arrow(path)
    with pytest.raises(RuntimeError):
        _ = scan.result
    assert sum(batch.num_rows for batch in scan) == 1
    with pytest.raises(RuntimeError):
        iter(scan)
    records = scan_segment(path)
    assert len(list(records)) == 1 and records.account.decoded > 0
    with pytest.raises(RuntimeError):
        list(records)
