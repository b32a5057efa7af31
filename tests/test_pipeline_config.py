"""The nightly pipeline's config and its step errors (no Spark, no Airflow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs import pipeline
from jobs.lakehouse.locations import Location
from jobs.pipeline_config import (
    BrokerSource,
    PipelineConfigError,
    clusters_of,
    load_config,
    parse_brokers,
)
from jobs.snapshot.roots import snapshots_at

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
    ({"brokers": [{"name": "b", "store": "/s", "role": "replica"}]},
     "role must be master or slave, not 'replica'"),
    ({"brokers": [{"name": "b", "store": "/s", "role": "slave"}]},
     "a slave names its master, and only a slave does"),
    ({"brokers": [{"name": "b", "store": "/s", "master": "a"}]},
     "a slave names its master, and only a slave does"),
    ({"brokers": [{"name": "a", "store": "/s", "cluster": "C1"},
                  {"name": "b", "store": "/t", "cluster": "C2", "role": "slave",
                   "master": "a"}]},
     "b is a slave of 'a', which is not a listed master of cluster 'C2'"),
    ({"brokers": [{"name": "a", "store": "/s", "cluster": "C", "role": "slave",
                   "master": "b"},
                  {"name": "b", "store": "/t", "cluster": "C", "role": "slave",
                   "master": "a"}]},
     "a is a slave of 'b', which is not a listed master of cluster 'C'"),
    ({"brokers": [{"name": "a", "store": "/s", "cluster": "has space"}]},
     "not a usable cluster name"),
    ({"warehouse": "gs://rmq/wh"}, "warehouse 'gs://rmq/wh': gs:// locations are not supported"),
    ({"warehouse": "s3://rq/wh"}, "'rq' is not a bucket name"),
    ({"snapshot_root": "gs://b/snaps"}, "snapshot_root 'gs://b/snaps': gs:// locations"),
    ({"snapshot_root": "s3://rq/snaps"}, "'rq' is not a bucket name"),
])
def test_a_wrong_config_names_the_file_and_the_key(tmp_path, document, message) -> None:  # type: ignore[no-untyped-def]
    path = write(tmp_path, document)
    with pytest.raises(PipelineConfigError) as error:
        load_config(path)
    assert str(path) in str(error.value) and message in str(error.value)


def test_a_warehouse_uri_in_the_environment_is_refused(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("RMQ_WAREHOUSE", "s3a://rmq/wh")
    with pytest.raises(PipelineConfigError, match="RMQ_WAREHOUSE 's3a://rmq/wh'"):
        load_config(write(tmp_path, {}))
    monkeypatch.setenv("RMQ_WAREHOUSE", f"file://{tmp_path}/wh")
    assert load_config(write(tmp_path, {})).warehouse == tmp_path / "wh"


def test_snapshots_in_an_object_store(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An s3:// snapshot root is a Location, from the file or RMQ_SNAPSHOT_ROOT; the steps
    then keep their snapshots in the bucket (jobs.snapshot.bucket)."""
    monkeypatch.delenv("RMQ_SNAPSHOT_ROOT", raising=False)
    config = load_config(write(tmp_path, {"snapshot_root": "s3://rmq-lake/snaps/"}))
    assert config.snapshot_root == Location("s3://rmq-lake/snaps")
    assert type(snapshots_at(config.snapshot_root)).__name__ == "BucketSnapshots"
    monkeypatch.setenv("RMQ_SNAPSHOT_ROOT", "s3://rmq-lake/other")
    assert load_config(write(tmp_path, {})).snapshot_root == Location("s3://rmq-lake/other")
    monkeypatch.setenv("RMQ_SNAPSHOT_ROOT", "gs://rmq-lake/other")
    with pytest.raises(PipelineConfigError, match="RMQ_SNAPSHOT_ROOT 'gs://rmq-lake/other'"):
        load_config(write(tmp_path, {}))


def test_a_warehouse_in_an_object_store(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """An s3:// warehouse is a Location (never a Path); the checks' reports then go to a
    local directory of its own, unless checks_output says where."""
    monkeypatch.delenv("RMQ_WAREHOUSE", raising=False)
    config = load_config(write(tmp_path, {"warehouse": "s3://rmq-lake/nightly/"}))
    assert config.warehouse == Location("s3://rmq-lake/nightly")
    assert config.checks_output == REPO / ".cache" / "checks" / "rmq-lake" / "nightly"
    told = load_config(write(tmp_path, {"warehouse": "s3://rmq-lake/n", "checks_output": "out"}))
    assert told.checks_output == REPO / "out"
    monkeypatch.setenv("RMQ_WAREHOUSE", "s3://rmq-lake/other")
    assert load_config(write(tmp_path, {})).warehouse == Location("s3://rmq-lake/other")


def test_the_brokers_variable_is_json() -> None:
    brokers = parse_brokers('[{"name": "b", "store": "/s", "ssh_conn_id": "c"}]', "Variable")
    assert brokers == (BrokerSource("b", "/s", "c"),)
    assert brokers[0].location == "ssh://c/s"
    with pytest.raises(PipelineConfigError, match="Variable: not JSON"):
        parse_brokers("[{", "Variable")


def test_brokers_are_grouped_into_their_clusters() -> None:
    brokers = parse_brokers(json.dumps([
        {"name": "a", "store": "/a", "cluster": "C"},
        {"name": "a-s1", "store": "/a1", "cluster": "C", "role": "slave", "master": "a"},
        {"name": "b", "store": "/b", "cluster": "C"},
        {"name": "lone", "store": "/l"}]), "Variable")
    clusters = clusters_of(brokers)
    assert list(clusters) == ["C"]  # a broker without a cluster needs no cluster stage
    assert [(b.name, b.role, b.master) for b in clusters["C"]] == [
        ("a", "master", None), ("a-s1", "slave", "a"), ("b", "master", None)]
    assert brokers[3].cluster_name == "lone" and not brokers[3].is_slave
    # what the DAG passes between tasks comes back the same
    assert tuple(BrokerSource(**b.as_dict()) for b in brokers) == brokers


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
