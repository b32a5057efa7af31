"""Stores that no longer hold what was loaded: rewritten, truncated, reset, restored.

Night after night through the DAG's own steps (snapshot, load, and for the scenarios the
check), the current rows of the fact tables (every row no rewrite superseded) must equal
the store's records of that night, the superseded ones must be exactly the loaded records
the store no longer holds, each once, and nothing is refused.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pyarrow.compute as pc
import pytest
from changing_broker import ChangingBroker, nights_changes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pipeline_nights import _no_spark, rows, run_night, write_config

from jobs import pipeline
from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import read_arrow
from jobs.lakehouse.history import superseded_mask
from jobs.load import rewrites
from jobs.pipeline_config import load_config
from jobs.query.local_engine import LocalEngine

BROKER = "broker-r"
NIGHTS = [f"2026-11-{day:02d}T0200Z" for day in range(1, 29)]


class Nights:
    """A warehouse fed by the DAG's snapshot and load steps from a changing broker."""

    def __init__(self, work: Path, seed: int) -> None:
        self.work = work
        self.broker = ChangingBroker(work / "store", seed=seed)
        self.config_path = write_config(work, BROKER, self.broker.root)
        self.warehouse = Path(load_config(self.config_path).warehouse)
        self.night = 0
        self.current: set[tuple[int, str]] = set()  # (offset, msgId) the store holds
        # every record loaded that a later store no longer held, once per time it was
        # lost (a record can come back with a restored backup and be lost again)
        self.lost: Counter[tuple[int, str]] = Counter()

    def load(self, *, check: bool = False) -> dict[int, str]:
        """Snapshot and load the broker's store as it is now; its {offset: msgId}."""
        layout = self.broker.write()
        snapshot_id = NIGHTS[self.night]
        self.night += 1
        if check:
            run_night(self.config_path, snapshot_id, self.broker.root)
        else:
            config = load_config(self.config_path)
            broker = replace(config.brokers[0], store=str(self.broker.root))
            taken = pipeline.snapshot_broker(config, broker, snapshot_id)
            pipeline.load_broker(_no_spark, config, taken)
        truth = layout.by_offset()
        self.lost.update(self.current - set(truth.items()))
        self.current = set(truth.items())
        return truth

    def table(self, name: str, offset_column: str) -> tuple[list[dict], list[dict]]:
        """(current rows, superseded rows) of a fact table for the broker."""
        table = read_arrow(T.table_location(self.warehouse, name), broker=BROKER)
        registry = T.Registry(None, self.warehouse)
        mask = superseded_mask(table, rewrites.rewrites_of(registry, BROKER),
                                        offset_column)
        return (table.filter(pc.invert(mask)).to_pylist(), table.filter(mask).to_pylist())

    def assert_current_is(self, truth: dict[int, str]) -> None:
        current, superseded = self.table(T.MESSAGES, "physical_offset")
        assert sorted((r["physical_offset"], r["msg_id"]) for r in current) == sorted(
            truth.items())
        # every record loaded and lost since is superseded, once per time it was lost
        assert Counter((r["physical_offset"], r["msg_id"]) for r in superseded) == self.lost
        kept = rows(self.warehouse, T.SUPERSEDED_MESSAGES, broker=BROKER)
        assert sorted((r["physical_offset"], r["msg_id"]) for r in kept) == sorted(
            (r["physical_offset"], r["msg_id"]) for r in superseded)
        units, _ = self.table(T.QUEUE_ENTRIES, "commitlog_offset")
        assert sorted(u["commitlog_offset"] for u in units) == sorted(truth)
        positions = {(u["topic"], u["queue_id"], u["queue_offset"]) for u in units}
        assert len(positions) == len(units)  # no queue offset twice in the current history


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.integers(1, 60), nights=st.lists(nights_changes(40), min_size=1, max_size=4),
       seed=st.integers(0, 2**16))
def test_the_current_history_always_equals_the_store_and_nothing_is_lost(
        tmp_path_factory, first, nights, seed):  # type: ignore[no-untyped-def]
    run = Nights(tmp_path_factory.mktemp("rewrites"), seed)
    run.broker.change(("grow", first))
    run.assert_current_is(run.load())
    for change in nights:
        run.broker.change(change)
        run.assert_current_is(run.load())


def test_a_failover_truncation_is_recorded_loaded_and_checked_clean(tmp_path):  # type: ignore[no-untyped-def]
    run = Nights(tmp_path, seed=7)
    run.broker.grow(120)
    run.assert_current_is(run.load(check=True))
    placed = run.broker.write().placed
    cut = placed[80].physical_offset
    discarded_offsets = [p.physical_offset for p in placed[80:]]
    discarded = run.broker.history[80:]
    lost = [dict(m.properties)["UNIQ_KEY"] for m in discarded]
    run.broker.truncate(80)
    run.broker.grow(30)
    run.broker.resend(discarded[:10])  # their producers retried these on the new master
    run.assert_current_is(run.load(check=True))
    (row,) = [r for r in rows(run.warehouse, T.HISTORY_REWRITES, broker=BROKER)
              if r["kind"] != rewrites.FILE]
    assert (row["kind"], row["from_offset"], row["records_superseded"]) == (
        rewrites.REWRITTEN, cut, 40)
    assert row["superseded_snapshot_ids"] == [NIGHTS[0]] and row["incarnation"] == 1
    superseded = rows(run.warehouse, T.SUPERSEDED_MESSAGES, broker=BROKER)
    assert sorted(r["msg_id"] for r in superseded) == sorted(lost)
    files = [r for r in rows(run.warehouse, T.HISTORY_REWRITES, broker=BROKER)
             if r["kind"] == rewrites.FILE]
    segment = cut // run.broker.file_size * run.broker.file_size
    assert f"commitlog/{segment:020d}" in {r["file"] for r in files}
    findings = {f["check_name"]: f for f in rows(run.warehouse, T.CHECK_RESULTS,
                                                 broker=BROKER, snapshot_id=NIGHTS[1])}
    assert findings["history_rewritten"]["severity"] == "warning"
    assert findings["file_rewritten"]["severity"] == "info"
    # the 30 discarded records no retry stored again are lost: the one error of the night
    gone = findings["messages_lost_in_rewrite"]
    assert (gone["severity"], gone["affected"]) == ("error", 30)
    assert [f for f in findings.values() if f["severity"] == "error"] == [gone]
    retried = {dict(m.properties)["UNIQ_KEY"] for m in discarded[:10]}
    assert not any(msg_id in gone["observed"] for msg_id in retried)
    # SQL and the saved lookups see the current history; rmq.messages_all every row
    engine = LocalEngine(run.warehouse)
    retried_key, lost_key = (dict(discarded[i].properties)["KEYS"] for i in (0, 20))
    (found,) = engine.saved("message_by_key", {"key": retried_key}).to_pylist()
    assert found["physical_offset"] != discarded_offsets[0]  # the retry's copy, stored anew
    assert engine.saved("message_by_key", {"key": lost_key}).num_rows == 0
    at_cut = engine.query(f"SELECT msg_id FROM rmq.messages WHERE physical_offset = {cut}")
    assert at_cut.num_rows == 1
    both = engine.query(f"SELECT msg_id FROM rmq.messages_all WHERE physical_offset = {cut}")
    assert both.num_rows == 2
    # the next night, with nothing rewritten, is clean
    run.broker.grow(5)
    run.assert_current_is(run.load(check=True))
    assert not [f for f in rows(run.warehouse, T.CHECK_RESULTS, broker=BROKER,
                                snapshot_id=NIGHTS[2]) if f["severity"] == "error"]
    assert len([r for r in rows(run.warehouse, T.HISTORY_REWRITES, broker=BROKER)
                if r["kind"] != rewrites.FILE]) == 1


def test_a_reset_broker_becomes_a_new_incarnation_without_renaming(tmp_path):  # type: ignore[no-untyped-def]
    run = Nights(tmp_path, seed=11)
    run.broker.grow(50)
    run.assert_current_is(run.load())
    run.broker.reset()
    run.broker.grow(20)
    run.assert_current_is(run.load())
    (row,) = [r for r in rows(run.warehouse, T.HISTORY_REWRITES, broker=BROKER)
              if r["kind"] != rewrites.FILE]
    assert (row["kind"], row["incarnation"], row["records_superseded"]) == (
        rewrites.RESET, 2, 50)
    # the files the copier found rewritten that night belong to the new incarnation too
    files = [r for r in rows(run.warehouse, T.HISTORY_REWRITES, broker=BROKER)
             if r["kind"] == rewrites.FILE]
    assert files and {r["incarnation"] for r in files} == {2}
    run.broker.grow(20)
    run.assert_current_is(run.load())


@pytest.mark.parametrize("kill_after", ["history_rewrites", "superseded_messages"])
def test_a_load_killed_in_the_middle_of_a_rewrite_finishes_it_on_re_run(
        tmp_path, monkeypatch, kill_after):  # type: ignore[no-untyped-def]
    from jobs.load import job

    run = Nights(tmp_path, seed=3)
    run.broker.grow(60)
    run.assert_current_is(run.load())
    run.broker.truncate(30)
    run.broker.grow(10)
    real = job.SnapshotLoad.append_small

    def dying(self, table, rows_):  # type: ignore[no-untyped-def]
        writes = real(self, table, rows_)
        if table != kill_after:
            return writes

        def write_then_die() -> None:
            for write in writes.values():
                write()
            raise KeyboardInterrupt("killed")

        return {table: write_then_die}

    monkeypatch.setattr(job.SnapshotLoad, "append_small", dying)
    with pytest.raises(KeyboardInterrupt):
        run.load()
    monkeypatch.setattr(job.SnapshotLoad, "append_small", real)
    run.night -= 1  # the same night again
    run.assert_current_is(run.load())
