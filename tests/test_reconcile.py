"""The reconcile job on real-broker stores: lag parity with the broker, clean stores give no
finding worth a warning, killed stores exactly what an unclean shutdown explains, and
fault-injected copies exactly the findings their fault causes. Every reconcile here runs on
both check engines (DuckDB in process, then Spark) and requires identical rows."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from lakehouse import load, reconcile_on_both_engines

from jobs.check.engines import SparkEngine
from jobs.check.reconcile import reconcile_snapshot
from jobs.check.views import SnapshotNotLoadedError
from jobs.lakehouse import tables as T
from rmqlib.commitlog.records import scan_segment
from rmqlib.common.segments import list_segments
from rmqlib.config import parse_fastjson
from rmqlib.queues.consumequeue import CQ_UNIT_SIZE, decode_cq_file

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def reconciled(spark, warehouse: Path, store: Path):  # type: ignore[no-untyped-def]
    registry, _ = load(spark, warehouse, "b", "s1", store)
    summary = reconcile_on_both_engines(spark, registry, "b", "s1")
    return registry, summary


def finding_keys(registry, broker: str = "b") -> set[tuple[str, str, str]]:  # type: ignore[no-untyped-def]
    return {(r.check_name, r.scope, r.severity)
            for r in registry.read(T.CHECK_RESULTS).where(f"broker = '{broker}'").collect()}


def lag_rows(registry, broker: str = "b") -> dict[tuple[str, str, int], object]:  # type: ignore[no-untyped-def]
    return {(r.group_name, r.topic, r.queue_id): r
            for r in registry.read(T.CONSUMER_LAG).where(f"broker = '{broker}'").collect()}


def truth_lines(variant_dir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in
            (variant_dir / "truth" / name).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def checked(spark, golden):  # type: ignore[no-untyped-def]
    """The golden warehouse (each variant loaded as broker <variant>), reconciled."""
    registry, _ = golden
    summaries = {variant: reconcile_on_both_engines(spark, registry, variant, "s1")
                 for variant in ("v4-clean", "v4-killed", "v5-clean", "v5-killed")}
    return registry, summaries


@pytest.mark.parametrize("variant", ["v5-clean", "v4-clean"])
def test_lag_equals_what_the_broker_reported_queue_by_queue(
        checked, broker_stores, variant):  # type: ignore[no-untyped-def]
    registry, _ = checked
    ours = lag_rows(registry, variant)
    truth = truth_lines(broker_stores[variant], "consumer_groups.jsonl")
    assert truth
    for row in truth:
        mine = ours[(row["group"], row["topic"], row["queueId"])]
        assert (mine.status, mine.max_offset, mine.consumer_offset, mine.broker_diff) == (
            "ok", row["brokerOffset"], row["consumerOffset"], row["diff"]), row
        assert mine.lag_messages == row["diff"]
        if row["consumerOffset"] > 0:  # LastTime: store time of the message at offset - 1
            assert mine.last_consumed_store_time is not None, row
            assert int(mine.last_consumed_store_time.timestamp() * 1000) == row["lastTimestamp"]
        if row["diff"] > 0:  # something unconsumed: bytes and its age are known
            assert mine.lag_bytes > 0 and mine.oldest_unconsumed_store_time is not None
            assert mine.lag_seconds > 0
        else:
            assert mine.lag_bytes == 0 and mine.oldest_unconsumed_store_time is None
    # Rows the admin API did not list: only groups the broker keeps no stats for.
    extra = {key[0] for key in ours} - {row["group"] for row in truth}
    assert extra <= {"CID_RMQ_SYS_TRANS"}, extra


@pytest.mark.parametrize("variant", ["v5-clean", "v4-clean"])
def test_a_clean_store_gives_no_error_and_no_warning(checked, variant):  # type: ignore[no-untyped-def]
    registry, summaries = checked
    # G_NOOFFSET subscribes and never commits (harness README): the one thing to tell.
    assert finding_keys(registry, variant) == {
        ("group_without_offsets", "group=G_NOOFFSET", "info")}
    assert summaries[variant].findings_by_severity == {"info": 1}
    rows = registry.read(T.CHECK_RESULTS).where(f"broker = '{variant}'").collect()
    assert all(r.explanation and r.expected and r.observed for r in rows)


def test_reconcile_is_idempotent_and_refuses_unloaded_snapshots(spark, checked):  # type: ignore[no-untyped-def]
    registry, _ = checked

    def content() -> list[str]:
        return sorted(map(str, registry.read(T.CONSUMER_LAG).where("broker = 'v5-clean'")
                          .drop("snapshot_taken_at").collect()))

    before, findings = content(), registry.read(T.CHECK_RESULTS).count()
    reconcile_snapshot(SparkEngine(spark, registry), registry, "v5-clean", "s1")
    assert content() == before
    assert registry.read(T.CHECK_RESULTS).count() == findings
    with pytest.raises(SnapshotNotLoadedError, match="never loaded"):
        reconcile_snapshot(SparkEngine(spark, registry), registry, "v5-clean", "s9")


@pytest.mark.parametrize("variant", ["v5-killed", "v4-killed"])
def test_a_killed_broker_gives_exactly_what_its_unclean_shutdown_explains(
        checked, variant):  # type: ignore[no-untyped-def]
    registry, _ = checked
    found = finding_keys(registry, variant)
    assert ("unclean_shutdown", "broker", "warning") in found
    explained = {"unclean_shutdown", "dispatch_lag", "torn_tail", "group_without_offsets"}
    assert {name for name, _, _ in found} <= explained, found
    assert not [f for f in found if f[2] == "error"]
    # The broker did not persist G_ALL's newest progress before the kill: the file's offsets
    # trail the queues, never run past them.
    assert {row.status for row in lag_rows(registry, variant).values()} <= {"ok", "no_offset"}


# --------------------------------------------------------------------------- faults


def copy_store(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


def _edit_json(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Edit a broker config file (fastjson: integer keys unquoted), write it as JSON."""
    document = parse_fastjson(path.read_text(), path)
    edit(document)
    path.write_text(json.dumps(document))


def _zero_units_before_last(queue_file: Path, count: int) -> tuple[list[int], list[int]]:
    """Delete ``count`` units just before the last one of a queue file (zeroed in place,
    as a damaged or hand-edited file would have them); returns their queue offsets and the
    commitlog offsets they pointed at."""
    decoded = decode_cq_file(queue_file)
    chosen = slice(-count - 1, -1)
    data = bytearray(queue_file.read_bytes())
    for position in decoded.file_position[chosen].tolist():
        data[position:position + CQ_UNIT_SIZE] = bytes(CQ_UNIT_SIZE)
    queue_file.write_bytes(bytes(data))
    return decoded.queue_offset[chosen].tolist(), decoded.commitlog_offset[chosen].tolist()


def test_independent_faults_each_give_their_finding_and_nothing_else(
        spark, broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    store = copy_store(broker_stores["v5-clean"] / "store", tmp_path / "store")
    config = store / "config"
    # 1. a consumer offset past the queue's max (max 120)
    _edit_json(config / "consumerOffset.json", lambda d: d["offsetTable"][
        "TopicNormal@G_HALF"].update({"0": 220}))
    # 2. a topic dropped from topics.json (its queues and offsets stay)
    _edit_json(config / "topics.json", lambda d: d["topicConfigTable"].pop("TopicOrder"))
    # 3. the oldest index file removed
    oldest_index = sorted((store / "index").iterdir())[0]
    oldest_index.unlink()
    # 4. bytes flipped inside a body of the first commitlog file
    segment = list_segments(store / "commitlog")[0]
    victim = next(r for r in scan_segment(segment.path) if len(r.body) >= 64)
    record = segment.path.read_bytes()[victim.position:victim.position + victim.total_size]
    with open(segment.path, "r+b") as handle:
        handle.seek(victim.position + record.index(victim.body) + 10)
        handle.write(b"\xee" * 8)
    # 5. three units of the DLQ's queue deleted (zeroed) just before its last one
    dlq_file = sorted((store / "consumequeue" / "%DLQ%G_FAIL" / "0").iterdir())[-1]
    lost_queue_offsets, lost = _zero_units_before_last(dlq_file, 3)

    registry, summary = reconciled(spark, tmp_path / "wh", store)
    assert finding_keys(registry) == {
        ("group_without_offsets", "group=G_NOOFFSET", "info"),
        ("consumer_offset_above_max", "group=G_HALF topic=TopicNormal queue=0", "warning"),
        ("queue_without_topic_config", "topic=TopicOrder", "warning"),
        ("offset_for_unknown_topic", "group=G_ALL topic=TopicOrder", "warning"),
        ("offset_for_unknown_topic", "group=G_ORDERLY topic=TopicOrder", "warning"),
        ("record_without_index_entry", "broker", "warning"),
        ("crc_failure", f"file=commitlog/{segment.path.name}", "error"),
        ("record_without_unit", "topic=%DLQ%G_FAIL queue=0", "error"),
        ("queue_offset_gap", "topic=%DLQ%G_FAIL queue=0", "error"),
        ("quarantined_region", f"file=consumequeue/%DLQ%G_FAIL/0/{dlq_file.name}", "error"),
    }
    results = {r.check_name: r for r in registry.read(T.CHECK_RESULTS).collect()}
    assert results["crc_failure"].sample_offsets == [victim.physical_offset]
    assert results["record_without_unit"].affected == 3
    assert results["record_without_unit"].sample_offsets == sorted(lost)
    assert results["queue_offset_gap"].affected == 3
    assert results["queue_offset_gap"].sample_offsets == [lost_queue_offsets[0]]
    above = lag_rows(registry)[("G_HALF", "TopicNormal", 0)]
    assert (above.status, above.lag_messages, above.broker_diff) == ("above_max", 0, -100)
    assert summary.errors == 4


def test_a_truncated_commitlog_is_caught_by_the_checkpoint(spark, broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    """The newest records zeroed (a commitlog cut short): the checkpoint says they were
    flushed; queues lose their last units, so groups that had consumed them are ahead."""
    store = copy_store(broker_stores["v5-clean"] / "store", tmp_path / "store")
    segments = list_segments(store / "commitlog")
    last = max((s for s in segments if any(True for _ in scan_segment(s.path))),
               key=lambda s: s.start)
    records = list(scan_segment(last.path))
    cut = records[len(records) // 2]
    data = last.path.read_bytes()
    last.path.write_bytes(data[:cut.position] + bytes(len(data) - cut.position))

    cut_queues = {(r.topic, r.queue_id) for r in records[len(records) // 2:]}

    registry, _ = reconciled(spark, tmp_path / "wh", store)
    found = finding_keys(registry)
    assert ("checkpoint_ahead_of_data", "broker", "error") in found
    lag = lag_rows(registry)
    ahead = {(g, t, q) for (g, t, q), row in lag.items() if row.status == "above_max"}
    assert ahead, "groups had consumed the cut records"
    assert {(t, q) for _, t, q in ahead} <= cut_queues
    # delayOffset.json counts delayed messages the cut schedule queues no longer hold
    schedule = {("delay_offset_beyond_schedule_queue",
                 f"topic=SCHEDULE_TOPIC_XXXX queue={q}", "error")
                for t, q in cut_queues if t == "SCHEDULE_TOPIC_XXXX"}
    expected = {("checkpoint_ahead_of_data", "broker", "error"),
                *{("consumer_offset_above_max", f"group={g} topic={t} queue={q}", "warning")
                  for g, t, q in ahead}}
    # queue units past the cut commitlog: a race of a hot copy in form, damage in a
    # cleanly stopped store (rmqlib.common.races), so an error, on the cut queues only
    ahead_of_data = {key for key in found if key[0] == "hot_copy_race"}
    assert ahead_of_data and all(
        severity == "error" and any(scope.startswith(f"file=consumequeue/{t}/{q}/")
                                    for t, q in cut_queues)
        for _, scope, severity in ahead_of_data)
    # the store's undecided transactions, hours old at the copy's time (its taken_at)
    rest = found - expected - ahead_of_data - {
        ("group_without_offsets", "group=G_NOOFFSET", "info"),
        ("transaction_pending_too_long", "producer_group=PG_TX", "warning")}
    assert rest <= schedule, rest
    assert expected <= found


def test_the_oldest_commitlog_file_deleted_before_the_first_load(spark, broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    """Retention ran before any load: a retention gap, and groups whose offsets point into
    the deleted file lost those messages (below_min, with how many)."""
    store = copy_store(broker_stores["v5-clean"] / "store", tmp_path / "store")
    first = list_segments(store / "commitlog")[0]
    first.path.unlink()

    registry, _ = reconciled(spark, tmp_path / "wh", store)
    found = finding_keys(registry)
    assert ("retention_gap", "stream=commitlog", "warning") in found
    lag = lag_rows(registry)
    below = {key: row for key, row in lag.items() if row.status == "below_min"}
    assert below, "G_IDLE committed 0 everywhere: its first messages are gone"
    for row in below.values():
        assert row.lost_messages == row.min_offset - row.consumer_offset > 0
        assert row.lag_messages == row.max_offset - row.min_offset
    assert found - {("group_without_offsets", "group=G_NOOFFSET", "info")} == {
        ("retention_gap", "stream=commitlog", "warning"),
        *{("consumer_offset_below_min", f"group={g} topic={t} queue={q}", "warning")
          for g, t, q in below}}
    gap = next(r for r in registry.read(T.CHECK_RESULTS).collect()
               if r.check_name == "retention_gap")
    assert gap.affected == first.size
