"""One step of a night (a ``jobs.pipeline`` function) as a process of its own, as the
LocalExecutor runs a task of the DAG: ``chaos_step.py STEP CONFIG INPUT OUTPUT``.

INPUT is the step's argument as JSON (what the upstream step returned, the DAG's XCom);
the result is written to OUTPUT only when the step ends (write, then rename), so a killed
attempt leaves none. "ready" goes to stdout once the imports are done: the soak
(tests/chaos.py) times its kills from there, not from the interpreter's start.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "dags")]

from jobs import pipeline  # noqa: E402
from jobs.pipeline_config import BrokerSource, PipelineConfig, load_config  # noqa: E402

#: What each step imports on its way (the functions import lazily): imported before
#: "ready", so the soak's kills land in the step's work, not in its imports.
IMPORTS = {
    "snapshot": ["jobs.snapshot.copier"],
    "load": ["jobs.load.job", "jobs.lakehouse.progress", "deltalake"],
    "lookup": ["jobs.load.lookup_rows", "duckdb", "deltalake"],
    "check": ["jobs.check_job", "jobs.check.expectations", "great_expectations", "duckdb"],
    "alert": ["notifiers", "jobs.alerts.evaluation", "deltalake"],
    "alert_cluster": ["notifiers", "jobs.alerts.evaluation", "deltalake"],
    "maintain": ["jobs.maintain.maintenance", "deltalake"],
    "clean_up": ["jobs.snapshot.copier"],
    "check_cluster": ["jobs.cluster_job", "jobs.alerts.cluster_alerts", "deltalake"],
}


def no_spark() -> Any:
    raise AssertionError("the soak's steps run on the in-process engines")


def send_alert(alert: Any, rules: Any, only: list[str]) -> dict[str, str]:
    from notifiers import deliver  # dags/notifiers.py: Airflow's SMTP and Slack notifiers

    return deliver(alert, rules, only=only, context={})


def run(step: str, config: PipelineConfig, given: dict[str, Any]) -> dict[str, Any]:
    if step == "snapshot":
        return pipeline.snapshot_broker(config, BrokerSource(**given["broker"]),
                                        given["snapshot_id"])
    if step == "load":  # as the DAG's load: the lookup rows are the next step's
        return pipeline.load_broker(no_spark, config, given, lookup=False)
    if step == "lookup":
        return pipeline.lookup_broker(config, given)
    if step == "check":
        return pipeline.check_broker(no_spark, config, given, config.alerts_config)
    if step in ("alert", "alert_cluster"):
        return pipeline.deliver_alert(config, given, send_alert)
    if step == "maintain":
        return pipeline.maintain_broker(config, given)
    if step == "clean_up":
        return pipeline.clean_up_broker(config, given["broker"], given["snapshot_id"])
    if step == "check_cluster":
        return pipeline.check_cluster(config, given["cluster"], given["brokers"],
                                      given["snapshot_id"])
    raise SystemExit(f"unknown step {step!r}")


def main() -> None:
    step, config_path, input_path, output_path = sys.argv[1:5]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(message)s")
    config = load_config(Path(config_path))
    given = json.loads(Path(input_path).read_text())
    for module in IMPORTS[step]:
        importlib.import_module(module)
    print("ready", flush=True)
    os.dup2(2, 1)  # whatever else is printed goes to the log: the soak stops reading here
    result = run(step, config, given)
    partial = Path(f"{output_path}.{os.getpid()}")
    partial.write_text(json.dumps(result, default=str))
    os.replace(partial, output_path)


if __name__ == "__main__":
    main()
