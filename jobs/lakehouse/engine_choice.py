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
#: ``auto``'s defaults (config/pipeline.yaml). A check holds the snapshot's views in memory:
#: local up to 256 MiB of commitlog. With both engines writing the same files, a load in
#: process is still faster than Spark on two cores (1 GiB: 9.2 s against 11.4 s for
#: local[2]; 4 GiB: 30.6 s against 43.3 s for a standalone cluster of two one-core
#: workers): Spark pays its workers' start and the JVM, and has no more cores to give here.
#: But its memory grows with the night (2.0 GiB peak at 1 GiB, 3.5 GiB at 4 GiB: the
#: lookup's sort), and several brokers load at once: local up to 1 GiB past the marks,
#: bigger nights on the executors, whose memory is a row group per partition
#: (bench/README.md).
LOCAL_CHECKS_UP_TO_MIB = 256
LOCAL_LOAD_UP_TO_MIB = 1024


def runs_in_process(stage: str, setting: str, size_bytes: int, up_to_mib: int) -> bool:
    """Whether ``stage`` (named in the error) runs in this process for ``size_bytes`` of
    input under ``setting`` (auto, local or spark)."""
    if setting not in ENGINES:
        raise ValueError(f"{stage} engine {setting!r}: expected one of {', '.join(ENGINES)}")
    return setting == LOCAL or (setting == AUTO and size_bytes <= up_to_mib * MIB)

