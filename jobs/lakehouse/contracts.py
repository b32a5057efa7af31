"""Data contracts: ``data_contracts/<table>.yaml`` -> Spark schema, Arrow schema, Delta DDL.

Each table of the lakehouse has one Open Data Contract Standard (ODCS v3) document. It is
the single source of truth for the table: jobs create the Delta table from it
(:meth:`Contract.create_table_sql`), decoders emit batches of :meth:`Contract.arrow_schema`,
a test fails when a written table drifts from it (:func:`schema_drift`), and its
``quality`` rules feed the data-quality checks.

A contract is validated twice when it is loaded: against the official ODCS JSON schema
(``open_data_contract_standard/schema.json``) and against this project's own rules (one
table per file, Spark types we can parse, contiguous key positions, Delta layout
settings that name real columns, named quality rules). Loading needs no JVM: Spark type
strings are parsed here, not by Spark's parser, and pyspark/pyarrow are imported only by
the methods that build their schemas.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import DataType, StructType

CONTRACTS_DIR = Path(__file__).resolve().parents[2] / "data_contracts"

API_VERSIONS = ("v3.1.0", "v3.2.0")
ID_PREFIX = "urn:rmq-lakehouse:"
TABLE_PROPERTIES = "deltaTableProperties"
LAYOUT_RATIONALE = "layoutRationale"
STATS_COLUMNS = "delta.dataSkippingStatsColumns"
CONTRACT_VERSION = "rmq.contract.version"  # table property: the contract a table was made from
SEVERITIES = ("error", "warning")

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
_QUALIFIED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_RULE_NAME = re.compile(r"[a-z][a-z0-9_]*")
_VERSION = re.compile(r"\d+\.\d+\.\d+")


class ContractError(ValueError):
    """A contract file is invalid; the message names the file and every reason."""


# --------------------------------------------------------------------------- Spark types

# Spark SQL primitive types the contracts may use -> (ODCS logicalType, partitionable).
PRIMITIVES: dict[str, tuple[str, bool]] = {
    "STRING": ("string", True),
    "BINARY": ("string", False),
    "BOOLEAN": ("boolean", True),
    "TINYINT": ("integer", True),
    "SMALLINT": ("integer", True),
    "INT": ("integer", True),
    "BIGINT": ("integer", True),
    "FLOAT": ("number", True),
    "DOUBLE": ("number", True),
    "DATE": ("date", True),
    "TIMESTAMP": ("timestamp", True),
}
_CONTAINERS = {"ARRAY": 1, "MAP": 2}
_TOKEN = re.compile(r"\s*(?:([A-Za-z_]+)|(.))")


@dataclass(frozen=True)
class SqlType:
    """A parsed Spark SQL type: a primitive, ``ARRAY<t>`` or ``MAP<k,v>``.

    ``str()`` is the canonical spelling (upper case, no spaces), which equals
    ``spark_type().simpleString().upper()``.
    """

    name: str
    args: tuple[SqlType, ...] = ()

    def __str__(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name}<{','.join(map(str, self.args))}>"

    @property
    def logical_type(self) -> str:
        """The ODCS logicalType this type maps to."""
        return {"ARRAY": "array", "MAP": "map"}.get(self.name) or PRIMITIVES[self.name][0]

    @property
    def partitionable(self) -> bool:
        return not self.args and PRIMITIVES[self.name][1]

    def spark_type(self) -> DataType:
        """The pyspark DataType (constructing it needs no JVM)."""
        from pyspark.sql import types as T

        if self.name == "ARRAY":
            return T.ArrayType(self.args[0].spark_type(), containsNull=True)
        if self.name == "MAP":
            key, value = (arg.spark_type() for arg in self.args)
            return T.MapType(key, value, valueContainsNull=True)
        return {
            "STRING": T.StringType, "BINARY": T.BinaryType, "BOOLEAN": T.BooleanType,
            "TINYINT": T.ByteType, "SMALLINT": T.ShortType, "INT": T.IntegerType,
            "BIGINT": T.LongType, "FLOAT": T.FloatType, "DOUBLE": T.DoubleType,
            "DATE": T.DateType, "TIMESTAMP": T.TimestampType,
        }[self.name]()

    def arrow_type(self) -> pa.DataType:
        """The Arrow type Spark exchanges for this type (what mapInArrow must yield)."""
        import pyarrow as pa

        if self.name == "ARRAY":
            return pa.list_(pa.field("element", self.args[0].arrow_type()))
        if self.name == "MAP":
            key, value = (arg.arrow_type() for arg in self.args)
            return pa.map_(key, value)
        return {
            "STRING": pa.string, "BINARY": pa.binary, "BOOLEAN": pa.bool_,
            "TINYINT": pa.int8, "SMALLINT": pa.int16, "INT": pa.int32, "BIGINT": pa.int64,
            "FLOAT": pa.float32, "DOUBLE": pa.float64, "DATE": pa.date32,
            "TIMESTAMP": lambda: pa.timestamp("us", tz="UTC"),
        }[self.name]()


def parse_type(text: str) -> SqlType:
    """Parse a Spark SQL type string (case and spaces free) without a JVM.

    Only the types contracts use are accepted: the primitives above, ARRAY and MAP.
    Raises ValueError saying where the text stops making sense.
    """
    tokens = [(m.group(1) or m.group(2), m.start()) for m in _TOKEN.finditer(text)
              if m.group(1) or m.group(2)]
    parsed, used = _parse_tokens(tokens, 0, text)
    if used != len(tokens):
        raise ValueError(f"unexpected {tokens[used][0]!r} at position {tokens[used][1]} "
                         f"in type {text!r}")
    return parsed


def _parse_tokens(tokens: list[tuple[str, int]], i: int, text: str) -> tuple[SqlType, int]:
    """Recursive descent over (token, position) pairs; returns the type and next index."""
    if i >= len(tokens):
        raise ValueError(f"type {text!r} ends too early")
    word, where = tokens[i]
    name = word.upper()
    if name in PRIMITIVES:
        return SqlType(name), i + 1
    if name not in _CONTAINERS:
        raise ValueError(f"unknown type {word!r} at position {where} in {text!r}")
    args: list[SqlType] = []
    i = _expect(tokens, i + 1, "<", text)
    for n in range(_CONTAINERS[name]):
        if n:
            i = _expect(tokens, i, ",", text)
        arg, i = _parse_tokens(tokens, i, text)
        args.append(arg)
    return SqlType(name, tuple(args)), _expect(tokens, i, ">", text)


def _expect(tokens: list[tuple[str, int]], i: int, symbol: str, text: str) -> int:
    if i >= len(tokens) or tokens[i][0] != symbol:
        found = f"{tokens[i][0]!r} at position {tokens[i][1]}" if i < len(tokens) else "end"
        raise ValueError(f"expected {symbol!r} but found {found} in type {text!r}")
    return i + 1


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Column:
    """One column as the contract defines it (``spark_type`` in canonical spelling)."""

    name: str
    spark_type: str
    required: bool
    description: str
    primary_key_position: int | None = None
    partition_position: int | None = None
    enum: tuple[str, ...] = ()

    @property
    def sql_type(self) -> SqlType:
        return parse_type(self.spark_type)


@dataclass(frozen=True)
class Contract:
    """One table's contract: columns in table order, Delta layout and quality rules.

    ``quality`` holds every ODCS quality rule, table-level rules first, then column
    rules in column order; each is a copy of the ODCS rule with one key added,
    ``"property"``: the column a column rule belongs to (None for table-level rules).
    """

    table: str
    version: str
    description: str
    columns: tuple[Column, ...]
    table_properties: dict[str, str]
    layout_rationale: str
    quality: tuple[dict, ...]
    path: Path

    @property
    def primary_key(self) -> list[str]:
        return _by_position(self.columns, "primary_key_position")

    @property
    def partition_columns(self) -> list[str]:
        return _by_position(self.columns, "partition_position")

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(f"{self.table} has no column {name!r} (contract {self.path})")

    def spark_schema(self) -> StructType:
        """The table schema: nullable = not required, the description as column comment."""
        from pyspark.sql.types import StructField, StructType

        return StructType([
            StructField(c.name, c.sql_type.spark_type(), nullable=not c.required,
                        metadata={"comment": c.description})
            for c in self.columns
        ])

    def arrow_schema(self, *, comments: bool = False) -> pa.Schema:
        """The same columns as Arrow types, as Spark converts them (UTC microseconds);
        with ``comments``, each description as its field's ``comment`` metadata, which
        is where a Delta schema keeps column comments."""
        import pyarrow as pa

        return pa.schema([pa.field(c.name, c.sql_type.arrow_type(), nullable=not c.required,
                                   metadata={"comment": c.description} if comments else None)
                          for c in self.columns])

    def create_table_sql(self, qualified_name: str, location: str, *, replace: bool = False,
                         extra_properties: dict[str, str] | None = None) -> str:
        """``CREATE TABLE IF NOT EXISTS`` (or ``CREATE OR REPLACE TABLE``) for this contract
        as a Delta table at ``location``, recording the contract version in the table.

        Identifiers are back-quoted and every text goes through :func:`sql_literal`, so
        descriptions may contain quotes, backslashes and newlines.
        """
        if not _QUALIFIED_NAME.fullmatch(qualified_name):
            raise ValueError(f"not a plain (database.)table name: {qualified_name!r}")
        columns = ",\n".join(
            f"  {quote_identifier(c.name)} {c.spark_type}{' NOT NULL' if c.required else ''}"
            f" COMMENT {sql_literal(c.description)}"
            for c in self.columns
        )
        verb = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE IF NOT EXISTS"
        clauses = [f"{verb} {qualified_name} (\n{columns}\n)", "USING DELTA"]
        if self.partition_columns:
            names = ", ".join(map(quote_identifier, self.partition_columns))
            clauses.append(f"PARTITIONED BY ({names})")
        clauses += [f"COMMENT {sql_literal(self.description)}",
                    f"LOCATION {sql_literal(location)}"]
        properties = {**self.table_properties, CONTRACT_VERSION: self.version,
                      **(extra_properties or {})}
        pairs = ", ".join(f"{sql_literal(k)} = {sql_literal(v)}" for k, v in properties.items())
        clauses.append(f"TBLPROPERTIES ({pairs})")
        return "\n".join(clauses)


def _by_position(columns: Iterable[Column], attribute: str) -> list[str]:
    ranked = [(getattr(c, attribute), c.name) for c in columns
              if getattr(c, attribute) is not None]
    return [name for _, name in sorted(ranked)]


def quote_identifier(name: str) -> str:
    """Back-quote a Spark SQL identifier (keywords such as ``offset`` are column names)."""
    return "`" + name.replace("`", "``") + "`"


def sql_literal(text: str) -> str:
    """A Spark SQL string literal for any text.

    Spark unescapes backslash sequences in literals (``spark.sql.parser.
    escapedStringLiterals`` is false by default), so quotes and backslashes get a
    backslash. It also substitutes ``${name}`` anywhere in the statement before parsing
    (``spark.sql.variable.substitute``), so a ``$`` before ``{`` is written as ``\\u0024``.
    """
    out = []
    for i, ch in enumerate(text):
        if ch == "$" and text[i + 1:i + 2] == "{":
            out.append("\\u0024")
        elif ch in "\\'":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


# --------------------------------------------------------------------------- validation


#: Contract texts that passed the ODCS schema, remembered across processes: an empty file
#: named by the digest of the schema and the text. The schema check costs ~40 ms a file,
#: 1.2 CPU-s for the contracts in every process that reads them (each Airflow task, each
#: CLI command); this project's own rules still run every time.
ODCS_CHECKED_DIR = Path(tempfile.gettempdir()) / "rmq-odcs-checked"


@cache
def _odcs_schema_text() -> str:
    return resources.files("open_data_contract_standard").joinpath("schema.json").read_text()


@cache
def _odcs_validator() -> Any:
    """The JSON-schema validator of the installed ODCS package (built once)."""
    import jsonschema

    schema = json.loads(_odcs_schema_text())
    return jsonschema.validators.validator_for(schema)(schema)


@cache
def _odcs_schema_digest() -> str:
    return hashlib.sha256(_odcs_schema_text().encode()).hexdigest()


def _odcs_marker(text: str) -> Path:
    digest = hashlib.sha256(f"{_odcs_schema_digest()}\0{text}".encode()).hexdigest()
    return ODCS_CHECKED_DIR / digest


def validate_document(document: dict, path: Path, text: str | None = None) -> None:
    """Raise ContractError unless ``document`` is a valid ODCS contract of ours.

    First the official ODCS JSON schema (skipped when ``text``, the document's source, passed
    it before: :data:`ODCS_CHECKED_DIR`), then this project's rules, so that a contract other
    ODCS tools accept also builds a working Delta table.
    """
    if not isinstance(document, dict):
        raise ContractError(f"{path}: expected a YAML mapping, got {type(document).__name__}")
    marker = _odcs_marker(text) if text is not None else None
    if marker is None or not marker.exists():
        _check_odcs_schema(document, path)
        if marker is not None:
            with contextlib.suppress(OSError):  # only a cache: a read-only /tmp costs time
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
    problems = _project_problems(document, path)
    if problems:
        raise ContractError(f"{path}: " + "; ".join(problems))


def _check_odcs_schema(document: dict, path: Path) -> None:
    errors = sorted(_odcs_validator().iter_errors(document),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        reasons = [f"{_json_path(e.absolute_path)}: {e.message}" for e in errors[:8]]
        more = f" (and {len(errors) - 8} more)" if len(errors) > 8 else ""
        raise ContractError(f"{path}: not valid ODCS{more}:\n  " + "\n  ".join(reasons))


def _json_path(parts: Iterable[Any]) -> str:
    return "/".join(str(p) for p in parts) or "<document>"


def _project_problems(document: dict, path: Path) -> list[str]:
    """Every violation of the rules ODCS leaves open (empty when the contract is fine)."""
    schemas = document.get("schema") or []
    if len(schemas) != 1:
        return [f"expected exactly one schema object (one table per file), found {len(schemas)}"]
    table = schemas[0]
    name = table.get("name")
    problems = _header_problems(document, table, path)
    properties = table.get("properties") or []
    if not properties:
        return [*problems, f"table {name!r} has no properties (columns)"]
    types: dict[str, SqlType] = {}
    for index, prop in enumerate(properties):
        problems += _property_problems(prop, index, types)
    problems += _position_problems(properties, "primaryKey", "primaryKeyPosition", "primary key")
    problems += _position_problems(properties, "partitioned", "partitionKeyPosition",
                                   "partition")
    problems += _partition_type_problems(properties, types)
    problems += _custom_property_problems(table, properties, types)
    problems += _quality_problems(table, properties)
    return problems


def _header_problems(document: dict, table: dict, path: Path) -> list[str]:
    """File name, id, version and table naming agree; the table has a comment."""
    name, problems = table.get("name"), []
    if document.get("apiVersion") not in API_VERSIONS:
        problems.append(f"apiVersion must be one of {', '.join(API_VERSIONS)}")
    if name != path.stem:
        problems.append(f"schema name {name!r} must equal the file name {path.stem!r}")
    if table.get("physicalName", name) != name:
        problems.append(f"physicalName {table.get('physicalName')!r} must equal name {name!r}")
    if document.get("id") != f"{ID_PREFIX}{name}":
        problems.append(f"id must be {ID_PREFIX}{name}, not {document.get('id')!r}")
    if not _VERSION.fullmatch(str(document.get("version", ""))):
        problems.append(f"version {document.get('version')!r} is not MAJOR.MINOR.PATCH")
    if not str(table.get("description") or "").strip():
        problems.append("the schema object needs a description (the table comment)")
    return problems


def _property_problems(prop: dict, index: int, types: dict[str, SqlType]) -> list[str]:
    """Name, Spark type, logical type and description of one property."""
    name = prop.get("name")
    where = f"property {index + 1} ({name!r})"
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        return [f"{where}: name must be a lower-case identifier"]
    if name in types:
        return [f"{where}: duplicate column name"]
    if prop.get("physicalName", name) != name:
        return [f"{where}: physicalName must equal name"]
    problems = []
    if not str(prop.get("description") or "").strip():
        problems.append(f"{where}: missing description (it becomes the column comment)")
    physical = prop.get("physicalType")
    if not physical:
        return [*problems, f"{where}: missing physicalType (the Spark SQL type)"]
    try:
        sql_type = parse_type(physical)
    except ValueError as error:
        return [*problems, f"{where}: physicalType: {error}"]
    types[name] = sql_type
    if prop.get("logicalType") != sql_type.logical_type:
        problems.append(f"{where}: logicalType {prop.get('logicalType')!r} does not match "
                        f"{sql_type}; expected {sql_type.logical_type!r}")
    problems += _nested_problems(prop, sql_type, where)
    return problems


def _nested_problems(prop: dict, sql_type: SqlType, where: str) -> list[str]:
    """ODCS ``items`` / ``map`` element types, where given, agree with physicalType."""
    parts: list[tuple[str, dict | None, SqlType]] = []
    if sql_type.name == "ARRAY":
        parts.append(("items", prop.get("items"), sql_type.args[0]))
    if sql_type.name == "MAP":
        parts += [("map.key", (prop.get("map") or {}).get("key"), sql_type.args[0]),
                  ("map.value", (prop.get("map") or {}).get("value"), sql_type.args[1])]
    problems = []
    for label, item, expected in parts:
        given = (item or {}).get("physicalType")
        if given is None:
            continue
        try:
            ok = parse_type(given) == expected
        except ValueError:
            ok = False
        if not ok:
            problems.append(f"{where}: {label}.physicalType {given!r} does not match {expected}")
    return problems


def _position_problems(properties: list[dict], flag: str, key: str, what: str) -> list[str]:
    """Flags and positions agree, and positions run 1, 2, 3 ... without gaps."""
    problems, positions = [], []
    for prop in properties:
        flagged, position = bool(prop.get(flag)), prop.get(key, -1)
        if flagged and position < 1:
            problems.append(f"{prop.get('name')!r}: {flag} without a {key} >= 1")
        elif not flagged and position != -1:
            problems.append(f"{prop.get('name')!r}: {key} {position} but {flag} is not true")
        elif flagged:
            positions.append(position)
    if sorted(positions) != list(range(1, len(positions) + 1)):
        problems.append(f"{what} positions must be 1..{len(positions)} without gaps or "
                        f"repeats, found {sorted(positions)}")
    return problems


def _partition_type_problems(properties: list[dict], types: dict[str, SqlType]) -> list[str]:
    return [f"partition column {p['name']!r} has type {types[p['name']]}, which Delta cannot "
            f"partition by" for p in properties
            if p.get("partitioned") and p.get("name") in types
            and not types[p["name"]].partitionable]


def _custom_properties(table: dict) -> dict[str, Any]:
    return {item["property"]: item["value"] for item in table.get("customProperties") or []}


def _custom_property_problems(table: dict, properties: list[dict],
                              types: dict[str, SqlType]) -> list[str]:
    """deltaTableProperties (string map) and layoutRationale (sentence) are present."""
    custom = _custom_properties(table)
    problems = []
    names = [item["property"] for item in table.get("customProperties") or []]
    if len(names) != len(set(names)):
        problems.append("customProperties names repeat")
    props = custom.get(TABLE_PROPERTIES)
    if not isinstance(props, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        problems.append(f"customProperty {TABLE_PROPERTIES} must be a map of strings to "
                        "strings (quote 'true')")
    elif STATS_COLUMNS in props:
        problems += _stats_column_problems(props[STATS_COLUMNS], properties, types)
    if not isinstance(custom.get(LAYOUT_RATIONALE), str) or not custom[LAYOUT_RATIONALE].strip():
        problems.append(f"customProperty {LAYOUT_RATIONALE} must be a non-empty sentence")
    return problems


def _stats_column_problems(value: str, properties: list[dict],
                           types: dict[str, SqlType]) -> list[str]:
    """Delta rejects statistics columns that are unknown, partition or complex columns."""
    partitioned = {p.get("name") for p in properties if p.get("partitioned")}
    problems = []
    for name in (part.strip() for part in value.split(",")):
        if name not in types:
            problems.append(f"{STATS_COLUMNS} names unknown column {name!r}")
        elif name in partitioned:
            problems.append(f"{STATS_COLUMNS} names partition column {name!r} "
                            "(Delta keeps no statistics for partition columns)")
        elif types[name].args:
            problems.append(f"{STATS_COLUMNS} names {name!r} of type {types[name]}, which has "
                            "no statistics")
    return problems


def _all_rules(table: dict) -> list[tuple[str | None, dict]]:
    """(column or None, rule) for every quality rule: table-level first, then columns."""
    rules: list[tuple[str | None, dict]] = [(None, r) for r in table.get("quality") or []]
    for prop in table.get("properties") or []:
        rules += [(prop.get("name"), r) for r in prop.get("quality") or []]
    return rules


def _quality_problems(table: dict, properties: list[dict]) -> list[str]:
    """Rules are named, classified and unique; the primary key has its uniqueness rule."""
    problems, seen = [], set()
    columns = {p.get("name") for p in properties}
    for column, rule in _all_rules(table):
        name = rule.get("name")
        where = f"quality rule {name!r}" + (f" of {column!r}" if column else "")
        if not isinstance(name, str) or not _RULE_NAME.fullmatch(name):
            problems.append(f"{where}: needs a snake_case name")
        elif name in seen:
            problems.append(f"{where}: name used twice")
        seen.add(name)
        if not rule.get("dimension"):
            problems.append(f"{where}: needs a dimension")
        if rule.get("severity") not in SEVERITIES:
            problems.append(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
        if not str(rule.get("description") or "").strip():
            problems.append(f"{where}: needs a description")
        unknown = set((rule.get("arguments") or {}).get("properties") or []) - columns
        if unknown:
            problems.append(f"{where}: arguments.properties names unknown {sorted(unknown)}")
    key = [name for _, name in sorted(
        (p["primaryKeyPosition"], p["name"]) for p in properties if p.get("primaryKey")
        and isinstance(p.get("primaryKeyPosition"), int))]
    if key and not any(rule.get("metric") == "duplicateValues"
                       and (rule.get("arguments") or {}).get("properties") == key
                       for rule in table.get("quality") or []):
        problems.append(f"no table-level duplicateValues rule over the primary key {key}")
    return problems


# --------------------------------------------------------------------------- loading


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Safe YAML (libyaml when present) that rejects duplicate keys, which PyYAML would
    otherwise resolve silently by keeping the last."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict:
    loader.flatten_mapping(node)
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"found duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_contract(table: str, directory: Path = CONTRACTS_DIR) -> Contract:
    """Read, validate and convert ``<directory>/<table>.yaml``.

    Validation costs ~70 ms a file, so a file is parsed again only when its size or
    modification time changed; treat the returned contract as read-only.
    """
    path = Path(directory) / f"{table}.yaml"
    try:
        stat = path.stat()
    except OSError as error:
        raise ContractError(f"{path}: cannot read the contract of table {table!r}: "
                            f"{error.strerror}") from error
    return _load_file(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=256)
def _load_file(path: Path, mtime_ns: int, size: int) -> Contract:
    """Parse and validate one contract file (cached per file version)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ContractError(f"{path}: cannot read: {error.strerror}") from error
    try:
        document = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
    except yaml.YAMLError as error:
        raise ContractError(f"{path}: not valid YAML: {error}") from error
    validate_document(document, path, text)
    return _contract(document, path)


def load_contracts(directory: Path = CONTRACTS_DIR) -> dict[str, Contract]:
    """Every ``*.yaml`` contract of ``directory``, keyed by table name."""
    contracts = [load_contract(p.stem, directory)
                 for p in sorted(Path(directory).glob("*.yaml"))]
    return {c.table: c for c in contracts}


def _contract(document: dict, path: Path) -> Contract:
    """Build the model from a validated document."""
    table = document["schema"][0]
    custom = _custom_properties(table)
    return Contract(
        table=table["name"],
        version=str(document["version"]),
        description=table["description"].strip(),
        columns=tuple(_column(prop) for prop in table["properties"]),
        table_properties=dict(custom[TABLE_PROPERTIES]),
        layout_rationale=custom[LAYOUT_RATIONALE].strip(),
        quality=tuple({**copy.deepcopy(rule), "property": column}
                      for column, rule in _all_rules(table)),
        path=path,
    )


def _column(prop: dict) -> Column:
    pk, part = prop.get("primaryKeyPosition", -1), prop.get("partitionKeyPosition", -1)
    return Column(
        name=prop["name"],
        spark_type=str(parse_type(prop["physicalType"])),
        required=bool(prop.get("required", False)),
        description=prop["description"].strip(),
        primary_key_position=pk if prop.get("primaryKey") else None,
        partition_position=part if prop.get("partitioned") else None,
        enum=tuple(str(item["value"]) for item in prop.get("enum") or []),
    )


# --------------------------------------------------------------------------- drift


def schema_drift(contract: Contract, actual: StructType) -> list[str]:
    """How a table's schema differs from its contract, one sentence per difference.

    Compares column names, types (``simpleString``), nullability, comments and the order
    of the columns both have. Empty when the table is exactly what the contract says.
    """
    expected = {c.name: c for c in contract.columns}
    fields = {f.name: f for f in actual.fields}
    drift = [f"missing column {c.name} {c.spark_type}" for c in contract.columns
             if c.name not in fields]
    drift += [f"extra column {f.name} {f.dataType.simpleString().upper()} (not in contract "
              f"{contract.table} {contract.version})" for f in actual.fields
              if f.name not in expected]
    for column in contract.columns:
        if column.name in fields:
            drift += _column_drift(column, fields[column.name])
    ours = [c.name for c in contract.columns if c.name in fields]
    theirs = [f.name for f in actual.fields if f.name in expected]
    if ours != theirs:
        drift.append(f"column order differs: table has {', '.join(theirs)}; contract has "
                     f"{', '.join(ours)}")
    return drift


def _column_drift(column: Column, field: Any) -> list[str]:
    """Type, nullability and comment differences of one column present in both."""
    drift = []
    want = column.sql_type.spark_type().simpleString()
    have = field.dataType.simpleString()
    if have != want:
        drift.append(f"column {column.name}: type {have.upper()}, contract says "
                     f"{want.upper()}")
    if field.nullable == column.required:
        drift.append(f"column {column.name}: "
                     + ("nullable, contract says NOT NULL" if column.required
                        else "NOT NULL, contract allows null"))
    comment = (field.metadata or {}).get("comment")
    if comment != column.description:
        drift.append(f"column {column.name}: comment {comment!r} differs from the contract "
                     f"description {column.description!r}")
    return drift
