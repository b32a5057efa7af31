"""The nightly pipeline's config and its step errors (no Spark, no Airflow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import pipeline
from jobs.pipeline_config import (
    BrokerSource,
    PipelineConfigError,
    load_config,
    parse_brokers,
)

REPO = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, document: dict) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(json.dumps(document))  # JSON is YAML
    return path


def test_the_shipped_configs_load(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("RMQ_WAREHOUSE", raising=False)
    default = load_config(REPO / "config" / "pipeline.yaml")
    assert default.brokers == (BrokerSource("broker-a", ".cache/stores/v5-clean/store"),)
    assert not default.deliver_alerts and default.warehouse == REPO / ".cache" / "warehouse"
    compose = load_config(REPO / "config" / "pipeline.compose.yaml")
    assert compose.deliver_alerts and compose.snapshot_root == Path("/opt/rmq/snapshots")


def test_defaults_and_relative_paths(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("RMQ_WAREHOUSE", raising=False)
    config = load_config(write(tmp_path, {"brokers": [{"name": "b", "store": "/s"}]}))
    assert (config.schedule, config.retries, config.retention_days) == ("0 2 * * *", 2, 7)
    assert config.snapshot_root == REPO / ".cache" / "snapshots"
    monkeypatch.setenv("RMQ_WAREHOUSE", str(tmp_path / "wh"))
    assert load_config(write(tmp_path, {})).warehouse == tmp_path / "wh"


@pytest.mark.parametrize(("document", "message"), [
    ({"brokers": [{"name": "b"}]}, "needs a name and a store"),
    ({"brokers": [{"name": "b/../x", "store": "/s"}]}, "not a usable broker name"),
    ({"brokers": [{"name": "b", "store": "/s"}, {"name": "b", "store": "/t"}]},
     "listed twice: b"),
    ({"brokers": [{"name": "b", "store": "/s", "ssh": "x"}]}, "unknown key"),
    ({"retries": -1}, "retries must be a number >= 0"),
    ({"deliver_alerts": "yes"}, "deliver_alerts must be true or false"),
    ({"schedul": "0 2 * * *"}, "unknown key(s) schedul"),
])
def test_a_wrong_config_names_the_file_and_the_key(tmp_path, document, message) -> None:  # type: ignore[no-untyped-def]
    path = write(tmp_path, document)
    with pytest.raises(PipelineConfigError) as error:
        load_config(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_the_brokers_variable_is_json() -> None:
    brokers = parse_brokers('[{"name": "b", "store": "/s", "ssh_conn_id": "c"}]', "Variable")
    assert brokers == (BrokerSource("b", "/s", "c"),)
    assert brokers[0].location == "ssh://c/s"
    with pytest.raises(PipelineConfigError, match="Variable: not JSON"):
        parse_brokers("[{", "Variable")


def test_a_step_failure_names_the_broker_the_place_and_why(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("RMQ_WAREHOUSE", raising=False)
    config = load_config(write(tmp_path, {"snapshot_root": str(tmp_path / "snapshots")}))
    broker = BrokerSource("broker-x", str(tmp_path / "missing-store"))
    with pytest.raises(pipeline.StepError) as error:
        pipeline.snapshot_broker(config, broker, "2026-11-20T0200Z")
    assert not error.value.permanent
    assert str(error.value).startswith("broker-x: snapshot 2026-11-20T0200Z: ")
    assert "missing-store: not a directory" in str(error.value)


def test_a_backfill_older_than_the_newest_snapshot_is_skipped(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("RMQ_WAREHOUSE", raising=False)
    config = load_config(write(tmp_path, {"snapshot_root": str(tmp_path / "snapshots")}))
    store = tmp_path / "store"
    (store / "config").mkdir(parents=True)
    (store / "config" / "topics.json").write_text("{}")
    broker = BrokerSource("b", str(store))
    taken = pipeline.snapshot_broker(config, broker, "2026-11-21T0200Z")
    assert taken["files"] == 1 and not taken["existing"]
    assert pipeline.snapshot_broker(config, broker, "2026-11-21T0200Z")["existing"]
    with pytest.raises(pipeline.StepSkipped, match="2026-11-21T0200Z is newer"):
        pipeline.snapshot_broker(config, broker, "2026-11-20T0200Z")
