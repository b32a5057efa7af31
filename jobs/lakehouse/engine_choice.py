"""Spark or this process: how a stage that can run either way decides.

A night of a small broker spends most of its time in Spark's fixed costs (a JVM, then a
job and a plan per step), not in its data. The load (:mod:`jobs.load.fact_writers`) and
the checks (:mod:`jobs.check.engines`) can each do their work inside the task's own
process instead, and choose by the size of what they would read: ``local`` always in
process, ``spark`` always on Spark, ``auto`` in process up to a configured number of MiB.
"""

from __future__ import annotations

SPARK, LOCAL, AUTO = "spark", "local", "auto"
ENGINES = (AUTO, LOCAL, SPARK)
MIB = 1 << 20


def runs_in_process(stage: str, setting: str, size_bytes: int, up_to_mib: int) -> bool:
    """Whether ``stage`` (named in the error) runs in this process for ``size_bytes`` of
    input under ``setting`` (auto, local or spark)."""
    if setting not in ENGINES:
        raise ValueError(f"{stage} engine {setting!r}: expected one of {', '.join(ENGINES)}")
    return setting == LOCAL or (setting == AUTO and size_bytes <= up_to_mib * MIB)
