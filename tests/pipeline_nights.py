"""Nights of one broker through the DAG's steps in this process (snapshot, load, check; no
Spark), for the tests of a deployment mode's real-broker store (tests/test_*_pipeline.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from jobs import pipeline
from jobs.check.engines import DuckDbEngine
from jobs.check.views import create_views, snapshot_scope
from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import read_rows
from jobs.lakehouse.tables import Registry
from jobs.pipeline_config import load_config


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_config(work: Path, broker: str, store: Path) -> Path:
    """A pipeline config of one broker on the in-process engines; every error and warning
    finding is recorded."""
    return write_pipeline_config(work, [{"name": broker, "store": str(store)}], {})


def write_pipeline_config(work: Path, brokers: list[dict[str, Any]],
                          alert_rules: dict[str, Any]) -> Path:
    """``work/pipeline.yaml`` for ``brokers`` on the in-process engines, no delivery, and
    ``work/alerts.yaml``: config/alerts.yaml with every error and warning finding recorded
    and ``alert_rules`` applied over it (top-level keys)."""
    alerts = yaml.safe_load(Path("config/alerts.yaml").read_text())
    alerts["checks"] = {"severities": ["error", "warning"]}
    alerts.update(alert_rules)
    (work / "alerts.yaml").write_text(yaml.safe_dump(alerts))
    config = {
        "snapshot_root": str(work / "snapshots"), "warehouse": str(work / "warehouse"),
        "deliver_alerts": False, "alerts_config": str(work / "alerts.yaml"),
        "check_engine": "local", "load_engine": "local", "brokers": brokers,
    }
    path = work / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_night(config_path: Path, snapshot_id: str, store: Path) -> dict[str, Any]:
    """The DAG's snapshot, load and check of the config's broker, from ``store``."""
    config = load_config(config_path)
    broker = replace(config.brokers[0], store=str(store))
    taken = pipeline.snapshot_broker(config, broker, snapshot_id)
    loaded = pipeline.load_broker(_no_spark, config, taken)
    checked = pipeline.check_broker(_no_spark, config, loaded, config.alerts_config)
    from_previous = assert_bounds_are_historys(Path(config.warehouse), broker.name,
                                               snapshot_id)
    return {"taken": taken, "loaded": loaded, "checked": checked,
            "bounds_from_previous": from_previous}


def assert_bounds_are_historys(warehouse: Path, broker: str, snapshot_id: str) -> bool:
    """The queue bounds the night's check wrote equal the bounds of every queue unit of
    history (the check's own views, given no previous bounds to start from); returns
    whether the check started from the previous night's bounds instead of the history."""
    registry = Registry(None, warehouse)
    scope = snapshot_scope(registry, broker, snapshot_id)
    engine = DuckDbEngine(warehouse)
    try:
        create_views(engine, replace(scope, bounds_start=None))
        of_history = engine.arrow("SELECT * FROM rc_bounds").to_pylist()
    finally:
        engine.close()
    written = rows(warehouse, T.QUEUE_BOUNDS, broker=broker, snapshot_id=snapshot_id)
    columns = ("topic", "queue_id", "queue_type", "min_offset", "max_offset",
               "last_expired_offset")
    assert (sorted(tuple(r[c] for c in columns) for r in written)
            == sorted(tuple(r[c] for c in columns) for r in of_history)), snapshot_id
    return scope.bounds_start is not None


def _no_spark():  # type: ignore[no-untyped-def]
    raise AssertionError("a small broker's night must not start Spark")


def rows(warehouse: Path, table: str, **equal: object) -> list[dict[str, Any]]:
    return read_rows(T.table_location(warehouse, table), **equal)


def manifest_files(work: Path, broker: str, snapshot_id: str) -> dict[str, dict[str, Any]]:
    manifest = work / "snapshots" / broker / snapshot_id / "manifest.json"
    return {f["path"]: f for f in json.loads(manifest.read_text())["files"]}


def offsets_and_lag(warehouse: Path, broker: str, snapshot_id: str
                    ) -> tuple[dict[tuple, int], dict[tuple, dict[str, Any]]]:
    """(consumer offsets, consumer_lag rows) by (group, topic, queue id) of one night."""
    offsets = {(r["group_name"], r["topic"], r["queue_id"]): r["consumer_offset"]
               for r in rows(warehouse, T.CONSUMER_OFFSETS, broker=broker,
                             snapshot_id=snapshot_id)}
    lag = {(r["group_name"], r["topic"], r["queue_id"]): r
           for r in rows(warehouse, T.CONSUMER_LAG, broker=broker, snapshot_id=snapshot_id)}
    return offsets, lag


def assert_progress_equals(truth: list[dict[str, Any]], offsets: dict, lag: dict, *,
                           pull_offsets: bool = True) -> None:
    """Each (group, topic, queue) of ``consumerProgress``: its consumer offset, and the
    lag row's broker offset, consumer offset, diff and (5.x, when the store keeps pull
    offsets) in-flight count; without pull offsets in-flight is unknown (null)."""
    for want in truth:
        key = (want["group"], want["topic"], want["queueId"])
        assert offsets[key] == want["consumerOffset"], key
        got = lag[key]
        assert (got["max_offset"], got["consumer_offset"], got["broker_diff"],
                got["lag_messages"]) == (want["brokerOffset"], want["consumerOffset"],
                                         want["diff"], want["diff"]), key
        inflight = want["pullOffset"] - want["consumerOffset"] if (
            pull_offsets and "pullOffset" in want) else None
        assert got["inflight_messages"] == inflight, key
