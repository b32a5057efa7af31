"""The broker's epoch milliseconds as the tables' time columns (one definition for every task)."""

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
