"""The nightly pipeline over a real 5.5.0 broker in controller mode (``v5-controller``).

Two nights through the DAG's steps in this process (snapshot, load, check; no Spark):
night 1 the store after the broker's first run (one master term), night 2 after its
restart (a second term). The oracle is the admin API's epoch cache before each stop and the
client's send log. A copy whose epoch file's CRC is broken must give exactly its findings,
and the history the broker itself would load (the ``.bak``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from pipeline_nights import jsonl, run_night, write_config
from pipeline_nights import rows as nights_rows

from jobs.lakehouse import tables as T
from rmqlib.controller import EPOCH_FILE

pytestmark = pytest.mark.broker

BROKER = "ctl-a"
NIGHTS = {"run1": "2026-11-23T0200Z", "run2": "2026-11-24T0200Z"}
MAX = 2**63 - 1  # the broker's open end of the last term


def rows(warehouse: Path, table: str, **equal: object) -> list[dict[str, Any]]:
    return nights_rows(warehouse, table, broker=BROKER, **equal)


def admin_terms(store: Path, tag: str) -> list[tuple[int, int, int | None]]:
    views = json.loads((store / "truth" / "controller.json").read_text())["views"]
    cache = next(v for v in views if v["tag"] == tag)["epochCache"]
    return [(e["epoch"], e["startOffset"], None if e["endOffset"] == MAX else e["endOffset"])
            for e in cache["epochList"]]


@pytest.fixture(scope="module")
def nights(controller_store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("controller")
    config = write_config(work, BROKER, controller_store / "store")
    stores = {"run1": controller_store / "snapshots" / "run1" / "store",
              "run2": controller_store / "store"}
    for name, snapshot_id in NIGHTS.items():
        run_night(config, snapshot_id, stores[name])
    return {"warehouse": work / "warehouse", "config": config}


def terms(warehouse: Path, night: str) -> list[tuple[int, int, int | None]]:
    return [(r["epoch"], r["start_offset"], r["end_offset"]) for r in sorted(
        rows(warehouse, T.BROKER_EPOCHS, snapshot_id=NIGHTS[night]), key=lambda r: r["epoch"])]


def test_each_night_holds_the_brokers_epoch_cache_and_identity(
        nights: dict[str, Any], controller_store: Path) -> None:
    warehouse = nights["warehouse"]
    assert terms(warehouse, "run1") == admin_terms(controller_store, "run1-beforeStop")
    assert terms(warehouse, "run2") == admin_terms(controller_store, "run2-beforeStop")
    identity = {(r["controller_cluster"], r["controller_broker_id"])
                for r in rows(warehouse, T.BROKER_EPOCHS)}
    assert identity == {("HarnessCluster", 1)}


def test_every_message_joins_the_term_it_was_sent_in(nights: dict[str, Any],
                                                     controller_store: Path) -> None:
    epochs = terms(nights["warehouse"], "run2")
    sent = [m for m in jsonl(controller_store / "truth" / "messages.jsonl") if m["acked"]]
    for message in sent:
        offset = message["commitLogOffset"]
        term = [e for e, start, end in epochs if start <= offset and (end is None or offset < end)]
        assert term == [message["masterEpoch"]], message["msgId"]


def test_the_failover_is_reported_once_and_the_nights_are_otherwise_clean(
        nights: dict[str, Any], controller_store: Path) -> None:
    warehouse = nights["warehouse"]
    findings = {night: sorted((r["check_name"], r["severity"]) for r in rows(
        warehouse, T.CHECK_RESULTS, snapshot_id=snapshot_id)
        if r["severity"] in ("error", "warning") or r["check_name"] == "master_term_changed")
        for night, snapshot_id in NIGHTS.items()}
    assert findings == {"run1": [], "run2": [("master_term_changed", "info")]}
    changed = next(r for r in rows(warehouse, T.CHECK_RESULTS, snapshot_id=NIGHTS["run2"])
                   if r["check_name"] == "master_term_changed")
    assert changed["expected"] == "master term 1 as at the previous snapshot"
    assert changed["observed"] == "master term 5"
    assert rows(warehouse, T.QUARANTINE) == []
    again = run_night(nights["config"], NIGHTS["run2"], controller_store / "store")
    assert again["loaded"]["skipped"]


def test_a_broken_epoch_file_gives_its_findings_and_the_history_the_broker_would_load(
        controller_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "source"
    shutil.copytree(controller_store / "store", store)
    text = (store / EPOCH_FILE).read_text()
    count, crc, *lines = text.split("\n")
    (store / EPOCH_FILE).write_text("\n".join([count, str(int(crc) ^ 1), *lines]))
    run_night(write_config(tmp_path, BROKER, store), NIGHTS["run2"], store)
    warehouse = tmp_path / "warehouse"
    assert terms(warehouse, "run2") == [(1, 0, None)]  # the .bak: what the broker falls back to
    findings = [(r["check_name"], r["scope"]) for r in rows(warehouse, T.CHECK_RESULTS)
                if r["severity"] in ("error", "warning")]
    assert findings == [("epoch_file_unreadable", f"file={EPOCH_FILE}")]
    quarantined = [(r["file"], r["stream"]) for r in rows(warehouse, T.QUARANTINE)]
    assert quarantined == [(EPOCH_FILE, "controller")]
