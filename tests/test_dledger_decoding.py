"""rmqlib on a real 5.5.0 broker's DLedger commitlog (the harness's ``v5-dledger``): every
acked message is found at its offsetMsgId's offset, field by field; ``rmq verify`` finds
no error in the intact store and exactly the damage in a damaged copy."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from rmqlib.dledger.index import check_index, read_index_units
from rmqlib.dledger.records import dledger_dirs, scan_dledger
from rmqlib.store.verify import verify_store

pytestmark = pytest.mark.broker


def acked(store_dir: Path) -> list[dict]:
    lines = (store_dir / "truth" / "messages.jsonl").read_text().splitlines()
    return [m for m in map(json.loads, lines) if m["acked"]]


def test_every_acked_message_is_an_entrys_record(dledger_store: Path) -> None:
    raft_log = dledger_dirs(dledger_store / "store")[0]
    scan = scan_dledger(raft_log / "data")
    records = {record.physical_offset: (entry, record) for entry, record in scan}
    assert scan.bad_bodies == [] and all(f.account.balanced for f in scan.files)
    assert all(not f.account.unreadable for f in scan.files)
    entries = [entry for entry, _ in records.values()]
    assert [e.index for e in entries] == list(range(len(entries)))
    assert check_index(entries, list(read_index_units(raft_log / "index"))) == []
    for sent in acked(dledger_store):
        entry, record = records[sent["commitLogOffset"]]
        assert entry.body_offset == record.physical_offset == sent["commitLogOffset"]
        assert (record.topic, record.queue_id, record.queue_offset) == (
            sent["storedTopic"], sent["storedQueueId"], sent["queueOffset"])
        assert record.properties.get("UNIQ_KEY") == sent["msgId"]
        if not sent["batch"]:
            assert hashlib.sha256(record.decompressed_body()).hexdigest() == sent["bodySha256"]


def test_verify_passes_the_real_store_and_names_a_damaged_entry(dledger_store: Path,
                                                                tmp_path: Path) -> None:
    report = verify_store(dledger_store / "store")
    assert report.errors == []
    assert report.counts["dledger_entries"] == report.counts["commitlog_records"]
    copy = tmp_path / "store"
    shutil.copytree(dledger_store / "store", copy, ignore=shutil.ignore_patterns("index"))
    data = sorted((dledger_dirs(copy)[0] / "data").iterdir())[1]
    raw = bytearray(data.read_bytes())
    raw[24 + 7] ^= 0x10  # the first entry's POS: it no longer frames
    data.write_bytes(bytes(raw))
    errors = verify_store(copy).errors
    assert {e.check for e in errors} >= {"unreadable"}
    assert any(e.check == "unreadable" and e.offset == 0 and e.path == str(data)
               for e in errors)


def test_rmq_get_finds_a_message_every_way_in_a_dledger_store(dledger_store: Path) -> None:
    """``rmq get`` reads records inside DLedger entries: by offsetMsgId (its offset), by
    queue position (through the consume queue), by key (through the index file) and by
    UNIQ_KEY with no topic (a scan of every entry)."""
    import subprocess
    import sys

    store = str(dledger_store / "store")
    sent = next(m for m in acked(dledger_store) if m["keys"] and not m["batch"]
                and m["storedTopic"] == m["topic"] and m["queueOffset"] > 0)
    ways = (["--msg-id", sent["offsetMsgId"]], ["--msg-id", sent["msgId"]],
            ["--key", sent["keys"][0], "--topic", sent["topic"]],
            ["--queue", sent["topic"], str(sent["queueId"]), str(sent["queueOffset"])],
            ["--phys", str(sent["commitLogOffset"])])
    for way in ways:
        done = subprocess.run([sys.executable, "-m", "rmqlib.cli.main", "get", store, *way,
                               "--json"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (way, done.stderr)
        [row] = [json.loads(line) for line in done.stdout.splitlines()]
        assert (row["physical_offset"], row["uniq_key"], row["queue_offset"]) == (
            sent["commitLogOffset"], sent["msgId"], sent["queueOffset"]), way
