"""rmq_nightly: every night, per configured broker, snapshot -> load -> check -> alert -> maintain
-> clean up, with ``lookup`` (the new messages' message_lookup rows) beside the check and
before maintain; then per cluster of the config, check_cluster (cluster lag and status,
replicas against their masters, the cluster page) -> alert_cluster; then ``run_outcome``,
which tells the operator about any task that failed or was killed. Load and check take a
slot of the Spark pool (``spark_pool_slots``) each; lookup needs no Spark.

The steps are ``jobs.pipeline`` functions; this file only wires them into Airflow:
brokers from ``config/pipeline.yaml`` (or the ``rmq_brokers`` Variable), one mapped task
group per broker, retries with exponential backoff, the Delta tables as Assets, SSH and
Spark from Airflow connections, alert delivery through Airflow's notifiers.

A logical date maps to one snapshot id (``2026-11-23T0200Z``), so re-running or
backfilling a date re-uses its snapshot, loads nothing twice and delivers no alert twice.
A date older than the broker's newest snapshot is skipped: that state of the store is gone.

A task killed from outside (SIGKILL, out of memory) runs no callback of its own; the last
task, ``run_outcome`` (trigger rule ``all_done``), runs whatever happened before it, reads
the run's task states and sends one alert naming each failed task and its broker, then
fails itself so the run stays failed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from airflow.sdk import (
    Asset,
    BaseHook,
    CronTriggerTimetable,
    TriggerRule,
    Variable,
    dag,
    get_current_context,
    task,
    task_group,
)
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from jobs import pipeline
from jobs.lakehouse import tables as T
from jobs.lakehouse.locations import Location, aws_environment
from jobs.pipeline_config import BrokerSource, clusters_of, load_config, parse_brokers
from jobs.snapshot.manifest import snapshot_id_for

log = logging.getLogger("rmq_nightly")
CONFIG = load_config()  # cheap: one YAML file; the DAG processor re-reads it on each parse
CHECKED_TABLES = [T.CHECK_RESULTS, T.CONSUMER_LAG, T.QUEUE_BOUNDS, T.CONSUMER_STATUS, T.ALERTS]
CLUSTER_TABLES = [*T.CLUSTER_TABLES, T.CHECK_RESULTS, T.ALERTS]
LOADED_TABLES = [t for t in T.TABLES
                 if t not in {*CHECKED_TABLES, *CLUSTER_TABLES, T.MESSAGE_LOOKUP}]


def table_asset(name: str) -> Asset:
    """A lakehouse table as an Asset: downstream DAGs can run when it changes."""
    location = Location(T.table_location(CONFIG.warehouse, name))
    return Asset(name=f"rmq.{name}", uri=location.as_uri(), group="rmq-lakehouse")


DEFAULT_ARGS = {
    "owner": "rmq-lakehouse",
    "retries": CONFIG.retries,
    "retry_delay": timedelta(seconds=CONFIG.retry_delay_s),
    "retry_exponential_backoff": 2.0,
    "max_retry_delay": timedelta(hours=1),
}


BY_BROKER = "{{ rmq_broker }}"  # mapped task instances are labelled by broker name


def _labelled(step: dict[str, Any]) -> dict[str, Any]:
    """Label this mapped task instance with the broker it works on (UI and logs)."""
    get_current_context()["rmq_broker"] = step.get("broker") or step.get("name")  # type: ignore[literal-required]
    return step


def _snapshot_id() -> str:
    context = get_current_context()
    moment = context.get("logical_date") or context["dag_run"].run_after
    return snapshot_id_for(moment)


@contextmanager
def _spark() -> Iterator[Any]:
    """A SparkSession for one task, started when the task first needs it (a check of a
    small snapshot runs in process and never does): master from the ``spark_conn_id``
    connection, else ``$RMQ_SPARK_MASTER``, else local.

    Under a scheduler every task is a process of its own: the task ends its Spark
    application (and waits for the driver JVM to exit) before it gives back its pool slot.
    ``make run`` runs every task in one process (``airflow dags test``) and sets
    ``RMQ_SPARK_SHARED_SESSION=1``: its tasks then share one session instead.
    """
    from jobs.lakehouse.spark_session import (
        SparkOnDemand,
        build_spark_session,
        end_spark_application,
    )

    on_demand = SparkOnDemand(lambda: build_spark_session(
        "rmq-nightly", master=_spark_master(), warehouse=CONFIG.warehouse))
    try:
        yield on_demand
    finally:
        if on_demand.session is not None and os.environ.get("RMQ_SPARK_SHARED_SESSION") != "1":
            end_spark_application(on_demand.session)


def _spark_master() -> str | None:
    """The ``spark_conn_id`` connection's master URL; None (local) without one."""
    if not CONFIG.spark_conn_id:
        return None
    try:
        connection = BaseHook.get_connection(CONFIG.spark_conn_id)
    except Exception:  # an absent connection means: run Spark locally
        return None
    if not connection.host:
        return None
    host = connection.host
    return host if "://" in host else f"spark://{host}:{connection.port or 7077}"


def _warehouse_access() -> None:
    """Give this task's process the object store's keys and endpoint from the
    ``aws_conn_id`` connection, as the ``AWS_*`` variables every client reads (never
    logged); without one, the process's own environment (or instance role) is used."""
    if CONFIG.aws_conn_id:
        connection = BaseHook.get_connection(CONFIG.aws_conn_id)
        os.environ.update(aws_environment(connection.login, connection.password,
                                          connection.extra_dejson))


def _step(call, *args):  # type: ignore[no-untyped-def]
    """Run a pipeline step; a permanent failure fails the task without retries."""
    _warehouse_access()
    try:
        return call(*args)
    except pipeline.StepSkipped as error:
        raise AirflowSkipException(str(error)) from error
    except pipeline.StepError as error:
        if error.permanent:
            raise AirflowFailException(str(error)) from error
        raise


@dag(
    dag_id="rmq_nightly",
    schedule=CronTriggerTimetable(CONFIG.schedule, timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,      # snapshots of a broker must load in time order
    default_args=DEFAULT_ARGS,
    tags=["rocketmq", "delta", "data-quality"],
    doc_md=__doc__,
)
def rmq_nightly() -> None:
    @task
    def list_brokers() -> list[dict[str, Any]]:
        """The brokers of this run: the ``rmq_brokers`` Variable if set, else the config."""
        override = Variable.get("rmq_brokers", default=None)
        brokers = parse_brokers(override, "Variable rmq_brokers") if override \
            else CONFIG.brokers
        if not brokers:
            raise AirflowFailException(f"no brokers configured ({CONFIG.source} or the "
                                       "rmq_brokers Variable)")
        log.info("brokers: %s", ", ".join(f"{b.name} ({b.location})" for b in brokers))
        return [b.as_dict() for b in brokers]

    @task_group(group_id="broker")
    def per_broker(broker: dict[str, Any]) -> None:
        @task(map_index_template=BY_BROKER)
        def snapshot(broker: dict[str, Any]) -> dict[str, Any]:
            source_of = BrokerSource(**_labelled(broker))
            if source_of.ssh_conn_id is None:
                return _step(pipeline.snapshot_broker, CONFIG, source_of, _snapshot_id())
            return _remote_snapshot(source_of, _snapshot_id())

        # Tasks that start a Spark application take a slot of the pool (spark_pool_slots
        # of config/pipeline.yaml): brokers beyond it wait instead of starting more JVMs.
        @task(map_index_template=BY_BROKER, pool=CONFIG.spark_pool,
              outlets=[table_asset(name) for name in LOADED_TABLES])
        def load(snapshot: dict[str, Any]) -> dict[str, Any]:
            with _spark() as spark:
                return _step(partial(pipeline.load_broker, lookup=False), spark, CONFIG,
                             _labelled(snapshot))

        # The new messages' lookup rows, beside the check: no Spark, so no pool slot.
        @task(map_index_template=BY_BROKER, outlets=[table_asset(T.MESSAGE_LOOKUP)])
        def lookup(loaded: dict[str, Any]) -> dict[str, Any]:
            return _step(pipeline.lookup_broker, CONFIG, _labelled(loaded))

        @task(map_index_template=BY_BROKER, pool=CONFIG.spark_pool,
              outlets=[table_asset(name) for name in CHECKED_TABLES])
        def check(loaded: dict[str, Any]) -> dict[str, Any]:
            with _spark() as spark:
                return _step(pipeline.check_broker, spark, CONFIG, _labelled(loaded),
                             CONFIG.alerts_config)

        @task(map_index_template=BY_BROKER)
        def alert(checked: dict[str, Any]) -> dict[str, Any]:
            return _deliver(_labelled(checked))

        @task(map_index_template=BY_BROKER)
        def maintain(delivered: dict[str, Any]) -> dict[str, Any]:
            return _step(pipeline.maintain_broker, CONFIG, _labelled(delivered))

        @task(map_index_template=BY_BROKER)
        def clean_up(snapshot: dict[str, Any]) -> dict[str, Any]:
            snapshot = _labelled(snapshot)
            return _step(pipeline.clean_up_broker, CONFIG, snapshot["broker"],
                         snapshot["snapshot_id"])

        taken = snapshot(broker)
        loaded = load(taken)
        delivered = alert(check(loaded))
        # maintenance compacts the night's lookup files too: it waits for them
        maintained = maintain(delivered)
        lookup(loaded) >> maintained
        maintained >> clean_up(taken)

    @task
    def list_clusters(brokers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The clusters of this run (brokers with a ``cluster``), each with its brokers."""
        clusters = clusters_of([BrokerSource(**b) for b in brokers])
        return [{"cluster": name, "brokers": [b.as_dict() for b in members]}
                for name, members in sorted(clusters.items())]

    @task_group(group_id="cluster")
    def per_cluster(cluster: dict[str, Any]) -> None:
        # After every broker's tasks, whatever they did: a broker that failed is named
        # missing on the cluster page and in the alert, the others are still judged.
        @task(trigger_rule=TriggerRule.ALL_DONE, map_index_template="{{ rmq_cluster }}",
              outlets=[table_asset(name) for name in CLUSTER_TABLES])
        def check_cluster(cluster: dict[str, Any]) -> dict[str, Any]:
            get_current_context()["rmq_cluster"] = cluster["cluster"]  # type: ignore[literal-required]
            return _step(pipeline.check_cluster, CONFIG, cluster["cluster"],
                         cluster["brokers"], _snapshot_id())

        @task(map_index_template=BY_BROKER)
        def alert_cluster(checked: dict[str, Any]) -> dict[str, Any]:
            return _deliver(_labelled(checked))

        alert_cluster(check_cluster(cluster))

    @task(trigger_rule=TriggerRule.ALL_DONE, retries=0)
    def run_outcome() -> dict[str, Any]:
        """Runs after everything, whatever happened: one alert naming every failed (or
        killed) task and its broker; fails itself then, so the run stays failed."""
        return _report_failures()

    brokers = list_brokers()
    per_broker.expand(broker=brokers) >> per_cluster.expand(cluster=list_clusters(brokers)) \
        >> run_outcome()


def _remote_snapshot(broker: BrokerSource, snapshot_id: str) -> dict[str, Any]:
    """Snapshot a store on another host over SFTP, through the Airflow SSH connection."""
    from airflow.providers.ssh.hooks.ssh import SSHHook

    from jobs.snapshot.sources import SftpSource

    try:
        client = SSHHook(ssh_conn_id=broker.ssh_conn_id).get_conn()
    except Exception as error:
        raise pipeline.StepError(f"{broker.name}: cannot connect with SSH connection "
                                 f"{broker.ssh_conn_id!r}: {error}") from error
    try:
        source = SftpSource(client.open_sftp(), broker.store, broker.location)
        return _step(pipeline.snapshot_broker, CONFIG, broker, snapshot_id, source)
    finally:
        client.close()


def _report_failures() -> dict[str, Any]:
    """The run's failed task instances (from Airflow's own record, since a killed task
    could not report itself) as one alert on the configured channels."""
    from notifiers import deliver  # dags/ is on sys.path

    from jobs.alerts.evaluation import AlertRules
    from jobs.alerts.failures import failure_alert, unsuccessful

    context = get_current_context()
    ti, run_id = context["ti"], context["run_id"]
    states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[run_id]).get(run_id, {})
    brokers = [b["name"] for b in ti.xcom_pull(task_ids="list_brokers") or []]
    failed = unsuccessful(states, brokers, ignore=[ti.task_id])
    if not failed:
        log.info("run %s: every task succeeded or was skipped", run_id)
        return {"run_id": run_id, "failed": []}
    rules = AlertRules.load(CONFIG.alerts_config)
    snapshot_id = _snapshot_id()
    alert = failure_alert(ti.dag_id, run_id, snapshot_id, failed,
                          report_url=rules.report_url(failed[0].broker or "", snapshot_id)
                          if failed[0].broker else None, now=datetime.now(UTC))
    log.error("%s\n  %s", alert.title, "\n  ".join(alert.findings))
    delivery = (deliver(alert, rules, context=context) if CONFIG.deliver_alerts else
                {"delivery": f"off (deliver_alerts is false in {CONFIG.source})"})
    raise AirflowFailException(f"{alert.title}; alert delivery: "
                               + ", ".join(f"{k}={v}" for k, v in delivery.items()))


def _deliver(checked: dict[str, Any]) -> dict[str, Any]:
    """Deliver the snapshot's recorded alert through Airflow's notifiers (jobs.pipeline
    records what each channel answered; a channel that failed fails the task: retried)."""
    from notifiers import deliver  # dags/ is on sys.path

    context = get_current_context()
    return _step(pipeline.deliver_alert, CONFIG, checked,
                 lambda alert, rules, only: deliver(alert, rules, only=only, context=context))


rmq_nightly()
