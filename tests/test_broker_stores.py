"""The stores written by the real RocketMQ broker contain what the harness workload did.

Only the filesystem, JSON and a few struct reads (20-byte consume-queue units, the fixed
commitlog record header) are used here: these tests check the *harness*, not the decoder.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import struct
import zlib
from collections import Counter, defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker

ALL = ["v4-clean", "v4-killed", "v5-clean", "v5-killed"]
CLEAN = ["v4-clean", "v5-clean"]
KILLED = ["v4-killed", "v5-killed"]

MiB = 1024 * 1024
CQ_FILE_SIZE = 300 * 20
INDEX_FILE_SIZE = 40 + 4 * 500 + 20 * 2000
MAGIC_V1 = 0xDAA320A7 - (1 << 32)
MAGIC_V2 = 0xDAA320AB - (1 << 32)
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TIMER = "rmq_sys_wheel_timer"
USER_TOPICS = {"TopicNormal": 4, "TopicBulk": 2, "TopicOrder": 4, "TopicDelay": 2, "TopicTx": 2,
               "TopicBatch": 2, "TopicEmpty": 2}
GROUPS = ["G_ALL", "G_ORDERLY", "G_HALF", "G_IDLE", "G_FAIL", "G_NOOFFSET"]


# --------------------------------------------------------------------------- helpers


def fastjson_loads(text: str):
    """json.loads for fastjson output: quotes bare integer keys, never touching string contents."""
    out: list[str] = []
    i, n = 0, len(text)
    in_str = expect_key = False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
            continue
        if c == '"':
            in_str, expect_key = True, False
        elif c in "{,":
            expect_key = True
        elif expect_key and c in " \t\r\n":
            pass
        elif expect_key and (c.isdigit() or c == "-"):
            m = re.compile(r"-?\d+\s*:").match(text, i)
            if m:
                num = m.group(0).rstrip(": \t\r\n")
                out.append(f'"{num}"')
                i += len(num)
                expect_key = False
                continue
            expect_key = False
        else:
            expect_key = False
        out.append(c)
        i += 1
    return json.loads("".join(out))


def test_fastjson_loads_quotes_only_bare_integer_keys():
    text = '{"offsetTable":{"a@b":{0:12,1:-1},"x":"{3:4, 5:6}","arr":[1,2]}}'
    assert fastjson_loads(text) == {"offsetTable": {"a@b": {"0": 12, "1": -1}, "x": "{3:4, 5:6}",
                                                    "arr": [1, 2]}}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def cq_units(store: Path, topic: str, queue_id: int) -> list[tuple[int, int, int]]:
    """(commitlog offset, size, tagsCode) of every unit, stopping at the first empty one."""
    d = store / "consumequeue" / topic / str(queue_id)
    units: list[tuple[int, int, int]] = []
    if not d.is_dir():
        return units
    for f in sorted(d.iterdir(), key=lambda p: int(p.name)):
        assert int(f.name) == len(units) * 20, f"gap before {f}"
        data = f.read_bytes()
        for pos in range(0, len(data), 20):
            off, size, tags = struct.unpack_from(">qiq", data, pos)
            if off < 0 or size <= 0:
                return units
            units.append((off, size, tags))
    return units


def offset_of(offset_msg_id: str) -> int:
    """Commitlog offset named by an IPv4 offsetMsgId (8 hex IP, 8 hex port, 16 hex offset)."""
    assert len(offset_msg_id) == 32, offset_msg_id
    return int(offset_msg_id[16:], 16)


class CommitLog:
    def __init__(self, store: Path) -> None:
        self.files = {int(f.name): f.read_bytes() for f in (store / "commitlog").iterdir()}

    def record(self, offset: int) -> dict:
        base = offset - offset % MiB
        buf, pos = self.files[base], offset % MiB
        total, magic, _crc, qid, _flag, qoff, phys, sysflag = struct.unpack_from(
            ">iiiiiqqi", buf, pos)
        b = 20 if sysflag & 0x10 else 8
        s = 20 if sysflag & 0x20 else 8
        p = pos + 48 + b + 8 + s + 4 + 8
        (body_len,) = struct.unpack_from(">i", buf, p)
        body = buf[p + 4:p + 4 + body_len]
        p += 4 + body_len
        if magic == MAGIC_V2:
            (tlen,) = struct.unpack_from(">h", buf, p)
            p += 2
        else:
            tlen = buf[p]
            p += 1
        topic = buf[p:p + tlen].decode()
        p += tlen
        (plen,) = struct.unpack_from(">h", buf, p)
        props_raw = buf[p + 2:p + 2 + plen]
        assert p + 2 + plen - pos == total, "length rule"
        props: dict[str, str] = {}
        for chunk in props_raw.decode("utf-8", "replace").split("\x02"):
            if "\x01" in chunk:
                k, v = chunk.split("\x01", 1)
                if k and v:
                    props[k] = v
        return {"total": total, "magic": magic, "queueId": qid, "queueOffset": qoff, "phys": phys,
                "sysflag": sysflag, "body": body, "topic": topic, "props": props,
                "propsRaw": props_raw}


class Variant:
    def __init__(self, name: str, root: Path) -> None:
        self.name = name
        self.root = root
        self.store = root / "store"
        self.clean = name.endswith("-clean")
        self.v5 = name.startswith("v5")
        self.run = json.loads((root / "truth" / "run.json").read_text(encoding="utf-8"))
        self.messages = read_jsonl(root / "truth" / "messages.jsonl")
        self.groups = read_jsonl(root / "truth" / "consumer_groups.jsonl")
        self.consumed = read_jsonl(root / "truth" / "consumed.jsonl")

    @functools.cached_property
    def commitlog(self) -> CommitLog:
        return CommitLog(self.store)

    def acked(self, **where) -> list[dict]:
        return [m for m in self.messages
                if m["acked"] and all(m.get(k) == v for k, v in where.items())]

    def config(self, name: str):
        return fastjson_loads((self.store / "config" / name).read_text(encoding="utf-8"))


_VARIANTS: dict[str, Variant] = {}


@pytest.fixture(scope="session")
def variants(broker_stores) -> dict[str, Variant]:
    for name, root in broker_stores.items():
        if name not in _VARIANTS:
            _VARIANTS[name] = Variant(name, root)
    return _VARIANTS


@pytest.fixture(params=ALL)
def any_variant(request, variants) -> Variant:
    return variants[request.param]


@pytest.fixture(params=CLEAN)
def clean(request, variants) -> Variant:
    return variants[request.param]


@pytest.fixture(params=KILLED)
def killed(request, variants) -> Variant:
    return variants[request.param]


def fail_plan(m: dict) -> bool:
    return m["userProperties"].get("failPlan") == "dlq"


# --------------------------------------------------------------------------- every variant


def test_cache_layout_and_marker(broker_stores, store_harness):
    stores = store_harness
    assert set(broker_stores) == set(ALL)
    assert stores.DEFAULT_VARIANT == "v5-clean"
    for name, root in broker_stores.items():
        assert root.name == name
        marker = json.loads((root / "COMPLETE").read_text())
        assert marker["fingerprint"] == stores.fingerprint(name)
        for sub in ("store", "truth", "logs"):
            assert (root / sub).is_dir()
        assert not (root / "work").exists()
        assert (root / "logs" / "broker.log").stat().st_size > 0


def test_run_json_describes_the_run(any_variant: Variant):
    v = any_variant
    run = v.run
    assert run["variant"] == v.name
    assert run["rocketmqVersion"] == ("5.5.0" if v.v5 else "4.9.7")
    assert run["shutdownMode"] == ("clean" if v.clean else "killed")
    conf = run["brokerConfig"]
    assert conf["mappedFileSizeCommitLog"] == str(MiB)
    assert conf["mappedFileSizeConsumeQueue"] == str(CQ_FILE_SIZE)
    assert (conf["maxHashSlotNum"], conf["maxIndexNum"]) == ("500", "2000")
    assert len(conf["messageDelayLevel"].split()) == 18
    assert conf["namesrvAddr"].startswith("127.0.0.1:") and conf["brokerIP1"] == "127.0.0.1"
    counts = run["counts"]
    assert counts["messagesSent"] == len(v.messages)
    assert counts["messagesAcked"] == len(v.acked())
    for kind, c in counts["byKind"].items():
        assert c["sent"] == sum(1 for m in v.messages if m["kind"] == kind)
        assert c["acked"] == len(v.acked(kind=kind))
    assert counts["messagesAcked"] > 2500
    assert counts["ackedBodyOverCompressThreshold"] > 50
    if not v.v5:
        assert counts["byKind"]["empty"]["acked"] == 20
    else:
        assert counts["byKind"]["timer"]["acked"] == 20
    assert [m["seq"] for m in v.messages] == list(range(len(v.messages)))


def test_commitlog_spans_several_one_mib_files(any_variant: Variant):
    files = sorted((any_variant.store / "commitlog").iterdir(), key=lambda p: int(p.name))
    assert len(files) >= 4
    for i, f in enumerate(files):
        assert f.name == f"{i * MiB:020d}"
        assert f.stat().st_size == MiB
    last_acked = max(offset_of(m["offsetMsgId"]) for m in any_variant.acked())
    assert last_acked >= 3 * MiB


def test_index_files_roll_over(any_variant: Variant):
    files = sorted((any_variant.store / "index").iterdir())
    if "killed" in any_variant.name and files[-1].stat().st_size == 0:
        # killed while rolling: the new file was opened but not yet mapped to its size
        # (rmqlib.indexfile.UNSIZED_INDEX_REASON); the one before it filled up
        files = files[:-1]
    assert len(files) >= 3
    counts = []
    for f in files:
        data = f.read_bytes()
        assert len(data) == INDEX_FILE_SIZE
        begin_ts, end_ts, begin_off, end_off, _slots, count = struct.unpack_from(">qqqqii", data, 0)
        assert 0 < begin_ts <= end_ts and 0 <= begin_off <= end_off
        counts.append((begin_ts, count))
    counts.sort()
    assert all(c == 2000 for _, c in counts[:-1])  # full files hold maxIndexNum - 1 entries
    entries = sum(c - 1 for _, c in counts)
    assert entries >= len(any_variant.acked())  # at least the UNIQ_KEY of every message


def test_consume_queues_exist_for_every_topic_used(any_variant: Variant):
    v = any_variant
    cq = v.store / "consumequeue"
    expected = {"TopicNormal", "TopicBulk", "TopicOrder", "TopicDelay", "TopicTx", "TopicBatch",
                SCHEDULE, HALF, OP_HALF, "%RETRY%G_FAIL", "%DLQ%G_FAIL"}
    expected |= {TIMER, "TopicTimer"} if v.v5 else {"TopicEmpty"}
    present = {p.name for p in cq.iterdir()}
    assert expected <= present, expected - present
    for topic in expected:
        for qdir in (cq / topic).iterdir():
            files = sorted(qdir.iterdir())
            for f in files:
                # a kill between creating a queue's next file and mapping it leaves it 0 bytes
                unsized_by_kill = not v.clean and f == files[-1] and f.stat().st_size == 0
                assert f.stat().st_size == CQ_FILE_SIZE or unsized_by_kill, f
    for topic, queues in USER_TOPICS.items():
        if topic in present:
            assert {int(q.name) for q in (cq / topic).iterdir()} <= set(range(queues))
    for q in (0, 1):  # 700+ units per TopicBulk queue: the 300-unit files roll over
        assert len(list((cq / "TopicBulk" / str(q)).iterdir())) >= 3


def test_abort_file_only_after_a_kill(any_variant: Variant):
    abort = any_variant.store / "abort"
    assert (any_variant.store / "checkpoint").stat().st_size == 4096
    assert (any_variant.store / "lock").exists()
    if any_variant.clean:
        assert not abort.exists()
        assert any_variant.run["shutdown"]["abortFilePresent"] is False
    else:
        assert abort.exists()
        assert any_variant.run["shutdown"]["abortFilePresent"] is True
        if any_variant.v5:  # 5.x writes the broker PID into it
            assert abort.read_text().strip() == str(any_variant.run["kill"]["brokerPid"])
        else:
            assert abort.stat().st_size == 0


def test_every_acked_send_is_in_the_commitlog(any_variant: Variant):
    """offsetMsgId names the record the send created; header, topic, body and properties match."""
    v = any_variant
    cl = v.commitlog
    compressed_seen = 0
    for m in v.acked():
        off = offset_of(m["offsetMsgId"])
        rec = cl.record(off)
        assert rec["magic"] in (MAGIC_V1, MAGIC_V2)
        assert rec["phys"] == off
        assert (rec["topic"], rec["queueId"], rec["queueOffset"]) == (
            m["storedTopic"], m["storedQueueId"], m["queueOffset"]), m["seq"]
        assert rec["sysflag"] & 0xC == 0  # half / schedule / plain records are NOT_TYPE
        body = rec["body"]
        if rec["sysflag"] & 0x1:
            body = zlib.decompress(body)
            compressed_seen += 1
        assert hashlib.sha256(body).hexdigest() == m["bodySha256"], m["seq"]
        assert len(body) == m["bodyLength"]
        assert bool(rec["sysflag"] & 0x1) == m["compressedByClient"], m["seq"]
        props = rec["props"]
        if m["tags"] is not None:
            assert props["TAGS"] == m["tags"]
        if m["keys"]:
            assert props["KEYS"] == " ".join(m["keys"])
        for k, val in m["userProperties"].items():
            assert props[k] == val, (m["seq"], k)
            assert f"{k}\x01{val}".encode() in rec["propsRaw"]
        if m["storedTopic"] != m["topic"]:
            assert props["REAL_TOPIC"] == m["topic"]
        if m["delayLevel"]:
            assert props["DELAY"] == str(m["delayLevel"])
        if not m["batch"]:
            assert props["UNIQ_KEY"] == m["msgId"]
    assert compressed_seen == sum(1 for m in v.acked() if m["compressedByClient"])
    assert compressed_seen > 50


def test_non_ascii_properties_are_stored_as_utf8(any_variant: Variant):
    msgs = [m for m in any_variant.acked(kind="normal") if "note" in m["userProperties"]]
    assert msgs
    for m in msgs[:50]:
        rec = any_variant.commitlog.record(offset_of(m["offsetMsgId"]))
        assert "订单✓🚀".encode() in rec["propsRaw"]
    tagged = [m for m in any_variant.acked(kind="normal") if m["tags"] == "标签"]
    assert tagged
    keyed = [m for m in any_variant.acked()
             if any(k.startswith(("键-", "🔑")) for k in m["keys"])]
    assert keyed


def test_groups_in_config_json(any_variant: Variant):
    v = any_variant
    subs = v.config("subscriptionGroup.json")["subscriptionGroupTable"]
    assert set(GROUPS) <= set(subs)
    topics = v.config("topics.json")["topicConfigTable"]
    for topic, queues in USER_TOPICS.items():
        assert topics[topic]["readQueueNums"] == queues == topics[topic]["writeQueueNums"]
    for topic in (SCHEDULE, HALF, "%RETRY%G_FAIL", "%DLQ%G_FAIL", "%RETRY%G_ALL"):
        assert topic in topics, topic
    assert topics[SCHEDULE]["readQueueNums"] == 18
    offsets = v.config("consumerOffset.json")["offsetTable"]
    # the never-consuming group: its explicit offset-0 commit is recorded for every queue
    for topic in ("TopicNormal", "TopicBulk"):
        assert offsets[f"{topic}@G_IDLE"] == {str(q): 0 for q in range(USER_TOPICS[topic])}
    # subscribed, never committed: no offsets at all
    assert not any(key.endswith("@G_NOOFFSET") for key in offsets)
    delay = v.config("delayOffset.json")["offsetTable"]
    assert {"1", "2", "3", "4"} <= set(delay)


def test_consume_stats_without_rows_are_recorded(any_variant: Variant):
    """examineConsumeStats, subscribed group without offsets: 4.9 throws, 5.x returns nothing."""
    no_rows = any_variant.run["notes"]["consumeStatsWithoutRows"]
    assert set(no_rows) == {"G_NOOFFSET"}
    if any_variant.v5:
        assert no_rows["G_NOOFFSET"].startswith("no rows")
    else:
        assert "CODE: 206" in no_rows["G_NOOFFSET"]
    assert {r["group"] for r in any_variant.groups} == set(GROUPS) - {"G_NOOFFSET"}
    for r in any_variant.groups:
        assert r["diff"] == r["brokerOffset"] - r["consumerOffset"]


# --------------------------------------------------------------------------- clean shutdown


def test_plain_messages_fill_their_queues_exactly(clean: Variant):
    """Acked messages stored in their own topic (not delayed/transactional/timer) = CQ units."""
    by_queue: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for m in clean.acked():
        if m["storedTopic"] == m["topic"]:
            by_queue[(m["topic"], m["queueId"])].append(m)
    assert len(by_queue) >= 12
    for (topic, qid), msgs in by_queue.items():
        units = cq_units(clean.store, topic, qid)
        assert len(units) == len(msgs), (topic, qid)
        assert sorted(m["queueOffset"] for m in msgs) == list(range(len(msgs)))
        for m in msgs:
            off, size, _ = units[m["queueOffset"]]
            assert off == offset_of(m["offsetMsgId"])
            assert clean.commitlog.record(off)["total"] == size


def test_delayed_messages_and_retries_go_through_schedule_topic(clean: Variant):
    delayed = Counter(m["delayLevel"] for m in clean.acked(kind="delayed"))
    assert set(delayed) == {1, 2, 3, 4}
    failing = sum(1 for m in clean.acked() if fail_plan(m))
    assert failing > 10
    # a consumer retry is re-sent at level 3 + reconsumeTimes: 3 and 4 with maxReconsumeTimes=2
    retries = {1: 0, 2: 0, 3: failing, 4: failing}
    delay_offsets = clean.config("delayOffset.json")["offsetTable"]
    for level in (1, 2, 3, 4):
        units = cq_units(clean.store, SCHEDULE, level - 1)
        assert len(units) == delayed[level] + retries[level], level
        assert delay_offsets[str(level)] == len(units)  # everything was delivered
    # the delivered copies land in the real topic
    assert sum(len(cq_units(clean.store, "TopicDelay", q)) for q in (0, 1)) == sum(delayed.values())


def test_retry_and_dead_letter_queues(clean: Variant):
    failing = [m for m in clean.acked() if fail_plan(m)]
    assert len(cq_units(clean.store, "%RETRY%G_FAIL", 0)) == 2 * len(failing)
    assert len(cq_units(clean.store, "%DLQ%G_FAIL", 0)) == len(failing)
    retried = {(c["msgId"], c["reconsumeTimes"]) for c in clean.consumed
               if c["group"] == "G_FAIL" and c["queueTopic"] == "%RETRY%G_FAIL"}
    assert retried == {(m["msgId"], t) for m in failing for t in (1, 2)}
    dlq_ids = {clean.commitlog.record(off)["props"]["UNIQ_KEY"]
               for off, _, _ in cq_units(clean.store, "%DLQ%G_FAIL", 0)}
    assert dlq_ids == {m["msgId"] for m in failing}


def test_transactions_commit_and_rollback(clean: Variant):
    tx = clean.acked(kind="transaction")
    assert Counter(m["txPlan"] for m in tx) == {"commit": 20, "rollback": 20,
                                               "check-commit": 10, "check-rollback": 10}
    assert all(m["txCheckCount"] >= 1 for m in tx if m["txPlan"].startswith("check-"))
    half = cq_units(clean.store, HALF, 0)
    assert len(half) >= len(tx)  # checked half messages are put back as renewed copies
    assert cq_units(clean.store, OP_HALF, 0)
    committed = {m["msgId"] for m in tx if m["transaction"] == "commit"}
    seen = []
    for q in (0, 1):
        for off, _, _ in cq_units(clean.store, "TopicTx", q):
            rec = clean.commitlog.record(off)
            assert rec["sysflag"] & 0xC == 0x8  # COMMIT
            seen.append(rec["props"]["UNIQ_KEY"])
    assert sorted(seen) == sorted(committed)  # each commit exactly once, no rollback visible


def test_consumer_offsets_match_admin_snapshot(clean: Variant):
    offsets = clean.config("consumerOffset.json")["offsetTable"]
    compared = 0
    for row in clean.groups:
        units = cq_units(clean.store, row["topic"], row["queueId"])
        assert row["brokerOffset"] == len(units), row
        entry = offsets.get(f"{row['topic']}@{row['group']}", {})
        # the admin API reports an absent / negative offset as 0
        assert entry.get(str(row["queueId"]), 0) == row["consumerOffset"], row
        compared += str(row["queueId"]) in entry
    assert compared >= 30
    rows = {(r["group"], r["topic"], r["queueId"]): r for r in clean.groups}
    for (group, _topic, _qid), r in rows.items():
        if group == "G_HALF":
            assert r["consumerOffset"] == r["brokerOffset"] // 2
        if group == "G_IDLE":
            assert r["consumerOffset"] == 0 and r["diff"] == r["brokerOffset"] > 0
        if group in ("G_ALL", "G_ORDERLY", "G_FAIL"):
            assert r["diff"] == 0, r
    assert {t for g, t, _ in rows if g == "G_HALF"} >= {"TopicNormal", "TopicBulk"}


# --------------------------------------------------------------------------- killed


def test_killed_truth_separates_acked_from_in_flight(killed: Variant):
    tail = [m for m in killed.messages if m["phase"] == "tail"]
    acked = [m for m in tail if m["acked"]]
    in_flight = [m for m in tail if not m["acked"]]
    assert len(acked) >= 300
    assert 1 <= len(in_flight) <= 3  # each tail thread stops after its first failed send
    for m in in_flight:
        assert m["sendStatus"] == "EXCEPTION" and m["error"]
        assert m["msgId"] and m["offsetMsgId"] is None and m["queueOffset"] is None
        assert m["queueId"] is not None  # the queue the selector had chosen
    kill = killed.run["kill"]
    assert kill["signal"] == "SIGKILL" and kill["exitCode"] == 137
    assert all(m["sendEndMs"] <= kill["deadAtMs"] + 100 for m in acked)
    assert {r["snapshotMs"] for r in killed.groups} and all(
        r["snapshotMs"] <= kill["killAtMs"] for r in killed.groups)
    # the snapshot's broker offsets are covered by sends (acked, or in flight at the kill)
    direct = {"TopicNormal", "TopicBulk", "TopicOrder", "TopicBatch", "TopicEmpty"}
    checked = 0
    for r in killed.groups:
        if r["topic"] in direct:
            sent = sum(1 for m in tail + [m for m in killed.messages if m["phase"] == "main"]
                       if m["topic"] == r["topic"] and m["queueId"] == r["queueId"]
                       and (m["acked"] or m in in_flight))
            assert r["brokerOffset"] <= sent, r
            checked += 1
    assert checked >= 10
