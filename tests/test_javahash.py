"""Java String.hashCode and the broker hashes derived from it."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from store_encoders import index_hash, java_hash

from rmqlib.common.javahash import (
    INT_MAX,
    INT_MIN,
    index_key,
    index_key_hash,
    index_key_hashes,
    java_string_hash,
    java_string_hashes,
    tags_code,
)

# Values Java prints for "x".hashCode().
KNOWN = {
    "": 0,
    "a": 97,
    "hello": 99162322,
    "hello world": 1794106052,
    "Aa": 2112,
    "BB": 2112,
    "polygenelubricants": INT_MIN,  # the classic Integer.MIN_VALUE string
}


@pytest.mark.parametrize(("text", "expected"), KNOWN.items())
def test_known_java_values(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_supplementary_char_counts_as_two_surrogates() -> None:
    # U+1F600 = D83D DE00 -> 0xD83D * 31 + 0xDE00
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00 == 1772899
    assert java_string_hash("a\U0001F600b") == ((97 * 31 + 0xD83D) * 31 + 0xDE00) * 31 + 98


def test_lone_surrogate_hashes_as_itself() -> None:
    assert java_string_hash("\ud800") == 0xD800


def test_wraps_to_negative() -> None:
    assert java_string_hash("polygenelubricants") < 0
    assert java_string_hash("hello world!") == -217287203
    assert java_string_hash("abcdefg") == -1206291356


def test_tags_code_missing_or_empty_is_zero() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919


def test_tags_code_sign_extended() -> None:
    assert tags_code("polygenelubricants") == -(2**31)


def test_index_key_hash_abs_rule() -> None:
    assert index_key_hash("polygenelubricants") == 0  # abs(MIN_VALUE) overflows -> 0
    negative = "hello world!"  # -217287203 in Java
    assert java_string_hash(negative) < 0
    assert index_key_hash(negative) == -java_string_hash(negative)
    assert index_key_hash("hello") == 99162322


def test_index_key_is_topic_hash_key() -> None:
    assert index_key("TopicTest", "order-1") == "TopicTest#order-1"


@given(st.text())
def test_matches_independent_implementation(text: str) -> None:
    assert java_string_hash(text) == java_hash(text)
    assert index_key_hash(text) == index_hash(text)


@given(st.text())
def test_ranges(text: str) -> None:
    assert INT_MIN <= java_string_hash(text) <= INT_MAX
    assert 0 <= index_key_hash(text) <= INT_MAX


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=30),
       st.integers(0, 5))
def test_bulk_hashes_equal_scalar_hashes(texts: list[str | None], skip: int) -> None:
    """The vectorised path (ASCII fast path, per-row fallback, sliced arrays) agrees."""
    array = pa.array(texts, pa.string()).slice(min(skip, len(texts)))
    expected = [java_string_hash(t or "") for t in texts[min(skip, len(texts)):]]
    assert java_string_hashes(array).tolist() == expected
    assert index_key_hashes(array).tolist() == [
        0 if h == -(2**31) else abs(h) for h in expected]


# Strings Spark can hold: UTF-8 has no lone surrogates.
SPARK_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)


def _hash_queries(java_hash) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    from jobs.check.checks import index_key_hash_sql, tags_code_sql

    return (tags_code_sql("tags", java_hash),
            index_key_hash_sql("concat(topic, '#', key)", java_hash))


def _expected(rows: list[tuple]) -> list[tuple[int, int]]:
    return [(tags_code(tags), index_key_hash(index_key(topic, key))) for tags, topic, key in rows]


@pytest.mark.spark
@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), SPARK_TEXT), SPARK_TEXT, SPARK_TEXT),
                min_size=1, max_size=40))
def test_the_checks_sql_hashes_equal_rmqlib(spark, rows: list[tuple]) -> None:  # type: ignore[no-untyped-def]
    """The reconcile's SQL on Spark (the JVM's own String.hashCode through reflect()) gives
    the tagsCode and index keyHash that rmqlib's decoders compute, for any text."""
    from jobs.check.engines import SparkEngine

    tags_sql, key_sql = _hash_queries(SparkEngine(spark, None).java_hash)  # type: ignore[arg-type]
    frame = spark.createDataFrame(rows, "tags STRING, topic STRING, key STRING")
    got = frame.selectExpr(f"{tags_sql} AS tags_code", f"{key_sql} AS key_hash").collect()
    assert [(r.tags_code, r.key_hash) for r in got] == _expected(rows)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), SPARK_TEXT), SPARK_TEXT, SPARK_TEXT),
                min_size=1, max_size=40))
def test_the_local_engines_hashes_equal_rmqlib(tmp_path_factory, rows: list[tuple]) -> None:  # type: ignore[no-untyped-def]
    """The same SQL on the local engine (DuckDB, translated by sqlglot, rmqlib's vectorised
    hash as a function) gives the same numbers."""
    import pyarrow as pa

    from jobs.check.engines import DuckDbEngine

    engine = DuckDbEngine(tmp_path_factory.getbasetemp())
    tags_sql, key_sql = _hash_queries(engine.java_hash)
    columns = list(zip(*rows, strict=True))
    engine.connection.register("rows", pa.table(
        {name: pa.array(values, pa.string()) for name, values in
         zip(("tags", "topic", "key"), columns, strict=True)}))
    got = engine.arrow(f"SELECT {tags_sql} AS tags_code, {key_sql} AS key_hash FROM rows")
    engine.close()
    # DuckDB keeps the rows' order for a plain projection of one registered table.
    assert list(zip(got["tags_code"].to_pylist(), got["key_hash"].to_pylist(),
                    strict=True)) == _expected(rows)
