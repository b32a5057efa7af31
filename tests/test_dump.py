"""`rmq dump` never hides a byte: every record, unit or entry and every other region of a
file is printed at its place, then an account; unreadable bytes give exit code 1.
Run on copies of real-broker files, damaged the ways a disk or a hot copy damages them."""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jsonl import json_lines

from rmqlib.cli.main import EXIT_FINDINGS, EXIT_OK, main

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
from targets import check_tiles

from rmqlib.commitlog.records import scan_segment
from rmqlib.queues.consumequeue import CQ_UNIT_SIZE

pytestmark = pytest.mark.broker


def dump(capsys, *argv: str) -> tuple[int, list[dict]]:  # type: ignore[no-untyped-def]
    code = main(["dump", *argv, "--json"])
    return code, json_lines(capsys.readouterr().out)


def is_finding(row: dict) -> bool:
    """A row that makes a dump exit 1 (docs/rmq-cli.md, exit codes): unreadable bytes, or an
    inner-batch record whose body does not split into the members it claims."""
    return ((row["kind"] == "region" and row["region"] == "unreadable")
            or row["kind"] == "member_error")


def spans(rows: list[dict]) -> list[tuple[int, int, str]]:
    """(offset, length, what) of every record and region, in printed order."""
    found = []
    for row in rows:
        if row["kind"] == "region":
            found.append((row["offset"], row["length"], row["region"]))
        elif "total_size" in row:
            found.append((row["position"], row["total_size"], "record"))
    return found


def assert_tiles(rows: list[dict], size: int) -> None:
    """Printed in file order, no overlap, no gap: every byte exactly once."""
    check_tiles(rows, size)  # the fuzz target's check (tests/fuzz/targets.py)
    account = rows[-1]
    assert account["kind"] == "account" and account["complete"]
    assert (account["decoded_bytes"] + account["blank_bytes"] + account["unreadable_bytes"]
            + account["zero_tail_bytes"]) == size


@pytest.fixture
def segment(broker_stores, tmp_path) -> Path:  # type: ignore[no-untyped-def]
    source = broker_stores["v5-clean"] / "store" / "commitlog" / "00000000000000000000"
    return Path(shutil.copy(source, tmp_path / source.name))


def test_a_clean_segment_dumps_every_byte_and_exits_0(capsys, segment) -> None:  # type: ignore[no-untyped-def]
    code, rows = dump(capsys, "commitlog", str(segment))
    assert code == EXIT_OK
    assert_tiles(rows, segment.stat().st_size)
    assert rows[-1]["records"] == sum(1 for _ in scan_segment(segment))
    blank = scan_segment(segment)
    list(blank)
    (at,) = blank.result.blanks  # the BLANK's whole length is blank: what the broker skips
    assert rows[-1]["unreadable_bytes"] == 0
    assert rows[-1]["blank_bytes"] == segment.stat().st_size - at


def test_a_blank_whose_filler_holds_bytes_is_all_blank_and_exits_0(capsys, segment) -> None:  # type: ignore[no-untyped-def]
    """A real segment's BLANK runs to the file end (e.g. 108 bytes in a RocketMQ unit-test
    store) with non-zero bytes after its 8-byte header: the broker skips the whole of it
    (CommitLog.checkMessageAndReturnSize returns 0: next file), so the dump does too."""
    scan = scan_segment(segment)
    records = list(scan)
    (at,) = scan.result.blanks
    size = segment.stat().st_size
    with open(segment, "r+b") as handle:
        handle.seek(at + 8)
        handle.write(random.Random(3).randbytes(size - at - 8))
    code, rows = dump(capsys, "commitlog", str(segment))
    assert code == EXIT_OK
    assert_tiles(rows, size)
    assert rows[-1]["records"] == len(records)
    assert (rows[-1]["unreadable_bytes"], rows[-1]["blank_bytes"]) == (0, size - at)
    regions = [r for r in rows if r["kind"] == "region"]
    assert [(r["region"], r["offset"], r["length"]) for r in regions] == [
        ("blank", at, size - at)]


def test_a_segment_of_random_bytes_is_one_unreadable_region_and_exits_1(capsys, segment) -> None:  # type: ignore[no-untyped-def]
    size = segment.stat().st_size
    segment.write_bytes(random.Random(7).randbytes(size))
    code, rows = dump(capsys, "commitlog", str(segment))
    assert code == EXIT_FINDINGS
    assert rows[-1]["records"] == 0 and rows[-1]["unreadable_bytes"] == size
    assert_tiles(rows, size)
    assert main(["dump", "commitlog", str(segment)]) == EXIT_FINDINGS
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("-- unreadable: ") and f"length: {size}" in text[0]
    assert text[-1].startswith("account: 1 file(s), 0 records")


def test_a_damaged_header_mid_segment_is_printed_where_it_is(capsys, segment) -> None:  # type: ignore[no-untyped-def]
    records = list(scan_segment(segment))
    victim = records[len(records) // 2]
    with open(segment, "r+b") as handle:
        handle.seek(victim.position + 4)  # the magic code
        handle.write(b"\x00\x11\x22\x33")
    code, rows = dump(capsys, "commitlog", str(segment))
    assert code == EXIT_FINDINGS
    assert_tiles(rows, segment.stat().st_size)
    printed = spans(rows)
    hole = next(i for i, (_, _, what) in enumerate(printed) if what == "unreadable")
    assert printed[hole][:2] == (victim.position, victim.total_size)
    assert printed[hole - 1][2] == printed[hole + 1][2] == "record"  # between its neighbours
    assert rows[-1]["records"] == len(records) - 1


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=st.lists(st.tuples(st.integers(0, 2**20 - 1), st.binary(min_size=1, max_size=64)),
                       min_size=1, max_size=6))
# Drawn on a fresh machine: sets the inner-batch bits of the first record's sysflag, so its
# body is split into members, fails to, and the dump prints a member_error row (exit 1).
@example(damage=[(37, b"\x00\x00\xc0")])
def test_any_damage_still_tiles_the_file_and_sets_the_exit_code(
        capsys, broker_stores, tmp_path, damage) -> None:  # type: ignore[no-untyped-def]
    """Bytes overwritten anywhere (headers, bodies, the zero tail): the dump still prints
    every byte exactly once, and exits 1 exactly when it printed a finding: an unreadable
    region, or an inner batch whose body does not split into its members."""
    name = "00000000000000000000"
    data = bytearray((broker_stores["v5-clean"] / "store" / "commitlog" / name).read_bytes())
    for at, junk in damage:
        data[at:at + len(junk)] = junk[:max(0, len(data) - at)]
    damaged = tmp_path / name
    damaged.write_bytes(bytes(data))
    code, rows = dump(capsys, "commitlog", str(damaged))
    assert_tiles(rows, len(data))
    assert code == (EXIT_FINDINGS if any(map(is_finding, rows)) else EXIT_OK)


def test_a_consume_queue_with_a_zeroed_unit_shows_it_inline(
        capsys, broker_stores, tmp_path) -> None:  # type: ignore[no-untyped-def]
    source = broker_stores["v5-clean"] / "store" / "consumequeue" / "TopicNormal" / "0"
    queue = tmp_path / "0"
    shutil.copytree(source, queue)
    file = sorted(queue.iterdir())[0]
    data = bytearray(file.read_bytes())
    data[10 * CQ_UNIT_SIZE:11 * CQ_UNIT_SIZE] = bytes(CQ_UNIT_SIZE)
    file.write_bytes(bytes(data))
    code, rows = dump(capsys, "consumequeue", str(queue))
    assert code == EXIT_FINDINGS
    regions = [r for r in rows if r["kind"] == "region"]
    assert regions[0]["region"] == "unreadable" and regions[0]["offset"] == 10 * CQ_UNIT_SIZE
    units = [r for r in rows if r["kind"] == "unit"]
    before = [r for r in rows[:rows.index(regions[0])] if r["kind"] == "unit"]
    assert len(before) == 10 and units[10]["file_position"] == 11 * CQ_UNIT_SIZE
    account = rows[-1]
    assert (account["decoded_bytes"] + account["blank_bytes"] + account["unreadable_bytes"]
            + account["zero_tail_bytes"]) == len(data)


def test_index_and_checkpoint_dumps_account_for_their_files(
        capsys, broker_stores, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = broker_stores["v5-clean"] / "store"
    index = sorted((store / "index").iterdir())[0]
    code, rows = dump(capsys, "index", str(index))
    assert code == EXIT_OK
    account = rows[-1]
    assert account["files"] == 1 and account["entries"] > 0
    assert (account["decoded_bytes"] + account["blank_bytes"] + account["unreadable_bytes"]
            + account["zero_tail_bytes"]) == index.stat().st_size
    assert [r["region"] for r in rows if r["kind"] == "region"][:2] == ["slots", "blank"]

    checkpoint = tmp_path / "checkpoint"
    data = bytearray((store / "checkpoint").read_bytes())
    data[2000:2004] = b"junk"
    checkpoint.write_bytes(bytes(data))
    code, rows = dump(capsys, "checkpoint", str(checkpoint))
    assert code == EXIT_FINDINGS
    regions = [r for r in rows if r["kind"] == "region"]
    assert [(r["region"], r["offset"]) for r in regions if r["region"] == "unreadable"] == [
        ("unreadable", 2000)]


def test_a_limited_dump_says_its_account_is_partial(capsys, segment) -> None:  # type: ignore[no-untyped-def]
    code, rows = dump(capsys, "commitlog", str(segment), "--limit", "3")
    assert code == EXIT_OK
    assert sum(1 for r in rows if "total_size" in r) == 3
    assert rows[-1]["kind"] == "account" and not rows[-1]["complete"]


@pytest.mark.parametrize("variant", ["v4-clean", "v5-clean"])
@pytest.mark.parametrize("with_body", [False, True])
def test_the_fast_json_line_is_the_reference_row(broker_stores, variant, with_body) -> None:  # type: ignore[no-untyped-def]
    """record_json (what dumps print) parses to exactly record_row (the reference), for
    every record of real stores: compressed bodies, unicode keys, transactions, retries."""
    from rmqlib.cli.main import record_json, record_row
    from rmqlib.commitlog.records import scan_store

    records = list(scan_store(broker_stores[variant] / "store" / "commitlog"))
    assert any(r.compression is not None for r in records) or variant == "v4-clean"
    for record in records:
        reference = json.loads(json.dumps(record_row(record, with_body), ensure_ascii=False))
        assert json.loads(record_json(record, with_body)) == reference


def test_batch_queue_and_ext_dumps_show_damage_inline(capsys, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Hand-made files (no real-broker BatchCQ/ext store yet: issue 13): a unit of
    garbage between good ones is an unreadable region at its place, the rest a zero tail."""
    from store_encoders import bcq_unit, cqx_unit

    bcq = tmp_path / "batchconsumequeue" / "T" / "0" / "00000000000000000000"
    bcq.parent.mkdir(parents=True)
    good = [bcq_unit(100 * i, 90, 7, 1_700_000_000_000 + i, 10 * i, 10) for i in range(4)]
    junk = b"\xff" * len(good[0])
    bcq.write_bytes(good[0] + good[1] + junk + good[3] + bytes(46 * 10))
    code, rows = dump(capsys, "batchconsumequeue", str(bcq))
    assert code == EXIT_FINDINGS
    kinds = [r.get("region", r["kind"]) for r in rows]
    assert kinds == ["unit", "unit", "unreadable", "unit", "zero tail", "account"]
    assert rows[2]["offset"] == 92 and rows[2]["length"] == 46
    assert rows[-1]["units"] == 3 and rows[-1]["unreadable_bytes"] == 46

    ext = tmp_path / "consumequeue_ext" / "T" / "0" / "00000000000000000000"
    ext.parent.mkdir(parents=True)
    units = [cqx_unit(5, 1_700_000_000_000, b"\x01\x02"), cqx_unit(6, 1_700_000_000_001)]
    ext.write_bytes(b"".join(units) + bytes(64))
    code, rows = dump(capsys, "ext", str(ext))
    assert code == EXIT_OK
    assert [r["kind"] for r in rows] == ["unit", "unit", "region", "account"]
    assert rows[0]["filter_bitmap"] == "0102" and rows[-1]["zero_tail_bytes"] == 64


def test_a_directory_dump_covers_every_queue_at_every_level(capsys, broker_stores,
                                                            tmp_path) -> None:  # type: ignore[no-untyped-def]
    """File, queue, topic, root and store root: each level dumps every unit file under it,
    every row names its topic and queue, and the accounts add up to the files' sizes."""
    store = broker_stores["v5-clean"] / "store"
    root = store / "consumequeue"
    files = sorted(p for p in root.rglob("*") if p.is_file())
    by_level = {
        "store": (store, files),
        "root": (root, files),
        "topic": (root / "TopicNormal",
                  [p for p in files if p.parent.parent.name == "TopicNormal"]),
        "queue": (root / "TopicNormal" / "1",
                  [p for p in files if p.parent == root / "TopicNormal" / "1"]),
    }
    for level, (path, expected) in by_level.items():
        code, rows = dump(capsys, "consumequeue", str(path))
        assert code == EXIT_OK, level
        units = [r for r in rows if r["kind"] == "unit"]
        assert {Path(r["file"]) for r in units} <= set(expected), level
        assert all(Path(r["file"]).parent.parent.name == r["topic"]
                   and int(Path(r["file"]).parent.name) == r["queue_id"] for r in units)
        account = rows[-1]
        assert account["files"] == len(expected), level
        assert (account["decoded_bytes"] + account["zero_tail_bytes"] + account["blank_bytes"]
                + account["unreadable_bytes"]) == sum(p.stat().st_size for p in expected)
        assert account["units"] == len(units) > 0
    # a stray file inside a queue directory is listed, not passed over
    copy = tmp_path / "consumequeue"
    shutil.copytree(root / "TopicNormal", copy / "TopicNormal")
    (copy / "TopicNormal" / "0" / "notes.txt").write_text("hello")
    code, rows = dump(capsys, "consumequeue", str(copy))
    skipped = [r for r in rows if r["kind"] == "region" and r["region"] == "skipped"]
    assert [Path(r["file"]).name for r in skipped] == ["notes.txt"]
    assert skipped[0]["length"] == 5
