"""The ``v5-growing`` store: hot copies of one running RocketMQ 5.5.0 broker.

``snapshots/s1``, ``s2`` and ``s3`` were copied while the broker kept running (and a trickle
producer kept sending); more messages were sent between the copies and, before s3, the
broker's own retention deleted the oldest commitlog files. These tests check that the
scenario really happened, reading the stores with rmqlib only (no Spark): s1 is a byte-exact
prefix of s2, s2 of s3 where s3 still has the file, every message the truth places in a
snapshot is there, and retention removed files from the front only.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from rmqlib.commitlog.records import (
    CommitLogRecord,
    OffsetNotFoundError,
    read_record_at,
    scan_store,
)
from rmqlib.config import load_config_dir
from rmqlib.queues.consumequeue import decode_queue, queue_bounds, walk_queue_tree

pytestmark = pytest.mark.broker

SNAPSHOTS = ("s1", "s2", "s3")
USER_TOPICS = {"TopicNormal": 4, "TopicBulk": 2}
MiB = 1024 * 1024
CQ_FILE_SIZE = 300 * 20
INDEX_FILE_SIZE = 40 + 4 * 500 + 20 * 2000
COPY_STEPS = ["config", "queues+index", "commitlog", "other", "checkpoint", "markers"]


# --------------------------------------------------------------------------- helpers


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@dataclass
class Scan:
    """Every commitlog record of one store root, by physical offset."""

    store: Path
    records: dict[int, CommitLogRecord] = field(default_factory=dict)
    logical_end: int | None = None
    issues: list = field(default_factory=list)
    files: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, store: Path) -> Scan:
        scan = scan_store(store / "commitlog")
        records = {r.physical_offset: r for r in scan}
        files = sorted(int(f.name) for f in (store / "commitlog").iterdir())
        return cls(store, records, scan.logical_end, list(scan.issues), files)

    @property
    def first_offset(self) -> int:
        return self.files[0]

    def full_files(self) -> int:
        """Commitlog files that end at or before the logical end (completed files)."""
        return sum(1 for start in self.files if start + MiB <= (self.logical_end or 0))

    def raw(self, record: CommitLogRecord) -> bytes:
        with open(record.path, "rb") as fh:
            fh.seek(record.position)
            return fh.read(record.total_size)

    def raw_at(self, offset: int, size: int) -> bytes | None:
        start = offset - offset % MiB
        path = self.store / "commitlog" / f"{start:020d}"
        if not path.is_file():
            return None
        with open(path, "rb") as fh:
            fh.seek(offset - start)
            return fh.read(size)


@dataclass
class Growing:
    root: Path
    meta: dict  # truth/snapshots.json
    messages: list[dict]
    run: dict
    scans: dict[str, Scan]

    def store(self, name: str) -> Path:
        return self.root / "store" if name == "final" else self.root / "snapshots" / name / "store"

    def snap(self, name: str) -> dict:
        return next(s for s in self.meta["snapshots"] if s["name"] == name)

    @property
    def retention(self) -> dict:
        return self.meta["retention"]

    def acked(self) -> list[dict]:
        return [m for m in self.messages if m["acked"]]


@pytest.fixture(scope="module")
def grow(growing_store: Path) -> Growing:
    truth = growing_store / "truth"
    meta = json.loads((truth / "snapshots.json").read_text(encoding="utf-8"))
    run = json.loads((truth / "run.json").read_text(encoding="utf-8"))
    messages = read_jsonl(truth / "messages.jsonl")
    g = Growing(growing_store, meta, messages, run, {})
    for name in (*SNAPSHOTS, "final"):
        g.scans[name] = Scan.of(g.store(name))
    return g


def user_ids(scan: Scan) -> list[str]:
    return [r.uniq_key for r in scan.records.values() if r.topic in USER_TOPICS]


# --------------------------------------------------------------------------- layout, truth


def test_run_describes_a_growing_v5_store(grow: Growing):
    assert grow.run["variant"] == "v5-growing"
    assert grow.run["scenario"] == "growing"
    assert grow.run["rocketmqVersion"] == "5.5.0"
    assert grow.run["shutdown"]["signal"] == "SIGTERM"
    assert grow.run["shutdown"]["abortFilePresent"] is False
    assert [s["name"] for s in grow.meta["snapshots"]] == list(SNAPSHOTS)


def test_snapshots_are_complete_store_roots_of_a_running_broker(grow: Growing):
    for name in SNAPSHOTS:
        store = grow.store(name)
        for d in ("config", "consumequeue", "index", "commitlog", "rocksdbstore"):
            assert (store / d).is_dir(), f"{name}: {d}/ missing"
        for f in ("checkpoint", "lock", "timerwheel", "config/topics.json",
                  "config/consumerOffset.json", "config/subscriptionGroup.json"):
            assert (store / f).is_file(), f"{name}: {f} missing"
        # hot copy: the broker was running, so its abort marker (holding its PID) is there
        assert (store / "abort").read_text().strip().isdigit()
        assert not list((store / "config").glob("*.tmp"))
        for f in (store / "commitlog").iterdir():
            assert f.stat().st_size == MiB, f
        for f in (store / "index").iterdir():
            assert f.stat().st_size == INDEX_FILE_SIZE, f
        for f in (store / "consumequeue").glob("*/*/*"):
            assert f.stat().st_size == CQ_FILE_SIZE, f
        snap = grow.snap(name)
        # The broker persists a config file by writing X.tmp, renaming X to X.bak and X.tmp
        # to X (MixAll.string2File): a copy listing X in between finds it gone, and the
        # store then has X.bak, which the broker itself would read (ConfigManager.load).
        # Nothing else may vanish from a running broker's store.
        config_races = [v for v in snap["vanished"] if v.startswith("config/")]
        assert [v for v in snap["vanished"] if v not in config_races] == []
        for vanished in config_races:
            name_only = vanished.removesuffix(".bak").removesuffix(".tmp")
            assert (store / name_only).is_file() or (store / f"{name_only}.bak").is_file()
        assert snap["commitlogFiles"] == sorted(f.name for f in (store / "commitlog").iterdir())
        assert snap["indexFiles"] == sorted(f.name for f in (store / "index").iterdir())
    assert not (grow.store("final") / "abort").exists()  # clean shutdown at the end


def test_copy_windows_are_ordered_and_follow_the_copy_order(grow: Growing):
    previous_end = 0
    for name in SNAPSHOTS:
        snap = grow.snap(name)
        assert previous_end < snap["copyStartMs"] <= snap["copyEndMs"]
        previous_end = snap["copyEndMs"]
        steps = snap["steps"]
        assert [s["step"] for s in steps] == COPY_STEPS
        times = [t for s in steps for t in (s["startMs"], s["endMs"])]
        assert times == sorted(times)
        assert snap["copyStartMs"] <= times[0] and times[-1] <= snap["copyEndMs"]
        assert steps[1]["entries"][:1] == ["consumequeue"] and "index" in steps[1]["entries"]
        assert snap["prepare"]["adminStatsMs"] <= snap["copyStartMs"]
    assert grow.retention["appliedAtMs"] > grow.snap("s2")["copyEndMs"]
    assert grow.retention["deletionCompleteSeenMs"] < grow.snap("s3")["copyStartMs"]


def test_truth_snapshot_fields_follow_the_copy_windows(grow: Growing):
    starts = {name: grow.snap(name)["copyStartMs"] for name in SNAPSHOTS}
    for m in grow.messages:
        if not m["acked"]:
            assert m["snapshot"] is None
            continue
        first = next((n for n in SNAPSHOTS if m["sendEndMs"] < starts[n]), "final")
        assert m["snapshot"] == first, m["seq"]
        assert m["commitLogOffset"] == int(m["offsetMsgId"][16:], 16)
        expected_in = [n for n in SNAPSHOTS if m["sendEndMs"] < starts[n]
                       and not (n == "s3" and m["deletedByRetention"])]
        assert m["inSnapshots"] == expected_in
        assert m["deletedByRetention"] == (
            m["commitLogOffset"] < grow.retention["commitlogFirstFileOffsetAfter"])
    phases = {m["phase"] for m in grow.messages}
    assert {"p1", "p2", "p3", "copy-s1", "copy-s2", "copy-s3"} <= phases


# --------------------------------------------------------------------------- commitlog growth


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_copy_ends_between_the_broker_offsets_seen_before_and_after_it(grow: Growing, name: str):
    snap, scan = grow.snap(name), grow.scans[name]
    assert snap["commitLogMinOffset"] == scan.first_offset == int(snap["commitlogFiles"][0])
    before, after = snap["commitLogMaxOffsetBeforeCopy"], snap["commitLogMaxOffsetAfterCopy"]
    assert before <= scan.logical_end <= after
    # the broker preallocates the next commitlog file: a hot copy has an all-zero file after the
    # one holding the logical end (the final store loses it at shutdown)
    assert scan.files[-1] >= scan.logical_end
    last = grow.store(name) / "commitlog" / f"{scan.files[-1]:020d}"
    assert last.read_bytes() == bytes(MiB)


def test_s1_is_a_byte_identical_prefix_of_s2(grow: Growing):
    s1, s2 = grow.scans["s1"], grow.scans["s2"]
    assert s1.issues == [] and s2.issues == []
    assert s1.records, "s1 holds no record"
    for offset, record in s1.records.items():
        assert s2.raw_at(offset, record.total_size) == s1.raw(record), offset
        assert s2.records[offset].uniq_key == record.uniq_key
    assert set(s1.records) < set(s2.records)
    assert s2.logical_end > s1.logical_end
    assert s2.full_files() >= s1.full_files() + 1
    assert s2.first_offset == s1.first_offset == 0


def test_s2_records_survive_byte_identical_in_s3_unless_retention_deleted_their_file(grow: Growing):
    s2, s3 = grow.scans["s2"], grow.scans["s3"]
    assert s3.issues == []
    first = s3.first_offset
    kept = deleted = 0
    for offset, record in s2.records.items():
        if offset >= first:
            assert s3.raw_at(offset, record.total_size) == s2.raw(record), offset
            kept += 1
        else:
            with pytest.raises(OffsetNotFoundError):
                read_record_at(s3.store / "commitlog", offset)
            deleted += 1
    assert kept > 0 and deleted > 0
    assert s3.logical_end > s2.logical_end  # p3 arrived after retention
    # the final store (after the clean shutdown) holds s3 byte for byte
    final = grow.scans["final"]
    assert final.first_offset == first
    for offset, record in s3.records.items():
        assert final.raw_at(offset, record.total_size) == s3.raw(record), offset


def test_retention_deleted_the_oldest_commitlog_files(grow: Growing):
    r = grow.retention
    s2_files = grow.snap("s2")["commitlogFiles"]
    s3_files = grow.snap("s3")["commitlogFiles"]
    deleted = r["deletedCommitlogFiles"]
    # exactly the files the harness aged past fileReservedTime went, the oldest ones
    assert deleted == r["agedCommitlogFiles"] and len(deleted) == 2
    assert s2_files[: len(deleted)] == deleted  # from the front only
    assert s3_files[0] == s2_files[len(deleted)]
    assert int(s3_files[0]) > int(s2_files[0])
    assert int(s3_files[0]) == r["commitlogFirstFileOffsetAfter"]
    for name in deleted:
        assert (grow.store("s2") / "commitlog" / name).is_file()
        assert not (grow.store("s3") / "commitlog" / name).exists()
        assert not (grow.store("final") / "commitlog" / name).exists()
    # the broker saw retention switched on, then the original settings again
    assert r["settingsSeenByBroker"]["fileReservedTime"] == "1"
    assert r["settingsSeenByBroker"]["cleanFileForciblyEnable"] == "false"
    for key, value in r["restoredSettings"].items():
        assert r["originalSettings"][key] == value


def test_queue_and_index_cleanup_followed_the_commitlog_deletion(grow: Growing):
    """The broker's consume-queue cleanup, judged from the s2 queue files themselves.

    A queue file goes when it is not the queue's last file and its last unit points below the new
    first commitlog offset (checked front to back); the queue's min offset then moves to its first
    unit at or above that offset.
    """
    r = grow.retention
    first = r["commitlogFirstFileOffsetAfter"]
    expected_deleted: list[str] = []
    expected_min: dict[tuple[str, int], int] = {}
    for queue in walk_queue_tree(grow.store("s2") / "consumequeue").queues:
        decoded_files = list(decode_queue(queue))
        below = 0
        front = True
        for i, decoded in enumerate(decoded_files):
            offsets = decoded.commitlog_offset
            below += int((offsets < first).sum())
            is_last = i == len(decoded_files) - 1
            full = decoded.count == CQ_FILE_SIZE // 20
            if front and not is_last and full and int(offsets.max()) < first:
                expected_deleted.append(f"{queue.topic}/{queue.queue_id}/{Path(decoded.path).name}")
            else:
                front = False
        expected_min[(queue.topic, queue.queue_id)] = below
    assert sorted(r["deletedConsumeQueueFiles"]) == sorted(expected_deleted)
    # two 1 MiB commitlog files gone: the first file of each TopicBulk queue lies below them
    assert {rel.split("/")[0] for rel in expected_deleted} == {"TopicBulk"}
    for rel in r["deletedConsumeQueueFiles"]:
        assert not (grow.store("s3") / "consumequeue" / rel).exists()
    after = {(row["topic"], row["queueId"]): row["minOffset"] for row in r["topicStatsAfter"]}
    assert after == expected_min
    for name in r["deletedIndexFiles"]:
        assert (grow.store("s2") / "index" / name).is_file()
        assert not (grow.store("s3") / "index" / name).exists()


# --------------------------------------------------------------------------- truth vs stores


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_every_message_placed_in_a_snapshot_is_there(grow: Growing, name: str):
    scan = grow.scans[name]
    placed = [m for m in grow.acked() if name in m["inSnapshots"]]
    assert placed
    for m in placed:
        record = scan.records.get(m["commitLogOffset"])
        assert record is not None, (name, m["seq"], m["offsetMsgId"])
        assert record.offset_msg_id == m["offsetMsgId"]
        assert record.uniq_key == m["msgId"]
        assert (record.topic, record.queue_id, record.queue_offset) == (
            m["storedTopic"], m["storedQueueId"], m["queueOffset"])
        assert hashlib.sha256(record.decompressed_body()).hexdigest() == m["bodySha256"]
    # read_record_at agrees with the scan (first and last placed message)
    for m in (placed[0], placed[-1]):
        assert read_record_at(scan.store / "commitlog", m["commitLogOffset"]).uniq_key == m["msgId"]


def test_messages_deleted_by_retention_are_gone_from_s3_only(grow: Growing):
    gone = [m for m in grow.acked() if m["deletedByRetention"]]
    assert gone
    assert {m["snapshot"] for m in gone} <= {"s1", "s2"}
    for m in gone:
        assert m["commitLogOffset"] in grow.scans["s2"].records
        assert m["commitLogOffset"] not in grow.scans["s3"].records
    with pytest.raises(OffsetNotFoundError):
        read_record_at(grow.store("s3") / "commitlog", gone[0]["commitLogOffset"])


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_snapshot_holds_its_sure_messages_and_maybe_some_in_flight_ones(grow: Growing, name: str):
    ids = user_ids(grow.scans[name])
    assert len(ids) == len(set(ids)), f"{name}: a message is stored twice"
    sure = {m["msgId"] for m in grow.acked() if name in m["inSnapshots"]}
    maybe = {m["msgId"] for m in grow.acked() if m["maybeSnapshot"] == name}
    assert sure <= set(ids) <= sure | maybe
    counts = grow.snap(name)["messages"]
    assert counts["guaranteedPresent"] == len(sure)
    assert counts["maybePresent"] == len(maybe)


def test_counts_per_snapshot(grow: Growing):
    counts = {name: len(user_ids(grow.scans[name])) for name in (*SNAPSHOTS, "final")}
    sent = grow.run["plan"]
    p1 = sum(sent["p1"].values())
    p2 = sum(sent["p2"].values())
    p3 = sum(sent["p3"].values())
    assert counts["s1"] >= p1
    assert counts["s2"] >= p1 + p2
    deleted = sum(1 for m in grow.acked() if m["deletedByRetention"])
    acked = len(grow.acked())
    assert counts["final"] == acked - deleted
    assert counts["s3"] >= p1 + p2 + p3 - deleted
    assert counts["s1"] < counts["s2"]
    # the final store holds exactly the acked messages retention left alone
    kept = {m["msgId"] for m in grow.acked() if not m["deletedByRetention"]}
    assert set(user_ids(grow.scans["final"])) == kept


# --------------------------------------------------------------------------- queues, offsets


def queue_decodes(store: Path) -> dict[tuple[str, int], list]:
    tree = walk_queue_tree(store / "consumequeue")
    return {(q.topic, q.queue_id): decode_queue(q) for q in tree.queues if q.topic in USER_TOPICS}


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_consume_queues_point_at_records_of_the_same_copy(grow: Growing, name: str):
    """Queues are copied before the commitlog, so every unit's record is in the copy."""
    scan = grow.scans[name]
    stats = {(r["topic"], r["queueId"]): r
             for r in read_jsonl(grow.root / "truth" / f"topic_stats_{name}.jsonl")}
    decodes = queue_decodes(grow.store(name))
    assert set(decodes) == {(t, q) for t, n in USER_TOPICS.items() for q in range(n)}
    for (topic, qid), files in decodes.items():
        bounds = queue_bounds(files, scan.first_offset)
        admin = stats[(topic, qid)]
        # admin stats were taken before the copy; only the trickle (TopicNormal) sends during it
        if topic == "TopicBulk":
            assert bounds.max_offset == admin["maxOffset"]
        else:
            assert bounds.max_offset >= admin["maxOffset"]
        assert bounds.min_offset == admin["minOffset"]
        for decoded in files:
            for unit in decoded.units():
                if unit.commitlog_offset < scan.first_offset:
                    continue  # the record's file was deleted by retention (s3 only)
                record = scan.records[unit.commitlog_offset]
                assert (record.topic, record.queue_id, record.queue_offset) == (
                    topic, qid, unit.queue_offset)
                assert record.total_size == unit.size
    if name == "s3":
        assert any(stats[("TopicBulk", q)]["minOffset"] > 0 for q in range(2))


def offsets_in_config(store: Path) -> dict[tuple[str, str, int], int]:
    loaded = load_config_dir(store / "config")
    assert loaded.consumer_offsets is not None
    return {(o.group, o.topic, o.queue_id): o.offset for o in loaded.consumer_offsets.offsets}


def admin_offsets(grow: Growing, name: str) -> dict[tuple[str, str, int], int]:
    rows = read_jsonl(grow.root / "truth" / f"consumer_groups_{name}.jsonl")
    return {(r["group"], r["topic"], r["queueId"]): r["consumerOffset"] for r in rows
            if r["topic"] in USER_TOPICS}


def test_consumer_offsets_move_between_snapshots(grow: Growing):
    admin = {name: admin_offsets(grow, name) for name in SNAPSHOTS}
    config = {name: offsets_in_config(grow.store(name)) for name in SNAPSHOTS}
    queues = [(t, q) for t, n in USER_TOPICS.items() for q in range(n)]
    for t, q in queues:
        for group in ("G_ALL", "G_STEP"):
            assert admin["s1"][(group, t, q)] < admin["s2"][(group, t, q)]
        # before s1 and s2 the harness waited for the broker to persist consumerOffset.json
        for name in ("s1", "s2"):
            assert config[name][("G_STEP", t, q)] == admin[name][("G_STEP", t, q)]
        assert config["s1"][("G_ALL", t, q)] < config["s2"][("G_ALL", t, q)]
        # G_STEP moved again (to 3/4) right after s2; s3's file was persisted before the copy
        assert admin["s2"][("G_STEP", t, q)] <= admin["s3"][("G_STEP", t, q)]
        assert config["s3"][("G_STEP", t, q)] == admin["s3"][("G_STEP", t, q)]
    assert all(admin["s2"][("G_STEP", "TopicBulk", q)] < admin["s3"][("G_STEP", "TopicBulk", q)]
               for q in range(2))
    for name in ("s1", "s2"):
        assert grow.snap(name)["prepare"]["consumerOffsetJsonPersisted"] is True
