"""Shared pytest fixtures: one SparkSession for the whole run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The project's SparkSession (real Spark + Delta), started once per test session."""
    from jobs.spark_session import build_spark_session

    session = build_spark_session(
        "rmq-lakehouse-tests", warehouse=tmp_path_factory.mktemp("warehouse")
    )
    yield session
    session.stop()
