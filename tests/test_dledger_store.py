"""The ``v5-dledger`` store: a real RocketMQ 5.5.0 broker whose commitlog is a DLedger (Raft) log.

One broker with ``enableDLegerCommitLog=true`` in a single-node group ``n0`` (it elects itself):
the messages live in ``dledger-n0/data/<20-digit start offset>`` (1 MiB files of entries: a 48-byte
big-endian header, then a commitlog record) with ``dledger-n0/index/`` (32-byte units), the Raft
``checkpoint`` and ``currterm`` properties files, and **no** ``commitlog/``. These tests read the
store with ``struct`` only (no rmqlib: its DLedger decoder is what this store is for) and check
the facts a decoder author needs against the harness's truth: the entry header fields, BLANK
file tails, the body's PHYSICALOFFSET, the index units, every acked message at an entry body,
consume-queue units pointing at entry bodies, and the hot copy ``snapshots/s1/store``.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest

pytestmark = pytest.mark.broker

MiB = 1024 * 1024
# magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodySize
ENTRY_HEADER = struct.Struct(">iiqqqiiii")
ENTRY_HEADER_SIZE = 48
INDEX_UNIT = struct.Struct(">iqiqq")  # magic pos size index term
ENTRY_MAGIC = 1
BLANK_MAGIC = -1
MIN_BLANK_LEN = 8
#: DLedgerConfig.mappedFileSizeForEntryIndex default (32 * 5 Mi): RocketMQ does not set it.
INDEX_FILE_SIZE = 32 * 5 * MiB
MSG_MAGIC_V1 = -626843481
CQ_UNIT = struct.Struct(">qiq")
USER_TOPICS = {"TopicDLedger": 4, "TopicDLedgerBulk": 2, "TopicDLedgerDelay": 2}




def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def read_props(path: Path) -> dict[str, str]:
    """A java.util.Properties file as DLedger writes it (a '#date' comment, key=value lines)."""
    out = {}
    for line in path.read_text(encoding="latin-1").splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
    return out


# --------------------------------------------------------------------------- the walk


@dataclass(frozen=True)
class Entry:
    file_start: int
    position: int
    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int
    body: bytes


@dataclass(frozen=True)
class Tail:
    """How a data file ends: 'blank' (magic -1, bytes left) or 'zeros', at file position."""

    kind: str
    position: int
    declared: int | None
    rest_zero: bool


@dataclass(frozen=True)
class DataFile:
    start: int
    size: int
    entries: list[Entry]
    tail: Tail


def walk_data_file(path: Path) -> DataFile:
    data = path.read_bytes()
    start = int(path.name)
    entries, p = [], 0
    while True:
        if p + 8 > len(data):
            tail = Tail("end", p, None, True)
            break
        magic, size = struct.unpack_from(">ii", data, p)
        if magic == BLANK_MAGIC:
            tail = Tail("blank", p, size, not any(data[p + 8:]))
            break
        if magic == 0 and size == 0:
            tail = Tail("zeros", p, None, not any(data[p:]))
            break
        assert magic == ENTRY_MAGIC, f"{path.name}@{p}: magic {magic}"
        fields = ENTRY_HEADER.unpack_from(data, p)
        body = data[p + ENTRY_HEADER_SIZE:p + size]
        entries.append(Entry(start, p, *fields, body))
        p += size
    return DataFile(start, len(data), entries, tail)


@dataclass
class Store:
    root: Path
    files: list[DataFile]

    @property
    def entries(self) -> list[Entry]:
        return [e for f in self.files for e in f.entries]

    @property
    def by_body_offset(self) -> dict[int, Entry]:
        return {e.pos + ENTRY_HEADER_SIZE: e for e in self.entries}

    @property
    def end(self) -> int:
        last = self.entries[-1]
        return last.pos + last.size


@cache
def _store(root: str) -> Store:
    data = Path(root) / "dledger-n0" / "data"
    return Store(Path(root), [walk_data_file(p) for p in sorted(data.iterdir())])


def record(body: bytes) -> dict:
    """The fields of a commitlog record (magic v1, IPv4 hosts) a decoder checks first."""
    total, magic, body_crc, queue_id, _flag, queue_offset, phys, sysflag = struct.unpack_from(
        ">iiiiiqqi", body, 0)
    assert sysflag & 0x30 == 0, "IPv4 born/store hosts expected"
    body_len = struct.unpack_from(">i", body, 84)[0]
    msg_body = body[88:88 + body_len]
    p = 88 + body_len
    topic_len = body[p]
    topic = body[p + 1:p + 1 + topic_len].decode()
    p += 1 + topic_len
    props_len = struct.unpack_from(">h", body, p)[0]
    raw = body[p + 2:p + 2 + props_len].decode("utf-8")
    props = dict(kv.split("\x01", 1) for kv in raw.split("\x02") if "\x01" in kv)
    return {"total": total, "magic": magic, "bodyCrc": body_crc, "queueId": queue_id,
            "queueOffset": queue_offset, "phys": phys, "sysflag": sysflag, "body": msg_body,
            "topic": topic, "props": props, "end": p + 2 + props_len}


@dataclass
class Variant:
    dir: Path
    store: Store
    s1: Store
    messages: list[dict]
    groups: list[dict]
    topic_stats: list[dict]
    run: dict
    dledger: dict

    @property
    def acked(self) -> list[dict]:
        return [m for m in self.messages if m["acked"]]


@pytest.fixture(scope="module")
def v(dledger_store: Path) -> Variant:
    truth = dledger_store / "truth"
    return Variant(
        dledger_store,
        _store(str(dledger_store / "store")),
        _store(str(dledger_store / "snapshots" / "s1" / "store")),
        read_jsonl(truth / "messages.jsonl"),
        read_jsonl(truth / "consumer_groups.jsonl"),
        read_jsonl(truth / "topic_stats.jsonl"),
        json.loads((truth / "run.json").read_text(encoding="utf-8")),
        json.loads((truth / "dledger.json").read_text(encoding="utf-8")),
    )


# --------------------------------------------------------------------------- the scenario


# The versions each line's broker depends on (its pom): what these stores are written by.
VERSIONS = {"v5-dledger": ("5.5.0", "0.3.2"), "v4-dledger": ("4.9.7", "0.3.1.2")}


def test_scenario_ran_as_planned(v: Variant, dledger_store: Path) -> None:
    assert v.run["variant"] == dledger_store.name
    assert (v.run["rocketmqVersion"], v.run["dledgerVersion"]) == VERSIONS[dledger_store.name]
    assert v.run["notPossible"] == []
    conf = v.run["brokerConfig"]
    assert conf["enableDLegerCommitLog"] == "true"
    assert conf["dLegerSelfId"] == "n0"
    assert conf["dLegerGroup"] == conf["brokerName"] == "broker-a"
    assert conf["dLegerPeers"] == f"n0-127.0.0.1:{v.run['ports']['dledger']}"
    assert conf["mappedFileSizeCommitLog"] == str(MiB)
    assert all(m["acked"] for m in v.messages)
    kinds = {k: c["acked"] for k, c in v.run["counts"]["byKind"].items()}
    assert kinds == {"normal": 240, "bulk": 450, "batch": 30, "delayed": 6}
    assert sum(m["compressedByClient"] for m in v.messages) == 230
    assert v.run["shutdown"]["exitCode"] == 143
    assert not v.run["shutdown"]["abortFilePresent"]
    # after the election the broker is brokerId 0 and SYNC_MASTER (configured: ASYNC_MASTER)
    eff = v.dledger["beforeShutdown"]["brokerConfigEffective"]
    assert eff["brokerId"] == "0"
    assert eff["brokerRole"] == "SYNC_MASTER"
    assert v.dledger["beforeShutdown"]["clusterInfoBrokerAddrs"] == {"0": v.run["brokerAddr"]}


# --------------------------------------------------------------------------- layout


def test_layout(v: Variant) -> None:
    root = v.dir / "store"
    base = root / "dledger-n0"
    assert not (root / "commitlog").exists()
    assert not (root / "abort").exists()
    assert (root / "checkpoint").is_file()  # the store checkpoint exists as usual
    present = sorted(p.name for p in base.iterdir())
    _, written_at_shutdown = raft_checkpoint(base)  # else only the checkpoint before is left
    assert present == ["checkpoint"] * written_at_shutdown + [
        "checkpoint.bak", "currterm", "data", "index"]
    names = sorted(p.name for p in (base / "data").iterdir())
    assert names == [f"{i * MiB:020d}" for i in range(len(names))]
    assert len(names) == 3
    assert all((base / "data" / n).stat().st_size == MiB for n in names)
    assert [(p.name, p.stat().st_size) for p in (base / "index").iterdir()] == [
        ("00000000000000000000", INDEX_FILE_SIZE)]
    listed = {f["path"]: f["size"] for f in v.dledger["afterShutdown"]["files"]}
    on_disk = {p.relative_to(root).as_posix(): p.stat().st_size
               for p in root.rglob("*") if p.is_file()}
    assert listed == on_disk
    assert v.dledger["afterShutdown"]["commitlogDirExists"] is False


def raft_checkpoint(base: Path) -> tuple[Path, bool]:
    """The Raft checkpoint file, and whether it is the one the shutdown wrote.

    DLedger 0.3.2 writes ``checkpoint`` by writing ``checkpoint.tmp``, copying the old file to
    ``checkpoint.bak``, deleting ``checkpoint`` and renaming the tmp file (IOUtils.string2File);
    ``DLedgerMmapFileStore.shutdown()`` persists it while the flush thread, stopped only after,
    may be persisting it too. When they interleave, one thread's delete comes after the other's
    rename and its own rename finds no tmp file: a cleanly shut down broker is left with
    ``checkpoint.bak`` (the checkpoint before) and no ``checkpoint``. CI met it once in ~40
    builds of this store.
    """
    if (base / "checkpoint").exists():
        return base / "checkpoint", True
    return base / "checkpoint.bak", False


def test_checkpoint_and_currterm(v: Variant) -> None:
    base = v.dir / "store" / "dledger-n0"
    last = v.store.entries[-1].index
    after = v.dledger["afterShutdown"]
    checkpoint, written_at_shutdown = raft_checkpoint(base)
    props = read_props(checkpoint)
    if written_at_shutdown:
        assert props == {"committedIndex": str(last), "endIndex": str(last)}
        assert after["checkpoint"] == checkpoint.read_text(encoding="latin-1")
        assert after["checkpointProperties"] == props
    else:
        assert after["checkpoint"] is None
        assert after["checkpointBakExists"] is True
        assert set(props) == {"committedIndex", "endIndex"}
        assert 0 <= int(props["committedIndex"]) <= int(props["endIndex"]) <= last
    assert read_props(base / "currterm") == {"currTerm": "0", "voteLeader": "n0"}
    assert after["currterm"] == (base / "currterm").read_text(encoding="latin-1")
    assert {e.term for e in v.store.entries} == {0}


# --------------------------------------------------------------------------- entries


def test_entry_headers(v: Variant) -> None:
    entries = v.store.entries
    assert [e.index for e in entries] == list(range(len(entries)))
    for e in entries:
        assert e.magic == ENTRY_MAGIC
        assert e.pos == e.file_start + e.position
        assert e.body_size == e.size - ENTRY_HEADER_SIZE == len(e.body)
        # reserved / never set by dledger 0.3.2 nor RocketMQ 5.5.0: always zero on disk
        assert (e.channel, e.chain_crc, e.body_crc) == (0, 0, 0)
    # entries are contiguous inside a file
    for f in v.store.files:
        for a, b in pairwise(f.entries):
            assert b.position == a.position + a.size


def test_data_files_end_with_blank_or_zeros(v: Variant) -> None:
    files = v.store.files
    for f, nxt in pairwise(files):
        assert f.tail.kind == "blank"
        assert f.tail.declared == f.size - f.tail.position  # i32 after -1: the bytes left
        assert f.tail.rest_zero
        # the next entry did not fit together with the 8-byte minimum blank
        assert nxt.entries[0].size + MIN_BLANK_LEN > f.size - f.tail.position
        assert nxt.start == f.start + f.size
    last = files[-1]
    assert last.tail.kind == "zeros" and last.tail.rest_zero
    assert v.store.end == last.start + last.tail.position


def test_entry_bodies_are_commitlog_records(v: Variant) -> None:
    for e in v.store.entries:
        r = record(e.body)
        assert r["magic"] == MSG_MAGIC_V1
        assert r["total"] == e.body_size == r["end"]
        assert r["phys"] == e.pos + ENTRY_HEADER_SIZE
        assert r["bodyCrc"] == zlib.crc32(r["body"]) & 0x7FFFFFFF


def test_index_units_match_entries(v: Variant) -> None:
    entries = v.store.entries
    path = v.dir / "store" / "dledger-n0" / "index" / "00000000000000000000"
    with path.open("rb") as fh:
        raw = fh.read((len(entries) + 4) * INDEX_UNIT.size)
    for e in entries:
        unit = INDEX_UNIT.unpack_from(raw, e.index * INDEX_UNIT.size)
        assert unit == (ENTRY_MAGIC, e.pos, e.size, e.index, e.term)
    assert not any(raw[len(entries) * INDEX_UNIT.size:])


def test_entry_count_is_acked_plus_delay_reputs(v: Variant) -> None:
    delayed = [m for m in v.acked if m["delayLevel"] > 0]
    assert len(v.store.entries) == len(v.acked) + len(delayed)
    topics: dict[str, int] = {}
    for e in v.store.entries:
        t = record(e.body)["topic"]
        topics[t] = topics.get(t, 0) + 1
    assert topics == {"TopicDLedger": 270, "TopicDLedgerBulk": 450, "SCHEDULE_TOPIC_XXXX": 6,
                      "TopicDLedgerDelay": 6}


# --------------------------------------------------------------------------- truth at entries


def test_acked_messages_sit_at_entry_bodies(v: Variant) -> None:
    by_body = v.store.by_body_offset
    for m in v.acked:
        assert len(m["offsetMsgId"]) == 32
        assert m["commitLogOffset"] == int(m["offsetMsgId"][-16:], 16)
        e = by_body[m["commitLogOffset"]]
        r = record(e.body)
        assert r["topic"] == m["storedTopic"]
        assert r["queueId"] == m["storedQueueId"]
        assert r["queueOffset"] == m["queueOffset"]
        assert r["props"]["UNIQ_KEY"] == m["msgId"]
        if m["keys"]:
            assert r["props"]["KEYS"] == " ".join(m["keys"])
        assert r["props"].get("TAGS") == m["tags"]
        for k, val in m["userProperties"].items():
            assert r["props"][k] == val
        compressed = bool(r["sysflag"] & 0x1)
        assert compressed == m["compressedByClient"]
        body = zlib.decompress(r["body"]) if compressed else r["body"]
        assert len(body) == m["bodyLength"]
        assert hashlib.sha256(body).hexdigest() == m["bodySha256"]


def test_consume_queue_units_point_at_entry_bodies(v: Variant) -> None:
    by_body = v.store.by_body_offset
    max_offsets = {(t["topic"], t["queueId"]): t["maxOffset"] for t in v.topic_stats
                   if "maxOffset" in t}
    cq = v.dir / "store" / "consumequeue"
    seen = 0
    for qdir in sorted(p for p in cq.glob("*/*") if p.is_dir()):
        topic, qid = qdir.parent.name, int(qdir.name)
        units = []
        for f in sorted(qdir.iterdir()):
            raw = f.read_bytes()
            for i in range(0, len(raw), CQ_UNIT.size):
                off, size, tags_code = CQ_UNIT.unpack_from(raw, i)
                if off == 0 and size == 0:
                    break
                units.append((off, size, tags_code))
        for n, (off, size, _tags) in enumerate(units):
            e = by_body[off]
            assert size == e.body_size
            r = record(e.body)
            assert (r["topic"], r["queueId"], r["queueOffset"]) == (topic, qid, n)
        assert len(units) == max_offsets[(topic, qid)]
        seen += len(units)
    assert seen == len(v.store.entries)


# --------------------------------------------------------------------------- admin views


def test_admin_views(v: Variant) -> None:
    before = v.dledger["beforeShutdown"]
    assert before["commitLogMaxOffset"] == v.store.end
    assert before["commitLogMinOffset"] == 0
    assert {(t["topic"], t["queueId"]) for t in v.topic_stats
            if t["topic"] in USER_TOPICS} == {(t, q) for t, n in USER_TOPICS.items()
                                              for q in range(n)}
    rows = {(g["group"], g["topic"], g["queueId"]): g for g in v.groups}
    for (t, n) in USER_TOPICS.items():
        for q in range(n):
            a = rows[("G_ALL", t, q)]
            h = rows[("G_HALF", t, q)]
            assert a["diff"] == 0 and a["consumerOffset"] == a["brokerOffset"] > 0
            assert h["consumerOffset"] == h["brokerOffset"] // 2


# --------------------------------------------------------------------------- hot copy s1


def test_snapshot_s1_is_a_prefix(v: Variant) -> None:
    s1, final = v.s1, v.store
    assert (v.dir / "snapshots" / "s1" / "store" / "abort").is_file()  # taken while running
    assert not (v.dir / "snapshots" / "s1" / "store" / "commitlog").exists()
    assert len(s1.entries) < len(final.entries)
    assert s1.entries == final.entries[:len(s1.entries)]
    in_s1 = [m for m in v.acked if "s1" in m["inSnapshots"]]
    assert len(in_s1) == len(v.acked) - v.run["notes"]["tailMessagesPlanned"]
    s1_bodies = s1.by_body_offset
    for m in v.acked:
        assert (m["commitLogOffset"] in s1_bodies) == (m in in_s1)
    snap = json.loads((v.dir / "truth" / "snapshots.json").read_text(encoding="utf-8"))[0]
    assert snap["brokerBeforeCopy"]["commitLogMaxOffset"] == s1.end
    base = v.dir / "snapshots" / "s1" / "store" / "dledger-n0"
    # a hot copy may land inside a checkpoint write too (raft_checkpoint)
    assert int(read_props(raft_checkpoint(base)[0])["committedIndex"]) <= s1.entries[-1].index
    # every consume-queue unit of the copy points at an entry of the copy
    by_body = s1.by_body_offset
    for f in (v.dir / "snapshots" / "s1" / "store" / "consumequeue").glob("*/*/*"):
        raw = f.read_bytes()
        for i in range(0, len(raw), CQ_UNIT.size):
            off, size, _ = CQ_UNIT.unpack_from(raw, i)
            if off == 0 and size == 0:
                break
            assert by_body[off].body_size == size
