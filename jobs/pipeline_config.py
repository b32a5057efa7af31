"""The nightly pipeline's settings: ``config/pipeline.yaml`` (or ``$RMQ_PIPELINE_CONFIG``).

```yaml
schedule: "0 2 * * *"            # cron, UTC
snapshot_root: .cache/snapshots  # relative paths are relative to the repository; or
                                 # s3://bucket/prefix ($RMQ_SNAPSHOT_ROOT overrides it)
warehouse: .cache/warehouse
retention_days: 7                # snapshots older than this are deleted (never the newest)
retries: 2                       # per task, with exponential backoff from retry_delay_s
retry_delay_s: 60
spark_conn_id: rmq_spark         # Airflow connection naming the Spark master; absent: local
spark_pool: rmq_spark            # Airflow pool of the tasks that start a Spark application
spark_pool_slots: 2              # ... and its size: Spark applications at once per deployment
time_travel_days: 7              # maintenance VACUUM keeps every table version this long
check_engine: auto               # auto: local (DuckDB, no JVM) up to local_checks_up_to_mib
local_checks_up_to_mib: 256      # ... of commitlog in the store, else spark
load_engine: auto                # auto: decode in the task's process up to local_load_up_to_mib
local_load_up_to_mib: 1024       # ... of bytes past the high-water marks, else on Spark
trace_topics: []                 # trace topics besides RMQ_SYS_TRACE_TOPIC (message_traces)
deliver_alerts: true             # false: alerts are recorded and logged, not sent
alerts_config: config/alerts.yaml  # thresholds, consumer-status window, reminders, channels
brokers:
  - name: broker-a
    store: /var/lib/rocketmq/store          # a local (or mounted) store ...
  - name: broker-b
    store: /home/rocketmq/store
    ssh_conn_id: rmq_broker_b_ssh           # ... or one read over SFTP on another host
  - name: broker-a-s1                       # brokers of a cluster: cluster name and role
    cluster: RmqCluster                     # (master, or slave with the master it copies)
    role: slave
    master: broker-a
    store: /var/lib/rocketmq-slave/store
```

A broker without ``cluster`` is a cluster of its own. A slave's commitlog holds the same
records as its master's, so its messages are not loaded (its state is, and the cluster
checks compare its bytes with its master's); a slave names a master of its own cluster.

The Airflow Variable ``rmq_brokers`` (a JSON list of the same broker mappings), when set,
replaces ``brokers``: operators add a broker without a deploy.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from jobs.lakehouse.engine_choice import ENGINES, LOCAL_CHECKS_UP_TO_MIB, LOCAL_LOAD_UP_TO_MIB
from jobs.lakehouse.jars import REPO_ROOT
from jobs.lakehouse.locations import (
    Location,
    UnsupportedLocationError,
    checks_directory,
    is_uri,
    local_directory,
    warehouse_location,
)
from jobs.maintain.time_travel import MIN_TIME_TRAVEL_DAYS, VACUUM_SAFETY

DEFAULT_CONFIG = REPO_ROOT / "config" / "pipeline.yaml"
BROKER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MASTER, SLAVE = "master", "slave"
BROKER_KEYS = {"name", "store", "ssh_conn_id", "cluster", "role", "master"}


class PipelineConfigError(ValueError):
    """The pipeline config is wrong; the message names the file and the key."""


@dataclass(frozen=True)
class BrokerSource:
    """One broker whose store the DAG snapshots."""

    name: str
    store: str
    ssh_conn_id: str | None = None
    cluster: str | None = None  # None: a cluster of its own, named like the broker
    role: str = MASTER
    master: str | None = None   # a slave's master (a broker name of the same cluster)

    @property
    def location(self) -> str:
        return f"ssh://{self.ssh_conn_id}{self.store}" if self.ssh_conn_id else self.store

    @property
    def cluster_name(self) -> str:
        return self.cluster or self.name

    @property
    def is_slave(self) -> bool:
        return self.role == SLAVE

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "store": self.store, "ssh_conn_id": self.ssh_conn_id,
                "cluster": self.cluster, "role": self.role, "master": self.master}


@dataclass(frozen=True)
class PipelineConfig:
    schedule: str
    snapshot_root: Path | Location  # a local directory, or an object-store location
    warehouse: Path | Location  # a local directory, or an object-store location
    retention_days: float
    retries: int
    retry_delay_s: float
    spark_conn_id: str | None
    deliver_alerts: bool
    brokers: tuple[BrokerSource, ...]
    source: Path
    spark_pool: str = "rmq_spark"
    spark_pool_slots: int = 2
    time_travel_days: float = 7.0
    check_engine: str = "auto"
    local_checks_up_to_mib: int = LOCAL_CHECKS_UP_TO_MIB
    load_engine: str = "auto"
    local_load_up_to_mib: int = LOCAL_LOAD_UP_TO_MIB
    alerts_config: Path = REPO_ROOT / "config" / "alerts.yaml"
    trace_topics: tuple[str, ...] = ()

    checks_output_setting: Path | None = None
    aws_conn_id: str | None = None  # the object store's keys and endpoint (Airflow aws)

    @property
    def checks_output(self) -> Path:
        """Data Docs and reports: ``checks_output`` if set, else beside a local warehouse's
        tables (jobs.lakehouse.locations.checks_directory)."""
        return self.checks_output_setting or checks_directory(
            warehouse_location(self.warehouse, "warehouse"))


def config_path() -> Path:
    return Path(os.environ.get("RMQ_PIPELINE_CONFIG", DEFAULT_CONFIG))


def load_config(path: str | Path | None = None) -> PipelineConfig:
    path = Path(path) if path else config_path()
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise PipelineConfigError(f"{path}: cannot read the pipeline config: {error}") from error
    except yaml.YAMLError as error:
        raise PipelineConfigError(f"{path}: not valid YAML: {error}") from error
    if not isinstance(document, dict):
        raise PipelineConfigError(f"{path}: expected a mapping at the top")
    known = {"schedule", "snapshot_root", "warehouse", "retention_days", "retries",
             "retry_delay_s", "spark_conn_id", "deliver_alerts", "brokers", "alerts_config",
             "spark_pool", "spark_pool_slots", "time_travel_days", "check_engine",
             "local_checks_up_to_mib", "load_engine", "local_load_up_to_mib",
             "checks_output", "aws_conn_id", "trace_topics"}
    unknown = sorted(set(document) - known)
    if unknown:
        raise PipelineConfigError(f"{path}: unknown key(s) {', '.join(unknown)}")

    def where(key: str, default: str) -> Path:
        value = local(os.path.expanduser(str(document.get(key, default))), f"{path}: {key}")
        return value if value.is_absolute() else REPO_ROOT / value

    warehouse = warehouse_at(os.environ["RMQ_WAREHOUSE"], "RMQ_WAREHOUSE", Path.cwd()) \
        if os.environ.get("RMQ_WAREHOUSE") else warehouse_at(
            os.path.expanduser(str(document.get("warehouse", ".cache/warehouse"))),
            f"{path}: warehouse", REPO_ROOT)
    snapshot_root = warehouse_at(os.environ["RMQ_SNAPSHOT_ROOT"], "RMQ_SNAPSHOT_ROOT",
                                 Path.cwd()) if os.environ.get("RMQ_SNAPSHOT_ROOT") else \
        warehouse_at(os.path.expanduser(str(document.get("snapshot_root", ".cache/snapshots"))),
                     f"{path}: snapshot_root", REPO_ROOT)
    return PipelineConfig(
        schedule=str(document.get("schedule", "0 2 * * *")),
        snapshot_root=snapshot_root,
        warehouse=warehouse,
        retention_days=_number(path, document, "retention_days", 7),
        retries=int(_number(path, document, "retries", 2)),
        retry_delay_s=_number(path, document, "retry_delay_s", 60),
        spark_conn_id=document.get("spark_conn_id") or None,
        deliver_alerts=_flag(path, document, "deliver_alerts", True),
        brokers=parse_brokers(document.get("brokers") or [], str(path)),
        source=path,
        alerts_config=where("alerts_config", "config/alerts.yaml"),
        spark_pool=str(document.get("spark_pool") or "rmq_spark"),
        spark_pool_slots=int(_at_least(path, document, "spark_pool_slots", 2, 1)),
        time_travel_days=_at_least(path, document, "time_travel_days", 7,
                                   MIN_TIME_TRAVEL_DAYS, VACUUM_SAFETY),
        check_engine=_choice(path, document, "check_engine", "auto", ENGINES),
        local_checks_up_to_mib=int(_at_least(path, document, "local_checks_up_to_mib",
                                                 LOCAL_CHECKS_UP_TO_MIB, 0)),
        load_engine=_choice(path, document, "load_engine", "auto", ENGINES),
        local_load_up_to_mib=int(_at_least(path, document, "local_load_up_to_mib",
                                               LOCAL_LOAD_UP_TO_MIB, 0)),
        checks_output_setting=where("checks_output", "") if document.get("checks_output")
        else None,
        aws_conn_id=str(document["aws_conn_id"]) if document.get("aws_conn_id") else None,
        trace_topics=_names(path, document, "trace_topics"),
    )


def _names(path: Path, document: dict[str, Any], key: str) -> tuple[str, ...]:
    """A list of non-empty strings (absent: none)."""
    value = document.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise PipelineConfigError(f"{path}: {key} must be a list of names")
    return tuple(value)


def warehouse_at(location: str, what: str, base: Path) -> Path | Location:
    """The warehouse (or the snapshot root): an ``s3://`` URI, or a directory (a relative
    one below ``base``); another URI is refused (jobs.lakehouse.locations)."""
    try:
        if not is_uri(location) and not Path(location).is_absolute():
            location = str(base / location)
        return warehouse_location(location, what).native()
    except UnsupportedLocationError as error:
        raise PipelineConfigError(str(error)) from None


def local(location: str, what: str) -> Path:
    """A location of the config as a local path; a URI is refused (jobs.lakehouse.locations)."""
    try:
        return local_directory(location, what)
    except UnsupportedLocationError as error:
        raise PipelineConfigError(str(error)) from None


def _choice(path: Path, document: dict, key: str, default: str, choices: tuple[str, ...]) -> str:
    value = str(document.get(key, default))
    if value not in choices:
        raise PipelineConfigError(f"{path}: {key} must be one of {', '.join(choices)}, "
                                  f"not {value!r}")
    return value


def parse_brokers(items: Any, origin: str) -> tuple[BrokerSource, ...]:
    """Broker mappings from the YAML file or the ``rmq_brokers`` Variable (JSON text)."""
    if isinstance(items, str):
        try:
            items = json.loads(items)
        except ValueError as error:
            raise PipelineConfigError(f"{origin}: not JSON: {error}") from error
    if not isinstance(items, list):
        raise PipelineConfigError(f"{origin}: brokers must be a list")
    brokers = [_broker(item, number, origin) for number, item in enumerate(items)]
    names = [b.name for b in brokers]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise PipelineConfigError(f"{origin}: broker(s) listed twice: {', '.join(duplicates)}")
    _check_roles(brokers, origin)
    return tuple(brokers)


def _broker(item: Any, number: int, origin: str) -> BrokerSource:
    if not isinstance(item, dict) or not {"name", "store"} <= set(item):
        raise PipelineConfigError(f"{origin}: brokers[{number}] needs a name and a store")
    extra = sorted(set(item) - BROKER_KEYS)
    if extra:
        raise PipelineConfigError(f"{origin}: brokers[{number}]: unknown key(s) "
                                  f"{', '.join(extra)}")
    name, cluster = str(item["name"]), item.get("cluster")
    for what, value in (("broker", name), ("cluster", cluster)):
        if value is not None and not BROKER_NAME.match(str(value)):
            raise PipelineConfigError(f"{origin}: brokers[{number}]: {value!r} is not a usable "
                                      f"{what} name (letters, digits, '.', '_', '-')")
    role = str(item.get("role") or MASTER)
    if role not in (MASTER, SLAVE):
        raise PipelineConfigError(f"{origin}: brokers[{number}]: role must be {MASTER} or "
                                  f"{SLAVE}, not {role!r}")
    master = item.get("master")
    if (role == SLAVE) != (master is not None):
        raise PipelineConfigError(f"{origin}: brokers[{number}] ({name}): a slave names its "
                                  "master, and only a slave does")
    return BrokerSource(name, str(item["store"]), item.get("ssh_conn_id") or None,
                        str(cluster) if cluster is not None else None, role,
                        str(master) if master is not None else None)


def _check_roles(brokers: list[BrokerSource], origin: str) -> None:
    """Every slave's master is a listed master of the slave's cluster."""
    by_name = {b.name: b for b in brokers}
    for slave in (b for b in brokers if b.is_slave):
        master = by_name.get(slave.master or "")
        if master is None or master.is_slave or master.cluster_name != slave.cluster_name:
            raise PipelineConfigError(
                f"{origin}: {slave.name} is a slave of {slave.master!r}, which is not a "
                f"listed master of cluster {slave.cluster_name!r}")


def clusters_of(brokers: tuple[BrokerSource, ...] | list[BrokerSource]
                ) -> dict[str, list[BrokerSource]]:
    """The clusters named in the config (``cluster:``), each with its brokers; a broker
    without a cluster is a cluster of its own and needs no cluster stage."""
    clusters: dict[str, list[BrokerSource]] = {}
    for broker in brokers:
        if broker.cluster is not None:
            clusters.setdefault(broker.cluster, []).append(broker)
    return clusters


def _number(path: Path, document: dict, key: str, default: float) -> float:
    value = document.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PipelineConfigError(f"{path}: {key} must be a number >= 0, not {value!r}")
    return float(value)


def _at_least(path: Path, document: dict, key: str, default: float, minimum: float,
              why: str | None = None) -> float:
    value = _number(path, document, key, default)
    if value < minimum:
        raise PipelineConfigError(f"{path}: {key} must be at least {minimum:g}, not {value:g}"
                                  + (f": {why}" if why else ""))
    return value


def _flag(path: Path, document: dict, key: str, default: bool) -> bool:
    value = document.get(key, default)
    if not isinstance(value, bool):
        raise PipelineConfigError(f"{path}: {key} must be true or false, not {value!r}")
    return value
