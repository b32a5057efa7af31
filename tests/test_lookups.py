"""Lookups by msgId, key, offsetMsgId and queue position (jobs/query/lookup.py over the
message_lookup table the load writes): exact, and reading only the files that hold them.

The warehouse holds the three successive snapshots of the running v5-growing broker (one
broker's history in several loads, messages deleted by retention after s1) and the
v5-features store (inner batch members that share a record's offsetMsgId, messages with
several keys, IPv6 ids), loaded in this process. For messages drawn from the brokers'
ground truth, a saved lookup query narrowed by the lookup table must return exactly the
rows the same SQL returns scanning the whole table, those rows must include the truth's
message, and DataFusion must open exactly the messages files that hold them.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lakehouse import IN_PROCESS_OPTIONS
from s3_server import serving_bucket

from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import arrow_dataset
from jobs.lakehouse.spark_session import SparkOnDemand
from jobs.lakehouse.tables import Registry, table_location
from jobs.load.job import load_snapshot
from jobs.query import lookup, narrowing
from jobs.query.local_engine import LocalEngine
from jobs.query.saved import saved_query

pytestmark = [pytest.mark.broker]
GROWING = ("s1", "s2", "s3")
SHARED_FIXTURES = [HealthCheck.function_scoped_fixture]


def _no_spark() -> object:
    raise AssertionError("these loads run in process")


def load_in_process(warehouse: Path, broker: str, snapshot_id: str, store: Path,
                    lookup: bool = True) -> None:
    load_snapshot(SparkOnDemand(_no_spark), broker, snapshot_id, store,  # type: ignore[arg-type]
                  replace(IN_PROCESS_OPTIONS, lookup=lookup), registry=Registry(None, warehouse))


def truth(store_dir: Path) -> list[dict]:
    """The truth's stored messages (sent and acknowledged, with where they were stored)
    that the loaded copies surely hold: of a running broker's copies, those acked before a
    copy began (``inSnapshots``), not those sent during the last copy or after it."""
    rows = [json.loads(line) for line in
            (store_dir / "truth" / "messages.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("acked") and r.get("msgId") and r.get("offsetMsgId")
            and r.get("inSnapshots", ["the whole store"])]


@pytest.fixture(scope="module")
def s3_bucket(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A bucket of the local S3 server (tests/s3_server.py), this process pointed at it."""
    with serving_bucket(tmp_path_factory.mktemp("s3") / "root", "lake"):
        yield "s3://lake"


def load_all(warehouse: Path | str, growing_store: Path, features_store: Path) -> None:
    for name in GROWING:
        load_in_process(warehouse, "g", name, growing_store / "snapshots" / name / "store")
    load_in_process(warehouse, "f", "s1", features_store / "store")


@pytest.fixture(scope="module")
def disk_warehouse(growing_store, features_store, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    warehouse = tmp_path_factory.mktemp("lookups")
    load_all(warehouse, growing_store, features_store)
    return warehouse


@pytest.fixture(scope="module")
def bucket_warehouse(s3_bucket, growing_store, features_store) -> str:  # type: ignore[no-untyped-def]
    warehouse = f"{s3_bucket}/lookups"
    load_all(warehouse, growing_store, features_store)
    return warehouse


@pytest.fixture(scope="module", params=["disk", "s3"])
def warehouse(request) -> Path | str:  # type: ignore[no-untyped-def]
    """The lookups' warehouse, in a directory and in an S3 bucket: the same answers and
    the same files opened from both. (The draws and the every-member sweep below run on
    the directory; on the bucket, a sample of them: three times slower per query.)"""
    return request.getfixturevalue("disk_warehouse" if request.param == "disk"
                                   else "bucket_warehouse")


class Messages(list):  # type: ignore[type-arg]
    """The truth's messages; printed short in a failing example."""

    def __repr__(self) -> str:
        return f"<{len(self)} truth messages>"


@pytest.fixture(scope="module")
def sent(growing_store, features_store) -> Messages:  # type: ignore[no-untyped-def]
    return Messages(truth(growing_store) + truth(features_store))


def narrowed_only(engine: LocalEngine, name: str, params: dict[str, str],
                  ) -> tuple[list[dict], list[Counter[str]], Counter[str], tuple[str, dict]]:
    """The saved query's rows as the engine answers it (narrowed), the files each table
    opened in each step that finds pointers (one query per value looked up) and in the
    narrowed query itself, and the narrowed statement."""
    steps: list[Counter[str]] = []

    def counted(sql: str, bound: dict[str, str]):  # type: ignore[no-untyped-def]
        steps.append(Counter(engine.files_opened(sql, bound)))
        return engine.query(sql, bound)

    sql, checked = lookup.saved_statement(counted, engine.warehouse, name, params)
    assert sql != saved_query(name).sql, "the lookup table must narrow the query"
    return (engine.query(sql, checked).to_pylist(), steps,
            Counter(engine.files_opened(sql, checked)), (sql, checked))


def narrowed_and_full(engine: LocalEngine, name: str, params: dict[str, str],
                      ) -> tuple[list[dict], list[dict], list[Counter[str]], Counter[str]]:
    """:func:`narrowed_only`'s rows, the rows of the query's SQL scanning everything, and
    :func:`narrowed_only`'s files opened."""
    narrowed, steps, final, (_sql, checked) = narrowed_only(engine, name, params)
    full = engine.query(saved_query(name).sql, checked).to_pylist()
    return narrowed, full, steps, final


def files_that_may_hold(warehouse: Path, rows: list[dict], offset: int | None) -> int:
    """How many messages data files hold one of ``rows``, or (``offset``: an offsetMsgId's,
    whose broker the id does not say) span that physical offset: read file by file."""
    wanted = {(r["broker"], r["physical_offset"]) for r in rows}
    holding = 0
    for fragment in arrow_dataset(table_location(warehouse, T.MESSAGES)).get_fragments():
        found = fragment.to_table(columns=["broker", "physical_offset"]).to_pylist()
        offsets = [r["physical_offset"] for r in found]
        spans = offset is not None and min(offsets) <= offset <= max(offsets)
        holding += spans or any((r["broker"], r["physical_offset"]) in wanted for r in found)
    return holding


def as_json(rows: list[dict]) -> list[str]:
    """Rows as a sorted multiset of JSON texts (times and dates as text)."""
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)


def lookups_of(message: dict) -> list[tuple[str, dict[str, str]]]:
    """The saved lookup queries that must find ``message``: by msgId, offsetMsgId, each
    key, and its queue position when it was stored where it was sent."""
    queries = [("message_by_msg_id", {"msg_id": message["msgId"]}),
               ("message_by_msg_id", {"msg_id": message["offsetMsgId"]})]
    queries += [("message_by_key", {"key": key}) for key in message["keys"]]
    if message.get("storedTopic") == message["topic"] and message.get("queueOffset") is not None:
        queries.append(("message_by_position", {
            "topic": message["topic"], "queue_id": str(message["queueId"]),
            "queue_offset": str(message["queueOffset"])}))
    return queries


@settings(max_examples=60, deadline=None, suppress_health_check=SHARED_FIXTURES)
@given(data=st.data())
def test_a_lookup_finds_exactly_what_a_full_scan_finds_in_the_files_holding_it(
        disk_warehouse, sent, data) -> None:  # type: ignore[no-untyped-def]
    warehouse = disk_warehouse
    engine = LocalEngine(warehouse)
    message = data.draw(st.sampled_from(sent), label="message")
    for name, params in lookups_of(message):
        narrowed, full, steps, final = narrowed_and_full(engine, name, params)
        assert as_json(narrowed) == as_json(full), (name, params)
        found = {r["msg_id"] for r in narrowed} | {r["offset_msg_id"] for r in narrowed}
        assert message["msgId"] in found or message["offsetMsgId"] in found, (name, params)
        offset = lookup.offset_in(params["msg_id"]) if "msg_id" in params else None
        assert final[T.MESSAGES] == files_that_may_hold(warehouse, narrowed, offset), \
            (name, params, final)
        # each value's pointers come from one bucket: at most a file per load that wrote
        # to it (an offsetMsgId looks up the msgId of every copy stored there as well: an
        # inner batch's members share their record's offsetMsgId)
        assert max(step[T.MESSAGE_LOOKUP] for step in steps) <= len(GROWING) + 1, steps


def test_files_opened_stay_few_as_the_table_has_many(warehouse, sent) -> None:  # type: ignore[no-untyped-def]
    """The property above in numbers: messages has a file per load at least, a lookup
    opens one; message_lookup has sixteen buckets per load, a lookup opens one per load."""
    engine = LocalEngine(warehouse)
    message = next(m for m in sent if len(m["keys"]) > 1)
    _, _, steps, final = narrowed_and_full(engine, "message_by_key",
                                           {"key": message["keys"][0]})
    all_files = {name: len(arrow_dataset(table_location(warehouse, name)).files)
                 for name in (T.MESSAGES, T.MESSAGE_LOOKUP)}
    assert final[T.MESSAGES] == 1 < all_files[T.MESSAGES]
    assert sum(step[T.MESSAGE_LOOKUP] for step in steps) <= len(GROWING) + 1 \
        < all_files[T.MESSAGE_LOOKUP]


def test_a_message_not_yet_in_the_lookup_table_is_still_found_and_caught_up(
        growing_store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """s2 is loaded as the DAG's load task loads it, and its lookup task never runs (it
    failed, or the load died between its two appends): s2's messages are still found, by
    their snapshot; the next derivation (here s3's load by hand) writes the rows of s2 and
    s3."""
    stores = {name: growing_store / "snapshots" / name / "store" for name in GROWING}
    load_in_process(tmp_path, "g", "s1", stores["s1"])
    load_in_process(tmp_path, "g", "s2", stores["s2"], lookup=False)
    assert lookup.unindexed_snapshots(LocalEngine(tmp_path).query, tmp_path) == ["s2"]
    engine = LocalEngine(tmp_path)
    messages = arrow_dataset(table_location(tmp_path, T.MESSAGES))
    in_s2 = messages.to_table(filter=(ds.field("first_snapshot_id") == "s2")
                              & ds.field("msg_id").is_valid(), columns=["msg_id"])
    msg_id = in_s2.column("msg_id")[0].as_py()
    narrowed, full, _, _ = narrowed_and_full(engine, "message_by_msg_id", {"msg_id": msg_id})
    assert narrowed == full and {r["msg_id"] for r in narrowed} == {msg_id}

    load_in_process(tmp_path, "g", "s3", stores["s3"])
    assert lookup.unindexed_snapshots(LocalEngine(tmp_path).query, tmp_path) == []
    indexed = arrow_dataset(table_location(tmp_path, T.MESSAGE_LOOKUP)).to_table(
        columns=["first_snapshot_id"]).column("first_snapshot_id").to_pylist()
    assert set(indexed) == set(GROWING)
    narrowed, full, _, _ = narrowed_and_full(engine, "message_by_msg_id", {"msg_id": msg_id})
    assert narrowed == full and {r["msg_id"] for r in narrowed} == {msg_id}


def test_the_dags_lookup_task_writes_what_the_load_would_and_waits_for_a_load_by_hand(
        growing_store, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The DAG's way, a load without the lookup rows and then ``pipeline.lookup_broker``,
    gives the rows a load deriving them itself gives. While a load of the broker holds its
    lock, the task fails to be retried (not for good) and writes nothing; run twice, the
    second adds nothing."""
    from pipeline_nights import write_config

    from jobs import pipeline
    from jobs.load.broker_lock import broker_load_lock
    from jobs.pipeline_config import load_config

    (tmp_path / "dag").mkdir()
    config = load_config(write_config(tmp_path / "dag", "g", growing_store))
    taken = pipeline.snapshot_broker(
        config, replace(config.brokers[0], store=str(growing_store / "snapshots" / "s1" /
                                                     "store")), "s1")
    loaded = pipeline.load_broker(_no_spark, config, taken, lookup=False)
    lookups = table_location(config.warehouse, T.MESSAGE_LOOKUP)
    assert arrow_dataset(lookups).count_rows() == 0

    with broker_load_lock(config.warehouse, "g", "by-hand"), \
            pytest.raises(pipeline.StepError, match="another load of broker 'g'") as busy:
        pipeline.lookup_broker(config, loaded)
    assert not busy.value.permanent
    assert arrow_dataset(lookups).count_rows() == 0
    done = pipeline.lookup_broker(config, loaded)
    assert done["snapshots"] == ["s1"] and done["rows"] > 0
    assert pipeline.lookup_broker(config, loaded)["rows"] == 0

    load_in_process(tmp_path / "cli", "g", "s1", pipeline.snapshot_store_of(config, taken))
    derived = [arrow_dataset(table_location(w, T.MESSAGE_LOOKUP)).to_table().to_pylist()
               for w in (config.warehouse, tmp_path / "cli")]
    assert len(derived[0]) == done["rows"]
    assert sorted(derived[0], key=repr) == sorted(derived[1], key=repr)


def test_every_message_row_has_its_lookup_rows(warehouse) -> None:  # type: ignore[no-untyped-def]
    """message_lookup is complete: each msgId, key and queue position of every message row
    (queued records) points back at that row, and at nothing else."""
    engine = LocalEngine(warehouse)
    expected = engine.query("""
        SELECT 'msg_id' AS kind, msg_id AS lookup_value, broker, physical_offset, inner_index
        FROM rmq.messages WHERE msg_id IS NOT NULL
        UNION SELECT 'key', k, broker, physical_offset, inner_index
        FROM (SELECT unnest(keys) AS k, broker, physical_offset, inner_index FROM rmq.messages)
        WHERE k <> ''
        UNION SELECT 'position', concat_ws(' ', topic, queue_id, queue_offset), broker,
               physical_offset, inner_index
        FROM rmq.messages WHERE transaction_type IN ('NOT', 'COMMIT')""").to_pylist()
    got = engine.query("SELECT kind, lookup_value, broker, physical_offset, inner_index "
                       "FROM rmq.message_lookup").to_pylist()
    assert len(got) == len(expected) > 0
    assert as_json(got) == as_json(expected)


def test_a_sample_of_lookups_answers_from_the_bucket_as_from_the_directory(
        disk_warehouse, bucket_warehouse, sent) -> None:  # type: ignore[no-untyped-def]
    """Twelve messages spread over the truth, by each of their lookups: the bucket's
    answer, and the files each table opened for it, are the directory's (which the tests
    above hold to full scans)."""
    on_disk, on_s3 = LocalEngine(disk_warehouse), LocalEngine(bucket_warehouse)
    for message in sent[::max(1, len(sent) // 12)]:
        for name, params in lookups_of(message):
            disk = narrowed_only(on_disk, name, params)
            bucket = narrowed_only(on_s3, name, params)
            assert disk[0] and as_json(bucket[0]) == as_json(disk[0]), (name, params)
            assert bucket[1:3] == disk[1:3], (name, params)  # files opened, step by step


def test_every_batch_member_and_every_key_of_a_message_finds_it(  # type: ignore[no-untyped-def]
        disk_warehouse, features_store) -> None:
    """Not left to the draw above: every inner batch member of the features store by its
    own msgId and its record's offsetMsgId, and every message with several keys by each of
    them, through the saved queries as ``python -m jobs sql --saved`` runs them."""
    engine = LocalEngine(disk_warehouse)
    chosen = [m for m in truth(features_store) if m.get("batch") or len(m["keys"]) > 1]
    assert sum(1 for m in chosen if m.get("batch")) > 0 and len(chosen) > 100
    for message in chosen:
        # every copy stored under the msgId (a timer or delay message has two), nothing else
        found = engine.saved("message_by_msg_id", {"msg_id": message["msgId"]}).to_pylist()
        assert {r["msg_id"] for r in found if r["broker"] == "f"} == {message["msgId"]}
        # its offsetMsgId: the record's, which every member of an inner batch shares
        found = engine.saved("message_by_msg_id", {"msg_id": message["offsetMsgId"]}).to_pylist()
        assert message["msgId"] in {r["msg_id"] for r in found if r["broker"] == "f"}
        for key in message["keys"]:
            found = engine.saved("message_by_key", {"key": key}).to_pylist()
            assert message["msgId"] in {r["msg_id"] for r in found if r["broker"] == "f"}, key


def test_consumer_positions_read_the_latest_offsets_and_their_messages_files_alone(
        warehouse) -> None:  # type: ignore[no-untyped-def]
    """The saved query's ``-- narrow:`` lines (jobs/query/narrowing.py): the same rows as
    its SQL reading everything, from one consumer_offsets partition per broker (its latest
    loaded snapshot) and only the messages files holding the messages it names (here
    all four files: bench/years.py shows 2 of 202 at night 100)."""
    engine = LocalEngine(warehouse)
    sql = saved_query("consumer_positions").sql
    narrowed = engine.saved("consumer_positions").to_pylist()
    full = engine.query(sql).to_pylist()
    assert as_json(narrowed) == as_json(full)
    named = [{"broker": r["broker"], "physical_offset": r["physical_offset"]}
             for r in engine.query(narrowing.cte_listing(sql, "pointed")).to_pylist()]
    assert any(r["last_consumed_msg_id"] for r in narrowed) and named
    opened = engine.saved_files_opened("consumer_positions")
    everything = engine.files_opened(sql)
    assert opened[T.CONSUMER_OFFSETS] == len({r["broker"] for r in full}) == 2
    assert everything[T.CONSUMER_OFFSETS] == len(GROWING) + 1
    # the query joins messages twice (last consumed, oldest unconsumed): each opens them
    assert opened[T.MESSAGES] == 2 * files_that_may_hold(warehouse, named, None)
