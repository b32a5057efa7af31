"""Shared pytest fixtures: one SparkSession and one set of real-broker stores per run."""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

HARNESS_FIXTURES = Path(__file__).parent / "broker_harness" / "fixtures.py"
REPO = Path(__file__).resolve().parent.parent

# Airflow reads its configuration once, when first imported: before any test module
# imports it, give it a home of its own (SQLite metadata DB included), this repository's
# dags/ and no example DAGs, so no test touches ~/airflow.
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="rmq-tests-airflow-")
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"


def _load_harness_fixtures():  # type: ignore[no-untyped-def]
    """tests/ is not a package, so load the harness fixtures module by path, once."""
    name = "rmq_broker_harness_fixtures"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HARNESS_FIXTURES)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


# {variant: variant dir} of the real-broker stores, built on first use (session scope).
broker_stores = _load_harness_fixtures().broker_stores
# The v5-growing variant dir (snapshots s1..s3 of one running broker), built on first use.
growing_store = _load_harness_fixtures().growing_store
# The v5-features variant dir (every optional 5.x store feature, IPv6), built on first use.
features_store = _load_harness_fixtures().features_store
cluster_store = _load_harness_fixtures().cluster_store
# The v5-traces variant dir (traced clients, transactions checked and discarded).
traces_store = _load_harness_fixtures().traces_store
# The v5-rocksdbstore variant dir (the 5.5.x RocksDB trans/timer state store populated).
rocksdbstore_store = _load_harness_fixtures().rocksdbstore_store
# The DLedger variant dirs (a broker with a DLedger commitlog: v5-dledger on 5.5.0 and
# v4-dledger on 4.9.7; tests using it run once per line), built on first use.
dledger_store = _load_harness_fixtures().dledger_store
dledger5_store = _load_harness_fixtures().dledger5_store
# The v5-rocksdb variant dir (a 5.5.0 broker with storeType=defaultRocksDB), built on first use.
rocksdb_store = _load_harness_fixtures().rocksdb_store
# The three RocksDB config layouts (v5-rocksdb, v5-rocksdb-single, v5-rocksdb-v2), built on
# first use; tests using it run once per layout.
rocksdb_config_store = _load_harness_fixtures().rocksdb_config_store
# The v5-compaction variant dir (a 5.5.0 broker with a compacted topic), built on first use.
compaction_store = _load_harness_fixtures().compaction_store
# The v5-controller variant dir (a 5.5.0 broker in controller mode, restarted once: two
# epochs in epochFileCheckpoint, brokerIdentity), built on first use.
controller_store = _load_harness_fixtures().controller_store
# The v5-pop variant dir (pop consumers' checkpoints, acks, in-flight messages), built on
# first use.
pop_store = _load_harness_fixtures().pop_store
# Stores that changed under their readers (v5-failover, v5-resync, v5-reprovisioned,
# v5-dledger-truncated: store copies in time order), built on first use; changing_store runs
# a test once per variant.
changing_store = _load_harness_fixtures().changing_store
failover_store = _load_harness_fixtures().failover_store
resync_store = _load_harness_fixtures().resync_store
reprovisioned_store = _load_harness_fixtures().reprovisioned_store
dledger_truncated_store = _load_harness_fixtures().dledger_truncated_store


@pytest.fixture(scope="session")
def store_harness():  # type: ignore[no-untyped-def]
    """The harness module (tests/broker_harness/stores.py): ensure_stores, constants."""
    return _load_harness_fixtures().stores


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The project's SparkSession (real Spark + Delta), started once per test session."""
    from jobs.lakehouse.spark_session import build_spark_session

    session = build_spark_session(
        "rmq-lakehouse-tests", warehouse=tmp_path_factory.mktemp("warehouse")
    )
    yield session
    session.stop()


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[object]:
    """A Playwright page in headless Debian Chromium (tests/browser.py)."""
    from browser import chromium_page

    with chromium_page(tmp_path / "chromium-profile") as page:
        yield page


@pytest.fixture(scope="session")
def golden(spark, broker_stores, tmp_path_factory):  # type: ignore[no-untyped-def]
    """One warehouse holding snapshot "s1" of each of the four real-broker stores, loaded
    as a broker named after its variant: (registry, {variant: LoadSummary}). Shared by the
    tests that only read it (loads, checks, reports), so each store is loaded once."""
    from lakehouse import load

    warehouse = tmp_path_factory.mktemp("golden-warehouse")
    summaries = {}
    registry = None
    for variant in ("v4-clean", "v4-killed", "v5-clean", "v5-killed"):
        registry, summaries[variant] = load(spark, warehouse, variant, "s1",
                                            broker_stores[variant] / "store")
    return registry, summaries

