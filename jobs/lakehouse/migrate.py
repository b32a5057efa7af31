"""``python -m jobs migrate``: bring every table of a warehouse to this code's contracts.

Run it once after an upgrade that changes a contract's major version (the jobs refuse such
a table and print this command), with no load or check running: pause the DAG first.
Per table:

* missing: created; one minor version behind: evolved in place (as any job would);
* no recorded version, or another major, but already laid out and typed as the contract
  says: only the version is recorded (one metadata commit, no data rewritten);
* otherwise rewritten in place by delta-rs, in one commit: an overwrite that replaces the
  table's schema and partitioning with the contract's and its files with the rows of its
  last version, conformed (time travel still reaches the old layout until VACUUM removes
  it). A second commit records the contract's version and properties; a migration killed
  between the two finds the table already conforming and records the version only.

No Spark: delta-rs commits with conditional writes, so it runs on a local warehouse and
in an object store alike (docs/object-storage.md), and starts no JVM. A table left half
way by the Spark migration of earlier versions (the Delta version its rows come from in
the property ``rmq.migration.source_version``) is finished from that version.

Re-running it changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.lakehouse.contracts import schema_drift
from jobs.lakehouse.driver_rows import arrow_dataset
from jobs.lakehouse.locations import delta_storage_options, open_delta_table
from jobs.lakehouse.table_ddl import record_contract
from jobs.lakehouse.table_versions import (
    Action,
    ContractVersionError,
    TableInspection,
    decide,
    inspect_table,
)
from jobs.lakehouse.tables import Registry, Table, on_disk_schema

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)
APPEND_ONLY = "delta.appendOnly"


class MigrationError(RuntimeError):
    """A table cannot be migrated automatically (the message says why)."""


@dataclass(frozen=True)
class Migrated:
    """What the migration did to one table."""

    table: str
    action: str          # created | evolved | unchanged | recorded | rewritten
    detail: str
    rows: int | None = None


def migrate_warehouse(warehouse: str | Path,
                      progress: Callable[[str], None] = log.info) -> list[Migrated]:
    """Migrate every table of the warehouse."""
    registry = Registry(None, warehouse)
    done = []
    for table in registry.tables.values():
        result = migrate_table(registry, table)
        progress(f"{table.qualified_name}: {result.action} ({result.detail})")
        done.append(result)
    return done


def migrate_table(registry: Registry, table: Table) -> Migrated:
    found = inspect_table(table.location)
    action, reason = decide(table.contract, found)
    if action is Action.TOO_NEW:
        raise ContractVersionError(reason)
    if action is not Action.MIGRATE:
        registry.bring_to_contract(table)
        verb = {Action.CREATE: "created", Action.EVOLVE: "evolved"}.get(action, "unchanged")
        return Migrated(table.name, verb, reason)
    if found.migration_source is None and _already_conforms(table, found):
        record_contract(table.location, table.contract)
        return Migrated(table.name, "recorded", f"{reason}; the layout already conforms")
    rows = _rewrite(table, found)
    record_contract(table.location, table.contract,
                    finish_migration=found.migration_source is not None)
    return Migrated(table.name, "rewritten", reason, rows)


def _already_conforms(table: Table, found: TableInspection) -> bool:
    if list(found.partition_columns) != table.contract.partition_columns:
        return False
    return not schema_drift(table.contract, on_disk_schema(table.location))


def _rewrite(table: Table, found: TableInspection) -> int:
    """Overwrite the table with its rows as of the source version, in the contract's
    schema and partitioning: one commit. The number of rows written."""
    import pyarrow as pa
    from deltalake import write_deltalake

    source = found.migration_source if found.migration_source is not None \
        else found.delta_version
    rows = arrow_dataset(table.location, version=source)
    extra = [name for name in rows.schema.names
             if name not in {c.name for c in table.contract.columns}]
    if extra:
        raise MigrationError(
            f"{table.qualified_name}: column(s) {', '.join(extra)} are not in contract "
            f"{table.contract.version}; dropping data needs a migration step of its own")
    expected = rows.count_rows()
    current = open_delta_table(table.location)
    if (current.metadata().configuration or {}).get(APPEND_ONLY) == "true":
        # an overwrite is refused on an append-only table: lifted for it, set again by
        # record_contract (a migration killed between them rewrites again, then sets it)
        current.alter.set_table_properties({APPEND_ONLY: "false"})
    schema = table.contract.arrow_schema(comments=True)
    write_deltalake(str(table.location),
                    pa.RecordBatchReader.from_batches(schema, _conformed(rows, schema)),
                    mode="overwrite", schema_mode="overwrite",
                    # a list, even empty: None would keep the old table's partitioning
                    partition_by=list(table.contract.partition_columns),
                    storage_options=delta_storage_options(table.location))
    copied = arrow_dataset(table.location).count_rows()
    if copied != expected:
        raise MigrationError(f"{table.qualified_name}: copied {copied} rows of {expected} "
                             f"from Delta version {source}; run the migration again")
    return copied


def _conformed(rows: pa.dataset.Dataset, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """``rows``' batches with the contract's columns, in its order and types; a column the
    old table lacks is null (a NOT NULL one fails the write: delta-rs checks it)."""
    import pyarrow as pa

    for batch in rows.to_batches():
        have = set(batch.schema.names)
        yield pa.RecordBatch.from_arrays(
            [batch.column(field.name).cast(field.type) if field.name in have
             else pa.nulls(batch.num_rows, field.type) for field in schema], schema=schema)

