"""How each table is kept small and fast for years: compaction, VACUUM, checkpoints.

Every table is compacted **size-tiered** (:mod:`jobs.maintain.compaction`): a
partition's files below ``target_file_bytes`` are merged a tier at a time, never re-sorted,
so a night rewrites about what the night added (each byte once per tier), not the history:

* no query of the lakehouse filters on a column that sorting would help more than the
  partitioning and statistics already do: per-snapshot tables are read by
  ``broker``/``snapshot_id`` and their files are written in snapshot order, and merges
  keep that order (oldest file first), so each file's ``snapshot_id`` range stays tight
  for data skipping; facts are read by ``store_date`` (a partition) or by ``broker`` and
  position ranges, which arrive in order;
* Z-order rewrites a whole partition each time it runs, and liquid clustering cannot be
  combined with the partitions that keep the brokers' writes apart.

Files below ``floor_bytes`` (tier 0) are merged once a partition has ``min_small_files``
of them: cheap, and small tables stay one file. A table whose every night adds a small
file to each of many partitions (message_lookup's sixteen buckets) waits for eight, and
merges eight of a tier at a time: a lookup reads few files either way.

**Scope** decides who compacts what, so that maintenance never conflicts with a writer:

* ``broker``: tables partitioned by broker (their rows are replaced per snapshot) are
  compacted partition by partition, in the broker's own task group after its checks: the
  only writers of that partition are that broker's load and check, which are done by then;
* ``table``: tables all brokers append to (facts, state, bookkeeping) are compacted whole.
  Compaction never conflicts with blind appends; two compactions of one table would, so
  one maintenance at a time holds the table (the others skip it that night).
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.lakehouse import tables as T
from jobs.maintain.compaction import TieredPolicy

MIB = 2**20
BROKER, TABLE = "broker", "table"


@dataclass(frozen=True)
class TablePolicy:
    scope: str               # BROKER or TABLE, see above
    target_file_bytes: int   # compaction target; files this large are left alone
    why: str
    min_small_files: int = 2  # tier 0 (below floor_bytes) is merged once it has this many
    fanout: int = 4           # a higher tier is merged once it has this many files
    floor_bytes: int = MIB    # tier 0: files this small cost little to rewrite every night

    @property
    def tiers(self) -> TieredPolicy:
        return TieredPolicy(self.target_file_bytes, self.floor_bytes, self.min_small_files,
                            self.fanout)


_FACTS = TablePolicy(TABLE, 128 * MIB, "appended by every load; large scans: files of "
                                       "Parquet's usual 128 MiB")
_STATE = TablePolicy(TABLE, 32 * MIB, "a few rows per broker per snapshot, appended once: "
                                      "one file per snapshot partition after compaction")
_PER_BROKER = TablePolicy(BROKER, 32 * MIB, "rows replaced per (broker, snapshot): one small "
                                            "file per broker partition after compaction")
_LOOKUP = TablePolicy(TABLE, 32 * MIB, "a small sorted file per bucket per night, read by "
                                      "Bloom filter: bucket files merged eight at a time",
                      min_small_files=8, fanout=8)
_BOOKKEEPING = TablePolicy(TABLE, 32 * MIB, "an audit log appended by every run: a few "
                                            "files in all")

POLICIES: dict[str, TablePolicy] = {
    T.MESSAGES: _FACTS, T.QUEUE_ENTRIES: _FACTS, T.INDEX_ENTRIES: _FACTS,
    T.MESSAGE_TRACES: _FACTS,
    T.MESSAGE_LOOKUP: _LOOKUP,
    T.TOPICS: _STATE, T.SUBSCRIPTION_GROUPS: _STATE, T.CONSUMER_OFFSETS: _STATE,
    T.DELAY_OFFSETS: _STATE, T.PENDING_TIMERS: _STATE, T.COMPACTED_ENTRIES: _STATE,
    T.BROKER_EPOCHS: _STATE, T.POP_IN_FLIGHT: _STATE, T.TRANSACTIONS: _STATE,
    T.QUARANTINE: _BOOKKEEPING, T.RETENTION_GAPS: _BOOKKEEPING,
    T.HISTORY_REWRITES: _BOOKKEEPING, T.SUPERSEDED_MESSAGES: _BOOKKEEPING,
    T.LOAD_RUNS: _BOOKKEEPING,
    T.MAINTENANCE_RUNS: _BOOKKEEPING,
    T.SNAPSHOTS: _PER_BROKER, T.LOAD_STATE: _PER_BROKER, T.CHECK_RESULTS: _PER_BROKER,
    T.CONSUMER_LAG: _PER_BROKER, T.QUEUE_BOUNDS: _PER_BROKER, T.CONSUMER_STATUS: _PER_BROKER,
    T.ALERTS: _PER_BROKER,
    T.REPLICA_STATUS: _PER_BROKER, T.CLUSTER_LAG: _STATE,
}
