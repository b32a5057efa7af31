"""Columns of the tables' rows as every decode task builds them: the broker's epoch
milliseconds as time columns, a batch in a contract's exact schema, a task's file name."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MS_PER_DAY = 86_400_000


def timestamps(ms: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Epoch milliseconds -> timestamp[us, UTC] (overflow raises, never wraps)."""
    return pc.multiply_checked(ms, 1000).cast(pa.timestamp("us", tz="UTC"))


def dates(ms: pa.Array | pa.ChunkedArray) -> pa.Array:
    """UTC calendar date of epoch milliseconds."""
    days = np.floor_divide(ms.to_numpy(zero_copy_only=False), MS_PER_DAY).astype(np.int32)
    return pa.array(days, pa.int32()).cast(pa.date32())


def assemble(columns: dict[str, pa.Array | pa.ChunkedArray], schema: pa.Schema
             ) -> pa.RecordBatch:
    """A batch with exactly the contract's columns, in its order and types."""
    arrays = []
    for field in schema:
        value = columns[field.name]
        if isinstance(value, pa.ChunkedArray):
            value = value.combine_chunks()
        arrays.append(value if value.type == field.type else value.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def task_file_stem(task_id: str) -> str:
    """A task id as a file name (its report, its trace rows): one path component."""
    return task_id.replace("/", "__").replace("%", "_pct_")
