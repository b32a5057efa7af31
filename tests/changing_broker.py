"""A model broker whose store does not only grow: for the tests of stores that change.

It keeps a message history and lays it out as a broker would (commitlog segments through
``rmq_encoder.CommitLogWriter``, one consume queue per topic and queue id, the next
segment preallocated), writing only the files whose bytes changed, each with a later
modification time than any before (a broker's nights are hours apart; the file system's
coarse clock could otherwise give a rewrite the mtime of the copy before it). What it can
do to its history is what real brokers do:

* ``grow``: append messages;
* ``truncate(k)``: keep the first ``k`` messages (a failover's truncation, an ASYNC_FLUSH
  power loss), the broker then appends new ones at the same offsets;
* ``reset``: an empty store under the same name (a re-provisioned broker);
* ``restore``: an earlier state of its own (a backup put back, a slave re-synced from empty
  that has not caught up yet).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import rmq_encoder as E
import store_encoders as S
from hypothesis import strategies as st

from jobs.snapshot.copier import take_snapshot
from jobs.snapshot.manifest import Manifest
from jobs.snapshot.sources import StoreSource

TOPICS = ("OrderTopic", "PaymentTopic")
QUEUES = 2
CQ_FILE_UNITS = 40


@dataclass
class ChangingBroker:
    """A message history and its store directory."""

    root: Path
    file_size: int = 64 * 1024
    seed: int = 0
    history: list[E.Message] = field(default_factory=list)
    states: list[list[E.Message]] = field(default_factory=list)  # after each change
    serial: int = 0            # every message ever made, so no two are alike
    clock_ns: int = 1_800_000_000 * 10**9
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    # ---- what happens to the history

    def grow(self, count: int) -> None:
        self.history += [self._message() for _ in range(count)]

    def resend(self, messages: list[E.Message]) -> None:
        """Append ``messages`` again, stored anew (a producer's retry after a failover:
        the same msgId, another store time and offset)."""
        self.serial += len(messages)
        self.history += [replace(m, store_timestamp=m.store_timestamp + 10**9 + self.serial)
                         for m in messages]

    def truncate(self, keep: int) -> None:
        self.history = self.history[:keep]

    def reset(self) -> None:
        self.history = []
        shutil.rmtree(self.root, ignore_errors=True)

    def restore(self, history: list[E.Message]) -> None:
        self.history = list(history)

    def change(self, change: tuple) -> None:
        """Apply one night's change, as :func:`nights_changes` draws them; every state the
        history had is kept (``states``) for a later restore."""
        match change:
            case ("grow", count):
                self.grow(count)
            case ("truncate", fraction, count):
                self.truncate(int(len(self.history) * fraction))
                self.grow(count)
            case ("reset", count):
                self.reset()
                self.grow(count)
            case ("restore", back):
                self.restore(self.states[max(0, len(self.states) - 1 - back)])
        self.states.append(list(self.history))

    def _message(self) -> E.Message:
        self.serial += 1
        number = self.serial
        body = self.rng.randbytes(self.rng.randrange(1, 3000))
        topic = TOPICS[self.rng.randrange(len(TOPICS))]
        props = [("KEYS", f"key-{number}"), ("TAGS", f"tag{number % 3}"),
                 ("UNIQ_KEY", f"0A0000010000{self.seed & 0xFFFF:04X}{number:016X}")]
        stamp = 1_700_000_000_000 + number * 1000
        return E.Message(topic=topic, body=body, properties=props,
                         queue_id=self.rng.randrange(QUEUES), born_timestamp=stamp - 3,
                         store_timestamp=stamp)

    # ---- the store directory

    def write(self) -> CommitLogLayout:
        """Lay the history out in ``root`` (changed files only); returns where each record
        went."""
        writer = E.CommitLogWriter(self.file_size)
        for message in self.history:
            writer.append(replace(message, queue_offset=0))
        files: dict[str, bytes] = {}
        segments = [*writer.segments, bytearray(self.file_size)]  # the next, preallocated
        for index, data in enumerate(segments):
            files[f"commitlog/{index * self.file_size:020d}"] = bytes(data)
        units: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        for placed in writer.placed:
            message = placed.message
            key = (str(message.topic), message.queue_id)
            units.setdefault(key, []).append((placed.physical_offset, placed.length,
                                              S.java_hash(dict(message.properties)["TAGS"])))
        for (topic, queue_id), queue in units.items():
            for first in range(0, len(queue), CQ_FILE_UNITS):
                name = f"consumequeue/{topic}/{queue_id}/{first * 20:020d}"
                files[name] = S.cq_file(queue[first:first + CQ_FILE_UNITS], CQ_FILE_UNITS * 20)
        files["config/topics.json"] = json.dumps({
            "dataVersion": {"counter": 1, "stateVersion": 0, "timestamp": 1_700_000_000_000},
            "topicConfigTable": {topic: {
                "attributes": {}, "order": False, "perm": 6, "readQueueNums": QUEUES,
                "topicFilterType": "SINGLE_TAG", "topicName": topic, "topicSysFlag": 0,
                "writeQueueNums": QUEUES} for topic in TOPICS}}, indent=1).encode()
        self._sync(files)
        return CommitLogLayout(writer.placed)

    def _sync(self, files: dict[str, bytes]) -> None:
        existing = {p.relative_to(self.root).as_posix(): p
                    for p in self.root.rglob("*") if p.is_file()} if self.root.exists() else {}
        for name in set(existing) - set(files):
            existing[name].unlink()  # a file the history no longer reaches
        for name, data in sorted(files.items()):
            path = self.root / name
            if name in existing and path.read_bytes() == data:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            self.clock_ns += 10**9
            os.utime(path, ns=(self.clock_ns, self.clock_ns))


def nights_changes(most: int = 60) -> st.SearchStrategy[tuple]:
    """What can happen to a broker's history between two snapshots (``change``)."""
    return st.one_of(
        st.tuples(st.just("grow"), st.integers(0, most)),
        st.tuples(st.just("truncate"), st.floats(0, 1), st.integers(0, most)),
        st.tuples(st.just("reset"), st.integers(1, most)),
        st.tuples(st.just("restore"), st.integers(1, 5)),
    )


@dataclass(frozen=True)
class CommitLogLayout:
    """Where the records of one written state are."""

    placed: list[E.Placed]

    def by_offset(self) -> dict[int, str]:
        """{physical offset: UNIQ_KEY} of every record."""
        return {p.physical_offset: dict(p.message.properties)["UNIQ_KEY"]
                for p in self.placed}


def stamp(root: Path, files_ns: int, directories_ns: int | None = None) -> None:
    """Give every file of ``root`` the mtime ``files_ns`` and every directory (``root``
    too) ``directories_ns`` (``files_ns`` when None): what a store looks like to a listing
    when everything was written in one tick, or in a tick before its directories'."""
    paths = sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True)
    for path in [*paths, root]:
        ns = files_ns if path.is_file() or directories_ns is None else directories_ns
        os.utime(path, ns=(ns, ns))


def rewrite_within_the_listings_tick(broker: ChangingBroker, tick_ns: int,
                                     source: Callable[[Path], StoreSource],
                                     snapshots: Path, nights: Sequence[str]) -> Manifest:
    """Snapshot a store whose every mtime is one tick, then truncate and rewrite it and put
    the same mtimes back (a broker writing in the tick the listing ran in), and snapshot it
    again; the second manifest."""
    broker.grow(300)
    broker.write()
    stamp(broker.root, tick_ns)
    take_snapshot(source(broker.root), snapshots, "b", nights[0])
    broker.truncate(200)
    broker.grow(150)
    broker.write()
    stamp(broker.root, tick_ns)
    return take_snapshot(source(broker.root), snapshots, "b", nights[1])
