"""Inner-batch records (spec §2.6): members split exactly, or a typed error.

Hand-made bytes for the edge cases; a hypothesis property for the split; and the Arrow
path (``unwrap_inner_batches``) against the record path (``split_inner_batch`` + the
``rmq dump`` member rows) on one commitlog holding ordinary and inner-batch records.
The real-broker proof is in tests/test_features_store.py.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jsonl import json_lines

from rmqlib.commitlog.arrow import MESSAGE_SCHEMA, read_table, unwrap_inner_batches
from rmqlib.commitlog.innerbatch import MEMBER_HEADER, encode_inner_batch, split_inner_batch
from rmqlib.errors import CorruptDataError, TruncatedDataError
from tests.rmq_encoder import CommitLogWriter, Message

INNER = 0x40 | 0x80

names = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FF), min_size=1,
                max_size=8)
members = st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.binary(max_size=64),
                             st.dictionaries(names, names, max_size=3)),
                   min_size=1, max_size=8)


@given(members, st.integers(0, 2**40))
@settings(max_examples=100, deadline=None)
def test_members_round_trip(batch, base):
    body = encode_inner_batch(batch)
    got = split_inner_batch(body, base)
    assert [(m.flag, m.body, dict(m.properties)) for m in got] == [
        (flag, data, properties) for flag, data, properties in batch]
    assert [m.queue_offset for m in got] == list(range(base, base + len(batch)))
    assert sum(m.size for m in got) == len(body)  # members tile the body exactly


@given(members, st.data())
@settings(max_examples=100, deadline=None)
def test_cut_or_damaged_bodies_raise_typed_errors(batch, data):
    body = bytearray(encode_inner_batch(batch))
    cut = data.draw(st.integers(1, len(body)))
    with pytest.raises(CorruptDataError):  # a cut at a member boundary: INNER_NUM tells
        split_inner_batch(bytes(body[: len(body) - cut]), 0, expected=len(batch))
    position = data.draw(st.integers(0, len(body) - 1))
    body[position] ^= data.draw(st.integers(1, 255))
    try:
        got = split_inner_batch(bytes(body), 0, expected=len(batch))
    except CorruptDataError:
        return
    assert sum(m.size for m in got) == len(body)  # a flip inside a value: still exact


def test_edge_cases_name_the_member_and_position():
    one = encode_inner_batch([(0, b"abc", {"TAGS": "t"})])
    with pytest.raises(CorruptDataError, match="empty body"):
        split_inner_batch(b"", 0, path="f", offset=7)
    with pytest.raises(TruncatedDataError, match=r"member 1 at body byte \d+: 3 bytes left"):
        split_inner_batch(one + b"\x00\x00\x00", 0)
    wrong_size = bytearray(one)
    wrong_size[0:4] = (len(one) + 1).to_bytes(4, "big")
    with pytest.raises(CorruptDataError, match="size field"):
        split_inner_batch(bytes(wrong_size), 0)
    negative = bytearray(one)
    negative[16:20] = (-1).to_bytes(4, "big", signed=True)
    with pytest.raises(CorruptDataError, match="negative body length"):
        split_inner_batch(bytes(negative), 0)
    assert MEMBER_HEADER.size == 20


def _store(tmp_path, broken: bool = False, inner_num: str = "3"):
    batch_body = encode_inner_batch([
        (0, b"first", {"KEYS": "k1 k2", "TAGS": "a", "UNIQ_KEY": "U1"}),
        (3, b"", {"UNIQ_KEY": "U2"}),
        (0, "第三".encode(), {"TAGS": "c", "UNIQ_KEY": "U3", "color": "red"}),
    ])
    if broken:
        batch_body = batch_body[:-2]
    outer = (("INNER_NUM", inner_num), ("INNER_BASE", "5"), ("UNIQ_KEY", "BATCH"),
             ("CLUSTER", "c"))
    messages = [
        Message(topic="BatchTopic", body=b"single", queue_offset=0,
                properties=(("TAGS", "s"), ("UNIQ_KEY", "S"))),
        Message(topic="BatchTopic", body=batch_body, sysflag=INNER, queue_offset=5,
                properties=outer),
        Message(topic="Other", body=b"x", properties=(("UNIQ_KEY", "O"),)),
    ]
    directory = tmp_path / "commitlog"
    writer = CommitLogWriter(64 * 1024, assign_queue_offsets=False)
    for message in messages:
        writer.append(message)
    writer.write(directory)
    return directory


def test_arrow_unwrap_gives_one_row_per_consumed_message(tmp_path):
    directory = _store(tmp_path)
    table, _ = read_table(directory / f"{0:020d}")
    rows = pa.Table.from_batches([unwrap_inner_batches(b) for b in table.to_batches()],
                                 schema=MESSAGE_SCHEMA).to_pylist()
    got = [(r["topic"], r["queue_offset"], r["inner_index"], r["inner_num"], r["tags"],
            r["keys"], r["uniq_key"], r["body"], r["flag"]) for r in rows]
    batch_offset = rows[1]["physical_offset"]
    assert got == [
        ("BatchTopic", 0, 0, None, "s", [], "S", b"single", 0),
        ("BatchTopic", 5, 0, 3, "a", ["k1", "k2"], "U1", b"first", 0),
        ("BatchTopic", 6, 1, 3, None, [], "U2", b"", 3),
        ("BatchTopic", 7, 2, 3, "c", [], "U3", "第三".encode(), 0),
        ("Other", 0, 0, None, None, [], "O", b"x", 0),
    ]
    assert {r["physical_offset"] for r in rows[1:4]} == {batch_offset}
    assert dict(rows[3]["properties"])["color"] == "red"
    assert dict(rows[2]["batch_properties"])["INNER_BASE"] == "5"
    assert rows[0]["batch_properties"] is None


def test_dump_lists_members_like_the_arrow_path(tmp_path):
    directory = _store(tmp_path)
    out = subprocess.run([sys.executable, "-m", "rmqlib.cli.main", "dump", "commitlog",
                          str(directory), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    rows = json_lines(out.stdout)
    members = [r for r in rows if r["kind"] == "member"]
    assert [(m["queue_offset"], m["uniq_key"], m["body_sha256"]) for m in members] == [
        (5, "U1", hashlib.sha256(b"first").hexdigest()),
        (6, "U2", hashlib.sha256(b"").hexdigest()),
        (7, "U3", hashlib.sha256("第三".encode()).hexdigest())]
    assert rows[-1]["kind"] == "account" and rows[-1]["records"] == 3


def test_a_broken_inner_batch_is_kept_and_reported(tmp_path):
    directory = _store(tmp_path, broken=True)
    table, _ = read_table(directory / f"{0:020d}")
    rows = unwrap_inner_batches(table.to_batches()[0]).to_pylist()
    assert len(rows) == 3  # the broken record stays one row
    assert rows[1]["inner_num"] is None
    assert rows[1]["body_error"].startswith("inner batch not unwrapped: inner batch member 2")
    out = subprocess.run([sys.executable, "-m", "rmqlib.cli.main", "dump", "commitlog",
                          str(directory)], capture_output=True, text=True)
    assert out.returncode == 1
    assert "inner batch not unwrapped" in out.stdout


# one record of a mixed commitlog: ordinary, an inner batch of n members, or a broken one
records = st.lists(st.one_of(st.just(("plain", 0)), st.tuples(st.just("inner"), st.integers(1, 5)),
                             st.tuples(st.just("broken"), st.integers(2, 5))),
                   min_size=1, max_size=12)


@given(records, st.integers(1, 5))
@settings(max_examples=60, deadline=None)
def test_unwrap_keeps_commitlog_order_whatever_the_mix(tmp_path_factory, mix, chunk):
    """Plain rows, members and unsplittable records come out in commitlog order with the
    queue offsets the client gives them, however the records are mixed and batched."""
    expected = []
    writer = CommitLogWriter(256 * 1024, assign_queue_offsets=False)
    base = 0
    for number, (kind, members_n) in enumerate(mix):
        if kind == "plain":
            body = f"plain-{number}".encode()
            writer.append(Message(topic="T", body=body, queue_offset=number,
                                  properties=(("UNIQ_KEY", f"P{number}"),)))
            expected.append((number, 0, None, body, None))
            continue
        bodies = [f"m-{number}-{j}".encode() for j in range(members_n)]
        encoded = encode_inner_batch([(0, b, {"UNIQ_KEY": f"M{number}-{j}"})
                                      for j, b in enumerate(bodies)])
        if kind == "broken":
            encoded = encoded[:-3]
        writer.append(Message(topic="T", body=encoded, sysflag=INNER, queue_offset=base,
                              properties=(("INNER_NUM", str(members_n)),
                                          ("INNER_BASE", str(base)))))
        if kind == "broken":
            expected.append((base, 0, None, encoded, "inner batch not unwrapped"))
        else:
            expected += [(base + j, j, members_n, b, None) for j, b in enumerate(bodies)]
        base += members_n
    directory = tmp_path_factory.mktemp("mix") / "commitlog"
    writer.write(directory)
    table, _ = read_table(directory / f"{0:020d}")
    whole = table.combine_chunks().to_batches()[0]
    pieces = [unwrap_inner_batches(whole.slice(lo, chunk))
              for lo in range(0, whole.num_rows, chunk)]
    rows = pa.Table.from_batches(pieces, schema=MESSAGE_SCHEMA).to_pylist()
    got = [(r["queue_offset"], r["inner_index"], r["inner_num"], r["body"],
            r["body_error"] and r["body_error"][:len("inner batch not unwrapped")])
           for r in rows]
    assert got == expected


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=4) | st.sampled_from(["٣", "-1", " 3", "3 ", "0", "99"]))
@example("²")  # isdigit() but not int(): was an internal error (exit 4)
@example("\x85")  # a line separator to str.splitlines, printed raw inside a JSON string
def test_any_inner_num_text_is_a_finding_never_a_crash(text):
    """INNER_NUM is the broker's text: whatever it holds, the dump exits 0 or 1 (members, or
    a member_error naming the count), the Arrow path keeps the record, verify reports."""
    import contextlib
    import io
    import tempfile
    from pathlib import Path

    from rmqlib import verify_store
    from rmqlib.cli.main import main

    if "\x01" in text or "\x02" in text:  # the property separators cannot occur in values
        text = text.replace("\x01", "").replace("\x02", "")
    with tempfile.TemporaryDirectory() as scratch:
        directory = _store(Path(scratch), inner_num=text)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = main(["dump", "commitlog", str(directory), "--json"])
        rows = json_lines(out.getvalue())
        members = [r for r in rows if r["kind"] == "member"]
        errors = [r for r in rows if r["kind"] == "member_error"]
        assert code == (1 if errors else 0)
        assert len(members) == (0 if errors else 3)
        assert bool(errors) == (text.isascii() and text.isdigit() and int(text) != 3)
        table, _ = read_table(directory / f"{0:020d}")
        assert unwrap_inner_batches(table.to_batches()[0]).num_rows == (5 if not errors else 3)
        verify_store(Path(scratch))  # findings, not an exception

