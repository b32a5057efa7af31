"""Which contract version each table was written with, and what the code may do about it.

Every table records the version of the data contract it was made from in the Delta table
property ``rmq.contract.version``. When the code's contract differs from the table's:

* same major, newer minor: the table is **evolved in place** (the minor version may only
  add nullable columns; they are appended by :mod:`jobs.lakehouse.table_ddl`);
* another major, or no recorded version (a table made before versions were recorded): the
  job **refuses** and names ``python -m jobs migrate``, which rewrites the table offline
  (``jobs.lakehouse.migrate``);
* the table is newer than the code (its major is higher): refused, the code is too old;
* same major, older minor in the contract: written as is (the extra columns get nulls).

Inspection reads the Delta log with delta-rs: no JVM, milliseconds per table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from jobs.lakehouse.contracts import CONTRACT_VERSION, Column, Contract
from jobs.lakehouse.driver_rows import exists
from jobs.lakehouse.locations import delta_storage_options, open_delta_table

# Set while `jobs migrate` rewrites a table: the Delta version holding the rows it copies.
MIGRATION_SOURCE = "rmq.migration.source_version"
MIGRATE_COMMAND = "python -m jobs migrate"


class Action(Enum):
    CREATE = "create"      # no table yet
    READY = "ready"        # the table is what the contract says (or a compatible minor)
    EVOLVE = "evolve"      # same major, the contract adds nullable columns
    MIGRATE = "migrate"    # another major, unrecorded, or a migration left half done
    TOO_NEW = "too new"    # the table's major is newer than this code's contract


@dataclass(frozen=True)
class TableInspection:
    """What the Delta log says about a table location (``exists`` False: no table)."""

    exists: bool
    recorded_version: str | None = None
    partition_columns: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    delta_version: int | None = None
    migration_source: int | None = None


def inspect_table(location: str | Path) -> TableInspection:
    """Read a table's recorded contract version, layout and columns with delta-rs."""
    from deltalake import DeltaTable as RustDeltaTable

    if not exists(location) or not RustDeltaTable.is_deltatable(
            str(location), delta_storage_options(location)):
        return TableInspection(exists=False)
    table = open_delta_table(location)
    metadata = table.metadata()
    config = metadata.configuration or {}
    source = config.get(MIGRATION_SOURCE)
    return TableInspection(
        exists=True,
        recorded_version=config.get(CONTRACT_VERSION),
        partition_columns=tuple(metadata.partition_columns),
        columns=tuple(field.name for field in table.schema().fields),
        delta_version=table.version(),
        migration_source=int(source) if source else None,  # "": finished (migrate.py)
    )


def parse_version(text: str) -> tuple[int, int, int]:
    """``"2.1.0"`` -> ``(2, 1, 0)`` (contracts are validated as MAJOR.MINOR.PATCH)."""
    major, minor, patch = (int(part) for part in text.split("."))
    return major, minor, patch


def decide(contract: Contract, found: TableInspection) -> tuple[Action, str]:
    """What to do with a table before writing it with this contract, and why."""
    name = f"rmq.{contract.table}"
    if not found.exists:
        return Action.CREATE, f"{name} does not exist yet"
    if found.migration_source is not None:
        return Action.MIGRATE, (f"{name}: a migration from Delta version "
                                f"{found.migration_source} did not finish")
    if found.recorded_version is None:
        return Action.MIGRATE, (f"{name} records no contract version (made before versions "
                                f"were recorded); this code has contract {contract.version}")
    have, want = parse_version(found.recorded_version), parse_version(contract.version)
    if have[0] > want[0]:
        return Action.TOO_NEW, (f"{name} was written with contract {found.recorded_version}, "
                                f"newer than this code's {contract.version}: upgrade the code")
    if have[0] < want[0]:
        return Action.MIGRATE, (f"{name} was written with contract {found.recorded_version}; "
                                f"this code has {contract.version}, a new major version")
    if have[1] < want[1]:
        return Action.EVOLVE, (f"{name}: contract {found.recorded_version} -> "
                               f"{contract.version} adds columns")
    return Action.READY, f"{name} is at contract {found.recorded_version}"


def new_columns(contract: Contract, found: TableInspection) -> list[Column]:
    """The columns a minor evolution adds; refuses a required new column."""
    from jobs.lakehouse.contracts import ContractError

    new = [c for c in contract.columns if c.name not in found.columns]
    required = [c.name for c in new if c.required]
    if required:
        raise ContractError(f"contract {contract.table} {contract.version} adds required "
                            f"column(s) {', '.join(required)} in a minor version: a minor "
                            "version may only add nullable columns (make it a major one)")
    return new


class ContractVersionError(RuntimeError):
    """A table cannot be written by this code until it is migrated (or the code upgraded)."""
