"""The layout of ``rmq.message_lookup``, shared by its writer (the load), its maintenance and
its readers (the saved lookup queries, jobs/query/lookup.py).

A lookup by msgId, key or queue position over ``messages`` would read every file: nothing
in a file's statistics says which msgIds or keys it holds, and a night's files hold the
whole range of them. So the load writes, per message row, one narrow row per value it can
be looked up by, pointing at the row's partition (``store_date``) and position
(``broker``, ``physical_offset``, ``inner_index``). That table is laid out for point reads:

* partitioned by ``lookup_bucket``, the first hex digit of md5(value): a lookup reads one
  sixteenth of it, and the bucket is computed the same way in Python, Spark and DuckDB;
* each write sorted by value, with a Bloom filter on ``lookup_value``: within the bucket,
  row-group statistics and Bloom filters skip what cannot hold the value.

The second step reads ``messages`` with the pointers as literals (store_date partitions,
physical_offset statistics): a few files whatever the history. docs/lakehouse.md says why
this layout and not another; bench/README.md has the files read at 1 M and 10 M messages.
"""

from __future__ import annotations

import hashlib

MSG_ID, KEY, POSITION = "msg_id", "key", "position"
KINDS = (MSG_ID, KEY, POSITION)
#: Rows per row group: each has its own statistics and Bloom filter, so a point read
#: decodes at most this many values.
ROW_GROUP_ROWS = 128 * 1024
#: The Bloom filter's false-positive rate, sized for a full row group of distinct values.
BLOOM_FPP = 0.01


def app_id(broker: str) -> str:
    """The Delta transaction id under which the load records the broker's snapshot seq
    whose lookup rows are written (every earlier snapshot's are too)."""
    return f"rmq-lookup/{broker}"


def bucket(value: str) -> str:
    """The ``lookup_bucket`` of ``value``: SQL's ``substr(md5(value), 1, 1)``."""
    return hashlib.md5(value.encode()).hexdigest()[0]


def position_value(topic: str, queue_id: int, queue_offset: int) -> str:
    """The ``lookup_value`` of a queue position (topic names never contain spaces)."""
    return f"{topic} {queue_id} {queue_offset}"


def parquet_options() -> dict[str, object]:
    """pyarrow's Parquet writer settings of every file of the table (the load's and
    maintenance's merges): zstd, small row groups, a Bloom filter on ``lookup_value`` (used
    by DataFusion and Spark alike to skip row groups), and dictionary pages only where
    values repeat (the values themselves are nearly all distinct: a dictionary there is
    tried and dropped per row group, half the writer's CPU)."""
    return {"compression": "zstd", "row_group_size": ROW_GROUP_ROWS,
            "use_dictionary": ["kind", "broker", "first_snapshot_id"],
            "bloom_filter_options": {"lookup_value": {"ndv": ROW_GROUP_ROWS,
                                                      "fpp": BLOOM_FPP}}}
