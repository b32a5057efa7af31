"""The ``v5-cluster`` store: a real RocketMQ 5.5.0 cluster, broker-a master + slave, broker-b.

``s1/<broker>/store`` are hot copies taken while the slave ``broker-a-s1`` was frozen (SIGSTOP)
and a burst had gone to broker-a, so the slave lags behind its master; ``s2/<broker>/store`` are
the store roots after every broker's clean shutdown, the slave caught up. These tests check the
stores against the harness's ground truth with rmqlib only (no Spark): consume-queue ends equal
the offsets each broker reported, the masters' consumerOffset.json equals the admin's offsets,
the slave's commitlog is a byte-exact prefix of its master's at s1 and identical at s2, and every
acked message sits at its offsetMsgId's physical offset.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rmqlib.commitlog.records import CommitLogRecord, scan_store
from rmqlib.config import load_config_dir
from rmqlib.queues.consumequeue import decode_queue, queue_bounds, walk_queue_tree

pytestmark = pytest.mark.broker

BROKERS = ("broker-a", "broker-a-s1", "broker-b")
MASTERS = ("broker-a", "broker-b")
SLAVE = "broker-a-s1"
SNAPSHOTS = ("s1", "s2")
GROUPS = ("G_CAUGHT", "G_LAG", "G_STOPPED")
USER_TOPICS = {"TopicCluster": 4, "TopicClusterB": 2}  # queues per master
MiB = 1024 * 1024




def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@dataclass
class Scan:
    """Every commitlog record of one store root, by physical offset."""

    records: dict[int, CommitLogRecord]
    logical_end: int
    issues: list


@dataclass
class Cluster:
    root: Path
    run: dict
    brokers: dict[str, dict]
    snapshots: dict[str, dict]
    expected: dict
    messages: list[dict]
    scans: dict[tuple[str, str], Scan] = field(default_factory=dict)

    def store(self, snap: str, broker: str) -> Path:
        return self.root / snap / broker / "store"

    def truth(self, name: str) -> Path:
        return self.root / "truth" / name

    def jsonl(self, name: str) -> list[dict]:
        return read_jsonl(self.truth(name))

    def json(self, name: str):  # type: ignore[no-untyped-def]
        return json.loads(self.truth(name).read_text(encoding="utf-8"))

    def scan(self, snap: str, broker: str) -> Scan:
        key = (snap, broker)
        if key not in self.scans:
            s = scan_store(self.store(snap, broker) / "commitlog")
            records = {r.physical_offset: r for r in s}
            self.scans[key] = Scan(records, s.logical_end or 0, list(s.issues))
        return self.scans[key]

    def acked(self) -> list[dict]:
        return [m for m in self.messages if m["acked"]]


@pytest.fixture(scope="module")
def cl(cluster_store: Path) -> Cluster:
    truth = cluster_store / "truth"
    brokers = {b["name"]: b for b in json.loads((truth / "brokers.json").read_text())}
    snapshots = {s["snapshot"]: s for s in json.loads((truth / "snapshots.json").read_text())}
    return Cluster(
        cluster_store,
        json.loads((truth / "run.json").read_text()),
        brokers,
        snapshots,
        json.loads((truth / "expected.json").read_text()),
        read_jsonl(truth / "messages.jsonl"),
    )


def read_range(commitlog: Path, start: int, end: int) -> bytes:
    """Bytes [start, end) of a commitlog directory of 1 MiB files."""
    out = bytearray()
    pos = start
    while pos < end:
        base = pos - pos % MiB
        with open(commitlog / f"{base:020d}", "rb") as fh:
            fh.seek(pos - base)
            chunk = fh.read(min(end, base + MiB) - pos)
        if not chunk:
            break
        out += chunk
        pos += len(chunk)
    return bytes(out)


def queue_max_offsets(store: Path) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, queueId) -> (min, max) from the copied consume-queue files (rmqlib)."""
    tree = walk_queue_tree(store / "consumequeue")
    out = {}
    for q in tree.queues:
        bounds = queue_bounds(decode_queue(q))
        out[(q.topic, q.queue_id)] = (bounds.min_offset, bounds.max_offset)
    return out


def config_offsets(store: Path) -> dict[tuple[str, str, int], int]:
    """Our groups' offsets in config/consumerOffset.json (empty when the file is absent)."""
    loaded = load_config_dir(store / "config")
    assert not loaded.errors, loaded.errors
    if loaded.consumer_offsets is None:
        return {}
    return {(o.group, o.topic, o.queue_id): o.offset
            for o in loaded.consumer_offsets.offsets if o.group in GROUPS}


# --------------------------------------------------------------------------- layout, truth


def test_run_describes_a_5_5_0_cluster(cl: Cluster):
    assert cl.run["variant"] == "v5-cluster"
    assert cl.run["scenario"] == "cluster"
    assert cl.run["rocketmqVersion"] == "5.5.0"
    assert list(cl.brokers) == list(BROKERS)
    a, s, b = (cl.brokers[n] for n in BROKERS)
    def identity(x: dict) -> tuple:
        return (x["brokerName"], x["brokerId"], x["role"], x["master"])

    assert identity(a) == ("broker-a", 0, "master", None)
    assert identity(s) == ("broker-a", 1, "slave", "broker-a")
    assert identity(b) == ("broker-b", 0, "master", None)
    assert {x["cluster"] for x in cl.brokers.values()} == {"RmqCluster"}
    for name in SNAPSHOTS:
        info = cl.json(f"cluster_info_{name}.json")
        assert info == {"RmqCluster": {
            "broker-a": {"0": a["address"], "1": s["address"]},
            "broker-b": {"0": b["address"]},
        }}
    for broker in BROKERS:
        shutdown = cl.run["shutdown"][broker]
        # the JVM exits with 128 + 15 after its shutdown hooks ran; the hook removed abort
        assert (shutdown["signal"], shutdown["exitCode"], shutdown["abortFilePresent"]) == (
            "SIGTERM", 143, False)
    assert cl.expected["statuses"] == {"G_CAUGHT": "OK", "G_LAG": "WARN", "G_STOPPED": "STOP"}
    assert cl.expected["slaveCaughtUpAtS2"] is True
    assert cl.snapshots["s1"]["slavePaused"] is True
    assert cl.snapshots["s2"]["slavePaused"] is False


def test_stores_are_complete_roots(cl: Cluster):
    for name in SNAPSHOTS:
        for broker in BROKERS:
            store = cl.store(name, broker)
            for d in ("commitlog", "consumequeue", "index", "config"):
                assert (store / d).is_dir(), f"{name}/{broker}: {d}/ missing"
            assert (store / "checkpoint").is_file()
            # s1: hot copies of running brokers (abort holds the PID); s2: after a clean shutdown
            assert (store / "abort").exists() == (name == "s1"), f"{name}/{broker}"
            for f in (store / "commitlog").iterdir():
                assert f.stat().st_size == MiB, f


def test_messages_follow_the_plan(cl: Cluster):
    phases = {}
    for m in cl.messages:
        phases[m["phase"]] = phases.get(m["phase"], 0) + 1
        assert m["acked"], m["seq"]
        assert (m["brokerName"], m["queueId"]) == (m["plannedBrokerName"], m["plannedQueueId"])
        assert m["commitLogOffset"] == int(m["offsetMsgId"][16:], 16)
        assert m["inSnapshots"] == (["s2"] if m["phase"] == "after_s1" else ["s1", "s2"])
    assert phases == {"before_s1": 600, "burst": 120, "after_s1": 400}
    burst = [m for m in cl.messages if m["phase"] == "burst"]
    assert {(m["brokerName"], m["topic"]) for m in burst} == {("broker-a", "TopicCluster")}


# --------------------------------------------------------------------------- queues, offsets


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_consume_queue_ends_equal_the_offsets_each_broker_reported(cl: Cluster, name: str):
    rows = cl.jsonl(f"broker_offsets_{name}.jsonl")
    assert {r["broker"] for r in rows} == set(BROKERS)
    for broker in BROKERS:
        bounds = queue_max_offsets(cl.store(name, broker))
        mine = [r for r in rows if r["broker"] == broker]
        topics = {r["topic"] for r in mine}
        assert set(USER_TOPICS) <= topics
        for r in mine:
            # a queue that never received a message has no directory: [0, 0)
            low, high = bounds.get((r["topic"], r["queueId"]), (0, 0))
            assert (low, high) == (r["minOffset"], r["maxOffset"]), (name, broker, r)
        assert sum(r["maxOffset"] for r in mine if r["topic"] in USER_TOPICS) > 0


def test_slave_queues_lag_at_s1_and_match_at_s2(cl: Cluster):
    def user_max(name: str, broker: str) -> dict[tuple[str, int], int]:
        return {(r["topic"], r["queueId"]): r["maxOffset"]
                for r in cl.jsonl(f"broker_offsets_{name}.jsonl")
                if r["broker"] == broker and r["topic"] in USER_TOPICS}

    s1_master, s1_slave = user_max("s1", "broker-a"), user_max("s1", SLAVE)
    assert set(s1_master) == set(s1_slave)
    for key, value in s1_master.items():
        if key[0] == "TopicCluster":  # the burst went to broker-a's TopicCluster queues only
            assert s1_slave[key] < value, key
        else:
            assert s1_slave[key] == value, key
    assert user_max("s2", SLAVE) == user_max("s2", "broker-a")


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_consumer_offset_files_equal_the_admin_offsets(cl: Cluster, name: str):
    rows = cl.jsonl(f"consumer_offsets_{name}.jsonl")
    stats = cl.jsonl(f"consume_stats_{name}.jsonl")
    for broker in MASTERS:
        truth = {(r["group"], r["topic"], r["queueId"]): r["offset"]
                 for r in rows if r["broker"] == broker}
        admin = {(r["group"], r["topic"], r["queueId"]): r["consumerOffset"]
                 for r in stats if r["brokerName"] == broker}
        assert truth == admin
        assert {g for g, _, _ in truth} == set(GROUPS)
        assert config_offsets(cl.store(name, broker)) == truth, (name, broker)
    # the slave: what it answered at s2 (5.5.0: nothing, its offset sync fails), nothing at s1
    slave_rows = {(r["group"], r["topic"], r["queueId"]): r["offset"]
                  for r in rows if r["broker"] == SLAVE}
    assert config_offsets(cl.store(name, SLAVE)) == slave_rows
    if name == "s1":
        assert slave_rows == {}
    else:
        sync = cl.snapshots["s2"]["slaveSync"]
        assert sync["round"]["startMs"] > sync["afterMs"]
        assert sync["offsetsFound"] == len(slave_rows)
        if not slave_rows:  # the 5.5.0 bug: recorded as not possible
            assert sync["round"]["consumerOffsets"] == "exception"
            assert any("slave consumer offsets" in n for n in cl.run["notPossible"])


def test_consumer_groups_behave_as_planned(cl: Cluster):
    stats = {name: {(r["group"], r["topic"], r["brokerName"], r["queueId"]): r
                    for r in cl.jsonl(f"consume_stats_{name}.jsonl")} for name in SNAPSHOTS}
    progress = {name: {r["group"]: r for r in cl.jsonl(f"consumer_progress_{name}.jsonl")}
                for name in SNAPSHOTS}
    assert set(stats["s1"]) == set(stats["s2"])
    for name in SNAPSHOTS:
        for group in GROUPS:
            rows = [r for k, r in stats[name].items() if k[0] == group]
            assert {r["brokerName"] for r in rows} == set(MASTERS)
            assert progress[name][group]["diffTotal"] == sum(r["diff"] for r in rows)
        assert all(r["diff"] == 0 for k, r in stats[name].items() if k[0] == "G_CAUGHT")
    for key, r1 in stats["s1"].items():
        r2 = stats["s2"][key]
        group, topic = key[0], key[1]
        if topic.startswith("%RETRY%"):
            continue
        assert r2["brokerOffset"] > r1["brokerOffset"], key  # every queue got messages after s1
        if group == "G_LAG":  # moves, but falls further behind
            assert r1["diff"] > 0 and r2["consumerOffset"] > r1["consumerOffset"], key
            assert r2["diff"] > r1["diff"], key
        elif group == "G_STOPPED":  # never moves again
            assert r2["consumerOffset"] == r1["consumerOffset"] > 0, key
            assert r2["diff"] > r1["diff"] > 0, key
    assert progress["s2"]["G_LAG"]["diffTotal"] > progress["s1"]["G_LAG"]["diffTotal"]


# --------------------------------------------------------------------------- the slave's commitlog


def test_slave_commitlog_is_a_strict_prefix_of_its_master_at_s1(cl: Cluster):
    master, slave = cl.scan("s1", "broker-a"), cl.scan("s1", SLAVE)
    assert master.issues == [] and slave.issues == []
    assert 0 < slave.logical_end < master.logical_end
    a_log = cl.store("s1", "broker-a") / "commitlog"
    s_log = cl.store("s1", SLAVE) / "commitlog"
    assert read_range(s_log, 0, slave.logical_end) == read_range(a_log, 0, slave.logical_end)
    # nothing after the slave's end in its copy (the transfer stopped at a record boundary)
    tail = read_range(s_log, slave.logical_end, slave.logical_end + 4096)
    assert tail == bytes(len(tail))
    assert set(slave.records) < set(master.records)
    lag = master.logical_end - slave.logical_end
    assert lag == cl.expected["slaveLagBytesAtS1"]
    ha = cl.json("ha_s1.json")
    conn, = ha["masterHa"]["connections"]
    assert ha["masterHa"]["masterCommitLogMaxOffset"] == master.logical_end
    assert conn["slaveAckOffset"] == slave.logical_end
    assert conn["diff"] == lag == ha["slaveLagBytes"]
    assert ha["brokers"][SLAVE]["commitLogMaxOffset"] == slave.logical_end
    assert ha["brokers"]["broker-a"]["commitLogMaxOffset"] == master.logical_end
    assert lag >= 200 * 1024


def test_slave_commitlog_is_identical_to_its_master_at_s2(cl: Cluster):
    master, slave = cl.scan("s2", "broker-a"), cl.scan("s2", SLAVE)
    assert master.issues == [] and slave.issues == []
    ha = cl.json("ha_s2.json")
    end = ha["brokers"]["broker-a"]["commitLogMaxOffset"]
    assert master.logical_end == slave.logical_end == end
    assert ha["brokers"][SLAVE]["commitLogMaxOffset"] == end
    conn, = ha["masterHa"]["connections"]
    assert (conn["slaveAckOffset"], conn["diff"]) == (end, 0)
    a_log = cl.store("s2", "broker-a") / "commitlog"
    s_log = cl.store("s2", SLAVE) / "commitlog"
    assert read_range(s_log, 0, end) == read_range(a_log, 0, end)
    assert sorted(f.name for f in a_log.iterdir()) == sorted(f.name for f in s_log.iterdir())


# --------------------------------------------------------------------------- messages


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_every_acked_message_is_at_its_physical_offset(cl: Cluster, name: str):
    slave_end = cl.scan(name, SLAVE).logical_end
    counts = {b: 0 for b in BROKERS}
    for m in cl.acked():
        if name not in m["inSnapshots"]:
            continue
        holders = [m["brokerName"]]
        if m["brokerName"] == "broker-a" and m["commitLogOffset"] < slave_end:
            holders.append(SLAVE)
        elif m["brokerName"] == "broker-a":
            assert name == "s1" and m["phase"] == "burst", m["seq"]  # only the burst is missing
        for broker in holders:
            record = cl.scan(name, broker).records.get(m["commitLogOffset"])
            assert record is not None, (name, broker, m["seq"])
            assert record.offset_msg_id == m["offsetMsgId"]
            assert record.uniq_key == m["msgId"]
            assert (record.topic, record.queue_id, record.queue_offset) == (
                m["topic"], m["queueId"], m["queueOffset"])
            assert hashlib.sha256(record.decompressed_body()).hexdigest() == m["bodySha256"]
            counts[broker] += 1
    for broker in BROKERS:
        user = [r for r in cl.scan(name, broker).records.values() if r.topic in USER_TOPICS]
        assert len(user) == counts[broker] > 0, (name, broker)
