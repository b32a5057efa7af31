"""PySpark jobs that turn RocketMQ store snapshots into Delta tables, checks and alerts.

One folder per stage of the nightly DAG, in the order data flows: ``lakehouse/`` (Spark,
Delta, contracts, SQL: what every stage stands on) <- ``snapshot/`` <- ``load/`` <-
``check/`` <- ``alerts/`` <- ``report/``; at the top the steps the DAG calls
(``pipeline``, ``check_job``), their settings (``pipeline_config``), the run summary and
the CLI (``python -m jobs``). A stage imports only lower stages and rmqlib
(``tests/test_layering.py`` holds the rule); nothing here imports Airflow or ``dags``."""
