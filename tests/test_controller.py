"""Controller mode: ``epochFileCheckpoint`` (+ ``.bak``) and ``brokerIdentity`` (rmqlib.controller).

Property tests hold the epoch file decoder to its format (round trip with the CRC; any bytes
give entries, a rejection or a typed error, every byte accounted) and to the broker's choice
between the file and its ``.bak``. The ``broker`` tests read the ``v5-controller`` store, a
real 5.5.0 broker in controller mode that was stopped and re-elected once, against the admin
API's epoch cache and SyncStateSet, the messages it stored in each term, and the verdicts of
the broker's own readers (``EpochFileCache``, ``BrokerMetadata``) on damaged copies.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rmqlib.commitlog.records import read_record_at, scan_store
from rmqlib.config import load_config_json, parse_data_version
from rmqlib.controller import (
    EPOCH_FILE,
    IDENTITY_FILE,
    LAST_EPOCH_END_OFFSET,
    EpochEntry,
    EpochFile,
    check_epochs,
    check_identity,
    decode_epoch_bytes,
    decode_identity_bytes,
    encode_epoch_file,
    epoch_at,
    read_broker_identity,
    read_epoch_file,
)
from rmqlib.controller.epochs import parse_java_int, split_java
from rmqlib.errors import CorruptDataError, NotAStoreFileError, StoreError

EXAMPLES = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
INT_MAX, LONG_MAX = 2**31 - 1, 2**63 - 1
BAK = EPOCH_FILE + ".bak"


def epoch_lists(min_size: int = 1) -> st.SearchStrategy[list[tuple[int, int]]]:
    """Strictly increasing (epoch, startOffset) pairs, as EpochFileCache.appendEntry keeps them."""
    def build(steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
        pairs, epoch, offset = [], 0, -1
        for epoch_step, offset_step in steps:
            epoch, offset = epoch + epoch_step, offset + offset_step
            pairs.append((epoch, offset))
        return [(e, o) for e, o in pairs if e <= INT_MAX and o <= LONG_MAX]
    steps = st.tuples(st.integers(1, 2**28), st.integers(1, 2**60))
    return st.lists(steps, min_size=min_size, max_size=12).map(build).filter(
        lambda pairs: len(pairs) >= min_size)


def store_files(directory: Path, main: bytes | None, bak: bytes | None) -> Path:
    """Writes the main file and its .bak (None: absent); returns the main path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / EPOCH_FILE
    for name, data in ((EPOCH_FILE, main), (BAK, bak)):
        target = directory / name
        if data is None:
            target.unlink(missing_ok=True)
        else:
            target.write_bytes(data)
    return path


def read_bytes_pair(main: bytes | None, bak: bytes | None) -> EpochFile:
    with tempfile.TemporaryDirectory() as tmp:
        return read_epoch_file(store_files(Path(tmp), main, bak))


def pairs(entries: list[EpochEntry]) -> list[tuple[int, int]]:
    return [(entry.epoch, entry.start_offset) for entry in entries]


# --------------------------------------------------------------------------- format


def test_the_bytes_a_real_broker_wrote() -> None:
    """A fresh store's first term (the research run and the harness alike)."""
    assert encode_epoch_file([(1, 0)]) == b"1\n1725254278\n1-0\n"
    copy = decode_epoch_bytes(b"2\n1021186694\n1-0\n5-707447\n")
    assert copy.accepted and copy.crc_matched is True
    assert [(e.epoch, e.start_offset, e.end_offset) for e in copy.entries] == [
        (1, 0, 707447), (5, 707447, None)]
    assert [(e.line, e.position) for e in copy.entries] == [(3, 13), (4, 17)]


@EXAMPLES
@given(epoch_lists())
def test_round_trip(entries: list[tuple[int, int]]) -> None:
    data = encode_epoch_file(entries)
    copy = decode_epoch_bytes(data)
    assert copy.accepted and copy.crc_matched is True
    assert copy.header_count == len(entries)
    assert pairs(copy.entries) == entries
    ends = [e.end_offset for e in copy.entries]
    assert ends == [start for _, start in entries[1:]] + [None]
    assert copy.account.decoded == len(data) and copy.account.balanced
    assert check_epochs(copy.entries) == []
    epoch_file = read_bytes_pair(data, None)
    assert (epoch_file.source, pairs(epoch_file.entries)) == ("main", entries)


def mutated(data: bytes) -> st.SearchStrategy[bytes]:
    """A valid file with one byte changed, deleted or inserted, or cut short."""
    position = st.integers(0, max(len(data) - 1, 0))
    byte = st.integers(0, 255)
    return st.one_of(
        st.tuples(position, byte).map(lambda pb: data[:pb[0]] + bytes([pb[1]]) + data[pb[0] + 1:]),
        position.map(lambda p: data[:p] + data[p + 1:]),
        st.tuples(position, byte).map(lambda pb: data[:pb[0]] + bytes([pb[1]]) + data[pb[0]:]),
        position.map(lambda p: data[:p]),
    )


any_file = st.one_of(
    st.binary(max_size=64),
    st.text(alphabet="0123456789-\n\r+ x\u0661", max_size=40).map(str.encode),
    epoch_lists().map(encode_epoch_file).flatmap(mutated),
)


@EXAMPLES
@given(any_file)
def test_any_bytes_decode_or_fail_typed(data: bytes) -> None:
    copy = decode_epoch_bytes(data)
    assert copy.account.balanced
    if copy.accepted:
        assert copy.header_count == len(copy.lines)
        assert copy.crc_matched in (True, None)
        assert copy.account.decoded + copy.account.unreadable_bytes == len(data)
    else:
        assert copy.account.unreadable_bytes == len(data)
        assert (copy.rejected is None) != (copy.fatal is None)
    if copy.fatal is not None:
        assert isinstance(copy.fatal, CorruptDataError)
        assert 0 <= copy.fatal.offset <= len(data)


@EXAMPLES
@given(st.one_of(st.none(), any_file), st.one_of(st.none(), any_file))
def test_any_pair_loads_or_raises_a_store_error(main: bytes | None, bak: bytes | None) -> None:
    try:
        epoch_file = read_bytes_pair(main, bak)
    except StoreError as error:
        assert isinstance(error, CorruptDataError | NotAStoreFileError)
        assert isinstance(error, NotAStoreFileError) == (main is None and bak is None)
        return
    assert epoch_file.source in ("main", "bak", "none")
    assert all(account.balanced for account in epoch_file.accounts)
    check_epochs(epoch_file, 0, 2**40, state_version=3)
    used = {"main": epoch_file.main, "bak": epoch_file.bak}.get(epoch_file.source)
    assert epoch_file.entries == (used.entries if used else [])


# --------------------------------------------------------------------------- the .bak fallback

#: One file in each state CheckpointFile.read distinguishes, and what the broker does with it:
#: "ok" loads, "empty" (0 entries) and "rejected" (IOException) fall back to the .bak, "fatal"
#: (NumberFormatException) stops the broker, None is a missing file.
def other_crc(data: bytes) -> bytes:
    """The same file with a different (non-zero, in range) header CRC."""
    count, crc, rest = data.split(b"\n", 2)
    return b"\n".join([count, str(int(crc) % (2**31 - 1) + 1).encode(), rest])


STATES: dict[str, Callable[[list[tuple[int, int]]], bytes]] = {
    "ok": encode_epoch_file,
    "empty": lambda entries: b"0\n0\n",
    "rejected-crc": lambda entries: other_crc(encode_epoch_file(entries)),
    "rejected-count": lambda entries: b"9" + encode_epoch_file(entries),
    "rejected-utf8": lambda entries: encode_epoch_file(entries) + b"\xff",
    "fatal-header": lambda entries: b"x" + encode_epoch_file(entries),
    "fatal-entry": lambda entries: encode_epoch_file(entries)[:-2] + b"x\n",
    "fatal-empty-file": lambda entries: b"",
}


def expected_outcome(main_state: str | None, bak_state: str | None) -> str:
    """CheckpointFile.read + EpochFileCache.initCacheFromFile, as a table."""
    if main_state is not None and main_state.startswith("fatal"):
        return "error"
    if main_state == "ok":
        return "main"
    if bak_state is None:
        return "none"
    if bak_state.startswith("fatal"):
        return "error"
    if bak_state.startswith("rejected"):
        return "none"
    return "bak"


@EXAMPLES
@given(epoch_lists(), epoch_lists(),
       st.sampled_from([None, *STATES]), st.sampled_from([None, *STATES]))
def test_fallback_follows_checkpoint_file_read(main_entries: list[tuple[int, int]],
                                               bak_entries: list[tuple[int, int]],
                                               main_state: str | None,
                                               bak_state: str | None) -> None:
    assume(main_state is not None or bak_state is not None)
    main = None if main_state is None else STATES[main_state](main_entries)
    bak = None if bak_state is None else STATES[bak_state](bak_entries)
    outcome = expected_outcome(main_state, bak_state)
    if outcome == "error":
        with pytest.raises(CorruptDataError, match="NumberFormatException"):
            read_bytes_pair(main, bak)
        return
    epoch_file = read_bytes_pair(main, bak)
    assert epoch_file.source == outcome
    want = {"main": main_entries, "bak": bak_entries if bak_state == "ok" else [],
            "none": []}[outcome]
    assert pairs(epoch_file.entries) == want
    assert (epoch_file.fallback is None) == (outcome == "main")
    codes = {finding.code for finding in epoch_file.findings}
    if outcome == "bak":
        assert "epoch_file_fallback" in codes
    if outcome == "none":
        assert codes & {"epoch_file_empty", "epoch_file_unusable"}


def test_fallback_reasons_are_said(tmp_path: Path) -> None:
    entries = [(1, 0), (5, 707447)]
    good = encode_epoch_file(entries)
    old = encode_epoch_file(entries[:1])
    torn = good[:-3]  # "5-707" with the old CRC
    epoch_file = read_epoch_file(store_files(tmp_path, torn, old))
    assert epoch_file.source == "bak" and pairs(epoch_file.entries) == [(1, 0)]
    assert epoch_file.used_path == str(tmp_path / BAK)
    assert "CRC" in epoch_file.fallback and epoch_file.crc_matched is True
    assert epoch_file.main.crc_matched is False
    assert epoch_file.main.account.unreadable_bytes == len(torn)

    missing = read_epoch_file(store_files(tmp_path, None, old))
    assert (missing.source, missing.fallback, missing.main) == ("bak", "is missing", None)

    with pytest.raises(NotAStoreFileError):
        read_epoch_file(store_files(tmp_path, None, None))


def test_a_non_integer_field_stops_the_broker(tmp_path: Path) -> None:
    """No fallback: NumberFormatException is no IOException. The error names the line's bytes."""
    data = b"2\n1021186694\n1-0\n5-7074x7\n"
    store_files(tmp_path, data, encode_epoch_file([(1, 0)]))
    with pytest.raises(CorruptDataError) as caught:
        read_epoch_file(tmp_path / EPOCH_FILE)
    assert (caught.value.offset, caught.value.length) == (17, 8)
    assert caught.value.path == str(tmp_path / EPOCH_FILE)
    empty = decode_epoch_bytes(b"")
    assert empty.fatal is not None and "no count line" in empty.fatal.reason


def test_bak_health_is_reported_when_the_main_file_is_used() -> None:
    good = encode_epoch_file([(1, 0), (5, 100)])
    assert read_bytes_pair(good, encode_epoch_file([(1, 0)])).findings == []
    unrelated = read_bytes_pair(good, encode_epoch_file([(2, 0)]))
    assert [f.code for f in unrelated.findings] == ["epoch_bak_unrelated"]
    garbled = read_bytes_pair(good, b"x\n")
    assert [f.code for f in garbled.findings] == ["epoch_bak_unusable"]


def test_java_line_and_number_rules() -> None:
    """What BufferedReader.readLine, String.split and parseInt/parseLong accept."""
    entries = [(1, 0), (5, 707447)]
    body = encode_epoch_file(entries)
    for variant in (body.replace(b"\n", b"\r\n"), body.replace(b"\n", b"\r"), body[:-1]):
        assert pairs(decode_epoch_bytes(variant).entries) == entries
    skipped = decode_epoch_bytes(b"1\n0\n1-0\njunk\n")  # CRC 0: unchecked
    assert skipped.accepted and [s.text for s in skipped.skipped] == ["junk"]
    assert skipped.account.unreadable[0].offset == 8
    assert parse_java_int("+5") == 5 and parse_java_int("-0") == 0
    assert parse_java_int("\u0661\u0662") == 12 and parse_java_int("\uff17") == 7
    for bad in ("", "+", " 5", "5 ", "1_0", "\U0001d7cf", "2147483648"):
        assert parse_java_int(bad) is None, bad
    assert parse_java_int("9223372036854775807", 64) == LONG_MAX
    assert parse_java_int("9223372036854775808", 64) is None
    assert split_java("5-", "-") == ["5"] and split_java("-", "-") == []
    assert split_java("", "-") == [""] and split_java("1--0", "-") == ["1", "", "0"]


# --------------------------------------------------------------------------- checks


def entries_of(*pairs_: tuple[int, int]) -> list[EpochEntry]:
    return decode_epoch_bytes(encode_epoch_file(list(pairs_))).entries


def codes(findings: list) -> list[str]:
    return [finding.code for finding in findings]


def test_check_epochs_against_the_commitlog() -> None:
    history = entries_of((1, 0), (5, 700))
    assert check_epochs(history, 0, 1000) == []
    assert codes(check_epochs(history, 0, 700)) == ["epoch_empty_term"]
    assert codes(check_epochs(history, 0, 600)) == ["epoch_beyond_commitlog"]
    assert codes(check_epochs(history, 100, 1000)) == ["epoch_retention_straddle"]
    assert codes(check_epochs(history, 800, 1000)) == ["epoch_retention_straddle",
                                                       "epoch_stale_prefix"]
    assert codes(check_epochs(entries_of((3, 500), (5, 700)), 0, 1000)) == [
        "epoch_uncovered_prefix"]
    assert codes(check_epochs(history, 0, 1000, state_version=5)) == []
    assert codes(check_epochs(history, 0, 1000, state_version=8)) == ["epoch_later_term_empty"]
    assert codes(check_epochs(history, 0, 1000, state_version=4)) == ["epoch_state_version"]
    assert codes(check_epochs([], 0, 1000)) == ["epoch_no_entries"]
    assert check_epochs([], 0, 0) == []


def test_check_epochs_order() -> None:
    by_hand = [EpochEntry(1, 0), EpochEntry(1, 10), EpochEntry(2, 5), EpochEntry(0, 20)]
    assert codes(check_epochs(by_hand)) == [
        "epoch_below_one", "epoch_not_increasing", "epoch_offset_not_increasing",
        "epoch_not_increasing"]
    # written out of order with a valid CRC: the broker sorts by epoch, ends follow the file
    reversed_file = read_bytes_pair(encode_epoch_file([(5, 700), (1, 0)]), None)
    assert [(e.epoch, e.end_offset) for e in reversed_file.entries] == [(1, None), (5, 0)]
    assert set(codes(check_epochs(reversed_file))) == {"epoch_line_order", "epoch_end_mismatch"}
    duplicate = read_bytes_pair(encode_epoch_file([(1, 0), (5, 700), (5, 700)]), None)
    assert codes(check_epochs(duplicate)) == ["epoch_duplicate"]


def test_epoch_at() -> None:
    history = entries_of((1, 0), (5, 700))
    assert epoch_at(history, 0).epoch == 1 and epoch_at(history, 699).epoch == 1
    assert epoch_at(history, 700).epoch == 5 and epoch_at(history, 10**12).epoch == 5
    assert epoch_at(entries_of((3, 500)), 499) is None


# --------------------------------------------------------------------------- brokerIdentity

names = st.text(st.characters(blacklist_characters="#", blacklist_categories=["Cs"]),
                min_size=1, max_size=20)


@EXAMPLES
@given(names, names, st.integers(1, LONG_MAX))
def test_identity_round_trip(cluster: str, name: str, broker_id: int) -> None:
    data = f"{cluster}#{name}#{broker_id}".encode()
    identity = decode_identity_bytes(data)
    assert (identity.cluster, identity.broker_name, identity.broker_id) == (cluster, name,
                                                                            broker_id)
    assert identity.account.decoded == len(data) and identity.issues == []
    temp = decode_identity_bytes(data + b"#127.0.0.1:10911;1700000000000", temp=True)
    assert temp.register_address == "127.0.0.1:10911"
    assert temp.register_time_ms == 1_700_000_000_000


@EXAMPLES
@given(st.binary(max_size=48), st.booleans())
def test_identity_any_bytes(data: bytes, temp: bool) -> None:
    try:
        identity = decode_identity_bytes(data, temp=temp)
    except CorruptDataError as error:
        assert error.offset is not None and 0 <= error.offset <= len(data)
        return
    assert identity.cluster and identity.broker_name
    assert identity.account.balanced


def test_identity_rules(tmp_path: Path) -> None:
    for bad in (b"c#b#1\n", b"c#b", b"#b#1", b"c#b#x", b""):
        with pytest.raises(CorruptDataError, match="registers anew"):
            decode_identity_bytes(bad)
    extra = decode_identity_bytes(b"c#b#+7#more#")
    assert extra.broker_id == 7 and "extra" in extra.issues[0]
    (tmp_path / "brokerIdentity-temp").write_bytes(b"c#b#2#127.0.0.1:1;5")
    temp = read_broker_identity(tmp_path / "brokerIdentity-temp")
    assert temp.temp and temp.register_check_code == "127.0.0.1:1;5"
    assert codes(check_identity(temp, cluster="c", broker_name="other")) == [
        "identity_registration_pending", "identity_mismatch"]
    with pytest.raises(NotAStoreFileError):
        read_broker_identity(tmp_path / IDENTITY_FILE)


# --------------------------------------------------------------------------- the real broker


def truth(store_dir: Path, name: str) -> dict:
    return json.loads((store_dir / "truth" / name).read_text(encoding="utf-8"))


def truth_lines(store_dir: Path, name: str) -> list[dict]:
    text = (store_dir / "truth" / name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.split("\n") if line]


def view(store_dir: Path, tag: str) -> dict:
    return next(v for v in truth(store_dir, "controller.json")["views"] if v["tag"] == tag)


def admin_entries(epoch_cache: dict) -> list[tuple[int, int, int | None]]:
    return [(e["epoch"], e["startOffset"],
             None if e["endOffset"] == LAST_EPOCH_END_OFFSET else e["endOffset"])
            for e in epoch_cache["epochList"]]


def triples(entries: list[EpochEntry]) -> list[tuple[int, int, int | None]]:
    return [(e.epoch, e.start_offset, e.end_offset) for e in entries]


@pytest.mark.broker
def test_the_epoch_file_is_the_brokers_epoch_cache(controller_store: Path) -> None:
    store = controller_store / "store"
    epoch_file = read_epoch_file(store / EPOCH_FILE)
    cache = view(controller_store, "run2-beforeStop")["epochCache"]
    assert epoch_file.source == "main" and epoch_file.findings == []
    assert epoch_file.crc_matched is True and epoch_file.header_count == 2
    assert triples(epoch_file.entries) == admin_entries(cache)
    scan = scan_store(store / "commitlog")
    records = list(scan)
    assert scan.logical_end == cache["maxOffset"]
    assert check_epochs(epoch_file, records[0].physical_offset, scan.logical_end,
                        state_version=topics_state_version(store)) == []
    # every epoch boundary is a message boundary (the commitlog's end when the term began)
    for entry in epoch_file.entries:
        assert read_record_at(store / "commitlog", entry.start_offset).physical_offset == \
            entry.start_offset


def topics_state_version(store: Path) -> int:
    document = load_config_json(store / "config" / "topics.json")
    return parse_data_version(document.data).state_version


@pytest.mark.broker
def test_epochs_have_gaps_and_the_file_keeps_what_was_written(controller_store: Path) -> None:
    """The controller raised the epoch on each failed re-election after a stop (1 -> 4 -> 5 -> 8):
    the file holds the terms the broker wrote in, topics.json the last role change."""
    controller = truth(controller_store, "controller.json")
    by_run = controller["masterEpochByRun"]
    epochs = [e.epoch for e in read_epoch_file(controller_store / "store" / EPOCH_FILE).entries]
    assert epochs == [by_run["run1"], by_run["run2"]] and epochs[0] == 1
    after_first_stop = controller["run1Shutdown"]["controllerAfterStop"]["inSyncStateData"]
    assert after_first_stop["masterBrokerId"] is None
    assert epochs[0] < after_first_stop["masterEpoch"] < epochs[1]
    assert topics_state_version(controller_store / "store") == epochs[1]


@pytest.mark.broker
def test_the_first_run_and_the_bak(controller_store: Path) -> None:
    """After the first stop: one epoch, no .bak; the restart's rewrite kept that content as .bak."""
    first = controller_store / "snapshots" / "run1" / "store"
    epoch_file = read_epoch_file(first / EPOCH_FILE)
    assert (epoch_file.source, epoch_file.bak) == ("main", None)
    assert triples(epoch_file.entries) == admin_entries(
        view(controller_store, "run1-beforeStop")["epochCache"])
    assert (first / EPOCH_FILE).read_bytes() == b"1\n1725254278\n1-0\n"
    assert (first / EPOCH_FILE).read_bytes() == \
        (controller_store / "store" / BAK).read_bytes()


@pytest.mark.broker
def test_every_message_lies_in_the_epoch_it_was_sent_in(controller_store: Path) -> None:
    entries = read_epoch_file(controller_store / "store" / EPOCH_FILE).entries
    messages = [m for m in truth_lines(controller_store, "messages.jsonl") if m["acked"]]
    assert {m["brokerRun"] for m in messages} == {1, 2}
    for message in messages:
        entry = epoch_at(entries, message["commitLogOffset"])
        assert entry is not None and entry.epoch == message["masterEpoch"], message["seq"]
    second = min(m["commitLogOffset"] for m in messages if m["brokerRun"] == 2)
    assert second == entries[1].start_offset  # the restart's first write starts the new term


@pytest.mark.broker
def test_broker_identity_is_the_controller_assigned_replica(controller_store: Path) -> None:
    run = truth(controller_store, "run.json")
    identity = read_broker_identity(controller_store / "store" / IDENTITY_FILE)
    replicas = view(controller_store, "run2-beforeStop")["inSyncStateData"]
    assert identity.broker_id == replicas["masterBrokerId"] == 1
    assert [r["brokerId"] for r in replicas["inSyncReplicas"]] == [identity.broker_id]
    assert (identity.cluster, identity.broker_name) == (run["clusterName"], run["brokerName"])
    assert check_identity(identity, cluster=run["clusterName"],
                          broker_name=run["brokerName"]) == []
    assert view(controller_store, "run2-beforeStop")["epochCache"]["brokerId"] == 0  # as master
    assert not (controller_store / "store" / "brokerIdentity-temp").exists()
    assert not (controller_store / "store" / "brokerIdentity.bak").exists()


@pytest.mark.broker
def test_a_changed_byte_falls_back_like_the_broker(controller_store: Path, tmp_path: Path) -> None:
    store = controller_store / "store"
    for name in (EPOCH_FILE, BAK):
        shutil.copy(store / name, tmp_path / name)
    data = bytearray((tmp_path / EPOCH_FILE).read_bytes())
    crc_digit = data.index(b"\n", 2) - 1
    data[crc_digit] = ord("0") + (data[crc_digit] - ord("0") + 1) % 10
    (tmp_path / EPOCH_FILE).write_bytes(bytes(data))
    epoch_file = read_epoch_file(tmp_path / EPOCH_FILE)
    assert epoch_file.source == "bak" and pairs(epoch_file.entries) == [(1, 0)]
    assert "CRC" in epoch_file.fallback
    data[-2] = ord("x")  # an offset digit: NumberFormatException, no fallback
    (tmp_path / EPOCH_FILE).write_bytes(bytes(data))
    with pytest.raises(CorruptDataError) as caught:
        read_epoch_file(tmp_path / EPOCH_FILE)
    assert caught.value.offset == data.rindex(b"\n", 0, len(data) - 1) + 1


@pytest.mark.broker
def test_the_brokers_own_reader_on_damaged_copies(controller_store: Path, tmp_path: Path) -> None:
    """~360 copies of the real files, each damaged once, read by 5.5.0's EpochFileCache in the
    harness: rmqlib loads the same entries (from the same file) or raises where it threw."""
    cases = truth_lines(controller_store, "epoch_reader_cases.jsonl")
    assert len(cases) > 300
    for number, case in enumerate(cases):
        main = None if case["main"] is None else bytes.fromhex(case["main"])
        bak = None if case["bak"] is None else bytes.fromhex(case["bak"])
        path = store_files(tmp_path / str(number), main, bak)
        if case["outcome"] == "threw":
            assert case["exception"] == "java.lang.NumberFormatException"
            with pytest.raises(CorruptDataError):
                read_epoch_file(path)
            continue
        if main is None and bak is None:
            with pytest.raises(NotAStoreFileError):
                read_epoch_file(path)
            continue
        epoch_file = read_epoch_file(path)
        assert triples(epoch_file.entries) == admin_entries({"epochList": case["entries"]}), \
            case["case"]
        if case["returned"] is False:  # both files rejected: initCacheFromFile returned false
            assert epoch_file.source == "none", case["case"]


@pytest.mark.broker
def test_the_brokers_identity_reader_on_damaged_copies(controller_store: Path) -> None:
    for case in truth_lines(controller_store, "identity_reader_cases.jsonl"):
        data = bytes.fromhex(case["data"])
        if not (case["outcome"] == "returned" and case["isLoaded"]):
            with pytest.raises(CorruptDataError):
                decode_identity_bytes(data, temp=case["temp"])
            continue
        identity = decode_identity_bytes(data, temp=case["temp"])
        assert (identity.cluster, identity.broker_name, identity.broker_id,
                identity.register_check_code) == (case["clusterName"], case["brokerName"],
                                                  case["brokerId"], case["registerCheckCode"])


@pytest.mark.broker
def test_the_broker_itself_on_damaged_epoch_files(controller_store: Path, tmp_path: Path) -> None:
    """The harness started the real broker twice more on scratch copies of the final store: an
    empty epoch file stopped it (exit 255, NumberFormatException, the .bak untouched), a broken
    CRC made it load the .bak and, re-elected, rewrite the history from that: run 2's term is
    gone and its messages now lie in epoch 1. rmqlib predicts both from the bytes."""
    starts = {d["case"]: d for d in truth(controller_store, "controller.json")["damagedStarts"]}
    empty = starts["empty-epoch-file"]
    assert (empty["started"], empty["exitCode"]) == (False, 255)
    assert "NumberFormatException" in empty["outputLines"][0]
    with pytest.raises(CorruptDataError, match="no count line"):
        read_bytes_pair(b"", bytes.fromhex(empty["bakHex"]))

    broken = starts["epoch-file-crc-broken"]
    predicted = read_bytes_pair(bytes.fromhex(broken["epochFileHex"]),
                                bytes.fromhex(broken["bakHex"]))
    assert predicted.source == "bak"
    loaded = admin_entries(broken["epochCache"])
    assert [(e, s) for e, s, _ in loaded[:-1]] == pairs(predicted.entries)
    new_epoch, new_start, _ = loaded[-1]
    assert new_start == broken["epochCache"]["maxOffset"] == \
        view(controller_store, "run2-beforeStop")["epochCache"]["maxOffset"]
    rewritten = bytes.fromhex(broken["epochFileAfterElection"]["hex"])
    assert rewritten == encode_epoch_file([*pairs(predicted.entries), (new_epoch, new_start)])
    # the election wrote twice (truncateSuffixByOffset after the restart, then appendEntry):
    # the .bak is the loaded list again, the broken content is gone
    assert bytes.fromhex(broken["bakAfterElection"]["hex"]) == encode_epoch_file(
        pairs(predicted.entries))
    history = read_bytes_pair(rewritten, None).entries
    run2 = [m for m in truth_lines(controller_store, "messages.jsonl") if m["brokerRun"] == 2]
    assert {epoch_at(history, m["commitLogOffset"]).epoch for m in run2} == {1}
