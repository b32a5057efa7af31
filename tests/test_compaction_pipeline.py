"""The nightly pipeline over a real 5.5.0 broker with a compacted topic (``v5-compaction``).

Two nights through the DAG's steps in this process (snapshot, load, check; no Spark):
night 1 copies the hot copy ``snapshots/s1/store`` (three versions of every key, compacted
once), night 2 the store after the fourth version and its compaction. The oracle is what a
consumer of each queue was served (pulled by the harness from offset 0 at the end) and the
send log. A copy with one unit of the sparse queue moved must give exactly its findings.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
from pipeline_nights import jsonl, run_night, write_config
from pipeline_nights import rows as nights_rows

from jobs.lakehouse import tables as T
from rmqlib.compaction import layout as L
from rmqlib.compaction.store import read_compaction

pytestmark = pytest.mark.broker

BROKER = "compact-a"
NIGHTS = {"s1": "2026-11-23T0200Z", "s2": "2026-11-24T0200Z"}
TOPIC = "TopicCompacted"


def rows(warehouse: Path, table: str, **equal: object) -> list[dict[str, Any]]:
    return nights_rows(warehouse, table, broker=BROKER, **equal)


@pytest.fixture(scope="module")
def nights(compaction_store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("compaction")
    config = write_config(work, BROKER, compaction_store / "store")
    stores = {"s1": compaction_store / "snapshots" / "s1" / "store",
              "s2": compaction_store / "store"}
    for name, snapshot_id in NIGHTS.items():
        run_night(config, snapshot_id, stores[name])
    return {"warehouse": work / "warehouse", "config": config}


def kept(warehouse: Path, night: str) -> list[tuple]:
    return sorted((r["queue_id"], r["queue_offset"], r["compaction_log_position"], r["size"],
                   r["message_keys"], r["msg_id"])
                  for r in rows(warehouse, T.COMPACTED_ENTRIES, snapshot_id=NIGHTS[night]))


def test_each_night_holds_what_consumers_of_the_compacted_queues_were_served(
        nights: dict[str, Any], compaction_store: Path) -> None:
    served = sorted((v["queueId"], v["queueOffset"], v["compactionLogPosition"],
                     v["storeSize"], v["keys"], v["msgId"])
                    for v in jsonl(compaction_store / "truth" / "compacted_view.jsonl"))
    assert kept(nights["warehouse"], "s2") == served
    first = read_compaction(compaction_store / "snapshots" / "s1" / "store")
    assert [r[:2] for r in kept(nights["warehouse"], "s1")] == sorted(
        (q.queue_id, u.queue_offset) for q in first.queues for u in q.units)
    assert len(kept(nights["warehouse"], "s1")) == 86  # 43 per queue after the first run


def test_queue_entries_keep_every_send_and_compaction_removed_the_rest(
        nights: dict[str, Any], compaction_store: Path) -> None:
    sends = {(s["queueId"], s["queueOffset"]) for s in
             jsonl(compaction_store / "truth" / "compacted_sends.jsonl") if s["acked"]}
    entries = {(r["queue_id"], r["queue_offset"]) for r in
               rows(nights["warehouse"], T.QUEUE_ENTRIES, topic=TOPIC)}
    assert entries == sends  # the classic queue holds every message ever sent
    kept_now = {r[:2] for r in kept(nights["warehouse"], "s2")}
    assert kept_now < entries and len(entries - kept_now) == 200 - 60


def test_the_nights_check_clean_and_a_rerun_changes_nothing(nights: dict[str, Any],
                                                            compaction_store: Path) -> None:
    warehouse = nights["warehouse"]
    findings = {night: [r["check_name"] for r in rows(warehouse, T.CHECK_RESULTS,
                                                      snapshot_id=snapshot_id)
                        if r["severity"] in ("error", "warning")]
                for night, snapshot_id in NIGHTS.items()}
    assert findings == {"s1": ["unclean_shutdown"], "s2": []}  # s1: a copy of a running broker
    assert rows(warehouse, T.QUARANTINE) == []
    before = len(rows(warehouse, T.COMPACTED_ENTRIES))
    again = run_night(nights["config"], NIGHTS["s2"], compaction_store / "store")
    assert again["loaded"]["skipped"] and len(rows(warehouse, T.COMPACTED_ENTRIES)) == before


def test_a_moved_unit_of_a_compacted_queue_gives_exactly_its_findings(
        compaction_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "source"
    shutil.copytree(compaction_store / "store", store)
    queue_file = sorted((store / L.COMPACTION_DIR / L.CQ_DIR / TOPIC / "1").iterdir())[0]
    data = bytearray(queue_file.read_bytes())
    (position,) = struct.unpack_from(">q", data, 2 * L.UNIT_SIZE)
    struct.pack_into(">q", data, 2 * L.UNIT_SIZE, position + 1)  # into its own record
    queue_file.write_bytes(bytes(data))
    run_night(write_config(tmp_path, BROKER, store), NIGHTS["s2"], store)
    warehouse = tmp_path / "warehouse"
    # one row per file: the unit that points nowhere, and the record no unit points at now
    findings = {(r["check_name"], r["scope"], r["affected"])
                for r in rows(warehouse, T.CHECK_RESULTS) if r["severity"] in ("error", "warning")}
    relative = queue_file.relative_to(store).as_posix()
    log_file = f"{L.COMPACTION_DIR}/{L.LOG_DIR}/{TOPIC}/1/{queue_file.name}"
    assert findings == {("compaction_mismatch", f"file={relative}", 1),
                        ("compaction_mismatch", f"file={log_file}", 1)}
    quarantined = {(r["file"], r["offset"], r["stream"]) for r in rows(warehouse, T.QUARANTINE)}
    assert quarantined == {(relative, 2 * L.UNIT_SIZE, "compaction"),
                           (log_file, position, "compaction")}
