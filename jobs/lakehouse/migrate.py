"""``python -m jobs migrate``: bring every table of a warehouse to this code's contracts.

Run it once after an upgrade that changes a contract's major version (the jobs refuse such
a table and print this command), with no load or check running: pause the DAG first.
Per table:

* missing: created; one minor version behind: evolved in place (as any job would);
* no recorded version, or another major, but already laid out and typed as the contract
  says: only the version is recorded (one metadata commit, no data rewritten);
* otherwise rewritten in place: the table is replaced by the contract's definition and
  the rows of its last version are copied in (time travel still reaches the old layout
  until VACUUM removes it). The Delta version the rows come from is kept in the table
  property ``rmq.migration.source_version`` until the copy is done, so a migration killed
  half way is finished by running the command again.

Re-running it changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import SparkSession

from jobs.lakehouse.contracts import CONTRACT_VERSION, schema_drift
from jobs.lakehouse.delta_io import conform
from jobs.lakehouse.engine_choice import refuse_spark_commits_on
from jobs.lakehouse.table_versions import (
    MIGRATION_SOURCE,
    Action,
    ContractVersionError,
    TableInspection,
    decide,
    inspect_table,
)
from jobs.lakehouse.tables import DATABASE, Registry, Table, on_disk_schema

log = logging.getLogger(__name__)


class MigrationError(RuntimeError):
    """A table cannot be migrated automatically (the message says why)."""


@dataclass(frozen=True)
class Migrated:
    """What the migration did to one table."""

    table: str
    action: str          # created | evolved | unchanged | recorded | rewritten
    detail: str
    rows: int | None = None


def migrate_warehouse(spark: SparkSession, warehouse: str | None = None,
                      progress: Callable[[str], None] = log.info) -> list[Migrated]:
    """Migrate every table of the warehouse (the session's by default)."""
    registry = Registry(spark, warehouse)
    refuse_spark_commits_on(registry.warehouse, "jobs migrate")
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
    done = []
    for table in registry.tables.values():
        result = migrate_table(spark, registry, table)
        progress(f"{table.qualified_name}: {result.action} ({result.detail})")
        done.append(result)
    registry.ensure()  # register the names of the migrated tables
    return done


def migrate_table(spark: SparkSession, registry: Registry, table: Table) -> Migrated:
    found = inspect_table(table.location)
    action, reason = decide(table.contract, found)
    if action is Action.TOO_NEW:
        raise ContractVersionError(reason)
    if action is not Action.MIGRATE:
        registry.bring_to_contract(table)
        verb = {Action.CREATE: "created", Action.EVOLVE: "evolved"}.get(action, "unchanged")
        return Migrated(table.name, verb, reason)
    path = f"delta.`{table.location}`"
    if found.migration_source is None and _already_conforms(table, found):
        spark.sql(f"ALTER TABLE {path} SET TBLPROPERTIES "
                  f"('{CONTRACT_VERSION}' = '{table.contract.version}')")
        return Migrated(table.name, "recorded", f"{reason}; the layout already conforms")
    rows = _rewrite(spark, registry, table, found)
    return Migrated(table.name, "rewritten", reason, rows)


def _already_conforms(table: Table, found: TableInspection) -> bool:
    if list(found.partition_columns) != table.contract.partition_columns:
        return False
    return not schema_drift(table.contract, on_disk_schema(table.location))


def _rewrite(spark: SparkSession, registry: Registry, table: Table,
             found: TableInspection) -> int:
    """Replace the table by its contract's definition and copy the old rows in."""
    source = found.migration_source if found.migration_source is not None \
        else found.delta_version
    old = spark.read.format("delta").option("versionAsOf", source).load(table.location)
    extra = [name for name in old.columns
             if name not in {c.name for c in table.contract.columns}]
    if extra:
        raise MigrationError(
            f"{table.qualified_name}: column(s) {', '.join(extra)} are not in contract "
            f"{table.contract.version}; dropping data needs a migration step of its own")
    expected = old.count()
    name = table.qualified_name
    registry.register_name(table)  # REPLACE needs the name to describe the table as it is
    spark.sql(table.contract.create_table_sql(
        name, table.location, replace=True, extra_properties={MIGRATION_SOURCE: str(source)}))
    conform(old, table.contract).write.format("delta").mode("append").save(table.location)
    copied = spark.read.format("delta").load(table.location).count()
    if copied != expected:
        raise MigrationError(f"{name}: copied {copied} rows of {expected} from Delta version "
                             f"{source}; run the migration again")
    spark.sql(f"ALTER TABLE delta.`{table.location}` UNSET TBLPROPERTIES ('{MIGRATION_SOURCE}')")
    return copied
