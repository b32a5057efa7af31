"""The narrowing predicate (jobs/query/narrowing.py) run by DataFusion over a Delta table:
it keeps every row whose (broker, value) was listed, and none other while each broker has
at most MAX_VALUES values (past that, their range: a superset, still exact in the query,
whose joins decide). Values are integers (physical offsets) or plain text (snapshot ids);
a value that is not plain text leaves the query unnarrowed."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.query import narrowing
from jobs.query.narrowing import pairs_condition

BROKERS = st.sampled_from(["broker-a", "broker-b", "b.c:1"])
OFFSETS = st.integers(min_value=0, max_value=2**40)
SNAPSHOTS = st.text(alphabet="az09TZ_.:+-", min_size=1, max_size=16)  # snapshot ids


def kept(tmp_path: Path, rows: list[tuple[str, object]], condition: str) -> list[tuple]:
    """The rows DataFusion keeps under ``condition``, from a Delta table of ``rows``."""
    location = tmp_path / f"t{len(list(tmp_path.iterdir()))}"  # one per example
    column = pa.array([v for _, v in rows],
                      pa.int64() if isinstance(rows[0][1], int) else pa.string())
    write_deltalake(str(location), pa.table({"broker": [b for b, _ in rows], "v": column}))
    result = QueryBuilder().register("t", DeltaTable(str(location))).execute(
        f"SELECT broker, v FROM t WHERE {condition}")
    return sorted((r["broker"], r["v"]) for r in
                  pa.RecordBatchReader.from_stream(result).read_all().to_pylist())


@pytest.mark.parametrize("cap", [narrowing.MAX_VALUES, 3])  # as shipped, and ranges early
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), texts=st.booleans())
def test_the_condition_keeps_exactly_the_listed_pairs(tmp_path: Path, data, texts: bool,  # type: ignore[no-untyped-def]
                                                      cap: int, monkeypatch) -> None:
    values = SNAPSHOTS if texts else OFFSETS
    size = data.draw(st.integers(min_value=0, max_value=150), label="pairs listed")
    pairs = data.draw(st.lists(st.tuples(BROKERS, values), min_size=size, max_size=size,
                               unique=True), label="listed")
    others = data.draw(st.lists(st.tuples(BROKERS, values), min_size=1, max_size=60),
                       label="other rows")
    monkeypatch.setattr(narrowing, "MAX_VALUES", cap)
    condition = pairs_condition("v", pairs)
    assert condition is not None
    rows = pairs + others
    got = kept(tmp_path, rows, condition)
    listed = set(pairs)
    assert {r for r in rows if r in listed} <= set(got)
    by_broker = {b: [v for c, v in pairs if c == b] for b, _ in pairs}
    if all(len(set(v)) <= cap for v in by_broker.values()):
        assert got == sorted(r for r in rows if r in listed)
    else:  # each broker's range, never another broker's rows
        assert all(b in by_broker and min(by_broker[b]) <= v <= max(by_broker[b])
                   for b, v in got)


@pytest.mark.parametrize("pair", [("it's", 1), ("broker-a", "a b"), ("broker-a", "x'--"),
                                  ("broker-a", 1.5)])
def test_a_value_that_is_not_plain_leaves_the_query_as_it_is(pair) -> None:  # type: ignore[no-untyped-def]
    assert pairs_condition("v", [pair]) is None


def test_nothing_listed_reads_nothing() -> None:
    assert pairs_condition("v", []) == "FALSE"
    assert pairs_condition("v", [("broker-a", None), (None, 3)]) == "FALSE"


def test_a_listing_runs_only_the_ctes_it_needs() -> None:
    sql = ("-- narrow: t1 by b\nWITH a AS (SELECT broker, x FROM rmq.t1), b AS (SELECT broker, x "
           "FROM a), c AS (SELECT broker, y FROM rmq.t2) SELECT * FROM b JOIN c USING (broker)")
    listing = narrowing.cte_listing(sql, "b")
    assert "rmq.t1" in listing and "rmq.t2" not in listing
    assert listing.index("a AS") < listing.index("b AS")  # a CTE after those it reads
    with pytest.raises(narrowing.QueryError):
        narrowing.cte_listing(sql, "missing")
    with pytest.raises(narrowing.QueryError):
        narrowing.cte_listing("SELECT 1", "b")


#: CTE bodies whose literals, quoted names and comments hold what the scanner must skip.
TRICKY = st.text(alphabet="(),' -a\n", max_size=12)


@given(bodies=st.lists(st.tuples(TRICKY, TRICKY), min_size=1, max_size=4))
def test_ctes_are_found_whatever_their_literals_and_comments_hold(bodies) -> None:  # type: ignore[no-untyped-def]
    ctes = {}
    for at, (literal, comment) in enumerate(bodies):
        quoted = literal.replace("'", "''").replace("\n", " ")
        remark = comment.replace("\n", " ")  # a comment ends at its line's end
        ctes[f"c{at}"] = (f"  -- {remark}\n"
                          f"  SELECT '{quoted}' AS \"a(,\", (1) AS n FROM rmq.t{at}\n")
    sql = "-- (a header, with a comma\nWITH " + ", ".join(
        f"c{at} AS ({body})" for at, body in enumerate(ctes.values())) + " SELECT * FROM c0"
    found = narrowing.common_table_expressions(sql)
    assert found == {name: body for name, body in ctes.items()}
