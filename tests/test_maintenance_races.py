"""Maintenance racing loads and checks (issue 39): what ``time_travel_days`` guards.

A reader (a check's views, a query, a load reading the previous night's marks) lists a
table's files once, at the version it opened, and reads them afterwards. A VACUUM that
deletes the files a compaction just replaced, with no time travel kept, deletes files such a
reader still has to read: shown here on a real night's ``messages``, it fails on a vanished
file. So the config refuses ``time_travel_days`` below one day, saying why; at one day,
long loads and checks of two brokers and a maintenance looping over every table, each in a
process of its own, all succeed, and every table holds what the same loads and checks give
one after another.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lakehouse import warehouse_content
from pipeline_nights import _no_spark as no_spark

from jobs.check_job import check_snapshot
from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import arrow_dataset
from jobs.lakehouse.spark_session import SparkOnDemand
from jobs.lakehouse.tables import Registry, table_location
from jobs.load.job import LoadOptions, load_snapshot
from jobs.maintain.maintenance import POLICIES, _maintain_table, maintain_tables
from jobs.pipeline_config import PipelineConfigError, load_config

pytestmark = [pytest.mark.broker]

REPO = Path(__file__).resolve().parent.parent
NIGHTS = ("s1", "s2", "s3")


def load(warehouse: Path, broker: str, night: str, store: Path) -> None:
    load_snapshot(SparkOnDemand(no_spark), broker, night, store,  # type: ignore[arg-type]
                  LoadOptions(engine="local"), registry=Registry(None, warehouse))


def load_and_check(warehouse: Path, broker: str, night: str, store: Path) -> None:
    load(warehouse, broker, night, store)
    check_snapshot(no_spark, warehouse, broker, night, engine="local",  # type: ignore[arg-type]
                   output=warehouse.parent / f"checks-{broker}")


@pytest.fixture(scope="module")
def three_nights(growing_store, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """A warehouse of the growing store's three nights (messages: several files per date
    partition, for the compaction to merge)."""
    warehouse = tmp_path_factory.mktemp("three-nights")
    for night in NIGHTS:
        load(warehouse, "b", night, growing_store / "snapshots" / night / "store")
    return warehouse


@pytest.mark.parametrize("days", [0, 1])
def test_a_vacuum_without_time_travel_deletes_files_a_running_reader_still_reads(
        three_nights: Path, tmp_path: Path, days: int) -> None:
    """A reader opens ``messages``; the maintenance compacts and vacuums. With 0 days of
    time travel the reader then fails on a file the VACUUM deleted; with 1 day it reads
    every row it opened."""
    shutil.copytree(three_nights, tmp_path, dirs_exist_ok=True)
    location = str(table_location(tmp_path, T.MESSAGES))
    rows = arrow_dataset(location).count_rows()
    reader = arrow_dataset(location)  # the files of the version it opened
    row = _maintain_table(str(tmp_path), location, T.MESSAGES, POLICIES[T.MESSAGES], "b", days)
    assert row["files_compacted"] > 1
    if days == 0:
        assert row["files_vacuumed"] > 0
        with pytest.raises(FileNotFoundError):
            reader.to_table()
    else:
        assert row["files_vacuumed"] == 0
        assert reader.to_table().num_rows == rows
    assert arrow_dataset(location).count_rows() == rows  # the table itself lost nothing


def test_the_config_and_the_maintenance_refuse_less_than_a_day_and_say_why(
        tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(json.dumps({"time_travel_days": 0.5}))
    with pytest.raises(PipelineConfigError, match=re.escape(
            "time_travel_days must be at least 1, not 0.5: a VACUUM must never remove files "
            "that a load or query still running may read")):
        load_config(path)
    with pytest.raises(ValueError, match="a VACUUM must never remove files"):
        maintain_tables(tmp_path, "b", time_travel_days=0)


RACER = """
import sys, time
from pathlib import Path
sys.path[:0] = [{tests!r}]
from test_maintenance_races import load_and_check
from jobs.maintain.maintenance import maintain_tables

role, warehouse = sys.argv[1], Path(sys.argv[2])
if role == "maintain":  # until both brokers' nights are done; at least one pass after
    done = [Path(p) for p in sys.argv[3:]]
    passes = 0
    while True:
        finished = all(p.exists() for p in done)
        maintain_tables(warehouse, "maintenance", time_travel_days=1)
        passes += 1
        if finished:
            break
    print("passes", passes)
else:
    broker, stores = role, sys.argv[3:]
    for store in stores:
        load_and_check(warehouse, broker, Path(store).parent.name, Path(store))
    (warehouse.parent / f"{{broker}}.done").touch()
"""


def test_maintenance_looping_through_two_brokers_loads_and_checks_loses_nothing(
        growing_store, features_store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two brokers' nights (loads and checks, in process) and a maintenance of every table,
    over and over at one day of time travel, in three processes at once: all succeed; the
    tables equal the same nights loaded and checked one after another."""
    growing = [str(growing_store / "snapshots" / n / "store") for n in NIGHTS[:2]]
    features = [str(features_store / "store")]
    script = tmp_path / "racer.py"
    script.write_text(RACER.format(tests=str(REPO / "tests")))
    raced = tmp_path / "raced" / "warehouse"
    raced.mkdir(parents=True)
    load_and_check(raced, "g", "s1", Path(growing[0]))  # tables made; the race is over them
    processes = {
        "g": [*growing[1:]], "f": features,
        "maintain": [str(raced.parent / "g.done"), str(raced.parent / "f.done")]}
    running = {role: subprocess.Popen([sys.executable, str(script), role, str(raced), *args],
                                      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
               for role, args in processes.items()}
    outputs = {}
    for role, process in running.items():
        outputs[role], err = process.communicate(timeout=900)
        assert process.returncode == 0, (role, err[-3000:])
    assert int(outputs["maintain"].split()[-1]) >= 1  # the maintenance's passes

    serial = tmp_path / "serial" / "warehouse"
    serial.mkdir(parents=True)
    for store in growing:
        load_and_check(serial, "g", Path(store).parent.name, Path(store))
    load_and_check(serial, "f", Path(features[0]).parent.name, Path(features[0]))
    assert warehouse_content(raced) == warehouse_content(serial)
