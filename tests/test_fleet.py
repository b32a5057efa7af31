"""A night of a fleet: four brokers loaded, checked and maintained at the same time, each
in a process of its own, into one fresh warehouse: the tables are created in a race, then
every broker appends to each of them at once.

Every process must succeed, and every table must hold what loading and checking the same
snapshots one after another gives (read with delta-rs, an independent reader). One of the
brokers loads and checks on Spark and three in their own process (delta-rs appends, DuckDB
checks, no JVM), as a fleet of big and small brokers does; the serial oracle loads all four
on the default engine choice and checks them in process. (Two Spark applications at once
are the scheduled DAG run's, tests/test_fleet_dag.py, whose pool lets two run together.)

The brokers' decode stages must overlap, not take turns: each process meets the others at
a barrier as its decode stage begins (a file per broker; it waits until all four are
there) and records when its decode stage began and ended. Were anything to serialise the
loads up to that point (a warehouse-wide lock, a table lock), no process would get past
the barrier and the test would fail on its timeout, whatever the timing of the machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable
from lakehouse import warehouse_content

from jobs.check_job import check_snapshot
from jobs.lakehouse import tables as T
from jobs.lakehouse.spark_session import DRIVER_MEMORY_ENV
from jobs.lakehouse.tables import Registry, table_location
from jobs.load.job import load_snapshot
from jobs.maintain.maintenance import maintain_tables

pytestmark = [pytest.mark.spark, pytest.mark.broker]

FLEET = {"fleet-a": "v5-clean", "fleet-b": "v4-clean", "fleet-c": "v5-killed",
         "fleet-d": "v4-killed"}
# Where each broker decodes (jobs.load.fact_writers) and is checked (jobs.check.engines): a
# fleet mixes big brokers (Spark) and small ones (the task's own process), writing the same
# tables.
# One JVM, not two: on two cores a second one cost the suite about 5 minutes.
LOAD_ENGINE = {"fleet-a": "spark", "fleet-b": "local", "fleet-c": "local", "fleet-d": "local"}
# One night: its four loads already append to the same tables at once once the race to
# create them is over (a second night on existing tables cost the suite 4 minutes and
# added nothing; tests/test_s3_warehouse.py runs two nights of this fleet on a bucket).
NIGHTS = ("n1",)

#: Each broker process's driver heap: four JVMs of the default 4g beside the test lanes' own
#: sessions once got one OOM-killed on 24 GiB (docs/fleet.md); a load and check of these
#: stores peaks at 1.9 GiB resident with 1.5 GiB of heap.
DRIVER_MEMORY = "1536m"
BARRIER_SECONDS = 900  # the four JVMs start on two cores: generous, it is only a deadlock guard
BROKER_NIGHT = """
import json, sys, time
from pathlib import Path
from jobs.check_job import check_snapshot
from jobs.lakehouse import tables as T
from jobs.lakehouse.spark_session import SparkOnDemand, build_spark_session
from jobs.lakehouse.tables import Registry
from jobs.load import job
from jobs.load.job import LoadOptions, load_snapshot
from jobs.maintain.maintenance import maintain_tables

warehouse, broker, snapshot_id, store, barrier, brokers, seconds, engine = sys.argv[1:]
barrier, seconds = Path(barrier), float(seconds)
stage = {}
decode_into = job.SnapshotLoad.decode_into

def decode_at_the_barrier(self, table, *args, **kwargs):
    # the decode stage is messages -> queue_entries -> index_entries; it begins at the barrier
    if table == T.MESSAGES:
        stage["began"] = time.time()
        (barrier / broker).touch()
        deadline = time.monotonic() + seconds
        while len(list(barrier.iterdir())) < int(brokers):
            if time.monotonic() > deadline:
                raise SystemExit(f"{broker}: the other brokers never reached their decode stage")
            time.sleep(0.05)
    result = decode_into(self, table, *args, **kwargs)
    if table == T.INDEX_ENTRIES:
        stage["ended"] = time.time()
    return result

job.SnapshotLoad.decode_into = decode_at_the_barrier
# as the DAG's tasks: a JVM only where the engine is Spark (the load, then the check)
spark = SparkOnDemand(lambda: build_spark_session("fleet-" + broker, warehouse=Path(warehouse)))
load_snapshot(spark, broker, snapshot_id, store, LoadOptions(engine=engine),
              registry=Registry(None, warehouse))
check_snapshot(lambda: Registry(spark(), warehouse), Path(warehouse), broker, snapshot_id,
               engine=engine)
maintain_tables(warehouse, broker)
if spark.session is not None:
    stage["max_heap"] = spark.session._jvm.java.lang.Runtime.getRuntime().maxMemory()
(barrier.parent / f"{broker}.stage.json").write_text(json.dumps(stage))
print("done", broker, snapshot_id)
"""


def night_of_the_fleet(warehouse: Path, night: str, stores: dict[str, Path],
                       logs: Path) -> dict[str, dict[str, float]]:
    """All brokers' load + check + maintenance at once, one process each; returns when
    each broker's decode stage began and ended (epoch seconds)."""
    script = logs / "broker_night.py"
    script.write_text(BROKER_NIGHT)
    barrier = logs / f"barrier-{night}" / "arrived"
    barrier.mkdir(parents=True)
    running = {}
    for broker, variant in FLEET.items():
        env = {**os.environ, "RMQ_SPARK_LOG_FILE": str(logs / f"{broker}-{night}-spark.log"),
               DRIVER_MEMORY_ENV: DRIVER_MEMORY}
        out = (logs / f"{broker}-{night}.log").open("w")
        running[broker] = (subprocess.Popen(
            [sys.executable, str(script), str(warehouse), broker, night,
             str(stores[variant] / "store"), str(barrier), str(len(FLEET)),
             str(BARRIER_SECONDS), LOAD_ENGINE[broker]],
            stdout=out, stderr=subprocess.STDOUT, env=env), out)
    failed = []
    for broker, (process, out) in running.items():
        code = process.wait(timeout=1800)
        out.close()
        if code != 0:
            failed.append(f"{broker} exit {code}:\n"
                          + (logs / f"{broker}-{night}.log").read_text()[-3000:])
    assert not failed, "\n".join(failed)
    return {broker: json.loads((barrier.parent / f"{broker}.stage.json").read_text())
            for broker in FLEET}


def test_four_brokers_at_once_equal_four_brokers_one_after_another(  # type: ignore[no-untyped-def]
        spark, broker_stores, tmp_path: Path):
    fleet_warehouse, serial_warehouse = tmp_path / "fleet", tmp_path / "serial"
    for night in NIGHTS:  # a fresh warehouse: the tables are created in a race
        stages = night_of_the_fleet(fleet_warehouse, night, broker_stores, tmp_path)
        # all four were in their decode stage at once: the last to begin began before the
        # first to end had ended (no one ends before all have begun: the barrier)
        assert max(s["began"] for s in stages.values()) < \
            min(s["ended"] for s in stages.values()), stages
        # each JVM had the heap it was given (RMQ_SPARK_DRIVER_MEMORY), not the default 4g;
        # the brokers on the local engine started none
        heaps = {broker: s.get("max_heap") for broker, s in stages.items()}
        assert {b for b, heap in heaps.items() if heap} == \
            {b for b, engine in LOAD_ENGINE.items() if engine == "spark"}, stages
        assert all(heap <= 1536 << 20 for heap in heaps.values() if heap), stages

    registry = Registry(spark, serial_warehouse)
    for night in NIGHTS:
        for broker, variant in FLEET.items():
            load_snapshot(spark, broker, night, broker_stores[variant] / "store",
                          registry=registry)
            # The oracle checks in process: the fleet's Spark checks must equal it.
            check_snapshot(lambda: registry, serial_warehouse, broker, night, engine="local")
    maintain_tables(serial_warehouse, "fleet-a")

    fleet, serial = warehouse_content(fleet_warehouse), warehouse_content(serial_warehouse)
    assert {name: len(rows) for name, rows in fleet.items()} == \
        {name: len(rows) for name, rows in serial.items()}
    for name in fleet:
        # on a difference, every row of either side that the other lacks, in full
        assert fleet[name] == serial[name], (name, sorted(set(fleet[name]) - set(serial[name])),
                                             sorted(set(serial[name]) - set(fleet[name])))
    snapshots = DeltaTable(str(table_location(fleet_warehouse, T.SNAPSHOTS))).to_pyarrow_table()
    assert sorted(zip(snapshots.column("broker").to_pylist(),
                      snapshots.column("snapshot_id").to_pylist(),
                      snapshots.column("status").to_pylist(), strict=True)) == sorted(
        (broker, night, "loaded") for broker in FLEET for night in NIGHTS)
    # every broker's maintenance ran and recorded what it did
    runs = DeltaTable(str(table_location(fleet_warehouse, T.MAINTENANCE_RUNS))
                      ).to_pyarrow_table().to_pylist()
    assert {r["broker"] for r in runs} == set(FLEET)
    assert {r["table_name"] for r in runs} == set(T.TABLES)

