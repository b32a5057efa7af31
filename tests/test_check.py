"""The check job end to end on a loaded real-broker snapshot: reconcile, Great Expectations,
nightly report and the alert, as ``python -m jobs check`` runs them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobs import tables as T
from jobs.alerts import DEFAULT_CONFIG
from jobs.check import PENDING, check_snapshot, format_outcome

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def test_check_writes_findings_lag_data_docs_report_and_one_pending_alert(
        spark, golden, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    registry, _ = golden
    rules = yaml.safe_load(DEFAULT_CONFIG.read_text())
    for rule in rules["lag"]["rules"]:  # G_IDLE's 1,880 unconsumed messages cross 100
        if "max_messages" in rule:
            rule["max_messages"] = 100
    config = tmp_path / "alerts.yaml"
    config.write_text(yaml.safe_dump(rules))

    outcome = check_snapshot(spark, registry, "v5-clean", "s1", rules_path=config,
                             output=tmp_path / "out")

    assert outcome.reconcile.findings_by_severity == {"info": 1}
    assert outcome.expectations.success and outcome.expectations.data_docs_index.is_file()
    assert outcome.report == tmp_path / "out" / "reports" / "v5-clean" / "s1.html"
    assert "chart-lag" in outcome.report.read_text()
    alert = outcome.alert
    assert alert is not None and any("G_IDLE" in line for line in alert.findings)
    (row,) = registry.read_rows(T.ALERTS, broker="v5-clean", snapshot_id="s1")
    assert row["title"] == alert.title
    assert dict(row["delivery"]) == {"email": PENDING, "webhook": PENDING}
    summary = format_outcome(outcome)
    assert "alert [" in summary and "G_IDLE" in summary
