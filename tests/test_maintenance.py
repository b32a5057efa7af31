"""Table maintenance after several loads: the same rows, fewer files, time travel intact,
and a VACUUM that never removes what a running load wrote or still reads."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from lakehouse import delta_rows, load

from jobs.lakehouse import tables as T
from jobs.lakehouse.contracts import load_contracts
from jobs.lakehouse.locks import try_lock
from jobs.lakehouse.tables import table_location
from jobs.maintain.maintenance import SKIPPED, maintain_tables, table_state
from jobs.maintain.policy import BROKER, POLICIES

pytestmark = [pytest.mark.spark, pytest.mark.broker]

NAME = "broker-m"


def test_every_table_has_a_policy_whose_scope_follows_its_partitioning() -> None:
    for name, contract in load_contracts().items():
        assert (POLICIES[name].scope == BROKER) == ("broker" in contract.partition_columns), name


def test_maintenance_keeps_rows_drops_files_and_keeps_time_travel(  # type: ignore[no-untyped-def]
        spark, broker_stores, tmp_path: Path):
    warehouse = tmp_path / "wh"
    for night in ("m1", "m2", "m3"):
        load(spark, warehouse, NAME, night, broker_stores["v5-clean"] / "store")
    tables = [n for n in T.TABLES if n != T.MAINTENANCE_RUNS]
    before = {n: delta_rows(table_location(warehouse, n)) for n in tables}
    states = {n: table_state(table_location(warehouse, n)) for n in tables}
    # a load running meanwhile has written a data file it has not committed yet
    staged = Path(table_location(warehouse, T.TOPICS)) / "part-00000-inflight.snappy.parquet"
    pq.write_table(pa.table({"x": [1]}), staged)

    recorded = maintain_tables(warehouse, NAME, time_travel_days=2)

    after = {n: table_state(table_location(warehouse, n)) for n in tables}
    for name in tables:
        location = table_location(warehouse, name)
        assert delta_rows(location) == before[name], name
        assert delta_rows(location, states[name].version) == before[name], name  # time travel
        assert after[name].files <= max(states[name].files, 1), name
        assert after[name].checkpoint_version == after[name].version, name
    # Spark writes a night's facts as several files: compacted. The driver writes a night's
    # state rows as one file, in the night's partition: nothing to compact.
    assert after[T.MESSAGES].files < states[T.MESSAGES].files
    assert after[T.TOPICS].files == states[T.TOPICS].files == 3
    assert after[T.SNAPSHOTS].files == 1 < states[T.SNAPSHOTS].files
    assert staged.exists()  # VACUUM removes only files the log removed, past the retention
    by_table = {r["table_name"]: r for r in recorded}
    assert by_table[T.SNAPSHOTS]["scope"] == BROKER
    assert by_table[T.SNAPSHOTS]["files_before"] == states[T.SNAPSHOTS].files
    assert by_table[T.SNAPSHOTS]["files_after"] == 1
    assert by_table[T.SNAPSHOTS]["files_vacuumed"] == 0  # replaced tonight: kept 2 days
    stored = DeltaTable(str(table_location(warehouse, T.MAINTENANCE_RUNS))).to_pyarrow_table()
    assert stored.num_rows == len(recorded)
    # Spark reads the compacted, checkpointed tables as before
    assert spark.read.format("delta").load(str(table_location(warehouse, T.MESSAGES))).count() \
        == len(before[T.MESSAGES])


def test_a_table_held_by_another_maintenance_is_skipped(spark, broker_stores,  # type: ignore[no-untyped-def]
                                                        tmp_path: Path):
    warehouse = tmp_path / "wh"
    load(spark, warehouse, NAME, "m1", broker_stores["v5-clean"] / "store")
    with try_lock(warehouse, f"maintain-{T.MESSAGES}") as held, \
            try_lock(warehouse, f"vacuum-{T.MESSAGES}") as held_too:
        assert held and held_too
        recorded = {r["table_name"]: r for r in maintain_tables(warehouse, NAME)}
    assert recorded[T.MESSAGES]["outcome"] == SKIPPED
    assert recorded[T.TOPICS]["outcome"] == "done"


def test_a_compaction_plans_from_the_table_as_it_is_once_the_lock_is_taken(
        tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Two brokers' maintenance at once: the first opens the table, the second compacts it
    and lets go of the lock, then the first takes the lock. delta-rs commits a compaction
    planned on the older version without a conflict (its removes repeat the other's and
    its add brings the rows back), so planning on the handle opened before the lock
    doubled the partition's rows; it must plan from the table as the lock finds it."""
    from contextlib import contextmanager

    from deltalake import write_deltalake

    from jobs.maintain import maintenance

    location = tmp_path / "rmq.db" / T.TOPICS
    for night in range(4):
        write_deltalake(location, pa.table({"snapshot_id": ["n1"] * 3,
                                            "value": [night * 10 + i for i in range(3)]}),
                        partition_by=["snapshot_id"], mode="append")
    real_lock = maintenance.try_lock

    @contextmanager
    def lock_after_another_maintenance(warehouse, name):  # type: ignore[no-untyped-def]
        if name == f"maintain-{T.TOPICS}":  # the other broker's compaction, just finished
            DeltaTable(str(location)).optimize.compact()
        with real_lock(warehouse, name) as held:
            yield held

    monkeypatch.setattr(maintenance, "try_lock", lock_after_another_maintenance)
    row = maintenance._maintain_table(str(tmp_path), str(location), T.TOPICS,
                                      POLICIES[T.TOPICS], NAME, time_travel_days=7)
    assert DeltaTable(str(location)).to_pyarrow_table().num_rows == 12
    assert row["files_compacted"] == 0 and row["files_after"] == 1


def test_files_whose_tombstones_left_the_checkpoint_are_still_vacuumed(tmp_path: Path) -> None:
    """A checkpoint drops the tombstones older than the table's
    ``delta.deletedFileRetentionDuration`` (Delta's default: a week), and delta-rs' default
    VACUUM deletes only the files the tombstones it still sees name: a compacted-away file
    whose tombstone left the checkpoint before a VACUUM found it past ``time_travel_days``
    (any ``time_travel_days`` above 7; at 7, a night whose maintenance runs a little earlier
    than the night before) would stay on disk for ever. The table's retention is one second
    here and the files are aged by mtime, as days would."""
    import os
    import time

    from deltalake import write_deltalake

    from jobs.maintain import maintenance

    location = tmp_path / "rmq.db" / T.TOPICS
    for night in range(4):
        write_deltalake(location, pa.table({"snapshot_id": ["n1"] * 3,
                                            "value": [night * 10 + i for i in range(3)]}),
                        partition_by=["snapshot_id"], mode="append",
                        configuration={"delta.deletedFileRetentionDuration": "interval 1 seconds"})
    table = DeltaTable(str(location))
    originals = {location / path
                 for path in table.get_add_actions(flatten=True).column("path").to_pylist()}
    table.optimize.compact()
    time.sleep(1.5)
    DeltaTable(str(location)).create_checkpoint()  # the four tombstones are not in it
    days_ago = time.time() - 3 * 86400
    for path in originals:
        os.utime(path, (days_ago, days_ago))
    inflight = location / "snapshot_id=n1" / "part-00000-inflight.zstd.parquet"
    pq.write_table(pa.table({"value": [1]}), inflight)  # a load's file, not committed yet

    row = maintenance._maintain_table(str(tmp_path), str(location), T.TOPICS,
                                      POLICIES[T.TOPICS], NAME, time_travel_days=2)

    assert row["files_vacuumed"] == 4
    assert not any(path.exists() for path in originals)
    assert inflight.exists()  # younger than time_travel_days: never removed
    assert DeltaTable(str(location)).to_pyarrow_table().num_rows == 12
