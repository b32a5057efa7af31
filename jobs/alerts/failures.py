"""What went wrong in a nightly run, as an alert the operator gets even when a task died.

A task killed from outside (SIGKILL, the kernel's OOM killer, a lost worker) never runs its
own ``on_failure_callback``: nothing in the dead process can say anything. So the DAG ends
with one more task that runs whatever happened before it (trigger rule ``all_done``),
reads the states of the run's task instances and turns the failed ones into an
:class:`~jobs.alerts.evaluation.Alert` naming the broker and the task. The states come from the
orchestrator (Airflow's ``get_task_states``); this module only reads them, so it stays
free of Airflow: ``{task_id: state}``, mapped task instances as ``<task_id>_<map index>``,
the map index being the broker's position in the run's broker list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from jobs.alerts.evaluation import ERROR, Alert

FAILED, UPSTREAM_FAILED = "failed", "upstream_failed"
BROKER_GROUP = "broker."


@dataclass(frozen=True)
class TaskOutcome:
    """One task instance that did not succeed: which task, for which broker, in what state."""

    task_id: str
    broker: str | None
    state: str


def unsuccessful(states: Mapping[str, str | None], brokers: Sequence[str],
                 *, ignore: Sequence[str] = ()) -> list[TaskOutcome]:
    """The failed and upstream-failed task instances of a run, in task order per broker.

    ``states`` as Airflow returns them for one run; ``brokers`` the run's broker names in
    map-index order (empty when the broker list itself failed); ``ignore`` the reporting
    task itself."""
    outcomes = []
    for key, state in states.items():
        if state not in (FAILED, UPSTREAM_FAILED):
            continue
        task_id, broker = _split(key, brokers)
        if task_id not in ignore:
            outcomes.append(TaskOutcome(task_id, broker, str(state)))
    return sorted(outcomes, key=lambda o: (o.broker or "", o.state != FAILED, o.task_id))


def _split(key: str, brokers: Sequence[str]) -> tuple[str, str | None]:
    """``broker.load_0`` -> (``broker.load``, first broker); unmapped ids stay as they are."""
    head, _, tail = key.rpartition("_")
    if head.startswith(BROKER_GROUP) and tail.isdigit():
        index = int(tail)
        return head, brokers[index] if index < len(brokers) else f"broker #{index}"
    return key, None


def failure_alert(dag_id: str, run_id: str, snapshot_id: str,
                  outcomes: Sequence[TaskOutcome], *, report_url: str | None,
                  now: datetime) -> Alert:
    """One alert for the run: a line per failed task (killed or raised: the task log says
    which) and one per broker for the steps that therefore did not run."""
    failed = [o for o in outcomes if o.state == FAILED]
    lines = [f"task {o.task_id} of broker {o.broker} failed (it raised, or its process was "
             f"killed: SIGKILL, out of memory); run {run_id}" if o.broker else
             f"task {o.task_id} failed; run {run_id}" for o in failed]
    skipped: dict[str, list[str]] = {}
    for o in outcomes:
        if o.state == UPSTREAM_FAILED:
            skipped.setdefault(o.broker or "all brokers", []).append(o.task_id)
    lines += [f"not run for broker {broker} (upstream failed): {', '.join(tasks)}"
              for broker, tasks in skipped.items()]
    who = ", ".join(f"{o.broker} {o.task_id}" if o.broker else o.task_id for o in failed) \
        or "upstream failures"
    brokers = sorted({o.broker for o in outcomes if o.broker}) or ["(no broker)"]
    tasks = f"{len(failed)} task{'s' if len(failed) != 1 else ''}"
    return Alert(broker=", ".join(brokers), snapshot_id=snapshot_id, raised_at=now,
                 severity=ERROR, title=f"{dag_id} {snapshot_id}: {tasks} failed: {who}",
                 findings=tuple(lines), report_url=report_url)
