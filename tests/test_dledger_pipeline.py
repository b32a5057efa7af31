"""The nightly pipeline over a real 5.5.0 DLedger broker (the harness's ``v5-dledger``).

Two nights through the DAG's steps in this process (snapshot, load, check; no Spark):
night 1 copies the harness's hot copy ``snapshots/s1/store`` (taken while the broker
wrote), night 2 the store after its clean shutdown. The oracle is what the harness
recorded from the client and the admin API: every acked send with its offsets, the
queues' max offsets (``examineTopicStats``) and each group's broker offset, consumer
offset and diff (``examineConsumeStats``, what ``consumerProgress`` prints). A damaged
copy then gets one fault per DLedger structure; each must give exactly its finding.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pipeline_nights import (
    assert_progress_equals,
    jsonl,
    manifest_files,
    offsets_and_lag,
    run_night,
    write_config,
)
from pipeline_nights import rows as nights_rows

from jobs.lakehouse import tables as T
from rmqlib.commitlog.records import read_record_at
from rmqlib.common.segments import list_segments
from rmqlib.dledger import layout as L
from rmqlib.dledger.entries import scan_data_file

pytestmark = pytest.mark.broker

BROKER = "dl-a"
NIGHTS = {"s1": "2026-11-23T0200Z", "s2": "2026-11-24T0200Z"}


def rows(warehouse: Path, table: str, **equal: object) -> list[dict[str, Any]]:
    return nights_rows(warehouse, table, broker=BROKER, **equal)


def sources(dledger_store: Path) -> dict[str, Path]:
    return {"s1": dledger_store / "snapshots" / "s1" / "store", "s2": dledger_store / "store"}


@pytest.fixture(scope="module")
def nights(dledger_store: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("dledger")
    config = write_config(work, BROKER, dledger_store / "store")
    stores = sources(dledger_store)
    results = {name: run_night(config, snapshot_id, stores[name])
               for name, snapshot_id in NIGHTS.items()}
    return {"work": work, "warehouse": work / "warehouse", "results": results,
            "config": config}


def entries_of(store: Path) -> list:
    found = []
    for segment in list_segments(store / "dledger-n0" / "data"):
        found += scan_data_file(segment.path)[0]
    return found


# --------------------------------------------------------------------------- messages


def test_every_acked_send_is_a_row_field_by_field(nights, dledger_store: Path) -> None:
    found = rows(nights["warehouse"], T.MESSAGES)
    by_offset = {row["physical_offset"]: row for row in found}
    assert len(by_offset) == len(found)  # no record twice across the two nights
    entries = entries_of(dledger_store / "store")
    assert sorted(by_offset) == [entry.body_offset for entry in entries]
    for sent in (m for m in jsonl(dledger_store / "truth" / "messages.jsonl") if m["acked"]):
        row = by_offset[sent["commitLogOffset"]]
        assert (row["topic"], row["queue_id"], row["queue_offset"]) == (
            sent["storedTopic"], sent["storedQueueId"], sent["queueOffset"])
        assert (row["msg_id"], row["tags"], list(row["keys"])) == (
            sent["msgId"], sent["tags"], sent["keys"])
        assert row["offset_msg_id"] == sent["offsetMsgId"]
        assert row["body_crc_ok"] is True
        if not sent["batch"]:
            assert row["body_sha256"] == sent["bodySha256"], sent["seq"]
        for name, value in sent["userProperties"].items():
            assert dict(row["properties"])[name] == value
        first = NIGHTS["s1"] if "s1" in (sent["inSnapshots"] or []) else NIGHTS["s2"]
        assert row["first_snapshot_id"] == first, sent["seq"]
        data_file = row["source_file"]
        assert data_file.startswith("dledger-n0/data/")
        assert int(data_file.rsplit("/", 1)[1]) + row["file_position"] == row["physical_offset"]


def test_the_second_night_reads_only_what_is_new(nights, dledger_store: Path) -> None:
    """Night 2 decodes from night 1's mark: the bytes read are the data past it, and the
    copier took from the broker only what grew (a DLedger log grows like a commitlog)."""
    warehouse = nights["warehouse"]
    night1_end = next(r for r in rows(warehouse, T.SNAPSHOTS, snapshot_id=NIGHTS["s1"])
                      )["commitlog_max_offset"]
    store = dledger_store / "store"
    past_mark = sum(seg.size - max(night1_end - seg.start, 0)
                    for seg in list_segments(store / "dledger-n0" / "data")
                    if seg.start + seg.size > night1_end)
    runs = {r["table_name"]: r for r in rows(warehouse, T.LOAD_RUNS, snapshot_id=NIGHTS["s2"])}
    assert runs[T.MESSAGES]["bytes_read"] == past_mark
    new = [r for r in rows(warehouse, T.MESSAGES) if r["first_snapshot_id"] == NIGHTS["s2"]]
    assert min(r["physical_offset"] for r in new) >= night1_end
    # The copier: data files full at night 1 are linked, the one being written grows from
    # the start of the last entry night 1's copy held (re-read: it may have been torn).
    first, second = (manifest_files(nights["work"], BROKER, snapshot_id)
                     for snapshot_id in NIGHTS.values())
    night1_store = Path(nights["results"]["s1"]["taken"]["store"])
    for path, entry in second.items():
        if not path.startswith("dledger-n0/data/"):
            continue
        before = first[path]
        if before["finished"]:
            assert (entry["how"], entry["from_broker"]) == ("linked", 0), path
            continue
        held = scan_data_file(night1_store / path)[0]
        assert before["resume_at"] == held[-1].pos - int(path.rsplit("/", 1)[1])
        assert (entry["how"], entry["from_broker"]) == (
            "grown", entry["size"] - before["resume_at"]), path


def test_snapshot_rows_hold_the_dledger_log_bounds(nights, dledger_store: Path) -> None:
    run = json.loads((dledger_store / "truth" / "dledger.json").read_text())["beforeShutdown"]
    row = rows(nights["warehouse"], T.SNAPSHOTS, snapshot_id=NIGHTS["s2"])[0]
    assert (row["commitlog_min_offset"], row["commitlog_max_offset"]) == (
        run["commitLogMinOffset"], run["commitLogMaxOffset"])


# --------------------------------------------------------------------------- queues, offsets, lag


def test_queue_positions_equal_the_admin_topic_stats(nights, dledger_store: Path) -> None:
    units = Counter((r["topic"], r["queue_id"])
                    for r in rows(nights["warehouse"], T.QUEUE_ENTRIES))
    stats = jsonl(dledger_store / "truth" / "topic_stats.jsonl")
    assert {(s["topic"], s["queueId"]): s["maxOffset"] - s["minOffset"] for s in stats
            if s["maxOffset"] > s["minOffset"]} == dict(units)


def test_consumer_offsets_and_lag_equal_consumer_progress(nights, dledger_store: Path) -> None:
    truth = jsonl(dledger_store / "truth" / "consumer_groups.jsonl")
    assert_progress_equals(truth, *offsets_and_lag(nights["warehouse"], BROKER, NIGHTS["s2"]))


def test_both_nights_check_clean_and_a_rerun_changes_nothing(nights, dledger_store: Path
                                                             ) -> None:
    warehouse = nights["warehouse"]
    for snapshot_id in NIGHTS.values():
        findings = [(r["check_name"], r["severity"])
                    for r in rows(warehouse, T.CHECK_RESULTS, snapshot_id=snapshot_id)
                    if r["severity"] in ("error", "warning")]
        # A hot copy (night 1) may end in an abort file; nothing else is expected.
        assert set(findings) <= {("unclean_shutdown", "warning")}, findings
    assert rows(warehouse, T.QUARANTINE) == []
    before = {t: len(rows(warehouse, t)) for t in (T.MESSAGES, T.QUEUE_ENTRIES,
                                                    T.INDEX_ENTRIES, T.LOAD_STATE)}
    again = run_night(nights["config"], NIGHTS["s2"], dledger_store / "store")
    assert again["loaded"]["skipped"] and again["checked"]["skipped"]
    assert {t: len(rows(warehouse, t)) for t in before} == before


# --------------------------------------------------------------------------- faults


def test_each_damaged_dledger_structure_gives_exactly_its_finding(
        dledger_store: Path, tmp_path: Path) -> None:
    """One copy, three faults far apart: a flipped byte inside a record's body (its BODYCRC
    fails), an entry whose POS no longer frames (its bytes are quarantined, the entries
    after it are read), and an index unit naming a wrong position."""
    store = tmp_path / "source"
    shutil.copytree(dledger_store / "store", store)
    entries = entries_of(store)
    data = store / "dledger-n0" / "data"
    big = [e for e in entries if e.size > 1000]  # bodies long enough to hit inside
    crc_victim, frame_victim, index_victim = big[10], entries[400], entries[650]
    _flip(data, crc_victim.body_offset + 300, 0x01)
    _flip(data, frame_victim.pos + L.POS_OFFSET + 7, 0x10)
    index_file = store / "dledger-n0" / "index" / f"{0:020d}"
    raw = bytearray(index_file.read_bytes())
    struct.pack_into(">q", raw, index_victim.index * L.INDEX_UNIT_SIZE + 4, 12345)
    index_file.write_bytes(bytes(raw))

    config = write_config(tmp_path, BROKER, store)
    night = run_night(config, NIGHTS["s2"], store)
    warehouse = tmp_path / "warehouse"
    findings = {r["check_name"]: r for r in rows(warehouse, T.CHECK_RESULTS)
                if r["severity"] == "error"}
    seg_of = {e.pos: e.pos - e.pos % (1 << 20) for e in entries}
    crc_file = f"dledger-n0/data/{seg_of[crc_victim.pos]:020d}"
    assert findings["crc_failure"]["scope"] == f"file={crc_file}"
    assert list(findings["crc_failure"]["sample_offsets"]) == [crc_victim.body_offset]
    frame_file = f"dledger-n0/data/{seg_of[frame_victim.pos]:020d}"
    assert findings["quarantined_region"]["scope"] == f"file={frame_file}"
    assert list(findings["quarantined_region"]["sample_offsets"]) == [
        frame_victim.pos - seg_of[frame_victim.pos]]
    assert findings["dledger_index_mismatch"]["scope"] == \
        f"file=dledger-n0/index/{0:020d}"
    assert list(findings["dledger_index_mismatch"]["sample_offsets"]) == [
        index_victim.index * L.INDEX_UNIT_SIZE]
    # The unframed entry's record is missing, so its queue unit and index entries point
    # nowhere: the two findings that name it, and nothing else.
    lost = read_record_at([dledger_store / "store" / "dledger-n0" / "data"],
                          frame_victim.body_offset)
    assert findings["cq_unit_without_record"]["scope"] == \
        f"topic={lost.topic} queue={lost.queue_id}"
    assert list(findings["cq_unit_without_record"]["sample_offsets"]) == [lost.queue_offset]
    assert set(findings["index_entry_without_record"]["sample_offsets"]) == {
        frame_victim.body_offset}
    assert set(findings) == {"crc_failure", "quarantined_region", "dledger_index_mismatch",
                             "cq_unit_without_record", "index_entry_without_record"}
    quarantined = rows(warehouse, T.QUARANTINE)
    frame_row = next(r for r in quarantined if r["stream"] == "commitlog")
    assert (frame_row["file"], frame_row["offset"], frame_row["length"],
            frame_row["global_offset"]) == (
        frame_file, frame_victim.pos - seg_of[frame_victim.pos], frame_victim.size,
        frame_victim.pos)
    messages = {r["physical_offset"] for r in rows(warehouse, T.MESSAGES)}
    assert messages == {e.body_offset for e in entries} - {frame_victim.body_offset}
    assert night["loaded"]["quarantined_bytes"] == frame_victim.size + L.INDEX_UNIT_SIZE


def _flip(data_dir: Path, offset: int, mask: int) -> None:
    segment = next(s for s in list_segments(data_dir) if s.start <= offset < s.end)
    raw = bytearray(segment.path.read_bytes())
    raw[offset - segment.start] ^= mask
    segment.path.write_bytes(bytes(raw))
