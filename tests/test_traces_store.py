"""The ``v5-traces`` store: a real RocketMQ 5.5.0 broker whose clients all trace.

Every producer, transactional producer and push consumer of the scenario ran with message
tracing on, so ``RMQ_SYS_TRACE_TOPIC`` holds the clients' trace bodies (Pub, SubBefore,
SubAfter, EndTransaction contexts, some bodies zlib-compressed by the trace producer) next to
the transaction system topics. These tests read the store with the project's decoders only
(``rmqlib.commitlog.records.scan_store``, ``rmqlib.traces.decode_trace_body``) and hold what
they find against the harness's truth: every send has its Pub, every consumption its
SubBefore/SubAfter pair, every transaction decision its EndTransaction, and the broker's
half, op and discard topics hold what the transactions did; the hot copy ``s1`` was taken
while the UNKNOW transactions were still undecided.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from rmqlib.commitlog.layout import TransactionType
from rmqlib.commitlog.records import CommitLogRecord, scan_store
from rmqlib.traces import (
    END_TRANSACTION,
    PUB,
    SUB_AFTER,
    SUB_BEFORE,
    TraceRecord,
    decode_trace_body,
)

pytestmark = [pytest.mark.broker]

TRACE = "RMQ_SYS_TRACE_TOPIC"
HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX = "TRANS_CHECK_MAX_TIME_TOPIC"
TX_TOPIC = "TopicTraceTx"
TX_PRODUCER = "PG_TRACE_TX"
#: ``ConsumeReturnType`` ordinals (client 5.5.0): what SubAfter's context code holds.
CONSUME_SUCCESS, CONSUME_FAILED = 0, 4




# --------------------------------------------------------------------------- helpers


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


class Copy:
    """One store copy's commitlog, scanned once, and its trace contexts."""

    def __init__(self, root: Path) -> None:
        scan = scan_store(root / "commitlog")
        self.records: list[CommitLogRecord] = list(scan)
        self.issues = scan.issues
        self.traces = [r for r in self.records if r.topic == TRACE]
        self.decoded = {r.queue_offset: decode_trace_body(r.decompressed_body(),
                                                          f"{TRACE}@{r.queue_offset}")
                        for r in self.traces}
        self.contexts: list[TraceRecord] = [c for d in self.decoded.values() for c in d.records]

    def of_topic(self, topic: str) -> list[CommitLogRecord]:
        return [r for r in self.records if r.topic == topic]

    def typed(self, trace_type: str) -> list[TraceRecord]:
        return [c for c in self.contexts if c.trace_type == trace_type]


class Truth:
    def __init__(self, root: Path) -> None:
        t = root / "truth"
        self.sends = read_jsonl(t / "messages.jsonl")
        self.consumed = read_jsonl(t / "consumed.jsonl")
        self.tx_events = read_jsonl(t / "transactions.jsonl")
        self.trace_messages = read_jsonl(t / "trace_messages.jsonl")
        self.traces = json.loads((t / "traces.json").read_text(encoding="utf-8"))
        self.snapshots = json.loads((t / "snapshots.json").read_text(encoding="utf-8"))
        self.topic_stats = read_jsonl(t / "topic_stats.jsonl")

    def acked(self) -> list[dict]:
        return [s for s in self.sends if s["acked"]]

    def max_offset(self, topic: str) -> int:
        return sum(r["maxOffset"] for r in self.topic_stats
                   if r["topic"] == topic and "error" not in r)


@cache
def _copy(root: str) -> Copy:
    return Copy(Path(root))


@cache
def _truth(root: str) -> Truth:
    return Truth(Path(root))


@pytest.fixture(scope="module")
def truth(traces_store: Path) -> Truth:
    return _truth(str(traces_store))


@pytest.fixture(scope="module")
def final(traces_store: Path) -> Copy:
    return _copy(str(traces_store / "store"))


@pytest.fixture(scope="module")
def s1(traces_store: Path) -> Copy:
    return _copy(str(traces_store / "snapshots" / "s1" / "store"))


def java_text(value: str | None) -> str | None:
    """The Java decoder keeps the text ``null`` for a null field; rmqlib reads it as None."""
    return None if value == "null" else value


# --------------------------------------------------------------------------- the trace topic


def test_the_run_did_what_the_scenario_plans(truth: Truth) -> None:
    sends = truth.sends
    assert all(s["acked"] for s in sends), [s["seq"] for s in sends if not s["acked"]]
    assert Counter(s["kind"] for s in sends) == {"normal": 30, "batch": 10, "orderly": 24,
                                                 "delay": 1, "transactional": 24}
    coverage = truth.traces["coverage"]
    assert coverage["complete"] and not coverage["missing"] and not coverage["extra"]
    assert {s["txOutcome"] for s in sends if s["txPlan"] == "never"} == {"discarded"}
    assert truth.traces["brokerLog"]["checkedTooManyTimes"] == 2


def test_trace_bodies_decode_completely(final: Copy, truth: Truth) -> None:
    assert not final.issues
    assert len(final.traces) == len(truth.trace_messages) == truth.max_offset(TRACE) > 0
    by_offset = {m["queueOffset"]: m for m in truth.trace_messages}
    for record in final.traces:
        body = record.decompressed_body()
        expected = by_offset[record.queue_offset]
        assert hashlib.sha256(body).hexdigest() == expected["bodySha256"]
        assert (record.compression is not None) == expected["compressed"]
        account = final.decoded[record.queue_offset].account
        assert account.unreadable == [], account.as_dict()
        assert account.decoded == len(body) == expected["bodyLength"]
    # the trace producer compresses a body from 4096 bytes on (the 20 Pub contexts of the first
    # batch of PG_TRACE's sends are over it), the others are stored as they are
    compressed = [r for r in final.traces if r.compression is not None]
    assert compressed and len(compressed) == sum(m["compressed"] for m in truth.trace_messages)
    assert all(len(r.decompressed_body()) >= 4096 for r in compressed)


def test_rmqlib_reads_every_context_as_the_clients_own_decoder(final: Copy,
                                                                truth: Truth) -> None:
    """``trace_messages.jsonl`` holds each body as ``TraceDataEncoder.decoderFromTraceDataString``
    (client 5.5.0) read it; rmqlib's contexts are the same, field for field."""
    common = {"type": "trace_type", "msgId": "msg_id", "keys": "keys"}
    by_type = {
        PUB: {"timeStamp": "timestamp_ms", "regionId": "region_id", "groupName": "group",
              "topic": "topic", "tags": "tags", "storeHost": "store_host",
              "bodyLength": "body_length", "costTime": "cost_ms", "msgType": "msg_type",
              "offsetMsgId": "offset_msg_id", "success": "success"},
        SUB_BEFORE: {"timeStamp": "timestamp_ms", "regionId": "region_id", "groupName": "group",
                     "requestId": "request_id", "retryTimes": "retry_times"},
        SUB_AFTER: {"requestId": "request_id", "costTime": "cost_ms", "success": "success",
                    "contextCode": "context_code", "timeStamp": "timestamp_ms",
                    "groupName": "group"},
        END_TRANSACTION: {"timeStamp": "timestamp_ms", "regionId": "region_id",
                          "groupName": "group", "topic": "topic", "tags": "tags",
                          "storeHost": "store_host", "msgType": "msg_type",
                          "transactionId": "transaction_id",
                          "transactionState": "transaction_state",
                          "fromTransactionCheck": "from_transaction_check"},
    }
    for message in truth.trace_messages:
        ours = final.decoded[message["queueOffset"]].records
        assert len(ours) == len(message["contexts"])
        for java, mine in zip(message["contexts"], ours, strict=True):
            fields = {**common, **by_type[java["type"]]}
            for java_name, attr in fields.items():
                value = java[java_name]
                expected = java_text(value) if isinstance(value, str) else value
                assert getattr(mine, attr) == expected, (message["queueOffset"], java_name)


def test_every_send_has_its_pub_context(final: Copy, truth: Truth) -> None:
    pubs = Counter((c.group, c.msg_id) for c in final.typed(PUB))
    expected = Counter()
    for s in truth.acked():
        expected[(s["producerGroup"], s["pubMsgId"])] = 1  # a batch's members share one Pub
    assert pubs == expected
    by_id = {c.msg_id: c for c in final.typed(PUB)}
    for s in truth.acked():
        pub = by_id[s["pubMsgId"]]
        assert s["msgId"] in pub.msg_id.split(",")
        assert pub.topic == s["topic"] and pub.success is True
        assert pub.msg_type == s["traceMsgType"]
        assert pub.offset_msg_id == s["pubOffsetMsgId"]
        assert pub.region_id == "DefaultRegion"
        # the context is made before the send (sendMessageBefore) and dispatched after it
        assert pub.timestamp_ms <= s["sendEndMs"]
    batch = [s for s in truth.acked() if s["batch"]]
    assert batch and all(len(by_id[s["pubMsgId"]].msg_id.split(",")) == 5 for s in batch)


def consume_requests(truth: Truth) -> dict[tuple[str, str], dict]:
    """The traced consumptions by (trace request id, msgId): the harness took the request id from
    the trace context the client's hook made for that very listener call, so a message delivered
    twice with the same reconsumeTimes (a transaction the broker committed twice, see
    ``txCommittedCopies``) is two consumptions, each with its own SubBefore/SubAfter pair."""
    traced = [c for c in truth.consumed if c["traceExpected"]]
    by_request = {(c["traceRequestId"], c["msgId"]): c for c in traced}
    assert len(by_request) == len(traced) and None not in {r for r, _ in by_request}
    return by_request


def test_every_consumption_has_its_sub_before_and_sub_after(final: Copy, truth: Truth) -> None:
    traced = [c for c in truth.consumed if c["traceExpected"]]
    before = {(c.request_id, c.msg_id): c for c in final.typed(SUB_BEFORE)}
    after = {(c.request_id, c.msg_id): c for c in final.typed(SUB_AFTER)}
    assert len(after) == len(final.typed(SUB_AFTER)) == len(before) == len(final.typed(SUB_BEFORE))
    assert Counter((c.group, c.msg_id, c.retry_times) for c in before.values()) == Counter(
        (c["group"], c["msgId"], c["reconsumeTimes"]) for c in traced)
    requests = consume_requests(truth)
    assert set(before) == set(after) == set(requests)
    for key, c in requests.items():
        sub_before, sub_after = before[key], after[key]
        assert (sub_before.group, sub_before.retry_times) == (c["group"], c["reconsumeTimes"])
        assert sub_after.group == c["group"]
        assert sub_after.success is c["success"]
        assert sub_after.context_code == (CONSUME_SUCCESS if c["success"] else CONSUME_FAILED)
        # SubBefore is stamped before the listener runs, SubAfter after it returned
        assert sub_before.timestamp_ms <= c["listenerStartMs"]
        assert sub_after.timestamp_ms >= c["listenerEndMs"]
    retried = [c for c in traced if c["reconsumeTimes"] > 0]
    assert retried and {c["group"] for c in retried} == {"G_TRACE_RETRY"}
    assert {c["group"] for c in traced} == {"G_TRACE_ALL", "G_TRACE_RETRY", "G_TRACE_ORDERLY",
                                            "G_TRACE_TX"}


def test_batch_members_are_consumed_untraced(final: Copy, truth: Truth) -> None:
    """The broker adds MSG_REGION to a send's own properties only: a batch member has none, its
    consumer's trace context no region, and the client's dispatcher drops such contexts."""
    untraced = [c for c in truth.consumed if not c["traceExpected"]]
    batch_ids = {s["msgId"] for s in truth.sends if s["batch"]}
    assert untraced and {c["msgId"] for c in untraced} == batch_ids
    assert all(c["regionProp"] is None for c in untraced)
    sub_ids = {c.msg_id for c in final.contexts if c.trace_type in (SUB_BEFORE, SUB_AFTER)}
    assert not sub_ids & batch_ids
    members = [r for r in final.of_topic("TopicTraceNormal")
               if r.properties.get("UNIQ_KEY") in batch_ids]
    assert len(members) == len(batch_ids)
    assert all("MSG_REGION" not in r.properties for r in members)


def test_every_transaction_decision_has_its_end_transaction(final: Copy, truth: Truth) -> None:
    ends = final.typed(END_TRANSACTION)
    assert Counter((c.msg_id, c.transaction_state, c.from_transaction_check) for c in ends) == \
        Counter((e["msgId"], e["state"], e["fromTransactionCheck"]) for e in truth.tx_events)
    assert {c.group for c in ends} == {TX_PRODUCER}
    assert {c.topic for c in ends} == {TX_TOPIC}
    # the hook reports every decision, rollback and UNKNOW included, as Trans_msg_Commit
    assert {c.msg_type for c in ends} == {"Trans_msg_Commit"}
    assert all(c.transaction_id == c.msg_id for c in ends)
    checks = Counter(e["msgId"] for e in truth.tx_events if e["kind"] == "check")
    for s in truth.acked():
        if s["txPlan"] == "never":
            assert checks[s["msgId"]] == 3  # transactionCheckMax
            assert s["txCheckAnswers"] == ["UNKNOW"] * 3


def test_transaction_system_topics_hold_what_the_transactions_did(final: Copy,
                                                                 truth: Truth) -> None:
    txs = [s for s in truth.acked() if s["txPlan"]]
    by_offset = {r.physical_offset: r for r in final.records}
    half = final.of_topic(HALF)
    assert half and len(half) == truth.max_offset(HALF)
    for s in txs:
        record = by_offset[s["commitLogOffset"]]  # the half message the producer was answered for
        assert record.topic == HALF and record.properties["UNIQ_KEY"] == s["msgId"]
        assert record.properties["REAL_TOPIC"] == TX_TOPIC
        # stored as a plain message in the half topic, so that it gets a consume-queue unit
        assert record.transaction_type == TransactionType.NOT
    # every check re-puts the half message (TRANSACTION_CHECK_TIMES counting) before asking (the
    # harness made sure the producer answered every one the broker made)
    checks = [e for e in truth.tx_events if e["kind"] == "check"]
    assert len(half) == len(txs) + len(checks)
    rechecked = {r.physical_offset: r for r in half if "TRANSACTION_CHECK_TIMES" in r.properties}
    assert set(rechecked) == {e["checkedCommitLogOffset"] for e in checks}
    for e in checks:
        copy = rechecked[e["checkedCommitLogOffset"]]
        assert copy.properties["UNIQ_KEY"] == e["msgId"]
        assert copy.properties["TRANSACTION_CHECK_TIMES"] == e["checkTimesProperty"]
    # each half copy where and as the broker answered the harness's pull of the half queue
    assert {r.physical_offset: (r.queue_offset, r.properties["UNIQ_KEY"],
                                r.properties.get("TRANSACTION_CHECK_TIMES")) for r in half} == {
        c["commitLogOffset"]: (c["queueOffset"], s["msgId"], c["checkTimes"])
        for s in txs for c in s["txHalfCopies"]}
    assert len(final.of_topic(OP_HALF)) == truth.max_offset(OP_HALF) > 0
    outcome = {s["msgId"]: s["txOutcome"] for s in txs}
    # the committed copies: one per COMMIT the broker stored, more than one when a check raced
    # the producer's decision (it answered COMMIT again, and the broker committed again)
    visible = final.of_topic(TX_TOPIC)
    copies = {c["commitLogOffset"]: (c["queueId"], c["queueOffset"], s["msgId"])
              for s in txs for c in s["txCommittedCopies"]}
    assert {r.physical_offset: (r.queue_id, r.queue_offset, r.properties["UNIQ_KEY"])
            for r in visible} == copies
    assert {m for _, _, m in copies.values()} == {m for m, o in outcome.items() if o == "commit"}
    commits = Counter(e["msgId"] for e in truth.tx_events if e["state"] == "COMMIT_MESSAGE")
    assert all(1 <= len(s["txCommittedCopies"]) <= commits[s["msgId"]] for s in txs
               if s["txOutcome"] == "commit")
    assert all(r.transaction_type == TransactionType.COMMIT for r in visible)
    # G_TRACE_TX consumed every committed copy (a second copy is a second delivery, retry 0)
    assert {c["commitLogOffset"] for c in truth.consumed
            if c["group"] == "G_TRACE_TX"} == set(copies)
    discarded = final.of_topic(CHECK_MAX)
    assert sorted(r.properties["UNIQ_KEY"] for r in discarded) == sorted(
        m for m, o in outcome.items() if o == "discarded")
    assert all(r.properties["TRANSACTION_CHECK_TIMES"] == "3" for r in discarded)


# --------------------------------------------------------------------------- s1


def test_s1_holds_the_undecided_transactions_and_the_traces_so_far(s1: Copy,
                                                                   truth: Truth) -> None:
    snap = truth.snapshots[0]
    assert snap["snapshot"] == "s1" and snap["checksBeforeCopyEnd"] == 0
    undecided = set(snap["undecidedTransactions"])
    plans = {s["msgId"]: s["txPlan"] for s in truth.acked() if s["txPlan"]}
    assert undecided == {m for m, p in plans.items() if p.startswith("unknown") or p == "never"}
    assert {r.properties["UNIQ_KEY"] for r in s1.of_topic(HALF)} >= undecided
    assert not undecided & {r.properties["UNIQ_KEY"] for r in s1.of_topic(TX_TOPIC)}
    assert not s1.of_topic(CHECK_MAX)
    assert not any(c.from_transaction_check for c in s1.typed(END_TRANSACTION))
    before, after = snap["traceTopicMaxOffsetBeforeCopy"], snap["traceTopicMaxOffsetAfterCopy"]
    assert before <= len(s1.traces) <= after
    for offset, decoded in s1.decoded.items():
        assert decoded.account.unreadable == [], offset
    sure = {m["queueOffset"]: m["bodySha256"] for m in truth.trace_messages if m["inS1"]}
    assert {r.queue_offset: hashlib.sha256(r.decompressed_body()).hexdigest()
            for r in s1.traces if r.queue_offset in sure} == sure
    # every send acked before the copy began is in it, where its offsetMsgId says (the half
    # message for a transactional send, the SCHEDULE_TOPIC_XXXX record for the delay message)
    by_offset = {r.physical_offset: r for r in s1.records}
    acked_before = [s for s in truth.acked() if s["snapshot"] == "s1"]
    assert len(acked_before) == snap["sendsAckedBeforeCopy"] > 0
    for s in acked_before:
        assert by_offset[s["commitLogOffset"]].properties["UNIQ_KEY"] == s["msgId"]
