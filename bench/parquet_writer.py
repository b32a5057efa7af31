"""What the Parquet writer costs on a load's rows, per writer setting (issue 36).

On a generated store (bench/load_delta.py's, commitlog only), loaded once in process:
- the ``messages`` rows written by pyarrow with a dictionary tried on every column
  (pyarrow's default) against on the text columns only (jobs.lakehouse.parquet_files);
- the ``message_lookup`` rows (DuckDB's query of jobs.load.lookup_rows, its parts timed:
  the rows, their md5 bucket, the sort, and pyarrow's sort instead of DuckDB's) written by
  delta-rs' writer against pyarrow's with the table's own options
  (jobs.lakehouse.message_lookup).
Each write runs ``--repeat`` times in this process, alternately; the best CPU time counts.

    python bench/parquet_writer.py --size-mib 256 --body 100
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(label: str, work: Callable[[], object], results: dict) -> None:
    """Run ``work`` once; keep its (CPU, wall) seconds under ``label`` if the least CPU."""
    cpu, wall = cpu_seconds(), time.perf_counter()
    work()
    cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
    if label not in results or cpu < results[label][0]:
        results[label] = (cpu, wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--body", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import write_deltalake
    from load_delta import dataset_dir, lookup_writer_properties, prepare_store

    from jobs.lakehouse import message_lookup
    from jobs.lakehouse import tables as T
    from jobs.lakehouse.driver_rows import arrow_dataset, read_arrow
    from jobs.lakehouse.parquet_files import dictionary_columns, write_partitioned
    from jobs.lakehouse.spark_session import SparkOnDemand
    from jobs.lakehouse.tables import Registry
    from jobs.load import lookup_rows
    from jobs.load.job import LoadOptions, load_snapshot

    base = dataset_dir(ROOT / ".cache" / "bench", args.body, args.size_mib)
    prepare_store(base, args.body, args.size_mib << 20, min(args.size_mib, 1024) << 20)
    scratch = Path(tempfile.mkdtemp(dir=ROOT / ".cache"))
    try:
        def no_spark() -> object:
            raise AssertionError("in process")

        warehouse = scratch / "wh"
        load_snapshot(SparkOnDemand(no_spark), "b", "s1", base / "store",  # type: ignore[arg-type]
                      LoadOptions(engine="local"), registry=Registry(None, warehouse))
        registry = Registry(None, warehouse)
        messages = read_arrow(registry[T.MESSAGES].location).drop_columns(["store_date"])
        stats = registry[T.MESSAGES].contract.table_properties[
            "delta.dataSkippingStatsColumns"].split(",")
        results: dict[str, tuple[float, float]] = {}

        def write_messages(dictionary: object) -> Callable[[], object]:
            return lambda: pq.write_table(messages, scratch / "m.parquet", compression="zstd",
                                          write_statistics=stats, use_dictionary=dictionary,
                                          row_group_size=128 * 1024)

        for _ in range(args.repeat):
            measure("messages: dictionary on every column", write_messages(True), results)
            measure("messages: dictionary on the text columns",
                    write_messages(dictionary_columns(messages.schema)), results)

        dataset = arrow_dataset(registry[T.MESSAGES].location, files_where="broker = 'b'")
        schema = registry[T.MESSAGE_LOOKUP].contract.arrow_schema()
        full = lookup_rows.lookup_sql("b", ["s1"])
        unsorted, order_by = full.split("ORDER BY")
        queries = {"lookup rows: no md5, not sorted":
                   unsorted.replace("substr(md5(lookup_value), 1, 1)", "'0'"),
                   "lookup rows: md5, not sorted": unsorted, "lookup rows: md5, sorted": full}
        lookup: list[pa.Table] = []

        def query(sql: str) -> Callable[[], object]:
            def run() -> None:
                with duckdb.connect() as connection:
                    connection.execute("SET preserve_insertion_order = false")
                    connection.register("messages", dataset)
                    lookup[:] = [connection.sql(sql).to_arrow_table().cast(schema)]
            return run

        bloom = lookup_writer_properties()

        def by_delta_rs() -> None:
            shutil.rmtree(scratch / "lookup-d", ignore_errors=True)
            write_deltalake(str(scratch / "lookup-d"), lookup[0], partition_by=["lookup_bucket"],
                            writer_properties=bloom)

        def by_pyarrow() -> None:
            shutil.rmtree(scratch / "lookup-p", ignore_errors=True)
            write_partitioned(iter(lookup[0].to_batches()), schema, ("lookup_bucket",),
                              scratch / "lookup-p", None, message_lookup.parquet_options())

        def sorted_by_pyarrow() -> None:
            query(unsorted)()
            lookup[:] = [lookup[0].sort_by([(c.strip(), "ascending")
                                            for c in order_by.split(",")])]

        for _ in range(args.repeat):
            for label, sql in queries.items():
                measure(label, query(sql), results)
            measure("lookup rows: md5, not sorted, then pyarrow's sort", sorted_by_pyarrow,
                    results)
            measure("lookup write: delta-rs (before)", by_delta_rs, results)
            measure("lookup write: pyarrow, the table's options", by_pyarrow, results)
        print(f"{args.size_mib} MiB store, {args.body} B bodies: {messages.num_rows:,} "
              f"messages rows, {lookup[0].num_rows:,} lookup rows; best of {args.repeat}")
        print("| write | CPU s | wall s |\n|---|---:|---:|")
        for label, (cpu, wall) in results.items():
            print(f"| {label} | {cpu:.2f} | {wall:.2f} |")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
