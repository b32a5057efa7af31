"""The load's last fact step: ``message_lookup`` rows for the messages a snapshot added.

Derived from the ``messages`` rows just committed rather than decoded a second time: the
message rows already say everything a lookup needs, and deriving works the same whether
Spark or this process decoded them. DuckDB reads only this broker's new files (chosen by
the Delta log's statistics, :func:`~jobs.lakehouse.driver_rows.arrow_dataset`), unnests
keys, computes the md5 bucket and sorts by value; pyarrow writes the stream's files in
that order and delta-rs commits them (the load's staged append: half the CPU of delta-rs'
own writer on these rows, bench/README.md).

Which snapshots still need rows is kept by Delta itself: the append records the
transaction ``(rmq-lookup/<broker>, snapshot seq)``, and a load derives the rows of every
snapshot of its broker after the last recorded one. So a re-run after a crash adds
nothing twice, and the first load after an upgrade indexes the broker's whole history.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import arrow_dataset, sql_text
from jobs.lakehouse.locations import Location, open_delta_table
from jobs.lakehouse.message_lookup import KEY, MSG_ID, POSITION, app_id, parquet_options
from jobs.lakehouse.staged_append import stage
from jobs.lakehouse.tables import Registry
from jobs.load.fact_writers import append_staged

BATCH_ROWS = 256 * 1024
# Records a consume queue never lists (a half message; a rollback marker) have no position.
QUEUED_TYPES = ("NOT", "COMMIT")
MESSAGE_COLUMNS = ("broker", "store_date", "physical_offset", "inner_index",
                   "first_snapshot_id", "msg_id", "keys", "topic", "queue_id", "queue_offset",
                   "transaction_type")


def pending_snapshots(registry: Registry, broker: str, seq: int) -> list[str]:
    """The broker's snapshots up to ``seq`` whose lookup rows are not written yet."""

    done = open_delta_table(registry[T.MESSAGE_LOOKUP].location).transaction_version(
        app_id(broker)) or 0
    return sorted(row["snapshot_id"] for row in registry.read_rows(T.SNAPSHOTS, broker=broker)
                  if done < row["snapshot_seq"] <= seq)


def lookup_sql(broker: str, snapshot_ids: Iterable[str]) -> str:
    """DuckDB SQL over view ``messages`` giving the lookup rows of the broker's messages
    first seen in ``snapshot_ids``, sorted by bucket and value. Each row is distinct
    without a DISTINCT over them all: a message row has one msgId and one position, and
    its keys are made distinct before they are unnested (a key may repeat in ``KEYS``).
    The order leaves out ``broker``, one here: each sort column costs DuckDB's sort (with
    it, 5.4 CPU-s for the 3.5 M rows of a 1 GiB night instead of 3.8)."""
    ids = ", ".join(sql_text(s) for s in snapshot_ids)
    pointer = "broker, store_date, physical_offset, inner_index, first_snapshot_id"
    queued = ", ".join(sql_text(t) for t in QUEUED_TYPES)
    return f"""
        WITH m AS (SELECT * FROM messages
                   WHERE broker = {sql_text(broker)} AND first_snapshot_id IN ({ids})),
        entries AS (
            SELECT '{MSG_ID}' AS kind, msg_id AS lookup_value, {pointer}
            FROM m WHERE msg_id IS NOT NULL AND msg_id <> ''
            UNION ALL
            SELECT '{KEY}', k, {pointer}
            FROM (SELECT unnest(list_distinct(keys)) AS k, {pointer} FROM m) WHERE k <> ''
            UNION ALL
            SELECT '{POSITION}', concat_ws(' ', topic, queue_id, queue_offset), {pointer}
            FROM m WHERE transaction_type IN ({queued}))
        SELECT substr(md5(lookup_value), 1, 1) AS lookup_bucket, kind,
               lookup_value, {pointer}
        FROM entries
        ORDER BY lookup_bucket, lookup_value, physical_offset, inner_index"""


@dataclass
class LookupWrite:
    """What :func:`write_lookup_rows` did."""

    snapshots: list[str] = field(default_factory=list)  # whose rows were derived
    rows: int = 0


def write_lookup_rows(registry: Registry, broker: str, seq: int) -> LookupWrite:
    """Append the lookup rows of every snapshot of ``broker`` up to ``seq`` not yet
    indexed (none when all are)."""
    import duckdb

    pending = pending_snapshots(registry, broker, seq)
    done = LookupWrite(pending)
    if not pending:
        return done
    ids = ", ".join(sql_text(s) for s in pending)
    messages = arrow_dataset(
        registry[T.MESSAGES].location,
        files_where=f"broker = {sql_text(broker)} AND first_snapshot_id IN ({ids})")
    target = registry[T.MESSAGE_LOOKUP]
    schema = target.contract.arrow_schema()
    with duckdb.connect() as connection:
        connection.execute("SET preserve_insertion_order = false")
        connection.execute(f"SET temp_directory = {sql_text(str(_spill_dir(registry)))}")
        connection.register("messages", messages)
        reader = connection.sql(lookup_sql(broker, pending)).to_arrow_reader(BATCH_ROWS)

        def typed() -> Iterator[pa.RecordBatch]:
            for batch in reader:
                done.rows += batch.num_rows
                yield batch.cast(schema)

        append_staged(target.location, target.contract, app_id(broker), seq,
                      lambda area, layout: [stage(typed(), area, layout)],
                      options=parquet_options())
    return done


def _spill_dir(registry: Registry) -> Path:
    """Where DuckDB spills a sort larger than memory (the first load of a long history):
    beside the tables on a local warehouse, the temporary directory otherwise."""
    warehouse = Location(registry.warehouse)
    return warehouse.path / "_rmq_spill" if warehouse.is_local \
        else Path(tempfile.gettempdir()) / "rmq_spill"
