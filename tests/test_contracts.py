"""Data contracts (data_contracts/*.yaml, jobs/lakehouse/contracts.py): valid ODCS, strict loading,
Spark/Arrow schemas that agree, DDL that builds exactly the table the contract describes,
and drift reports when a table stops matching it."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import replace
from importlib import resources
from pathlib import Path

import jsonschema
import pyarrow as pa
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from open_data_contract_standard.model import OpenDataContractStandard
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from jobs.lakehouse.contracts import (
    CONTRACTS_DIR,
    PRIMITIVES,
    Column,
    Contract,
    ContractError,
    SqlType,
    load_contract,
    load_contracts,
    parse_type,
    schema_drift,
    sql_literal,
)

TABLES = ("messages", "queue_entries", "index_entries", "message_traces", "message_lookup",
          "topics", "subscription_groups", "consumer_offsets", "delay_offsets", "pending_timers",
          "compacted_entries", "broker_epochs", "pop_in_flight", "transactions", "snapshots",
          "quarantine",
          "retention_gaps", "load_state", "history_rewrites", "superseded_messages",
          "load_runs", "maintenance_runs", "check_results",
          "consumer_lag", "queue_bounds", "consumer_status", "alerts", "cluster_lag",
          "replica_status")
APPEND_ONLY = {"messages", "queue_entries", "index_entries", "message_traces", "message_lookup",
               "load_runs", "maintenance_runs"}
CONTRACT_FILES = sorted(CONTRACTS_DIR.glob("*.yaml"))


# ------------------------------------------------------------------ the files themselves


def test_there_is_one_contract_per_lakehouse_table() -> None:
    assert sorted(p.stem for p in CONTRACT_FILES) == sorted(TABLES)
    assert sorted(load_contracts()) == sorted(TABLES)


@pytest.mark.parametrize("path", CONTRACT_FILES, ids=lambda p: p.stem)
def test_contract_is_valid_odcs(path: Path) -> None:
    """Checked with the official schema and model directly, not through our loader."""
    schema = json.loads(resources.files("open_data_contract_standard")
                        .joinpath("schema.json").read_text())
    document = yaml.safe_load(path.read_text())
    errors = list(jsonschema.Draft201909Validator(schema).iter_errors(document))
    assert errors == [], [e.message for e in errors]
    model = OpenDataContractStandard.model_validate(document)
    assert model.apiVersion in ("v3.1.0", "v3.2.0")
    assert (model.kind, model.id, model.status, model.domain) == (
        "DataContract", f"urn:rmq-lakehouse:{path.stem}", "active", "rocketmq")
    assert re.fullmatch(r"[1-9]\d*\.\d+\.\d+", model.version)  # MAJOR.MINOR.PATCH
    assert model.description.purpose and model.description.usage
    assert model.description.limitations
    [table] = model.schema_
    assert (table.name, table.physicalName, table.physicalType) == (path.stem,) * 2 + ("table",)


@pytest.mark.parametrize("table", TABLES)
def test_contract_carries_layout_and_the_agreed_quality_rules(table: str) -> None:
    contract = load_contract(table)
    props = contract.table_properties
    assert (props.get("delta.appendOnly") == "true") == (table in APPEND_ONLY)
    assert contract.layout_rationale.endswith(".")
    rules = {r["name"]: r for r in contract.quality}
    assert len(rules) == len(contract.quality)  # names are unique
    pk = rules["pk_unique"]
    assert (pk["metric"], pk["arguments"]["properties"], pk["mustBe"]) == (
        "duplicateValues", contract.primary_key, 0)
    for column in contract.columns:
        if column.required:
            assert rules[f"{column.name}_not_null"]["metric"] == "nullValues"
        if column.enum:
            valid = rules[f"{column.name}_valid"]
            assert [str(v) for v in valid["arguments"]["validValues"]] == list(column.enum)
    for rule in contract.quality:
        assert rule["severity"] in ("error", "warning") and rule["dimension"]
        assert rule["description"]
        if rule["type"] == "sql":
            assert "{object}" in rule["query"]


def test_messages_layout_and_rules() -> None:
    messages = load_contract("messages")
    assert messages.primary_key == ["broker", "physical_offset", "inner_index"]
    assert messages.partition_columns == ["store_date"]
    stats = messages.table_properties["delta.dataSkippingStatsColumns"].split(",")
    assert stats == ["broker", "physical_offset", "topic", "queue_id", "queue_offset",
                     "store_time", "msg_id", "first_snapshot_id"]
    rules = {r["name"]: r for r in messages.quality}
    assert "total_size < 91" in rules["total_size_min"]["query"]
    assert "physical_offset < 0" in rules["physical_offset_non_negative"]["query"]
    assert "stored_body_size < 0" in rules["stored_body_size_non_negative"]["query"]
    assert rules["total_size_min"]["property"] == "total_size"
    assert rules["pk_unique"]["property"] is None
    assert messages.column("transaction_type").enum == ("NOT", "PREPARED", "COMMIT", "ROLLBACK")
    assert messages.column("message_version").enum == ("1", "2")
    units = {r["name"]: r for r in load_contract("queue_entries").quality}
    assert "kind <> 'filler' AND size <= 0" in units["unit_size_positive"]["query"]
    offsets = {r["name"]: r for r in load_contract("consumer_offsets").quality}
    assert "consumer_offset < -1" in offsets["consumer_offset_min"]["query"]


def test_spark_and_arrow_schemas_agree_column_by_column() -> None:
    for contract in load_contracts().values():
        spark_schema, arrow_schema = contract.spark_schema(), contract.arrow_schema()
        assert spark_schema.names == arrow_schema.names == [c.name for c in contract.columns]
        for column, field, arrow_field in zip(contract.columns, spark_schema.fields,
                                              arrow_schema, strict=True):
            assert field.nullable == arrow_field.nullable == (not column.required)
            assert field.metadata == {"comment": column.description}
            assert field.dataType.simpleString().upper() == column.spark_type
        # pyspark's own Spark -> Arrow conversion is what mapInArrow checks against.
        assert arrow_schema == to_arrow_schema(spark_schema), contract.table
    messages = load_contract("messages").arrow_schema()
    assert messages.field("store_time").type == pa.timestamp("us", tz="UTC")
    assert messages.field("store_date").type == pa.date32()
    assert messages.field("body").type == pa.binary()
    assert messages.field("properties").type == pa.map_(pa.string(), pa.string())
    assert messages.field("keys").type == pa.list_(pa.string())
    assert messages.field("message_version").type == pa.int8()
    sizes = load_contract("snapshots").arrow_schema().field("bytes_by_kind").type
    assert sizes == pa.map_(pa.string(), pa.int64())


# ------------------------------------------------------------------ Spark type strings

primitive_types = st.sampled_from(sorted(PRIMITIVES)).map(SqlType)
sql_types = st.recursive(
    primitive_types,
    lambda inner: st.one_of(
        inner.map(lambda t: SqlType("ARRAY", (t,))),
        st.tuples(primitive_types, inner).map(lambda kv: SqlType("MAP", kv)),
    ),
    max_leaves=6,
)


@st.composite
def spellings(draw: st.DrawFn, sql_type: SqlType) -> str:
    """Any spelling Spark's DDL parser accepts: mixed case, spaces around symbols."""
    space = st.sampled_from(["", " ", "  ", "\t"])
    name = "".join(ch.upper() if draw(st.booleans()) else ch.lower() for ch in sql_type.name)
    if not sql_type.args:
        return name
    args = [draw(spellings(arg)) for arg in sql_type.args]
    comma = draw(space) + "," + draw(space)
    return f"{name}{draw(space)}<{draw(space)}{comma.join(args)}{draw(space)}>"


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_type_strings_round_trip(data: st.DataObject) -> None:
    sql_type = data.draw(sql_types)
    text = data.draw(spellings(sql_type))
    assert parse_type(text) == sql_type
    assert parse_type(str(sql_type)) == sql_type
    assert sql_type.spark_type().simpleString().upper() == str(sql_type)


@settings(max_examples=100, deadline=None)
@given(sql_types)
def test_truncated_type_strings_are_rejected(sql_type: SqlType) -> None:
    text = str(sql_type)
    for end in range(1, len(text)):
        with pytest.raises(ValueError, match="type"):
            parse_type(text[:end])


@pytest.mark.parametrize("text", ["STRUCT<a:INT>", "VARCHAR(10)", "DECIMAL(10,2)",
                                  "ARRAY<INT,INT>", "MAP<STRING>", "INT INT", "", "ARRAY<>"])
def test_unsupported_type_strings_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_type(text)


# ------------------------------------------------------------------ broken contracts


def _document(table: str = "delay_offsets") -> dict:
    return yaml.safe_load((CONTRACTS_DIR / f"{table}.yaml").read_text())


def _column(document: dict, name: str) -> dict:
    return next(p for p in document["schema"][0]["properties"] if p["name"] == name)


def _table_properties(document: dict) -> dict:
    return next(c for c in document["schema"][0]["customProperties"]
                if c["property"] == "deltaTableProperties")["value"]


def _drop_physical_type(d: dict) -> None:
    del _column(d, "delay_offset")["physicalType"]


def _pk_gap(d: dict) -> None:
    _column(d, "delay_level")["primaryKeyPosition"] = 4


def _partition_without_position(d: dict) -> None:
    _column(d, "delay_level")["partitioned"] = True


def _partition_position_on_plain_column(d: dict) -> None:
    _column(d, "config_file")["partitionKeyPosition"] = 2


def _unknown_stats_column(d: dict) -> None:
    _table_properties(d)["delta.dataSkippingStatsColumns"] = "broker,no_such_column"


def _stats_on_partition_column(d: dict) -> None:
    _table_properties(d)["delta.dataSkippingStatsColumns"] = "broker,snapshot_id"


def _unparsable_type(d: dict) -> None:
    _column(d, "delay_offset")["physicalType"] = "BIGINT<STRING>"


def _wrong_logical_type(d: dict) -> None:
    _column(d, "delay_offset")["logicalType"] = "string"


def _unknown_odcs_field(d: dict) -> None:
    _column(d, "delay_offset")["nullable"] = True


def _two_tables(d: dict) -> None:
    d["schema"].append(copy.deepcopy(d["schema"][0]))


def _unnamed_rule(d: dict) -> None:
    del _column(d, "delay_offset")["quality"][0]["name"]


def _duplicate_rule_name(d: dict) -> None:
    _column(d, "delay_offset")["quality"][0]["name"] = "pk_unique"


def _unquoted_property_value(d: dict) -> None:
    _table_properties(d)["delta.appendOnly"] = True


def _no_pk_rule(d: dict) -> None:
    d["schema"][0]["quality"] = [r for r in d["schema"][0]["quality"]
                                 if r["name"] != "pk_unique"]


def _partition_by_map(d: dict) -> None:
    d["schema"][0]["properties"].append({
        "name": "extra", "physicalType": "MAP<STRING,STRING>", "logicalType": "map",
        "map": {"key": {"logicalType": "string"}, "value": {"logicalType": "string"}},
        "required": True, "partitioned": True, "partitionKeyPosition": 2,
        "description": "A map column."})


BROKEN: dict[str, tuple[Callable[[dict], None], str]] = {
    "missing physicalType": (_drop_physical_type, "missing physicalType"),
    "primary key gap": (_pk_gap, "primary key positions must be 1..3"),
    "partitioned without position": (_partition_without_position,
                                     "partitioned without a partitionKeyPosition"),
    "partition position on a plain column": (_partition_position_on_plain_column,
                                             "partitionKeyPosition 2 but partitioned"),
    "unknown statistics column": (_unknown_stats_column, "unknown column 'no_such_column'"),
    "statistics on a partition column": (_stats_on_partition_column,
                                         "partition column 'snapshot_id'"),
    "partition by a map": (_partition_by_map, "Delta cannot partition by"),
    "unparsable type": (_unparsable_type, "physicalType: unexpected '<' at position 6"),
    "logical type mismatch": (_wrong_logical_type, "does not match BIGINT"),
    "unknown ODCS field": (_unknown_odcs_field, "'nullable' was unexpected"),
    "two tables in one file": (_two_tables, "exactly one schema object"),
    "rule without name": (_unnamed_rule, "needs a snake_case name"),
    "rule name used twice": (_duplicate_rule_name, "name used twice"),
    "unquoted table property": (_unquoted_property_value, "map of strings to strings"),
    "no primary key rule": (_no_pk_rule, "duplicateValues rule over the primary key"),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_broken_contract_is_rejected_naming_the_file(case: str, tmp_path: Path) -> None:
    breaks, reason = BROKEN[case]
    document = _document()
    breaks(document)
    path = tmp_path / "delay_offsets.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    with pytest.raises(ContractError) as error:
        load_contract("delay_offsets", tmp_path)
    assert str(path) in str(error.value)
    assert reason in str(error.value)


@pytest.mark.parametrize(("text", "reason"), [
    ("apiVersion: v3.2.0\nschema: [unclosed\n", "not valid YAML"),
    ("kind: DataContract\nkind: DataContract\n", "duplicate key 'kind'"),
    ("- just\n- a list\n", "expected a YAML mapping"),
])
def test_unreadable_yaml_is_rejected_naming_the_file(text: str, reason: str,
                                                     tmp_path: Path) -> None:
    path = tmp_path / "topics.yaml"
    path.write_text(text)
    with pytest.raises(ContractError, match=reason) as error:
        load_contracts(tmp_path)
    assert str(path) in str(error.value)


def test_contract_named_unlike_its_file_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "topics.yaml").write_text((CONTRACTS_DIR / "delay_offsets.yaml").read_text())
    with pytest.raises(ContractError, match="must equal the file name 'topics'"):
        load_contract("topics", tmp_path)
    with pytest.raises(ContractError, match="cannot read the contract of table 'nope'"):
        load_contract("nope", tmp_path)


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "delay_offsets.yaml"
    document = _document()
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    assert load_contract("delay_offsets", tmp_path).version == "1.0.0"
    document["version"] = "1.1.0"
    path.write_text(yaml.safe_dump(document, sort_keys=False) + "\n")
    assert load_contract("delay_offsets", tmp_path).version == "1.1.0"


# ------------------------------------------------------------------ drift (no JVM needed)


def _with_field(schema: StructType, name: str, **changes: object) -> StructType:
    fields = []
    for f in schema.fields:
        if f.name == name:
            merged = {"name": f.name, "dataType": f.dataType, "nullable": f.nullable,
                      "metadata": f.metadata, **changes}
            f = StructField(**merged)
        fields.append(f)
    return StructType(fields)


def test_schema_drift_names_every_difference() -> None:
    contract = load_contract("delay_offsets")
    exact = contract.spark_schema()
    assert schema_drift(contract, exact) == []

    extra = StructType([*exact.fields, StructField("extra", StringType())])
    assert schema_drift(contract, extra) == [
        "extra column extra STRING (not in contract delay_offsets 1.0.0)"]

    widened = _with_field(exact, "queue_id", dataType=LongType())
    assert schema_drift(contract, widened) == ["column queue_id: type BIGINT, contract says INT"]

    nullable = _with_field(exact, "delay_offset", nullable=True)
    assert schema_drift(contract, nullable) == [
        "column delay_offset: nullable, contract says NOT NULL"]

    no_comment = _with_field(exact, "config_file", metadata={})
    assert schema_drift(contract, no_comment) == [
        "column config_file: comment None differs from the contract description "
        f"{contract.column('config_file').description!r}"]

    missing = StructType([f for f in exact.fields if f.name != "config_file"])
    assert schema_drift(contract, missing) == ["missing column config_file STRING"]

    swapped = StructType([exact.fields[1], exact.fields[0], *exact.fields[2:]])
    assert schema_drift(contract, swapped) == [
        "column order differs: table has snapshot_id, broker, delay_level, queue_id, "
        "delay_offset, config_file; contract has broker, snapshot_id, delay_level, queue_id, "
        "delay_offset, config_file"]


def test_optional_column_that_became_not_null_is_drift() -> None:
    contract = load_contract("retention_gaps")
    schema = _with_field(contract.spark_schema(), "topic", nullable=False)
    assert schema_drift(contract, schema) == ["column topic: NOT NULL, contract allows null"]


# ------------------------------------------------------------------ SQL text


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_sql_literal_escapes_everything_spark_would_interpret(text: str) -> None:
    literal = sql_literal(text)
    body = literal[1:-1]
    assert literal[0] == literal[-1] == "'"
    assert "${" not in literal  # Spark would substitute a variable there
    # every quote and backslash inside is escaped, and no raw line break remains
    i = 0
    while i < len(body):
        if body[i] == "\\":
            i += 2
            continue
        assert body[i] not in "'\n\r"
        i += 1


def test_create_table_sql_reads_like_the_contract() -> None:
    messages = load_contract("messages")
    ddl = messages.create_table_sql("rmq.messages", "/data/rmq.db/messages")
    assert ddl.startswith("CREATE TABLE IF NOT EXISTS rmq.messages (\n  `broker` STRING NOT NULL")
    assert "  `body` BINARY COMMENT 'Body as the producer sent it" in ddl
    assert "`properties` MAP<STRING,STRING> NOT NULL" in ddl
    assert "\nPARTITIONED BY (`store_date`)\n" in ddl
    assert "COMMENT 'One row per message record of a broker\\'s commitlog" in ddl
    assert "\nLOCATION '/data/rmq.db/messages'\n" in ddl
    assert "'delta.appendOnly' = 'true'" in ddl
    assert f"'rmq.contract.version' = '{messages.version}'" in ddl  # recorded in the table
    assert "PARTITIONED BY" not in load_contract("load_runs").create_table_sql("a.b", "/x")
    replace = messages.create_table_sql("rmq.messages", "/x", replace=True,
                                        extra_properties={"rmq.migration.source_version": "7"})
    assert replace.startswith("CREATE OR REPLACE TABLE rmq.messages (")
    assert "'rmq.migration.source_version' = '7'" in replace
    with pytest.raises(ValueError, match="plain"):
        messages.create_table_sql("rmq.messages; DROP TABLE x", "/x")


# ------------------------------------------------------------------ real Spark + Delta

NASTY = ("It's a \"test\" with a back\\slash; -- not a comment\nsecond\tline ${x} $y "
         "\x01 ünïcødé `q`")


def _detail(spark, name: str):  # type: ignore[no-untyped-def]
    return spark.sql(f"DESCRIBE DETAIL {name}").collect()[0]


@pytest.mark.spark
def test_contract_ddl_builds_exactly_the_described_tables(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Spark creates each table; Spark and delta-rs (an independent reader of the Delta
    log) both see the contract's columns, comments, partitioning and properties."""
    from deltalake import DeltaTable

    spark.sql("CREATE DATABASE IF NOT EXISTS contract_test")
    for table, contract in load_contracts().items():
        name, location = f"contract_test.{table}", tmp_path / table
        spark.sql(contract.create_table_sql(name, str(location)))
        schema = spark.table(name).schema
        assert schema_drift(contract, schema) == [], table
        assert [f.metadata.get("comment") for f in schema.fields] == [
            c.description for c in contract.columns]
        delta = DeltaTable(str(location))
        metadata = delta.metadata()
        assert metadata.partition_columns == contract.partition_columns, table
        assert metadata.configuration == {**contract.table_properties,
                                          "rmq.contract.version": contract.version}, table
        assert metadata.description == contract.description
        assert delta.to_pyarrow_table().schema == contract.arrow_schema(), table
        # Every SQL quality rule resolves against the real table (analysis only, no job).
        for rule in contract.quality:
            if rule["type"] == "sql":
                result = spark.sql(rule["query"].replace("{object}", name))
                assert len(result.schema.fields) == 1, rule["name"]
    # DESCRIBE DETAIL runs a job per table, so it is asked about the richest table only.
    messages = load_contract("messages")
    detail = _detail(spark, "contract_test.messages")
    assert detail.format == "delta"
    assert list(detail.partitionColumns) == messages.partition_columns == ["store_date"]
    assert dict(detail.properties) == {**messages.table_properties,
                                       "rmq.contract.version": messages.version}
    assert detail.description == messages.description
    described = {row.col_name: row.comment
                 for row in spark.sql("DESCRIBE TABLE contract_test.messages").collect()}
    assert described["msg_id"] == messages.column("msg_id").description


@pytest.mark.spark
def test_delta_rs_creates_each_table_as_spark_ddl_does(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """jobs.lakehouse.table_ddl (delta-rs, what the registry uses) and the contract's
    CREATE TABLE on Spark give the same protocol, table metadata and schema (types,
    nullability, comments), and Spark reads the delta-rs table with the contract's schema."""
    from deltalake import DeltaTable

    from jobs.lakehouse.table_ddl import create_table

    spark.sql("CREATE DATABASE IF NOT EXISTS contract_ddl")
    for table, contract in load_contracts().items():
        by_spark, by_delta_rs = tmp_path / "spark" / table, tmp_path / "delta-rs" / table
        spark.sql(contract.create_table_sql(f"contract_ddl.{table}", str(by_spark)))
        create_table(contract, str(by_delta_rs))
        theirs, ours = DeltaTable(str(by_spark)), DeltaTable(str(by_delta_rs))
        assert (ours.protocol().min_reader_version, ours.protocol().min_writer_version,
                ours.protocol().reader_features, ours.protocol().writer_features) == (
            theirs.protocol().min_reader_version, theirs.protocol().min_writer_version,
            theirs.protocol().reader_features, theirs.protocol().writer_features), table
        for attribute in ("partition_columns", "configuration", "description", "name"):
            assert getattr(ours.metadata(), attribute) == getattr(theirs.metadata(),
                                                                  attribute), (table, attribute)
        assert json.loads(ours.schema().to_json()) == json.loads(theirs.schema().to_json())
        schema = spark.read.format("delta").load(str(by_delta_rs)).schema
        assert schema_drift(contract, schema) == [], table


@pytest.mark.spark
def test_drifted_table_is_reported(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Comments with quotes, backslashes and newlines survive the DDL; then the table is
    altered the ways tables drift, and each change is named."""
    base = load_contract("delay_offsets")
    contract: Contract = replace(
        base, description=NASTY,
        columns=tuple(replace(c, description=f"{c.name}: {NASTY}") for c in base.columns))
    name = "contract_test.drift_probe"
    spark.sql("CREATE DATABASE IF NOT EXISTS contract_test")
    spark.sql(contract.create_table_sql(name, str(tmp_path / "drift_probe")))
    assert schema_drift(contract, spark.table(name).schema) == []
    assert _detail(spark, name).description == NASTY

    spark.sql(f"ALTER TABLE {name} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')")
    spark.sql(f"ALTER TABLE {name} ALTER COLUMN queue_id TYPE BIGINT")
    spark.sql(f"ALTER TABLE {name} ADD COLUMNS (extra_note STRING COMMENT 'added by hand')")
    spark.sql(f"ALTER TABLE {name} ALTER COLUMN delay_offset COMMENT 'edited by hand'")
    drift = schema_drift(contract, spark.read.format("delta").load(str(tmp_path / "drift_probe"))
                         .schema)
    assert drift == [
        "extra column extra_note STRING (not in contract delay_offsets 1.0.0)",
        "column queue_id: type BIGINT, contract says INT",
        "column delay_offset: comment 'edited by hand' differs from the contract description "
        f"{contract.column('delay_offset').description!r}",
    ]


def test_columns_compare_by_value() -> None:
    """Column/Contract are plain frozen values, so contracts can be compared in tests."""
    column = Column("a", "INT", True, "An int.", None, None, ())
    assert column == Column("a", "INT", True, "An int.")
    assert column.sql_type == SqlType("INT")
    assert StructField("a", IntegerType(), False).dataType == column.sql_type.spark_type()
