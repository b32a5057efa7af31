"""Topics, groups and consumer offsets a 5.x broker keeps in RocksDB, in its three layouts.

Databases written here with the same binding in each layout the broker uses (hypothesis
draws the tables and the records that break the layout) hold the reader to the layouts of
``docs/rocksdb.md``: every record read back or reported as left out, none lost. The real
5.5.0 brokers of the harness (``v5-rocksdb``, ``v5-rocksdb-single``, ``v5-rocksdb-v2``)
hold it to what the broker wrote: the admin API's consumer offsets, its topic and group
tables, and ``rmq verify`` clean.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqlib.config import load_config_dir
from rmqlib.rocksdb import config_store as CS
from rmqlib.store.verify import verify_store

EXAMPLES = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

names = st.text(st.characters(codec="utf-8", exclude_characters="@"), min_size=1, max_size=16)
topic_tables = st.dictionaries(names, st.tuples(st.integers(1, 64), st.integers(1, 64),
                                                st.sampled_from([2, 4, 6, 7])), max_size=5)
group_tables = st.lists(names, unique=True, max_size=5)
offset_tables = st.dictionaries(st.tuples(names, names),
                                st.dictionaries(st.integers(0, 63), st.integers(0, 2**40),
                                                min_size=1, max_size=4), max_size=5)
# Records that break the layout, by kind (each must come back as exactly one left-out row).
broken = st.lists(st.sampled_from(["not json", "json array", "v2 serialization",
                                   "v2 short offset", "v2 foreign table"]), max_size=3)


def topic_json(name: str, read: int, write: int, perm: int) -> bytes:
    return json.dumps({"topicName": name, "readQueueNums": read, "writeQueueNums": write,
                       "perm": perm, "attributes": {}}).encode()


def group_json(name: str) -> bytes:
    return json.dumps({"groupName": name, "consumeEnable": True}).encode()


def v2_key(table_id: int, *parts: bytes, queue_id: int | None = None) -> bytes:
    key = struct.pack(">BhB", 1, table_id, 2)
    for index, part in enumerate(parts):
        key += (b"\x01" if index else b"") + struct.pack(">h", len(part)) + part
    return key if queue_id is None else key + b"\x01" + struct.pack(">i", queue_id)


def open_db(path: Path, families: list[str]) -> tuple[Any, dict[str, Any]]:
    from rocksdict import Options, Rdict

    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(path), options=options)
    return db, {name: db.create_column_family(name, Options(raw_mode=True))
                for name in families}


def write_layout(config: Path, layout: str, topics: dict, groups: list, offsets: dict,
                 bad: list[str]) -> int:
    """The three tables in ``layout`` as the broker writes them, plus the ``bad`` records
    that break it; returns how many of those the layout can hold (v1 has no v2 ones)."""
    config.mkdir(parents=True, exist_ok=True)
    topic_rows = {n.encode(): topic_json(n, *t) for n, t in topics.items()}
    group_rows = {g.encode(): group_json(g) for g in groups}
    offset_rows = {f"{t}@{g}".encode(): json.dumps(
        {"offsetTable": {str(q): o for q, o in qs.items()}}).encode()
        for (t, g), qs in offsets.items()}
    v1_bad = {"not json": b"{nope", "json array": b"[1, 2]"}
    held = 0
    if layout in (CS.V1, CS.V1_SINGLE):
        tables = zip(CS.TABLES, (topic_rows, group_rows, offset_rows), strict=True)
        single = None
        if layout == CS.V1_SINGLE:
            single = open_db(config / CS.SINGLE_DIRECTORY,
                             [t.family for t in CS.TABLES] + ["topicVersion"])
            single[1]["topicVersion"][CS.VERSION_KEY] = b'{"counter":3,"timestamp":5}'
        for table, rows in tables:
            if single is None:
                db, families = open_db(config / table.directory, [CS.VERSION_FAMILY])
                target, closer = db, db
                families[CS.VERSION_FAMILY][CS.VERSION_KEY] = b'{"counter":3,"timestamp":5}'
            else:
                target, closer = single[1][table.family], None
            for key, value in rows.items():
                target[key] = value
            if table.directory == "topics":
                for index, kind in enumerate(k for k in bad if k in v1_bad):
                    target[f"\x00bad{index}".encode()] = v1_bad[kind]
                    held += 1
            if closer is not None:
                closer.close()
        if single is not None:
            single[0].close()
        return held
    db, _ = open_db(config / CS.V2_DIRECTORY, [])
    for name, value in topic_rows.items():
        db[v2_key(CS.V2_TOPIC, name)] = b"\x01" + value
    for name, value in group_rows.items():
        db[v2_key(CS.V2_GROUP, name)] = b"\x01" + value
    for (topic, group), queues in offsets.items():
        for queue_id, offset in queues.items():
            db[v2_key(CS.V2_CONSUMER_OFFSET, group.encode(), topic.encode(),
                      queue_id=queue_id)] = struct.pack(">q", offset)
    db[struct.pack(">BhB", 1, CS.V2_TOPIC, 1) + b"data_version"] = struct.pack(">qqq", 0, 5, 3)
    v2_bad = {"not json": (v2_key(CS.V2_TOPIC, b"\x00bad-json"), b"\x01{nope"),
              "json array": (v2_key(CS.V2_GROUP, b"\x00bad-array"), b"\x01[1]"),
              "v2 serialization": (v2_key(CS.V2_TOPIC, b"\x00bad-type"), b"\x02{}"),
              "v2 short offset": (v2_key(CS.V2_CONSUMER_OFFSET, b"g", b"\x00bad", queue_id=0),
                                  b"\x00" * 7),
              "v2 foreign table": (struct.pack(">BhB", 1, 9, 2) + b"x", b"?")}
    for kind in set(bad):
        key, value = v2_bad[kind]
        db[key] = value
        held += 1
    db.close()
    return held


@EXAMPLES
@given(layout=st.sampled_from([CS.V1, CS.V1_SINGLE, CS.V2]), topics=topic_tables,
       groups=group_tables, offsets=offset_tables, bad=broken)
def test_every_layout_reads_back_every_record_or_names_it(
        tmp_path_factory: pytest.TempPathFactory, layout: str, topics: dict, groups: list,
        offsets: dict, bad: list[str]) -> None:
    config = tmp_path_factory.mktemp("config")
    held = write_layout(config, layout, topics, groups, offsets, bad)
    loaded = load_config_dir(config)
    assert loaded.errors == {} and loaded.unsupported == []
    assert {n: (t.read_queue_nums, t.write_queue_nums, t.perm)
            for n, t in loaded.topics.topics.items()} == topics
    assert sorted(loaded.subscription_groups.groups) == sorted(groups)
    assert {(o.topic, o.group, o.queue_id): o.offset
            for o in loaded.consumer_offsets.offsets} == {
        (t, g, q): o for (t, g), qs in offsets.items() for q, o in qs.items()}
    assert sum(len(notes) for notes in loaded.left_out.values()) == held
    assert loaded.topics.data_version.counter == 3
    assert loaded.topics.source.notes[0].endswith(f"layout {layout}")


def test_a_store_that_changed_layout_reads_the_newest_and_names_the_others(
        tmp_path: Path) -> None:
    write_layout(tmp_path, CS.V1, {"old": (1, 1, 6)}, ["g-old"], {}, [])
    write_layout(tmp_path, CS.V2, {"new": (2, 2, 6)}, ["g-new"], {}, [])
    loaded = load_config_dir(tmp_path)
    assert set(loaded.topics.topics) == {"new"}
    assert set(loaded.subscription_groups.groups) == {"g-new"}
    superseded = {Path(item.path).name: item.reason for item in loaded.unsupported}
    assert set(superseded) == {"topics", "subscriptionGroups", "consumerOffsets"}
    assert all("superseded by rdb/ (v2)" in reason for reason in superseded.values())


# --------------------------------------------------------------------------- the real brokers


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


WORKLOAD_TOPICS = {"TopicRocks", "TopicRocksBulk", "TopicRocksDelay"}


@pytest.mark.broker
def test_config_from_rocksdb_equals_the_admin_view(rocksdb_config_store: Path) -> None:
    store = rocksdb_config_store / "store"
    assert not (store / "config" / "topics.json").exists()  # the broker wrote none
    config = load_config_dir(store / "config")
    assert config.errors == {} and config.unsupported == [] and config.left_out == {}
    offsets = {(o.group, o.topic, o.queue_id): o.offset for o in config.consumer_offsets.offsets}
    progress = jsonl(rocksdb_config_store / "truth" / "consumer_groups.jsonl")
    assert {(w["group"], w["topic"], w["queueId"]): w["consumerOffset"] for w in progress} \
        .items() <= offsets.items()
    broker = json.loads((rocksdb_config_store / "truth" / "rocksdb.json").read_text())
    admin_topics, admin_groups = broker["configTables"]["topics"], broker["configTables"]["groups"]
    for name, topic in config.topics.topics.items():  # each as the broker serves it
        assert (topic.read_queue_nums, topic.write_queue_nums, topic.perm) == (
            admin_topics[name]["readQueueNums"], admin_topics[name]["writeQueueNums"],
            admin_topics[name]["perm"]), name
    assert set(config.subscription_groups.groups) <= set(admin_groups)
    if config.topics.source.notes[0].endswith(f"layout {CS.V2}"):
        # v2 persists what the admin API created, nothing the broker created itself
        assert set(config.topics.topics) == WORKLOAD_TOPICS
        assert set(config.subscription_groups.groups) == {"G_HALF"}
    else:
        assert set(config.topics.topics) >= WORKLOAD_TOPICS
        assert {"G_ALL", "G_HALF"} <= set(config.subscription_groups.groups)
    report = verify_store(store)
    assert report.errors == [], report.errors
