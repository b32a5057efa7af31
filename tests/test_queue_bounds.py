"""Each night's queue bounds start from the night before's (issue 35): whatever the history
(nights checked or skipped, a commitlog start that moves either way, rewrites superseding
units, fillers, units out of commitlog order), the reconcile job writes the bounds and the
gaps that every unit of history gives, computed here in Python from the rows themselves.

The warehouse is real (every table created from its contract by delta-rs) and so is the
job (``reconcile_snapshot`` on the DuckDB engine); only the rows are made up."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.check.engines import DuckDbEngine
from jobs.check.reconcile import reconcile_snapshot
from jobs.check.views import snapshot_scope
from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import read_rows
from jobs.lakehouse.history import HISTORY_KINDS
from jobs.lakehouse.tables import Registry

BROKER = "b"
QUEUES = (("TopicA", 0), ("TopicA", 1), ("TopicB", 0))
UNIT_SIZE = 100

# A night: per queue, its new units (0 normal, 1 filler, 2 pointing far back), how far
# the commitlog's start moves (it may move back), whether a rewrite supersedes every
# earlier night's units from some offset, and whether the night is checked.
UNIT = st.sampled_from([0, 0, 0, 0, 0, 0, 1, 2])
NIGHT = st.fixed_dictionaries({
    "units": st.tuples(*(st.lists(UNIT, max_size=5) for _ in QUEUES)),
    "start_moves": st.integers(-300, 900),
    "rewrite_from": st.none() | st.integers(0, 3000),
    "checked": st.booleans(),
})


@dataclass
class History:
    """The rows written so far, for the oracle."""

    units: list[dict] = field(default_factory=list)
    rewrites: list[dict] = field(default_factory=list)
    seq_of: dict[str, int] = field(default_factory=dict)
    next_offset: dict[tuple[str, int], int] = field(default_factory=dict)
    cursor: int = 0
    start: int = 0

    def current(self, snapshot_id: str) -> list[dict]:
        """The units loaded up to the snapshot that no rewrite superseded."""
        seq = self.seq_of[snapshot_id]
        return [u for u in self.units if self.seq_of[u["first_snapshot_id"]] <= seq
                and not any(r["kind"] in HISTORY_KINDS
                            and u["commitlog_offset"] >= r["from_offset"]
                            and u["first_snapshot_id"] in r["superseded_snapshot_ids"]
                            for r in self.rewrites)]


def new_units(history: History, snapshot_id: str, kinds: tuple[list[int], ...]) -> list[dict]:
    rows = []
    for (topic, queue_id), queue_kinds in zip(QUEUES, kinds, strict=True):
        for kind in queue_kinds:
            queue_offset = history.next_offset.get((topic, queue_id), 0)
            history.next_offset[(topic, queue_id)] = queue_offset + 1
            history.cursor += UNIT_SIZE
            commitlog_offset = {0: history.cursor, 1: 0, 2: history.cursor // 7}[kind]
            rows.append({
                "broker": BROKER, "topic": topic, "queue_id": queue_id,
                "queue_offset": queue_offset, "queue_type": "consumequeue",
                "commitlog_offset": commitlog_offset, "size": UNIT_SIZE, "tags_code": 0,
                "kind": "filler" if kind == 1 else "normal", "source_file": "q",
                "file_position": queue_offset * 20, "first_snapshot_id": snapshot_id})
    return rows


def expected_bounds(history: History, snapshot_id: str) -> dict[tuple, tuple]:
    """{(topic, queue_id): (min_offset, max_offset, last_expired_offset)}."""
    by_queue: dict[tuple, list[dict]] = {}
    for unit in history.current(snapshot_id):
        by_queue.setdefault((unit["topic"], unit["queue_id"]), []).append(unit)
    bounds = {}
    for queue, units in by_queue.items():
        top = max(u["queue_offset"] + 1 for u in units)
        live = [u["queue_offset"] for u in units
                if u["kind"] != "filler" and u["commitlog_offset"] >= history.start]
        expired = [u["queue_offset"] for u in units
                   if u["kind"] == "filler" or u["commitlog_offset"] < history.start]
        bounds[queue] = (min(live, default=top), top, max(expired, default=None))
    return bounds


def expected_gaps(history: History, snapshot_id: str,
                  bounds: dict[tuple, tuple]) -> dict[tuple, int]:
    """{(topic, queue_id): offsets missing between units from the min offset on}."""
    gaps = {}
    for queue, (low, _, _) in bounds.items():
        offsets = sorted(u["queue_offset"] for u in history.current(snapshot_id)
                         if (u["topic"], u["queue_id"]) == queue and u["queue_offset"] >= low)
        missing = sum(b - a - 1 for a, b in itertools.pairwise(offsets) if b > a + 1)
        if missing:
            gaps[queue] = missing
    return gaps


def snapshot_row(snapshot_id: str, seq: int, start: int, end: int) -> dict:
    return {"broker": BROKER, "snapshot_id": snapshot_id, "snapshot_seq": seq,
            "taken_at": datetime(2026, 1, seq, tzinfo=UTC), "store_path": "/s",
            "generation": "5.x", "generation_evidence": [], "features": [],
            "abort_present": False, "file_count": 0, "total_bytes": 0, "files_by_kind": {},
            "bytes_by_kind": {}, "commitlog_min_offset": start, "commitlog_max_offset": end,
            "status": "loaded", "load_errors": []}


@given(nights=st.lists(NIGHT, min_size=2, max_size=5))
@settings(max_examples=20, deadline=None)
def test_each_nights_bounds_and_gaps_are_those_of_the_whole_history(
        nights: list[dict]) -> None:
    with TemporaryDirectory() as scratch:
        warehouse = Path(scratch)
        registry = Registry(None, warehouse).ensure(names=False)
        history = History()
        previous_wrote_bounds = False  # the night before was checked and had queues
        for seq, night in enumerate(nights, start=1):
            snapshot_id = f"s{seq:02d}"
            history.seq_of[snapshot_id] = seq
            units = new_units(history, snapshot_id, night["units"])
            previous_start = history.start
            history.start = max(0, min(history.start + night["start_moves"], history.cursor))
            history.units += units
            registry.append_rows(T.SNAPSHOTS, [snapshot_row(
                snapshot_id, seq, history.start, history.cursor + UNIT_SIZE)])
            if units:
                registry.append_rows(T.QUEUE_ENTRIES, units)
            if night["rewrite_from"] is not None and seq > 1:
                rewrite = {"broker": BROKER, "snapshot_id": snapshot_id, "kind": "truncated",
                           "from_offset": night["rewrite_from"], "to_offset": history.cursor,
                           "records_superseded": 0, "incarnation": 1,
                           "superseded_snapshot_ids":
                               [s for s, n in history.seq_of.items() if n < seq]}
                history.rewrites.append(rewrite)
                registry.append_rows(T.HISTORY_REWRITES, [rewrite])
            wrote_before, previous_wrote_bounds = previous_wrote_bounds, False
            if not night["checked"]:
                continue
            # the night before's bounds are used when they exist and describe this history
            rewritten = night["rewrite_from"] is not None and seq > 1
            assert (snapshot_scope(registry, BROKER, snapshot_id).bounds_start is not None) \
                == (wrote_before and not rewritten and history.start >= previous_start), seq
            reconcile_snapshot(DuckDbEngine(warehouse), registry, BROKER, snapshot_id)

            bounds = expected_bounds(history, snapshot_id)
            previous_wrote_bounds = bool(bounds)
            written = read_rows(registry[T.QUEUE_BOUNDS].location, broker=BROKER,
                                snapshot_id=snapshot_id)
            assert {(r["topic"], r["queue_id"]): (r["min_offset"], r["max_offset"],
                                                  r["last_expired_offset"])
                    for r in written} == bounds, snapshot_id
            found = read_rows(registry[T.CHECK_RESULTS].location, broker=BROKER,
                              snapshot_id=snapshot_id)
            assert {(r["topic"], r["queue_id"]): r["affected"] for r in found
                    if r["check_name"] == "queue_offset_gap"} == \
                expected_gaps(history, snapshot_id, bounds), snapshot_id
