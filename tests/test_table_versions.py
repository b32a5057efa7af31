"""Contract versions recorded in the tables: minor bumps evolve in place, a major one is
refused until ``python -m jobs migrate`` rewrites the table, which keeps every row."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from lakehouse import delta_rows, load

from jobs.lakehouse import tables as T
from jobs.lakehouse.contracts import Column, Contract, ContractError
from jobs.lakehouse.history import ALL_ROWS_SUFFIX, OFFSET_COLUMNS
from jobs.lakehouse.locations import open_delta_table
from jobs.lakehouse.migrate import migrate_warehouse
from jobs.lakehouse.table_versions import (
    CONTRACT_VERSION,
    MIGRATION_SOURCE,
    ContractVersionError,
    inspect_table,
)
from jobs.lakehouse.tables import Registry
from jobs.load.broker_lock import broker_load_lock
from jobs.load.job import LoadRefusedError

pytestmark = [pytest.mark.spark, pytest.mark.broker]

BROKER = "broker-v"


def previous_major(contract: Contract) -> Contract:
    """The contract as the previous major version had it: the tables now partitioned by
    broker were unpartitioned (snapshots, load_state) or partitioned by snapshot_id."""
    by_snapshot = contract.table in (T.CHECK_RESULTS, T.CONSUMER_LAG, T.CONSUMER_STATUS)
    columns = tuple(dataclasses.replace(
        c, partition_position=1 if (by_snapshot and c.name == "snapshot_id") else None)
        for c in contract.columns)
    return dataclasses.replace(contract, columns=columns, version="1.0.0")


def conform(df, contract: Contract):  # type: ignore[no-untyped-def]
    """``df`` with the contract's columns, in its order and types (a missing one null)."""
    from pyspark.sql import functions as F

    have = set(df.columns)
    return df.select(*[
        (F.col(f.name) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in contract.spark_schema().fields])


def downgrade(spark, registry: Registry, name: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Rewrite a table as the previous major contract made it, with its rows; returns them."""
    table = registry[name]
    before = delta_rows(table.location)
    data = spark.read.format("delta").load(table.location).localCheckpoint()
    old = previous_major(table.contract)
    # Spark's REPLACE is refused on an append-only table, as delta-rs' overwrite is
    spark.sql(f"ALTER TABLE delta.`{table.location}` SET TBLPROPERTIES "
              "('delta.appendOnly' = 'false')")
    registry.register_name(table)  # a fact table with a history as rmq.<table>_all
    name = table.qualified_name + (ALL_ROWS_SUFFIX if name in OFFSET_COLUMNS else "")
    spark.sql(old.create_table_sql(name, table.location, replace=True))
    conform(data, old).write.format("delta").mode("append").save(table.location)
    assert delta_rows(table.location) == before
    return before


@pytest.fixture(scope="module")
def loaded(spark, broker_stores, tmp_path_factory):  # type: ignore[no-untyped-def]
    warehouse = tmp_path_factory.mktemp("versions")
    registry, _ = load(spark, warehouse, BROKER, "s1", broker_stores["v5-clean"] / "store")
    return registry


def test_a_previous_major_is_refused_then_migrated_with_every_row(spark, loaded,  # type: ignore[no-untyped-def]
                                                                 broker_stores):
    registry: Registry = loaded
    kept = {name: downgrade(spark, registry, name) for name in (T.SNAPSHOTS, T.LOAD_STATE)}
    old_versions = {name: inspect_table(registry[name].location).delta_version for name in kept}
    assert inspect_table(registry[T.SNAPSHOTS].location).partition_columns == ()

    with pytest.raises(ContractVersionError, match="python -m jobs migrate"):
        Registry(spark, registry.warehouse).ensure(names=False)

    done = {m.table: m for m in migrate_warehouse(registry.warehouse)}
    for name, before in kept.items():
        location = registry[name].location
        found = inspect_table(location)
        assert done[name].action == "rewritten" and done[name].rows == len(before)
        assert found.partition_columns == ("broker",)
        assert found.recorded_version == registry[name].contract.version
        assert found.migration_source is None
        assert delta_rows(location) == before
        assert delta_rows(location, old_versions[name]) == before  # time travel to the old layout
        assert registry.drift(name) == []
    assert {m.action for m in done.values()} <= {"rewritten", "unchanged"}
    # migrated: loads go on, and migrating again changes nothing
    again = migrate_warehouse(registry.warehouse)
    assert {m.action for m in again} == {"unchanged"}
    summary = load(spark, Path(registry.warehouse), BROKER, "s2",
                   broker_stores["v5-clean"] / "store")[1]
    assert summary.snapshot_seq == 2 and not summary.skipped


def test_a_migration_killed_half_way_is_finished_by_running_it_again(spark, loaded):  # type: ignore[no-untyped-def]
    registry: Registry = loaded
    table = registry[T.LOAD_STATE]
    before = delta_rows(table.location)
    source = inspect_table(table.location).delta_version
    # what a migration leaves when it dies after replacing the table, before copying rows
    registry.register_name(table)
    spark.sql(table.contract.create_table_sql(
        table.qualified_name, table.location, replace=True,
        extra_properties={MIGRATION_SOURCE: str(source)}))
    assert delta_rows(table.location) == []
    with pytest.raises(ContractVersionError, match="did not finish"):
        Registry(spark, registry.warehouse).ensure(names=False)
    done = {m.table: m for m in migrate_warehouse(registry.warehouse)}
    assert done[T.LOAD_STATE].action == "rewritten"
    assert delta_rows(table.location) == before
    assert inspect_table(table.location).migration_source is None


class Killed(Exception):
    """Where a test stops a migration, as a kill would."""


def test_a_migration_killed_between_its_two_commits_is_finished_by_running_it_again(  # type: ignore[no-untyped-def]
        spark, loaded, monkeypatch):
    """A rewrite is one delta-rs commit (the new layout and every row), the contract's
    version and properties a second. Killed between the two, the table already has its
    layout and rows; the re-run records the version only. ``messages`` is append-only:
    its overwrite lifts the property, and the record sets it again."""
    from jobs.lakehouse import migrate

    registry: Registry = loaded
    table = registry[T.MESSAGES]
    before = downgrade(spark, registry, T.MESSAGES)
    assert inspect_table(table.location).partition_columns == ()

    def killed(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise Killed()

    with monkeypatch.context() as patched:
        patched.setattr(migrate, "record_contract", killed)
        with pytest.raises(Killed):
            migrate_warehouse(registry.warehouse)
    found = inspect_table(table.location)
    assert found.partition_columns == tuple(table.contract.partition_columns)
    assert found.recorded_version == "1.0.0"
    assert delta_rows(table.location) == before
    done = {m.table: m for m in migrate_warehouse(registry.warehouse)}
    assert done[T.MESSAGES].action == "recorded"
    assert {m.action for name, m in done.items() if name != T.MESSAGES} == {"unchanged"}
    found = inspect_table(table.location)
    assert found.recorded_version == table.contract.version
    assert delta_rows(table.location) == before
    assert registry.drift(T.MESSAGES) == []
    properties = open_delta_table(table.location).metadata().configuration
    assert properties["delta.appendOnly"] == "true"


def test_a_minor_bump_adds_nullable_columns_in_place(spark, loaded):  # type: ignore[no-untyped-def]
    registry = Registry(spark, loaded.warehouse)
    table = registry[T.TOPICS]
    before = delta_rows(table.location)
    major, minor, _ = table.contract.version.split(".")
    extra = Column(name="owner_team", spark_type="STRING", required=False,
                   description="Team owning the topic (added in a minor version).",
                   primary_key_position=None, partition_position=None, enum=())
    newer = dataclasses.replace(table.contract, version=f"{major}.{int(minor) + 1}.0",
                                columns=(*table.contract.columns, extra))
    registry.tables[T.TOPICS] = dataclasses.replace(table, contract=newer)
    registry.ensure(names=False)
    found = inspect_table(table.location)
    assert found.recorded_version == newer.version
    assert found.columns[-1] == "owner_team"
    assert registry.drift(T.TOPICS) == []
    after = [json.loads(r) for r in delta_rows(table.location)]
    assert all(r.pop("owner_team") is None for r in after)
    assert sorted(json.dumps(r, sort_keys=True) for r in after) == before
    # the table is now newer than the code's own contract: still written (same major)
    assert Registry(spark, loaded.warehouse).ensure(names=False)

    required = dataclasses.replace(extra, name="must_have", required=True)
    stricter = dataclasses.replace(newer, version=f"{major}.{int(minor) + 2}.0",
                                   columns=(*newer.columns, required))
    registry = Registry(spark, loaded.warehouse)
    registry.tables[T.TOPICS] = dataclasses.replace(table, contract=stricter)
    with pytest.raises(ContractError, match="may only add nullable columns"):
        registry.ensure(names=False)
    assert inspect_table(table.location).recorded_version == newer.version


CREATE_ALL = """
import sys
from jobs.lakehouse.tables import Registry
Registry(None, sys.argv[1]).ensure()
"""


def test_processes_creating_the_tables_at_once_all_get_the_same_tables(tmp_path: Path) -> None:
    """Four processes bring a fresh warehouse to its contracts at once, with delta-rs (no
    Spark): every one succeeds, each table has exactly one creating commit, and every
    table is ready (the first night of a fleet, whose loads all find no tables)."""
    import os

    warehouse = tmp_path / "warehouse"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    racers = [subprocess.Popen([sys.executable, "-c", CREATE_ALL, str(warehouse)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(4)]
    outputs = [racer.communicate(timeout=300)[0] for racer in racers]
    assert [racer.returncode for racer in racers] == [0] * 4, outputs
    for name in T.TABLES:
        location = Path(T.table_location(warehouse, name))
        assert sorted(p.name for p in (location / "_delta_log").glob("*.json")) == [
            f"{0:020d}.json"], name
    registry = Registry(None, warehouse)
    for name in T.TABLES:
        assert inspect_table(registry[name].location).recorded_version == \
            registry[name].contract.version
        assert registry.drift(name) == [], name


def test_a_table_created_by_many_at_once_is_created_once(tmp_path: Path) -> None:
    """Eight threads create one table at once, ten times over: exactly one creation wins
    each time (version 0, the only commit), the others find its table and use it. With
    delta-rs's default commit retries, a loser re-declared the table as version 1 in 14 of
    20 such trials."""
    from concurrent.futures import ThreadPoolExecutor

    for trial in range(10):
        registry = Registry(None, tmp_path / f"trial-{trial}")
        table = registry[T.TOPICS]
        with ThreadPoolExecutor(max_workers=8) as pool:
            won = list(pool.map(registry.bring_to_contract, [table] * 8))
        assert won.count(True) == 1, won
        log = Path(table.location) / "_delta_log"
        assert sorted(p.name for p in log.glob("*.json")) == [f"{0:020d}.json"]
        assert registry.drift(T.TOPICS) == []


def test_a_table_from_newer_code_is_refused(spark, loaded, tmp_path: Path):  # type: ignore[no-untyped-def]
    registry = Registry(spark, loaded.warehouse)
    table = registry[T.ALERTS]
    spark.sql(f"ALTER TABLE delta.`{table.location}` SET TBLPROPERTIES "
              f"('{CONTRACT_VERSION}' = '99.0.0')")
    try:
        with pytest.raises(ContractVersionError, match="upgrade the code"):
            Registry(spark, loaded.warehouse).ensure(names=False)
    finally:
        spark.sql(f"ALTER TABLE delta.`{table.location}` SET TBLPROPERTIES "
                  f"('{CONTRACT_VERSION}' = '{table.contract.version}')")


def test_a_second_load_of_one_broker_is_refused_while_the_first_runs(spark, loaded,  # type: ignore[no-untyped-def]
                                                                   broker_stores) -> None:
    """Another process holds the broker's load lock: the load is refused at once, naming
    it; a load of another broker is not affected; when the holder dies, loads go on."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from jobs.load.broker_lock import broker_load_lock\n"
         f"with broker_load_lock({loaded.warehouse!r}, {BROKER!r}, 's9'):\n"
         "    print('held', flush=True)\n"
         "    time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        store = broker_stores["v5-clean"] / "store"
        with pytest.raises(LoadRefusedError, match=f"another load of broker '{BROKER}'.*s9"):
            load(spark, Path(loaded.warehouse), BROKER, "s3", store)
        with broker_load_lock(loaded.warehouse, "another-broker", "s3"):
            pass  # other brokers' locks are free
    finally:
        holder.kill()
        holder.wait()
    with broker_load_lock(loaded.warehouse, BROKER, "s3"):
        pass  # the kernel released the dead holder's lock
