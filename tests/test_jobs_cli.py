"""``python -m jobs`` as a user runs it: exit codes, one-line errors, body policies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from lakehouse import load

from jobs.lakehouse import tables as T
from jobs.load.job import LoadOptions
from jobs.query.saved import saved_queries
from rmqlib.transactions import OP_HALF_TOPIC

REPO = Path(__file__).resolve().parent.parent


def run_jobs(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jobs", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=timeout)


def test_bad_command_line_exits_2_without_starting_spark() -> None:
    result = run_jobs("load", "--broker", "b", "/nowhere")  # no --snapshot-id
    assert result.returncode == 2
    assert "snapshot-id" in result.stderr
    result = run_jobs("sql", "SELECT 1", "--saved", "message_by_key")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: give either SQL text or --saved NAME"


def test_saved_queries_are_listed_with_their_parameters() -> None:
    result = run_jobs("sql", "--list")
    assert result.returncode == 0
    for name, query in saved_queries().items():
        assert name in result.stdout
        assert query.description
    assert "message_by_key  (key)" in result.stdout


@pytest.mark.spark
def test_a_directory_that_is_not_a_store_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    result = run_jobs("--warehouse", str(tmp_path / "wh"), "load", "--broker", "b",
                      "--snapshot-id", "s1", str(tmp_path / "store"))
    assert result.returncode == 3, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "not a RocketMQ store" in errors[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", [
    ["load", "--broker", "b", "--snapshot-id", "s1", "/s"], ["sql", "SELECT 1"], ["tables"],
    ["maintain", "--broker", "b"]])
def test_a_warehouse_the_product_cannot_write_is_refused_not_made_a_local_directory(
        tmp_path: Path, command: list[str]) -> None:
    """``Path("gs://rmq/wh")`` is the relative directory ``gs:/rmq/wh``: the CLI must say no
    in one line, before any work, and leave nothing behind, given as an option or in the
    environment (s3:// is written: tests/test_s3_warehouse.py)."""
    for option, env in ((["--warehouse", "gs://rmq/wh"], {}),
                        ([], {"RMQ_WAREHOUSE": "gs://rmq/wh"})):
        result = subprocess.run([sys.executable, "-m", "jobs", *option, *command],
                                cwd=tmp_path, text=True, capture_output=True, timeout=120,
                                env={**os.environ, "PYTHONPATH": str(REPO), **env})
        assert result.returncode == 3, (command, result.stderr)
        assert result.stderr.splitlines() == [
            f"error: {'--warehouse' if option else 'RMQ_WAREHOUSE'} 'gs://rmq/wh': gs:// "
            "locations are not supported; give a local directory or s3://bucket/prefix"]
        assert list(tmp_path.iterdir()) == []


def test_a_saved_query_without_its_parameter_is_refused(tmp_path: Path) -> None:
    """(Loads through the CLI, their JSON summary and a saved query after a load are run by
    test_load_faults' killed-driver test, which runs the CLI three times anyway.)"""
    bad = run_jobs("--warehouse", str(tmp_path / "wh"), "sql", "--saved", "message_by_key")
    assert bad.returncode == 3 and "missing ['key']" in bad.stderr


@pytest.mark.spark
@pytest.mark.broker
@pytest.mark.parametrize("policy", ["hash", "none"])
def test_body_policies_keep_payloads_out(spark, broker_stores, tmp_path, policy):  # type: ignore[no-untyped-def]
    store = broker_stores["v4-clean"] / "store"
    registry, _ = load(spark, tmp_path / "wh", "b", "s1", store,
                       LoadOptions(body_policy=policy))
    truth = {json.loads(line)["offsetMsgId"]: json.loads(line) for line in
             (broker_stores["v4-clean"] / "truth" / "messages.jsonl").read_text().splitlines()}
    every = registry.read(T.MESSAGES).collect()
    # op messages keep their bodies whatever the policy: a transaction decision's half
    # queue offsets (jobs/load/decode_tasks.BODIES_ALWAYS_KEPT), nothing of a user's
    ops = [r for r in every if r.topic == OP_HALF_TOPIC]
    assert ops and all(r.body is not None and r.body_policy == "full" for r in ops)
    rows = [r for r in every if r.topic != OP_HALF_TOPIC]
    assert rows and all(r.body is None and r.body_policy == policy for r in rows)
    assert all(r.body_size is not None for r in rows)
    for row in rows:
        sent = truth.get(row.offset_msg_id)
        if policy == "hash":
            assert row.body_sha256 is not None
            if sent:
                assert row.body_sha256 == sent["bodySha256"]
                assert row.body_size == sent["bodyLength"]
        else:
            assert row.body_sha256 is None
