"""Query results (Arrow tables) as people and programs read them: an aligned text table,
CSV, or JSON lines. The same for both engines, so their output can be compared.

Values become text one way everywhere: timestamps and dates in ISO 8601, binary as base64,
arrays as JSON arrays and maps as JSON objects, null as an empty CSV field, ``null`` in
JSON and ``NULL`` in the table.
"""

from __future__ import annotations

import base64
import csv
import json
from collections.abc import Iterator
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import TextIO

import pyarrow as pa

FORMATS = ("table", "csv", "jsonl")
#: Rows a text table prints unless told otherwise (csv and jsonl print all).
TABLE_ROWS = 50
#: Longest cell the text table prints; longer ones end in an ellipsis.
CELL_WIDTH = 60


def write_result(table: pa.Table, out: TextIO, fmt: str = "table",
                 limit: int | None = None) -> None:
    """Print ``table`` in format ``fmt``; ``limit`` rows at most (all when None)."""
    shown = table if limit is None else table.slice(0, limit)
    if fmt == "csv":
        _write_csv(shown, out)
    elif fmt == "jsonl":
        for row in json_rows(shown):
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif fmt == "table":
        out.write(text_table(shown))
        more = table.num_rows - shown.num_rows
        out.write(f"({table.num_rows} row{'s' * (table.num_rows != 1)}"
                  f"{f', {more} not shown (--limit)' if more else ''})\n")
    else:
        raise ValueError(f"unknown output format {fmt!r}; one of {', '.join(FORMATS)}")


def text_table(table: pa.Table) -> str:
    """An aligned table with a header rule, numbers right-aligned, like psql's."""
    names = table.column_names
    cells = [[_cell(value) for value in row.values()] for row in python_rows(table)]
    widths = [max([len(name), *(len(row[i]) for row in cells)]) for i, name in enumerate(names)]
    numeric = [pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
               or pa.types.is_decimal(f.type) for f in table.schema]

    def line(values: list[str]) -> str:
        return " | ".join(v.rjust(w) if num else v.ljust(w)
                          for v, w, num in zip(values, widths, numeric, strict=True)).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([line(names), rule, *(line(row) for row in cells)]) + "\n"


def _cell(value: object) -> str:
    text = "NULL" if value is None else _text(value).replace("\n", "\\n")
    return text if len(text) <= CELL_WIDTH else text[:CELL_WIDTH - 1] + "…"


def _write_csv(table: pa.Table, out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.column_names)
    for row in python_rows(table):
        writer.writerow(["" if v is None else _text(v) for v in row.values()])


def json_rows(table: pa.Table) -> Iterator[dict[str, object]]:
    """Rows with every value as JSON holds it (the ``jsonl`` format's rows)."""
    for row in python_rows(table):
        yield {name: _jsonable(value) for name, value in row.items()}


def python_rows(table: pa.Table) -> Iterator[dict[str, object]]:
    """Rows as Python values, maps as dicts (Arrow gives a map as a list of pairs).

    Top-level timestamps with a time zone become UTC datetimes here: pyarrow converts a
    zoned timestamp through pandas, whose import alone costs most of a second."""
    maps = {f.name for f in table.schema if pa.types.is_map(f.type)}
    zoned = [f.name for f in table.schema
             if pa.types.is_timestamp(f.type) and f.type.tz is not None]
    for name in zoned:
        at = table.schema.get_field_index(name)
        naive = pa.timestamp(table.schema.field(name).type.unit)  # the UTC wall time
        table = table.set_column(at, name, table[name].cast(naive))
    for batch in table.to_batches(max_chunksize=4096):
        for row in batch.to_pylist():
            for name in maps:
                if row[name] is not None:
                    row[name] = dict(row[name])
            for name in zoned:
                if row[name] is not None:
                    row[name] = row[name].replace(tzinfo=UTC)
            yield row


def _text(value: object) -> str:
    """A non-null value as one line of text: scalars plainly, arrays and maps as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list | tuple):
        return json.dumps(_jsonable(value), ensure_ascii=False)
    jsonable = _jsonable(value)
    return jsonable if isinstance(jsonable, str) else str(jsonable)


def _jsonable(value: object) -> object:
    """A Python value from Arrow as JSON can hold it (see the module docstring)."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
