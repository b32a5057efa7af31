"""Create and evolve the lakehouse tables from their data contracts, with delta-rs.

A table is created as Spark's ``CREATE TABLE`` of :meth:`Contract.create_table_sql` would
create it: the same schema (types, NOT NULL, the descriptions as column comments), the same
partition columns, table comment and properties (``rmq.contract.version`` among them), and
the same protocol (reader 1, writer 2). tests/test_contracts.py creates every table both
ways and compares the Delta logs' metadata. Doing it without Spark means a load whose
tables do not exist yet (a new warehouse, a fleet's first night) starts no JVM for them,
and a creation race between processes is decided by the Delta log's first commit (written
atomically, put-if-absent), never by a half-made directory.

A minor contract version evolves a table in place: its new nullable columns are added, then
the recorded version is raised (two commits, as Spark's two ALTER TABLE statements were).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobs.lakehouse.contracts import CONTRACT_VERSION
from jobs.lakehouse.locations import delta_storage_options, open_delta_table
from jobs.lakehouse.table_versions import MIGRATION_SOURCE

if TYPE_CHECKING:
    from jobs.lakehouse.contracts import Column, Contract


def create_table(contract: Contract, location: str) -> None:
    """Create the table at ``location``; fails when any commit is already there.

    No commit retries: delta-rs would otherwise retry a creation that lost the race for
    version 0 as version 1, declaring the table a second time over the winner's.
    """
    from deltalake import CommitProperties, DeltaTable

    DeltaTable.create(location, contract.arrow_schema(comments=True), mode="error",
                      partition_by=list(contract.partition_columns) or None,
                      description=contract.description,
                      configuration={**contract.table_properties,
                                     CONTRACT_VERSION: contract.version},
                      raise_if_key_not_exists=False,
                      commit_properties=CommitProperties(max_commit_retries=0),
                      storage_options=delta_storage_options(location))


def evolve_table(contract: Contract, location: str, new: list[Column]) -> None:
    """Add the contract's ``new`` columns (:func:`table_versions.new_columns`) and record
    its version."""
    from deltalake import Field

    table = open_delta_table(location)
    added = {c.name for c in new}
    if added:
        table.alter.add_columns([Field.from_arrow(field) for field in
                                 contract.arrow_schema(comments=True) if field.name in added])
    table.alter.set_table_properties({CONTRACT_VERSION: contract.version},
                                     raise_if_not_exists=False)


def record_contract(location: str, contract: Contract, *,
                    finish_migration: bool = False) -> None:
    """Record the contract's version, properties and description on the table (one
    commit), as ``jobs migrate`` does after a rewrite. ``finish_migration``: the table
    carries the Spark-era migration's source version; delta-rs cannot remove a property,
    so it is left empty, which means none (:func:`table_versions.inspect_table`)."""
    table = open_delta_table(location)
    properties = {**contract.table_properties, CONTRACT_VERSION: contract.version}
    if finish_migration:
        properties[MIGRATION_SOURCE] = ""
    table.alter.set_table_properties(properties, raise_if_not_exists=False)
    if contract.description and table.metadata().description != contract.description:
        table.alter.set_table_description(contract.description)
