"""A SQL endpoint for BI tools: the Spark Thrift Server serving the ``rmq`` tables by name.

Any JDBC/ODBC client that speaks HiveServer2 (Beeline, DBeaver, Superset, Tableau, ...)
connects to ``jdbc:hive2://HOST:PORT/rmq`` and runs Spark SQL over the Delta tables.

The server runs inside a Spark session this process builds (``HiveThriftServer2
.startWithContext``), so it gets the project's one session factory (Delta, UTC, memory) and
the tables registered from the warehouse by the registry, as every other Spark path does.
The session catalog is in memory and shared by the sessions the server opens per client
connection, so no Hive metastore is needed. The Delta jars go on the driver's class path
(not only ``spark.jars``): the server opens client sessions on threads whose class loader
sees only the class path, and a session without ``DeltaCatalog`` cannot start.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from pathlib import Path

from jobs.lakehouse.jars import ensure_delta_jars
from jobs.lakehouse.spark_session import build_spark_session, end_spark_application
from jobs.lakehouse.tables import DATABASE, Registry

DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 10000


def jdbc_url(host: str, port: int) -> str:
    """The URL a JDBC client connects with; the default schema is ``rmq``."""
    return f"jdbc:hive2://{host}:{port}/{DATABASE}"


def serve_sql(warehouse: Path, *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
              master: str | None = None,
              ready: Callable[[str], None] = print) -> None:
    """Serve the warehouse's tables until SIGTERM or SIGINT, then end the Spark application.

    ``ready`` is called with the JDBC URL once the server accepts connections."""
    class_path = ":".join(str(jar) for jar in ensure_delta_jars())
    spark = build_spark_session("rmq-sql-server", master=master, warehouse=warehouse,
                                extra_conf={"spark.driver.extraClassPath": class_path,
                                            "spark.sql.hive.thriftServer.singleSession": "false",
                                            # the server reads its Hive settings from here
                                            "spark.hadoop.hive.server2.thrift.bind.host": host,
                                            "spark.hadoop.hive.server2.thrift.port": str(port)})
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        Registry(spark, warehouse).ensure()
        thrift = spark._jvm.org.apache.spark.sql.hive.thriftserver  # type: ignore[union-attr]
        thrift.HiveThriftServer2.startWithContext(spark._jsparkSession.sqlContext())  # type: ignore[union-attr]
        ready(jdbc_url(host, port))
        stop.wait()
    finally:
        end_spark_application(spark)
