"""The ``v5-features`` store: one real RocketMQ 5.5.0 broker with every optional store feature on.

These tests check that the scenario really happened and that its truth is self-consistent, reading
the store bytes with ``struct`` only (no rmqlib: its decoders for these features are what this
store is for): every send acked, the counts per feature, the 5.x-only directories present, and for
each feature a handful of byte-level facts the truth predicts (inner-batch records and their batch
consume-queue units, ext units and filter bitmaps, LMQ queue offsets, the ``__CRC32#`` trailer,
zlib/lz4/zstd bodies, timer-log units, magic-v2 records, IPv6 hosts).
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections import Counter, defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker

MiB = 1024 * 1024
MAGIC_V1 = -626843481
MAGIC_V2 = -626843477
BCQ_UNIT = 46
EXT_MAX_ADDR = -2147483649
BATCH_SIZES = [1, 2, 3, 5, 8, 10, 1, 16, 4, 7, 1, 12]
EXPECTED_KINDS = {
    "batchcq": sum(BATCH_SIZES),
    "batchcq-single": 16,
    "ext": 60,
    "lmq": 30,
    "compress": 45,
    "retry": 20,
    "pop": 10,
    "timer-fire": 12,
    "timer-pending": 8,
}
CODEC_BITS = {"LZ4": 1, "ZSTD": 2, "ZLIB": 3}
LMQ_NAMES = ["%LMQ%feat-a", "%LMQ%feat-b", "%LMQ%feat-c"]


# --------------------------------------------------------------------------- helpers


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def offset_of(offset_msg_id: str) -> int:
    """Commitlog offset from an offsetMsgId (IPv4: 32 hex chars, IPv6: 56)."""
    return int(offset_msg_id[-16:], 16)


def parse_props(raw: bytes) -> dict[str, str]:
    props = {}
    for chunk in raw.decode("utf-8", "replace").split("\x02"):
        if "\x01" in chunk:
            k, v = chunk.split("\x01", 1)
            if k and v:
                props[k] = v
    return props


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[int, bytes] = {}

    def _file(self, start: int) -> bytes:
        if start not in self._files:
            self._files[start] = (self.root / "commitlog" / f"{start:020d}").read_bytes()
        return self._files[start]

    def raw(self, offset: int) -> bytes:
        data = self._file(offset - offset % MiB)
        pos = offset % MiB
        (size,) = struct.unpack_from(">i", data, pos)
        return data[pos:pos + size]

    def record(self, offset: int) -> dict:
        """Decodes the record at a commitlog offset (spec §2.1)."""
        b = self.raw(offset)
        total, magic, body_crc, queue_id, _flag, queue_offset, phys, sysflag = struct.unpack_from(
            ">iiiiiqqi", b, 0)
        p = 40 + 8  # born timestamp
        born_len = 20 if sysflag & 0x10 else 8
        born = b[p:p + born_len]
        p += born_len
        (store_ts,) = struct.unpack_from(">q", b, p)
        p += 8
        store_len = 20 if sysflag & 0x20 else 8
        store_host = b[p:p + store_len]
        p += store_len
        reconsume, _prepared, body_len = struct.unpack_from(">iqi", b, p)
        p += 16
        body = b[p:p + body_len]
        p += body_len
        if magic == MAGIC_V2:
            (tlen,) = struct.unpack_from(">h", b, p)
            p += 2
        else:
            (tlen,) = struct.unpack_from(">b", b, p)
            p += 1
        topic = b[p:p + tlen].decode("utf-8")
        p += tlen
        (plen,) = struct.unpack_from(">h", b, p)
        p += 2
        props_raw = b[p:p + plen]
        return {
            "raw": b, "total": total, "magic": magic, "body_crc": body_crc, "queue_id": queue_id,
            "queue_offset": queue_offset, "physical_offset": phys, "sysflag": sysflag,
            "born_host": born, "store_timestamp": store_ts, "store_host": store_host,
            "reconsume_times": reconsume, "body": body, "topic": topic, "topic_length_bytes": tlen,
            "props_raw": props_raw, "props": parse_props(props_raw),
        }


def inner_members(body: bytes) -> list[dict]:
    """The client batch encoding stored as one inner-batch body (spec §2.6)."""
    out, p = [], 0
    while p < len(body):
        size, _magic, _crc, _flag, body_len = struct.unpack_from(">iiiii", body, p)
        q = p + 20
        member_body = body[q:q + body_len]
        q += body_len
        (plen,) = struct.unpack_from(">h", body, q)
        q += 2
        out.append({"size": size, "body": member_body, "props": parse_props(body[q:q + plen])})
        assert q + plen == p + size, "member size field does not match its content"
        p += size
    return out


def crc_trailer_ok(rec: dict) -> bool:
    """Spec §2.4: the last 20 property bytes are __CRC32# 0x01 <10 digits, LSD first> 0x02."""
    tail = rec["props_raw"][-20:]
    if not (tail.startswith(b"__CRC32#\x01") and tail.endswith(b"\x02")):
        return False
    value = int(tail[9:19].decode()[::-1])
    return value == zlib.crc32(rec["raw"][: rec["total"] - 20]) & 0x7FFFFFFF


def queue_units(root: Path, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """(commitlog offset, size, tagsCode) of every written unit of one consume queue, in order."""
    units = []
    qdir = root / "consumequeue" / topic / str(queue_id)
    for f in sorted(qdir.iterdir()):
        data = f.read_bytes()
        for i in range(0, len(data) - 19, 20):
            off, size, tags = struct.unpack_from(">qiq", data, i)
            if off == 0 and size == 0 and tags == 0:
                break
            units.append((off, size, tags))
    return units


def bcq_units(root: Path, topic: str, queue_id: int) -> list[dict]:
    units = []
    for f in sorted((root / "batchconsumequeue" / topic / str(queue_id)).iterdir()):
        data = f.read_bytes()
        for i in range(0, len(data) - BCQ_UNIT + 1, BCQ_UNIT):
            off, size, tags, ts, base, batch, compacted, _ = struct.unpack_from(
                ">qiqqqhii", data, i)
            if size <= 0:
                break
            units.append({"offset": off, "size": size, "tags": tags, "store_ts": ts, "base": base,
                          "batch": batch, "compacted": compacted})
    return units


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def feat(features_store: Path):
    truth = features_store / "truth"
    return {
        "root": features_store,
        "store": Store(features_store / "store"),
        "run": json.loads((truth / "run.json").read_text()),
        "messages": read_jsonl(truth / "messages.jsonl"),
        "consumed": read_jsonl(truth / "consumed.jsonl"),
        "groups": read_jsonl(truth / "consumer_groups.jsonl"),
        "topic_stats": read_jsonl(truth / "topic_stats.jsonl"),
        "batches": read_jsonl(truth / "batches.jsonl"),
        "lmq": read_jsonl(truth / "lmq.jsonl"),
        "timers": read_jsonl(truth / "timers.jsonl"),
        "pops": read_jsonl(truth / "pops.jsonl"),
        "queue_records": read_jsonl(truth / "queue_records.jsonl"),
    }


def max_offset(feat, topic: str, queue_id: int) -> int:
    rows = [r for r in feat["topic_stats"] if r["topic"] == topic and r.get("queueId") == queue_id]
    assert len(rows) == 1, (topic, queue_id, rows)
    return rows[0]["maxOffset"]


# --------------------------------------------------------------------------- the run


def test_files_and_clean_shutdown(features_store: Path, feat):
    truth = features_store / "truth"
    for name in ("messages.jsonl", "consumed.jsonl", "consumer_groups.jsonl", "topic_stats.jsonl",
                 "batches.jsonl", "lmq.jsonl", "timers.jsonl", "pops.jsonl", "queue_records.jsonl",
                 "runtime_stats.json", "run.json"):
        assert (truth / name).stat().st_size > 0, name
    store = features_store / "store"
    for q in range(4):
        assert bcq_units(store, "TopicBatchCQ", q), f"batchconsumequeue/TopicBatchCQ/{q} is empty"
    for q in range(2):
        ext = store / "consumequeue_ext" / "TopicExt" / str(q)
        assert any(f.read_bytes().strip(b"\0") for f in ext.iterdir()), ext
    timerlog = list((store / "timerlog").iterdir())
    assert timerlog and any(f.read_bytes().strip(b"\0") for f in timerlog)
    assert (store / "timerwheel").is_file()
    for name in LMQ_NAMES:
        assert queue_units(store, name, 0), name
    run = feat["run"]
    assert run["shutdown"]["signal"] == "SIGTERM" and run["shutdown"]["exited"]
    assert run["shutdown"]["abortFilePresent"] is False and not (store / "abort").exists()
    cfg = run["brokerConfigEffective"]
    for key in ("enableConsumeQueueExt", "enablePropertyFilter", "enableCalcFilterBitMap",
                "enableLmq", "enableMultiDispatch", "enabledAppendPropCRC", "timerWheelEnable"):
        assert cfg[key] == "true", key
    assert run["loopback"] == "::1" and run["ipv6"] is True
    assert run["notPossible"] == []


def test_every_send_acked_and_counts(feat):
    msgs = feat["messages"]
    assert all(m["acked"] and m["sendStatus"] == "SEND_OK" for m in msgs)
    assert Counter(m["kind"] for m in msgs) == EXPECTED_KINDS
    assert [m["seq"] for m in msgs] == list(range(len(msgs)))
    assert len({m["msgId"] for m in msgs}) == len(msgs)
    assert len(feat["batches"]) == len(BATCH_SIZES)
    assert sorted(b["size"] for b in feat["batches"]) == sorted(BATCH_SIZES)
    compressed = Counter(m["compressType"] for m in msgs if m["compressedByClient"])
    assert compressed == {"ZLIB": 13, "LZ4": 13, "ZSTD": 13}
    counts = feat["run"]["counts"]
    assert counts["messagesAcked"] == len(msgs) == sum(EXPECTED_KINDS.values())
    assert counts["innerBatchRecords"] == len(BATCH_SIZES)
    assert counts["timersPending"] == 8 and counts["timersFired"] == 12
    assert counts["lmqDispatches"] == 2 * EXPECTED_KINDS["lmq"]


def test_ipv6_hosts_and_ids(feat):
    store = feat["store"]
    for m in feat["messages"]:
        assert len(m["offsetMsgId"]) == 56, m["offsetMsgId"]
        rec = store.record(offset_of(m["offsetMsgId"]))
        assert rec["sysflag"] & 0x30 == 0x30
        assert rec["born_host"][:16] == bytes(15) + b"\x01"  # ::1
        assert rec["store_host"][:16] == bytes(15) + b"\x01"


# --------------------------------------------------------------------------- features


def test_inner_batches_and_batch_consume_queue(feat):
    store, root = feat["store"], feat["root"] / "store"
    members = defaultdict(list)
    for m in feat["messages"]:
        if m["kind"] == "batchcq":
            members[m["batchId"]].append(m)
    units = {q: bcq_units(root, "TopicBatchCQ", q) for q in range(4)}
    for b in feat["batches"]:
        rec = store.record(offset_of(b["offsetMsgId"]))
        assert rec["topic"] == "TopicBatchCQ" and rec["queue_id"] == b["queueId"]
        assert rec["sysflag"] & 0xC0 == 0xC0
        assert rec["queue_offset"] == b["innerBase"]
        assert rec["props"]["INNER_NUM"] == str(b["size"])
        assert rec["props"]["INNER_BASE"] == str(b["innerBase"])
        assert rec["props"]["UNIQ_KEY"] == b["batchUniqKey"]
        assert crc_trailer_ok(rec)
        inner = inner_members(rec["body"])
        mine = sorted(members[b["batchId"]], key=lambda m: m["batchIndex"])
        assert len(inner) == len(mine) == b["size"]
        for i, (got, want) in enumerate(zip(inner, mine, strict=True)):
            assert want["batchIndex"] == i and want["queueOffset"] == b["innerBase"] + i
            assert want["innerBase"] == b["innerBase"] and want["batchUniqKey"] == b["batchUniqKey"]
            assert hashlib.sha256(got["body"]).hexdigest() == want["bodySha256"]
            assert got["props"]["UNIQ_KEY"] == want["msgId"] == b["memberMsgIds"][i]
            assert got["props"].get("TAGS") == want["tags"]
            assert got["props"].get("KEYS", "") == " ".join(want["keys"])
            for k, v in want["userProperties"].items():
                assert got["props"][k] == v
        unit = [u for u in units[b["queueId"]] if u["offset"] == offset_of(b["offsetMsgId"])]
        assert len(unit) == 1
        assert unit[0]["base"] == b["innerBase"] and unit[0]["batch"] == b["size"]
        assert unit[0]["size"] == rec["total"]
    # single sends: batch size 1 units; units tile each queue's offsets exactly up to maxOffset
    for q, us in units.items():
        nxt = 0
        for u in us:
            assert u["base"] == nxt and u["compacted"] == -1
            nxt += u["batch"]
        assert nxt == max_offset(feat, "TopicBatchCQ", q)
    singles = [m for m in feat["messages"] if m["kind"] == "batchcq-single"]
    for m in singles:
        rec = store.record(offset_of(m["offsetMsgId"]))
        assert rec["sysflag"] & 0xC0 == 0 and rec["queue_offset"] == m["queueOffset"]
        assert any(u["offset"] == offset_of(m["offsetMsgId"]) and u["batch"] == 1
                   for u in units[m["queueId"]])
    # the push consumer got every member at INNER_BASE + index (the client unwraps inner batches)
    seen = {(c["queueId"], c["queueOffset"], c["msgId"]) for c in feat["consumed"]
            if c["group"] == "G_BATCHCQ"}
    for m in feat["messages"]:
        if m["kind"].startswith("batchcq"):
            assert (m["queueId"], m["queueOffset"], m["msgId"]) in seen


def test_consume_queue_ext_and_filter_bitmaps(feat):
    root = feat["root"] / "store"
    ext_msgs = {(m["queueId"], m["queueOffset"]): m for m in feat["messages"] if m["kind"] == "ext"}
    bitmaps = {}
    for q in range(2):
        ext_dir = root / "consumequeue_ext" / "TopicExt" / str(q)
        ext = b"".join(f.read_bytes() for f in sorted(ext_dir.iterdir()))
        for qo, (off, _size, tags) in enumerate(queue_units(root, "TopicExt", q)):
            assert tags <= EXT_MAX_ADDR, "a TopicExt unit without an ext address"
            pos = tags - (-(2 ** 63))
            usize, tags_code, _store_time, bm_size = struct.unpack_from(">hqqh", ext, pos)
            assert usize == 20 + bm_size and bm_size == 14
            m = ext_msgs[(q, qo)]
            assert off == offset_of(m["offsetMsgId"])
            want_tag = 0 if m["tags"] is None else _java_hash(m["tags"])
            assert tags_code == want_tag
            bitmaps[(q, qo)] = ext[pos + 20:pos + 20 + bm_size]
    assert len(bitmaps) == EXPECTED_KINDS["ext"]
    # one SQL92 consumer: its bloom bits are set exactly for the messages its expression matches
    for key, bm in bitmaps.items():
        assert any(bm) == ext_msgs[key]["sqlMatch"], key
    sql_got = {c["msgId"] for c in feat["consumed"] if c["group"] == "G_SQL"}
    tag_got = {c["msgId"] for c in feat["consumed"] if c["group"] == "G_TAG"}
    assert sql_got == {m["msgId"] for m in ext_msgs.values() if m["sqlMatch"]}
    assert tag_got == {m["msgId"] for m in ext_msgs.values() if m["tagMatch"]}


def _java_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - 2 ** 32 if h >= 2 ** 31 else h


def test_lmq_offsets(feat):
    store, root = feat["store"], feat["root"] / "store"
    lmq_units = {name: queue_units(root, name, 0) for name in LMQ_NAMES}
    assert len(feat["lmq"]) == EXPECTED_KINDS["lmq"]
    for row in feat["lmq"]:
        assert row["storedOffsets"] == row["lmqExpectedOffsets"], row
        rec = store.record(offset_of(row["offsetMsgId"]))
        assert rec["props"]["INNER_MULTI_DISPATCH"] == ",".join(row["lmqQueues"])
        assert rec["props"]["INNER_MULTI_QUEUE_OFFSET"] == row["storedOffsetsRaw"]
        # spec §2.5 says 5.x drops WAIT for multi-dispatch records; 5.5.0 keeps it (viewMessage too)
        assert rec["props"].get("WAIT") == row["storedWait"] == "true"
        for name, off in zip(row["lmqQueues"], row["storedOffsets"], strict=True):
            assert lmq_units[name][off][0] == offset_of(row["offsetMsgId"])
    for name in LMQ_NAMES:
        assert len(lmq_units[name]) == max_offset(feat, name, 0)
        assert len(lmq_units[name]) == feat["run"]["lmqFinalCounters"][name]
    # PULL_MESSAGE on each LMQ queue returned the same messages at the same positions
    pulled = {(r["queueTopic"], r["queuePosition"]): r for r in feat["queue_records"]
              if r["queueTopic"].startswith("%LMQ%")}
    assert len(pulled) == 2 * EXPECTED_KINDS["lmq"]
    for row in feat["lmq"]:
        for name, off in zip(row["lmqQueues"], row["storedOffsets"], strict=True):
            got = pulled[(name, off)]
            assert got["msgId"] == row["msgId"]
            assert got["commitLogOffset"] == offset_of(row["offsetMsgId"])
            assert got["queueOffset"] == row["queueOffset"]  # the record's own (main queue) offset


def test_crc_trailer_on_every_record(feat):
    store = feat["store"]
    offsets = {offset_of(m["offsetMsgId"]) for m in feat["messages"]}
    offsets |= {r["commitLogOffset"] for r in feat["queue_records"]}
    offsets |= {c["commitLogOffset"] for c in feat["consumed"]}
    for off in sorted(offsets):
        assert crc_trailer_ok(store.record(off)), off


def test_compressed_bodies(feat):
    import lz4.frame
    import zstandard

    store = feat["store"]
    decompress = {"ZLIB": zlib.decompress, "LZ4": lz4.frame.decompress,
                  "ZSTD": lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b)}
    for m in feat["messages"]:
        if m["kind"] != "compress":
            continue
        rec = store.record(offset_of(m["offsetMsgId"]))
        assert hashlib.sha256(rec["body"]).hexdigest() == m["storedBodySha256"]
        if m["compressedByClient"]:
            assert rec["sysflag"] & 0x1
            assert (rec["sysflag"] & 0x700) >> 8 == CODEC_BITS[m["compressType"]]
            plain = decompress[m["compressType"]](rec["body"])
        else:
            assert rec["sysflag"] & 0x701 == 0
            plain = rec["body"]
        assert hashlib.sha256(plain).hexdigest() == m["bodySha256"]
        assert len(plain) == m["bodyLength"]


def test_timers(feat):
    store, root = feat["store"], feat["root"] / "store"
    log = b"".join(f.read_bytes() for f in sorted((root / "timerlog").iterdir()))
    units = []
    for i in range(0, len(log) - 51, 52):
        size, _prev, magic, write_ms, delta, off, osize, _hash, _ = struct.unpack_from(
            ">iqiqiqiiq", log, i)
        if size != 52:
            break
        units.append({"delivery": write_ms + delta, "offset": off, "size": osize, "magic": magic})
    by_offset = {u["offset"]: u for u in units}
    assert len(feat["timers"]) == 20
    for t in feat["timers"]:
        rec = store.record(offset_of(t["wheelOffsetMsgId"]))
        assert rec["topic"] == "rmq_sys_wheel_timer" and rec["props"]["REAL_TOPIC"] == t["topic"]
        assert int(rec["props"]["TIMER_OUT_MS"]) == t["timerOutMs"]
        u = by_offset[offset_of(t["wheelOffsetMsgId"])]
        assert u["size"] == rec["total"] and u["delivery"] == t["timerOutMs"] and u["magic"] & 1
        if t["plan"] == "pending":
            assert not t["fired"] and t["timerOutMs"] > t["sendStartMs"] + 3_590_000
        else:
            assert t["fired"], t
            fired = store.record(offset_of(t["firedOffsetMsgId"]))
            assert fired["topic"] == "TopicTimerFeat" and fired["props"]["UNIQ_KEY"] == t["msgId"]
            assert fired["store_timestamp"] >= t["timerOutMs"]
            assert fired["queue_offset"] == t["firedQueueOffset"]
    fired = sum(1 for t in feat["timers"] if t["fired"])
    assert fired == 12 == sum(max_offset(feat, "TopicTimerFeat", q) for q in range(2))


def test_magic_v2_records(feat):
    store = feat["store"]
    pop_topic = feat["run"]["popRetryTopic"]
    assert len(pop_topic.encode()) == 140
    revived = [r for r in feat["queue_records"] if r["queueTopic"] == pop_topic]
    popped = {p["msgId"] for p in feat["pops"]}
    assert len(popped) == EXPECTED_KINDS["pop"] and {r["msgId"] for r in revived} == popped
    for r in revived:
        rec = store.record(r["commitLogOffset"])
        assert rec["magic"] == MAGIC_V2 and rec["topic"] == pop_topic
        assert rec["topic_length_bytes"] == 140
        assert rec["reconsume_times"] == 1 and rec["queue_offset"] == r["queueOffset"]
        assert hashlib.sha256(rec["body"]).hexdigest() == r["bodySha256"]
        assert crc_trailer_ok(rec)
    # the classic retry topic of a 120-character group is exactly 127 bytes: still magic v1
    retry_topic = feat["run"]["longGroupRetryTopic"]
    assert len(retry_topic) == 127
    retried = [c for c in feat["consumed"] if c["queueTopic"] == retry_topic]
    assert len(retried) == sum(1 for m in feat["messages"] if m.get("failPlan"))
    for c in retried:
        assert store.record(c["commitLogOffset"])["magic"] == MAGIC_V1
    dlq = {r["msgId"] for r in feat["queue_records"]
           if r["queueTopic"] == feat["run"]["longGroupDlqTopic"]}
    assert dlq == {m["msgId"] for m in feat["messages"] if m.get("failPlan") == "dlq"}


def test_consumer_groups_caught_up(feat):
    rows = [r for r in feat["groups"] if r["group"] in ("G_BATCHCQ", "G_FEAT", "G_TAG", "G_SQL")
            and not r["topic"].startswith("%RETRY%")]
    assert rows
    for r in rows:
        if r["group"] in ("G_TAG", "G_SQL"):
            # filter consumers: messages the broker filters out move the offset only with
            # a later pull, so the committed offset may trail (seen: G_SQL 24 of 30)
            assert r["consumerOffset"] <= r["brokerOffset"], r
        else:
            assert r["consumerOffset"] == r["brokerOffset"], r
        assert r["brokerOffset"] == max_offset(feat, r["topic"], r["queueId"]), r
    assert {r["topic"] for r in rows if r["group"] == "G_BATCHCQ"} >= {"TopicBatchCQ"}
