"""``python -m jobs``: load a snapshot, run SQL, list the tables.

    python -m jobs load --broker NAME --snapshot-id ID STORE_DIR [--body-policy full|hash|none]
    python -m jobs check --broker NAME --snapshot-id ID    # reconcile, expectations, report, alert
    python -m jobs cluster --cluster NAME --snapshot-id ID # cluster lag, replicas, page, alert
    python -m jobs sql "SELECT ... FROM rmq.messages"      # or: --saved NAME [-p key=value]
    python -m jobs sql                                     # an interactive SQL shell
    python -m jobs sql --list                              # the saved queries
    python -m jobs trace MSGID                             # a message's journey (no Spark)
    python -m jobs sql-server [--host H] [--port P]        # JDBC endpoint (Spark Thrift Server)
    python -m jobs tables                                  # tables: rows, files, size (no Spark)
    python -m jobs migrate                                 # tables to this code's contracts
    python -m jobs maintain --broker NAME                  # compact, vacuum, checkpoint (no Spark)
    python -m jobs summary --snapshot-id ID [--broker NAME] # after a DAG run (no Spark)

Exit codes: 0 done, 1 checked and an alert was raised (check only), 2 bad command line,
3 refused or bad input (not a store, a store that went backwards, an unfinished earlier
snapshot, a snapshot never loaded, another load of the broker running, a table that needs
`migrate`, an unknown query, a bad alerts config), 4 internal error.
Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from jobs.lakehouse.engine_choice import ENGINES, LOCAL_CHECKS_UP_TO_MIB, LOCAL_LOAD_UP_TO_MIB
from jobs.lakehouse.locations import Location

EXIT_OK, EXIT_ALERT, EXIT_USAGE, EXIT_REFUSED, EXIT_INTERNAL = 0, 1, 2, 3, 4
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m jobs", description=__doc__.split("\n")[0])
    parser.add_argument("--master", help="Spark master URL (default RMQ_SPARK_MASTER or "
                        "local[2]), for the steps that run on Spark (--engine)")
    parser.add_argument("--warehouse", help="warehouse directory (default RMQ_WAREHOUSE)")
    commands = parser.add_subparsers(dest="command", required=True)

    load = commands.add_parser("load", help="load a store snapshot into the Delta tables")
    load.add_argument("store", help="snapshot directory (a broker storePathRootDir copy), or "
                      "a snapshot root in a bucket (s3://bucket/prefix) holding the broker's "
                      "snapshot --snapshot-id")
    load.add_argument("--broker", required=True, help="broker name (identity in every table)")
    load.add_argument("--snapshot-id", required=True, help="snapshot id, e.g. 2026-11-23")
    load.add_argument("--body-policy", choices=("full", "hash", "none"), default="full",
                      help="copy bodies (full), only their sha256 and size (hash), or neither")
    load.add_argument("--split-mib", type=int, default=64,
                      help="commitlog bytes per decode task (default 64)")
    load.add_argument("--no-crc", action="store_true", help="skip body CRC verification")
    load.add_argument("--replica", action="store_true", help="a slave's store: load its "
                      "state and commitlog bounds only (its records are its master's)")
    load.add_argument("--trace-topic", action="append", default=[], metavar="TOPIC",
                      help="a trace topic besides RMQ_SYS_TRACE_TOPIC (repeatable)")
    load.add_argument("--taken-at", type=datetime.fromisoformat,
                      help="when the snapshot was taken (ISO 8601, default newest file mtime)")
    load.add_argument("--json", action="store_true", help="print the summary as JSON")
    load.add_argument("--quiet", action="store_true", help="no progress lines")
    load.add_argument("--query", action="append", default=[], metavar="NAME",
                      help="after the load, show this saved query (no parameters)")
    _engine_arguments(load, "where what is new gets decoded: local (this process, no JVM), "
                      "spark (the executors)", "past the high-water marks",
                      LOCAL_LOAD_UP_TO_MIB)

    check = commands.add_parser("check", help="check a loaded snapshot: reconcile, Great "
                                "Expectations, nightly report, alert")
    check.add_argument("--broker", required=True, help="broker name")
    check.add_argument("--snapshot-id", required=True, help="snapshot id (loaded before)")
    check.add_argument("--alerts-config", type=Path, help="thresholds and channels "
                       "(default config/alerts.yaml)")
    check.add_argument("--output", type=Path, help="where Data Docs and reports go "
                       "(default <warehouse>/_checks)")
    _engine_arguments(check, "where reconcile and Great Expectations run: local (DuckDB in "
                      "this process, no JVM), spark", "of commitlog in the snapshot",
                      LOCAL_CHECKS_UP_TO_MIB)

    cluster = commands.add_parser("cluster", help="judge a cluster's night (its brokers "
                                  "loaded and checked): cluster lag and status, slaves "
                                  "against their masters, the cluster page, the alert")
    cluster.add_argument("--cluster", required=True, help="cluster name (config/pipeline.yaml)")
    cluster.add_argument("--snapshot-id", required=True, help="the night's snapshot id")
    cluster.add_argument("--config", type=Path, help="pipeline config naming the cluster's "
                         "brokers and snapshot root (default config/pipeline.yaml)")
    cluster.add_argument("--alerts-config", type=Path, help="thresholds and channels "
                         "(default: the pipeline config's alerts_config)")

    sql = commands.add_parser("sql", help="run SQL over the tables (rmq.<table>); with no "
                              "query, an interactive shell")
    sql.add_argument("query", nargs="?", help="SQL text (none: the interactive shell)")
    sql.add_argument("--saved", help="name of a saved query (see --list)")
    sql.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                     help="named parameter of the query (:KEY)")
    sql.add_argument("--list", action="store_true", help="list the saved queries")
    sql.add_argument("--engine", choices=("local", "spark"), default="local",
                     help="local: DataFusion in this process, no JVM (default); spark: a "
                     "Spark session, for heavy scans and SQL only Spark speaks")
    sql.add_argument("--format", choices=("table", "csv", "jsonl"), default="table",
                     help="output format (default table)")
    sql.add_argument("--limit", type=int, help="rows to print (default: 50 for a table, "
                     "all for csv and jsonl)")

    server = commands.add_parser("sql-server", help="serve the tables to JDBC clients (BI "
                                 "tools, Beeline): the Spark Thrift Server, until Ctrl-C")
    server.add_argument("--host", default="127.0.0.1", help="address to listen on "
                        "(default 127.0.0.1; 0.0.0.0 for other hosts)")
    server.add_argument("--port", type=int, default=10000, help="port (default 10000)")

    trace = commands.add_parser("trace", help="a message's journey: its copies (sent, "
                                "delayed, retried, dead-lettered) and the groups past each")
    trace.add_argument("msg_id", help="the msgId (UNIQ_KEY) or an offsetMsgId of any copy")
    trace.add_argument("--engine", choices=("local", "spark"), default="local",
                       help="local: DataFusion in this process (default); spark")

    commands.add_parser("tables", help="list the tables: rows, files, size, location (from "
                        "the Delta logs, no Spark)")
    maintain = commands.add_parser("maintain", help="compact, vacuum and checkpoint the tables "
                                   "after a broker's night (delta-rs, no Spark)")
    maintain.add_argument("--broker", required=True, help="broker whose partitions to compact")
    maintain.add_argument("--time-travel-days", type=float, default=7.0,
                          help="VACUUM keeps every table version this many days (default 7)")
    commands.add_parser("migrate", help="bring every table to this code's data contracts "
                        "(delta-rs, no Spark; after an upgrade, with no load or check "
                        "running)")

    summary = commands.add_parser("summary", help="what a pipeline run left: tables, checks, "
                                  "lag, alerts (read without Spark)")
    summary.add_argument("--snapshot-id", required=True, help="the run's snapshot id")
    summary.add_argument("--broker", action="append", default=[],
                         help="broker (default: every broker of the pipeline config)")
    summary.add_argument("--config", type=Path, help="pipeline config (default "
                         "RMQ_PIPELINE_CONFIG or config/pipeline.yaml)")
    return parser


def _engine_arguments(command: argparse.ArgumentParser, where: str, measured: str,
                      up_to_mib: int) -> None:
    """``--engine`` and ``--local-up-to-mib``, which load and check share."""
    command.add_argument("--engine", choices=ENGINES, default="auto",
                         help=f"{where}, or auto (default): local up to --local-up-to-mib "
                         f"{measured}")
    command.add_argument("--local-up-to-mib", type=int, default=up_to_mib, metavar="MIB",
                         help=f"auto's limit (default {up_to_mib}, as config/pipeline.yaml)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_OK if exit_.code == 0 else EXIT_USAGE
    if args.command == "sql" and args.list:
        return _list_queries()
    if args.command == "sql" and args.query and args.saved:
        print("error: give either SQL text or --saved NAME", file=sys.stderr)
        return EXIT_USAGE
    from jobs.lakehouse.locations import UnsupportedLocationError

    try:
        _warehouse(args)  # a location the product cannot write is refused before any work
    except UnsupportedLocationError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        if args.command == "sql":
            return _sql(args)
        if args.command == "trace":
            return _trace(args)
        if args.command == "sql-server":
            return _sql_server(args)
        if args.command == "tables":
            return _tables(args)
        if args.command == "summary":
            return _summary(args)
        if args.command == "cluster":
            return _cluster(args)
        return _maintain(args) if args.command == "maintain" else _run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERNAL


def _pipeline_config(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """``--config`` (default config/pipeline.yaml) with ``--warehouse`` applied; None after
    printing why it cannot be read."""
    from dataclasses import replace

    from jobs.pipeline_config import PipelineConfigError, load_config

    try:
        config = load_config(args.config)
    except PipelineConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return None
    if args.warehouse:
        config = replace(config, warehouse=_warehouse_option(args))
    return config


def _summary(args: argparse.Namespace) -> int:
    from jobs.run_summary import format_run_summary

    config = _pipeline_config(args)
    if config is None:
        return EXIT_REFUSED
    brokers = args.broker or [b.name for b in config.brokers]
    print("\n\n".join(format_run_summary(config, broker, args.snapshot_id)
                      for broker in brokers))
    return EXIT_OK


def _cluster(args: argparse.Namespace) -> int:
    """The cluster stage of a night, as the DAG's ``check_cluster`` runs it (no Spark)."""
    from jobs.cluster_job import check_cluster_night, format_cluster_outcome
    from jobs.pipeline_config import clusters_of

    config = _pipeline_config(args)
    if config is None:
        return EXIT_REFUSED
    brokers = clusters_of(config.brokers).get(args.cluster)
    if not brokers:
        print(f"error: {config.source} names no broker of cluster {args.cluster!r}",
              file=sys.stderr)
        return EXIT_REFUSED
    try:
        outcome = check_cluster_night(config.warehouse, args.cluster, brokers, args.snapshot_id,
                                      config.snapshot_root,
                                      rules_path=args.alerts_config or config.alerts_config,
                                      output=config.checks_output)
    except _refusals() as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except Exception as error:  # one line, not a traceback
        return _internal_error(error)
    print(format_cluster_outcome(outcome))
    return EXIT_OK if outcome.alert is None else EXIT_ALERT


def _maintain(args: argparse.Namespace) -> int:
    from jobs.maintain.maintenance import MaintenanceError, maintain_tables

    try:
        maintain_tables(_warehouse(args), args.broker, time_travel_days=args.time_travel_days,
                        progress=print)
    except (MaintenanceError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except Exception as error:  # one line, not a traceback
        return _internal_error(error, args)
    return EXIT_OK


def _refusals() -> tuple[type[BaseException], ...]:
    from jobs.alerts.evaluation import AlertConfigError
    from jobs.check.views import SnapshotNotLoadedError
    from jobs.lakehouse.locations import UnsupportedLocationError
    from jobs.lakehouse.migrate import MigrationError
    from jobs.lakehouse.table_versions import ContractVersionError
    from jobs.lakehouse.tables import TableDriftError
    from jobs.load.job import LoadRefusedError
    from jobs.query.saved import QueryError
    from jobs.snapshot.copier import SnapshotError
    from rmqlib.errors import StoreError

    return (LoadRefusedError, QueryError, TableDriftError,
            StoreError, SnapshotNotLoadedError, AlertConfigError, ContractVersionError,
            MigrationError, UnsupportedLocationError, SnapshotError)


def _run(args: argparse.Namespace) -> int:
    from jobs.lakehouse.locations import is_uri
    from jobs.lakehouse.spark_session import SparkOnDemand, build_spark_session

    refused = _refusals()
    spark = SparkOnDemand(lambda: build_spark_session(
        f"rmq-{args.command}", master=args.master,
        warehouse=_warehouse_option(args)))
    try:
        if args.command == "load":
            if not is_uri(args.store):  # a wrong path fails in a second, not after Spark
                _check_store(Path(args.store))
            return _load(spark, args)
        if args.command == "check":
            return _check(args, spark)  # a small snapshot's check starts no Spark
        return _migrate(_warehouse_option(args))
    except refused as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except Exception as error:  # the CLI promises one line, not a traceback
        return _internal_error(error, args)
    finally:
        if spark.session is not None:
            spark.session.stop()


def _internal_error(error: BaseException, args: argparse.Namespace | None = None) -> int:
    """The CLI's answer to an unexpected error: one line on stderr, exit 4, no traceback.
    A location refused deep in a command (Spark asked for on an object store) and a full
    disk (said with the path, the space free and the command: jobs.lakehouse.disk_space)
    are the user's to fix: exit 3, as when a command is refused up front."""
    from jobs.lakehouse.disk_space import DiskFullError, disk_of, is_disk_full, written_path
    from jobs.lakehouse.locations import UnsupportedLocationError

    if isinstance(error, UnsupportedLocationError):
        print(f"error: {error}", file=sys.stderr)
        return EXIT_REFUSED
    if is_disk_full(error):
        if not isinstance(error, DiskFullError):  # met while writing: name what it wrote
            where = (disk_of(_warehouse(args)) if args is not None else None) or Path.cwd()
            error = DiskFullError(f"jobs {args.command}" if args is not None else "jobs",
                                  written_path(error, where))
        print(f"error: {error}", file=sys.stderr)
        return EXIT_REFUSED
    print(f"internal error: {type(error).__name__}: {_one_line(error)}", file=sys.stderr)
    return EXIT_INTERNAL


def _warehouse(args: argparse.Namespace) -> Path | Location:
    """``--warehouse``, else ``$RMQ_WAREHOUSE`` or ``.cache/warehouse``: an absolute path
    or an ``s3://`` URI."""
    from jobs.lakehouse.tables import default_warehouse

    return _warehouse_option(args) or default_warehouse().native()


def _warehouse_option(args: argparse.Namespace) -> Path | Location | None:
    """``--warehouse`` as a location; None when not given. Another URI is refused
    (jobs.lakehouse.locations): never a local directory named ``s3:``."""
    from jobs.lakehouse.locations import warehouse_location

    return warehouse_location(args.warehouse, "--warehouse").native() if args.warehouse \
        else None


def _one_line(error: BaseException) -> str:
    """The error's message on one line. delta-rs and object_store put the cause on the
    lines after a generic first one ("Generic S3 error" / "↳ Error performing PUT <url>
    ... error sending request"): those lines are kept, joined, without their glyphs and
    terminal colours."""
    lines = [_ANSI.sub("", line).strip().lstrip("↳").strip()
             for line in str(error).strip().splitlines()]
    text = ": ".join(line for line in lines if line)
    return text if len(text) <= 600 else text[:597] + "..."


def _check_store(store: Path) -> None:
    from rmqlib.store.inventory import take_inventory

    take_inventory(store)  # raises NotAStoreFileError naming the path


def _load(spark, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    """``spark`` (a SparkOnDemand) is started only if the tables must be created or the
    plan is decoded on Spark."""
    from jobs.lakehouse.progress import ConsoleProgress
    from jobs.lakehouse.tables import Registry
    from jobs.load.job import LoadOptions, load_snapshot
    from jobs.load.summary import format_summary, summary_dict

    store, taken_at = _snapshot_to_load(args)
    options = LoadOptions(split_bytes=args.split_mib * 2**20, body_policy=args.body_policy,
                          verify_crc=not args.no_crc, taken_at=taken_at,
                          engine=args.engine, local_up_to_mib=args.local_up_to_mib,
                          replica=args.replica, trace_topics=tuple(args.trace_topic))
    with ConsoleProgress(spark, quiet=args.quiet) as progress:
        summary = load_snapshot(spark, args.broker, args.snapshot_id, store, options,
                                registry=Registry(None, _warehouse(args)), progress=progress)
    print(json.dumps(summary_dict(summary), indent=2) if args.json else format_summary(summary))
    for name in args.query:
        from jobs.query.spark_engine import run_saved

        print(f"\nsaved query {name} (python -m jobs sql --saved {name}):")
        run_saved(spark(), name).show(20, truncate=40)
    return EXIT_OK


def _snapshot_to_load(args: argparse.Namespace) -> tuple[str | Path, datetime | None]:
    """The store directory to load and when it was taken: ``STORE`` as given, or, for a
    snapshot root in a bucket (``s3://...``), this host's mirror of the broker's snapshot
    ``--snapshot-id`` there and the time its manifest says it was taken."""
    from jobs.lakehouse.locations import is_uri, warehouse_location
    from jobs.snapshot.bucket import BucketSnapshots
    from jobs.snapshot.manifest import MANIFEST, Manifest

    if not is_uri(args.store):
        return args.store, args.taken_at
    store = BucketSnapshots(warehouse_location(args.store, "STORE")).local_store(
        args.broker, args.snapshot_id)  # SnapshotError, one line, when there is none
    taken = Manifest.load(store.parent / MANIFEST).started_at  # the mirror's copy
    return store, args.taken_at or datetime.fromisoformat(taken)


def _check(args: argparse.Namespace, start_spark) -> int:  # type: ignore[no-untyped-def]
    from jobs.alerts.evaluation import DEFAULT_CONFIG
    from jobs.check_job import check_snapshot, format_outcome
    from jobs.lakehouse.tables import Registry

    outcome = check_snapshot(lambda: Registry(start_spark()), _warehouse(args), args.broker,
                             args.snapshot_id, rules_path=args.alerts_config or DEFAULT_CONFIG,
                             output=args.output, engine=args.engine,
                             local_up_to_mib=args.local_up_to_mib)
    print(format_outcome(outcome))
    return EXIT_OK if outcome.alert is None else EXIT_ALERT


def _sql(args: argparse.Namespace) -> int:
    """SQL on the chosen engine; the local one starts no JVM and imports no pyspark."""
    from jobs.query.output import TABLE_ROWS, write_result
    from jobs.query.saved import parse_parameters
    from jobs.query.shell import SqlShell

    def answer(engine) -> int:  # type: ignore[no-untyped-def]
        if not args.query and not args.saved:
            SqlShell(engine, fmt=args.format, limit=args.limit or TABLE_ROWS).run()
            return EXIT_OK
        params = parse_parameters(args.param)
        result = (engine.saved(args.saved, params) if args.saved
                  else engine.query(args.query, params))
        limit = args.limit if args.limit is not None or args.format != "table" else TABLE_ROWS
        write_result(result, sys.stdout, args.format, limit)
        return EXIT_OK

    return _on_query_engine(args, answer)


def _trace(args: argparse.Namespace) -> int:
    """The ``message_journey`` saved query, printed as a journey."""
    from jobs.query import trace
    from jobs.query.output import python_rows

    def answer(engine) -> int:  # type: ignore[no-untyped-def]
        def saved(name: str, msg_id: str) -> list[dict]:
            # python_rows, not to_pylist(): pyarrow converts zoned timestamps through pandas
            return list(python_rows(engine.saved(name, {"msg_id": msg_id})))

        rows = saved(trace.JOURNEY_QUERY, args.msg_id)
        msg_id = rows[0]["msg_id"] if rows else args.msg_id  # an offsetMsgId: its msgId
        traced = saved(trace.TRACES_QUERY, msg_id)
        # the journey, or, for a message only traces know of, the traces alone
        lines = [trace.format_journey(args.msg_id, trace.journey(rows))] \
            if rows or not traced else [f"message {msg_id}: no stored copy in the tables"]
        lines += trace.format_traces(traced)
        lines += trace.format_transaction(saved(trace.TRANSACTION_QUERY, msg_id))
        print("\n".join(lines))
        return EXIT_OK if rows or traced else EXIT_REFUSED

    return _on_query_engine(args, answer)


def _on_query_engine(args: argparse.Namespace, answer) -> int:  # type: ignore[no-untyped-def]
    """``answer(engine)`` on the engine ``--engine`` names, closed after; a bad query is
    refused in one line (exit 3), anything else is an internal error (exit 4)."""
    from jobs.query.engine import open_engine
    from jobs.query.saved import QueryError

    engine = None
    try:
        engine = open_engine(args.engine, _warehouse(args), args.master)
        return answer(engine)
    except QueryError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_REFUSED
    except Exception as error:  # one line, not a traceback
        return _internal_error(error)
    finally:
        if engine is not None:
            engine.close()


def _sql_server(args: argparse.Namespace) -> int:
    from jobs.query.sql_server import serve_sql

    warehouse = _warehouse(args)

    def ready(url: str) -> None:
        print(f"serving the rmq tables of {warehouse} at {url} (Ctrl-C ends it)", flush=True)

    try:
        serve_sql(warehouse, host=args.host, port=args.port, master=args.master, ready=ready)
    except Exception as error:  # one line, not a traceback
        return _internal_error(error)
    return EXIT_OK


def _migrate(warehouse: Path | Location | None) -> int:
    """Every table to this code's contracts, with delta-rs (no JVM; a bucket too)."""
    from jobs.lakehouse.migrate import migrate_warehouse
    from jobs.lakehouse.tables import default_warehouse

    migrate_warehouse(warehouse or default_warehouse(), progress=print)
    return EXIT_OK


def _list_queries() -> int:
    from jobs.query.saved import saved_queries

    for query in saved_queries().values():
        params = ", ".join(f"{p} (optional)" if p in query.defaults else p
                           for p in query.parameters) or "no parameters"
        print(f"{query.name}  ({params})\n    {query.description}")
    return EXIT_OK


def _tables(args: argparse.Namespace) -> int:
    """Each table's rows, files and size from its Delta log (delta-rs): no JVM, no scan."""
    from jobs.query.local_engine import LocalEngine

    warehouse = _warehouse(args)
    try:
        engine = LocalEngine(warehouse)
        names = engine.tables()
        if not names:
            print(f"no tables in {warehouse} yet (python -m jobs load creates them)")
        for name in names:
            table = engine.files(name)
            rows = "?" if table.rows is None else f"{table.rows:,}"
            print(f"rmq.{name:24} {rows:>12} rows {table.files:>6,} files "
                  f"{table.bytes / 2**20:>10.1f} MiB  {table.location}")
    except Exception as error:  # one line, not a traceback
        return _internal_error(error)
    return EXIT_OK


def run_and_exit() -> None:
    """Run the command and end the process at once, without the interpreter's shutdown:
    reads still in flight in Arrow's I/O threads (a prefetch nobody waits for) would
    otherwise ask for the GIL of an exiting interpreter and abort the process, exit 134,
    after the command's work was done (jobs.lakehouse.driver_rows.arrow_dataset). The
    output is flushed first; Airflow's task processes end the same way."""
    import logging

    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run_and_exit()
