"""The ``v5-traces`` store through the pipeline: ``message_traces``, ``transactions``, their
checks, saved queries and ``jobs trace``, held against the clients' own record (the harness
truth) and against the store read with rmqlib's reference decoders.

The hot copy ``s1`` was taken while some transactions were undecided and the broker had
not written every op message yet; ``final`` after the broker stopped. Both are loaded in
order, as two nights of one broker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from lakehouse import TEST_OPTIONS, delta_rows, reconcile_on_both_engines
from test_query_engines import TRACE_QUERIES, canonical
from test_traces_store import TX_TOPIC, Copy, Truth, _copy, _truth, consume_requests

from jobs.check.checks import TransactionRules
from jobs.check.engines import DuckDbEngine
from jobs.check.reconcile import reconcile_snapshot
from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import read_arrow
from jobs.lakehouse.jars import REPO_ROOT
from jobs.lakehouse.spark_session import SparkOnDemand
from jobs.lakehouse.tables import Registry
from jobs.load.job import LoadOptions, load_snapshot
from jobs.query.engine import open_engine
from jobs.query.local_engine import LocalEngine
from jobs.query.output import python_rows
from jobs.query.spark_engine import SparkEngine
from rmqlib.commitlog.records import CommitLogRecord
from rmqlib.traces import PUB, SUB_AFTER, SUB_BEFORE, decode_trace_body
from rmqlib.transactions import HALF_TOPIC, OP_HALF_TOPIC, decode_op_body

pytestmark = [pytest.mark.broker]

BROKER = "broker-a"
OUTCOME_STATE = {"commit": "committed", "rollback": "rolled_back", "discarded": "discarded"}
#: TraceRecord field -> message_traces column, where the names differ.
COLUMN_OF = {"position": "context_position", "length": "context_length",
             "group": "group_name", "timestamp_ms": "trace_time"}


def _no_spark() -> object:
    raise AssertionError("this load must not start Spark")


def _taken_at(truth: Truth, snapshot: str) -> datetime | None:
    """When the harness began copying ``snapshot`` (None: the final store, at rest)."""
    for snap in truth.snapshots:
        if snap["snapshot"] == snapshot:
            return datetime.fromtimestamp(snap["copyStartMs"] / 1000, tz=UTC)
    return None


def load_both(warehouse: Path, traces_store: Path, truth: Truth,
              options: LoadOptions, spark: object = None) -> Registry:
    """s1, then final, as two nights of one broker."""
    registry = Registry(spark, warehouse)
    on_demand = SparkOnDemand(_no_spark if spark is None else (lambda: spark))
    for snapshot, store in (("s1", traces_store / "snapshots" / "s1" / "store"),
                            ("final", traces_store / "store")):
        taken = _taken_at(truth, snapshot) or datetime.fromtimestamp(
            max(p.stat().st_mtime for p in store.rglob("*") if p.is_file()), tz=UTC)
        load_snapshot(on_demand, BROKER, snapshot, store,
                      LoadOptions(**{**options.__dict__, "taken_at": taken}),
                      registry=registry)
    return registry


@pytest.fixture(scope="module")
def truth(traces_store: Path) -> Truth:
    return _truth(str(traces_store))


@pytest.fixture(scope="module")
def final(traces_store: Path) -> Copy:
    return _copy(str(traces_store / "store"))


@pytest.fixture(scope="module")
def s1(traces_store: Path) -> Copy:
    return _copy(str(traces_store / "snapshots" / "s1" / "store"))


@pytest.fixture(scope="module")
def loaded(traces_store: Path, truth: Truth, tmp_path_factory: pytest.TempPathFactory
           ) -> Registry:
    """The two nights loaded in this process (no JVM), bodies kept."""
    return load_both(tmp_path_factory.mktemp("wh"), traces_store, truth,
                     LoadOptions(engine="local"))


def rows_of(registry: Registry, table: str, **equal: object) -> list[dict]:
    return read_arrow(registry[table].location, **equal).to_pylist()


def ms(value: datetime | None) -> int | None:
    return None if value is None else round(value.timestamp() * 1000)


# --------------------------------------------------------------------------- message_traces


def test_every_trace_context_is_a_row_field_by_field(loaded: Registry, final: Copy,
                                                     s1: Copy) -> None:
    """Each context of every trace message, as rmqlib's reference decoder reads it, is one
    row with the same fields, the trace message's place and the snapshot that first held it."""
    rows = {(r["physical_offset"], r["context_position"]): r
            for r in rows_of(loaded, T.MESSAGE_TRACES, broker=BROKER)}
    in_s1 = {r.physical_offset for r in s1.traces}
    expected = 0
    for record in final.traces:
        decoded = decode_trace_body(record.decompressed_body())
        assert decoded.account.unreadable == []
        for context in decoded.records:
            expected += 1
            row = rows[(record.physical_offset, context.position)]
            for name, value in context.__dict__.items():
                column = COLUMN_OF.get(name, name)
                got = ms(row[column]) if name == "timestamp_ms" else row[column]
                assert got == value, (record.physical_offset, context.position, name)
            assert row["trace_epoch_ms"] == context.timestamp_ms
            assert row["trace_topic"] == record.topic == "RMQ_SYS_TRACE_TOPIC"
            assert ms(row["store_time"]) == record.store_timestamp
            assert row["file_position"] == record.position
            assert row["source_file"] == f"commitlog/{Path(record.path).name}"
            assert row["first_snapshot_id"] == ("s1" if record.physical_offset in in_s1
                                                else "final")
    assert len(rows) == expected > 300


def test_every_consumption_the_listeners_saw_is_traced_once(loaded: Registry,
                                                            truth: Truth) -> None:
    traced = [c for c in truth.consumed if c["traceExpected"]]
    rows = rows_of(loaded, T.MESSAGE_TRACES, broker=BROKER)
    before = [r for r in rows if r["trace_type"] == SUB_BEFORE]
    starts = {(r["request_id"], r["msg_id"]): r for r in before}
    after = {(r["request_id"], r["msg_id"]): r for r in rows if r["trace_type"] == SUB_AFTER}
    assert Counter((r["group_name"], r["msg_id"], r["retry_times"]) for r in before) == \
        Counter((c["group"], c["msgId"], c["reconsumeTimes"]) for c in traced)
    # one SubBefore/SubAfter pair per listener call, by the trace request id the harness saw
    requests = consume_requests(truth)
    assert len(starts) == len(before) and set(starts) == set(after) == set(requests)
    for key, c in requests.items():
        start, end = starts[key], after[key]
        assert (start["group_name"], start["retry_times"]) == (c["group"], c["reconsumeTimes"])
        assert end["success"] is c["success"]
        assert ms(start["trace_time"]) <= c["listenerStartMs"]
        assert ms(end["trace_time"]) >= c["listenerEndMs"]
        assert start["trace_born_host"] == c["clientHost"]
    pubs = Counter(r["msg_id"] for r in rows if r["trace_type"] == PUB)
    assert set(pubs.values()) == {1}  # a batch's members share their one Pub
    assert set(pubs) == {s["pubMsgId"] for s in truth.acked()}


def _percentile(values: list[int], q: float) -> float:
    return round(float(np.percentile(values, q * 100, method="linear")), 2)


def test_the_consume_latency_query_equals_the_latencies_of_the_truths_consumptions(
        loaded: Registry, truth: Truth, final: Copy) -> None:
    """consume_latency, against the same percentiles computed here: every consumption the
    listeners saw whose send was traced, from its Pub's time to its SubAfter's (read by the
    reference decoder), grouped by group and hour of the consumption's end."""
    contexts = final.contexts
    sent = {c.msg_id: c.timestamp_ms for c in contexts if c.trace_type == PUB and c.success}
    ends = {(c.request_id, c.msg_id): c for c in contexts if c.trace_type == SUB_AFTER}
    latencies: dict[tuple[str, datetime], list[int]] = {}
    failed: Counter[tuple[str, datetime]] = Counter()
    # each consumption's own SubAfter (by its trace request id: a transaction committed twice
    # is consumed twice with retry 0, two latencies)
    for (request_id, msg_id), c in consume_requests(truth).items():
        if msg_id not in sent:
            continue
        end = ends[(request_id, msg_id)]
        hour = datetime.fromtimestamp(end.timestamp_ms // 3_600_000 * 3600, tz=UTC)
        latencies.setdefault((c["group"], hour), []).append(end.timestamp_ms - sent[c["msgId"]])
        failed[(c["group"], hour)] += not c["success"]
    expected = [{"group_name": group, "hour": hour, "consumptions": len(values),
                 "failed": failed[(group, hour)], "p50_ms": _percentile(values, 0.5),
                 "p95_ms": _percentile(values, 0.95), "p99_ms": _percentile(values, 0.99),
                 "max_ms": max(values)}
                for (group, hour), values in sorted(latencies.items())]
    engine = open_engine("local", loaded.warehouse)
    got = list(python_rows(engine.saved("consume_latency", {"since": "2000-01-01"})))
    engine.close()
    assert got == expected
    assert {row["group_name"] for row in got} == {"G_TRACE_ALL", "G_TRACE_RETRY",
                                                   "G_TRACE_ORDERLY", "G_TRACE_TX"}


# --------------------------------------------------------------------------- transactions


def expected_states(truth: Truth, copy: Copy) -> dict[str, str]:
    """Each transaction's state in a store copy, from the truth's outcome and what the copy
    holds (not from rmqlib's fold): committed once its committed copy is there, rolled back
    once an op message names one of its half messages, discarded once its discarded copy is
    there, else pending."""
    halves: dict[tuple[int, int], str] = {}
    for record in copy.of_topic(HALF_TOPIC):
        halves[(record.queue_id, record.queue_offset)] = record.properties["UNIQ_KEY"]
    named = {halves[(r.queue_id, offset)] for r in copy.of_topic(OP_HALF_TOPIC)
             for offset in decode_op_body(r.decompressed_body()).offsets
             if (r.queue_id, offset) in halves}
    visible = {r.properties["UNIQ_KEY"] for r in copy.of_topic(TX_TOPIC)}
    discarded = {r.properties["UNIQ_KEY"] for r in copy.of_topic("TRANS_CHECK_MAX_TIME_TOPIC")}
    states = {}
    for s in truth.acked():
        if not s["txPlan"] or s["msgId"] not in set(halves.values()):
            continue
        outcome, msg_id = s["txOutcome"], s["msgId"]
        if outcome == "commit" and msg_id in visible:
            states[msg_id] = "committed"
        elif outcome == "discarded" and msg_id in discarded:
            states[msg_id] = "discarded"
        elif outcome == "rollback" and msg_id in named:
            states[msg_id] = "rolled_back"
        else:
            states[msg_id] = "pending"
    return states


def test_each_transactions_state_at_each_snapshot_is_the_truths(loaded: Registry, truth: Truth,
                                                                s1: Copy, final: Copy) -> None:
    at_s1 = {r["msg_id"]: r for r in rows_of(loaded, T.TRANSACTIONS, broker=BROKER,
                                             snapshot_id="s1")}
    at_final = {r["msg_id"]: r for r in rows_of(loaded, T.TRANSACTIONS, broker=BROKER,
                                                snapshot_id="final")}
    s1_states = expected_states(truth, s1)
    assert {m: r["state"] for m, r in at_s1.items()} == s1_states
    # the truth's undecided ones are pending at s1, and so are rollbacks whose op was not out
    undecided = set(truth.snapshots[0]["undecidedTransactions"])
    assert undecided and all(s1_states[m] == "pending" for m in undecided)
    # final: a row for every transaction pending at s1 (all decided since), none for the rest
    pending_at_s1 = {m for m, state in s1_states.items() if state == "pending"}
    assert set(at_final) == pending_at_s1
    latest = {**at_s1, **at_final}
    sends = {s["msgId"]: s for s in truth.acked() if s["txPlan"]}
    assert set(latest) == set(sends)
    assert {m: r["state"] for m, r in latest.items()} == {
        m: OUTCOME_STATE[s["txOutcome"]] for m, s in sends.items()} == expected_states(truth,
                                                                                        final)
    # the first committed copy decides (a check racing the producer's COMMIT can make a second)
    committed: dict[str, CommitLogRecord] = {}
    for r in sorted(final.of_topic(TX_TOPIC), key=lambda r: r.physical_offset):
        committed.setdefault(r.properties["UNIQ_KEY"], r)
    halves = {name: {r.physical_offset for r in copy.of_topic(HALF_TOPIC)}
              for name, copy in (("s1", s1), ("final", final))}
    for msg_id, row in latest.items():
        s = sends[msg_id]
        assert (row["producer_group"], row["topic"], row["queue_id"]) == (
            s["producerGroup"], s["topic"], s["queueId"])
        assert row["half_offset"] == s["commitLogOffset"]
        assert row["transaction_id"] == s["txTransactionId"]
        # the half copies of the row's snapshot, as the broker answered the harness's pull: a
        # check that raced a decision s1 already held re-put the half message after s1 (the
        # decided row does not change); every other row's snapshot holds every check
        held = [c for c in s["txHalfCopies"] if c["commitLogOffset"] in halves[row["snapshot_id"]]]
        assert row["half_queue_offsets"] == [c["queueOffset"] for c in held]
        assert held[0]["queueOffset"] == s["halfQueueOffset"]
        assert row["checks"] == max(int(c["checkTimes"] or 0) for c in held)
        if row["snapshot_id"] == "final":
            assert row["checks"] == s["txCheckCount"] and len(held) == len(s["txHalfCopies"])
        decided = ms(row["decided_time"])
        if s["txDecidedMs"] is not None:  # the broker stores the decision after the client
            assert decided >= s["txDecidedMs"]
        assert row["seconds_to_decision"] == pytest.approx(
            (decided - ms(row["half_time"])) / 1000)
        if row["state"] == "committed":
            assert row["committed_offset"] == committed[msg_id].physical_offset == \
                s["txCommittedCopies"][0]["commitLogOffset"]
            assert row["committed_queue_offset"] == committed[msg_id].queue_offset
        else:
            assert row["committed_offset"] is None
        assert row["changed"] is True
    assert Counter(r["state"] for r in latest.values()) == Counter(
        {"committed": 15, "rolled_back": 7, "discarded": 2})


@pytest.mark.spark
def test_the_transaction_checks_fire_exactly_for_their_transactions(
        loaded: Registry, truth: Truth, s1: Copy, spark) -> None:  # type: ignore[no-untyped-def]
    """transaction_discarded names the discarded ones at the snapshot that discarded them;
    transaction_pending_too_long the ones pending at s1 longer than the threshold (0: every
    one stored before the copy began; the default 10 minutes: none). Both engines agree."""
    pending = [r for r in rows_of(loaded, T.TRANSACTIONS, broker=BROKER, snapshot_id="s1")
               if r["state"] == "pending"]
    taken = _taken_at(truth, "s1")
    older = sorted(r["half_offset"] for r in pending if r["half_time"] < taken)
    assert older

    def findings(snapshot: str, name: str) -> list[dict]:
        return [r for r in rows_of(loaded, T.CHECK_RESULTS, broker=BROKER, snapshot_id=snapshot)
                if r["check_name"] == name]

    reconcile_snapshot(DuckDbEngine(loaded.warehouse), loaded, BROKER, "s1",
                       TransactionRules(max_pending_minutes=0, severity="error"))
    [too_long] = findings("s1", "transaction_pending_too_long")
    assert (too_long["severity"], too_long["affected"], too_long["scope"]) == (
        "error", len(older), "producer_group=PG_TRACE_TX")
    assert too_long["sample_offsets"] == older[:5]
    assert findings("s1", "transaction_discarded") == []
    reconcile_snapshot(DuckDbEngine(loaded.warehouse), loaded, BROKER, "s1")
    assert findings("s1", "transaction_pending_too_long") == []
    reconcile_on_both_engines(spark, Registry(spark, loaded.warehouse), BROKER, "final")
    [discarded] = findings("final", "transaction_discarded")
    never = sorted(s["commitLogOffset"] for s in truth.acked() if s["txPlan"] == "never")
    assert (discarded["severity"], discarded["affected"], discarded["sample_offsets"]) == (
        "error", len(never), never)
    assert findings("final", "transaction_pending_too_long") == []


# --------------------------------------------------------------------------- reading them


def test_jobs_trace_shows_the_send_the_consumptions_and_the_transaction(
        loaded: Registry, truth: Truth) -> None:
    checked = next(s for s in truth.acked() if s["txPlan"] == "unknown-commit")
    checks = checked["txCheckCount"]
    run = subprocess.run([sys.executable, "-m", "jobs", "trace", checked["msgId"]],
                         capture_output=True, text=True, cwd=REPO_ROOT, check=False,
                         env={**os.environ, "RMQ_WAREHOUSE": str(loaded.warehouse)})
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "sent by PG_TRACE_TX from 127.0.0.1 to 127.0.0.1:" in out
    assert "local transaction answered UNKNOW (first)" in out
    assert "local transaction answered COMMIT_MESSAGE (to the broker's check)" in out
    assert "consumed by G_TRACE_TX on 127.0.0.1 (retry 0)" in out
    assert "at s1: pending (0 checks)" in out
    # one check, or two when a check raced the COMMIT answer to the first one
    assert "at final: committed after" in out and f"({checks} check{'' if checks == 1 else 's'})" \
        in out


@pytest.mark.spark
def test_the_trace_and_transaction_queries_agree_on_both_engines(
        loaded: Registry, traces_store: Path, truth: Truth, spark,  # type: ignore[no-untyped-def]
        tmp_path: Path) -> None:
    """Each saved query over traces and transactions answers with rows, the same on DataFusion
    and on Spark: undecided_transactions over a warehouse holding s1 only (at final every
    transaction is decided), the others over both nights."""
    only_s1 = Registry(None, tmp_path / "s1")
    load_snapshot(SparkOnDemand(_no_spark), BROKER, "s1",
                  traces_store / "snapshots" / "s1" / "store",
                  LoadOptions(engine="local", taken_at=_taken_at(truth, "s1")), registry=only_s1)
    checked = next(s for s in truth.acked() if s["txPlan"] == "unknown-commit")["msgId"]
    since = {"since": "2000-01-01"}
    cases = {"consume_latency": (loaded, since), "slowest_consumptions": (loaded, since),
             "failed_consumptions": (loaded, since), "undecided_transactions": (only_s1, None),
             "message_trace_contexts": (loaded, {"msg_id": checked}),
             "transaction_history": (loaded, {"msg_id": checked})}
    assert set(cases) == TRACE_QUERIES
    answers = {}
    for name, (registry, params) in cases.items():
        warehouse = Path(registry.warehouse)
        local = LocalEngine(warehouse).saved(name, params)
        assert local.num_rows > 0, name
        assert canonical(local) == canonical(SparkEngine(spark, warehouse).saved(name, params))
        answers[name] = list(python_rows(local))
    failed = [c for c in truth.consumed if c["traceExpected"] and not c["success"]]
    assert Counter((r["group_name"], r["msg_id"], r["retry_times"])
                   for r in answers["failed_consumptions"]) == Counter(
        (c["group"], c["msgId"], c["reconsumeTimes"]) for c in failed)
    costs = [r["cost_ms"] for r in answers["slowest_consumptions"]]
    assert costs == sorted(costs, reverse=True)
    pending = {r["msg_id"] for r in rows_of(only_s1, T.TRANSACTIONS, snapshot_id="s1")
               if r["state"] == "pending"}
    assert {r["msg_id"] for r in answers["undecided_transactions"]} == pending
    assert [r["state"] for r in answers["transaction_history"]] == ["pending", "committed"]


# --------------------------------------------------------------------------- invariance


@pytest.mark.spark
def test_spark_and_body_policy_none_give_the_same_traces_and_transactions(
        loaded: Registry, traces_store: Path, truth: Truth, spark,  # type: ignore[no-untyped-def]
        tmp_path: Path) -> None:
    """Trace rows are cut from the bodies before the body policy drops them, and op bodies
    are kept whatever it is: the executors' load with bodies dropped writes the same rows as
    the in-process load with bodies kept."""
    other = load_both(tmp_path / "wh", traces_store, truth,
                      LoadOptions(**{**TEST_OPTIONS.__dict__, "body_policy": "none"}), spark)
    for table in (T.MESSAGE_TRACES, T.TRANSACTIONS):
        assert delta_rows(other[table].location) == delta_rows(loaded[table].location), table
    ops = [r for r in rows_of(other, T.MESSAGES, broker=BROKER) if r["topic"] == OP_HALF_TOPIC]
    assert ops and all(r["body"] is not None and r["body_policy"] == "full" for r in ops)
    traces = [r for r in rows_of(other, T.MESSAGES, broker=BROKER)
              if r["topic"] == "RMQ_SYS_TRACE_TOPIC"]
    assert traces and all(r["body"] is None and r["body_policy"] == "none" for r in traces)


def test_a_damaged_trace_context_is_quarantined_and_every_body_byte_accounted(
        traces_store: Path, truth: Truth, final: Copy, tmp_path: Path) -> None:
    """One context of an uncompressed trace message made unreadable (its type's first byte):
    the message's other contexts are rows, the damaged one a quarantine row (stream trace)
    at the trace message's file position, and rows plus quarantine cover the whole body."""
    record = next(r for r in final.traces[1:-1] if not r.sysflag & 0x1)
    body = record.decompressed_body()
    contexts = decode_trace_body(body).records
    victim = contexts[len(contexts) // 2]
    store = tmp_path / "store"
    shutil.copytree(traces_store / "store", store)
    segment = store / "commitlog" / Path(record.path).name
    with segment.open("r+b") as f:
        f.seek(record.position)
        raw = f.read(record.total_size)
        assert raw.count(body) == 1
        f.seek(record.position + raw.index(body) + victim.position)
        f.write(b"X")
    registry = Registry(None, tmp_path / "wh")
    load_snapshot(SparkOnDemand(_no_spark), BROKER, "final", store, LoadOptions(engine="local"),
                  registry=registry)
    rows = [r for r in rows_of(registry, T.MESSAGE_TRACES, broker=BROKER)
            if r["physical_offset"] == record.physical_offset]
    assert sorted(r["context_position"] for r in rows) == sorted(
        c.position for c in contexts if c is not victim)
    [quarantined] = [q for q in rows_of(registry, T.QUARANTINE, broker=BROKER)
                     if q["stream"] == "trace"]
    assert (quarantined["file"], quarantined["offset"], quarantined["length"]) == (
        f"commitlog/{segment.name}", record.position, victim.length)
    assert f"body bytes [{victim.position}, {victim.position + victim.length})" in \
        quarantined["reason"]
    assert sum(r["context_length"] for r in rows) + quarantined["length"] == len(body)


def test_the_nightly_page_shows_latency_per_group_and_the_transactions(
        loaded: Registry, truth: Truth, s1: Copy, tmp_path: Path) -> None:
    """The final snapshot's page: per group, the percentiles of its traced consumptions new
    in that snapshot (computed here from the table's rows), and one line per transaction
    row of the snapshot: those still pending at s1 (how many depends on the run's timing).
    The percentiles of whole milliseconds are exact at two decimals, where the query rounds
    them: unrounded, the engine's and numpy's last bits differ, and one decimal of a
    x.x5 tie went either way (CI: 268.0 against 268.1)."""
    import re

    from jobs.report.pages import write_report

    rows = rows_of(loaded, T.MESSAGE_TRACES, broker=BROKER)
    sent = {r["msg_id"]: r["trace_epoch_ms"] for r in rows
            if r["trace_type"] == PUB and r["success"]}
    starts = {(r["request_id"], r["msg_id"]): r for r in rows if r["trace_type"] == SUB_BEFORE}
    latencies: dict[str, list[int]] = {}
    failed: Counter[str] = Counter()
    for r in rows:
        if r["trace_type"] == SUB_AFTER and r["first_snapshot_id"] == "final" \
                and r["msg_id"] in sent:
            group = r["group_name"] or starts[(r["request_id"], r["msg_id"])]["group_name"]
            latencies.setdefault(group, []).append(r["trace_epoch_ms"] - sent[r["msg_id"]])
            failed[group] += not r["success"]
    page = write_report(loaded, BROKER, "final", tmp_path).read_text()
    table = re.search(r'<table id="latency-table">(.*?)</table>', page, re.S).group(1)
    shown = [re.findall(r"<td>([^<]*)</td>", row)
             for row in re.findall(r"<tr class.*?</tr>", table)]
    assert shown == [
        [group, str(len(values)), str(failed[group]),
         *(f"{round(float(np.percentile(values, q, method='linear')), 2):,.1f}"
           for q in (50, 95, 99)),
         f"{max(values):,}"] for group, values in sorted(latencies.items())]
    # every group whose consumptions' traces were new at final (G_TRACE_ALL's may all have been
    # in s1 already: it consumed everything before the copy); G_TRACE_TX's checked ones are new
    assert [row[0] for row in shown] == sorted(latencies) and "G_TRACE_TX" in latencies
    states = Counter(r["state"] for r in rows_of(loaded, T.TRANSACTIONS, broker=BROKER,
                                                 snapshot_id="final"))
    pending_at_s1 = [m for m, state in expected_states(truth, s1).items() if state == "pending"]
    assert page.count('<tr class="transaction-') == sum(states.values()) == len(pending_at_s1) > 0
    assert f"{states['discarded']} discarded, {states['rolled_back']} rolled back, " \
           f"{states['committed']} committed" in page
