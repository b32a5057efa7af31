"""A store's pop consumers: the checkpoint and ack records of its commitlog (rmqlib.pop)
against the revive group's offsets in its config, and, with KV pop, kvStore/'s records."""

from __future__ import annotations

from pathlib import Path

from rmqlib.config import load_config_dir
from rmqlib.pop import (
    KV_DIRECTORY,
    KV_FAMILY,
    InFlight,
    PopRecord,
    PopState,
    decode_kv_records,
    read_pop_state,
    revive_offsets,
)
from rmqlib.rocksdb.database import is_database, open_readonly
from rmqlib.store.commitlog_source import every_record


def read_store_pop_state(store: str | Path) -> tuple[PopState, list[InFlight]]:
    """The pop state of every record of ``store`` (a full scan) and the messages in flight:
    classic pop's (the revive offsets from consumerOffset.json, or lmqConsumerOffset.json
    which replaces it with enableLmq; a store without either has revived nothing yet), then
    KV pop's (kvStore/, read on a clone), whose unreadable records are named in the state."""
    store = Path(store)
    state = read_pop_state(PopRecord(r.topic, r.queue_id, r.queue_offset, r.properties,
                                     r.body, r.physical_offset) for r in every_record(store))
    config = load_config_dir(store / "config")
    tables = [t for t in (config.consumer_offsets, config.lmq_consumer_offsets) if t]
    revived = revive_offsets((o.topic, o.group, o.queue_id, o.offset)
                             for table in tables for o in table.offsets)
    flying = state.in_flight(revived)
    if is_database(store / KV_DIRECTORY):
        with open_readonly(store / KV_DIRECTORY) as db:
            kv, bad = decode_kv_records(db.items(KV_FAMILY))
        flying += kv
        state.unreadable += [(-1, f"{KV_DIRECTORY}/{KV_FAMILY} record {key[:40].hex()}: {why}")
                             for key, why in bad]
    return state, flying
