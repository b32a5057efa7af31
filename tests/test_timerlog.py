"""5.x timer files: timer log units, the timer wheel, pending timers and their dumps.

Hand-made bytes for every edge a disk, a crash or a hot copy produces (torn unit, bad
size, blank at the end, zero tail, garbage), a property test over random unit sequences,
and the files the real 5.5.0 broker wrote for the harness's 20 timer messages.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonl import json_lines
from store_encoders import timercheck_bytes

from rmqlib.checkpoint import decode_timercheck_bytes
from rmqlib.cli.main import EXIT_FINDINGS, EXIT_OK, main
from rmqlib.commitlog.msgid import decode_offset_msg_id
from rmqlib.commitlog.records import read_record_at
from rmqlib.common.accounting import FileAccount
from rmqlib.common.javahash import java_string_hash
from rmqlib.common.segments import segment_issues, segment_name
from rmqlib.errors import NotAStoreFileError
from rmqlib.store.inventory import FileKind, classify, take_inventory
from rmqlib.timers.timer_store import (
    TIMER_DEL_UNIQKEY,
    check_timer_store,
    commitlog_properties,
    delete_key,
    pending_timers,
    read_timer_store,
    requeue_start,
    unenqueued_timer_records,
)
from rmqlib.timers.timerlog import (
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    TIMERLOG_SCHEMA,
    TL_BLANK_MAGIC,
    TL_UNIT_SIZE,
    TimerLogFileDecode,
    decode_timerlog,
    decode_timerlog_bytes,
    decode_timerlog_file,
    iter_record_batches,
    list_timerlog,
    recovery_end,
)
from rmqlib.timers.timerwheel import (
    DEFAULT_SLOT_COUNT,
    SLOT_SIZE,
    WHEEL_SCHEMA,
    decode_timerwheel_bytes,
    read_timerwheel,
)

sys.path.insert(0, str(Path(__file__).resolve().parent / "fuzz"))
from targets import timerlog as timerlog_target

T0 = 1_795_434_133_000  # a whole second, like the broker's currWriteTimeMs
TOPIC = "TopicTimer"
HASH = java_string_hash(TOPIC)


# --------------------------------------------------------------------------- encoders


def unit(prev_pos: int = -1, magic: int = MAGIC_DEFAULT, write_ms: int = T0,
         delay: int = 2000, offset: int = 4096, size: int = 441, topic_hash: int = HASH,
         reserved: int = 0, unit_size: int = TL_UNIT_SIZE) -> bytes:
    """A timer log unit laid out as TimerMessageStore.doEnqueue writes it."""
    return struct.pack(">iqiqiqiiq", unit_size, prev_pos, magic, write_ms, delay, offset,
                       size, topic_hash, reserved)


def blank(left: int) -> bytes:
    """TimerLog.append's end-of-file blank: bytes left, i64 0, the blank magic."""
    return struct.pack(">iqi", left, 0, TL_BLANK_MAGIC)


def finished_file(units: list[bytes], file_size: int) -> bytes:
    """Units, then the blank filling the file to ``file_size`` (zeros after its 16 bytes)."""
    body = b"".join(units)
    left = file_size - len(body)
    return body + blank(left) + bytes(left - 16)


def slot(tick: int, first: int, last: int, num: int = 1, magic: int = 0) -> bytes:
    return struct.pack(">qqqii", tick, first, last, num, magic)


def wheel(slots: Mapping[int, bytes], count: int = 16) -> bytes:
    data = bytearray(count * SLOT_SIZE)
    for index, raw in slots.items():
        data[index * SLOT_SIZE:(index + 1) * SLOT_SIZE] = raw
    return bytes(data)


def decode(data: bytes, start: int = 0) -> TimerLogFileDecode:
    return decode_timerlog_bytes(data, path="mem", start=start)


def regions(account: FileAccount) -> list[tuple[int, int]]:
    return [(r.offset, r.length) for r in account.unreadable]


def checkpoint(last_read_ms: int, flush_pos: int = 0, queue_offset: int = 0):  # type: ignore[no-untyped-def]
    return decode_timercheck_bytes(timercheck_bytes(last_read_ms, flush_pos, queue_offset,
                                                    queue_offset, 0, 0, 1))


def dump(capsys, *argv: str) -> tuple[int, list[dict]]:  # type: ignore[no-untyped-def]
    code = main(["dump", *argv, "--json"])
    return code, json_lines(capsys.readouterr().out)


def tiles(rows: list[dict], size: int, item: str, length: int) -> None:
    """Items (``length`` bytes at ``file_position``) and regions cover [0, size) once."""
    position = 0
    for row in rows:
        if row["kind"] in ("region", item):
            offset = row["offset"] if row["kind"] == "region" else row["file_position"]
            step = row["length"] if row["kind"] == "region" else length
            assert offset == position, (row, position)
            position += step
    assert position == size


# --------------------------------------------------------------------------- timer log


def test_units_then_zero_tail_decode_field_exact() -> None:
    data = unit(offset=182_788) + unit(prev_pos=52, delay=3000, magic=MAGIC_DEFAULT | MAGIC_ROLL,
                                        offset=252_121, size=457) + bytes(500)
    got = decode(data, start=1_048_576)
    assert got.account.as_dict() == {"path": "mem", "size": len(data), "decoded": 104,
                                     "blank": 0, "zero_tail": 500, "unreadable": []}
    first, second = got.units()
    assert (first.position, first.prev_pos, first.magic, first.write_time_ms, first.delay_ms,
            first.commitlog_offset, first.commitlog_size, first.topic_hash, first.reserved) == (
        1_048_576, -1, 1, T0, 2000, 182_788, 441, HASH, 0)
    assert second.position == 1_048_576 + 52 and second.is_roll and not second.is_delete
    assert second.delivery_ms == T0 + 3000
    assert got.write_position == 104 and got.data_end == 104 and not got.is_finished


def test_blank_in_a_short_last_slot_finishes_the_file() -> None:
    # 3 units = 156 bytes; 44 left < 52 + 16, so the writer puts its blank at 156.
    data = finished_file([unit(), unit(prev_pos=0), unit(prev_pos=52)], 200)
    got = decode(data)
    assert (got.account.decoded, got.account.blank, got.account.zero_tail) == (156, 44, 0)
    assert got.blank_position == 156 and got.is_finished and got.recovery_complete


def test_blank_mid_file_counts_the_zeros_after_it_as_blank() -> None:
    data = finished_file([unit(), unit()], 1000)
    got = decode(data)
    assert (got.account.decoded, got.account.blank, got.account.zero_tail) == (104, 896, 0)
    assert got.count == 2 and got.write_position == 104


def test_blank_whose_length_does_not_reach_the_end_is_not_a_blank() -> None:
    data = unit() + blank(999) + bytes(200 - 52 - 16)
    got = decode(data)
    assert got.blank_position is None and got.count == 1
    assert regions(got.account) == [(52, 52)] and got.account.zero_tail == 200 - 104
    got.account.check()


def test_bytes_after_the_blank_are_blank_whatever_they_hold() -> None:
    """The broker's recovery breaks out of the file at the blank's magic and the writer
    moves its write position to the file end: nothing after the blank is ever read."""
    data = bytearray(finished_file([unit()], 300))
    data[100:104] = b"\xde\xad\xbe\xef"
    data[200:252] = unit(prev_pos=0)  # even a whole stale unit
    got = decode(bytes(data))
    assert regions(got.account) == [] and got.count == 1
    assert (got.account.blank, got.account.zero_tail) == (300 - 52, 0)


def test_a_torn_unit_at_the_end_of_the_file_is_unreadable() -> None:
    data = unit() + unit(prev_pos=0)[:30]  # a copy that caught the second unit half-done
    got = decode(data)
    assert got.count == 1 and regions(got.account) == [(52, 30)]
    assert got.account.unreadable[0].reason.startswith("torn tail: torn unit")
    assert got.write_position == 52


def test_a_unit_torn_inside_the_file_never_yields_values() -> None:
    # A crash flushed the first 16 bytes of a unit (size, prevPos, magic) and no more.
    torn = unit(prev_pos=0)[:16] + bytes(36)
    data = unit() + torn + unit(prev_pos=52) + bytes(104)
    got = decode(data)
    assert [u.position for u in got.units()] == [0, 104]
    assert regions(got.account) == [(52, 52)]
    assert got.account.zero_tail == 104


@pytest.mark.parametrize("bad", [
    unit(unit_size=40),  # bad size
    unit(magic=0x10 | MAGIC_DEFAULT),  # magic bit the broker does not know
    unit(size=0),  # commitlog size 0
    unit(offset=-5),  # negative commitlog offset
    unit(write_ms=0),  # no write time
])
def test_a_bad_unit_is_unreadable_and_later_units_still_decode(bad: bytes) -> None:
    data = unit() + bad + unit(prev_pos=0) + bytes(52)
    got = decode(data)
    assert [u.file_position for u in got.units()] == [0, 104]
    assert regions(got.account) == [(52, 52)]
    recovery_stops = bad[:4] != unit()[:4] or bad[12:16] != unit()[12:16]
    assert got.write_position == (52 if recovery_stops else 156)


def test_an_all_zero_hole_followed_by_units_is_unreadable() -> None:
    data = unit() + bytes(104) + unit() + bytes(52)
    got = decode(data)
    assert regions(got.account) == [(52, 104)]
    assert "hole" in got.account.unreadable[0].reason
    assert got.write_position == 52


def test_garbage_is_unreadable_never_values() -> None:
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    got = decode(data)
    got.account.check()
    assert got.count == 0 and got.account.unreadable_bytes == 10_000


def test_empty_and_all_zero_files() -> None:
    assert decode(b"").account.as_dict()["size"] == 0
    zeros = decode(bytes(1_048_576))
    assert zeros.count == 0 and zeros.account.zero_tail == 1_048_576


def test_the_arrow_batch_has_every_field_and_the_delivery_time() -> None:
    got = decode(unit(delay=2500, magic=MAGIC_DEFAULT | MAGIC_DELETE) + bytes(52), start=104)
    batch = got.to_record_batch()
    assert batch.schema == TIMERLOG_SCHEMA
    row = batch.to_pylist()[0]
    assert row["position"] == 104 and row["file_position"] == 0
    assert row["delivery_ms"] == T0 + 2500 and row["is_delete"] and not row["is_roll"]


def test_files_in_a_directory_and_typed_errors(tmp_path: Path) -> None:
    directory = tmp_path / "timerlog"
    directory.mkdir()
    (directory / segment_name(0)).write_bytes(finished_file([unit()], 200))
    (directory / segment_name(200)).write_bytes(unit(offset=9) + bytes(148))
    decodes = decode_timerlog(tmp_path)
    assert [d.start for d in decodes] == [0, 200]
    assert [u.position for d in decodes for u in d.units()] == [0, 200]
    assert segment_issues(list_timerlog(directory)) == []
    assert sum(b.num_rows for b in iter_record_batches(directory)) == 2
    assert recovery_end(decodes, 0) == 252  # past the blank, on to the zero tail
    with pytest.raises(NotAStoreFileError):
        decode_timerlog_file(directory / "not-a-segment")
    with pytest.raises(NotAStoreFileError):
        list_timerlog(tmp_path / "missing")


def test_recovery_stops_at_the_first_rejected_unit_after_the_flush_position() -> None:
    first = decode(finished_file([unit(), unit(unit_size=7), unit()], 300))
    second = decode(unit() + unit(unit_size=0, magic=0xFF) + unit() + bytes(52), start=300)
    assert recovery_end([first, second], 0) == 52  # the first file's bad unit
    assert recovery_end([first, second], 300) == 352  # recovery starts in the second file


# --------------------------------------------------------------------------- property


UNIT_FIELDS = st.tuples(
    st.integers(-1, 2**40), st.integers(0, 15), st.integers(1, 2**62),
    st.integers(-(2**31), 2**31 - 1), st.integers(0, 2**62), st.integers(1, 2**31 - 1),
    st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=st.lists(UNIT_FIELDS, max_size=30), finished=st.booleans(),
       spare=st.integers(0, 400), start_files=st.integers(0, 50))
def test_random_units_round_trip_field_exact(fields: list[tuple[int, ...]], finished: bool,
                                             spare: int, start_files: int) -> None:
    units = [unit(*f) for f in fields]
    body = b"".join(units)
    size = len(body) + spare + (16 if finished else 0)
    data = finished_file(units, size) if finished else body + bytes(spare)
    start = start_files * 1_048_576
    got = decode(data, start)
    got.account.check()
    assert got.account.size == len(data) and not got.account.unreadable
    decoded = [(u.prev_pos, u.magic, u.write_time_ms, u.delay_ms, u.commitlog_offset,
                u.commitlog_size, u.topic_hash, u.reserved) for u in got.units()]
    assert decoded == [tuple(f) for f in fields]
    assert [u.position for u in got.units()] == [start + 52 * i for i in range(len(fields))]
    assert got.account.decoded == len(body)
    assert got.account.blank == (size - len(body) if finished else 0)
    assert got.account.zero_tail == (0 if finished else spare)


@settings(max_examples=200, deadline=None)
@given(fields=st.lists(UNIT_FIELDS, min_size=1, max_size=12), spare=st.integers(0, 120),
       flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=6),
       cut=st.integers(0, 10**6))
def test_damaged_units_still_account_every_byte(fields: list[tuple[int, ...]], spare: int,
                                                flips: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(b"".join(unit(*f) for f in fields) + bytes(spare))
    for where, value in flips:
        data[where % len(data)] ^= value
    data = data[: cut % (len(data) + 1)]
    timerlog_target(bytes(data))  # the fuzz target's properties, on these bytes


# --------------------------------------------------------------------------- timer wheel


def test_wheel_lists_used_slots_and_counts_empty_ones() -> None:
    tick = 1_795_434_135
    data = wheel({tick % 16: slot(tick, 0, 52, 2), (tick + 3) % 16: slot(tick + 3, 104, 988, 10)})
    got = decode_timerwheel_bytes(data, path="w")
    assert got.slot_count == 16 and got.count == 2 and got.empty_slots == 14
    assert (got.account.decoded, got.account.blank) == (64, 14 * 32)
    first = next(got.slots())
    assert (first.slot, first.tick, first.time_ms, first.first_pos, first.last_pos,
            first.num) == (tick % 16, tick, tick * 1000, 0, 52, 2)
    assert got.get(tick * 1000 + 999) == first and got.get((tick + 16) * 1000) is None
    assert got.to_record_batch().schema == WHEEL_SCHEMA
    assert sum(n for _, n in got.empty_runs()) == 14
    assert got.issues  # not the stock size


def test_wheel_slots_that_contradict_the_format_are_unreadable() -> None:
    data = wheel({3: slot(20, 0, 52), 5: slot(-1, 0, 0), 7: slot(7, 100, 50)}) + b"\x01\x02"
    got = decode_timerwheel_bytes(data)
    assert got.count == 0  # 20 % 16 != 3, tick -1, lastPos < firstPos
    assert regions(got.account) == [(96, 32), (160, 32), (224, 32), (512, 2)]
    got.account.check()


def test_wheel_reads_a_default_size_file_without_a_python_loop(tmp_path: Path) -> None:
    path = tmp_path / "timerwheel"
    data = bytearray(DEFAULT_SLOT_COUNT * SLOT_SIZE)
    tick = 1_795_434_137
    index = tick % DEFAULT_SLOT_COUNT
    data[index * 32:(index + 1) * 32] = slot(tick, 156, 520, 4)
    path.write_bytes(bytes(data))
    got = read_timerwheel(tmp_path)  # the store root works too
    assert got.count == 1 and not got.issues and got.slot_count == 1_209_600
    assert got.get(tick * 1000).last_pos == 520
    with pytest.raises(NotAStoreFileError):
        read_timerwheel(tmp_path / "nothing")


# --------------------------------------------------------------------------- pending


def test_pending_is_from_the_checkpoint_read_tick_on() -> None:
    data = (unit(delay=1000, offset=10) + unit(delay=2000, offset=20)
            + unit(delay=2999, offset=30) + bytes(52))
    decodes = [decode(data)]
    result = pending_timers(decodes, checkpoint(T0 + 2000, flush_pos=156))
    assert [p.commitlog_offset for p in result.pending] == [20, 30]  # tick T0+2 s is unread
    assert result.delivered == 1 and result.dropped == 0
    assert [p.delivery_ms for p in result.pending] == [T0 + 2000, T0 + 2999]
    none = pending_timers(decodes, checkpoint(T0 + 3000, flush_pos=156))
    assert not none.pending and none.delivered == 3


def test_units_past_the_recovery_end_are_not_pending() -> None:
    data = unit(delay=9000, offset=1) + unit(unit_size=3) + unit(delay=9000, offset=2)
    result = pending_timers([decode(data + bytes(52))], checkpoint(T0, flush_pos=0))
    assert [p.commitlog_offset for p in result.pending] == [1]
    assert result.recovery_end == 52 and result.dropped == 1


def test_roll_and_delete_units() -> None:
    data = (unit(delay=5000, offset=100, magic=MAGIC_DEFAULT | MAGIC_ROLL)
            + unit(delay=7000, offset=200) + unit(delay=7000, offset=300)
            + unit(delay=7000, offset=400, magic=MAGIC_DEFAULT | MAGIC_DELETE) + bytes(52))
    decodes = [decode(data)]
    unknown = pending_timers(decodes, checkpoint(T0))
    assert [(p.commitlog_offset, p.roll, p.may_be_cancelled) for p in unknown.pending] == [
        (100, True, False), (200, False, True), (300, False, True)]
    assert unknown.delete_markers == 1
    props = {
        200: {"REAL_TOPIC": TOPIC, "UNIQ_KEY": "A"},
        300: {"REAL_TOPIC": TOPIC, "UNIQ_KEY": "B"},
        400: {TIMER_DEL_UNIQKEY: delete_key(TOPIC, "B")},
    }
    known = pending_timers(decodes, checkpoint(T0),
                           properties_of=lambda offset, size: props.get(offset))
    assert [p.commitlog_offset for p in known.pending] == [100, 200]
    assert [p.commitlog_offset for p in known.cancelled] == [300]


def test_findings_for_broken_chains_and_fields(tmp_path: Path) -> None:
    (tmp_path / "timerlog").mkdir()
    (tmp_path / "config").mkdir()
    (tmp_path / "timerlog" / segment_name(0)).write_bytes(
        unit() + unit(prev_pos=0, delay=9000) + unit(prev_pos=9999, reserved=1, magic=0)
        + bytes(52))
    (tmp_path / "config" / "timercheck").write_bytes(timercheck_bytes(T0, 156, 0, 0, 0, 0, 1))
    tick = (T0 + 2000) // 1000
    (tmp_path / "timerwheel").write_bytes(wheel({tick % 16: slot(tick, 0, 52)}))
    store = read_timer_store(tmp_path)
    checks = sorted((f.check, f.severity, f.offset) for f in check_timer_store(store))
    assert checks == [
        ("timerlog_chain", "error", 52),  # prevPos 0 holds another tick
        ("timerlog_chain", "error", 104),  # prevPos ahead of the unit
        ("timerlog_unit", "warning", 104),  # magic without DEFAULT
        ("timerlog_unit", "warning", 104),  # reserved != 0
        ("timerwheel_slot", "warning", (tick % 16) * 32),  # lastPos 52: another tick
    ]
    assert len(store.accounts) == 2 and all(a.balanced for a in store.accounts)


def test_a_store_with_unreadable_timer_files_reports_them_not_raises(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "timercheck").write_bytes(bytes(20))  # fewer than 4 fields
    (tmp_path / "timerwheel").mkdir()  # a directory where the wheel file belongs
    store = read_timer_store(tmp_path)
    assert store.checkpoint is None and store.wheel is None and store.pending() is None
    assert store.log == [] and store.unenqueued() == []
    assert [f.check for f in check_timer_store(store)] == ["timer_files"]
    assert read_timer_store(tmp_path / "nothing").accounts == []


# --------------------------------------------------------------------------- dumps, inventory


def test_dump_timerlog_tiles_the_file_with_the_blank_inline(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / segment_name(0)
    path.write_bytes(finished_file([unit(), unit(prev_pos=0)], 400))
    code, rows = dump(capsys, "timerlog", str(path))
    assert code == EXIT_OK
    tiles(rows, 400, "unit", TL_UNIT_SIZE)
    assert [r["kind"] for r in rows] == ["unit", "unit", "region", "account"]
    assert rows[2]["region"] == "blank" and rows[0]["delivery_ms"] == T0 + 2000
    assert rows[-1]["units"] == 2 and rows[-1]["blank_bytes"] == 400 - 104


def test_dump_timerlog_shows_damage_inline_and_exits_1(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / segment_name(0)
    path.write_bytes(unit() + b"\xff" * 52 + unit() + unit()[:20])
    code, rows = dump(capsys, "timerlog", str(path))
    assert code == EXIT_FINDINGS
    tiles(rows, 176, "unit", TL_UNIT_SIZE)
    assert [r.get("region", r["kind"]) for r in rows] == [
        "unit", "unreadable", "unit", "unreadable", "account"]
    main(["dump", "timerlog", str(path)])
    text = capsys.readouterr().out.splitlines()
    assert text[1].startswith("-- unreadable: file: ") and text[-1].startswith("account: 1 file")


def test_dump_timerwheel_lists_used_slots_and_counts_the_rest(capsys, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "timerwheel"
    path.write_bytes(wheel({2: slot(18, 0, 52), 9: slot(9, 104, 104), 12: slot(1, 0, 0)}))
    code, rows = dump(capsys, "timerwheel", str(path))
    assert code == EXIT_FINDINGS  # slot 12 holds tick 1: unreadable
    tiles(rows, 16 * 32, "slot", SLOT_SIZE)
    assert [r["slot"] for r in rows if r["kind"] == "slot"] == [2, 9]
    assert rows[-1]["slots"] == 2 and rows[-1]["blank_bytes"] == 13 * 32


def test_inventory_counts_timer_files_as_decoded() -> None:
    log = classify(Path("timerlog") / segment_name(0), 100)
    assert log.kind is FileKind.TIMER_LOG and log.decoded
    assert classify(Path("timerwheel"), 38_707_200).decoded
    assert classify(Path("timerlog") / "junk", 1).kind is FileKind.UNKNOWN


# --------------------------------------------------------------------------- real broker


@pytest.fixture(scope="module", params=["v5-clean", "v5-killed"])
def timer_variant(request, broker_stores) -> Path:  # type: ignore[no-untyped-def]
    return broker_stores[request.param]


def _truth(variant: Path, name: str = "messages.jsonl") -> list[dict]:
    return [json.loads(line) for line in
            (variant / "truth" / name).read_text(encoding="utf-8").splitlines() if line]


@pytest.mark.broker
def test_real_timer_units_match_their_records_field_by_field(timer_variant: Path) -> None:
    store = timer_variant / "store"
    timers = [m for m in _truth(timer_variant) if m["kind"] == "timer" and m["acked"]]
    assert len(timers) == 20
    decodes = decode_timerlog(store)
    units = {u.commitlog_offset: u for d in decodes for u in d.units()}
    assert len(units) == sum(d.count for d in decodes) == 20
    for truth in timers:
        assert truth["storedTopic"] == "rmq_sys_wheel_timer"
        offset = decode_offset_msg_id(truth["offsetMsgId"]).commitlog_offset
        found = units[offset]
        record = read_record_at(store / "commitlog", offset)
        assert record.topic == "rmq_sys_wheel_timer" and record.queue_offset == truth[
            "queueOffset"]
        assert found.commitlog_size == record.total_size
        assert found.delivery_ms == int(record.properties["TIMER_OUT_MS"])
        assert record.properties["REAL_TOPIC"] == truth["topic"]
        assert found.topic_hash == java_string_hash(truth["topic"])
        assert found.magic == MAGIC_DEFAULT and found.reserved == 0
        # the broker floors the delivery time to its 1 s precision (HookUtils)
        expected = truth["sendEndMs"] + truth["timerDelaySec"] * 1000
        assert 0 <= expected - found.delivery_ms <= 1000 + (truth["sendEndMs"]
                                                            - truth["sendStartMs"])
        assert found.write_time_ms % 1000 == 0 and found.write_time_ms <= found.delivery_ms


@pytest.mark.broker
def test_real_timer_files_account_every_byte_and_nothing_is_pending(timer_variant: Path
                                                                    ) -> None:
    store = timer_variant / "store"
    timer_store = read_timer_store(store)
    for account in timer_store.accounts:
        assert account.balanced and not account.unreadable, account.as_dict()
    assert timer_store.wheel is not None and timer_store.checkpoint is not None
    assert timer_store.wheel.slot_count == DEFAULT_SLOT_COUNT and not timer_store.wheel.issues
    # every unit sits in the chain of its wheel slot (lastPos -> prevPos -> ... -> -1)
    by_position = {u.position: u for d in timer_store.log for u in d.units()}
    chained = set()
    for wheel_slot in timer_store.wheel.slots():
        position = wheel_slot.last_pos
        while position != -1:
            found = by_position[position]
            assert found.delivery_ms // 1000 == wheel_slot.tick
            chained.add(position)
            position = found.prev_pos
    assert chained == set(by_position)
    assert timer_store.checkpoint.last_timer_log_flush_pos == 20 * TL_UNIT_SIZE
    result = timer_store.pending()
    assert result is not None and result.pending == [] and result.delivered == 20
    assert unenqueued_timer_records(store, timer_store.checkpoint, timer_store.log) == []
    assert requeue_start(store, timer_store.checkpoint, timer_store.log) == 20
    findings = check_timer_store(timer_store,
                                 properties_of=commitlog_properties(store / "commitlog"))
    assert findings == []


@pytest.mark.broker
def test_real_timer_dumps_exit_0(capsys, timer_variant: Path) -> None:  # type: ignore[no-untyped-def]
    store = timer_variant / "store"
    code, rows = dump(capsys, "timerlog", str(store / "timerlog"))
    assert code == EXIT_OK and rows[-1]["units"] == 20
    tiles(rows, (store / "timerlog" / segment_name(0)).stat().st_size, "unit", TL_UNIT_SIZE)
    code, rows = dump(capsys, "timerwheel", str(store / "timerwheel"))
    assert code == EXIT_OK and rows[-1]["decoded_bytes"] == rows[-1]["slots"] * SLOT_SIZE
    tiles(rows, 38_707_200, "slot", SLOT_SIZE)
    inventory = take_inventory(store)
    assert all(f.decoded for f in inventory.files
               if f.kind in (FileKind.TIMER_LOG, FileKind.TIMER_WHEEL))


# The v5-features store (tests/broker_harness, built on request) stops its broker while timer
# messages are still waiting (~1 h out); truth/timers.jsonl lists them.
FEATURES = "v5-features"


def _features_store(stores) -> Path:  # type: ignore[no-untyped-def]
    variant = stores.default_cache_dir() / FEATURES
    if not (variant / "COMPLETE").is_file() or not (variant / "truth" / "timers.jsonl").is_file():
        pytest.skip(f"{FEATURES} store not built (tests/broker_harness/stores.py --variants "
                    f"{FEATURES})")
    return variant


@pytest.mark.broker
def test_v5_features_pending_timers_match_the_truth(store_harness) -> None:  # type: ignore[no-untyped-def]
    """truth/timers.jsonl (FeaturesWorkload): one row per timer message, ``plan`` "pending"
    (~1 h out, still waiting at shutdown) or "fire" (a few seconds), ``fired`` when the
    consumer received it, ``wheelOffsetMsgId`` / ``timerOutMs`` of its timer record."""
    variant = _features_store(store_harness)
    store = variant / "store"
    rows = [r for r in _truth(variant, "timers.jsonl") if r.get("acked")]
    assert any(r["plan"] == "pending" for r in rows), "no pending timer in the truth"

    def offset(row: dict) -> int:
        return decode_offset_msg_id(row["wheelOffsetMsgId"]).commitlog_offset

    by_offset = {offset(r): r for r in rows}
    expected = {o for o, r in by_offset.items() if r["plan"] == "pending"}
    timer_store = read_timer_store(store)
    assert timer_store.checkpoint is not None
    result = timer_store.pending()
    assert result is not None
    found = {p.commitlog_offset for p in result.pending}
    found |= {u.commitlog_offset
              for u in unenqueued_timer_records(store, timer_store.checkpoint, timer_store.log)}
    assert expected <= found, sorted(expected - found)
    # anything else still pending must be a near timer the consumer never received
    assert all(not by_offset[o].get("fired") for o in found - expected if o in by_offset)
    assert found <= set(by_offset), sorted(found - set(by_offset))
    for entry in result.pending:
        truth = by_offset[entry.commitlog_offset]
        assert entry.delivery_ms == truth["timerOutMs"] and not entry.roll
        assert entry.delivery_ms >= timer_store.checkpoint.last_read_time_ms
        assert entry.topic_hash == java_string_hash(truth["topic"])
    for account in timer_store.accounts:
        assert account.balanced and not account.unreadable, account.as_dict()
