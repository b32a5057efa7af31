"""A synthetic broker store that grows night after night, laid out the broker's way.

For bench/years.py: every call of :meth:`GrowingBroker.grow` appends one night of
messages, as a running broker would have between two snapshots:

* ``commitlog/``: records made by the commitlog bench's generator (``FastRecords``, the
  test encoder's bytes), appended to the tail segment; a segment is 1 MiB (as the
  real-broker harness configures its brokers), closed with a BLANK when the next record
  would not fit, and the tail is zero past the last record, as on a live broker;
* ``consumequeue/<topic>/<queue>/``: a 20-byte unit per message, 300 units per file (the
  harness's 6,000-byte consume-queue files), tags hash = ``String.hashCode`` of the TAGS;
* ``config/``: topics, subscription groups and consumer offsets in fastjson's text:
  ``G_FAST`` has consumed everything, ``G_SLOW`` is half a night behind on every queue;
* ``index/``: every message's UNIQ_KEY and each of its KEYS as ``topic#key`` entries, as
  the broker's IndexService.buildIndex puts them (``IndexWriter``, written from
  IndexFile.putKey), in files of 5,000 slots and 20,000 entries (the harness's 1:4 ratio)
  named by their first store time; a full file's successor is seeded with its end offset
  and time, as IndexService.getAndCreateLastIndexFile does;
* ``checkpoint``: the last store time as the physical, logical and index timestamps;
* retention, as the broker's ``fileReservedTime`` (72 hours by default) does it: commitlog
  segments holding no message of the last ``retained_nights`` nights are deleted (never the
  last one), then every consume-queue file whose last unit points below the first
  remaining segment and every index file whose end offset is below it (never a queue's or
  the index's last file: ConsumeQueue.deleteExpiredFile, IndexService.deleteExpiredFile).
  So the store on disk stays the size of three nights (``store_bytes``) however much was
  ever written (``physical_end``).

Three topics of four queues (message ``i`` goes to topic ``i % 3``, queue ``i % 4``, so
its queue offset is ``i // 12``, as the generator writes it); a night's messages are
spread over 24 hours of store time. The state (next message, next physical offset) lives
in ``grown.json`` next to the store.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

from commitlog_decode import FastRecords, message_keys, uniq_key
from store_encoders import IndexWriter, checkpoint_bytes, cq_unit, java_hash, render_fastjson

SEGMENT = 2**20
CQ_UNITS_PER_FILE = 300
CQ_UNIT = 20
BLANK_MAGIC = 0xCBD43194
DAY_MS = 86_400_000
FIRST_STORE_MS = 1_700_000_000_007   # FastRecords: message i stored at this + i * step
TOPICS = ("OrderTopic", "PaymentTopic", "AuditTopic")
QUEUES = 4
GROUPS = ("G_FAST", "G_SLOW")
INDEX_SLOTS, INDEX_ENTRIES = 5_000, 20_000


@dataclass
class Grown:
    messages: int = 0          # messages written so far
    physical_end: int = 0      # commitlog bytes written so far (incl. BLANKs)
    nights: int = 0
    night_starts: list[int] = field(default_factory=list)  # physical offset of each night


class GrowingBroker:
    def __init__(self, root: Path, messages_per_night: int, body_size: int = 100,
                 retained_nights: int = 3, index_files: bool = True,
                 segment_size: int = SEGMENT) -> None:
        self.store = root / "store"
        self.segment = segment_size
        self.retained_nights = retained_nights
        self.index_files = index_files
        self._index: IndexWriter | None = None
        self._index_name = ""
        self.state_file = root / "grown.json"
        self.per_night = messages_per_night
        self.records = FastRecords(body_size, time_step_ms=DAY_MS // messages_per_night)
        self.state = Grown(**json.loads(self.state_file.read_text())) \
            if self.state_file.exists() else Grown()

    def grow(self) -> Grown:
        """Append one night of messages; returns the state after it."""
        units: dict[tuple[int, int], list[bytes]] = {}
        first = self.state.messages
        self.state.night_starts.append(self.state.physical_end)
        for index in range(first, first + self.per_night):
            length = len(self.records.record(index, 0))  # a record's length is its own
            record = self.records.record(index, self._room_for(length))
            self._append(record)
            tag_hash = java_hash(f"tag{index % 5}")
            units.setdefault((index % 3, index % 4), []).append(
                cq_unit(self.state.physical_end - len(record), len(record), tag_hash))
            if self.index_files:
                self._put_keys(index, self.state.physical_end - len(record))
            self.state.messages += 1
        for (topic, queue), written in units.items():
            self._append_units(topic, queue, written)
        if self._index is not None:
            self._write_index()
        self.state.nights += 1
        self._apply_retention()
        self._write_config()
        last_store_ms = FIRST_STORE_MS + (self.state.messages - 1) * self.records.time_step_ms
        (self.store / "checkpoint").write_bytes(
            checkpoint_bytes(last_store_ms, last_store_ms, last_store_ms))
        self.state_file.write_text(json.dumps(asdict(self.state)))
        return self.state

    def disk_bytes(self) -> int:
        """The bytes of the store's files on disk now (what retention keeps bounded)."""
        return sum(p.stat().st_size for p in self.store.rglob("*") if p.is_file())

    # ---- commitlog

    def _segment(self, offset: int) -> Path:
        return self.store / "commitlog" / f"{offset - offset % self.segment:020d}"

    def _room_for(self, length: int) -> int:
        """The physical offset the next record of ``length`` bytes goes to: the current
        end, or the next segment after a BLANK when record + 8 bytes no longer fit."""
        end = self.state.physical_end
        left = self.segment - end % self.segment
        if length + 8 > left:
            self._write_at(end, struct.pack(">iI", left, BLANK_MAGIC))
            self.state.physical_end = end + left
        return self.state.physical_end

    def _append(self, record: bytes) -> None:
        self._write_at(self.state.physical_end, record)
        self.state.physical_end += len(record)

    def _write_at(self, offset: int, data: bytes) -> None:
        path = self._segment(offset)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(bytes(self.segment))  # a new segment is all zeros
        with path.open("r+b") as out:
            out.seek(offset % self.segment)
            out.write(data)

    def _apply_retention(self) -> None:
        starts = self.state.night_starts
        if len(starts) <= self.retained_nights:
            return
        keep_from = starts[-self.retained_nights]
        segments = sorted((self.store / "commitlog").iterdir())
        for segment in segments[:-1]:
            if int(segment.name) + self.segment <= keep_from:
                segment.unlink()
        commitlog_min = int(min(p.name for p in (self.store / "commitlog").iterdir()))
        for queue in (self.store / "consumequeue").glob("*/*"):
            files = sorted(queue.iterdir())
            for old in files[:-1]:
                last_unit = old.read_bytes()[-CQ_UNIT:]
                if struct.unpack(">q", last_unit[:8])[0] < commitlog_min:
                    old.unlink()
        for old in sorted((self.store / "index").glob("*"))[:-1]:
            end_phy_offset = struct.unpack(">q", old.read_bytes()[24:32])[0]
            if end_phy_offset < commitlog_min:
                old.unlink()

    # ---- index

    def _put_keys(self, index: int, physical_offset: int) -> None:
        """The message's keys, as IndexService.buildIndex puts them (UNIQ_KEY, then KEYS)."""
        topic = TOPICS[index % 3]
        store_ms = FIRST_STORE_MS + index * self.records.time_step_ms
        for key in (uniq_key(index), *message_keys(index)):
            writer = self._index_writer(store_ms)
            if not writer.put(f"{topic}#{key}", physical_offset, store_ms):
                raise AssertionError("a fresh index file is never full")

    def _index_writer(self, store_ms: int) -> IndexWriter:
        """The last index file (resumed from disk, or a new one when it is full)."""
        directory = self.store / "index"
        if self._index is None:
            files = sorted(directory.glob("*"))
            if files:
                self._index_name = files[-1].name
                self._index = IndexWriter.resume(files[-1].read_bytes(), INDEX_SLOTS,
                                                 INDEX_ENTRIES)
        if self._index is None or self._index.full:
            if self._index is not None:
                self._write_index()
            previous = self._index
            self._index = IndexWriter(
                INDEX_SLOTS, INDEX_ENTRIES,
                seed_end_phy_offset=previous.end_phy_offset if previous else 0,
                seed_end_timestamp=previous.end_timestamp if previous else 0)
            self._index_name = _index_file_name(store_ms)
        return self._index

    def _write_index(self) -> None:
        directory = self.store / "index"
        directory.mkdir(parents=True, exist_ok=True)
        assert self._index is not None
        (directory / self._index_name).write_bytes(self._index.data())

    # ---- consume queues

    def _append_units(self, topic: int, queue: int, units: list[bytes]) -> None:
        directory = self.store / "consumequeue" / TOPICS[topic] / str(queue)
        directory.mkdir(parents=True, exist_ok=True)
        # messages before this night in this queue: the queue offset of its first new unit
        start = self._queue_count(topic, queue, self.state.messages - self.per_night)
        file_bytes = CQ_UNITS_PER_FILE * CQ_UNIT
        for number, unit in enumerate(units, start):
            position = number * CQ_UNIT
            path = directory / f"{position - position % file_bytes:020d}"
            if not path.exists():
                path.write_bytes(bytes(file_bytes))
            with path.open("r+b") as out:
                out.seek(position % file_bytes)
                out.write(unit)

    @staticmethod
    def _queue_count(topic: int, queue: int, messages: int) -> int:
        """How many of the first ``messages`` messages went to (topic, queue)."""
        residue = next(r for r in range(12) if r % 3 == topic and r % 4 == queue)
        return 0 if messages <= residue else (messages - residue - 1) // 12 + 1

    # ---- config

    def _write_config(self) -> None:
        config = self.store / "config"
        config.mkdir(parents=True, exist_ok=True)
        version = {"counter": self.state.nights, "stateVersion": 0,
                   "timestamp": FIRST_STORE_MS + self.state.nights * DAY_MS}
        topics = {name: {"attributes": {}, "order": False, "perm": 6, "readQueueNums": QUEUES,
                         "topicFilterType": "SINGLE_TAG", "topicName": name, "topicSysFlag": 0,
                         "writeQueueNums": QUEUES} for name in TOPICS}
        groups = {name: {"brokerId": 0, "consumeBroadcastEnable": True, "consumeEnable": True,
                         "consumeFromMinEnable": True, "groupName": name,
                         "retryMaxTimes": 16, "retryQueueNums": 1,
                         "whichBrokerWhenConsumeSlowly": 1}
                  for name in GROUPS}
        behind = self.per_night // 24   # G_SLOW: half a night over 12 queues
        offsets = {}
        for topic, name in enumerate(TOPICS):
            for group in GROUPS:
                offsets[f"{name}@{group}"] = {
                    queue: max(0, self._queue_count(topic, queue, self.state.messages)
                               - (behind if group == "G_SLOW" else 0))
                    for queue in range(QUEUES)}
        documents = {
            "topics.json": {"dataVersion": version, "topicConfigTable": topics},
            "subscriptionGroup.json": {"dataVersion": version, "forbiddenTable": {},
                                       "subscriptionGroupTable": groups},
            "consumerOffset.json": {"dataVersion": version, "offsetTable": offsets},
        }
        for name, document in documents.items():
            (config / name).write_text(render_fastjson(document))


def _index_file_name(store_ms: int) -> str:
    """An index file's name: its creation time as yyyyMMddHHmmssSSS (UtilAll)."""
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(store_ms / 1000, UTC)
    return moment.strftime("%Y%m%d%H%M%S") + f"{store_ms % 1000:03d}"
