"""The nightly report (jobs/report/pages.py) opened in headless Chromium: the charts render with
the right series, the tables show what an operator must see, the index links the pages.

A real-broker store (v5-clean) is loaded as snapshot s1; a second snapshot s2 and the
consumer_lag / check_results rows of both are appended here with the contracts' schemas
(the reconcile job that writes them is not part of this test).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from lakehouse import load

from jobs.lakehouse import tables as T
from jobs.lakehouse.tables import Registry
from jobs.load.job import LoadOptions
from jobs.report.pages import INDEX_PAGE, SEVERITIES, write_report

pytestmark = [pytest.mark.spark, pytest.mark.broker]

BROKER = "broker-r"
GROUPS = ["G_ALL", "G_SLOW"]
HOSTILE = "<script>window.pwned = true</script> & <b>bold</b>"

# (snapshot, group, queue, status, lag_messages, broker_diff, lost, lag_seconds)
LAG = [
    ("s1", "G_ALL", 0, "ok", 0, 0, 0, None),
    ("s1", "G_ALL", 1, "ok", 2, 2, 0, 4.5),
    ("s1", "G_ALL", 2, "ok", 1, 1, 0, 2.0),
    ("s1", "G_SLOW", 0, "ok", 40, 40, 0, 3600.0),
    ("s1", "G_SLOW", 1, "ok", 35, 35, 0, 3500.0),
    ("s1", "G_SLOW", 2, "no_offset", 120, 120, 0, 7200.0),  # not counted in the chart
    ("s2", "G_ALL", 0, "ok", 5, 5, 0, 12.0),
    ("s2", "G_ALL", 1, "above_max", 0, -3, 0, None),        # shown as 0, never -3
    ("s2", "G_ALL", 2, "ok", 4, 4, 0, 9.0),
    ("s2", "G_SLOW", 0, "ok", 130, 130, 0, 90000.0),
    ("s2", "G_SLOW", 1, "ok", 128, 128, 0, 88000.0),
    ("s2", "G_SLOW", 2, "below_min", 100, 112, 12, 86400.0),
]
# Expected chart values: lag summed over queues whose status is ok or below_min.
LAG_SERIES = {"G_ALL": [3, 9], "G_SLOW": [75, 358]}

# (snapshot, severity, check, scope, affected, expected, observed, explanation)
FINDINGS = [
    ("s1", "info", "dispatch_behind_commitlog", "broker", 1, "queues dispatched to the end",
     "2 records not yet dispatched", "The consume queues lag the commitlog tail (normal on "
     "a running broker)."),
    ("s2", "error", "cq_unit_matches_record", "topic=TopicBulk queue=2", 3,
     "unit size = record size", "3 units point at records of another size",
     "Consume queue units do not match their commitlog records."),
    ("s2", "warning", "consumer_offset_below_min", "group=G_SLOW topic=TopicBulk queue=2", 12,
     "offset >= 100", "offset 88", f"12 messages deleted before G_SLOW consumed them {HOSTILE}"),
]


def _append(spark, registry: Registry, table: str, rows: list[dict]) -> None:  # type: ignore[no-untyped-def]
    """Append rows built with the table's contract schema, as a job would."""
    schema = registry[table].contract.spark_schema()
    spark.createDataFrame([tuple(r.get(f.name) for f in schema) for r in rows], schema) \
        .write.format("delta").mode("append").save(registry[table].location)


def _lag_rows(taken: dict[str, object]) -> list[dict]:
    return [{"broker": BROKER, "snapshot_id": s, "group_name": g, "topic": "TopicBulk",
             "queue_id": q, "topic_kind": "normal", "status": status, "min_offset": 100,
             "max_offset": 100 + lag, "consumer_offset": 100 + lag - diff,
             "broker_diff": diff, "lag_messages": lag, "lost_messages": lost,
             "lag_bytes": lag * 2000, "lag_seconds": seconds, "snapshot_taken_at": taken[s]}
            for s, g, q, status, lag, diff, lost, seconds in LAG]


def _finding_rows(taken: dict[str, object]) -> list[dict]:
    return [{"broker": BROKER, "snapshot_id": s, "check_name": check, "scope": scope,
             "severity": severity, "topic": "TopicBulk" if "topic" in scope else None,
             "queue_id": 2 if "queue" in scope else None,
             "group_name": "G_SLOW" if "group" in scope else None, "affected": affected,
             "expected": expected, "observed": observed, "sample_offsets": [88],
             "explanation": explanation, "checked_at": taken[s]}
            for s, severity, check, scope, affected, expected, observed, explanation
            in FINDINGS]


@pytest.fixture(scope="module")
def reported(spark, broker_stores, tmp_path_factory):  # type: ignore[no-untyped-def]
    """(registry, {snapshot: page}, data docs index) after writing both reports."""
    root = tmp_path_factory.mktemp("report")
    # Bodies are not reported on: leaving them out keeps the load short.
    registry, _ = load(spark, root / "wh", BROKER, "s1", broker_stores["v5-clean"] / "store",
                       LoadOptions(body_policy="none"))
    s1 = registry.read(T.SNAPSHOTS).where(f"broker = '{BROKER}'").collect()[0].asDict()
    taken = {"s1": s1["taken_at"], "s2": s1["taken_at"] + timedelta(days=1)}
    _append(spark, registry, T.SNAPSHOTS,
            [s1 | {"snapshot_id": "s2", "snapshot_seq": 2, "taken_at": taken["s2"]}])
    _append(spark, registry, T.CONSUMER_LAG, _lag_rows(taken))
    _append(spark, registry, T.CHECK_RESULTS, _finding_rows(taken))
    docs = root / "data_docs" / "index.html"
    docs.parent.mkdir()
    docs.write_text("<html><title>Data Docs</title></html>")
    pages = {s: write_report(registry, BROKER, s, root / "reports", docs)
             for s in ("s1", "s2")}
    return registry, pages, docs


def _open(page, path: Path) -> None:  # type: ignore[no-untyped-def]
    page.goto(path.as_uri())
    page.wait_for_selector(".js-plotly-plot", state="attached")


def _traces(page, chart: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return page.evaluate(f"""document.getElementById('{chart}').data.map(t => ({{
        name: t.name, x: Array.from(t.x), y: Array.from(t.y)}}))""")


def _rows(page, table: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return page.evaluate(f"""Array.from(document.querySelectorAll('#{table} tbody tr'))
        .map(r => ({{cls: r.className,
                     cells: Array.from(r.cells).map(c => c.textContent.trim())}}))""")


def test_lag_chart_has_one_line_per_group_over_both_snapshots(reported, browser_page):  # type: ignore[no-untyped-def]
    _, pages, _ = reported
    _open(browser_page, pages["s2"])
    assert browser_page.locator("#chart-lag.js-plotly-plot").count() == 1
    traces = _traces(browser_page, "chart-lag")
    assert [t["name"] for t in traces] == GROUPS
    assert {t["name"]: t["y"] for t in traces} == LAG_SERIES
    xs = traces[0]["x"]
    assert len(xs) == 2 and xs[0] < xs[1]
    # The line is drawn: plotly put one SVG path per trace into the plot area.
    assert browser_page.locator("#chart-lag .scatterlayer .trace").count() == len(GROUPS)


def test_lag_table_shows_statuses_and_never_negative_lag(reported, browser_page):  # type: ignore[no-untyped-def]
    _, pages, _ = reported
    _open(browser_page, pages["s2"])
    rows = _rows(browser_page, "lag-table")
    assert len(rows) == 6
    by_queue = {(r["cells"][0], r["cells"][2]): r for r in rows}
    below = by_queue[("G_SLOW", "2")]
    assert below["cells"][4] == "below_min" and below["cells"][7] == "12"
    assert "not-ok" in below["cls"] and "status-below_min" in below["cls"]
    above = by_queue[("G_ALL", "1")]
    assert above["cells"][4] == "above_max" and above["cells"][5] == "0"
    assert "not-ok" in above["cls"]
    assert "not-ok" not in by_queue[("G_ALL", "0")]["cls"]
    assert not any(r["cells"][5].startswith("-") for r in rows)
    assert by_queue[("G_SLOW", "0")]["cells"][6] == "1 d 1 h"
    # The highlight is visible: a non-ok row has a background, an ok row none.
    colors = browser_page.evaluate("""Array.from(document.querySelectorAll(
        '#lag-table tbody tr')).map(r => getComputedStyle(r).backgroundColor)""")
    assert colors[1] != colors[0]  # G_ALL queue 1 (above_max) vs queue 0 (ok)
    groups = {r["cells"][0]: r["cells"] for r in _rows(browser_page, "lag-groups-table")}
    assert groups["G_SLOW"][1:4] == ["3", "1", "358"]


def test_volume_chart_has_one_series_per_topic_summing_to_the_messages(reported, browser_page):  # type: ignore[no-untyped-def]
    registry, pages, _ = reported
    counts = {r.topic: r["count"] for r in registry.read(T.MESSAGES)
              .where(f"broker = '{BROKER}' AND first_snapshot_id = 's1'")
              .groupBy("topic").count().collect()}
    _open(browser_page, pages["s1"])
    traces = _traces(browser_page, "chart-volume")
    assert [t["name"] for t in traces] == sorted(counts)
    assert {t["name"]: sum(t["y"]) for t in traces} == counts
    assert sum(counts.values()) > 2000
    assert all(len(x) == len("2026-11-23 10:00") for t in traces for x in t["x"])
    assert browser_page.locator("#chart-volume .barlayer .point").count() > 0
    # s1's page shows no later snapshot: one lag point per group.
    assert [len(t["x"]) for t in _traces(browser_page, "chart-lag")] == [1, 1]


def test_findings_by_severity_and_escaped(reported, browser_page):  # type: ignore[no-untyped-def]
    _, pages, _ = reported
    _open(browser_page, pages["s2"])
    traces = _traces(browser_page, "chart-findings")
    assert {t["name"]: t["y"] for t in traces} == {"error": [1], "warning": [1], "info": [0]}
    assert [t["name"] for t in traces] == list(SEVERITIES)
    rows = _rows(browser_page, "findings-table")
    assert [r["cells"][0] for r in rows] == ["error", "warning"]
    error = rows[0]["cells"]
    assert error[1:5] == ["cq_unit_matches_record", "topic=TopicBulk queue=2", "3",
                          "unit size = record size"]
    assert "severity-error" in rows[0]["cls"]
    assert rows[1]["cells"][6].endswith(HOSTILE)  # shown as text ...
    assert browser_page.evaluate("window.pwned") is None  # ... never run
    assert browser_page.locator("#findings-table b").count() == 0


def test_page_is_self_contained_and_links(reported, browser_page):  # type: ignore[no-untyped-def]
    _, pages, docs = reported
    page = pages["s2"]
    text = page.read_text(encoding="utf-8")
    assert text.count("* plotly.js v") == 1  # inlined once, for all five charts
    assert page.stat().st_size < 6 * 1024 * 1024
    _open(browser_page, page)
    assert browser_page.locator(".js-plotly-plot").count() == 5
    # these stores trace nothing: the latency chart says so instead of axes
    assert "no traced consumption" in browser_page.inner_text("#chart-latency")
    # no consumer_status rows in this warehouse: the timeline says so instead of axes
    assert "no consumer status judged" in browser_page.inner_text("#chart-status")
    assert browser_page.inner_text("#status p.empty").startswith("No consumer status")
    assert browser_page.locator("script[src], link[href]").count() == 0
    docs_href = browser_page.get_attribute("#link-data-docs", "href")
    assert not docs_href.startswith(("/", "file:"))
    assert (page.parent / docs_href).resolve() == docs.resolve()
    browser_page.click("#link-index")
    assert browser_page.url.endswith(f"/{BROKER}/{INDEX_PAGE}")


def test_index_lists_both_snapshots_newest_first(reported, browser_page):  # type: ignore[no-untyped-def]
    _, pages, _ = reported
    index = pages["s1"].parent / INDEX_PAGE
    browser_page.goto(index.as_uri())
    rows = _rows(browser_page, "snapshots-table")
    assert [r["cells"][0] for r in rows] == ["s2", "s1"]
    assert [r["cells"][4:7] for r in rows] == [["1", "1", "0"], ["0", "0", "1"]]
    assert "severity-error" in rows[0]["cls"]
    browser_page.click("#snapshots-table a:text-is('s1')")
    assert Path(browser_page.url.removeprefix("file://")) == pages["s1"]
    browser_page.wait_for_selector("#chart-volume.js-plotly-plot", state="attached")


def test_unknown_or_unsafe_snapshot_is_refused(spark, reported, tmp_path):  # type: ignore[no-untyped-def]
    registry, _, _ = reported
    for snapshot_id in ("s9", "../s1", "index"):
        with pytest.raises(ValueError, match="snapshot"):
            write_report(registry, BROKER, snapshot_id, tmp_path)
    assert not any(tmp_path.rglob("*.html"))
