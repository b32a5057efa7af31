"""rmqlib.rocksdb: the RocksDB consume queue and config of ``storeType=defaultRocksDB``.

Databases written here with the same binding in the broker's layout (hypothesis draws the
queues) hold the decoder to the layout and to never touching the directory it reads; the
real 5.5.0 broker's store (the harness's ``v5-rocksdb``) holds it to what the broker wrote:
every acked message's unit, ``rmq verify`` clean, and a unit changed in a copy named by
verify. Its config in RocksDB: tests/test_rocksdb_config.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqlib.errors import CorruptDataError
from rmqlib.rocksdb.consume_queue import (
    BOUND_VALUE,
    CTRL_1,
    UNIT_VALUE,
    parse_unit_key,
    read_queues,
    unit_key,
)
from rmqlib.store.verify import verify_store

EXAMPLES = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

topics = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1,
                 max_size=20)
queues = st.dictionaries(st.tuples(topics, st.integers(0, 7)),
                         st.lists(st.tuples(st.integers(0, 2**40), st.integers(1, 4096),
                                            st.integers(-2**40, 2**40)),
                                  min_size=1, max_size=30),
                         min_size=1, max_size=6)


def bound_key(topic: str, kind: bytes, queue_id: int) -> bytes:
    name = topic.encode()
    return struct.pack(">i", len(name)) + bytes([CTRL_1]) + name + bytes([CTRL_1]) + kind + \
        bytes([CTRL_1]) + struct.pack(">i", queue_id)


def write_database(path: Path, content: dict) -> None:
    """A consume-queue database as the broker lays it out (units from queue offset 0)."""
    from rocksdict import Options, Rdict

    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(path), options=options)
    offsets = db.create_column_family("offset", Options(raw_mode=True))
    for (topic, queue_id), units in content.items():
        for queue_offset, (phys, size, tags) in enumerate(units):
            db[unit_key(topic, queue_id, queue_offset)] = UNIT_VALUE.pack(phys, size, tags,
                                                                          1_700_000_000_000)
        offsets[bound_key(topic, b"max", queue_id)] = BOUND_VALUE.pack(units[-1][0],
                                                                       len(units) - 1)
    db.close()


def tree_digest(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir())}


@EXAMPLES
@given(content=queues)
def test_units_and_bounds_read_back_and_the_directory_is_left_as_it_was(
        tmp_path_factory: pytest.TempPathFactory, content: dict) -> None:
    path = tmp_path_factory.mktemp("cq") / "consumequeue"
    write_database(path, content)
    before = tree_digest(path)
    scan = read_queues(path)
    assert tree_digest(path) == before  # opened on a clone: not one byte or file changed
    assert scan.bad == []
    found = {(q.topic, q.queue_id): list(zip(q.commitlog_offset.tolist(), q.size.tolist(),
                                             q.tags_code.tolist(), strict=True))
             for q in scan.queues}
    assert found == {key: [tuple(u) for u in units] for key, units in content.items()}
    assert scan.max_offsets == {key: (units[-1][0], len(units) - 1)
                                for key, units in content.items()}
    after = {key: len(units) // 2 for key, units in content.items()}
    tail = {(q.topic, q.queue_id): q.queue_offset.tolist() for q in read_queues(path, after).queues}
    assert tail == {key: list(range(after[key], len(units)))
                    for key, units in content.items() if len(units) > after[key]}


@given(topic=topics, queue_id=st.integers(0, 2**31 - 1), offset=st.integers(0, 2**63 - 1))
def test_a_unit_key_round_trips(topic: str, queue_id: int, offset: int) -> None:
    assert parse_unit_key(unit_key(topic, queue_id, offset)) == (topic, queue_id, offset)


@given(raw=st.binary(max_size=64))
def test_any_bytes_are_a_unit_key_or_a_typed_error(raw: bytes) -> None:
    try:
        topic, queue_id, offset = parse_unit_key(raw)
    except CorruptDataError:
        return
    assert unit_key(topic, queue_id, offset) == raw or "\ufffd" in topic


# --------------------------------------------------------------------------- the real broker


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.broker
def test_every_acked_message_has_its_unit_in_the_real_rocksdb_queue(rocksdb_store: Path) -> None:
    scan = read_queues(rocksdb_store / "store" / "consumequeue")
    assert scan.bad == []
    units = {(q.topic, q.queue_id, int(o)): (int(p), int(s))
             for q in scan.queues
             for o, p, s in zip(q.queue_offset, q.commitlog_offset, q.size, strict=True)}
    sent = [m for m in jsonl(rocksdb_store / "truth" / "messages.jsonl") if m["acked"]]
    for message in sent:
        key = (message["storedTopic"], message["storedQueueId"], message["queueOffset"])
        assert units[key][0] == message["commitLogOffset"], key
    stats = jsonl(rocksdb_store / "truth" / "topic_stats.jsonl")
    for stat in stats:
        key = (stat["topic"], stat["queueId"])
        if stat["maxOffset"] > 0:
            assert scan.max_offsets[key][1] == stat["maxOffset"] - 1, key


@pytest.mark.broker
def test_verify_passes_the_real_store_and_names_a_changed_unit(rocksdb_store: Path,
                                                              tmp_path: Path) -> None:
    from rocksdict import Options, Rdict

    report = verify_store(rocksdb_store / "store")
    assert report.errors == [] and report.counts["rocksdb_cq_units"] == 732
    assert not [f for f in report.warnings if f.check == "cq-lag"]
    copy = tmp_path / "store"
    shutil.copytree(rocksdb_store / "store", copy)
    families = Rdict.list_cf(str(copy / "consumequeue"))
    db = Rdict(str(copy / "consumequeue"), options=Options(raw_mode=True),
               column_families={f: Options(raw_mode=True) for f in families if f != "default"})
    key = unit_key("TopicRocks", 1, 5)
    phys, size, tags, stored = UNIT_VALUE.unpack(db[key])
    db[key] = UNIT_VALUE.pack(phys + 1, size, tags, stored)  # points inside its record
    db.close()
    errors = [(e.check, e.offset) for e in verify_store(copy).errors]
    # The unit points nowhere, and the record it stood for has no unit left.
    assert errors == [("cq-resolve", 5), ("cq-missing", phys)]


@pytest.mark.broker
def test_rmq_dump_and_get_read_the_real_rocksdb_queue(rocksdb_store: Path) -> None:
    """``rmq dump rocksdb`` lists every unit and bound; ``rmq get --queue`` finds a message
    through the RocksDB queue; ``rmq dump config`` shows the tables read from RocksDB."""
    import subprocess
    import sys

    def rmq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rmqlib.cli.main", *args],
                              capture_output=True, text=True, timeout=120)

    store = str(rocksdb_store / "store")
    dumped = rmq("dump", "rocksdb", store, "--json")
    assert dumped.returncode == 0, dumped.stderr
    rows = [json.loads(line) for line in dumped.stdout.splitlines()]
    assert sum(r["kind"] == "unit" for r in rows) == 732
    assert rows[-1]["kind"] == "account" and rows[-1]["units"] == 732
    sent = next(m for m in jsonl(rocksdb_store / "truth" / "messages.jsonl")
                if m["acked"] and m["storedTopic"] == m["topic"] and m["queueOffset"] > 3)
    got = rmq("get", store, "--queue", sent["topic"], str(sent["queueId"]),
              str(sent["queueOffset"]), "--json")
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["physical_offset"] == sent["commitLogOffset"]
    inspected = json.loads(rmq("inspect", store, "--json").stdout)
    written = [s for s in jsonl(rocksdb_store / "truth" / "topic_stats.jsonl") if s["maxOffset"]]
    assert inspected["queues"] == len(written)  # the queues of the RocksDB consume queue
    config = rmq("dump", "config", f"{store}/config", "--json")
    sources = {json.loads(line)["file"].rsplit("/", 1)[1]: json.loads(line)["source"]
               for line in config.stdout.splitlines()}
    assert sources["consumerOffset.json"].endswith("config/consumerOffsets")
