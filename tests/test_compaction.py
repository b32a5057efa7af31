"""rmqlib.compaction: the compaction log and sparse queue of a 5.x compacted topic.

Sparse-queue files drawn by hypothesis hold the unit decoder to the layout and its byte
accounting. The real 5.5.0 broker of the harness (``v5-compaction``) holds the reader to
what the broker served and wrote: every queue's view equal, field by field, to what a
consumer pulled from offset 0; the compacted part keeping exactly the latest send of each
key (from the send log, an oracle independent of the broker's files); ``rmq verify``
clean; and damage in a copy named for what it is.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqlib.compaction import layout as L
from rmqlib.compaction.store import CompactionIssue, decode_queue_bytes, read_compaction
from rmqlib.store.verify import verify_store

UNIT = struct.Struct(">qiqqqhii")
TOPIC = "TopicCompacted"

units = st.lists(st.tuples(st.integers(0, 2**40), st.integers(1, 2**20),
                           st.integers(-2**40, 2**40), st.integers(0, 2**41)),
                 max_size=12)


def unit_bytes(position: int, size: int, tags: int, stored: int, offset: int,
               batch: int = 1) -> bytes:
    return UNIT.pack(position, size, tags, stored, offset, batch, -1, 0)


END_UNIT = UNIT.pack(L.END_POSITION, 0, 0, 0, 0, 0, -1, 0)


@settings(max_examples=60, deadline=None)
@given(drawn=units, end=st.booleans(), tail=st.integers(0, 5))
def test_a_sparse_queue_file_reads_back_and_accounts_every_byte(drawn: list, end: bool,
                                                                tail: int) -> None:
    data = b"".join(unit_bytes(p, s, t, ts, offset) for offset, (p, s, t, ts) in
                    enumerate(drawn)) + (END_UNIT if end else b"") + bytes(tail * L.UNIT_SIZE)
    decoded, account = decode_queue_bytes(data, "q")
    assert [(u.position, u.size, u.tags_code, u.store_timestamp, u.queue_offset)
            for u in decoded] == [(p, s, t, ts, o) for o, (p, s, t, ts) in enumerate(drawn)]
    assert account.unreadable == []
    assert account.decoded == len(drawn) * L.UNIT_SIZE
    assert account.blank == (L.UNIT_SIZE if end else 0)


@given(data=st.binary(max_size=6 * 46 + 7))
def test_any_bytes_are_units_or_unreadable_regions_never_an_exception(data: bytes) -> None:
    decoded, account = decode_queue_bytes(data, "q")
    assert account.balanced
    assert len(decoded) * L.UNIT_SIZE <= account.decoded


# --------------------------------------------------------------------------- the real broker


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def view(store: Path) -> list[tuple]:
    rows = []
    for queue in read_compaction(store).queues:
        for unit in queue.units:
            record = queue.record_of(unit)
            rows.append((queue.queue_id, unit.queue_offset, unit.position, unit.size,
                         record.properties.get("KEYS"), record.properties.get("TAGS"),
                         record.properties.get("UNIQ_KEY"), record.body.decode(),
                         record.store_timestamp))
    return rows


@pytest.mark.broker
def test_every_queue_reads_as_its_consumer_was_served(compaction_store: Path) -> None:
    served = [(v["queueId"], v["queueOffset"], v["compactionLogPosition"], v["storeSize"],
               v["keys"], v["tags"], v["msgId"], v["body"], v["storeTimestamp"])
              for v in jsonl(compaction_store / "truth" / "compacted_view.jsonl")]
    assert served and view(compaction_store / "store") == served


@pytest.mark.broker
@pytest.mark.parametrize("copy", ["store", "snapshots/s1/store"])
def test_the_compacted_part_keeps_exactly_the_latest_send_of_each_key(
        compaction_store: Path, copy: str) -> None:
    """Up to the checkpoint a queue holds the newest send of every key sent there up to the
    checkpoint (no older one, no other); after it, every send: the active segment."""
    scan = read_compaction(compaction_store / copy)
    sends = [s for s in jsonl(compaction_store / "truth" / "compacted_sends.jsonl")
             if s["acked"] and (copy == "store" or s["phase"] == "before_s1")]
    for queue in scan.queues:
        compacted_to = scan.checkpoint[L.checkpoint_key(TOPIC, queue.queue_id)]
        mine = [s for s in sends if s["queueId"] == queue.queue_id]
        latest: dict[str, int] = {}
        for send in mine:
            if send["queueOffset"] <= compacted_to:
                latest[send["compactionKey"]] = max(latest.get(send["compactionKey"], -1),
                                                    send["queueOffset"])
        want = sorted([*latest.values(),
                       *(s["queueOffset"] for s in mine if s["queueOffset"] > compacted_to)])
        assert [u.queue_offset for u in queue.units] == want
        assert [i for i in queue.issues if not replaced_segment(i)] == []


def replaced_segment(issue: CompactionIssue) -> bool:
    """A segment a compaction run replaced and renamed ``*.delete``, which the broker had
    not deleted yet when it stopped: whether a store has one depends on the run's timing."""
    return issue.expected and issue.path.endswith(L.REPLACED_SUFFIX)


@pytest.mark.broker
@pytest.mark.parametrize("copy", ["store", "snapshots/s1/store"])
def test_verify_is_clean_and_checks_every_kept_record_against_its_original(
        compaction_store: Path, copy: str) -> None:
    report = verify_store(compaction_store / copy)
    assert report.errors == [], report.errors
    kept = sum(len(q.units) for q in read_compaction(compaction_store / copy).queues)
    assert report.counts["compacted_units"] == kept > 0
    replaced = {i.path for q in read_compaction(compaction_store / copy).queues
                for i in q.issues if replaced_segment(i)}
    assert [f for f in report.warnings if "compaction" in f.message
            and f.path not in replaced] == []


@pytest.mark.broker
def test_a_replaced_segment_not_yet_deleted_is_named_and_not_read(
        compaction_store: Path, tmp_path: Path) -> None:
    """A compaction run renames the segment it replaced to ``*.delete`` and deletes it
    later: a copy taken (or a broker stopped) in between holds it. It is not read (its
    records are older copies of the kept ones); the queue's units are the same, and verify
    names the file as a warning, not an error."""
    store = tmp_path / "store"
    shutil.copytree(compaction_store / "store", store)
    log_dir = store / L.COMPACTION_DIR / L.LOG_DIR / TOPIC / "1"
    segment = sorted(p for p in log_dir.iterdir() if L.SEGMENT_NAME.match(p.name))[0]
    replaced = log_dir / f"{int(segment.name) + 1:020d}{L.REPLACED_SUFFIX}"
    shutil.copyfile(segment, replaced)
    before, after = read_compaction(compaction_store / "store"), read_compaction(store)
    assert [[u.queue_offset for u in q.units] for q in after.queues] == \
        [[u.queue_offset for u in q.units] for q in before.queues]
    assert [(i.path, i.expected) for i in after.queues[1].issues if replaced_segment(i)] == \
        [(str(replaced), True)]
    report = verify_store(store)
    assert str(replaced) not in {f.path for f in report.errors}
    assert str(replaced) in {f.path for f in report.warnings}


@pytest.mark.broker
def test_damage_in_a_copy_is_named_for_what_it_is(compaction_store: Path,
                                                  tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(compaction_store / "store", store)
    queue_dir = store / L.COMPACTION_DIR / L.CQ_DIR / TOPIC / "0"
    first = sorted(queue_dir.iterdir())[0]
    data = bytearray(first.read_bytes())
    position = struct.unpack_from(">q", data, L.UNIT_SIZE)[0]  # the second unit
    struct.pack_into(">q", data, L.UNIT_SIZE, position + 1)
    first.write_bytes(bytes(data))
    log_dir = store / L.COMPACTION_DIR / L.LOG_DIR / TOPIC / "1"
    sorted(log_dir.iterdir())[-1].unlink()  # queue 1's active log segment
    findings = [(Path(f.path).parent.name, f.offset, f.message) for f in
                verify_store(store).errors]
    assert ("0", L.UNIT_SIZE, f"no record starts at position {position + 1} of the "
                              "compaction log") in findings
    assert any(m.startswith("record of queue offset") and q == "0" for q, _, m in findings)
    assert any(m == "no log file of the same name" and q == "1" for q, _, m in findings)
    orphans = [m for q, _, m in findings if q == "1" and m.startswith("no record starts")]
    assert len(orphans) == len([u for u in read_compaction(compaction_store / "store")
                                .queues[1].units if u.position >= 41400])
