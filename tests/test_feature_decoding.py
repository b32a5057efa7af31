"""rmqlib against every optional 5.x store feature, field by field (the v5-features store).

One real 5.5.0 broker bound to ::1 wrote inner batches to a BatchCQ topic, consume-queue ext
units with filter bitmaps, LMQ multi-dispatch, the property CRC trailer on every record,
zlib/lz4/zstd bodies, magic-v2 retry/DLQ/pop records and timer messages (fired and
pending). The truth is what the client was told (send results) and what consumers received
(``consumed.jsonl``): every acked message must be found with every field equal, every
queue unit must resolve and ``rmq verify`` must report nothing false.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from jsonl import json_lines

from rmqlib.cli.queue_paths import queue_files
from rmqlib.commitlog.arrow import MESSAGE_SCHEMA, scan_segment_arrow, unwrap_inner_batches
from rmqlib.commitlog.msgid import decode_offset_msg_id
from rmqlib.common.javahash import tags_code
from rmqlib.common.segments import list_segments
from rmqlib.queues.consumequeue import is_ext_addr
from rmqlib.store.verify import verify_store

pytestmark = pytest.mark.broker


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def store(features_store: Path) -> Path:
    return features_store / "store"


@pytest.fixture(scope="module")
def truth(features_store: Path) -> Path:
    return features_store / "truth"


@pytest.fixture(scope="module")
def messages(store: Path) -> list[dict]:
    """Every message a consumer can receive, decoded on the Arrow path, inner batches
    unwrapped (what the Delta ``messages`` table holds)."""
    batches = []
    for segment in list_segments(store / "commitlog"):
        batches += [unwrap_inner_batches(b) for b in scan_segment_arrow(segment.path)]
    return pa.Table.from_batches(batches, schema=MESSAGE_SCHEMA).to_pylist()


def by_key(messages: list[dict]) -> dict[tuple[int, int], dict]:
    return {(m["physical_offset"], m["inner_index"]): m for m in messages}


def test_every_record_has_ipv6_hosts_and_a_valid_property_crc(messages) -> None:
    assert messages
    assert all(m["sysflag"] & 0x30 == 0x30 for m in messages)  # born and store host v6
    assert {m["store_host"] for m in messages} == {"::1"}
    assert all(len(m["offset_msg_id"]) == 56 for m in messages)
    assert all(m["property_crc_ok"] is True and m["body_crc_ok"] is True for m in messages)
    long_topics = [m for m in messages if len(m["topic"].encode()) > 127]
    assert long_topics and all(m["message_version"] == 2 for m in long_topics)
    assert all(m["message_version"] == 1 for m in messages if len(m["topic"].encode()) <= 127)


def test_every_acked_send_is_found_with_its_fields(messages, truth) -> None:
    """Send results: offsetMsgId names the record; inner-batch members sit at INNER_BASE +
    their index; user properties, keys, tags, UNIQ_KEY, uncompressed body all equal."""
    found = by_key(messages)
    sent = [m for m in _jsonl(truth / "messages.jsonl") if m["acked"]]
    assert len(sent) == 271
    for message in sent:
        physical = decode_offset_msg_id(message["offsetMsgId"]).commitlog_offset
        index = message["batchIndex"] if message.get("innerBatch") else 0
        row = found[(physical, index)]
        expected_offset = (message["innerBase"] + index if message.get("innerBatch")
                           else message["queueOffset"])
        where = f"seq {message['seq']} ({message['kind']})"
        assert (row["topic"], row["queue_id"], row["queue_offset"]) == (
            message["storedTopic"], message["storedQueueId"], expected_offset), where
        assert row["uniq_key"] == message["msgId"], where
        assert row["tags"] == message["tags"], where
        assert row["keys"] == message["keys"], where
        properties = dict(row["properties"])
        assert {k: properties.get(k) for k in message["userProperties"]} == message[
            "userProperties"], where
        assert hashlib.sha256(row["body"]).hexdigest() == message["bodySha256"], where
        if message["compressType"]:
            assert row["compression"] == message["compressType"], where
        if message.get("innerBatch"):
            assert row["inner_num"] == message["batchSize"], where
            assert dict(row["batch_properties"])["UNIQ_KEY"] == message["batchUniqKey"]


def test_inner_batch_members_are_what_the_consumer_received(messages, truth) -> None:
    """consumed.jsonl of the BatchCQ group is the client's own unwrapping: same members,
    queue offsets, ids, bodies and commitlog offsets."""
    received = [c for c in _jsonl(truth / "consumed.jsonl") if c["group"] == "G_BATCHCQ"]
    assert len(received) == 86
    ours = {(m["topic"], m["queue_id"], m["queue_offset"]): m for m in messages
            if m["topic"] == "TopicBatchCQ"}
    assert len(ours) == 86
    for got in received:
        row = ours[(got["queueTopic"], got["queueId"], got["queueOffset"])]
        assert row["uniq_key"] == got["uniqKey"]
        assert row["physical_offset"] == got["commitLogOffset"]
        assert hashlib.sha256(row["body"]).hexdigest() == got["bodySha256"]
        assert row["store_timestamp"] == got["storeTimestamp"]
    inner = Counter(m["physical_offset"] for m in messages if m["inner_num"] is not None)
    assert len(inner) == 12  # records, as the harness counted them
    assert sum(inner.values()) == 70


def test_batch_queue_units_resolve_to_inner_batch_records(messages, store) -> None:
    """46-byte units: base offset = record QUEUEOFFSET, batch size = INNER_NUM (1 for a
    single send), size = TOTALSIZE, store time equal; bases contiguous per queue."""
    from rmqlib.queues.batchconsumequeue import decode_bcq_file

    records = {m["physical_offset"]: m for m in messages if m["inner_index"] == 0}
    targets = queue_files(store / "batchconsumequeue")
    assert targets.files and not targets.skipped
    units = []
    for file in targets.files:
        units += decode_bcq_file(file).to_record_batch().to_pylist()
    assert len(units) == 12 + 16
    for unit in units:
        record = records[unit["commitlog_offset"]]
        assert unit["size"] == record["total_size"]
        assert unit["msg_base_offset"] == record["queue_offset"]
        assert unit["batch_size"] == (record["inner_num"] or 1)
        assert unit["store_timestamp"] == record["store_timestamp"]
        assert (unit["topic"], unit["queue_id"]) == (record["topic"], record["queue_id"])


def test_ext_addresses_resolve_to_the_records_tags_and_store_time(messages, store) -> None:
    from rmqlib.queues.consumequeue import decode_cq_file
    from rmqlib.queues.consumequeue_ext import ExtResolver

    records = {m["physical_offset"]: m for m in messages if m["inner_index"] == 0}
    resolver = ExtResolver()
    resolved = bitmaps = 0
    for file in queue_files(store / "consumequeue").files:
        decode = decode_cq_file(file)
        for unit in decode.units():
            if not is_ext_addr(unit.tags_code):
                continue
            ext = resolver.queue_for(file, decode.topic, decode.queue_id).resolve(
                unit.tags_code)
            record = records[unit.commitlog_offset]
            assert ext.msg_store_time == record["store_timestamp"]
            if decode.topic != "SCHEDULE_TOPIC_XXXX":
                assert ext.tags_code == tags_code(record["tags"])
            resolved += 1
            bitmaps += bool(ext.filter_bitmap)
    assert resolved >= 60 and bitmaps > 0


def test_lmq_queues_hold_the_record_at_the_offsets_it_lists(messages, truth, store) -> None:
    from rmqlib.queues.consumequeue import decode_cq_file

    units = {}
    for file in queue_files(store / "consumequeue").files:
        decode = decode_cq_file(file)
        if decode.topic.startswith("%LMQ%"):
            units.update({(decode.topic, u.queue_offset): u.commitlog_offset
                          for u in decode.units()})
    rows = _jsonl(truth / "lmq.jsonl")
    assert len(rows) == 30
    for row in rows:
        physical = decode_offset_msg_id(row["offsetMsgId"]).commitlog_offset
        for queue, offset in zip(row["lmqQueues"], row["storedOffsets"], strict=True):
            assert units[(queue, offset)] == physical


def test_verify_is_clean_and_counts_every_feature(store) -> None:
    report = verify_store(store)
    assert report.errors == []
    assert {f.check for f in report.warnings} <= {"inventory"}
    counts = report.counts
    assert counts["bcq_units"] == 28
    assert counts["cq_ext_units"] >= 60
    assert counts["timers_pending"] == 8


def test_directory_dumps_of_every_queue_root_list_every_queue(store) -> None:
    for root, noun in (("consumequeue", "units"), ("batchconsumequeue", "units"),
                       ("consumequeue_ext", "units")):
        out = subprocess.run([sys.executable, "-m", "rmqlib.cli.main", "dump", "consumequeue",
                              str(store / root), "--json"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        rows = json_lines(out.stdout)
        queues = {(r["topic"], r["queue_id"]) for r in rows if r["kind"] == "unit"}
        on_disk = {(f.parent.parent.name, int(f.parent.name))
                   for f in queue_files(store / root).files if f.stat().st_size}
        assert queues and queues <= on_disk, root
        assert rows[-1][noun] == sum(r["kind"] == "unit" for r in rows)
    out = subprocess.run([sys.executable, "-m", "rmqlib.cli.main", "dump", "consumequeue",
                          str(store / "consumequeue" / "TopicExt"), "--json"],
                         capture_output=True, text=True)
    units = json_lines(out.stdout)
    units = [u for u in units if u["kind"] == "unit"]
    assert units and all("ext_tags_code" in u for u in units)


# --------------------------------------------------------------------------- Delta tables


@pytest.fixture(scope="module")
def loaded(spark, tmp_path_factory, store):  # type: ignore[no-untyped-def]
    """The features store loaded and reconciled as broker ``f``, snapshot ``s1``."""
    from lakehouse import load, reconcile_on_both_engines

    registry, summary = load(spark, tmp_path_factory.mktemp("features"), "f", "s1", store)
    reconcile_on_both_engines(spark, registry, "f", "s1")
    return registry, summary


@pytest.mark.spark
def test_delta_messages_have_one_row_per_inner_batch_member(loaded, truth) -> None:  # type: ignore[no-untyped-def]
    from jobs.lakehouse import tables as T

    registry, summary = loaded
    assert summary.quarantined_bytes == 0
    rows = registry.read(T.MESSAGES).where("broker = 'f' AND topic = 'TopicBatchCQ'").collect()
    members = [r for r in rows if r.inner_num is not None]
    assert len(members) == 70 and len(rows) == 86
    assert len({r.physical_offset for r in members}) == 12
    sent = {m["msgId"]: m for m in _jsonl(truth / "messages.jsonl")
            if m["topic"] == "TopicBatchCQ"}
    for row in rows:
        message = sent[row.msg_id]
        assert (row.queue_id, row.inner_index) == (message["storedQueueId"],
                                                  message["batchIndex"] or 0)
        assert row.body_sha256 == message["bodySha256"]
        assert row.tags == message["tags"] and list(row.keys) == message["keys"]


@pytest.mark.spark
def test_delta_queue_entries_carry_batch_fields_and_resolved_ext_codes(loaded) -> None:  # type: ignore[no-untyped-def]
    from jobs.lakehouse import tables as T

    registry, _ = loaded
    units = registry.read(T.QUEUE_ENTRIES).where("broker = 'f'")
    batch = units.where("queue_type = 'batchconsumequeue'").collect()
    assert len(batch) == 28 and all(r.batch_size >= 1 and r.store_time for r in batch)
    assert sum(r.batch_size for r in batch) == 86
    ext = units.where("kind = 'ext_address'").collect()
    assert len(ext) >= 60
    assert all(r.ext_tags_code is not None and r.store_time is not None for r in ext)
    assert any(r.ext_filter_bitmap for r in ext if r.topic == "TopicExt")


@pytest.mark.spark
def test_delta_pending_timers_and_checks_see_them(loaded, truth) -> None:  # type: ignore[no-untyped-def]
    from jobs.lakehouse import tables as T

    registry, _ = loaded
    pending = registry.read(T.PENDING_TIMERS).where("broker = 'f'").collect()
    expected = {t["wheelRecordCommitLogOffset"]: t["timerOutMs"]
                for t in _jsonl(truth / "timers.jsonl") if t["plan"] == "pending"}
    assert len(expected) == 8
    assert {r.commitlog_offset: int(r.delivery_time.timestamp() * 1000)
            for r in pending} == expected
    assert {r.state for r in pending} == {"pending"}
    findings = {(r.check_name, r.severity, r.affected)
                for r in registry.read(T.CHECK_RESULTS).where("broker = 'f'").collect()}
    assert ("timers_pending", "info", 8) in findings
    assert not [f for f in findings if f[1] == "error"], findings
    assert not [f for f in findings if f[0] in ("timer_overdue", "ext_address_unresolved",
                                                "cq_unit_mismatch", "record_without_unit")]


def test_get_finds_inner_batch_members_by_queue_offset_and_uniq_key(truth, store) -> None:
    """``rmq get --queue`` reads batchconsumequeue/ for a BatchCQ topic and answers with
    the member at that offset; a member's UNIQ_KEY (not in the index: the broker indexes
    the batch's only) is found inside the batches."""
    member = next(m for m in _jsonl(truth / "messages.jsonl")
                  if m.get("innerBatch") and m["batchIndex"] == 1)
    offset = member["innerBase"] + 1
    for argv in (["--queue", "TopicBatchCQ", str(member["storedQueueId"]), str(offset)],
                 ["--msg-id", member["msgId"], "--topic", "TopicBatchCQ"]):
        out = subprocess.run([sys.executable, "-m", "rmqlib.cli.main", "get", str(store), *argv,
                              "--json"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        [row] = json_lines(out.stdout)
        assert (row["kind"], row["uniq_key"], row["queue_offset"], row["inner_index"]) == (
            "member", member["msgId"], offset, 1)
        assert row["body_sha256"] == member["bodySha256"]


def test_verify_names_each_fault_in_batch_queues_ext_units_and_timers(store, tmp_path) -> None:
    """One fault each, in a copy: a batch unit's batch size, an ext unit's store time, a
    timer log unit's commitlog size. verify reports exactly that, where it is."""
    import shutil
    import struct

    copy = Path(shutil.copytree(store, tmp_path / "store"))
    bcq = queue_files(copy / "batchconsumequeue" / "TopicBatchCQ").files[0]
    data = bytearray(bcq.read_bytes())
    data[36:38] = struct.pack(">h", struct.unpack_from(">h", data, 36)[0] + 1)
    bcq.write_bytes(bytes(data))
    ext = queue_files(copy / "consumequeue_ext" / "TopicExt").files[0]
    data = bytearray(ext.read_bytes())
    data[10:18] = struct.pack(">q", struct.unpack_from(">q", data, 10)[0] + 1)
    ext.write_bytes(bytes(data))
    timerlog = sorted((copy / "timerlog").iterdir())[0]
    data = bytearray(timerlog.read_bytes())
    data[36:40] = struct.pack(">i", struct.unpack_from(">i", data, 36)[0] + 1)
    timerlog.write_bytes(bytes(data))

    report = verify_store(copy)
    by_check = {f.check: f for f in report.errors}
    # the batch size also breaks the next unit's base and leaves the record unit-less
    assert sorted(by_check) == ["bcq-base", "bcq-resolve", "cq-ext", "cq-missing",
                                "timerlog_record"], report.errors
    assert (Path(by_check["bcq-resolve"].path).name, by_check["bcq-resolve"].offset) == (
        bcq.name, 0)
    assert "unit batch_size" in by_check["bcq-resolve"].message
    assert "ext store time" in by_check["cq-ext"].message
    assert Path(by_check["timerlog_record"].path) == timerlog
    assert len(report.errors) == 5


def test_queue_bounds_equal_what_the_admin_api_reported(store, truth) -> None:
    """min/max per queue as the broker computes them (§4.2, §4.5): batch queues from the
    first base and the last base + batch size, consume queues (LMQ and ext ones too) from
    the files; against examineTopicStats (or the broker's own min/max requests for queues
    without a route)."""
    from rmqlib.queues.batchconsumequeue import bcq_bounds, decode_bcq_file
    from rmqlib.queues.consumequeue import decode_queue, queue_bounds, walk_queue_tree

    ours = {}
    for queue in walk_queue_tree(store / "batchconsumequeue").queues:
        span = bcq_bounds([decode_bcq_file(s.path) for s in queue.segments])
        ours[(queue.topic, queue.queue_id)] = (span.min_offset, span.max_offset)
    commitlog_min = min(s.start for s in list_segments(store / "commitlog"))
    for queue in walk_queue_tree(store / "consumequeue").queues:
        bounds = queue_bounds(decode_queue(queue), commitlog_min)
        ours[(queue.topic, queue.queue_id)] = (bounds.min_offset, bounds.max_offset)
    stats = _jsonl(truth / "topic_stats.jsonl")
    assert {s["topic"] for s in stats} >= {"TopicBatchCQ", "TopicExt", "%LMQ%feat-a"}
    for row in stats:  # a queue without files: the broker says 0, 0
        assert ours.get((row["topic"], row["queueId"]), (0, 0)) == (
            row["minOffset"], row["maxOffset"]), row
