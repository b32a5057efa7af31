"""The Spark load against the real-broker stores: every table equals the truth.

All four harness variants are loaded once into one warehouse (one broker name each) with
small splits, so each 1 MiB segment is several decode tasks. Rows are compared with
rmqlib's per-record decoder (an independent path from the Arrow one the load uses), with
what the producers' send results and the admin API recorded, and with an independent
Delta reader (delta-rs).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from lakehouse import IN_PROCESS_OPTIONS, LOADED_TABLES, all_content, broker_rows, canonical, load

from jobs.lakehouse import tables as T
from jobs.query.spark_engine import run_saved
from rmqlib.checkpoint import read_checkpoint
from rmqlib.commitlog.records import scan_segment, scan_store
from rmqlib.common.segments import list_segments
from rmqlib.config import load_config_dir
from rmqlib.indexfile import IndexFile, list_index_files
from rmqlib.queues.consumequeue import decode_queue, walk_queue_tree

pytestmark = [pytest.mark.spark, pytest.mark.broker]

VARIANTS = ("v4-clean", "v4-killed", "v5-clean", "v5-killed")  # = golden's brokers


def rows_of(registry, table: str, broker: str) -> list:  # type: ignore[no-untyped-def]
    return registry.read(table).where(f"broker = '{broker}'").collect()


def ms(value: datetime) -> int:
    return round(value.replace(tzinfo=value.tzinfo or UTC).timestamp() * 1000)


@pytest.mark.parametrize("variant", VARIANTS)
def test_messages_equal_the_record_decoder_field_by_field(golden, broker_stores, variant):  # type: ignore[no-untyped-def]
    registry, _ = golden
    store = broker_stores[variant] / "store"
    records = {r.physical_offset: r for r in scan_store(store / "commitlog")}
    rows = {row.physical_offset: row for row in rows_of(registry, T.MESSAGES, variant)}
    assert len(rows) == len(records) > 2000
    assert set(rows) == set(records)
    for offset, record in records.items():
        row = rows[offset]
        body = record.decompressed_body()
        expected = {
            "total_size": record.total_size, "topic": record.topic,
            "queue_id": record.queue_id, "queue_offset": record.queue_offset,
            "sysflag": record.sysflag, "transaction_type": record.transaction_type.name,
            "inner_batch": record.inner_batch, "flag": record.flag,
            "message_version": record.version,
            "born_host": record.born_host, "born_port": record.born_port,
            "store_host": record.store_host, "store_port": record.store_port,
            "reconsume_times": record.reconsume_times,
            "prepared_transaction_offset": record.prepared_transaction_offset,
            "stored_body_size": record.body_length, "body": body, "body_size": len(body),
            "body_sha256": hashlib.sha256(body).hexdigest(), "body_policy": "full",
            "body_crc_ok": True, "tags": record.tags, "keys": record.keys,
            "msg_id": record.uniq_key, "offset_msg_id": record.offset_msg_id,
            "properties": dict(record.properties),
            "source_file": f"commitlog/{Path(record.path).name}",
            "file_position": record.position, "first_snapshot_id": "s1",
        }
        actual = {name: row[name] for name in expected}
        actual["body"] = bytes(actual["body"])
        assert actual == expected, offset
        assert ms(row.born_time) == record.born_timestamp
        assert ms(row.store_time) == record.store_timestamp
        assert row.store_date == datetime.fromtimestamp(record.store_timestamp / 1000,
                                                        UTC).date()
        assert (row.compression is None) == (record.compression is None)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_acked_send_is_a_row_with_its_ids_body_and_queue_position(
        golden, broker_stores, variant):  # type: ignore[no-untyped-def]
    registry, _ = golden
    truth = [json.loads(line) for line in
             (broker_stores[variant] / "truth" / "messages.jsonl").read_text().splitlines()]
    acked = [row for row in truth if row["acked"] and row["offsetMsgId"]]
    assert len(acked) > 2000
    rows = {row.offset_msg_id: row for row in rows_of(registry, T.MESSAGES, variant)}
    for sent in acked:
        row = rows[sent["offsetMsgId"]]
        assert row.msg_id == sent["msgId"]
        assert row.body_sha256 == sent["bodySha256"], sent["seq"]
        assert row.tags == sent["tags"]
        assert list(row.keys) == sent["keys"]
        assert row.topic == sent["storedTopic"]
        assert row.queue_id == sent["storedQueueId"]
        for name, value in sent["userProperties"].items():
            assert row.properties[name] == value
        if sent["storedTopic"] == sent["topic"]:
            assert row.queue_offset == sent["queueOffset"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_queue_entries_are_every_consume_queue_unit(golden, broker_stores, variant):  # type: ignore[no-untyped-def]
    registry, summaries = golden
    store = broker_stores[variant] / "store"
    expected = {}
    for queue in walk_queue_tree(store / "consumequeue").queues:
        for decoded in decode_queue(queue):
            for unit in decoded.units():
                expected[(queue.topic, queue.queue_id, unit.queue_offset)] = unit
    rows = rows_of(registry, T.QUEUE_ENTRIES, variant)
    got = {(r.topic, r.queue_id, r.queue_offset): r for r in rows}
    assert len(got) == len(rows)  # no duplicate keys
    # Units pointing past the loaded commitlog wait for the next load (killed stores can
    # hold some); everything else is loaded, exactly.
    end = summaries[variant].results[T.MESSAGES]
    assert end.rows > 0
    cl_max = registry.read(T.SNAPSHOTS).where(f"broker = '{variant}'").first()
    waiting = {k for k, u in expected.items()
               if not u.is_filler and u.commitlog_offset + u.size > cl_max.commitlog_max_offset}
    assert set(got) == set(expected) - waiting
    if "clean" in variant:
        assert waiting == set()
    for key, row in got.items():
        unit = expected[key]
        assert (row.commitlog_offset, row.size, row.tags_code) == (
            unit.commitlog_offset, unit.size, unit.tags_code)
        assert row.queue_type == "consumequeue"
        assert row.kind == ("filler" if unit.is_filler else "normal")
    # Every non-filler unit points at a loaded record of the same topic and size.
    messages = {r.physical_offset: r for r in rows_of(registry, T.MESSAGES, variant)}
    for (topic, _qid, _qoff), row in got.items():
        if row.kind == "normal":
            record = messages[row.commitlog_offset]
            assert (record.topic, record.total_size) == (topic, row.size)


@pytest.mark.parametrize("variant", VARIANTS)
def test_index_entries_are_every_used_index_entry(golden, broker_stores, variant):  # type: ignore[no-untyped-def]
    registry, _ = golden
    expected = set()
    for info in list_index_files(broker_stores[variant] / "store" / "index").files:
        with IndexFile.open(info.path) as index:
            batch = index.to_record_batch()
        for number, offset in zip(batch.column("entry_number").to_pylist(),
                                  batch.column("commitlog_offset").to_pylist(), strict=True):
            expected.add((info.path.name, number, offset))
    rows = rows_of(registry, T.INDEX_ENTRIES, variant)
    assert {(r.index_file, r.entry_number, r.commitlog_offset) for r in rows} == expected
    assert len(rows) == len(expected) > 2000


@pytest.mark.parametrize("variant", VARIANTS)
def test_state_tables_equal_the_config_files_and_the_admin_api(golden, broker_stores, variant):  # type: ignore[no-untyped-def]
    registry, _ = golden
    config = load_config_dir(broker_stores[variant] / "store" / "config")
    offsets = {(r.group_name, r.topic, r.queue_id): r.consumer_offset
               for r in rows_of(registry, T.CONSUMER_OFFSETS, variant)}
    assert offsets == {(o.group, o.topic, o.queue_id): o.offset
                       for o in config.consumer_offsets.offsets}
    if "clean" in variant:  # nothing moves between the admin snapshot and the files
        admin = [json.loads(line) for line in (broker_stores[variant] / "truth" /
                 "consumer_groups.jsonl").read_text().splitlines()]
        compared = [row for row in admin if (row["group"], row["topic"], row["queueId"])
                    in offsets]
        assert len(compared) > 10
        for row in compared:
            assert offsets[(row["group"], row["topic"], row["queueId"])] == (
                row["consumerOffset"])
    topics = {r.topic: r for r in rows_of(registry, T.TOPICS, variant)}
    assert set(topics) == set(config.topics.topics)
    assert topics["TopicNormal"].read_queue_nums == 4
    groups = {r.group_name for r in rows_of(registry, T.SUBSCRIPTION_GROUPS, variant)}
    assert {"G_ALL", "G_HALF", "G_IDLE", "G_NOOFFSET"} <= groups
    delays = {r.delay_level: r.delay_offset for r in rows_of(registry, T.DELAY_OFFSETS, variant)}
    assert delays == config.delay_offsets.offsets


@pytest.mark.parametrize("variant", VARIANTS)
def test_snapshot_row_describes_the_store(golden, broker_stores, variant):  # type: ignore[no-untyped-def]
    registry, _ = golden
    (row,) = rows_of(registry, T.SNAPSHOTS, variant)
    scan = scan_store(broker_stores[variant] / "store" / "commitlog")
    records = sum(1 for _ in scan)
    assert records > 0
    assert row.status == "loaded" and row.snapshot_seq == 1
    assert row.generation == ("4.x" if variant.startswith("v4") else "5.x")
    assert row.abort_present == ("killed" in variant)
    assert row.commitlog_max_offset == scan.logical_end
    assert row.commitlog_min_offset == 0
    assert row.file_count > 0 and row.total_bytes > 0
    # A killed broker may not have flushed a physic time yet (seen on 4.9.7): 0 -> null.
    physic = read_checkpoint(broker_stores[variant] / "store" / "checkpoint").physic_msg_timestamp
    loaded = row.checkpoint_physic_msg_time
    assert (ms(loaded) if loaded else None) == (physic or None)
    if "clean" in variant:
        assert row.checkpoint_physic_msg_time is not None


@pytest.mark.parametrize("variant", VARIANTS)
def test_quarantine_holds_exactly_the_unreadable_regions(golden, broker_stores, variant):  # type: ignore[no-untyped-def]
    registry, _ = golden
    store = broker_stores[variant] / "store"
    expected = set()
    for seg in list_segments(store / "commitlog"):
        scan = scan_segment(seg.path)
        for _ in scan:
            pass
        expected |= {(f"commitlog/{seg.path.name}", r.offset, r.length)
                     for r in scan.account.unreadable}
    rows = rows_of(registry, T.QUARANTINE, variant)
    got = {(r.file, r.offset, r.length) for r in rows if r.stream == "commitlog"}
    assert got == expected
    if "clean" in variant:
        assert rows == []


def test_written_tables_match_their_contracts(golden):  # type: ignore[no-untyped-def]
    registry, _ = golden
    for name in T.TABLES:
        assert registry.drift(name) == [], name


def test_delta_rs_reads_the_same_rows(golden):  # type: ignore[no-untyped-def]
    """An independent Delta reader (delta-rs) sees exactly what Spark sees."""
    from deltalake import DeltaTable

    registry, _ = golden
    for name in T.TABLES:
        table = DeltaTable(registry[name].location).to_pyarrow_table()
        theirs = sorted(json.dumps([canonical(v) for v in row.values()], sort_keys=True,
                                   default=str) for row in table.to_pylist())
        spark_rows = registry.read(name).toArrow().to_pylist()
        ours = sorted(json.dumps([canonical(v) for v in row.values()], sort_keys=True,
                                 default=str) for row in spark_rows)
        assert theirs == ours, name


def test_an_in_process_load_writes_the_rows_of_a_spark_load(golden, spark, broker_stores,  # type: ignore[no-untyped-def]
                                                          tmp_path):
    """The four stores decoded in this process and appended by delta-rs (a small night's
    path, jobs.load.fact_writers) give exactly the rows Spark's executors wrote."""
    registry, summaries = golden
    for variant, spark_summary in summaries.items():
        local, summary = load(spark, tmp_path, variant, "s1", broker_stores[variant] / "store",
                              IN_PROCESS_OPTIONS)
        assert {name: r.rows for name, r in summary.results.items()} == \
            {name: r.rows for name, r in spark_summary.results.items()}
        for name in LOADED_TABLES:
            assert broker_rows(local, name, variant) == broker_rows(registry, name, variant), \
                (variant, name)
    assert broker_rows(local, T.MESSAGES, "v5-clean")  # not vacuous


def test_loading_the_same_snapshot_again_changes_nothing(golden, spark, broker_stores):  # type: ignore[no-untyped-def]
    registry, _ = golden
    before = all_content(registry)
    runs_before = registry.read(T.LOAD_RUNS).count()
    _, summary = load(spark, Path(registry.warehouse), "v5-clean", "s1",
                      broker_stores["v5-clean"] / "store")
    assert summary.skipped
    assert all_content(registry) == before
    outcomes = Counter(r.outcome for r in registry.read(T.LOAD_RUNS).collect())
    assert registry.read(T.LOAD_RUNS).count() == runs_before + 1
    assert outcomes["skipped"] == 1


def test_saved_queries_answer_from_the_tables(golden, spark, broker_stores):  # type: ignore[no-untyped-def]
    registry, _ = golden
    truth = [json.loads(line) for line in (broker_stores["v5-clean"] / "truth" /
             "messages.jsonl").read_text().splitlines()]
    sent = next(r for r in truth if r["acked"] and r["keys"] and r["storedTopic"] == r["topic"])
    by_key = run_saved(spark, "message_by_key", {"key": sent["keys"][0]}, registry).collect()
    assert sent["msgId"] in {r.msg_id for r in by_key if r.broker == "v5-clean"}
    by_id = run_saved(spark, "message_by_msg_id", {"msg_id": sent["msgId"]}, registry).collect()
    assert {(r.broker, r.topic, r.queue_offset) for r in by_id} >= {
        ("v5-clean", sent["topic"], sent["queueOffset"])}
    # from the first day on: the default window is the last 7 days of the four stores,
    # which were built when their harness last changed
    volume = run_saved(spark, "volume_per_topic_hour", {"since": "1970-01-01"},
                       registry).collect()
    assert sum(r.messages for r in volume) == registry.read(T.MESSAGES).count()
    positions = run_saved(spark, "consumer_positions", {}, registry).collect()
    half = [r for r in positions if r.broker == "v5-clean" and r.group_name == "G_HALF"
            and r.topic == "TopicBulk" and r.queue_id == 0]
    assert len(half) == 1 and half[0].consumer_offset > 0
    last = next(t for t in truth if t["storedTopic"] == "TopicBulk" and t["queueId"] == 0
                and t["queueOffset"] == half[0].consumer_offset - 1)
    following = next(t for t in truth if t["storedTopic"] == "TopicBulk" and t["queueId"] == 0
                     and t["queueOffset"] == half[0].consumer_offset)
    assert half[0].last_consumed_msg_id == last["msgId"]
    assert half[0].oldest_unconsumed_msg_id == following["msgId"]


def spark_files_read(spark, sql: str) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(rows, data files Spark's scan read) for ``sql``, by the scan's own ``numFiles``
    metric (adaptive execution off, so the executed plan holds the scan)."""
    adaptive = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        frame = spark.sql(sql)
        rows = len(frame.collect())
        leaves = frame._jdf.queryExecution().executedPlan().collectLeaves()
        files = 0
        for i in range(leaves.size()):
            metric = leaves.apply(i).metrics().get("numFiles")
            if metric.isDefined():
                files += metric.get().value()
        return rows, files
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", adaptive)


def test_spark_skips_the_files_the_executors_statistics_rule_out(golden, spark):  # type: ignore[no-untyped-def]
    """The files the executors wrote (jobs.lakehouse.staged_append) carry statistics that
    Spark's Delta reader prunes on: a range of physical offsets of one broker reads exactly
    the files whose broker and offset ranges can hold it, by Spark's own count."""
    from deltalake import DeltaTable

    registry, _ = golden
    adds = pa_rows(DeltaTable(str(registry[T.MESSAGES].location)).get_add_actions(flatten=True))
    mine = [a for a in adds if a["min.broker"] <= "v5-clean" <= a["max.broker"]]
    threshold = sorted(a["min.physical_offset"] for a in mine)[len(mine) // 2]
    holding = [a for a in mine if a["max.physical_offset"] >= threshold]
    assert 0 < len(holding) < len(adds)
    registry.ensure()  # rmq.messages in the session's catalog
    rows, files = spark_files_read(spark, "SELECT physical_offset FROM rmq.messages WHERE "
                                   f"broker = 'v5-clean' AND physical_offset >= {threshold}")
    assert rows == sum(1 for r in registry.read_rows(T.MESSAGES, broker="v5-clean")
                       if r["physical_offset"] >= threshold)
    assert files == len(holding)


def pa_rows(actions) -> list[dict]:  # type: ignore[no-untyped-def]
    import pyarrow as pa

    return pa.RecordBatchReader.from_stream(actions).read_all().to_pylist()
