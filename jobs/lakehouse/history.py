"""Which fact rows are a broker's history now, and which a rewrite superseded.

A broker's store can stop holding what was loaded from it (a failover's truncation, a
reset: :mod:`jobs.load.rewrites`). The fact tables are append-only, so the rows it
superseded stay where they are; a ``history_rewrites`` row marks them: a fact row is
superseded when a rewrite of its broker lists the snapshot that first held it
(``superseded_snapshot_ids``) and its commitlog offset is at or after the rewrite's
``from_offset``. Every reader applies that one predicate: the checks' views, the query
engines (``rmq.messages`` is the current history, ``rmq.messages_all`` every row), the
load itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

HISTORY_KINDS = ("truncated", "rewritten", "reset")

# A fact row ``{t}`` (broker, first_snapshot_id, a commitlog offset ``{offset}``) that one
# of the rewrites ``{r}`` (rows shaped like history_rewrites) superseded.
SUPERSEDED_SQL = ("EXISTS (SELECT 1 FROM {r} r WHERE r.broker = {t}.broker "
                  "AND r.kind IN ('truncated', 'rewritten', 'reset') "
                  "AND {t}.{offset} >= r.from_offset "
                  "AND array_contains(r.superseded_snapshot_ids, {t}.first_snapshot_id))")

#: The fact tables with a history, and the column holding each row's commitlog offset.
OFFSET_COLUMNS = {"messages": "physical_offset", "queue_entries": "commitlog_offset",
                  "index_entries": "commitlog_offset"}
#: ``rmq.<table>_all``: every row of a fact table, superseded ones included.
ALL_ROWS_SUFFIX = "_all"


def current_rows_sql(table: str, source: str, rewrites: str) -> str:
    """SELECT of the rows of fact table ``table`` (read as ``source``) no rewrite in
    ``rewrites`` superseded."""
    return (f"SELECT * FROM {source} t WHERE NOT "
            + SUPERSEDED_SQL.format(r=rewrites, t="t", offset=OFFSET_COLUMNS[table]))


def superseded_mask(table: pa.Table, rewrites: list[dict], offset_column: str) -> pa.Array:
    """True for the rows of ``table`` (Arrow, with first_snapshot_id and the offset column)
    that ``rewrites`` (history_rewrites rows) superseded."""
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = pa.array([False] * table.num_rows, pa.bool_())
    for rewrite in rewrites:
        if rewrite["kind"] not in HISTORY_KINDS:
            continue
        hit = pc.and_(pc.greater_equal(table.column(offset_column), rewrite["from_offset"]),
                      pc.is_in(table.column("first_snapshot_id"),
                               pa.array(rewrite["superseded_snapshot_ids"] or [],
                                        pa.string())))
        mask = pc.or_(mask, pc.fill_null(hit, False))
    return mask
