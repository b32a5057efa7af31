"""A store's pop consumers: the checkpoint and ack records of its commitlog (rmqlib.pop)
against the revive group's offsets in its config."""

from __future__ import annotations

from pathlib import Path

from rmqlib.config import load_config_dir
from rmqlib.pop import InFlight, PopRecord, PopState, read_pop_state, revive_offsets
from rmqlib.store.commitlog_source import every_record


def read_store_pop_state(store: str | Path) -> tuple[PopState, list[InFlight]]:
    """The pop state of every record of ``store`` (a full scan) and the messages in flight.
    The revive offsets come from consumerOffset.json, or lmqConsumerOffset.json which
    replaces it with enableLmq; a store without either has revived nothing yet."""
    store = Path(store)
    state = read_pop_state(PopRecord(r.topic, r.queue_id, r.queue_offset, r.properties,
                                     r.body, r.physical_offset) for r in every_record(store))
    config = load_config_dir(store / "config")
    tables = [t for t in (config.consumer_offsets, config.lmq_consumer_offsets) if t]
    revived = revive_offsets((o.topic, o.group, o.queue_id, o.offset)
                             for table in tables for o in table.offsets)
    return state, state.in_flight(revived)
