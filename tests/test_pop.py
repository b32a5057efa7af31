"""rmqlib.pop: pop consumers' in-flight messages from checkpoint and ack records.

Hypothesis draws pops and acks and writes them as the broker does (each checkpoint and ack
once under the timer topic and, when due, again under the revive topic, in any order): the
in-flight set is every popped offset not acked, whatever the order and the copies. The real
5.5.0 brokers of the harness hold the reader to the in-flight set the client left (pops,
acks, a batch ack, a changed invisible time), in classic pop (``v5-pop``: checkpoint and ack
records) and KV pop (``v5-pop-kv``: kvStore/ records), and the lakehouse's in-flight column
to ``consumerProgress``. KV records drawn by hypothesis round-trip through their key.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqlib.pop import (
    REVIVE_GROUP,
    REVIVE_TOPIC_PREFIX,
    TIMER_TOPIC,
    InFlight,
    PopRecord,
    decode_kv_records,
    kv_key,
    read_pop_state,
    revive_offsets,
)

REVIVE = REVIVE_TOPIC_PREFIX + "HarnessCluster"

pops = st.lists(st.tuples(st.sampled_from(["G1", "G2"]), st.integers(0, 3),
                          st.lists(st.integers(0, 40), min_size=1, max_size=8, unique=True),
                          st.integers(0, 10**6)),
                min_size=1, max_size=8, unique_by=lambda p: (p[0], p[1], p[3]))


def record(topic: str, tag: str, body: dict, revive_queue: int, offset: int = 0) -> PopRecord:
    properties = {"TAGS": tag}
    if topic == TIMER_TOPIC:
        properties |= {"REAL_TOPIC": REVIVE, "REAL_QID": str(revive_queue)}
    return PopRecord(topic, revive_queue, offset, properties, json.dumps(body).encode(), 0)


def pop_records(drawn: list, acked: dict, rng: random.Random) -> list[PopRecord]:
    records = []
    for number, (group, queue, offsets, pop_time) in enumerate(drawn):
        start = min(offsets)
        ck = {"c": group, "t": "T", "q": queue, "so": start, "pt": pop_time, "it": 60_000,
              "n": len(offsets), "d": [o - start for o in offsets], "bn": "broker-a", "bm": 0}
        key = {"c": group, "t": "T", "q": queue, "so": start, "pt": pop_time, "bn": "broker-a"}
        done = acked[number]
        copies = [record(TIMER_TOPIC, "ck", ck, number % 8)]
        if done:
            copies.append(record(TIMER_TOPIC, "bAck", {**key, "ao": -1, "aol": done}, 0))
            copies.append(record(TIMER_TOPIC, "ack", {**key, "ao": done[0]}, 0))  # again
        copies.append(record(REVIVE, "ck", ck, number % 8, 100 + number))  # due: revive copy
        records += copies
    rng.shuffle(records)
    return records


@settings(max_examples=80, deadline=None)
@given(drawn=pops, seed=st.integers(0, 2**32 - 1))
def test_in_flight_is_every_popped_offset_not_acked_whatever_the_order_and_copies(
        drawn: list, seed: int) -> None:
    rng = random.Random(seed)
    acked = {n: sorted(rng.sample(offsets, rng.randint(0, len(offsets))))
             for n, (_, _, offsets, _) in enumerate(drawn)}
    state = read_pop_state(pop_records(drawn, acked, rng))
    assert state.unreadable == [] and state.orphan_acks == 0
    got = sorted((m.group, m.queue_id, m.pop_time, m.queue_offset)
                 for m in state.in_flight({}))
    want = sorted((g, q, t, o) for n, (g, q, offsets, t) in enumerate(drawn)
                  for o in offsets if o not in acked[n])
    assert got == want
    # once the revive group has passed every checkpoint, nothing is in flight any more
    everything = {n % 8: 100 + len(drawn) for n in range(len(drawn))}
    assert state.in_flight(everything) == []


def test_revive_offsets_are_the_revive_groups_own() -> None:
    rows = [(REVIVE, REVIVE_GROUP, 0, 5), (REVIVE, "G1", 0, 9), ("T", REVIVE_GROUP, 1, 7)]
    assert revive_offsets(rows) == {0: 5}


@given(body=st.binary(max_size=64), tag=st.sampled_from(["ck", "ack", "bAck", "x"]))
def test_any_body_is_read_or_named_never_an_exception(body: bytes, tag: str) -> None:
    state = read_pop_state([PopRecord(REVIVE, 0, 0, {"TAGS": tag}, body, 7)])
    assert len(state.checkpoints) + len(state.unreadable) + state.orphan_acks <= 1


@given(group=st.text(st.characters(codec="ascii", exclude_characters="@"), min_size=1,
                    max_size=10),
       queue=st.integers(0, 2**31 - 1), offset=st.integers(0, 2**62),
       pop_time=st.integers(0, 2**40), invisible=st.integers(0, 2**30))
def test_a_kv_pop_record_round_trips_and_a_foreign_one_is_named(
        group: str, queue: int, offset: int, pop_time: int, invisible: int) -> None:
    value = json.dumps({"popTime": pop_time, "groupId": group, "topicId": "T", "queueId": queue,
                        "retryFlag": 0, "invisibleTime": invisible, "offset": offset}).encode()
    message = InFlight(group, "T", queue, offset, pop_time, pop_time + invisible, -1, kv=True)
    found, bad = decode_kv_records([(kv_key(message), value), (b"junk", value),
                                    (kv_key(message), b"{}")])
    assert found == [message]
    assert [why for _, why in bad] == ["key does not name the message its value holds",
                                       "value is not a pop record's JSON"]


# --------------------------------------------------------------------------- the real broker


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def store_in_flight(store: Path) -> dict[tuple[str, str, int], list[int]]:
    """The in-flight set of a full scan; the open records alone give the same."""
    from rmqlib.store.pop_state import read_open_pop_state, read_store_pop_state

    state, flying = read_store_pop_state(store)
    assert state.unreadable == [] and state.orphan_acks == 0
    assert read_open_pop_state(store)[1] == flying
    found: dict[tuple[str, str, int], list[int]] = {}
    for message in flying:
        found.setdefault((message.group, message.topic, message.queue_id), []).append(
            message.queue_offset)
    return found


def truth_in_flight(rows: list[dict]) -> dict[tuple[str, str, int], list[int]]:
    return {(r["group"], r["topic"], r["queueId"]): r["offsets"] for r in rows if r["offsets"]}


@pytest.mark.broker
def test_the_messages_in_flight_are_the_ones_the_clients_left_unacked(pop_store: Path) -> None:
    truth = json.loads((pop_store / "truth" / "pop.json").read_text())
    assert store_in_flight(pop_store / "store") == truth_in_flight(truth["inflight"])
    assert store_in_flight(pop_store / "snapshots" / "s1" / "store") == truth_in_flight(
        truth["snapshots"]["s1"]["inflight"])


@pytest.mark.broker
def test_a_night_gives_consumer_progress_in_flight_column(pop_store: Path,
                                                          tmp_path: Path) -> None:
    """consumer_lag.inflight_messages is consumerProgress's: 20 per queue for the pull
    group that pulled past its commit; for the pop groups 0 (classic) or G_POP's last batch
    (KV): the broker's own number does not count the popped messages."""
    from pipeline_nights import assert_progress_equals, offsets_and_lag, run_night, write_config

    store = pop_store / "store"
    run_night(write_config(tmp_path, "pop-a", store), "2026-11-24T0200Z", store)
    truth = jsonl(pop_store / "truth" / "consumer_groups.jsonl")
    offsets, lag = offsets_and_lag(tmp_path / "warehouse", "pop-a", "2026-11-24T0200Z")
    assert_progress_equals(truth, offsets, lag)
    # classic pop never writes a pull offset; KV pop's is the end of the last pop batch
    popped = 20 if pop_store.name.endswith("-kv") else 0
    assert {key[0]: row["inflight_messages"] for key, row in lag.items()
            if key[1] == "TopicPop"} == {"G_POP": popped, "G_PUSHPOP": 0, "G_PUSH": 0,
                                         "G_PULL": 20}


@pytest.mark.broker
def test_verify_is_clean_and_counts_kv_pops_messages(pop_store: Path) -> None:
    from rmqlib.store.verify import verify_store

    report = verify_store(pop_store / "store")
    assert report.errors == [], report.errors
    truth = json.loads((pop_store / "truth" / "pop.json").read_text())
    in_kv = sum(len(r["offsets"]) for r in truth["inflight"]) if pop_store.name.endswith(
        "-kv") else 0
    assert report.counts["pop_in_flight"] == in_kv


@pytest.mark.broker
def test_a_nights_pop_in_flight_rows_are_the_clients_unacked_messages(pop_store: Path,
                                                                      tmp_path: Path) -> None:
    """Both copies, each its own night: the pop_in_flight rows are exactly the messages the
    client left popped and unacked, and consumer_lag.popped_messages counts them."""
    from pipeline_nights import offsets_and_lag, rows, run_night, write_config

    from jobs.lakehouse import tables as T

    truth = json.loads((pop_store / "truth" / "pop.json").read_text())
    config = write_config(tmp_path, "pop-a", pop_store / "store")
    nights = {"2026-11-23T0200Z": (pop_store / "snapshots" / "s1" / "store",
                                   truth["snapshots"]["s1"]["inflight"]),
              "2026-11-24T0200Z": (pop_store / "store", truth["inflight"])}
    for snapshot_id, (store, want) in nights.items():
        run_night(config, snapshot_id, store)
        got: dict[tuple[str, str, int], list[int]] = {}
        for row in sorted(rows(tmp_path / "warehouse", T.POP_IN_FLIGHT, broker="pop-a",
                               snapshot_id=snapshot_id), key=lambda r: r["queue_offset"]):
            got.setdefault((row["group_name"], row["topic"], row["queue_id"]), []).append(
                row["queue_offset"])
            assert row["pop_state"] == ("kv" if pop_store.name.endswith("-kv") else "checkpoint")
        assert got == truth_in_flight(want)
        # consumer_lag has a row per queue with an offset (the hot copy predates G_POP's)
        lag = offsets_and_lag(tmp_path / "warehouse", "pop-a", snapshot_id)[1]
        assert {key: row["popped_messages"] for key, row in lag.items() if row["popped_messages"]
                } == {key: len(offsets) for key, offsets in got.items() if key in lag}
    assert set(got) <= set(lag)  # at the end every popping group has its offsets


@pytest.mark.broker
def test_the_open_records_alone_give_the_full_scans_set_without_a_timer_checkpoint(
        pop_store: Path, tmp_path: Path) -> None:
    """The hot copy, taken before the timer wrote its log, and without config/timercheck
    (the timer never ran): every checkpoint still comes from the timer queue's units."""
    import shutil

    from rmqlib.store.pop_state import read_open_pop_state, read_store_pop_state

    store = tmp_path / "store"
    shutil.copytree(pop_store / "snapshots" / "s1" / "store", store)
    (store / "config" / "timercheck").unlink(missing_ok=True)
    opened, flying = read_open_pop_state(store)
    assert opened.unreadable == [] and len(flying) == 100
    assert flying == read_store_pop_state(store)[1]
