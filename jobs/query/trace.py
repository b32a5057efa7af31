"""``python -m jobs trace MSGID``: a message's journey, told from the saved query's rows.

The rows come from ``message_journey`` (jobs/query/queries/message_journey.sql): one per
stored copy of the message and snapshot and consumer group whose committed offset covers
the copy's queue. This module only groups them into what an operator reads: each copy
(sent, delayed, retried, dead-lettered) in store order, and under it, per snapshot, which
groups had consumed past it and which had not.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

JOURNEY_QUERY = "message_journey"


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
