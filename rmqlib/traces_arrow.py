"""Trace bodies into Arrow columns: the load's path, equal to :mod:`rmqlib.traces`.

:func:`rmqlib.traces.decode_trace_body` builds a Python object per context (35 k contexts
a second, bench/trace_decode.py): the reference. Here many bodies are split by Arrow's
kernels at once (bodies into contexts at ``\\x02``, contexts into fields at ``\\x01``),
each trace type's fields checked and converted column by column, and only the contexts
that fail a check go through the reference, for its reason. The rows and the unreadable
regions are the reference's, body by body (tests/test_traces.py compares them with
hypothesis).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqlib.traces import (
    END_TRANSACTION,
    JAVA_NULL,
    MESSAGE_TYPES,
    PUB,
    RECALL,
    SUB_AFTER,
    SUB_BEFORE,
    TRANSACTION_STATES,
    TraceFieldError,
    _record,
)

#: One row per trace context: which body (its index in the input), where in it, and the
#: fields of rmqlib.traces.TraceRecord.
TRACE_SCHEMA = pa.schema([
    ("body_index", pa.int32()), ("position", pa.int64()), ("length", pa.int32()),
    ("trace_type", pa.string()), ("timestamp_ms", pa.int64()), ("region_id", pa.string()),
    ("group", pa.string()), ("request_id", pa.string()), ("topic", pa.string()),
    ("msg_id", pa.string()), ("tags", pa.string()), ("keys", pa.string()),
    ("store_host", pa.string()), ("client_host", pa.string()), ("body_length", pa.int32()),
    ("cost_ms", pa.int32()), ("msg_type", pa.string()), ("offset_msg_id", pa.string()),
    ("success", pa.bool_()), ("retry_times", pa.int32()), ("context_code", pa.int32()),
    ("transaction_id", pa.string()), ("transaction_state", pa.string()),
    ("from_transaction_check", pa.bool_()),
])
UNREADABLE_SCHEMA = pa.schema([("body_index", pa.int32()), ("position", pa.int64()),
                               ("length", pa.int32()), ("reason", pa.string())])

# Per type: its fields as (column, index, kind, minimum field count for it to be read):
# kinds "text", "int32", "int64", "bool", "msg_type", "state". A field read whatever the
# count is required (its index must exist: the context has at least index + 1 fields).
_ALWAYS = 0
_LAYOUTS: dict[str, list[tuple[str, int, str, int]]] = {
    PUB: [("timestamp_ms", 1, "int64", _ALWAYS), ("region_id", 2, "text", _ALWAYS),
          ("group", 3, "text", _ALWAYS), ("topic", 4, "text", _ALWAYS),
          ("msg_id", 5, "text", _ALWAYS), ("tags", 6, "text", _ALWAYS),
          ("keys", 7, "text", _ALWAYS), ("store_host", 8, "text", _ALWAYS),
          ("body_length", 9, "int32", _ALWAYS), ("cost_ms", 10, "int32", _ALWAYS),
          ("msg_type", 11, "msg_type", _ALWAYS), ("offset_msg_id", 12, "text", 14),
          ("client_host", 14, "text", 15)],
    SUB_BEFORE: [("timestamp_ms", 1, "int64", _ALWAYS), ("region_id", 2, "text", _ALWAYS),
                 ("group", 3, "text", _ALWAYS), ("request_id", 4, "text", _ALWAYS),
                 ("msg_id", 5, "text", _ALWAYS), ("retry_times", 6, "int32", _ALWAYS),
                 ("keys", 7, "text", _ALWAYS)],
    SUB_AFTER: [("request_id", 1, "text", _ALWAYS), ("msg_id", 2, "text", _ALWAYS),
                ("cost_ms", 3, "int32", _ALWAYS), ("success", 4, "bool", _ALWAYS),
                ("keys", 5, "text", _ALWAYS), ("context_code", 6, "int32", 7),
                ("timestamp_ms", 7, "int64", 9), ("group", 8, "text", 9)],
    END_TRANSACTION: [("timestamp_ms", 1, "int64", _ALWAYS), ("region_id", 2, "text", _ALWAYS),
                      ("group", 3, "text", _ALWAYS), ("topic", 4, "text", _ALWAYS),
                      ("msg_id", 5, "text", _ALWAYS), ("tags", 6, "text", _ALWAYS),
                      ("keys", 7, "text", _ALWAYS), ("store_host", 8, "text", _ALWAYS),
                      ("msg_type", 9, "msg_type", _ALWAYS),
                      ("transaction_id", 10, "text", _ALWAYS),
                      ("transaction_state", 11, "state", _ALWAYS),
                      ("from_transaction_check", 12, "bool", _ALWAYS)],
    RECALL: [("timestamp_ms", 1, "int64", _ALWAYS), ("region_id", 2, "text", _ALWAYS),
             ("group", 3, "text", _ALWAYS), ("topic", 4, "text", _ALWAYS),
             ("msg_id", 5, "text", _ALWAYS), ("success", 6, "bool", _ALWAYS)],
}
_INTEGER = r"^[+-]?[0-9]+$"


@dataclass
class TraceBatch:
    """The contexts of many bodies (TRACE_SCHEMA) and their unreadable regions."""

    records: pa.Table
    unreadable: pa.Table


def decode_trace_bodies(bodies: Sequence[bytes] | pa.Array) -> TraceBatch:
    """Every trace context of ``bodies`` (decompressed trace message bodies)."""
    bodies = bodies if isinstance(bodies, pa.Array) else pa.array(bodies, pa.binary())
    pieces = pc.split_pattern(bodies.cast(pa.binary()), pattern=b"\x02")
    parents = pc.list_parent_indices(pieces).to_numpy().astype(np.int32)
    contexts = pc.list_flatten(pieces)
    lengths = pc.binary_length(contexts).to_numpy().astype(np.int64)
    last = np.append(parents[1:] != parents[:-1], True) if len(parents) else np.zeros(0, bool)
    consumed = lengths + ~last  # a context's bytes and its separator
    ends = np.cumsum(consumed)
    starts_of_body = np.zeros(len(bodies), np.int64)
    first = np.append(True, parents[1:] != parents[:-1]) if len(parents) else last
    starts_of_body[parents[first]] = (ends - consumed)[first]
    positions = ends - consumed - starts_of_body[parents]
    cut = last & (lengths > 0)  # the body did not end with a separator
    keep = ~last
    unreadable: list[tuple[int, int, int, str]] = [
        (int(parents[i]), int(positions[i]), int(lengths[i]),
         "trace context: no field separator (\\x02) after the last context: the body was "
         "cut") for i in np.flatnonzero(cut)]
    rows = np.flatnonzero(keep)
    tables = []
    if rows.size:
        chosen = pa.array(rows)
        found, bad = _decode_contexts(contexts.take(chosen), parents[rows], positions[rows],
                                      consumed[rows])
        tables.append(found)
        unreadable += bad
    records = pa.concat_tables(tables) if tables else TRACE_SCHEMA.empty_table()
    records = records.sort_by([("body_index", "ascending"), ("position", "ascending")])
    unreadable.sort()
    return TraceBatch(records, pa.table(
        {"body_index": pa.array([u[0] for u in unreadable], pa.int32()),
         "position": pa.array([u[1] for u in unreadable], pa.int64()),
         "length": pa.array([u[2] for u in unreadable], pa.int32()),
         "reason": pa.array([u[3] for u in unreadable], pa.string())},
        schema=UNREADABLE_SCHEMA))


def _decode_contexts(contexts: pa.Array, bodies: np.ndarray, positions: np.ndarray,
                     lengths: np.ndarray) -> tuple[pa.Table, list[tuple[int, int, int, str]]]:
    """The contexts that pass every check of their type, as rows; the others' reasons
    from the reference decoder."""
    fields = pc.split_pattern(contexts, pattern=b"\x01")
    count = _counts_without_trailing_empties(fields)
    kinds = pc.list_element(fields, 0)
    utf8 = _valid_utf8(contexts)
    parts = []
    failed = ~utf8
    known = np.zeros(len(contexts), bool)
    for kind, layout in _LAYOUTS.items():
        of_kind = np.asarray(pc.equal(kinds, pa.scalar(kind.encode(), pa.binary()))
                             .fill_null(False))
        known |= of_kind
        of_kind &= utf8
        if not of_kind.any():
            continue
        index = np.flatnonzero(of_kind)
        table, ok = _columns(kind, layout, fields.take(pa.array(index)), count[index])
        failed[index[~ok]] = True
        good = index[ok]
        table = table.filter(pa.array(ok))
        table = table.append_column("body_index", pa.array(bodies[good], pa.int32())) \
            .append_column("position", pa.array(positions[good], pa.int64())) \
            .append_column("length", pa.array(lengths[good], pa.int32()))
        for name in TRACE_SCHEMA.names:  # the fields other types have: null here
            if name not in table.column_names:
                table = table.append_column(name, pa.nulls(len(table),
                                                           TRACE_SCHEMA.field(name).type))
        parts.append(table.select(TRACE_SCHEMA.names).cast(TRACE_SCHEMA))
    failed |= ~known
    bad = []
    for i in np.flatnonzero(failed):  # rare: the reference says why
        segment = contexts[int(i)].as_py()
        try:
            _record(segment, int(positions[i]), int(lengths[i]))
            reason = "trace context: decoded by the reference but not by the columns"
        except TraceFieldError as error:
            reason = f"trace context: {error}"
        bad.append((int(bodies[i]), int(positions[i]), int(lengths[i]), reason))
    records = pa.concat_tables(parts) if parts else TRACE_SCHEMA.empty_table()
    return records, bad


def _counts_without_trailing_empties(fields: pa.Array) -> np.ndarray:
    """Each context's field count as Java's String.split gives it (trailing empty fields
    dropped, at least one field)."""
    lengths = pc.binary_length(pc.list_flatten(fields)).to_numpy()
    parents = pc.list_parent_indices(fields).to_numpy()
    offsets = fields.offsets.to_numpy()
    index_in_list = np.arange(len(lengths)) - offsets[parents]
    count = np.ones(len(fields), np.int64)
    nonempty = lengths > 0
    np.maximum.at(count, parents[nonempty], index_in_list[nonempty] + 1)
    return count


def _valid_utf8(contexts: pa.Array) -> np.ndarray:
    """Which contexts are UTF-8 (all of them, almost always: one cast says so)."""
    try:
        contexts.cast(pa.string())
        return np.ones(len(contexts), bool)
    except pa.ArrowInvalid:
        valid = np.ones(len(contexts), bool)
        for i, value in enumerate(contexts.to_pylist()):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                valid[i] = False
        return valid


def _columns(kind: str, layout: list[tuple[str, int, str, int]], fields: pa.Array,
             count: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """The type's columns from its contexts' fields, and which contexts passed."""
    ok = np.ones(len(fields), bool)
    columns: dict[str, pa.Array] = {"trace_type": pa.repeat(pa.scalar(kind), len(fields))}
    for column, index, convert, needs in layout:
        present = count > index
        if needs == _ALWAYS:
            ok &= present
            read = present
        else:
            read = count >= needs
        text = _element(fields, index, read).cast(pa.string())
        if convert == "text":
            value = pc.if_else(pc.equal(text, JAVA_NULL), pa.scalar(None, pa.string()), text)
        elif convert in ("int32", "int64"):
            numbers, valid = _integers(text, read, 32 if convert == "int32" else 64)
            ok &= ~read | valid
            value = pa.array(numbers, pa.int64(), mask=~(valid & read))
            value = value.cast(pa.int32()) if convert == "int32" else value
        elif convert == "bool":
            value = pc.equal(pc.utf8_lower(text), "true")
        elif convert == "msg_type":
            numbers, valid = _integers(text, read, 32)
            valid &= (numbers >= 0) & (numbers < len(MESSAGE_TYPES))
            ok &= ~read | valid
            value = pa.array(MESSAGE_TYPES, pa.string()).take(
                pa.array(np.where(valid, numbers, 0), mask=~(valid & read)))
        else:  # a LocalTransactionState name
            valid = np.asarray(pc.is_in(text, pa.array(TRANSACTION_STATES)).fill_null(False))
            ok &= ~read | valid
            value = pc.if_else(pa.array(valid), text, pa.scalar(None, pa.string()))
        columns[column] = pc.if_else(pa.array(read), value, pa.scalar(None, value.type))
    if kind == PUB:  # success is field 13 of 14 or more, field 12 of exactly 13
        late = pc.equal(pc.utf8_lower(_element(fields, 13, count >= 14).cast(pa.string())),
                        "true")
        early = pc.equal(pc.utf8_lower(_element(fields, 12, count == 13).cast(pa.string())),
                         "true")
        columns["success"] = pc.if_else(pa.array(count >= 14), late, early)
    return pa.table(columns), ok


def _integers(text: pa.Array, read: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer.parseInt / Long.parseLong of each string where ``read``: the values (0 where
    none) and which parsed in range."""
    digits = np.asarray(pc.match_substring_regex(text, _INTEGER).fill_null(False)) & read
    short = digits & (np.asarray(pc.utf8_length(text).fill_null(0)) <= 20)
    candidates = pc.replace_substring_regex(  # Arrow's cast takes no "+": Java's does
        pc.if_else(pa.array(digits & short), text, "0"), r"^\+", "")
    try:
        numbers = pc.cast(candidates, pa.int64()).to_numpy()
        parsed = digits & short
    except pa.ArrowInvalid:  # beyond a long somewhere: parse those one by one
        numbers = np.zeros(len(text), np.int64)
        parsed = np.zeros(len(text), bool)
        for i in np.flatnonzero(digits):
            value = int(text[int(i)].as_py())
            if -(2 ** 63) <= value < 2 ** 63:
                numbers[i], parsed[i] = value, True
    limit = 2 ** (bits - 1)
    valid = parsed & (numbers >= -limit) & (numbers < limit) if bits < 64 else parsed
    return np.where(valid, numbers, 0), valid


def _element(fields: pa.Array, index: int, present: np.ndarray) -> pa.Array:
    """Field ``index`` of each context where it has one (null elsewhere)."""
    sliced = pc.list_slice(fields, index, index + 1)
    has = pc.list_value_length(sliced).to_numpy(zero_copy_only=False) == 1
    where = np.full(len(fields), 0, np.int64)
    where[has] = np.arange(int(has.sum()))
    flat = pc.list_flatten(sliced)
    if len(flat) == 0:
        return pa.nulls(len(fields), pa.binary())
    return flat.take(pa.array(where, mask=~(has & present)))
