"""Reading Delta tables on the driver (jobs/lakehouse/driver_rows.py) without Spark.

The reads go through Arrow's own local filesystem, not deltalake's default Python one:
with the Python filesystem, a pre-buffered read finishing while the interpreter exits
aborted the process (exit 134) after the command's work was done: in 2 to 8 runs out of
12 of ``python -m jobs summary``, the last step of ``make run``. These tests hold the
reads to the same rows as deltalake's own reader, keep every module on the one reader,
and run a reading process requiring a clean exit.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.lakehouse.driver_rows import arrow_dataset, read_arrow, sparse_rows

ROOT = Path(__file__).resolve().parent.parent

# Partition values as broker names and snapshot ids may be: any printable text, with the
# characters that partition directories escape ('%', '/', '=', ':', space) made likely.
PARTITION_VALUES = st.text(
    alphabet=st.one_of(st.sampled_from("%/=: #?&'\"\\"), st.characters(
        blacklist_categories=("Cs", "Cc"))), min_size=1, max_size=12)


def _sorted(table: pa.Table) -> list[dict[str, object]]:
    return sorted(table.to_pylist(), key=lambda row: (str(row["broker"]), row["v"]))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(PARTITION_VALUES, min_size=1, max_size=4, unique=True),
       chosen=st.integers(min_value=0))
def test_rows_read_natively_equal_deltalakes_reader(tmp_path_factory, values, chosen):  # type: ignore[no-untyped-def]
    location = tmp_path_factory.mktemp("table")
    rows = pa.table({"broker": [v for v in values for _ in range(3)],
                     "v": list(range(3 * len(values)))})
    write_deltalake(str(location), rows, partition_by=["broker"])
    write_deltalake(str(location), rows, partition_by=["broker"], mode="append")
    reference = DeltaTable(str(location)).to_pyarrow_table()

    assert _sorted(arrow_dataset(location).to_table()) == _sorted(reference)
    value = values[chosen % len(values)]
    expected = [row for row in _sorted(reference) if row["broker"] == value]
    assert _sorted(read_arrow(location, broker=value)) == expected
    assert len(expected) == 6
    # a list of values reads the rows of any of them (the history windows' reads)
    some = values[:1 + chosen % len(values)]
    assert _sorted(read_arrow(location, broker=some)) == [
        row for row in _sorted(reference) if row["broker"] in some]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.sampled_from(["b1", "b 2"]), st.sampled_from(["x", "y", "z"]),
                               st.integers(0, 9), st.binary(max_size=8)), max_size=60),
       row_group=st.integers(1, 8), wanted=st.sampled_from(["x", "y", "z"]),
       broker=st.sampled_from(["b1", "b 2"]))
def test_sparse_rows_are_the_rows_a_filtered_scan_gives(tmp_path_factory, rows, row_group,  # type: ignore[no-untyped-def]
                                                      wanted, broker):
    """Row groups are counted on the filter's columns and only those with a match read:
    the same rows as one filtered scan, whatever the partitions, files and row groups."""
    import pyarrow.dataset as ds
    from deltalake import WriterProperties

    location = tmp_path_factory.mktemp("table")
    table = pa.table({name: list(column) for name, column in zip(
        ("broker", "topic", "n", "body"), zip(*rows, strict=True) if rows else ([],) * 4,
        strict=True)}, schema=pa.schema([("broker", pa.string()), ("topic", pa.string()),
                                        ("n", pa.int64()), ("body", pa.binary())]))
    for half in (table.slice(0, len(table) // 2), table.slice(len(table) // 2)):
        write_deltalake(str(location), half, partition_by=["broker"], mode="append",
                        writer_properties=WriterProperties(max_row_group_size=row_group))
    dataset = arrow_dataset(location)
    where = (ds.field("broker") == broker) & ((ds.field("topic") == wanted) | (ds.field("n") > 7))
    expected = dataset.to_table(columns=["n", "body", "topic"], filter=where)
    got = sparse_rows(dataset, where, ["n", "body", "topic"])

    assert got.schema == expected.schema
    assert sorted(got.to_pylist(), key=repr) == sorted(expected.to_pylist(), key=repr)


def test_a_spark_written_partitioned_table_reads_the_same(spark, tmp_path):  # type: ignore[no-untyped-def]
    """Spark escapes partition directories its own way (Hive's); the Delta log's paths
    still lead the native reader to the files."""
    location = tmp_path / "spark_table"
    values = ["broker-a", "a b%c:d", "x=y/z", "é日"]
    frame = spark.createDataFrame([(v, i) for i, v in enumerate(values)], "broker string, v long")
    frame.write.format("delta").partitionBy("broker").save(str(location))

    assert _sorted(arrow_dataset(location).to_table()) == _sorted(
        DeltaTable(str(location)).to_pyarrow_table())
    for i, value in enumerate(values):
        assert read_arrow(location, broker=value).to_pylist() == [{"broker": value, "v": i}]


def test_the_dataset_reads_through_arrows_own_filesystem(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path), pa.table({"broker": ["a"], "v": [1]}))
    filesystem = arrow_dataset(tmp_path).filesystem
    assert not isinstance(filesystem, pa.fs.PyFileSystem)
    assert isinstance(filesystem, pa.fs.SubTreeFileSystem)
    assert isinstance(filesystem.base_fs, pa.fs.LocalFileSystem)


def test_no_module_reads_parquet_through_deltalakes_python_filesystem() -> None:
    """Every read of a table's rows in jobs/ and bench/ goes through ``arrow_dataset``: a direct
    ``to_pyarrow_table()`` / ``to_pyarrow_dataset()`` without a filesystem is the read
    that aborted processes at exit. (In a bucket ``arrow_dataset`` names deltalake's on
    purpose, and ``python -m jobs`` ends without the interpreter's shutdown.)"""
    offenders = []
    for path in sorted([*(ROOT / "jobs").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("to_pyarrow_table", "to_pyarrow_dataset")
                    and not any(k.arg == "filesystem" for k in node.keywords)):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


READER = """
import sys
from pathlib import Path
from jobs.check.engines import DuckDbEngine
from jobs.lakehouse.driver_rows import read_arrow
root = Path(sys.argv[1])
tables = sorted(p for p in (root / "rmq.db").iterdir())
for table in tables:
    read_arrow(table, broker="a", snapshot_id="s2")
engine = DuckDbEngine(root)
for table in tables:
    engine.register(table.name, table.name)
    engine.arrow(f"SELECT count(*) FROM {table.name}")
print(len(tables))
"""


@pytest.fixture(scope="module")
def six_tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A warehouse of six small tables partitioned by broker, one file per broker and
    snapshot: reading one snapshot's rows skips files by their statistics, the reads
    that were left in flight at exit."""
    warehouse = tmp_path_factory.mktemp("six_tables")
    for i in range(6):
        for snapshot in ("s1", "s2", "s3"):
            rows = pa.table({"broker": ["a", "b"] * 2000, "snapshot_id": [snapshot] * 4000,
                             "v": list(range(4000)), "body": [b"x" * 100] * 4000})
            write_deltalake(str(warehouse / "rmq.db" / f"t{i}"), rows,
                            partition_by=["broker"], mode="append")
    return warehouse


def test_a_process_reading_tables_exits_cleanly(six_tables: Path) -> None:
    """A fresh process reads one snapshot of six tables and exits 0. Through deltalake's
    default filesystem the same reads aborted 3 and 4 runs in 30: one run catches that
    reader seldom, so the two tests above hold the reads to Arrow's filesystem, always."""
    done = subprocess.run([sys.executable, "-c", READER, str(six_tables)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "6"), done.stderr[-2000:]
