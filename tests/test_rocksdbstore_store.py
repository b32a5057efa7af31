"""The ``v5-rocksdbstore`` store: the 5.5.x RocksDB state store of a real 5.5.0 broker.

The broker ran with ``transRocksDBEnable=true``, ``transWriteOriginTransHalfEnable=false`` and
``timerRocksDBEnable=true`` (``timerWheelEnable`` left true), so ``<store>/rocksdbstore`` (one
RocksDB database, column families ``default``, ``timer``, ``trans``) holds the broker's
transaction and timer state, flushed to SST files by the clean shutdown. These tests open it
read-only with ``rocksdict`` (``rmqlib.rocksdb.database.open_readonly``: a hard-linked clone),
decode every key and value here with ``struct`` (big-endian, as ``java.nio.ByteBuffer`` writes)
and hold it against the harness's truth and against the commitlog (read with
``rmqlib.commitlog.records.scan_store``).

Layouts (checked below on the real store):

* ``trans``: key ``int64 half commitlog offset`` + ``b"@" + real topic + b"@" + msgId``, value
  ``int32 checkTimes`` + ``int32 size of the half record``; plus ``lastOffsetPy`` -> ``int64``,
  the offset of the last half record indexed (ops do not move it).
* ``timer``: key ``int64 delivery time (TIMER_OUT_MS, epoch ms)`` + msgId (no separator), value
  ``int32 size`` + ``int64 commitlog offset`` of the ``rmq_sys_wheel_timer`` record; plus
  ``sys_topic_scan_offset_checkpoint`` -> ``int64`` next queue offset of ``rmq_sys_wheel_timer``
  to scan and ``timeline_checkpoint`` -> ``int64`` epoch ms delivered up to (exclusive).
* ``default``: empty (``indexRocksDBEnable`` stays off).

What the real store showed that the research notes (``.cache/rocksdbstore-research.md``) did
not say, or said otherwise, is written in the tests' docstrings and in that file's section
"Observed in v5-rocksdbstore".
"""

from __future__ import annotations

import json
import struct
from collections import Counter, defaultdict
from functools import cache
from pathlib import Path

import pytest

from rmqlib.commitlog.layout import TransactionType
from rmqlib.commitlog.records import CommitLogRecord, scan_store
from rmqlib.rocksdb.database import open_readonly

pytestmark = [pytest.mark.broker]

HALF = "RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC"
WHEEL = "rmq_sys_wheel_timer"
CLASSIC_TX_TOPICS = ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                     "TRANS_CHECK_MAX_TIME_TOPIC")
TX_TOPIC = "TopicRocksTx"
TIMER_TOPIC = "TopicRocksTimer"
TX_GROUP, TIMER_GROUP = "G_ROCKS_TX", "G_ROCKS_TIMER"
LAST_OFFSET_PY = b"lastOffsetPy"
SCAN_CHECKPOINT = b"sys_topic_scan_offset_checkpoint"
TIMELINE_CHECKPOINT = b"timeline_checkpoint"
#: ``timerPrecisionMs`` (5.5.0 default): TIMER_OUT_MS is floored to it, one timeline window.
PRECISION_MS = 1000
DECIDED = ("commit", "rollback", "unknown-commit", "unknown-rollback")
#: ERROR lines a clean shutdown may log that are its own order's races, not the store's (each
#: seen in CI): a held pull request handed to a Netty event loop already closed; and
#: ``BrokerController``'s every-5-s ``brokerOuterAPI.refreshMetadata()`` (a name-server call),
#: whose executor ``shutdownBasicService`` stops only after the remoting server, the transaction
#: services and the timer store: on a loaded machine the calls in between fail or time out (CI
#: logged two, 125 ms apart, with the name server still up: the harness stops it after the broker).
SHUTDOWN_RACES = ("rejectedExecution", "ScheduledTask refresh metadata exception")


# --------------------------------------------------------------------------- reading


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


class Truth:
    def __init__(self, root: Path) -> None:
        t = root / "truth"
        self.transactions = read_jsonl(t / "transactions.jsonl")
        self.calls = read_jsonl(t / "tx_calls.jsonl")
        self.timers = read_jsonl(t / "timers.jsonl")
        self.deliveries = read_jsonl(t / "deliveries.jsonl")
        self.topic_stats = read_jsonl(t / "topic_stats.jsonl")
        self.info = json.loads((t / "rocksdbstore.json").read_text(encoding="utf-8"))
        self.settings = self.info["settings"]
        self.check_max = int(self.settings["transactionCheckMax"])
        self.broker_log = (root / "logs" / "broker.log").read_text(encoding="latin-1").splitlines()

    def errors_logged(self) -> tuple[list[str], list[str]]:
        """The broker's ERROR lines before and after its shutdown hook ran."""
        hook = next(i for i, line in enumerate(self.broker_log)
                    if "Shutdown hook was invoked" in line)
        errors = [(i, line) for i, line in enumerate(self.broker_log) if " ERROR " in line]
        return [e for i, e in errors if i < hook], [e for i, e in errors if i > hook]

    def with_next_line(self, lines: list[str]) -> list[str]:
        """Each line with the one after it (an ERROR's exception): for assertion messages."""
        at = {line: i for i, line in enumerate(self.broker_log)}
        return [" | ".join(self.broker_log[at[line]:at[line] + 2]) for line in lines]

    def plan(self, *plans: str) -> list[dict]:
        return [t for t in self.transactions if t["plan"] in plans]

    def timers_of(self, delay_sec: int) -> list[dict]:
        return [t for t in self.timers if t["delaySec"] == delay_sec]

    def checks(self, msg_id: str) -> list[dict]:
        return [c for c in self.calls if c["kind"] == "check" and c["msgId"] == msg_id]

    def decisions(self, msg_id: str) -> list[str]:
        """Every non-UNKNOW answer of the listener (local or at a check), in time order."""
        return [c["state"] for c in self.calls
                if c["msgId"] == msg_id and c["state"] != "UNKNOW"]

    def max_offset(self, topic: str) -> int:
        return sum(r["maxOffset"] for r in self.topic_stats
                   if r["topic"] == topic and "error" not in r)


class Store:
    """The commitlog (scanned once) and every column family of ``rocksdbstore`` (read once)."""

    def __init__(self, root: Path) -> None:
        scan = scan_store(root / "commitlog")
        self.records: list[CommitLogRecord] = list(scan)
        self.issues = scan.issues
        self.by_offset = {r.physical_offset: r for r in self.records}
        self.db_dir = root / "rocksdbstore"
        with open_readonly(self.db_dir) as db:
            self.families = {name: dict(db.items(name)) for name in db.families}

    def of_topic(self, topic: str) -> list[CommitLogRecord]:
        return [r for r in self.records if r.topic == topic]

    def with_uniq_key(self, topic: str, msg_id: str) -> list[CommitLogRecord]:
        return [r for r in self.of_topic(topic) if r.properties.get("UNIQ_KEY") == msg_id]


@cache
def _truth(root: str) -> Truth:
    return Truth(Path(root))


@cache
def _store(root: str) -> Store:
    return Store(Path(root))


@pytest.fixture(scope="module")
def truth(rocksdbstore_store: Path) -> Truth:
    return _truth(str(rocksdbstore_store))


@pytest.fixture(scope="module")
def store(rocksdbstore_store: Path) -> Store:
    return _store(str(rocksdbstore_store / "store"))


# --------------------------------------------------------------------------- decoding


def int64(value: bytes) -> int:
    assert len(value) == 8, value
    return struct.unpack(">q", value)[0]


def trans_rows(store: Store) -> dict[str, tuple[int, str, int, int]]:
    """msgId -> (half offset, real topic, checkTimes, half size) of every ``trans`` key but
    ``lastOffsetPy``."""
    rows = {}
    for key, value in store.families["trans"].items():
        if key == LAST_OFFSET_PY:
            continue
        offset = struct.unpack(">q", key[:8])[0]
        empty, topic, msg_id = key[8:].decode("utf-8").split("@")
        assert empty == "", key
        assert len(value) == 8, (key, value)
        check_times, size = struct.unpack(">ii", value)
        assert msg_id not in rows
        rows[msg_id] = (offset, topic, check_times, size)
    return rows


def timer_rows(store: Store) -> dict[str, tuple[int, int, int]]:
    """msgId -> (delivery time ms, size, wheel record offset) of every ``timer`` key but the
    two checkpoints."""
    rows = {}
    for key, value in store.families["timer"].items():
        if key in (SCAN_CHECKPOINT, TIMELINE_CHECKPOINT):
            continue
        assert len(value) == 12, (key, value)
        delay_ms = struct.unpack(">q", key[:8])[0]
        msg_id = key[8:].decode("utf-8")
        size, offset = struct.unpack(">iq", value)
        assert msg_id not in rows
        rows[msg_id] = (delay_ms, size, offset)
    return rows


# --------------------------------------------------------------------------- the run


def test_the_run_did_what_the_scenario_plans(truth: Truth) -> None:
    """Every send acked; the broker's own config shows the RocksDB switches; the listener saw
    what each plan asks for. A never-answered transaction is checked ``transactionCheckMax + 1``
    times, not ``transactionCheckMax``: the round that finds ``checkTimes`` (3) not above the
    max still sends a check, then raises it to 4 and deletes the key in the same update
    (``TransactionalMessageRocksDBService.checkTransRecordsStatus``). A check carries the
    original half (its offsetMsgId, queue offset and commitlog offset; the real topic) with no
    ``TRANSACTION_CHECK_TIMES``: unlike the classic service nothing is re-put."""
    cfg = truth.info["brokerConfigEffective"]
    assert "error" not in cfg
    assert cfg["transRocksDBEnable"] == "true"
    assert cfg["transWriteOriginTransHalfEnable"] == "false"
    assert cfg["timerRocksDBEnable"] == "true"
    assert cfg["timerWheelEnable"] == "true"
    assert cfg["indexRocksDBEnable"] == "false"
    assert cfg["transactionTimeOut"] == "2000"
    assert cfg["transactionCheckInterval"] == "1000"
    assert cfg["transactionCheckMax"] == "3"
    assert cfg["timerPrecisionMs"] == str(PRECISION_MS)

    assert Counter(t["plan"] for t in truth.transactions) == truth.settings["txPlans"]
    assert all(t["acked"] and t["error"] is None for t in truth.transactions + truth.timers)
    assert len(truth.timers_of(truth.settings["shortDelaySec"])) == truth.settings["shortTimers"]
    assert len(truth.timers_of(truth.settings["longDelaySec"])) == truth.settings["longTimers"]

    for t in truth.transactions:
        checks = truth.checks(t["msgId"])
        answers = {c["state"] for c in checks}
        assert t["checkCount"] == len(checks)
        for c in checks:  # every check carries the original half: nothing is re-put
            assert c["checkedOffsetMsgId"] == t["halfOffsetMsgId"]
            assert c["checkedCommitLogOffset"] == t["halfCommitLogOffset"]
            assert c["checkedQueueOffset"] == t["halfQueueOffset"]
            assert c["checkedTopic"] == TX_TOPIC
            assert c["checkTimesProperty"] is None
        if t["plan"] in ("commit", "rollback"):
            assert t["localTransactionState"] == ("COMMIT_MESSAGE" if t["plan"] == "commit"
                                                  else "ROLLBACK_MESSAGE")
            assert not checks, t
        elif t["plan"].startswith("unknown-"):
            want = "COMMIT_MESSAGE" if t["plan"] == "unknown-commit" else "ROLLBACK_MESSAGE"
            assert t["localTransactionState"] == "UNKNOW"
            assert checks and answers == {want}, t
        elif t["plan"] == "never":
            assert answers == {"UNKNOW"}
            assert len(checks) == truth.check_max + 1, t
            assert t["outcome"] == "dropped"
            assert t["brokerDeleteCheckTimes"] == truth.check_max + 1
        else:  # immune
            assert t["plan"] == "immune"
            assert t["userProperties"]["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "3600"
            assert not checks and t["outcome"] == "pending"
    # No error while it ran; after the shutdown hook began, only its networking's known races.
    before, after = truth.errors_logged()
    assert before == []
    unexpected = [line for line in after if not any(race in line for race in SHUTDOWN_RACES)]
    assert not unexpected, truth.with_next_line(unexpected)


def test_rocksdbstore_is_flushed_with_three_column_families(store: Store) -> None:
    """A clean shutdown flushes every column family to SST files (the WAL left empty); the
    RocksDB info LOG is not in the directory. ``default`` is empty: ``indexRocksDBEnable`` is
    off."""
    assert set(store.families) == {"default", "timer", "trans"}
    files = {p.name for p in store.db_dir.iterdir()}
    assert any(n.endswith(".sst") for n in files)
    assert "CURRENT" in files and not any(n.startswith("LOG") for n in files)
    assert all((store.db_dir / n).stat().st_size == 0 for n in files if n.endswith(".log"))
    assert store.families["default"] == {}
    assert store.issues == []


# --------------------------------------------------------------------------- trans


def test_trans_cf_holds_exactly_the_pending_transactions(truth: Truth, store: Store) -> None:
    """The ``trans`` column family holds one key per still-pending transaction (the immune
    ones, never checked: checkTimes 0) whose offset, topic, msgId and size are those of its
    half record; every decided or dropped one was deleted."""
    rows = trans_rows(store)
    immune = {t["msgId"]: t for t in truth.plan("immune")}
    assert set(rows) == set(immune)
    for msg_id, (offset, topic, check_times, size) in rows.items():
        t = immune[msg_id]
        assert offset == t["halfCommitLogOffset"]
        assert topic == TX_TOPIC
        assert check_times == 0
        assert size == t["halfStoreSize"]
        half = store.by_offset[offset]
        assert half.topic == HALF
        assert half.total_size == size
        assert half.properties["UNIQ_KEY"] == msg_id
        assert half.properties["__transactionId__"] == msg_id
        assert half.properties["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "3600"


def test_last_offset_py_is_the_last_half(store: Store) -> None:
    """``lastOffsetPy`` is the commitlog offset of the last half record indexed (the op records
    come later in the commitlog but never move it: ``writeRecordsForTrans`` takes the max over
    puts only)."""
    halves = store.of_topic(HALF)
    last = int64(store.families["trans"][LAST_OFFSET_PY])
    assert last == max(r.physical_offset for r in halves)
    assert max(r.physical_offset for r in store.of_topic(OP)) > last


def test_halves_are_in_the_rocksdb_half_topic(truth: Truth, store: Store) -> None:
    """Every transactional send left exactly one half record, in
    ``RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC`` queue 0 at the offset its send result named, stored as
    a plain message (transaction type NOT) with ``REAL_TOPIC``/``REAL_QID``, ``PGROUP`` and
    ``__transactionId__`` = UNIQ_KEY; no check re-puts a half, and the classic half, op and
    check-max topics stay empty."""
    halves = store.of_topic(HALF)
    assert len(halves) == len(truth.transactions) == truth.max_offset(HALF)
    by_id = Counter(r.properties["UNIQ_KEY"] for r in halves)
    assert set(by_id.values()) == {1}
    for t in truth.transactions:
        half = store.by_offset[t["halfCommitLogOffset"]]
        assert half.topic == HALF and half.queue_id == 0
        assert half.queue_offset == t["halfQueueOffset"]
        assert half.total_size == t["halfStoreSize"]
        assert half.transaction_type == TransactionType.NOT
        p = half.properties
        assert p["UNIQ_KEY"] == p["__transactionId__"] == t["msgId"] == t["transactionId"]
        assert p["REAL_TOPIC"] == TX_TOPIC and int(p["REAL_QID"]) == t["queueId"]
        assert p["PGROUP"] == "PG_ROCKS_TX"
        assert p["plan"] == t["plan"]
    for topic in CLASSIC_TX_TOPICS:
        assert store.of_topic(topic) == []
        assert truth.max_offset(topic) == 0


def test_ops_name_the_half_they_close(truth: Truth, store: Store) -> None:
    """Each commit or rollback (local or at a check) wrote one op record to
    ``RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC`` queue 0 (tag ``d``, body one 0x00 byte, its own
    UNIQ_KEY) whose ``TRANS_OFFSET`` is the half's commitlog offset and whose ``REAL_TOPIC`` /
    ``__transactionId__`` are the half's; never-answered and immune transactions have none."""
    ops = store.of_topic(OP)
    assert len(ops) == truth.max_offset(OP)
    by_half: dict[int, list[CommitLogRecord]] = defaultdict(list)
    for op in ops:
        assert op.queue_id == 0
        assert op.properties["TAGS"] == "d"
        assert op.body == b"\x00"
        by_half[int(op.properties["TRANS_OFFSET"])].append(op)
    for t in truth.transactions:
        mine = by_half.pop(t["halfCommitLogOffset"], [])
        assert len(mine) == len(truth.decisions(t["msgId"])), t
        if t["plan"] in DECIDED:
            assert len(mine) >= 1
        for op in mine:
            assert op.properties["__transactionId__"] == t["msgId"]
            assert op.properties["REAL_TOPIC"] == TX_TOPIC
            assert op.properties["UNIQ_KEY"] != t["msgId"]
            assert op.physical_offset > t["halfCommitLogOffset"]
    assert by_half == {}


def test_committed_copies(truth: Truth, store: Store) -> None:
    """Every commit answer put one copy into the real topic (transaction type COMMIT,
    ``preparedTransactionOffset`` = the half's offset, the half's queue); rolled-back, dropped
    and pending ones have none. ``TRANSACTION_CHECK_TIMES`` is the ``trans`` key's checkTimes
    *if the key was already indexed* when the commit arrived (``EndTransactionProcessor
    .endMessageTransaction``): a commit at the first check carries ``1``; a local commit,
    processed before the index-build thread (which batches for 100 ms) wrote the half's key,
    carries no such property (``0`` if the key happened to be indexed already)."""
    copies = store.of_topic(TX_TOPIC)
    assert len(copies) == truth.max_offset(TX_TOPIC)
    delivered = Counter(d["msgId"] for d in truth.deliveries if d["group"] == TX_GROUP)
    seen = 0
    for t in truth.transactions:
        mine = store.with_uniq_key(TX_TOPIC, t["msgId"])
        seen += len(mine)
        assert len(mine) == truth.decisions(t["msgId"]).count("COMMIT_MESSAGE"), t
        if t["plan"] not in ("commit", "unknown-commit"):
            assert not mine and not delivered[t["msgId"]]
            continue
        assert mine and delivered[t["msgId"]] >= 1
        for c in mine:
            assert c.transaction_type == TransactionType.COMMIT
            assert c.prepared_transaction_offset == t["halfCommitLogOffset"]
            assert c.queue_id == t["queueId"]
            assert c.physical_offset > t["halfCommitLogOffset"]
            times = c.properties.get("TRANSACTION_CHECK_TIMES")
            if t["plan"] == "unknown-commit":
                assert times is not None and 0 < int(times) <= len(truth.checks(t["msgId"]))
            else:
                assert times in (None, "0"), t
    assert seen == len(copies)


def test_never_answered_transactions_are_dropped_without_a_trace(truth: Truth,
                                                                 store: Store) -> None:
    """A transaction checked ``transactionCheckMax + 1`` times is deleted from the ``trans``
    column family and leaves nothing else: no op, no committed copy, no re-put half, no
    ``TRANS_CHECK_MAX_TIME_TOPIC`` copy; its half lies at or before ``lastOffsetPy`` (indexed,
    so "no key and no op" means dropped, not "not yet indexed")."""
    rows = trans_rows(store)
    last = int64(store.families["trans"][LAST_OFFSET_PY])
    ops = {int(op.properties["TRANS_OFFSET"]) for op in store.of_topic(OP)}
    never = truth.plan("never")
    assert never
    for t in never:
        assert t["msgId"] not in rows
        assert t["halfCommitLogOffset"] not in ops
        assert t["halfCommitLogOffset"] <= last
        assert store.by_offset[t["halfCommitLogOffset"]].topic == HALF
        assert store.with_uniq_key(TX_TOPIC, t["msgId"]) == []
        assert len(store.with_uniq_key(HALF, t["msgId"])) == 1
        assert truth.info["brokerLog"]["needDelete"][t["msgId"]] == truth.check_max + 1


# --------------------------------------------------------------------------- timer


def test_timer_cf_holds_every_pending_timer(truth: Truth, store: Store) -> None:
    """One ``timer`` key per pending (3600 s) timer: its delivery time is the wheel record's
    ``TIMER_OUT_MS`` (the broker's send time + delay, floored to ``timerPrecisionMs``; an exact
    multiple is moved one precision earlier, ``HookUtils.handleScheduleMessage``), the value
    names that ``rmq_sys_wheel_timer`` record (its commitlog offset and size)."""
    rows = timer_rows(store)
    timeline = int64(store.families["timer"][TIMELINE_CHECKPOINT])
    pending = {m: r for m, r in rows.items() if r[0] >= timeline}
    long_timers = {t["msgId"]: t for t in truth.timers_of(truth.settings["longDelaySec"])}
    assert set(pending) == set(long_timers)
    for msg_id, (delay_ms, size, offset) in pending.items():
        t = long_timers[msg_id]
        assert delay_ms == t["timerOutMs"]
        assert delay_ms % PRECISION_MS == 0
        assert t["sendStartMs"] - PRECISION_MS <= delay_ms - t["delaySec"] * 1000 \
            <= t["sendEndMs"]
        assert offset == t["wheelCommitLogOffset"]
        assert size == t["wheelStoreSize"]
        wheel = store.by_offset[offset]
        assert wheel.topic == WHEEL and wheel.queue_id == 0
        assert wheel.total_size == size
        assert wheel.properties["UNIQ_KEY"] == msg_id
        assert int(wheel.properties["TIMER_OUT_MS"]) == delay_ms
        assert wheel.properties["REAL_TOPIC"] == TIMER_TOPIC
        assert store.with_uniq_key(TIMER_TOPIC, msg_id) == []


def test_delivered_timers_stay_below_the_timeline_checkpoint(truth: Truth,
                                                             store: Store) -> None:
    """Delivered (3 s) timers keep their keys (only ``TimelineDeleteService`` removes them,
    30 minutes behind the checkpoint), all below ``timeline_checkpoint``, which is the end of
    the last one-second window that held records: the largest delivered ``TIMER_OUT_MS`` +
    ``timerPrecisionMs`` (as the broker logged it). Each was re-put to its real topic once,
    not before its ``TIMER_OUT_MS``, and consumed."""
    rows = timer_rows(store)
    timeline = int64(store.families["timer"][TIMELINE_CHECKPOINT])
    short = {t["msgId"]: t for t in truth.timers_of(truth.settings["shortDelaySec"])}
    below = {m for m, r in rows.items() if r[0] < timeline}
    assert below <= set(short)  # delivered leftovers (or gone)
    assert timeline == max(t["timerOutMs"] for t in short.values()) + PRECISION_MS
    assert timeline == truth.info["brokerLog"]["timelineCheckpoints"][-1]
    assert timeline <= min(t["timerOutMs"] for t in truth.timers_of(
        truth.settings["longDelaySec"]))
    delivered = Counter(d["msgId"] for d in truth.deliveries if d["group"] == TIMER_GROUP)
    assert set(delivered) == set(short)
    for msg_id, t in short.items():
        if msg_id in rows:
            delay_ms, size, offset = rows[msg_id]
            assert (delay_ms, size, offset) == (t["timerOutMs"], t["wheelStoreSize"],
                                                t["wheelCommitLogOffset"])
        (copy,) = store.with_uniq_key(TIMER_TOPIC, msg_id)
        assert int(copy.properties["TIMER_OUT_MS"]) == t["timerOutMs"]
        assert copy.store_timestamp >= t["timerOutMs"]
        assert copy.queue_id == t["queueId"]
        assert "REAL_TOPIC" not in copy.properties


def test_scan_checkpoint_is_the_wheel_queue_end(truth: Truth, store: Store) -> None:
    """``sys_topic_scan_offset_checkpoint`` is the next ``rmq_sys_wheel_timer`` queue offset to
    scan: every timer record (each went to the timeline, none was due within a precision)
    was indexed, so it equals the queue's max offset and the number of wheel records."""
    wheel = store.of_topic(WHEEL)
    assert len(wheel) == len(truth.timers) == truth.max_offset(WHEEL)
    assert int64(store.families["timer"][SCAN_CHECKPOINT]) == len(wheel)
    assert sorted(r.queue_offset for r in wheel) == list(range(len(wheel)))
    assert {r.properties["UNIQ_KEY"] for r in wheel} == {t["msgId"] for t in truth.timers}


def test_the_timer_wheel_is_bypassed(truth: Truth, store: Store) -> None:
    """With ``timerRocksDBEnable`` the wheel's enqueue service logs that it will not enqueue
    and does nothing: the store has the preallocated ``timerwheel`` file and
    ``config/timercheck``, but no ``timerlog/`` directory at all (the research notes expected
    timerlog files without new entries; the timer log is created on its first write)."""
    root = store.db_dir.parent
    assert truth.info["brokerLog"]["timerWheelNotUsed"] >= 1
    assert (root / "timerwheel").is_file()
    assert (root / "config" / "timercheck").is_file()
    assert not (root / "timerlog").exists()
