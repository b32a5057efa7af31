"""config/*.json: fastjson quoting, .bak fallback, typed views."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_encoders import render_fastjson

from rmqlib.config import (
    ConfigSource,
    load_config_dir,
    load_config_json,
    load_consumer_filters,
    load_consumer_offsets,
    load_consumer_order_info,
    load_delay_offsets,
    load_subscription_groups,
    load_timer_metrics,
    load_topics,
    load_transaction_metrics,
    parse_consumer_offsets,
    parse_fastjson,
    parse_topics,
    quote_int_keys,
    split_topic_group,
)
from rmqlib.errors import ConfigError

# --------------------------------------------------------------------------- quoting


def test_quotes_bare_int_keys() -> None:
    text = '{"offsetTable":{"T@G":{0:123,1:456,-1:7}}}'
    assert parse_fastjson(text) == {"offsetTable": {"T@G": {"0": 123, "1": 456, "-1": 7}}}


def test_strings_that_look_like_int_keys_are_untouched() -> None:
    tricky = ['{1:2}', ',3:4', 'a\\"{5:6', '{\n\t7:8}', '[9:1]', '"', '\\', '}{0:']
    document = {"topicConfigTable": {"T": {"attributes": {f"k{i}": v for i, v in
                                                          enumerate(tricky)}}}}
    text = render_fastjson(document)
    assert parse_fastjson(text) == document
    fixed, inserted = quote_int_keys(text)
    assert fixed == text and inserted == []


def test_arrays_of_numbers_are_not_keys() -> None:
    assert parse_fastjson('{"a":[1,2,{3:[4, 5]}]}') == {"a": [1, 2, {"3": [4, 5]}]}


def test_pretty_tab_layout() -> None:
    text = '{\n\t"offsetTable":{\n\t\t"%RETRY%g@g":{\n\t\t\t0 : 5,\n\t\t\t12:6\n\t\t}\n\t}\n}'
    assert parse_fastjson(text) == {"offsetTable": {"%RETRY%g@g": {"0": 5, "12": 6}}}


def test_error_position_maps_to_original_text() -> None:
    text = '{0:1,1:2,\n\t"bad": }'
    with pytest.raises(ConfigError) as info:
        parse_fastjson(text, "/x/topics.json")
    error = info.value
    assert error.path == "/x/topics.json"
    assert text[error.offset] == "}"
    assert "line 2" in error.reason


def test_error_offset_is_in_bytes() -> None:
    text = '{"é中":1,'
    with pytest.raises(ConfigError) as info:
        parse_fastjson(text)
    assert info.value.offset == len(text.encode("utf-8"))


TRICKY_CHARS = [*'{}[],:"\\/0123456789-eE.+ \t\nabc', "é", "中", "😀", "\u0001"]
TRICKY_TEXT = st.text(alphabet=st.sampled_from(TRICKY_CHARS), max_size=10)
INT_KEY = st.integers(-(2**40), 2**63 - 1)
SCALAR = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TRICKY_TEXT


def _unique_keys(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    seen: set[str] = set()
    for key, value in pairs:
        if str(key) not in seen:
            seen.add(str(key))
            out[key] = value
    return out


JSON = st.recursive(
    SCALAR,
    lambda children: st.lists(children, max_size=4)
    | st.lists(st.tuples(INT_KEY | TRICKY_TEXT, children), max_size=4).map(_unique_keys),
    max_leaves=30,
)


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    return value


@settings(max_examples=300, deadline=None)
@given(value=JSON, pretty=st.booleans(), browser=st.booleans())
def test_fastjson_round_trip_never_changes_strings(value: Any, pretty: bool,
                                                   browser: bool) -> None:
    text = render_fastjson({"root": value}, pretty=pretty, browser_compatible=browser)
    assert parse_fastjson(text) == {"root": _normalize(value)}


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=60))
def test_arbitrary_text_parses_or_raises_config_error(text: str) -> None:
    try:
        parse_fastjson(text)
    except ConfigError as exc:
        assert exc.offset is not None and exc.offset >= 0


# --------------------------------------------------------------------------- .bak fallback

TOPICS = {"dataVersion": {"counter": 3, "timestamp": 1700000000000},
          "topicConfigTable": {"T": {"topicName": "T", "perm": 6}}}
OLD_TOPICS = {"topicConfigTable": {"OLD": {"topicName": "OLD"}}}


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def test_main_file_used(tmp_path: Path) -> None:
    main = write(tmp_path / "topics.json", render_fastjson(TOPICS))
    write(tmp_path / "topics.json.bak", render_fastjson(OLD_TOPICS))
    doc = load_config_json(main)
    assert doc.data == TOPICS
    assert doc.source == ConfigSource(str(main), str(main), False)


@pytest.mark.parametrize(
    ("content", "reason"),
    [(None, "missing"), ("", "empty"), ("  \n\t", "empty"), ('{"a":', "unparsable"),
     (b"\x00" * 64, "unparsable"), ("[1,2]", "unparsable")],
)
def test_falls_back_to_bak(tmp_path: Path, content: str | bytes | None, reason: str) -> None:
    main = tmp_path / "topics.json"
    if content is not None:
        write(main, content)
    bak = write(tmp_path / "topics.json.bak", render_fastjson(OLD_TOPICS))
    write(tmp_path / "topics.json.tmp", "{}")
    doc = load_config_json(main)
    assert doc.data == OLD_TOPICS
    assert doc.source.used == str(bak) and doc.source.from_backup
    assert doc.source.main_rejected.startswith(reason)
    assert doc.source.tmp_present


def test_no_usable_file(tmp_path: Path) -> None:
    main = tmp_path / "consumerOffset.json"
    with pytest.raises(ConfigError) as info:
        load_config_json(main)
    assert "missing" in info.value.reason
    assert load_config_json(main, missing_ok=True) is None
    write(main, "{broken")
    with pytest.raises(ConfigError):
        load_config_json(main, missing_ok=True)
    write(tmp_path / "consumerOffset.json.bak", "")
    with pytest.raises(ConfigError) as info:
        load_config_json(main)
    assert "unparsable" in info.value.reason and "empty" in info.value.reason
    assert info.value.path == str(main)


def test_invalid_utf8_is_replaced_and_noted(tmp_path: Path) -> None:
    main = write(tmp_path / "topics.json", b'{"topicConfigTable":{"T\xff":{}}}')
    doc = load_config_json(main)
    assert "T\ufffd" in doc.data["topicConfigTable"]
    assert doc.source.notes


# --------------------------------------------------------------------------- typed views


def test_topics(tmp_path: Path) -> None:
    data = {
        "dataVersion": {"counter": 9, "stateVersion": 2, "timestamp": 1},
        "topicConfigTable": {
            "TopicA": {"attributes": {"+queue.type": "x", "queue.type": "BatchCQ",
                                      "note": "{1:2},3:4"},
                       "order": False, "perm": 7, "readQueueNums": 8,
                       "topicFilterType": "SINGLE_TAG", "topicName": "TopicA",
                       "topicSysFlag": 0, "writeQueueNums": 4},
            "Renamed": {"topicName": "Other", "perm": 8 | 4},
        },
    }
    path = write(tmp_path / "topics.json", render_fastjson(data))
    topics = load_topics(path)
    a = topics.topics["TopicA"]
    assert (a.read_queue_nums, a.write_queue_nums, a.perm) == (8, 4, 7)
    assert a.readable and a.writable and a.inherited and not a.priority
    assert a.queue_type == "BatchCQ" and a.attributes["note"] == "{1:2},3:4"
    renamed = topics.topics["Renamed"]
    assert renamed.priority and renamed.readable and not renamed.writable
    assert renamed.read_queue_nums == 16 and renamed.queue_type == "SimpleCQ"
    assert topics.name_mismatches == ["Renamed"]
    assert topics.data_version.state_version == 2
    assert topics.source.used == str(path)


def test_topics_type_error_has_path(tmp_path: Path) -> None:
    path = write(tmp_path / "topics.json", '{"topicConfigTable":{"T":{"perm":"rw"}}}')
    with pytest.raises(ConfigError) as info:
        load_topics(path)
    assert info.value.path == str(path) and "perm" in info.value.reason
    assert parse_topics({"topicConfigTable": {"T": {"perm": "6"}}}).topics["T"].perm == 6


def test_consumer_offsets(tmp_path: Path) -> None:
    text = ('{"offsetTable":{"TopicA@g1":{0:10,1:11},"%RETRY%g1@g1":{0:3},'
            '"T@grp@x":{0:1},"noseparator":{0:1}},'
            '"dataVersion":{"counter":1,"timestamp":2},"groupTopicMap":{"g1":["TopicA"]}}')
    offsets = load_consumer_offsets(write(tmp_path / "consumerOffset.json", text))
    rows = {(r.topic, r.group, r.queue_id): r for r in offsets.offsets}
    assert rows[("TopicA", "g1", 1)].offset == 11
    assert rows[("%RETRY%g1", "g1", 0)].offset == 3
    assert rows[("T", "grp@x", 0)].ambiguous
    assert offsets.invalid_keys == ["noseparator"]
    assert offsets.group_topic_map == {"g1": ["TopicA"]}


def test_lmq_consumer_offsets() -> None:
    data = parse_fastjson('{"offsetTable":{"T@g":{0:1}},"lmqOffsetTable":{"%LMQ%q1@%LMQ%q1":42}}')
    offsets = parse_consumer_offsets(data)
    lmq = [r for r in offsets.offsets if r.lmq]
    assert [(r.topic, r.group, r.queue_id, r.offset) for r in lmq] == [
        ("%LMQ%q1", "%LMQ%q1", 0, 42),
    ]


def test_split_topic_group() -> None:
    assert split_topic_group("T@G") == ("T", "G", False)
    assert split_topic_group("T@G@H") == ("T", "G@H", True)
    assert split_topic_group("TG") is None


def test_consumer_offsets_bad_shape(tmp_path: Path) -> None:
    path = write(tmp_path / "consumerOffset.json", '{"offsetTable":{"T@G":{"x":1}}}')
    with pytest.raises(ConfigError):
        load_consumer_offsets(path)
    path = write(tmp_path / "consumerOffset.json", '{"offsetTable":[1]}')
    with pytest.raises(ConfigError):
        load_consumer_offsets(path)


def test_delay_offsets(tmp_path: Path) -> None:
    path = write(tmp_path / "delayOffset.json",
                 render_fastjson({"offsetTable": {1: 5, 3: 0, 18: 2}}))
    delay = load_delay_offsets(path)
    assert delay.offsets == {1: 5, 3: 0, 18: 2}
    assert delay.by_queue() == {0: 5, 2: 0, 17: 2}
    assert delay.data_version is None


def test_subscription_groups(tmp_path: Path) -> None:
    data = {
        "dataVersion": {"counter": 1, "timestamp": 2, "stateVersion": 0},
        "forbiddenTable": {"g5": {"T": 2}},
        "subscriptionGroupTable": {
            "g4": {"brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True,
                   "consumeFromMinEnable": True, "groupName": "g4",
                   "notifyConsumerIdsChangedEnable": True, "retryMaxTimes": 16,
                   "retryQueueNums": 1, "whichBrokerWhenConsumeSlowly": 1},
            "g5": {"groupName": "g5", "consumeMessageOrderly": True, "groupSysFlag": 0,
                   "consumeTimeoutMinute": 15, "attributes": {},
                   "groupRetryPolicy": {"type": "CUSTOMIZED"},
                   "subscriptionDataSet": [{"topic": "T", "expressionType": "TAG"}]},
        },
    }
    groups = load_subscription_groups(write(tmp_path / "subscriptionGroup.json",
                                            render_fastjson(data)))
    assert groups.groups["g4"].retry_max_times == 16
    assert groups.groups["g5"].consume_message_orderly
    assert groups.groups["g5"].raw["groupRetryPolicy"] == {"type": "CUSTOMIZED"}
    assert groups.forbidden == {"g5": {"T": 2}}


def test_consumer_filter(tmp_path: Path) -> None:
    data = {"filterDataByTopic": {"T": {"topic": "T", "groupFilterData": {
        "g": {"consumerGroup": "g", "topic": "T", "expression": "a > 1 AND b = '{1:2}'",
              "expressionType": "SQL92", "bornTime": 5, "deadTime": 0,
              "bloomFilterData": {"bitNum": 112, "bitPos": [1, 9, 40]},
              "clientVersion": 399}}}}}
    filters = load_consumer_filters(write(tmp_path / "consumerFilter.json",
                                          render_fastjson(data)))
    (row,) = filters.rows
    assert row.expression == "a > 1 AND b = '{1:2}'"
    assert row.bloom_bit_num == 112 and row.bloom_bit_pos == (1, 9, 40)


def test_consumer_order_info(tmp_path: Path) -> None:
    data = {"table": {"T@g": {0: {"popTime": 5, "i": 30000, "o": [7, 8], "ot": {7: 99},
                                  "oc": {8: 2}, "l": 6, "cm": 1, "a": "att"}}}}
    info = load_consumer_order_info(write(tmp_path / "consumerOrderInfo.json",
                                          render_fastjson(data)))
    (row,) = info.rows
    assert (row.topic, row.group, row.queue_id, row.offsets) == ("T", "g", 0, (7, 8))
    assert row.offset_next_visible_time == {7: 99} and row.offset_consumed_count == {8: 2}


def test_metrics(tmp_path: Path) -> None:
    timer = {"dataVersion": {"counter": 1, "timestamp": 2},
             "timingCount": {"Tö": {"count": 4, "timeStamp": 9}}}
    text = render_fastjson(timer, pretty=False, browser_compatible=True)
    assert "\\u00f6" in text
    metrics = load_timer_metrics(write(tmp_path / "timermetrics", text))
    assert [(r.topic, r.count) for r in metrics.rows] == [("Tö", 4)]
    tx = {"transactionCount": {"T": {"count": 1, "timeStamp": 3}}}
    tx_metrics = load_transaction_metrics(write(tmp_path / "transactionMetrics",
                                                json.dumps(tx)))
    assert tx_metrics.rows[0].time_stamp == 3


def test_load_config_dir_collects_errors(tmp_path: Path) -> None:
    write(tmp_path / "topics.json", render_fastjson(TOPICS))
    write(tmp_path / "consumerOffset.json", "{oops")
    write(tmp_path / "delayOffset.json", "")
    write(tmp_path / "delayOffset.json.bak", '{"offsetTable":{1:2}}')
    config = load_config_dir(tmp_path)
    assert config.topics.topics["T"].perm == 6
    assert "consumerOffset.json" in config.errors
    assert config.delay_offsets.offsets == {1: 2}
    assert config.delay_offsets.source.main_rejected == "empty"
    assert config.subscription_groups is None


def test_rocksdb_config_dirs_and_directory_in_place_of_file(tmp_path: Path) -> None:
    (tmp_path / "topics").mkdir()
    (tmp_path / "rdb").mkdir()
    (tmp_path / "consumerOffset.json").mkdir()
    config = load_config_dir(tmp_path)
    assert sorted(Path(e.path).name for e in config.unsupported) == ["rdb", "topics"]
    assert "not a regular file" in config.errors["consumerOffset.json"].reason
