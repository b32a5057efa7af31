"""`rmq` and `verify_store` on real-broker stores, intact and deliberately damaged.

Each fault test copies a store written by the real broker, damages it the way disks and
hard kills do, and checks the damage is reported (file, offset, reason) with the right
exit code, never a traceback or a silent pass.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rmqlib.commitlog.records import read_record_at, scan_segment
from rmqlib.common.segments import UNSIZED_FILE_REASON, list_segments, segment_name
from rmqlib.indexfile import UNSIZED_INDEX_REASON
from rmqlib.store.inventory import FileKind, take_inventory
from rmqlib.store.verify import verify_store

pytestmark = pytest.mark.broker

IPV4_BODY_POSITION = 88  # spec §2.1: BODYLENGTH at 84, body right after, for IPv4 hosts


def rmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rmqlib.cli.main", *args],
                          capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture
def store_copy(broker_stores: dict[str, Path], tmp_path: Path) -> Path:
    """A private copy of the 4.x clean store (small: no 5.x timer wheel)."""
    target = tmp_path / "store"
    shutil.copytree(broker_stores["v4-clean"] / "store", target)
    return target


def first_commitlog(store: Path) -> Path:
    return list_segments(store / "commitlog")[0].path


def flip_byte(path: Path, position: int) -> None:
    with path.open("r+b") as handle:
        handle.seek(position)
        value = handle.read(1)[0]
        handle.seek(position)
        handle.write(bytes([value ^ 0xFF]))


# --------------------------------------------------------------------------- intact stores


@pytest.mark.parametrize("variant", ["v4-clean", "v4-killed", "v5-clean", "v5-killed"])
def test_verify_command_passes_on_real_stores(broker_stores: dict[str, Path],
                                              variant: str) -> None:
    result = rmq("verify", str(broker_stores[variant] / "store"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert result.stdout.rstrip().endswith("OK")
    assert " 0 errors" in result.stdout


def test_inventory_detects_generation_and_features(broker_stores: dict[str, Path]) -> None:
    v4 = take_inventory(broker_stores["v4-clean"] / "store")
    v5 = take_inventory(broker_stores["v5-killed"] / "store")
    assert v4.generation == "4.x" and v5.generation == "5.x"
    for inventory in (v4, v5):
        assert {"delayed_messages", "transactions", "retry", "dead_letter"} <= inventory.features
        assert not [f for f in inventory.files if f.kind is FileKind.UNKNOWN]
    assert "abnormal_shutdown" in v5.features and "abnormal_shutdown" not in v4.features
    # every file a 5.5.0 broker writes is decoded now, rocksdbstore/ last (issue 38)
    assert [f.path for f in v5.files if not f.decoded] == []
    assert {f.kind for f in v5.files if f.path.parts[0] == "rocksdbstore"} == {
        FileKind.ROCKSDB_STATE}


def test_inspect_json_lists_totals(broker_stores: dict[str, Path]) -> None:
    result = rmq("inspect", str(broker_stores["v5-clean"] / "store"), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["generation"] == "5.x"
    assert summary["totals"]["commitlog"]["files"] >= 3
    not_decoded = {item["path"] for item in summary["not_decoded"]}
    # rocksdbstore/ is decoded (rmqlib.rocksdb.state_store); timerwheel and timerlog too
    assert not {"rocksdbstore", "timerwheel", "timerlog"} & not_decoded


def test_get_finds_a_message_four_ways(broker_stores: dict[str, Path]) -> None:
    variant = broker_stores["v5-clean"]
    store = str(variant / "store")
    truth = next(json.loads(line) for line in
                 (variant / "truth" / "messages.jsonl").read_text().splitlines()
                 if json.loads(line)["kind"] == "normal" and json.loads(line)["acked"])
    ways = [
        ["--msg-id", truth["offsetMsgId"]],
        ["--msg-id", truth["msgId"], "--topic", truth["topic"]],
        ["--key", truth["keys"][0], "--topic", truth["topic"]],
        ["--queue", truth["topic"], str(truth["queueId"]), str(truth["queueOffset"])],
    ]
    for way in ways:
        result = rmq("get", store, *way, "--json")
        assert result.returncode == 0, (way, result.stderr)
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert [row["uniq_key"] for row in rows] == [truth["msgId"]], way
        assert rows[0]["body_sha256"] == truth["bodySha256"]


def test_dump_modes_emit_json_lines(broker_stores: dict[str, Path]) -> None:
    store = broker_stores["v4-clean"] / "store"
    queue_dir = next((store / "consumequeue" / "TopicNormal").iterdir())
    for args in (["commitlog", str(store)], ["cq", str(queue_dir)],
                 ["index", str(store / "index")], ["config", str(store / "config")],
                 ["checkpoint", str(store)]):
        result = rmq("dump", *args, "--json", "--limit", "3")
        assert result.returncode == 0, (args, result.stderr)
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert rows, args


# --------------------------------------------------------------------------- bad input


def test_missing_path_and_wrong_file_give_one_line_errors(tmp_path: Path) -> None:
    missing = rmq("verify", str(tmp_path / "nowhere"))
    assert missing.returncode == 3
    assert missing.stderr.startswith("rmq: error:") and "Traceback" not in missing.stderr
    garbage = tmp_path / "00000000000000000000"
    garbage.write_bytes(b"not a commitlog" * 100)
    dumped = rmq("dump", "commitlog", str(garbage))
    assert "Traceback" not in dumped.stderr
    misnamed = tmp_path / "commitlog.bin"
    misnamed.write_bytes(bytes(64))
    wrong_name = rmq("dump", "commitlog", str(misnamed))
    assert wrong_name.returncode == 3 and "20-digit" in wrong_name.stderr
    not_a_store = rmq("inspect", str(tmp_path))
    assert not_a_store.returncode == 3 and "not a RocketMQ store" in not_a_store.stderr


def test_flipped_body_byte_is_a_crc_error(store_copy: Path) -> None:
    segment = first_commitlog(store_copy)
    first = read_record_at(store_copy / "commitlog", 0)
    assert first.body_length > 0 and not first.sysflag & 0x30  # IPv4 hosts: body at 88
    flip_byte(segment, IPV4_BODY_POSITION)
    report = verify_store(store_copy)
    crc_errors = [f for f in report.errors if f.check == "body-crc"]
    assert [(f.path, f.offset) for f in crc_errors] == [(str(segment), 0)]
    result = rmq("verify", str(store_copy))
    assert result.returncode == 1 and result.stdout.rstrip().endswith("FAILED")


def test_zeroed_region_in_an_old_segment_is_corruption(store_copy: Path) -> None:
    segment = first_commitlog(store_copy)
    with segment.open("r+b") as handle:
        handle.seek(100_000)
        handle.write(bytes(5000))
    report = verify_store(store_copy)
    unreadable = [f for f in report.errors if f.check == "unreadable"]
    assert unreadable and unreadable[0].path == str(segment)
    # The record straddling byte 100 000 keeps its header (it only fails its CRC); the
    # gap opens at the first record start inside the zeros and runs past them.
    region = unreadable[0]
    assert 100_000 <= region.offset < 105_000
    assert "next valid record at file position" in region.message
    # The records that were destroyed leave consume-queue units that no longer resolve.
    assert any(f.check == "cq-resolve" for f in report.errors)
    assert all(account.balanced for account in report.accounts)


def test_truncated_consume_queue_file_is_reported(store_copy: Path) -> None:
    queue_file = next((store_copy / "consumequeue" / "TopicNormal" / "0").iterdir())
    data = queue_file.read_bytes()
    queue_file.write_bytes(data[:len(data) - 7])
    report = verify_store(store_copy)
    assert any(f.path and f.path.endswith(queue_file.name) and "TopicNormal" in f.path
               for f in report.errors)


def test_garbage_file_in_the_store_is_listed_not_skipped(store_copy: Path) -> None:
    (store_copy / "commitlog" / "notes.txt").write_text("hello")
    inventory = take_inventory(store_copy)
    unknown = [f for f in inventory.files if f.kind is FileKind.UNKNOWN]
    assert [f.path.as_posix() for f in unknown] == ["commitlog/notes.txt"]
    assert any(f.check == "inventory" for f in verify_store(store_copy).warnings)


def test_consumer_offset_config_falls_back_to_bak(store_copy: Path) -> None:
    config = store_copy / "config" / "consumerOffset.json"
    (store_copy / "config" / "consumerOffset.json.bak").write_text(config.read_text())
    config.write_text("{ this is not json")
    result = rmq("dump", "config", str(config), "--json")
    assert result.returncode == 0, result.stderr
    row = json.loads(result.stdout)
    assert row["source"]["from_backup"] is True
    assert row["data"]["offsetTable"]


def test_a_damaged_v2_config_database_is_a_config_error_and_a_double_write_is_named(
        store_copy: Path) -> None:
    """A configManagerVersion=v2 database (config/rdb/) RocksDB cannot open is an error per
    table it stands for, naming the database: never a traceback, never silently empty. A
    RocksDB consume queue beside the file queues (double write) is named, and the file
    queues stay the ones checked."""
    for relative in ("consumequeue/CURRENT", "consumequeue/MANIFEST-000005",
                     "consumequeue/000004.sst", "config/rdb/CURRENT", "config/rdb/000009.log"):
        (store_copy / relative).parent.mkdir(parents=True, exist_ok=True)
        (store_copy / relative).write_bytes(b"\x00rocksdb")
    for name in ("topics.json", "subscriptionGroup.json", "consumerOffset.json"):
        (store_copy / "config" / name).unlink(missing_ok=True)
    inventory = take_inventory(store_copy)
    kinds = {f.path.as_posix(): f.kind for f in inventory.files
             if f.kind in (FileKind.ROCKSDB_CONFIG, FileKind.ROCKSDB_CQ)}
    assert kinds == {"consumequeue/CURRENT": FileKind.ROCKSDB_CQ,
                     "consumequeue/MANIFEST-000005": FileKind.ROCKSDB_CQ,
                     "consumequeue/000004.sst": FileKind.ROCKSDB_CQ,
                     "config/rdb/CURRENT": FileKind.ROCKSDB_CONFIG,
                     "config/rdb/000009.log": FileKind.ROCKSDB_CONFIG}
    assert "rocksdb_config_v2" in inventory.features
    report = verify_store(store_copy)
    config_errors = {(Path(f.path).name, f.message.split(":")[0]) for f in report.errors
                     if f.check == "config"}
    assert {name for name, _ in config_errors} == {
        "topics.json", "subscriptionGroup.json", "consumerOffset.json"}
    assert all(reason == "RocksDB cannot open this database" for _, reason in config_errors)
    assert any("rocksdbCQDoubleWriteEnable" in f.message for f in report.warnings)
    assert report.counts["cq_units"] > 0  # the file queues, checked as always


def test_changed_queue_offset_breaks_contiguity_and_the_unit(store_copy: Path) -> None:
    """QUEUEOFFSET is outside every CRC: only the cross-checks can catch a change."""
    unit_file = next((store_copy / "consumequeue" / "TopicNormal" / "1").iterdir())
    unit = unit_file.read_bytes()[5 * 20 : 6 * 20]  # queue offset 5
    physical = int.from_bytes(unit[:8], "big")
    segment = first_commitlog(store_copy)
    with segment.open("r+b") as handle:
        handle.seek(physical + 20)  # QUEUEOFFSET, spec §2.1
        handle.write((77).to_bytes(8, "big"))
    report = verify_store(store_copy)
    checks = {(f.check, f.offset) for f in report.errors}
    assert ("queue-offset", physical) in checks
    assert ("cq-resolve", 5 * 20) in checks


def test_zeroed_consume_queue_unit_leaves_its_record_without_a_unit(store_copy: Path) -> None:
    unit_file = next((store_copy / "consumequeue" / "TopicNormal" / "2").iterdir())
    data = bytearray(unit_file.read_bytes())
    physical = int.from_bytes(data[3 * 20 : 3 * 20 + 8], "big")
    data[3 * 20 : 4 * 20] = bytes(20)
    unit_file.write_bytes(bytes(data))
    report = verify_store(store_copy)
    assert any(f.check == "unreadable" and f.offset == 60 and "hole" in f.message
               for f in report.errors)
    assert any(f.check == "cq-missing" and f.offset == physical for f in report.errors)


def test_index_entry_with_a_foreign_key_hash_is_reported(store_copy: Path) -> None:
    index_path = sorted((store_copy / "index").iterdir())[0]
    entry_number = 7
    position = 40 + 4 * 500 + 20 * entry_number  # harness geometry: 500 slots
    with index_path.open("r+b") as handle:
        handle.seek(position)
        handle.write((123456789).to_bytes(4, "big"))
    report = verify_store(store_copy)
    assert any(f.check == "index-key" and f.offset == entry_number
               and f.path == str(index_path) for f in report.errors)


def test_files_a_kill_left_unsized_are_warnings_not_damage(
        broker_stores: dict[str, Path], tmp_path: Path) -> None:
    """A broker killed between opening a new file and mapping it at full size leaves a
    0-byte file: an index file (seen on the harness's killed 4.9.7 broker), or the last
    file of the commitlog or of a consume queue. Each holds nothing: verify warns with the
    reason, accounts 0 bytes and raises no error, and the load plan neither decodes nor
    quarantines them."""
    from jobs.load.plan import plan_load

    store = tmp_path / "store"
    shutil.copytree(broker_stores["v4-killed"] / "store", store)
    # The kill may itself have left such a file (it depends on when it struck): those are
    # warned about too, the same way.
    left_by_kill = {(f.path, f.message) for f in verify_store(store).warnings
                    if "0 bytes" in f.message}
    names = [p.name for p in (store / "index").iterdir() if p.stat().st_size > 0]
    unsized_index = store / "index" / str(int(max(names)) + 1)
    unsized_index.touch()
    segments = list_segments(store / "commitlog")
    unsized_log = store / "commitlog" / segment_name(segments[-1].end)
    unsized_log.touch()
    queue = store / "consumequeue" / "TopicNormal" / "0"
    queue_files = sorted(queue.iterdir())
    if queue_files[-1].stat().st_size == 0:  # the kill left this queue's next file unsized
        unsized_queue_file = queue_files[-1]
    else:
        queue_file_size = queue_files[0].stat().st_size
        unsized_queue_file = queue / segment_name(int(queue_files[-1].name) + queue_file_size)
        unsized_queue_file.touch()

    report = verify_store(store)
    assert report.errors == []
    assert {(f.path, f.message) for f in report.warnings if "0 bytes" in f.message} == {
        (str(unsized_index), UNSIZED_INDEX_REASON), (str(unsized_log), UNSIZED_FILE_REASON),
        (str(unsized_queue_file), UNSIZED_FILE_REASON)} | left_by_kill
    assert [a.size for a in report.accounts if a.path == str(unsized_index)] == [0]
    plan = plan_load(store, [])
    planned = {Path(t.path) for t in plan.tasks}
    assert not planned & {unsized_index, unsized_log, unsized_queue_file}
    assert {Path(t.path).name for t in plan.index_tasks} == set(names)
    assert plan.unreadable_files == [] and plan.skipped_queues == []
    # the killed broker had created the next commitlog file ahead, all zeros: the tail the
    # load watches for a torn record is the file holding the newest record
    written = [seg for seg in segments if any(True for _ in scan_segment(seg.path))]
    assert written[-1] != segments[-1]
    assert plan.commitlog_tail_file == f"commitlog/{written[-1].path.name}"
    result = rmq("verify", str(store))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
