"""PySpark jobs that load RocketMQ store snapshots into Delta tables (imports rmqlib)."""
