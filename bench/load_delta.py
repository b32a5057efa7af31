"""Spark load into Delta: the end-to-end load side by side with its floor and anchors.

One run generates (once, cached under .cache/bench/load/) a broker store per body size
(``<root>/commitlog/<20-digit offsets>``, 1 GiB segments, laid out the broker's way by
bench/commitlog_decode.py's generator, store times crossing UTC day boundaries) and the
same rows already decoded as Parquet (untimed preparation), then measures, each mode in
a fresh subprocess, interleaved, ``--repeat`` times:

  load          jobs.load.job.load_snapshot into a fresh warehouse on local[2]
  noop-rerun    in a new session on that warehouse: the same snapshot id again (skipped)
                and a new snapshot id of the unchanged store (plans nothing)
  load-local1   the load on local[1]
  floor         Spark reads the Parquet rows and appends them to a Delta table created
                from the same contract (same properties, partitioning and Spark conf)
  floor-local1  the floor on local[1]
  decode        rmqlib alone: the executors' code (scan_segment_arrow + to_messages) over
                the same split ranges, one process, one core
  delta-rs      deltalake.write_deltalake of the Parquet rows, one process
  floor@samerows, delta-rs@samerows
                the anchors write what the load writes: the ``messages`` rows and the
                night's ``message_lookup`` rows (derived once by the load's own query,
                untimed, as the decoded rows are), each into its table
  in-process    the load with ``engine="local"``: the same tasks in this process, no JVM

Experiments (not in the default set): ``pipeline-noop`` / ``pipeline-parquet`` /
``pipeline-delta`` build a decode DataFrame of the load's tasks (``mapInArrow``) and write
it to Spark's ``noop`` sink, to plain partitioned Parquet, or to the Delta table with
Spark's writer (no bookkeeping): ``pipeline-delta`` is the load's Spark path before the
executors wrote their own files (issue 36), the baseline of ``load``;
``decode-scan`` is rmqlib's scan without ``to_messages``; ``MODE@VARIANT`` runs a mode
with one of VARIANTS (Spark conf, table layout, split size, decoder patch).

Times exclude session start and table creation; CPU seconds are those of the whole
process tree (driver, JVM, Python workers) over the timed part; peak RSS is VmHWM.

Usage: python bench/load_delta.py [--size-mib 1024] [--repeat 2] [--bodies 100,1024]
Results: tables on stdout and .cache/bench/load_delta_results.json. See bench/README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

MIB = 1024 * 1024
BROKER = "bench-broker"
SNAPSHOT = "snap-1"
SPAN_MS = 36 * 3600 * 1000  # store times of a whole store span 36 h: 3 UTC dates
DEFAULT_MODES = ("load", "noop-rerun", "load-local1", "in-process", "floor", "floor-local1",
                 "decode", "delta-rs")
SPARK_MODES = ("load", "load-local1", "noop-rerun", "floor", "floor-local1", "sweep",
               "pipeline-noop", "pipeline-parquet", "pipeline-delta")

# name -> what a variant changes. conf: extra Spark conf; env: RMQ_BENCH_PATCH for
# bench/_patch/sitecustomize.py (executors' decode code); split_mib: the load's split;
# partitioned / properties: the messages table as created (from the contract otherwise).
VARIANTS: dict[str, dict] = {
    "maxwriters": {"conf": {"spark.sql.maxConcurrentOutputFileWriters": "4"}},
    "zstd": {"conf": {"spark.sql.parquet.compression.codec": "zstd"}},
    "lz4raw": {"conf": {"spark.sql.parquet.compression.codec": "lz4_raw"}},
    "uncompressed": {"conf": {"spark.sql.parquet.compression.codec": "uncompressed"}},
    "nostats": {"conf": {"spark.databricks.delta.stats.collect": "false"}},
    "allstats": {"properties": {"delta.dataSkippingStatsColumns": None}},
    "unpartitioned": {"partitioned": False},
    "split32": {"split_mib": 32},
    "split128": {"split_mib": 128},
    "split256": {"split_mib": 256},
    "maxrecords": {"conf": {"spark.sql.files.maxRecordsPerFile": "200000"}},
    "nosha": {"env": "nosha"},
    "batch4k": {"env": "batch=4096"},
    "batch64k": {"env": "batch=65536"},
    "lookupformer": {"env": "lookup-former"},
    "deltarswriter": {"env": "deltars-writer"},
    "former": {"env": "inprocess-former"},
    "dictall": {"env": "dict-all"},
    # the load as the DAG's task runs it (LoadOptions.lookup=False): message_lookup is left
    # to the DAG's lookup task, timed apart after the load (lookup_task_s, not in seconds)
    "nolookup": {"lookup": False},
    # the floor and delta-rs also write the night's message_lookup rows (prepared)
    "samerows": {"lookup_rows": True},
    # pyspark's own daemon, which re-reads Spark's archives before every Python task
    "stockdaemon": {"conf": {"spark.python.daemon.module": "pyspark.daemon"}},
    "nodict": {"conf": {"parquet.enable.dictionary": "false"}},
    # dictionary encoding off only for the columns whose values are (nearly) all distinct
    "nodict-unique": {"conf": {f"parquet.enable.dictionary#{column}": "false" for column in (
        "body", "body_sha256", "msg_id", "offset_msg_id", "keys.list.element",
        "properties.key_value.value")}},
}
SWEEP_DEFAULT = ("base,maxwriters,nodict,nodict-unique,zstd,lz4raw,uncompressed,nostats,"
                 "allstats,unpartitioned,maxrecords")


# ----------------------------------------------------------------------------- data


def dataset_dir(cache: Path, body: int, size_mib: int) -> Path:
    return cache / "load" / f"body{body}-{size_mib}mib"


def prepare_store(base: Path, body: int, size: int, segment: int) -> int:
    """The store root ``base/store`` (commitlog only); returns its record count."""
    from commitlog_decode import FastRecords, generate

    record_length = len(FastRecords(body).record(0, 0))
    step = max(1, round(SPAN_MS * record_length / size))
    return generate(base / "store" / "commitlog", body, size, min(segment, size),
                    time_step_ms=step, marker=base / "store.json")


def prepare_parquet(base: Path, split: int, expected: int) -> int:
    """The rows the load writes, decoded once by the executors' own code into Parquet
    (one snappy file per split, one row group per million rows): the floor's input."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.lakehouse.contracts import load_contract
    from jobs.load.decode_tasks import DecodeContext, run_task
    from jobs.load.plan import plan_load

    out = base / "parquet"
    marker = out / "_DONE.json"  # '_' : Spark and pyarrow datasets skip it
    wanted = {"split": split, "records": expected, "v": 1}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return expected
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    schema = load_contract("messages").arrow_schema()
    context = DecodeContext(BROKER, SNAPSHOT, str(base / "parquet-reports"), schema)
    rows = 0
    for number, task in enumerate(plan_load(base / "store", [], split_bytes=split)
                                  .commitlog_tasks):
        table = pa.Table.from_batches(list(run_task(task, context)), schema)
        pq.write_table(table, out / f"part-{number:05d}.parquet", compression="snappy")
        rows += table.num_rows
    shutil.rmtree(base / "parquet-reports", ignore_errors=True)
    assert rows == expected, (rows, expected)
    marker.write_text(json.dumps(wanted))
    return rows


def lookup_parquet_dir(parquet: Path | str) -> Path:
    """Where :func:`prepare_lookup_parquet` keeps the lookup rows, beside the ``parquet``
    rows of the same store."""
    return Path(parquet).parent / "lookup-parquet"


def lookup_writer_properties():  # type: ignore[no-untyped-def]
    """delta-rs' writer settings for ``message_lookup`` rows that match the table's own
    files (jobs.lakehouse.message_lookup): zstd, its row groups, a Bloom filter on the
    value."""
    from deltalake.writer import BloomFilterProperties, ColumnProperties, WriterProperties

    from jobs.lakehouse import message_lookup

    return WriterProperties(
        compression="ZSTD", max_row_group_size=message_lookup.ROW_GROUP_ROWS,
        column_properties={"lookup_value": ColumnProperties(
            bloom_filter_properties=BloomFilterProperties(
                set_bloom_filter_enabled=True, fpp=message_lookup.BLOOM_FPP,
                ndv=message_lookup.ROW_GROUP_ROWS))})


def prepare_lookup_parquet(base: Path, expected: int) -> Path:
    """The night's ``message_lookup`` rows, derived from the prepared ``messages`` rows by
    the load's own query (jobs.load.lookup_rows.lookup_sql: its order too) and written as
    snappy Parquet: what the ``samerows`` anchors write besides the messages rows."""
    import duckdb
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    from jobs.lakehouse.contracts import load_contract
    from jobs.load.lookup_rows import lookup_sql

    out = lookup_parquet_dir(base / "parquet")
    marker = out / "_DONE.json"
    wanted = {"messages": expected, "v": 2}
    if marker.exists() and json.loads(marker.read_text())["of"] == wanted:
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    schema = load_contract("message_lookup").arrow_schema()
    rows = 0
    with duckdb.connect() as connection:
        connection.register("messages", ds.dataset(str(base / "parquet"), format="parquet"))
        reader = connection.sql(lookup_sql(BROKER, [SNAPSHOT])).to_arrow_reader(1 << 20)
        for number, batch in enumerate(reader):  # a file a million rows: Spark's splits
            pq.write_table(pa.Table.from_batches([batch.cast(schema)]),
                           out / f"part-{number:05d}.parquet", compression="snappy")
            rows += batch.num_rows
    marker.write_text(json.dumps({"of": wanted, "rows": rows}))
    return out


def lookup_rows_of(parquet: str) -> int:
    """How many lookup rows ``prepare_lookup_parquet`` wrote beside ``parquet``."""
    return int(json.loads((lookup_parquet_dir(parquet) / "_DONE.json").read_text())["rows"])


def store_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "commitlog").iterdir())


def warm(paths: list[Path]) -> None:
    """Read files once so every mode starts with them in the page cache."""
    buffer = bytearray(16 * MIB)
    for directory in paths:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                with open(path, "rb", buffering=0) as f:
                    while f.readinto(buffer):
                        pass


# ----------------------------------------------------------------------------- measuring


def vm_hwm_mib(pid: int | str = "self") -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class TreeMonitor:
    """Samples the process tree under this process (the JVM, its Python workers):
    peak VmHWM per process and CPU seconds by kind (driver / jvm / python workers)."""

    def __init__(self, interval: float = 0.25) -> None:
        import psutil

        self.psutil = psutil
        self.me = psutil.Process()
        self.interval = interval
        self.kinds: dict[int, str] = {}
        self.hwm: dict[int, float] = {}
        self.jvm_threads: dict[int, tuple[str, float]] = {}  # tid -> (name, CPU s)
        self.ticks = os.sysconf("SC_CLK_TCK")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.own_seconds = 0.0  # this sampling thread's CPU, not the driver's

    def start(self) -> TreeMonitor:
        self.thread.start()
        return self

    def _kind(self, proc) -> str:  # type: ignore[no-untyped-def]
        if proc.pid not in self.kinds:
            name = proc.name()
            self.kinds[proc.pid] = ("jvm" if name == "java"
                                    else "worker" if name.startswith("python") else "other")
        return self.kinds[proc.pid]

    def tree(self) -> list:  # type: ignore[type-arg]
        try:
            return self.me.children(recursive=True)
        except self.psutil.Error:
            return []

    def sample(self) -> None:
        for proc in self.tree():
            try:
                kind = self._kind(proc)
            except self.psutil.Error:
                continue
            self.hwm[proc.pid] = max(self.hwm.get(proc.pid, 0.0), vm_hwm_mib(proc.pid))
            if kind == "jvm":
                self._sample_threads(proc.pid)

    def _sample_threads(self, pid: int) -> None:
        """CPU seconds per JVM thread (task threads, GC, JIT...), kept after they end."""
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            seconds = (int(fields[11]) + int(fields[12])) / self.ticks
            self.jvm_threads[int(task.name)] = (name, seconds)

    def jvm_thread_cpu(self) -> dict[str, float]:
        """JVM CPU seconds so far by thread group (names without numbers)."""
        groups: dict[str, float] = {}
        for name, seconds in self.jvm_threads.values():
            group = thread_group(name)
            groups[group] = groups.get(group, 0.0) + seconds
        return groups

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            self.sample()
            self.own_seconds = time.thread_time()

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far by kind (reaped children count for their parent's kind)."""
        totals = {"driver": 0.0, "jvm": 0.0, "worker": 0.0, "other": 0.0}
        for proc, kind in [(self.me, "driver"), *((p, None) for p in self.tree())]:
            try:
                times = proc.cpu_times()
                kind = kind or self._kind(proc)
            except self.psutil.Error:
                continue
            totals[kind] += times.user + times.system + times.children_user + \
                times.children_system
        totals["driver"] -= self.own_seconds
        return totals

    def finish(self) -> dict[str, float]:
        self.sample()
        self.stop.set()
        workers = [v for pid, v in self.hwm.items() if self.kinds.get(pid) == "worker"]
        return {"driver_mib": vm_hwm_mib(),
                "jvm_mib": max((v for pid, v in self.hwm.items()
                                if self.kinds.get(pid) == "jvm"), default=0.0),
                "worker_mib": max(workers, default=0.0), "workers": len(workers)}


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before.get(k, 0.0), 2) for k in after}


def thread_group(name: str) -> str:
    """A JVM thread's group from its (15-character) Linux name."""
    for prefix, group in (("Executor task", "tasks"), ("C2 Compiler", "jit"),
                          ("C1 Compiler", "jit"), ("GC Thread", "gc"), ("G1 ", "gc"),
                          ("VM Thread", "gc")):
        if name.startswith(prefix):
            return group
    return "other"


def event_log_stages(directory: Path, since_ms: float, until_ms: float) -> list[dict]:
    """Stages submitted in [since, until] from Spark's event log: tasks, wall seconds,
    summed task run / JVM CPU / GC seconds, spill and output (the write's stage)."""
    stages: dict[tuple[str, int], dict] = {}
    # Spark 4 writes rolling logs: a directory per application, events_<n>_<app> files.
    files = sorted(p for p in directory.rglob("*") if p.is_file() and "events" in p.name)
    for path in files:
        app = path.parent.name
        for line in path.read_text().splitlines():
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                submitted = info.get("Submission Time", 0)
                stage = stages.setdefault((app, info["Stage ID"]), {})
                stage.update(id=info["Stage ID"], name=info["Stage Name"].split(" at ")[0],
                             tasks=info["Number of Tasks"], submitted=submitted,
                             seconds=(info.get("Completion Time", submitted) - submitted) / 1e3)
            elif kind == "SparkListenerTaskEnd":
                metrics = event.get("Task Metrics") or {}
                stage = stages.setdefault((app, event["Stage ID"]), {})
                out = metrics.get("Output Metrics") or {}
                for key, value in (
                        ("run_s", metrics.get("Executor Run Time", 0) / 1e3),
                        ("jvm_cpu_s", metrics.get("Executor CPU Time", 0) / 1e9),
                        ("gc_s", metrics.get("JVM GC Time", 0) / 1e3),
                        ("spill_mib", (metrics.get("Memory Bytes Spilled", 0)
                                       + metrics.get("Disk Bytes Spilled", 0)) / MIB),
                        ("written_mib", out.get("Bytes Written", 0) / MIB),
                        ("records_written", out.get("Records Written", 0))):
                    stage[key] = stage.get(key, 0) + value
                peak = metrics.get("Peak Execution Memory", 0) / MIB
                stage["peak_exec_mib"] = max(stage.get("peak_exec_mib", 0), peak)
    result = [s for s in stages.values()
              if "tasks" in s and since_ms - 1 <= s["submitted"] <= until_ms + 1]
    for stage in result:
        for key in ("run_s", "jvm_cpu_s", "gc_s", "spill_mib", "written_mib", "peak_exec_mib"):
            stage[key] = round(stage.get(key, 0), 2)
    return sorted(result, key=lambda s: s["submitted"])


def delta_files(location: str) -> dict[str, object]:
    """Data files of a Delta table: count, MiB, partitions, codec (from the names)."""
    from deltalake import DeltaTable

    actions = DeltaTable(location).get_add_actions(flatten=True)
    columns = actions.column_names
    sizes = actions.column("size_bytes").to_pylist()
    paths = actions.column("path").to_pylist()
    parts = {tuple(actions.column(c)[i].as_py() for c in columns
                   if c.startswith("partition.")) for i in range(len(paths))}
    codecs = sorted({p.rsplit("/", 1)[-1].split(".")[-2] if p.count(".") > 1 else "?"
                     for p in paths})
    stats = sorted(c.split(".", 1)[1] for c in columns if c.startswith("min."))
    return {"files": len(paths), "mib": round(sum(sizes) / MIB, 1),
            "mean_file_mib": round(sum(sizes) / MIB / max(len(paths), 1), 1),
            "partitions": len(parts), "codec": ",".join(codecs), "min_max_stats": stats}


# ----------------------------------------------------------------------------- Spark modes


def split_variant(mode: str) -> tuple[str, dict]:
    """``MODE@A+B``: the mode with variants A and B (their settings merged)."""
    base, _, names = mode.partition("@")
    merged: dict = {}
    for name in filter(None, names.split("+")):
        for key, value in VARIANTS[name].items():
            if key in merged and isinstance(value, dict):
                value = {**merged[key], **value}
            elif key in merged and key == "env":  # RMQ_BENCH_PATCH takes a list
                value = f"{merged[key]},{value}"
            merged[key] = value
    return base, merged


def create_messages_table(spark, name: str, location: str, variant: dict) -> None:  # type: ignore[no-untyped-def]
    """The messages table from its contract, with a variant's layout changes."""
    from jobs.lakehouse.contracts import load_contract

    contract = load_contract("messages")
    if variant.get("partitioned") is False:
        contract = dataclasses.replace(contract, columns=tuple(
            dataclasses.replace(c, partition_position=None) for c in contract.columns))
    if "properties" in variant:
        properties = {**contract.table_properties, **variant["properties"]}
        contract = dataclasses.replace(contract, table_properties={
            k: v for k, v in properties.items() if v is not None})
    spark.sql(contract.create_table_sql(name, location))


def spark_child(mode: str, args: argparse.Namespace) -> dict[str, object]:
    from jobs.lakehouse.spark_session import build_spark_session

    base, variant = split_variant(mode)
    work = Path(args.work)
    events = work / f"eventlog-{base}"
    events.mkdir(parents=True, exist_ok=True)
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file://{events}",
            "spark.eventLog.compress": "false", **variant.get("conf", {})}
    monitor = TreeMonitor()
    spark = build_spark_session(f"bench-{mode}", master="local[1]" if "local1" in base
                                else "local[2]", warehouse=work / "warehouse",
                                extra_conf=conf)
    monitor.start()
    result: dict[str, object] = {"mode": mode, "master": spark.sparkContext.master}
    try:
        runner = {"load": _load, "load-local1": _load, "noop-rerun": _noop_rerun,
                  "floor": _floor, "floor-local1": _floor, "sweep": _sweep,
                  }.get(base, _pipeline)
        result.update(runner(spark, base, variant, work, args, monitor))
    finally:
        spark.stop()
    result["memory"] = monitor.finish()
    result["stages"] = event_log_stages(events, result.pop("since_ms", 0),
                                        result.pop("until_ms", 1e18))
    for run in result.get("sweep", []):
        run["stages"] = [s for s in event_log_stages(events, run.pop("since_ms"),
                                                     run.pop("until_ms"))
                         if s.get("written_mib")]
    return result


def _timed(monitor: TreeMonitor, work) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Run ``work()`` timing wall clock and the tree's CPU."""
    monitor.sample()
    before, threads = monitor.cpu(), monitor.jvm_thread_cpu()
    since = time.time() * 1e3
    started = time.perf_counter()
    value = work()
    seconds = time.perf_counter() - started
    cpu = cpu_delta(before, monitor.cpu())
    monitor.sample()
    return {"seconds": seconds, "cpu": cpu, "since_ms": since, "until_ms": time.time() * 1e3,
            "jvm_threads": cpu_delta(threads, monitor.jvm_thread_cpu()), "value": value}


def _load(spark, base, variant, work, args, monitor):  # type: ignore[no-untyped-def]
    from jobs.lakehouse import tables as T
    from jobs.lakehouse.tables import Registry
    from jobs.load.job import LoadOptions, load_snapshot

    warehouse = work / "warehouse"
    clock = time.perf_counter()
    registry = Registry(spark, warehouse)
    if variant.get("partitioned") is False or "properties" in variant:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {T.DATABASE}")
        create_messages_table(spark, f"{T.DATABASE}.{T.MESSAGES}",
                              registry[T.MESSAGES].location, variant)
    registry.ensure(names=False)
    create_seconds = time.perf_counter() - clock
    split = variant.get("split_mib", args.split_mib) * MIB
    messages: list[str] = []
    clock = time.perf_counter()

    def progress(message: str) -> None:
        messages.append(f"{time.perf_counter() - clock:6.2f}s {message}")

    lookup = variant.get("lookup", True)
    timed = _timed(monitor, lambda: load_snapshot(
        spark, BROKER, SNAPSHOT, args.store,
        LoadOptions(split_bytes=split, engine="spark", lookup=lookup),
        registry=registry, progress=progress))
    summary = timed.pop("value")
    table = summary.results[T.MESSAGES]
    return {**timed, **({} if lookup else lookup_task(registry, monitor)),
            "create_tables_s": round(create_seconds, 2),
            "records": table.rows, "bytes": table.bytes_read,
            "messages_s": round(table.seconds, 2), "planned_tasks": table.tasks,
            "table_seconds": {name: round(r.seconds, 2) for name, r in summary.results.items()},
            "progress": messages,
            "spark_tasks": next((m for m in messages if "Spark task" in m), ""),
            "files": delta_files(registry[T.MESSAGES].location)}


def lookup_task(registry, monitor: TreeMonitor) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """The DAG's lookup task after a load without it (jobs.pipeline.lookup_broker's work),
    timed apart: its seconds and CPU are not the load's."""
    from jobs.load.lookup_rows import write_lookup_rows

    timed = _timed(monitor, lambda: write_lookup_rows(registry, BROKER, 1))
    assert timed["value"].rows > 0
    return {"lookup_task_s": round(timed["seconds"], 2),
            "lookup_task_cpu_s": round(sum(timed["cpu"].values()), 2)}


def _noop_rerun(spark, base, variant, work, args, monitor):  # type: ignore[no-untyped-def]
    from jobs.lakehouse import tables as T
    from jobs.lakehouse.tables import Registry
    from jobs.load.job import LoadOptions, load_snapshot

    registry = Registry(spark, work / "warehouse").ensure(names=False)
    on_spark = LoadOptions(engine="spark")  # this bench measures the Spark load
    same = _timed(monitor, lambda: load_snapshot(spark, BROKER, SNAPSHOT, args.store, on_spark,
                                                 registry=registry))
    messages: list[str] = []
    clock = time.perf_counter()
    fresh = _timed(monitor, lambda: load_snapshot(
        spark, BROKER, "snap-2", args.store, on_spark, registry=registry,
        progress=lambda m: messages.append(f"{time.perf_counter() - clock:6.2f}s {m}")))
    assert same["value"].skipped, "the same snapshot id was not skipped"
    new_rows = fresh["value"].results.get(T.MESSAGES)
    assert new_rows is not None and new_rows.rows == 0, new_rows
    return {"seconds": same["seconds"], "new_snapshot_s": fresh["seconds"],
            "cpu": same["cpu"], "new_snapshot_cpu": fresh["cpu"], "records": 0, "bytes": 0,
            "new_snapshot_progress": messages,
            "new_snapshot_tables": {n: round(r.seconds, 2)
                                    for n, r in fresh["value"].results.items()},
            "small_ops": _small_ops(spark, registry),
            "since_ms": same["since_ms"], "until_ms": fresh["until_ms"]}


def _small_ops(spark, registry) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """What the bookkeeping of a load costs per operation, in a warm session: the drift
    check (Spark reads 12 table schemas) vs reading the schemas with delta-rs, and a
    one-row append to load_runs with Spark vs with delta-rs (medians of 3)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from jobs.lakehouse import tables as T

    def median_time(work) -> float:  # type: ignore[no-untyped-def]
        times = []
        for _ in range(3):
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
        return round(statistics.median(times), 3)

    table = registry[T.LOAD_RUNS]
    row = registry.read_rows(T.LOAD_RUNS)[0]
    result: dict[str, object] = {
        "drift_check_spark_s": median_time(registry.check_drift),
        "schemas_deltars_s": median_time(lambda: [DeltaTable(t.location).schema()
                                                  for t in registry.tables.values()]),
        "append_1_row_spark_s": median_time(lambda: spark.createDataFrame(
            [tuple(row.values())], table.contract.spark_schema()).write.format("delta")
            .mode("append").save(table.location)),
    }
    try:
        result["append_1_row_deltars_s"] = median_time(lambda: write_deltalake(
            table.location, pa.Table.from_pylist([row], table.contract.arrow_schema()),
            mode="append"))
    except Exception as error:  # reported, not fatal
        result["append_1_row_deltars_error"] = f"{type(error).__name__}: {error}"[:300]
    return result


def append_once(df, location: str, app_id: str, version: int) -> None:  # type: ignore[no-untyped-def]
    """Spark's own Delta append, idempotent by Delta's ``txnAppId``/``txnVersion``: the
    writer the floor measures (the jobs commit with delta-rs only)."""
    (df.write.format("delta").mode("append")
     .option("txnAppId", app_id).option("txnVersion", version)
     .save(location))


def _floor(spark, base, variant, work, args, monitor):  # type: ignore[no-untyped-def]
    from jobs.lakehouse import message_lookup
    from jobs.lakehouse.contracts import load_contract

    location = str(work / "floor" / "messages")
    lookup = str(work / "floor" / "message_lookup")
    clock = time.perf_counter()
    create_messages_table(spark, "default.floor_messages", location, variant)
    if variant.get("lookup_rows"):
        spark.sql(load_contract("message_lookup").create_table_sql("default.floor_lookup",
                                                                   lookup))
    create_seconds = time.perf_counter() - clock

    def write() -> None:
        append_once(spark.read.parquet(str(args.parquet)), location, "bench-floor", 1)
        if variant.get("lookup_rows"):  # the table's zstd and Bloom filter, as the load
            (spark.read.parquet(str(lookup_parquet_dir(args.parquet)))
             .write.format("delta").mode("append")
             .option("compression", "zstd")
             .option("parquet.bloom.filter.enabled#lookup_value", "true")
             .option("parquet.bloom.filter.expected.ndv#lookup_value",
                     str(message_lookup.ROW_GROUP_ROWS))
             .option("parquet.bloom.filter.fpp#lookup_value", str(message_lookup.BLOOM_FPP))
             .save(lookup))

    timed = _timed(monitor, write)
    timed.pop("value")
    rows = spark.read.format("delta").load(location).count()
    result = {**timed, "create_tables_s": round(create_seconds, 2), "records": rows,
              "bytes": args.bytes, "files": delta_files(location)}
    if variant.get("lookup_rows"):
        result["lookup_records"] = spark.read.format("delta").load(lookup).count()
        assert result["lookup_records"] == lookup_rows_of(args.parquet)
    return result


def _sweep(spark, base, variant, work, args, monitor):  # type: ignore[no-untyped-def]
    """Write-side variants of the floor in one warm session, interleaved: each run
    creates its table (variant layout), sets the variant's SQL conf, appends the Parquet
    rows, unsets the conf. Two untimed runs warm the JVM up; each round starts one
    variant later (rotation), so no variant always runs first or right after another."""
    names = args.sweep.split(",")
    order = ["warm-up", "warm-up"]
    for round_number in range(args.sweep_repeat):
        shift = round_number % len(names)
        order += names[shift:] + names[:shift]
    runs = []
    for number, name in enumerate(order):
        spec = {} if name in ("base", "warm-up") else VARIANTS[name]
        if "env" in spec or "split_mib" in spec:
            raise SystemExit(f"variant {name} is not a write-side variant")
        location = str(work / "sweep" / f"t{number}")
        table = f"default.sweep_{number}"
        create_messages_table(spark, table, location, spec)
        for key, value in spec.get("conf", {}).items():
            spark.conf.set(key, value)
        try:
            timed = _timed(monitor, lambda loc=location: append_once(
                spark.read.parquet(str(args.parquet)), loc, "bench-sweep", 1))
        finally:
            for key in spec.get("conf", {}):
                spark.conf.unset(key)
        timed.pop("value")
        files = delta_files(location)
        spark.sql(f"DROP TABLE {table}")
        shutil.rmtree(location, ignore_errors=True)
        if name != "warm-up":
            runs.append({"variant": name, **timed, "files": files})
            print(f"sweep {name:14s} {timed['seconds']:6.2f}s {files['mib']:7.1f} MiB",
                  file=sys.stderr, flush=True)
    return {"seconds": 0.0, "cpu": {}, "records": args.records, "bytes": args.bytes,
            "sweep": runs}


def _pipeline(spark, base, variant, work, args, monitor):  # type: ignore[no-untyped-def]
    """The load's decode DataFrame (same tasks, same mapInArrow) into one sink."""
    from jobs.lakehouse.contracts import load_contract
    from jobs.load.decode_tasks import TASK_DDL, DecodeContext, decode_function
    from jobs.load.fact_writers import pack_tasks
    from jobs.load.plan import plan_load

    contract = load_contract("messages")
    location = str(work / "pipeline" / "messages")
    if base == "pipeline-delta":
        create_messages_table(spark, "default.pipeline_messages", location, variant)
    split = variant.get("split_mib", args.split_mib) * MIB

    def write() -> None:
        tasks = plan_load(args.store, [], split_bytes=split).commitlog_tasks
        groups = pack_tasks(tasks, split, spark.sparkContext.defaultParallelism)
        rdd = spark.sparkContext.parallelize([[t.as_row() for t in g] for g in groups],
                                             len(groups))
        context = DecodeContext(BROKER, SNAPSHOT, str(work / "reports"),
                                contract.arrow_schema())
        df = spark.createDataFrame(rdd.flatMap(lambda group: group), TASK_DDL).mapInArrow(
            decode_function(context), contract.spark_schema())
        if base == "pipeline-noop":
            df.write.format("noop").mode("overwrite").save()
        elif base == "pipeline-parquet":
            df.write.partitionBy(*contract.partition_columns).mode("overwrite").parquet(
                location)
        elif base == "pipeline-delta":
            append_once(df, location, "bench-pipeline", 1)
        else:
            raise ValueError(base)

    timed = _timed(monitor, write)
    timed.pop("value")
    extra = {"files": delta_files(location)} if base == "pipeline-delta" else {}
    return {**timed, "records": args.records, "bytes": args.bytes, **extra}


# ----------------------------------------------------------------------------- other modes


def decode_child(mode: str, args: argparse.Namespace) -> dict[str, object]:
    """rmqlib alone on one core: exactly what an executor runs per task (scan +
    to_messages + report), or only the scan (``decode-scan``)."""
    import resource

    from jobs.lakehouse.contracts import load_contract
    from jobs.load.decode_tasks import DecodeContext, run_task
    from jobs.load.plan import plan_load
    from rmqlib.commitlog.arrow import scan_segment_arrow

    base, variant = split_variant(mode)
    if variant.get("env"):
        sys.path.insert(0, str(ROOT / "bench" / "_patch"))
        import sitecustomize  # noqa: F401  (applies RMQ_BENCH_PATCH)
    split = variant.get("split_mib", args.split_mib) * MIB
    context = DecodeContext(BROKER, SNAPSHOT, str(Path(args.work) / "reports"),
                            load_contract("messages").arrow_schema())
    records = 0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    tasks = plan_load(args.store, [], split_bytes=split).commitlog_tasks
    for task in tasks:
        if base == "decode-scan":
            for batch in scan_segment_arrow(task.path, task.begin, task.end):
                records += batch.num_rows
        else:
            for batch in run_task(task, context):
                records += batch.num_rows
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    return {"mode": mode, "seconds": seconds, "records": records, "bytes": args.bytes,
            "cpu": {"driver": round(cpu, 2)}, "planned_tasks": len(tasks),
            "memory": {"driver_mib": vm_hwm_mib()}}


def deltars_child(mode: str, args: argparse.Namespace) -> dict[str, object]:
    """delta-rs writes the Parquet rows as Delta, one process: same partitioning, same
    table properties, snappy like Spark."""
    import resource

    import pyarrow.dataset as ds
    from deltalake import WriterProperties, write_deltalake

    from jobs.lakehouse.contracts import load_contract

    _, variant = split_variant(mode)
    contract = load_contract("messages")
    location = str(Path(args.work) / "deltars" / "messages")
    lookup_contract = load_contract("message_lookup")
    lookup = str(Path(args.work) / "deltars" / "message_lookup")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    source = ds.dataset(str(args.parquet), format="parquet", schema=contract.arrow_schema())
    write_deltalake(location, source.scanner(batch_size=65536).to_reader(),
                    partition_by=contract.partition_columns, mode="append",
                    configuration=contract.table_properties,
                    writer_properties=WriterProperties(compression="SNAPPY"))
    if variant.get("lookup_rows"):  # the table's zstd, row groups and Bloom filter
        rows = ds.dataset(str(lookup_parquet_dir(args.parquet)), format="parquet",
                          schema=lookup_contract.arrow_schema())
        write_deltalake(lookup, rows.scanner(batch_size=65536).to_reader(),
                        partition_by=lookup_contract.partition_columns, mode="append",
                        configuration=lookup_contract.table_properties,
                        writer_properties=lookup_writer_properties())
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    from jobs.lakehouse.driver_rows import arrow_dataset

    rows = arrow_dataset(location).count_rows()
    result = {"mode": mode, "seconds": seconds, "records": rows, "bytes": args.bytes,
              "cpu": {"driver": round(cpu, 2)}, "memory": {"driver_mib": vm_hwm_mib()},
              "files": delta_files(location)}
    if variant.get("lookup_rows"):
        result["lookup_records"] = arrow_dataset(lookup).count_rows()
        assert result["lookup_records"] == lookup_rows_of(args.parquet)
    return result


def in_process_child(mode: str, args: argparse.Namespace) -> dict[str, object]:
    """The load as ``python -m jobs load --engine local`` runs it: no JVM (the tables are
    created by delta-rs), the decode tasks and the writes in this process."""
    from jobs.lakehouse import tables as T
    from jobs.lakehouse.spark_session import SparkOnDemand
    from jobs.lakehouse.tables import Registry
    from jobs.load.job import LoadOptions, load_snapshot

    _, variant = split_variant(mode)
    if variant.get("env"):
        sys.path.insert(0, str(ROOT / "bench" / "_patch"))
        import sitecustomize  # noqa: F401  (applies RMQ_BENCH_PATCH)

    def no_spark():  # type: ignore[no-untyped-def]
        raise AssertionError("the in-process load started Spark")

    registry = Registry(None, Path(args.work) / "warehouse")
    monitor = TreeMonitor().start()
    lookup = variant.get("lookup", True)
    timed = _timed(monitor, lambda: load_snapshot(
        SparkOnDemand(no_spark), BROKER, SNAPSHOT, args.store,
        LoadOptions(split_bytes=args.split_mib * MIB, engine="local", lookup=lookup),
        registry=registry))
    summary = timed.pop("value")
    for key in ("since_ms", "until_ms", "jvm_threads"):
        timed.pop(key, None)
    table = summary.results[T.MESSAGES]
    return {"mode": mode, **timed, **({} if lookup else lookup_task(registry, monitor)),
            "records": table.rows, "bytes": table.bytes_read,
            "messages_s": round(table.seconds, 2),
            "table_seconds": {name: round(r.seconds, 2) for name, r in summary.results.items()},
            "memory": monitor.finish(), "files": delta_files(registry[T.MESSAGES].location)}


def child_main(args: argparse.Namespace) -> dict[str, object]:
    base, _ = split_variant(args.child)
    if base in SPARK_MODES:
        return spark_child(args.child, args)
    if base.startswith("decode"):
        return decode_child(args.child, args)
    if base == "delta-rs":
        return deltars_child(args.child, args)
    if base == "in-process":
        return in_process_child(args.child, args)
    raise ValueError(args.child)


# ----------------------------------------------------------------------------- parent


def run_child(mode: str, work: Path, data: dict, args: argparse.Namespace) -> dict:
    """One mode in a fresh interpreter; its JSON result plus the load average."""
    _, variant = split_variant(mode)
    env = dict(os.environ)
    if variant.get("env"):
        env["RMQ_BENCH_PATCH"] = variant["env"]
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "bench" / "_patch"), str(ROOT), env.get("PYTHONPATH", "")])
    command = [sys.executable, __file__, "--child", mode, "--work", str(work),
               "--store", str(data["store"]), "--parquet", str(data["parquet"]),
               "--bytes", str(data["bytes"]), "--records", str(data["records"]),
               "--split-mib", str(args.split_mib), "--sweep", args.sweep,
               "--sweep-repeat", str(args.sweep_repeat)]
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    if out.returncode:
        sys.stderr.write(out.stderr[-4000:])
        raise SystemExit(f"mode {mode} failed ({out.returncode})")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = round(time.perf_counter() - started, 1)
    result["loadavg"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return result


def measure(data: dict, modes: list[str], repeat: int, args: argparse.Namespace,
            scratch: Path) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {mode: [] for mode in modes}
    for round_number in range(repeat):
        load_work: Path | None = None
        for mode in modes:
            base, _ = split_variant(mode)
            if base == "noop-rerun":
                if load_work is None:
                    raise SystemExit("noop-rerun needs a 'load' mode before it")
                work = load_work
            else:
                work = scratch / f"{mode.replace('@', '_')}-{round_number}"
                shutil.rmtree(work, ignore_errors=True)
            result = run_child(mode, work, data, args)
            expected = 0 if base == "noop-rerun" else data["records"]
            assert result["records"] == expected, (mode, result["records"], expected)
            if base == "sweep":
                print_sweep(result["sweep"], data)
            runs[mode].append(result)
            print(f"  [{round_number + 1}/{repeat}] {mode:24s} {result['seconds']:7.2f}s  "
                  f"(process {result['process_s']}s, load avg {result['loadavg']})",
                  flush=True)
            if base == "load" and mode == "load":
                if load_work is not None:
                    shutil.rmtree(load_work, ignore_errors=True)
                load_work = work
            elif base != "noop-rerun":
                shutil.rmtree(work, ignore_errors=True)
        if load_work is not None:
            shutil.rmtree(load_work, ignore_errors=True)
    return runs


def best_of(results: list[dict]) -> dict:
    best = dict(min(results, key=lambda r: r["seconds"]))
    best["all_seconds"] = [round(r["seconds"], 2) for r in results]
    best["median_s"] = statistics.median(r["seconds"] for r in results)
    for key in ("driver_mib", "jvm_mib", "worker_mib"):
        best.setdefault("memory", {})[key] = max(r.get("memory", {}).get(key, 0)
                                                 for r in results)
    return best


def summarize(data: dict, runs: dict[str, list[dict]]) -> dict[str, dict]:
    table = {mode: best_of(results) for mode, results in runs.items()
             if results and mode != "sweep"}
    gb = data["bytes"] / 1e9
    for row in table.values():
        row["mb_per_s"] = data["bytes"] / row["seconds"] / 1e6
        row["records_per_s"] = data["records"] / row["seconds"]
        row["cpu_s"] = round(sum(row["cpu"].values()), 2)
        row["cpu_s_per_gb"] = round(row["cpu_s"] / gb, 1)
    floor = table.get("floor")
    for row in table.values():
        row["ratio_to_floor"] = floor["seconds"] / row["seconds"] if floor else None
    return table


def print_sweep(runs: list[dict], data: dict) -> None:
    """Per variant: best seconds, MB/s, ratio to the base write, CPU, file MiB."""
    by_name: dict[str, list[dict]] = {}
    for run in runs:
        by_name.setdefault(run["variant"], []).append(run)
    base = min(r["seconds"] for r in by_name.get("base", runs))
    base_cpu = min(sum(r["cpu"].values()) for r in by_name.get("base", runs))
    print(f"  {'variant':15s} {'best s':>7s} {'all s':>16s} {'MB/s':>6s} {'x base':>6s} "
          f"{'CPU s':>6s} {'x base':>6s} {'MiB':>7s} {'files':>5s} peak-exec spill")
    for name, items in by_name.items():
        best = min(items, key=lambda r: r["seconds"])
        cpu = min(sum(r["cpu"].values()) for r in items)
        stage = max(best["stages"], key=lambda s: s["written_mib"], default={})
        every = "/".join(f"{r['seconds']:.1f}" for r in items)
        print(f"  {name:15s} {best['seconds']:7.2f} {every:>16s} "
              f"{data['bytes'] / best['seconds'] / 1e6:6.1f} {base / best['seconds']:6.2f} "
              f"{cpu:6.1f} {cpu / base_cpu:6.2f} {best['files']['mib']:7.1f} "
              f"{best['files']['files']:5d} {stage.get('peak_exec_mib', 0):6.0f} "
              f"{stage.get('spill_mib', 0):5.0f}", flush=True)


def print_table(title: str, data: dict, table: dict[str, dict]) -> None:
    print(f"\n{title}: {data['records']:,} records, {data['bytes'] / MIB:,.0f} MiB commitlog")
    print(f"{'mode':24s} {'best s':>7s} {'median':>7s} {'MB/s':>6s} {'records/s':>10s} "
          f"{'x floor':>7s} {'drv MiB':>7s} {'JVM MiB':>7s} {'wrk MiB':>7s} {'CPU-s/GB':>8s} "
          f"{'CPU drv/jvm/wrk':>16s}")
    for mode, row in table.items():
        if mode == "noop-rerun":
            continue
        memory, cpu = row["memory"], row["cpu"]
        ratio = f"{row['ratio_to_floor']:.2f}" if row["ratio_to_floor"] else ""
        split = (f"{cpu.get('driver', 0):.0f}/{cpu.get('jvm', 0):.0f}/"
                 f"{cpu.get('worker', 0):.0f}")
        print(f"{mode:24s} {row['seconds']:7.2f} {row['median_s']:7.2f} "
              f"{row['mb_per_s']:6.1f} {row['records_per_s']:10,.0f} {ratio:>7s} "
              f"{memory.get('driver_mib', 0):7.0f} {memory.get('jvm_mib', 0):7.0f} "
              f"{memory.get('worker_mib', 0):7.0f} {row['cpu_s_per_gb']:8.1f} {split:>16s}")
    for mode, row in table.items():
        if row.get("jvm_threads"):
            groups = ", ".join(f"{k} {v:.1f}" for k, v in sorted(row["jvm_threads"].items()))
            print(f"  {mode:22s} JVM CPU s by thread: {groups}")
        for stage in row.get("stages", []):
            if stage.get("tasks", 0) > 1 or stage.get("written_mib"):
                print(f"  {mode:22s} stage {stage['id']:3d} {stage['name'][:28]:28s} "
                      f"tasks {stage['tasks']:3d} {stage['seconds']:6.1f}s run "
                      f"{stage['run_s']:6.1f}s jvm-cpu {stage['jvm_cpu_s']:6.1f}s gc "
                      f"{stage['gc_s']:4.1f}s peak-exec {stage['peak_exec_mib']:6.0f} MiB "
                      f"spill {stage['spill_mib']:5.0f} MiB written {stage['written_mib']:6.0f}"
                      " MiB")
        if row.get("files"):
            print(f"  {mode:22s} files {row['files']}")
        if row.get("spark_tasks"):
            print(f"  {mode:22s} {row['spark_tasks']}")
        if "lookup_task_s" in row:
            print(f"  {mode:22s} then the DAG's lookup task: {row['lookup_task_s']:.2f}s, "
                  f"{row['lookup_task_cpu_s']:.1f} CPU-s")
    if "noop-rerun" in table:
        rerun = table["noop-rerun"]
        full = table.get("load", {}).get("seconds")
        share = f" = {rerun['seconds'] / full:.1%} / {rerun['new_snapshot_s'] / full:.1%} " \
                "of the full load" if full else ""
        print(f"noop re-run: same snapshot id {rerun['seconds']:.2f}s, new snapshot id of "
              f"the unchanged store {rerun['new_snapshot_s']:.2f}s{share}")
        print(f"  new snapshot, per table: {rerun.get('new_snapshot_tables')}")
        print(f"  small operations (warm session): {rerun.get('small_ops')}")
    if "load" in table and "load-local1" in table:
        print(f"local[2] / local[1] speed-up: "
              f"{table['load-local1']['seconds'] / table['load']['seconds']:.2f}x (load)", end="")
        if "floor" in table and "floor-local1" in table:
            print(f", {table['floor-local1']['seconds'] / table['floor']['seconds']:.2f}x "
                  "(floor)", end="")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--segment-mib", type=int, default=1024)
    parser.add_argument("--split-mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--bodies", default="100,1024")
    parser.add_argument("--modes", default=",".join(DEFAULT_MODES),
                        help=f"comma-separated; MODE@VARIANT with VARIANT in "
                             f"{', '.join(VARIANTS)}")
    parser.add_argument("--cache", default=str(ROOT / ".cache" / "bench"))
    parser.add_argument("--results", default=None, help="JSON results file")
    # child-only arguments
    parser.add_argument("--child")
    parser.add_argument("--work")
    parser.add_argument("--store")
    parser.add_argument("--parquet")
    parser.add_argument("--bytes", type=int)
    parser.add_argument("--records", type=int)
    parser.add_argument("--sweep", default=SWEEP_DEFAULT,
                        help="variants the 'sweep' mode writes in one session")
    parser.add_argument("--sweep-repeat", type=int, default=2)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child_main(args), default=str))
        return
    modes = [m for m in args.modes.split(",") if m]
    for mode in modes:
        split_variant(mode)  # unknown variants fail before any work
    cache = Path(args.cache)
    scratch = cache / "load" / "runs"
    results: dict[str, object] = {"args": vars(args), "started": time.ctime(),
                                  "loadavg_start": os.getloadavg()}
    for body in (int(b) for b in args.bodies.split(",")):
        base = dataset_dir(cache, body, args.size_mib)
        started = time.perf_counter()
        records = prepare_store(base, body, args.size_mib * MIB, args.segment_mib * MIB)
        prepare_parquet(base, args.split_mib * MIB, records)
        if any(split_variant(mode)[1].get("lookup_rows") for mode in modes):
            prepare_lookup_parquet(base, records)
        data = {"store": base / "store", "parquet": base / "parquet", "records": records,
                "bytes": store_bytes(base / "store")}
        warm([base / "store", base / "parquet"])
        print(f"data: {body}-byte bodies, {records:,} records, {args.size_mib} MiB commitlog "
              f"({time.perf_counter() - started:.0f}s to prepare or find); split "
              f"{args.split_mib} MiB; load average {os.getloadavg()}", flush=True)
        runs = measure(data, modes, args.repeat, args, scratch)
        table = summarize(data, runs)
        print_table(f"{body}-byte bodies", data, table)
        results[f"body{body}"] = {"records": records, "bytes": data["bytes"], "best": table,
                                  "runs": runs}
    results["loadavg_end"] = os.getloadavg()
    target = Path(args.results) if args.results else cache / "load_delta_results.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results, indent=1, default=str))
    print(f"\nresults: {target}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
