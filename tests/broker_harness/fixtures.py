"""pytest fixtures for the real-broker stores: thin wrappers around ``stores.ensure_stores``.

Import into a test module (or a conftest) with ``from <this module> import broker_stores,
growing_store, features_store, cluster_store, dledger_store,
dledger5_store, rocksdb_store, rocksdb_config_store, traces_store, rocksdbstore_store``; the
module loads ``stores.py`` by path, so it works whether or not ``tests`` is a package.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


def load_stores_module():
    """The ``stores.py`` next to this file, loaded once per interpreter."""
    name = "rmq_broker_harness_stores"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("stores.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


stores = load_stores_module()


def _generated(ensure, *args):  # type: ignore[no-untyped-def]
    """``ensure(*args)``; a store the harness could not generate fails the test in one
    message with the harness's log tails, never a traceback."""
    try:
        return ensure(*args)
    except stores.StoreGenerationError as exc:
        details = f"\n{exc.details}" if exc.details else ""
        pytest.fail(f"{exc}{details}", pytrace=False)


def _variant(name: str) -> Path:
    """One extra variant's dir, generated on first use."""
    return _generated(stores.ensure_stores, [name])[name]


@pytest.fixture(scope="session")
def broker_stores() -> dict[str, Path]:
    """{variant: variant dir} for every variant; generates missing ones (a few minutes)."""
    return _generated(stores.ensure_stores)


@pytest.fixture(scope="session")
def growing_store() -> Path:
    """The ``v5-growing`` variant dir: ``snapshots/s1|s2|s3/store`` (hot copies of one running
    broker, s3 after its retention deleted the oldest commitlog files), ``store/`` (final state
    after a clean shutdown) and ``truth/`` (incl. ``snapshots.json``). Generated on first use
    (~1.5 min), separately from the four main variants."""
    return _variant(stores.GROWING_VARIANT)


@pytest.fixture(scope="session")
def features_store() -> Path:
    """The ``v5-features`` variant dir: ``store/`` (one 5.5.0 broker over IPv6, with BatchCQ
    inner batches, consume-queue ext with filter bitmaps, LMQ, the property CRC trailer,
    zlib/lz4/zstd bodies, timers fired and pending, magic-v2 pop-retry records; clean shutdown)
    and ``truth/`` (messages, batches, lmq, timers, pops, queue_records, ...). Generated on first
    use (~45 s), separately from the other variants."""
    return _variant(stores.FEATURES_VARIANT)


@pytest.fixture(scope="session")
def cluster_store() -> Path:
    """The ``v5-cluster`` variant dir: ``s1/<broker>/store`` (hot copies of broker-a, its slave
    broker-a-s1, frozen with SIGSTOP and lagging, and broker-b), ``s2/<broker>/store`` (the same
    store roots after every broker's clean shutdown, the slave caught up) and ``truth/``
    (brokers.json, snapshots.json, expected.json, consume_stats_sN.jsonl, ha_sN.json, ...).
    Generated on first use (~2 min), separately from the other variants."""
    return _variant(stores.CLUSTER_VARIANT)


@pytest.fixture(scope="session", params=[stores.DLEDGER_VARIANT, stores.DLEDGER4_VARIANT])
def dledger_store(request: pytest.FixtureRequest) -> Path:
    """A DLedger variant dir, each test once per line: ``v5-dledger`` (5.5.0, dledger
    0.3.2) and ``v4-dledger`` (4.9.7, dledger 0.3.1.2). ``store/`` (one broker with
    ``enableDLegerCommitLog``: a single-node Raft group whose log is ``dledger-n0/data`` +
    ``dledger-n0/index``, no ``commitlog/``; clean shutdown), ``snapshots/s1/store`` (hot copy
    before the last ~100 messages) and ``truth/`` (messages, consumer_groups, topic_stats,
    dledger.json, ...). Generated on first use (~45 s each)."""
    return _variant(request.param)


@pytest.fixture(scope="session")
def dledger5_store() -> Path:
    """The ``v5-dledger`` variant dir alone (for tests too costly to run per line)."""
    return _variant(stores.DLEDGER_VARIANT)


@pytest.fixture(scope="session")
def rocksdb_store() -> Path:
    """The ``v5-rocksdb`` variant dir: ``store/`` (one 5.5.0 broker with
    ``storeType=defaultRocksDB``: consume queues in a RocksDB database in ``consumequeue/``,
    topics, groups and offsets in ``config/<name>/`` RocksDB databases, no JSON for them),
    ``snapshots/s1/store`` (a hot copy before the last ~100 messages) and ``truth/``
    (messages, consumer_groups, topic_stats, rocksdb.json, ...)."""
    return _variant(stores.ROCKSDB_VARIANT)



@pytest.fixture(scope="session", params=list(stores.ROCKSDB_VARIANTS))
def rocksdb_config_store(request: pytest.FixtureRequest) -> Path:
    """A RocksDB variant dir, each test once per way the broker keeps its config in
    RocksDB: ``v5-rocksdb`` (one database per table, ``config/topics/`` ...),
    ``v5-rocksdb-single`` (``useSingleRocksDBForAllConfigs``: ``config/metadata/``) and
    ``v5-rocksdb-v2`` (``configManagerVersion=v2``: ``config/rdb/``); the same workload,
    and ``truth/rocksdb.json`` holds the broker's own topic and group tables
    (``configTables``)."""
    return _variant(request.param)


@pytest.fixture(scope="session")
def controller_store() -> Path:
    """The ``v5-controller`` variant dir: ``store/`` (one 5.5.0 broker in controller mode
    under the name server's embedded DLedger controller, stopped and restarted: its
    ``epochFileCheckpoint`` holds two epochs, ``.bak`` the first, ``brokerIdentity`` replica
    id 1; clean shutdown), ``snapshots/run1/store`` (the same store after the first stop: one
    epoch, no ``.bak``) and ``truth/`` (messages with ``brokerRun``/``masterEpoch``,
    consumer_groups, topic_stats, controller.json with the admin API's epoch cache and
    SyncStateSet before each stop, and the 5.5.0 readers' verdicts on damaged copies:
    epoch_reader_cases.jsonl, identity_reader_cases.jsonl; the broker's own starts on an
    emptied and a CRC-broken epoch file: damagedStarts). Generated on first use (~90 s)."""
    return _variant(stores.CONTROLLER_VARIANT)


@pytest.fixture(scope="session")
def compaction_store() -> Path:
    """The ``v5-compaction`` variant dir: the mode workload (``TopicCmp*``) plus
    ``TopicCompacted`` (2 queues, ``cleanup.policy=COMPACTION``, keys k00..k49, key kNN on
    queue NN % 2): three versions of every key before the hot copy ``snapshots/s1/store``, a
    fourth after it, each round compacted by the broker; ``truth/compacted_sends.jsonl``
    (every send) and ``truth/compacted_view.jsonl`` (what a consumer of each queue was
    served at the end, pulled from offset 0). Generated on first use (~60 s)."""
    return _variant(stores.COMPACTION_VARIANT)


@pytest.fixture(scope="session", params=[stores.POP_VARIANT, stores.POP_KV_VARIANT])
def pop_store(request: pytest.FixtureRequest) -> Path:
    """A pop variant dir, each test once per way the broker keeps pop state: ``v5-pop``
    (classic: checkpoints and acks in the commitlog through ``rmq_sys_wheel_timer``) and
    ``v5-pop-kv`` (KV pop: a ``kvStore/`` record per popped message). ``store/`` (one 5.5.0
    broker; clean shutdown) with ``TopicPop``
    (2 queues x 100) and four groups: ``G_POP`` (low-level pop/ack/batch ack/changeInvisibleTime,
    25 + 20 messages left in flight), ``G_PUSHPOP`` (a push consumer in POP mode, offsets 5-7 of
    each queue left in flight), ``G_PUSH`` (classic, everything committed) and ``G_PULL``
    (classic, pulled to 80, committed 60); ``snapshots/s1/store`` (a hot copy after G_POP's pops,
    before its acks) and ``truth/`` (messages, consumed, consumer_groups with ``inflight``,
    topic_stats, pop.json: every pop, ack, batch ack and changeInvisibleTime, the in-flight sets
    at s1 and at the end, the revive topic, the broker's POP settings and the check of
    ``config/consumerOffset.json`` against the admin rows). Generated on first use (~45 s)."""
    return _variant(request.param)


@pytest.fixture(scope="session", params=list(stores.CHANGING_VARIANTS))
def changing_store(request: pytest.FixtureRequest) -> Path:
    """A store that changed under its readers, each test once per variant: ``v5-failover``
    (a controller-mode pair: the old master's acked M2 truncated away after an unclean
    failover), ``v5-resync`` (a classic slave rebuilt from an empty store, copied while
    behind), ``v5-reprovisioned`` (one broker name on a new, empty store) and
    ``v5-dledger-truncated`` (a DLedger group of three: the old leader truncates its
    uncommitted entries when it rejoins as a follower). No ``store/``:
    ``copies/<node>/<NN-phase>/store`` in time order and ``truth/`` (sends.jsonl, copies.json
    with the broker's own reading of each copy's commitlog, events.jsonl, <scenario>.json).
    Generated on first use (~40-110 s each)."""
    return _variant(request.param)


@pytest.fixture(scope="session")
def failover_store() -> Path:
    """The ``v5-failover`` variant dir alone (see ``changing_store``)."""
    return _variant(stores.FAILOVER_VARIANT)


@pytest.fixture(scope="session")
def resync_store() -> Path:
    """The ``v5-resync`` variant dir alone (see ``changing_store``)."""
    return _variant(stores.RESYNC_VARIANT)


@pytest.fixture(scope="session")
def reprovisioned_store() -> Path:
    """The ``v5-reprovisioned`` variant dir alone (see ``changing_store``)."""
    return _variant(stores.REPROVISIONED_VARIANT)


@pytest.fixture(scope="session")
def dledger_truncated_store() -> Path:
    """The ``v5-dledger-truncated`` variant dir alone (see ``changing_store``)."""
    return _variant(stores.DLEDGER_TRUNCATED_VARIANT)


@pytest.fixture(scope="session")
def traces_store() -> Path:
    """The ``v5-traces`` variant dir: ``store/`` (one 5.5.0 broker with ``traceTopicEnable``
    whose producers, transactional producer and push consumers all trace: ``RMQ_SYS_TRACE_TOPIC``
    holds their Pub, SubBefore/SubAfter and EndTransaction contexts; transactions committed,
    rolled back, resolved by the broker's checks and discarded into
    ``TRANS_CHECK_MAX_TIME_TOPIC``; clean shutdown), ``snapshots/s1/store`` (a hot copy while
    the UNKNOW transactions were still undecided) and ``truth/`` (messages, consumed,
    transactions, trace_messages with each body as the client's own decoder reads it,
    traces.json, admin views for s1 and the end). Generated on first use (~50 s)."""
    return _variant(stores.TRACES_VARIANT)


@pytest.fixture(scope="session")
def rocksdbstore_store() -> Path:
    """The ``v5-rocksdbstore`` variant dir: ``store/`` (one 5.5.0 broker with
    ``transRocksDBEnable`` + ``transWriteOriginTransHalfEnable=false`` and ``timerRocksDBEnable``:
    ``store/rocksdbstore`` holds the still-pending transactions in its ``trans`` column family
    and the timer index with its checkpoints in ``timer``; halves and ops in the commitlog under
    ``RMQ_SYS_ROCKSDB_TRANS_HALF_TOPIC`` / ``RMQ_SYS_ROCKSDB_TRANS_OP_HALF_TOPIC``; clean
    shutdown, so the column families are flushed to SST files) and ``truth/`` (transactions,
    tx_calls, timers, deliveries, topic_stats, rocksdbstore.json). Generated on first use
    (~50 s)."""
    return _variant(stores.ROCKSDBSTORE_VARIANT)
