"""Saved lookup queries that read a few files, on either engine.

A saved query with a ``-- lookup: <kind> :<param> ...`` line (message_by_key,
message_by_msg_id, message_by_position, message_journey) finds messages by a value that
nothing in ``messages``' layout sorts: as written it scans the table, and it still runs
that way in any SQL tool (the Thrift server, a notebook). Run through an engine here, it
is answered in two steps:

1. the value's pointers, from ``message_lookup`` (one bucket partition; statistics and
   Bloom filters skip the rest, see jobs/lakehouse/message_lookup.py); for a msgId that
   is also an offsetMsgId, the physical offset it encodes, and the pointers of the msgId
   of the copy stored there;
2. the saved SQL with every ``rmq.messages`` it reads replaced by
   ``(SELECT * FROM rmq.messages WHERE <pointers as literals>)``: Delta's log prunes
   ``store_date`` partitions and ``physical_offset`` ranges before any file is opened.

The query's own predicates still decide which rows are returned: the pointers only say
which files may hold them. Messages whose lookup rows are not written yet (a load under
way, a warehouse loaded before this table existed) are kept by their
``first_snapshot_id``; when anything cannot be expressed safely the query runs unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from jobs.lakehouse import tables as T
from jobs.lakehouse.driver_rows import exists
from jobs.lakehouse.locations import open_delta_table
from jobs.lakehouse.message_lookup import (
    KINDS,
    MSG_ID,
    POSITION,
    app_id,
    bucket,
    position_value,
)
from jobs.lakehouse.tables import table_location
from jobs.query.narrowing import PLAIN, Query, Restrict, narrow, pairs_condition
from jobs.query.saved import QueryError, saved_query
from rmqlib.commitlog.msgid import decode_offset_msg_id
from rmqlib.errors import CorruptDataError

#: ``-- lookup: <kind> :<param> [:<param> ...]`` in a saved query's header.
LOOKUP_LINE = re.compile(r"^--\s*lookup:\s*(\w+)((?:\s+:\w+)+)\s*$", re.MULTILINE)
#: Beyond this many pointers (a key every order shares) files are pruned by date only.
MAX_POINTERS = 1000


@dataclass(frozen=True)
class Lookup:
    """What a saved query looks its messages up by."""

    kind: str
    parameters: tuple[str, ...]

    def value(self, params: dict[str, str]) -> str:
        """The ``lookup_value`` the query's parameters give."""
        values = [params[p] for p in self.parameters]
        if self.kind != POSITION:
            return values[0]
        topic, queue_id, queue_offset = values
        try:
            return position_value(topic, int(queue_id), int(queue_offset))
        except ValueError:
            raise QueryError(f"queue_id and queue_offset must be integers, not {queue_id!r} "
                             f"and {queue_offset!r}") from None


def lookup_of(sql: str) -> Lookup | None:
    """The ``-- lookup:`` line of a saved query's text, if it has one."""
    match = LOOKUP_LINE.search(sql)
    if match is None:
        return None
    kind, parameters = match.group(1), tuple(p.lstrip(":") for p in match.group(2).split())
    if kind not in KINDS or (kind == POSITION) != (len(parameters) == 3):
        raise QueryError(f"bad lookup line {match.group(0)!r}: kind one of {KINDS}, "
                         "with three parameters for position and one otherwise")
    return Lookup(kind, parameters)


def saved_statement(query: Query, warehouse: Path, name: str,
                    params: dict[str, str] | None,
                    restrict: Restrict | None = None) -> tuple[str, dict[str, str]]:
    """Saved query ``name``'s SQL and checked parameters, narrowed to the files its
    lookup points at when it has one (:func:`narrowed`). With ``restrict`` (an engine that
    can read a table through a view), its ``-- narrow:`` lines are listed too
    (jobs.query.narrowing); the SQL text stays as it is for them."""
    saved = saved_query(name)
    checked = saved.checked(params or {}, warehouse)
    if restrict is not None:
        narrow(query, saved.sql, checked, restrict)
    lookup = lookup_of(saved.sql)
    if lookup is None:
        return saved.sql, checked
    return narrowed(query, warehouse, saved.sql, lookup.kind, lookup.value(checked)), checked


def narrowed(query: Query, warehouse: Path, sql: str, kind: str, value: str) -> str:
    """``sql`` reading only the ``messages`` files that can hold a message of ``value``."""
    condition = files_condition(query, warehouse, kind, value)
    return sql if condition is None else with_messages_where(sql, condition)


def files_condition(query: Query, warehouse: Path, kind: str, value: str) -> str | None:
    """A predicate on ``messages`` true for every row looked up by (kind, value); None
    when the lookup table cannot say (not written yet, or values unsafe to inline)."""
    pending = unindexed_snapshots(query, warehouse)
    if pending is None:
        return None
    found = pointers(query, kind, [value])
    offsets: list[int] = []
    if kind == MSG_ID:
        encoded = offset_in(value)
        if encoded is not None:
            offsets.append(encoded)
            copies = query("SELECT DISTINCT msg_id FROM rmq.messages WHERE physical_offset "
                           f"= {encoded} AND offset_msg_id = upper(:value) AND msg_id IS NOT "
                           "NULL", {"value": value})
            found += pointers(query, MSG_ID, copies.column("msg_id").to_pylist())
    terms = [_pointer_term(found), *([f"physical_offset IN ({_ints(offsets)})"]
                                     if offsets else [])]
    if pending:
        if not all(PLAIN.match(s) for s in pending):
            return None
        terms.append(f"first_snapshot_id IN ({', '.join(repr(s) for s in pending)})")
    terms = [t for t in terms if t]
    return " OR ".join(f"({t})" for t in terms) if terms else "FALSE"


def pointers(query: Query, kind: str, values: Sequence[str]) -> list[dict]:
    """The distinct (broker, store_date, physical_offset) ``message_lookup`` has for
    each value: each value's bucket, kind and value as filters (a partition, then
    statistics and Bloom filters)."""
    found: list[dict] = []
    for value in dict.fromkeys(values):
        rows = query("SELECT DISTINCT broker, store_date, physical_offset "
                     f"FROM rmq.{T.MESSAGE_LOOKUP} WHERE lookup_bucket = :bucket "
                     "AND kind = :kind AND lookup_value = :value",
                     {"bucket": bucket(value), "kind": kind, "value": value})
        found += rows.to_pylist()
    return found


def unindexed_snapshots(query: Query, warehouse: Path) -> list[str] | None:
    """The snapshots whose messages have no lookup rows yet (usually none); None when
    there is no lookup table at all. The snapshots are read through ``query`` (the
    engine at hand): reading them with pyarrow's dataset API would import pandas, a
    second of a lookup's start-up."""
    location = table_location(warehouse, T.MESSAGE_LOOKUP)
    if not exists(location):
        return None
    lookup = open_delta_table(location)
    done: dict[str, int] = {}
    pending = []
    snapshots = query(f"SELECT broker, snapshot_id, snapshot_seq FROM rmq.{T.SNAPSHOTS}", {})
    for row in snapshots.to_pylist():
        broker = str(row["broker"])
        if broker not in done:
            done[broker] = lookup.transaction_version(app_id(broker)) or 0
        if int(row["snapshot_seq"]) > done[broker]:  # type: ignore[call-overload]
            pending.append(str(row["snapshot_id"]))
    return sorted(pending)


def offset_in(msg_id: str) -> int | None:
    """The physical offset an offsetMsgId encodes; None when ``msg_id`` is not one."""
    try:
        return decode_offset_msg_id(msg_id).commitlog_offset
    except CorruptDataError:
        return None


def with_messages_where(sql: str, condition: str) -> str:
    """``sql`` (Spark SQL, which DataFusion also runs) with each scan of ``rmq.messages``
    replaced by ``(SELECT * FROM rmq.messages WHERE condition)`` under the same alias."""
    import sqlglot
    from sqlglot import exp

    def swap(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Table) and node.db == T.DATABASE and node.name == T.MESSAGES:
            return sqlglot.parse_one(
                f"(SELECT * FROM {T.DATABASE}.{T.MESSAGES} WHERE {condition}) "
                f"AS {node.alias or T.MESSAGES}", read="spark")
        return node

    tree = sqlglot.parse_one(sql, read="spark")
    return tree.transform(swap).sql(dialect="spark", comments=False)


def _pointer_term(found: list[dict]) -> str:
    """``store_date IN (..) AND <each broker's physical offsets>``; by date alone past
    MAX_POINTERS; empty when nothing was found."""
    if not found:
        return ""
    dates = sorted({row["store_date"] for row in found})
    terms = [f"store_date IN ({', '.join(_date(d) for d in dates)})"]
    if len(found) <= MAX_POINTERS:
        by_broker = pairs_condition("physical_offset",
                                    ((row["broker"], row["physical_offset"]) for row in found))
        terms.append(by_broker if by_broker is not None else
                     f"physical_offset IN ({_ints(r['physical_offset'] for r in found)})")
    return " AND ".join(terms)


def _ints(values: object) -> str:
    return ", ".join(str(int(v)) for v in sorted(set(values)))  # type: ignore[call-overload]


def _date(value: date) -> str:
    return f"DATE '{value.isoformat()}'"
