"""Progress lines for long loads: what is being done, and how far Spark has got.

Steps are printed as they start; while a Spark job runs, a watcher thread polls the
status tracker and prints ``tasks done/total`` and an approximate byte rate whenever it
changes (at most once a second). Lines go to stderr so stdout stays the summary.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from pyspark.sql import SparkSession

from jobs.lakehouse.spark_session import SparkOnDemand


class ConsoleProgress:
    """Callable progress sink with a Spark stage watcher."""

    def __init__(self, spark: SparkSession | SparkOnDemand | None = None,
                 stream: TextIO = sys.stderr, quiet: bool = False) -> None:
        """``spark`` a :class:`SparkOnDemand`: its stages are watched once it is started
        (a load that needs no Spark never starts it)."""
        self.spark = spark
        self.stream = stream
        self.quiet = quiet
        self.started = time.monotonic()
        self.planned_bytes = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __call__(self, message: str) -> None:
        if not self.quiet:
            print(f"[{time.monotonic() - self.started:7.1f}s] {message}", file=self.stream,
                  flush=True)

    def __enter__(self) -> ConsoleProgress:
        if self.spark is not None and not self.quiet:
            self._thread = threading.Thread(target=self._watch, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _session(self) -> SparkSession | None:
        if isinstance(self.spark, SparkOnDemand):
            return self.spark.session
        return self.spark

    def _watch(self) -> None:
        session = self._session()
        while session is None:  # not started (yet): a load that may never need it
            if self._stop.wait(0.5):
                return
            session = self._session()
        tracker = session.sparkContext.statusTracker()
        last: tuple[int, int, int] | None = None
        stage_started: dict[int, float] = {}
        while not self._stop.wait(1.0):
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is None or info.numTasks < 2:
                    continue
                stage_started.setdefault(stage_id, time.monotonic())
                state = (stage_id, info.numCompletedTasks, info.numActiveTasks)
                if state == last:
                    continue
                last = state
                elapsed = time.monotonic() - stage_started[stage_id]
                self(f"  spark stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} "
                     f"tasks done, {info.numActiveTasks} running, {elapsed:.0f}s")
