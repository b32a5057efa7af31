"""Years of nights: does a night cost the same at night 100 as at night 10?

A series is one long-lived process that runs, night after night, the DAG's own step
functions (``jobs.pipeline``: snapshot, load, check, maintain, clean up; alert delivery is
off) for each of its brokers, on synthetic stores that grow by one night of messages
before each night and keep three nights of commitlog, as a broker with the default 72 h
``fileReservedTime`` does (bench/growing_broker.py). So a store stays the same size and
the lakehouse grows: what the series measures is the cost of that history. Series:

  one    1 broker, 100 nights
  five   5 brokers side by side (each night every broker in turn), 20 nights

Delta keeps time by the wall clock: a checkpoint drops the tombstones older than
``delta.deletedFileRetentionDuration`` (a week), the log cleanup the commits older than
``delta.logRetentionDuration`` (30 days), VACUUM the files older than ``time_travel_days``.
A series runs a night in seconds, so by the wall clock none of that would ever happen and
the tables would carry every tombstone, commit and file of the whole series, as no
deployment does. The series keeps the calendar instead (``--wall-clock-retention`` turns
it off): after each night, outside its time, every file of the tables is made a day older
(mtimes: what VACUUM and the log cleanup compare), and each table's tombstone retention is
set once to seven of the series' nights (``interval N seconds``, from the wall-clock length
of its second and third nights: tombstones carry the commit's time, which no mtime moves).

Each night records, per broker, the seconds of every step and the store's bytes on disk
(and the commitlog bytes ever written); on measured nights (1, 10, 30, 100 and every 10th)
also, per table, the files a query reads (the Delta table's active files) and their bytes,
the data files on disk, the Delta log (files, bytes), and the
seconds of each saved query as ``jobs query --saved`` runs it, on the local engine (a new
engine per query, as the CLI) and on Spark (the series' session, warm), the best of 3. On
nights 1, 10, 30 and 100 the first broker's check is measured again step by step: seconds,
files opened, bytes read (bench/check_cost.py).

Usage: python bench/years.py --series one [--nights 100] [--messages-per-night 5000]
                             [--without-index]     # the generator before it wrote index/
                             [--wall-clock-retention]  # Delta's retentions by the wall clock
                             [--keep-nights 10,100] # copies of the warehouse after them
       python bench/years.py --queries-only WAREHOUSE   # the saved queries of a warehouse
       python bench/years.py --series one --side-by-side 10,100 [--rounds 5]
           # the check and the maintenance of two kept warehouses, alternately
Results: .cache/bench/years/<series>.jsonl (a line per night) and a summary on stdout.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from commitlog_decode import message_keys, uniq_key  # noqa: E402
from growing_broker import GrowingBroker  # noqa: E402

SERIES = {"one": (1, 100), "five": (5, 20)}
FIRST_NIGHT = datetime(2026, 1, 1, 2, tzinfo=UTC)
STEPS = ("snapshot", "load", "check", "maintain", "clean_up")
REPORTED_NIGHTS = (1, 10, 30, 100)
RESULTS = ROOT / ".cache" / "bench" / "years"
DAY_S = 86_400
TOMBSTONE_NIGHTS = 7  # Delta's default delta.deletedFileRetentionDuration: a week
TOMBSTONE_RETENTION = "delta.deletedFileRetentionDuration"


def kept_warehouse(work: Path, night: int) -> Path:
    """Where ``--keep-nights`` copies the series' warehouse after ``night``."""
    return work.parent / f"{work.name}-night{night}" / "warehouse"


def measured(night: int) -> bool:
    return night in REPORTED_NIGHTS or night % 10 == 0


def pipeline_config(work: Path, brokers: list[str]):  # type: ignore[no-untyped-def]
    from jobs.pipeline_config import BrokerSource, PipelineConfig

    return PipelineConfig(
        schedule="0 2 * * *", snapshot_root=work / "snapshots", warehouse=work / "warehouse",
        retention_days=2, retries=0, retry_delay_s=1, spark_conn_id=None,
        deliver_alerts=False, source=work / "pipeline.yaml",
        brokers=tuple(BrokerSource(b, str(work / "stores" / b / "store")) for b in brokers),
        alerts_config=ROOT / "config" / "alerts.yaml")


def one_night(spark, config, broker, snapshot_id: str,  # type: ignore[no-untyped-def]
              night_time: datetime, after_step=None) -> dict[str, float]:
    """The broker's task group, step by step, timed. The snapshot is taken at the night's
    time on the series' calendar (``night_time``), not at the bench's wall-clock second:
    what reads the snapshots' times (consumer rates, the alert history's reminder
    horizon, lag ages) sees nights a day apart, as in a deployment. ``after_step(step)``
    runs after each step, outside its time."""
    from jobs import pipeline

    seconds, clock = {}, time.monotonic()

    def lap(step: str) -> None:
        nonlocal clock
        seconds[step] = round(time.monotonic() - clock, 3)
        if after_step is not None:
            after_step(step)
        clock = time.monotonic()

    snapshot = pipeline.snapshot_broker(config, broker, snapshot_id)
    snapshot["taken_at"] = night_time.isoformat()
    lap("snapshot")
    loaded = pipeline.load_broker(spark, config, snapshot)
    lap("load")
    checked = pipeline.check_broker(spark, config, loaded, config.alerts_config)
    lap("check")
    pipeline.maintain_broker(config, checked)
    lap("maintain")
    pipeline.clean_up_broker(config, broker.name, snapshot_id)
    lap("clean_up")
    return seconds


class Calendar:
    """Lets Delta's wall-clock retentions see the series' nights (see the module's doc)."""

    def __init__(self, warehouse: Path) -> None:
        self.warehouse = warehouse
        self.night_lengths: list[float] = []
        self.tombstone_retention: str | None = None
        self._retained: set[Path] = set()  # tables whose tombstone retention is set
        self._night_began = time.monotonic()

    def end_night(self, night: int) -> None:
        """A night is over: the tables' files age a day; after night 3, each table (and
        later each new one) gets its tombstone retention."""
        from jobs.lakehouse import tables as T

        self.night_lengths.append(time.monotonic() - self._night_began)
        for name in T.TABLES:
            location = Path(T.table_location(self.warehouse, name))
            if location.exists():
                self._age_a_day(location)
                if night >= 3 and location not in self._retained:
                    self._set_tombstone_retention(location)
                    self._retained.add(location)
        self._night_began = time.monotonic()

    @staticmethod
    def _age_a_day(location: Path) -> None:
        for path in location.rglob("*"):
            if path.is_file():
                stat = path.stat()
                os.utime(path, (stat.st_atime - DAY_S, stat.st_mtime - DAY_S))

    def _set_tombstone_retention(self, location: Path) -> None:
        from deltalake import DeltaTable

        if self.tombstone_retention is None:  # nights 2 and 3: night 1 creates the tables
            seconds = TOMBSTONE_NIGHTS * sum(self.night_lengths[1:3]) / 2
            self.tombstone_retention = f"interval {round(seconds)} seconds"
        table = DeltaTable(str(location))
        if table.metadata().configuration.get(TOMBSTONE_RETENTION) is None:
            table.alter.set_table_properties({TOMBSTONE_RETENTION: self.tombstone_retention})


def table_stats(warehouse: Path) -> dict[str, dict[str, int]]:
    import pyarrow as pa
    from deltalake import DeltaTable

    from jobs.lakehouse import tables as T

    stats = {}
    for name in T.TABLES:
        location = Path(T.table_location(warehouse, name))
        active = pa.table(DeltaTable(str(location)).get_add_actions(flatten=True)).to_pydict()
        on_disk = [p for p in location.rglob("*.parquet") if "_delta_log" not in p.parts]
        log = [p for p in (location / "_delta_log").iterdir() if p.is_file()]
        stats[name] = {"files": len(active["path"]), "bytes": sum(active["size_bytes"]),
                       "files_on_disk": len(on_disk),
                       "bytes_on_disk": sum(p.stat().st_size for p in on_disk),
                       "log_files": len(log), "log_bytes": sum(p.stat().st_size for p in log)}
    return stats


QUERIES = ("message_by_key", "message_by_msg_id", "consumer_positions",
           "volume_per_topic_hour")
QUERY_PARAMS = {"message_by_key": {"key": message_keys(42)[0]},
                "message_by_msg_id": {"msg_id": uniq_key(42)}}


def query_seconds(warehouse: Path, spark=None) -> dict[str, dict[str, float]]:  # type: ignore[no-untyped-def]
    """Each saved query as ``jobs query --saved`` runs it (its lookup first, where it has
    one), best of 3: ``local`` opens a new engine each time, as a CLI call does; ``spark``
    uses the given warm session."""
    from jobs.query.local_engine import LocalEngine
    from jobs.query.spark_engine import SparkEngine

    def best_of_3(open_engine, name: str) -> float:  # type: ignore[no-untyped-def]
        best = float("inf")
        for _ in range(3):
            clock = time.monotonic()
            open_engine().saved(name, QUERY_PARAMS.get(name))
            best = min(best, time.monotonic() - clock)
        return round(best, 3)

    seconds: dict[str, dict[str, float]] = {"local": {}, "spark": {}}
    for name in QUERIES:
        seconds["local"][name] = best_of_3(lambda: LocalEngine(warehouse), name)
    if spark is not None:
        engine = SparkEngine(spark, warehouse)
        for name in QUERIES:
            seconds["spark"][name] = best_of_3(lambda: engine, name)
    return seconds


def run_series(series: str, nights: int, per_night: int, work: Path,
               index_files: bool = True, keep_nights: frozenset[int] | set[int] = frozenset(),
               calendar_retention: bool = True) -> Path:
    from check_cost import measure

    from jobs.lakehouse.spark_session import build_spark_session
    from jobs.snapshot.manifest import snapshot_id_for

    count, _default_nights = SERIES[series]
    names = [f"years-{series}-{i}" for i in range(count)]
    shutil.rmtree(work, ignore_errors=True)
    config = pipeline_config(work, names)
    stores = {b.name: GrowingBroker(work / "stores" / b.name, per_night,
                                    index_files=index_files) for b in config.brokers}
    spark = build_spark_session(f"years-{series}", warehouse=config.warehouse)
    calendar = Calendar(config.warehouse) if calendar_retention else None
    results = work.parent / f"{work.name}.jsonl"
    results.parent.mkdir(parents=True, exist_ok=True)
    with results.open("w") as out:
        for night in range(1, nights + 1):
            night_time = FIRST_NIGHT + timedelta(days=night - 1)
            snapshot_id = snapshot_id_for(night_time)
            record: dict[str, object] = {"night": night, "snapshot_id": snapshot_id,
                                         "messages_per_night": per_night, "brokers": {},
                                         "index_files": index_files,
                                         "calendar_retention": calendar_retention}
            for broker in config.brokers:
                grown = stores[broker.name].grow()
                record["brokers"][broker.name] = {  # type: ignore[index]
                    "messages": grown.messages, "written_bytes": grown.physical_end,
                    "store_bytes": stores[broker.name].disk_bytes(),
                    "seconds": one_night(spark, config, broker, snapshot_id, night_time)}
            if measured(night):
                record["tables"] = table_stats(config.warehouse)
                record["queries"] = query_seconds(config.warehouse, spark)
            if night in REPORTED_NIGHTS:
                record["check_cost"] = measure(config.warehouse, config.brokers[0].name,
                                               snapshot_id)
            if night in keep_nights:  # for bench/check_cost.py and profiling, night by night
                kept = kept_warehouse(work, night)
                shutil.rmtree(kept.parent, ignore_errors=True)
                shutil.copytree(config.warehouse, kept)
            if calendar is not None:
                calendar.end_night(night)
                record["tombstone_retention"] = calendar.tombstone_retention
            out.write(json.dumps(record) + "\n")
            out.flush()
            totals = [sum(b["seconds"].values()) for b in record["brokers"].values()]  # type: ignore[attr-defined]
            print(f"night {night}: {', '.join(f'{t:.1f}' for t in totals)} s", flush=True)
    spark.stop()
    return results


# --------------------------------------------------------------------------- side by side


def side_by_side(series: str, work: Path, nights: list[int], rounds: int
                 ) -> dict[int, dict[str, float]]:
    """The check and the maintenance of the warehouses kept after ``nights``
    (``--keep-nights``), run alternately (the order flips every round), each on a fresh
    copy: a series' late nights meet a machine that may have slowed or sped up since its
    early ones, which a line fitted through them takes for growth; nights run side by side
    do not. Medians per night, seconds."""
    import statistics
    import tempfile

    from check_cost import measure

    from jobs.maintain.maintenance import maintain_tables

    broker = f"years-{series}-0"
    times: dict[int, dict[str, list[float]]] = {n: {"check": [], "maintain": []} for n in nights}
    for round_ in range(rounds):
        for night in (nights if round_ % 2 == 0 else list(reversed(nights))):
            kept = kept_warehouse(work, night)
            marks = measure(kept, broker, None, trace=False)
            times[night]["check"].append(sum(m["seconds"] for m in marks))
            with tempfile.TemporaryDirectory(prefix="years-maintain-") as scratch:
                copy = Path(scratch) / "warehouse"
                shutil.copytree(kept, copy, ignore=shutil.ignore_patterns("_checks"))
                clock = time.monotonic()  # (the tables and their locks: no reports)
                maintain_tables(copy, broker, progress=lambda _: None)
                times[night]["maintain"].append(time.monotonic() - clock)
    medians = {n: {step: round(statistics.median(values), 3) for step, values in by.items()}
               for n, by in times.items()}
    first, last = nights[0], nights[-1]
    for step in ("check", "maintain"):
        per_night = (medians[last][step] - medians[first][step]) / (last - first)
        print(f"{step}: night {first} {medians[first][step]:.2f} s, night {last} "
              f"{medians[last][step]:.2f} s (medians of {rounds}): "
              f"{per_night * 1000:+.1f} ms per night")
    return medians


# --------------------------------------------------------------------------- summary


def per_night_seconds(record: dict) -> dict[str, float]:
    """Seconds per broker-night by step (the mean over the night's brokers)."""
    brokers = list(record["brokers"].values())
    return {step: sum(b["seconds"][step] for b in brokers) / len(brokers) for step in STEPS}


def slope(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares line through (night, seconds): intercept, seconds per extra night."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points) or 1.0
    b = sum((x - mean_x) * (y - mean_y) for x, y in points) / var
    return mean_y - b * mean_x, b


def query_columns(record: dict) -> dict[str, float]:
    """``engine:query -> seconds`` (records before the local engine hold Spark's alone)."""
    queries = record["queries"]
    if not isinstance(next(iter(queries.values())), dict):
        queries = {"spark": queries}
    return {f"{engine}:{name}": value for engine, by_name in queries.items()
            for name, value in by_name.items()}


def summarize(results: Path) -> None:
    from check_cost import print_table

    records = [json.loads(line) for line in results.read_text().splitlines()]
    by_night = {r["night"]: r for r in records}
    print(f"\n{results.name}: {len(records)} nights, "
          f"{records[0]['messages_per_night']} messages per broker per night, "
          f"{len(records[0]['brokers'])} broker(s), index files "
          f"{'written' if records[0].get('index_files') else 'not written'}")
    queries = query_columns(next(r for r in reversed(records) if "queries" in r))
    print("| night | " + " | ".join(STEPS) + " | total s | store MiB | files (active, all "
          "tables) | files on disk | Delta log files | Delta log MiB | "
          + " | ".join(f"{q} s" for q in queries) + " |")
    for night in sorted(set(REPORTED_NIGHTS) | {len(records)}):
        record = by_night.get(night)
        if record is None or "tables" not in record:
            continue
        seconds = per_night_seconds(record)
        tables = record["tables"]
        store = sum(b.get("store_bytes", 0) for b in record["brokers"].values()) \
            / len(record["brokers"]) / 2**20
        print(f"| {night} | " + " | ".join(f"{seconds[s]:.1f}" for s in STEPS)
              + f" | {sum(seconds.values()):.1f} | {store:.1f}"
              + f" | {sum(t['files'] for t in tables.values())}"
              + f" | {sum(t['files_on_disk'] for t in tables.values())}"
              + f" | {sum(t['log_files'] for t in tables.values())}"
              + f" | {sum(t['log_bytes'] for t in tables.values()) / 2**20:.1f} | "
              + " | ".join(f"{query_columns(record).get(q, float('nan')):.2f}"
                           for q in queries) + " |")
    for night in REPORTED_NIGHTS:
        if "check_cost" in by_night.get(night, {}):
            print_table(by_night[night]["check_cost"], f"the check at night {night}")
    # a night is noisy (a shared 2-core machine): compare the medians of nights 6-15 and the
    # last ten, and fit a line through every night from 10 on
    totals = {r["night"]: sum(per_night_seconds(r).values()) for r in records}

    def median(nights: range) -> float:
        values = sorted(totals[n] for n in nights if n in totals)
        return values[len(values) // 2]

    if len(records) < 20:
        return
    early, late = median(range(6, 16)), median(range(len(records) - 9, len(records) + 1))
    intercept, per_extra = slope([(n, s) for n, s in totals.items() if n >= 10])
    print(f"median seconds per broker-night, nights 6-15: {early:.1f}; last 10 nights: "
          f"{late:.1f}; ratio {late / early:.2f}")
    at = {n: intercept + per_extra * n for n in (10, 365)}
    print(f"fitted: {intercept:.1f} s + {per_extra * 1000:.1f} ms per extra night: night 365 "
          f"would take {at[365]:.1f} s, {at[365] / at[10]:.2f}x night 10")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", choices=sorted(SERIES))
    parser.add_argument("--nights", type=int)
    parser.add_argument("--messages-per-night", type=int, default=5000)
    parser.add_argument("--without-index", action="store_true",
                        help="stores without index/ (the generator before 2026-11-27)")
    parser.add_argument("--wall-clock-retention", action="store_true",
                        help="Delta's retentions by the wall clock, as before 2026-11-28: "
                             "no file ages, no tombstone leaves a checkpoint")
    parser.add_argument("--summary-only", action="store_true")
    parser.add_argument("--keep-nights", default="",
                        help="comma-separated nights after which the warehouse is copied to "
                             ".cache/bench/years/<series>-night<N>/warehouse")
    parser.add_argument("--queries-only", type=Path, metavar="WAREHOUSE")
    parser.add_argument("--side-by-side", metavar="N,M",
                        help="the check and maintenance of the warehouses kept after nights "
                             "N and M, alternately")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.queries_only:
        print(json.dumps(query_seconds(args.queries_only.resolve()), indent=1))
        return
    if not args.series:
        parser.error("--series is required")
    name = args.series + ("-without-index" if args.without_index else "") \
        + ("-wall-clock" if args.wall_clock_retention else "")
    if args.side_by_side:
        side_by_side(args.series, RESULTS / name,
                     [int(n) for n in args.side_by_side.split(",")], args.rounds)
        return
    results = RESULTS / f"{name}.jsonl"
    if not args.summary_only:
        results = run_series(args.series, args.nights or SERIES[args.series][1],
                             args.messages_per_night, RESULTS / name,
                             index_files=not args.without_index,
                             calendar_retention=not args.wall_clock_retention,
                             keep_nights={int(n) for n in args.keep_nights.split(",") if n})
    summarize(results)


if __name__ == "__main__":
    main()
