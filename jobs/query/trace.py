"""``python -m jobs trace MSGID``: a message's journey, told from the saved queries' rows.

The rows come from ``message_journey`` (jobs/query/queries/message_journey.sql): one per
stored copy of the message and snapshot and consumer group whose committed offset covers
the copy's queue; from ``message_trace_contexts``: what tracing clients recorded of it (the
send, each consumption, each local transaction answer); and from ``transaction_history``:
a transactional message's state at each snapshot. This module only groups them into what
an operator reads: each copy (sent, delayed, retried, dead-lettered) in store order, and
under it, per snapshot, which groups had consumed past it and which had not; then the
traced events in time order, a consumption's start and end on one line; then the
transaction's states.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

JOURNEY_QUERY = "message_journey"
TRACES_QUERY = "message_trace_contexts"
TRANSACTION_QUERY = "transaction_history"


@dataclass
class Copy:
    """One copy the broker stored, with the positions of the groups on its queue."""

    row: Mapping[str, Any]
    positions: dict[str, list[str]] = field(default_factory=dict)  # snapshot -> texts


def journey(rows: Iterable[Mapping[str, Any]]) -> list[Copy]:
    """The copies in the query's order, each with its groups' positions per snapshot."""
    copies: dict[tuple[object, ...], Copy] = {}
    for row in rows:
        copy = copies.setdefault((row["broker"], row["physical_offset"]), Copy(row))
        if row["group_name"] is None:
            continue
        state = "consumed past it" if row["passed"] else "not yet"
        copy.positions.setdefault(row["snapshot_id"], []).append(
            f"{row['group_name']} {state} (committed {row['committed']})")
    return list(copies.values())


def format_journey(msg_id: str, copies: list[Copy]) -> str:
    """The journey as lines of text; says so when the tables hold no such message."""
    if not copies:
        return f"no message {msg_id} in the tables (msgId or offsetMsgId)"
    first = copies[0].row
    lines = [f"message {first['msg_id']}: {len(copies)} stored cop"
             f"{'y' if len(copies) == 1 else 'ies'}"]
    for copy in copies:
        lines.append(_copy_line(copy.row))
        if not copy.positions:
            lines.append("      no consumer group commits offsets on this queue")
        for snapshot, texts in copy.positions.items():
            lines.append(f"      at {snapshot}: " + "; ".join(texts))
    return "\n".join(lines)


def _copy_line(row: Mapping[str, Any]) -> str:
    where = f"{row['topic']}:{row['queue_id']} @{row['queue_offset']}"
    extra = []
    if row["reconsume_times"]:
        extra.append(f"reconsume {row['reconsume_times']}")
    if row["step"] == "delay" and row["real_topic"]:
        extra.append(f"then to {row['real_topic']}")
    if row["retry_topic"] and row["step"] in ("retry", "dead letter"):
        extra.append(f"retry of {row['retry_topic']}")
    details = f" ({', '.join(extra)})" if extra else ""
    return (f"  {_time(row['store_time'])}  {row['step']:<16} {where}{details}  "
            f"[{row['broker']} offset {row['physical_offset']}, {row['offset_msg_id']}]")


def _time(value: object) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return str(value)


def format_traces(rows: list[Mapping[str, Any]]) -> list[str]:
    """The traced events: sends, local transaction answers, consumptions (a SubBefore and
    its SubAfter, paired by request id, on one line), in time order."""
    if not rows:
        return []
    ends = {(r["request_id"], r["msg_id"]): r for r in rows if r["trace_type"] == "SubAfter"}
    lines = ["  traced by the clients:"]
    for row in rows:
        kind = row["trace_type"]
        if kind == "Pub":
            result = "ok" if row["success"] else "FAILED"
            host = row["client_host"] or row["trace_born_host"]
            text = (f"sent by {row['group_name']} from {host} to {row['store_host']} in "
                    f"{row['cost_ms']} ms ({result}, {row['msg_type']})")
        elif kind == "EndTransaction":
            asked = "to the broker's check" if row["from_transaction_check"] else "first"
            text = f"local transaction answered {row['transaction_state']} ({asked})"
        elif kind == "SubBefore":
            end = ends.get((row["request_id"], row["msg_id"]))
            outcome = ("no end traced" if end is None else
                       f"took {end['cost_ms']} ms, {'ok' if end['success'] else 'FAILED'}")
            text = (f"consumed by {row['group_name']} on {row['trace_born_host']} "
                    f"(retry {row['retry_times']}): {outcome}")
        elif kind == "SubAfter":
            continue  # on its SubBefore's line
        else:
            text = f"{kind} by {row['group_name']}"
        lines.append(f"    {_time(row['trace_time'])}  {text}")
    return lines


def format_transaction(rows: list[Mapping[str, Any]]) -> list[str]:
    """A transactional message's state at each snapshot."""
    if not rows:
        return []
    lines = [f"  transaction of {rows[0]['producer_group']}:"]
    for row in rows:
        checks = f"{row['checks']} check{'' if row['checks'] == 1 else 's'}"
        state = row["state"].replace("_", " ")
        after = (f" after {row['seconds_to_decision']:.3f} s"
                 if row["seconds_to_decision"] is not None else "")
        lines.append(f"    at {row['snapshot_id']}: {state}{after} ({checks})")
    return lines
