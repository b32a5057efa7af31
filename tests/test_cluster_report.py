"""The nightly report's cluster page (jobs/report/cluster_page.py): brokers and roles, the
masters' messages, the cluster's consumer groups (cluster_lag), the slaves' replication
(replica_status and the replica findings), escaped, offline, and opened once in headless
Chromium.

The real 5.5.0 store (v5-clean) is loaded in process (no Spark) as two masters, broker-a
and broker-b, and as broker-a's slave, for two nights s1 and s2; the cluster stage's rows
(cluster_lag, replica_status, replica findings) are written here with the contracts'
schemas (jobs/check/cluster_lag.py and jobs/check/replica.py, which write them, are not
part of this test).
"""

from __future__ import annotations

import re
import shutil
from datetime import timedelta
from html.parser import HTMLParser
from pathlib import Path

import pytest

from jobs.lakehouse import tables as T
from jobs.lakehouse.spark_session import SparkOnDemand
from jobs.lakehouse.tables import Registry
from jobs.load.job import LoadOptions, load_snapshot
from jobs.report.cluster_page import ClusterBroker, broker_href, write_cluster_report
from jobs.report.pages import report_path

pytestmark = [pytest.mark.broker]

CLUSTER = "cluster-1"
MASTERS = ["broker-a", "broker-b"]
SLAVE = "broker-a-slave"
BROKERS = [ClusterBroker("broker-a", "master", None), ClusterBroker("broker-b", "master", None),
           ClusterBroker(SLAVE, "slave", "broker-a")]
HOSTILE = "<script>alert(1)</script>"
GROUPS = ["G_ALL", "G_SLOW", HOSTILE]
# (snapshot, group, status, diff_total, lag_messages, lag_seconds, consume_tps)
GROUP_ROWS = [
    ("s1", "G_ALL", "OK", 3, 3, 4.5, 12.5),
    ("s1", "G_SLOW", "OK", 75, 75, 3600.0, 0.25),
    ("s1", HOSTILE, "OK", 0, 0, None, None),
    ("s2", "G_ALL", "OK", 9, 9, 12.0, 11.0),
    ("s2", "G_SLOW", "STALL", 358, 358, 90000.0, 0.0),
    ("s2", HOSTILE, "WARN", 40, 40, 600.0, 1.5),
]
DIFF_SERIES = {"G_ALL": [3, 9], "G_SLOW": [75, 358], HOSTILE: [0, 40]}
DIVERGED_AT = 4_200_000
LAG_BYTES = 253_466
DIVERGED_TEXT = (f"The slave's commitlog is not a copy of its master's: the first differing "
                 f"byte is at offset {DIVERGED_AT:,} {HOSTILE}")


def _no_spark() -> object:
    raise AssertionError("the cluster page's warehouse is built without Spark")


def _load(registry: Registry, store: Path, broker: str, night: str, taken_at=None,  # type: ignore[no-untyped-def]
          replica: bool = False) -> None:
    options = LoadOptions(engine="local", body_policy="none", taken_at=taken_at,
                          replica=replica)
    load_snapshot(SparkOnDemand(_no_spark), broker, night, store, options,  # type: ignore[arg-type]
                  registry=registry)


def _lag_row(night: str, level: str, group: str, topic: str | None, status: str, diff: int,
             lag: int, seconds: float | None, tps: float | None, taken) -> dict:  # type: ignore[no-untyped-def]
    queues = [f"broker-b:TopicBulk:{q}" for q in range(10)] if status != "OK" else []
    return {"cluster": CLUSTER, "snapshot_id": night, "level": level, "group_name": group,
            "topic": topic, "brokers": MASTERS, "queues": 8, "broker_offset": 1000 + diff,
            "consumer_offset": 1000, "diff_total": diff, "lag_messages": lag,
            "lost_messages": 0, "lag_seconds": seconds,
            "last_consume_time": taken - timedelta(seconds=seconds or 0), "consume_tps": tps,
            "status": status, "reason": f"{group} is {status} on broker-b:TopicBulk:3",
            "status_queues": queues, "window_snapshots": 1 if night == "s1" else 2,
            "previous_status": None, "missing_brokers": [], "snapshot_taken_at": taken}


def _replica_row(night: str, taken, diverged: bool, end: int) -> dict:  # type: ignore[no-untyped-def]
    lag = LAG_BYTES if diverged else 0
    return {"broker": SLAVE, "snapshot_id": night, "cluster": CLUSTER, "master": "broker-a",
            "state": "diverged" if diverged else "in_sync", "master_write_offset": end,
            "replica_write_offset": end - lag, "lag_bytes": lag,
            "master_last_store_time": taken, "replica_last_store_time": taken,
            "lag_seconds": 42.0 if diverged else 0.0, "compared_from": 0, "compared_to": end,
            "diverged_at": DIVERGED_AT if diverged else None, "queues_compared": 30,
            "units_compared": 2857, "queues_diverged": 2 if diverged else 0,
            "config_differences": 1 if diverged else 0, "offsets_behind": 3 if diverged else 0,
            "offsets_ahead": 0, "checked_at": taken}


def _finding(broker: str, night: str, check: str, severity: str, observed: str,
             explanation: str, taken) -> dict:  # type: ignore[no-untyped-def]
    return {"broker": broker, "snapshot_id": night, "check_name": check, "scope": "broker",
            "severity": severity, "topic": None, "queue_id": None, "group_name": None,
            "affected": 1, "expected": "a copy", "observed": observed,
            "sample_offsets": [DIVERGED_AT], "explanation": explanation, "checked_at": taken}


@pytest.fixture(scope="module")
def cluster(broker_stores, tmp_path_factory):  # type: ignore[no-untyped-def]
    """(registry, {night: cluster page}, out_dir, {broker: commitlog max offset})."""
    root = tmp_path_factory.mktemp("cluster-report")
    store = broker_stores["v5-clean"] / "store"
    registry = Registry(None, root / "wh").ensure(names=False)
    for broker in MASTERS:
        _load(registry, store, broker, "s1")
    _load(registry, store, SLAVE, "s1", replica=True)
    s1 = registry.read_rows(T.SNAPSHOTS, broker="broker-a", snapshot_id="s1")[0]
    taken = {"s1": s1["taken_at"], "s2": s1["taken_at"] + timedelta(days=1)}
    end = s1["commitlog_max_offset"]
    for broker in MASTERS:
        _load(registry, store, broker, "s2", taken["s2"])
    _load(registry, store, SLAVE, "s2", taken["s2"], replica=True)

    for night in ("s1", "s2"):
        rows = []
        for n, group, status, diff, lag, seconds, tps in GROUP_ROWS:
            if n == night:
                rows.append(_lag_row(night, "group", group, None, status, diff, lag, seconds,
                                     tps, taken[night]))
                rows.append(_lag_row(night, "topic", group, "TopicBulk", status, diff, lag,
                                     seconds, tps, taken[night]))
        registry.replace_rows(T.CLUSTER_LAG, rows, cluster=CLUSTER, snapshot_id=night)
        registry.replace_rows(T.REPLICA_STATUS,
                              [_replica_row(night, taken[night], night == "s2", end)],
                              broker=SLAVE, snapshot_id=night)
    # Another cluster's group: never on this cluster's page.
    registry.replace_rows(T.CLUSTER_LAG, [
        _lag_row("s2", "group", "G_OTHER_CLUSTER", None, "LOST", 7, 7, 1.0, 1.0, taken["s2"])
        | {"cluster": "cluster-2"}], cluster="cluster-2", snapshot_id="s2")
    registry.append_rows(T.CHECK_RESULTS, [
        _finding(SLAVE, "s2", "replica_diverged", "error",
                 f"different from commitlog offset {DIVERGED_AT:,}", DIVERGED_TEXT, taken["s2"]),
        _finding(SLAVE, "s1", "replica_lagging", "warning", "behind last night",
                 "LAST NIGHT ONLY", taken["s1"]),
        _finding(SLAVE, "s2", "dispatch_behind_commitlog", "info", "not a replica check",
                 "NOT A REPLICA FINDING", taken["s2"]),
    ])
    out = root / "reports"
    pages = {night: write_cluster_report(registry, CLUSTER, BROKERS, night, out)
             for night in ("s1", "s2")}
    return registry, pages, out, end


class _Page(HTMLParser):
    """The tables (by id: rows of cell texts) and every src/href of a page."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.links: list[tuple[str, str]] = []
        self.scripts = 0
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.links += [(name, found[name] or "") for name in ("src", "href") if name in found]
        if tag == "script":
            self.scripts += 1
        if tag == "table":
            self._table = found.get("id")
            self.tables[self._table or ""] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag == "td" and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def rows(self, table: str) -> list[list[str]]:
        return [r for r in self.tables[table] if r]  # the header row has no td


def test_brokers_and_roles_with_their_snapshots_and_links(cluster):  # type: ignore[no-untyped-def]
    _, pages, out, end = cluster
    page = pages["s2"]
    assert page == report_path(out, f"cluster:{CLUSTER}", "s2")
    parsed = _Page(page.read_text(encoding="utf-8"))
    rows = {r[0]: r for r in parsed.rows("brokers-table")}
    assert list(rows) == [b.name for b in BROKERS]
    assert [rows[b.name][1] for b in BROKERS] == ["master", "master", "slave"]
    assert rows[SLAVE][2] == "broker-a" and rows["broker-a"][3] == SLAVE
    for b in BROKERS:
        assert rows[b.name][5] == "loaded"
        assert rows[b.name][6] == f"{end:,}"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", rows[b.name][4])
    # Each master's own page of the night, relative to the cluster page's directory; a
    # slave has none (its check is the replication section of this page).
    hrefs = [href for name, href in parsed.links if name == "href"]
    assert hrefs == [broker_href(b.name, "s2") if b.role == "master" else "#replication"
                     for b in BROKERS]
    for b, href in zip(BROKERS, hrefs, strict=True):
        if b.role == "master":
            assert (page.parent / href).resolve() == report_path(out, b.name, "s2").resolve()


def test_groups_with_status_and_diff_total_escaped(cluster):  # type: ignore[no-untyped-def]
    _, pages, _, _ = cluster
    text = pages["s2"].read_text(encoding="utf-8")
    parsed = _Page(text)
    groups = parsed.rows("cluster-groups-table")
    # Worst status first; cells shown as the operator reads them.
    assert [g[0] for g in groups] == ["G_SLOW", HOSTILE, "G_ALL"]
    by_group = {g[0]: g for g in groups}
    assert by_group["G_SLOW"][1:4] == ["STALL", "358", "358"]
    assert by_group["G_SLOW"][4] == "1 d 1 h"
    assert by_group["G_SLOW"][8].endswith("and 2 more")  # 10 queues, 8 listed
    assert by_group[HOSTILE][1:3] == ["WARN", "40"]
    assert by_group["G_ALL"][1:3] == ["OK", "9"] and by_group["G_ALL"][5] == "11.00"
    assert by_group["G_ALL"][7] == "broker-a, broker-b"
    assert "G_OTHER_CLUSTER" not in text
    topics = parsed.rows("cluster-topics-table")
    assert sorted((t[0], t[1], t[2], t[3]) for t in topics) == sorted(
        (g, "TopicBulk", s, f"{d:,}") for n, g, s, d, *_ in GROUP_ROWS if n == "s2")
    # The hostile group name is text everywhere: escaped in HTML, \u003c in chart JSON.
    assert HOSTILE not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert parsed.scripts == 1 + 3  # plotly.js once, one script per chart


def test_replication_state_lag_and_findings(cluster):  # type: ignore[no-untyped-def]
    _, pages, _, end = cluster
    s2 = _Page(pages["s2"].read_text(encoding="utf-8"))
    [row] = s2.rows("replica-table")
    assert row[:4] == [SLAVE, "diverged", "broker-a", f"{LAG_BYTES:,}"]
    assert row[4] == "42 s"
    assert row[5:8] == [f"{end:,}", f"{end - LAG_BYTES:,}", f"{DIVERGED_AT:,}"]
    assert row[8:] == ["2 of 30", "3", "1"]
    [finding] = s2.rows("replica-findings-table")
    assert finding[:3] == ["error", SLAVE, "replica_diverged"]
    assert finding[4] == f"different from commitlog offset {DIVERGED_AT:,}"
    assert finding[5] == DIVERGED_TEXT
    s1_text = pages["s1"].read_text(encoding="utf-8")
    s1 = _Page(s1_text)
    assert s1.rows("replica-table")[0][1:4] == ["in_sync", "broker-a", "0"]
    assert s1.rows("replica-table")[0][7] == "—"  # never diverged
    assert "LAST NIGHT ONLY" in s1_text and "NOT A REPLICA FINDING" not in s1_text


def test_page_is_offline(cluster):  # type: ignore[no-untyped-def]
    _, pages, _, _ = cluster
    for page in pages.values():
        text = page.read_text(encoding="utf-8")
        assert text.count("* plotly.js v") == 1
        parsed = _Page(text)
        assert [name for name, _ in parsed.links] == ["href"] * len(BROKERS)
        assert all(href.startswith(("../", "#")) for _, href in parsed.links)
        # Past the inlined plotly.js (whose source names URLs it never loads): no URL.
        after_plotly = text[text.index("</script>"):]
        assert not re.search(r"https?://|//cdn|file:", after_plotly)


def test_charts_in_chromium(cluster, browser_page):  # type: ignore[no-untyped-def]
    registry, pages, _, _ = cluster
    errors: list[str] = []
    dialogs: list[str] = []
    browser_page.on("pageerror", lambda error: errors.append(str(error)))
    browser_page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    browser_page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    browser_page.on("request", lambda r: errors.append(r.url)
                    if not r.url.startswith(("file:", "data:", "blob:")) else None)

    def traces(chart: str) -> list[dict]:
        return browser_page.evaluate(f"""document.getElementById('{chart}').data.map(t => ({{
            name: t.name, x: Array.from(t.x), y: Array.from(t.y)}}))""")

    browser_page.goto(pages["s2"].as_uri())
    browser_page.wait_for_selector("#chart-replica-lag.js-plotly-plot", state="attached")
    assert browser_page.locator(".js-plotly-plot").count() == 3
    diff = traces("chart-cluster-diff")
    assert sorted(t["name"] for t in diff) == sorted(GROUPS)
    assert {t["name"]: t["y"] for t in diff} == DIFF_SERIES
    assert all(len(t["x"]) == 2 and t["x"][0] < t["x"][1] for t in diff)
    replica = {t["name"]: t["y"] for t in traces("chart-replica-lag")}
    assert replica == {f"{SLAVE} lag bytes": [0, LAG_BYTES], f"{SLAVE} lag seconds": [0, 42]}
    # Nothing new on s2: the volume chart says so instead of drawing axes.
    assert "no messages new" in browser_page.inner_text("#chart-cluster-volume")
    # The topic rows are collapsed until asked for.
    assert not browser_page.is_visible("#cluster-topics-table")
    browser_page.click("#cluster-topics summary")
    assert browser_page.is_visible("#cluster-topics-table")
    assert browser_page.inner_text("#cluster-groups-table tbody tr:nth-child(2) td").strip() \
        == HOSTILE

    browser_page.goto(pages["s1"].as_uri())
    browser_page.wait_for_selector("#chart-cluster-volume.js-plotly-plot", state="attached")
    volume = traces("chart-cluster-volume")
    assert [t["name"] for t in volume] == MASTERS  # masters only: no slave
    for trace in volume:
        new = registry.read_arrow(T.MESSAGES, broker=trace["name"], first_snapshot_id="s1")
        assert sum(trace["y"]) == new.num_rows > 2000
        assert all(len(x) == len("2026-11-23 10:00") for x in trace["x"])
    # s1's page does not show s2, loaded later.
    assert all(len(t["x"]) == 1 for t in traces("chart-cluster-diff"))
    assert errors == [] and dialogs == []


def test_missing_tables_give_none_sections(broker_stores, tmp_path):  # type: ignore[no-untyped-def]
    """An older warehouse: no cluster_lag, replica_status or check_results yet."""
    registry = Registry(None, tmp_path / "wh").ensure(names=False)
    _load(registry, broker_stores["v5-clean"] / "store", "broker-a", "s1")
    for name in (T.CLUSTER_LAG, T.REPLICA_STATUS, T.CHECK_RESULTS):
        shutil.rmtree(registry[name].location)
    brokers = [ClusterBroker("broker-a", "master"), ClusterBroker(SLAVE, "slave", "broker-a")]
    page = write_cluster_report(registry, CLUSTER, brokers, "s1", tmp_path / "out")
    parsed = _Page(page.read_text(encoding="utf-8"))
    rows = parsed.rows("brokers-table")
    assert [r[5] for r in rows] == ["loaded", "not loaded"]
    assert "cluster-groups-table" not in parsed.tables
    assert "replica-table" not in parsed.tables
    text = page.read_text(encoding="utf-8")
    assert "No cluster consumer progress recorded (none)." in text
    assert "No replication status recorded (none)." in text
    assert "No check results recorded (none)." in text
    # Without slaves the replication section says so.
    alone = write_cluster_report(registry, "solo", brokers[:1], "s1", tmp_path / "out")
    assert "This cluster has no slaves (none)." in alone.read_text(encoding="utf-8")


def test_unknown_or_unsafe_input_is_refused(cluster, tmp_path):  # type: ignore[no-untyped-def]
    registry = cluster[0]
    with pytest.raises(ValueError, match="snapshot 's9' is loaded by no broker"):
        write_cluster_report(registry, CLUSTER, BROKERS, "s9", tmp_path)
    for name in ("../x", "a/b", ""):
        with pytest.raises(ValueError, match="cluster"):
            write_cluster_report(registry, name, BROKERS, "s1", tmp_path)
    with pytest.raises(ValueError, match="snapshot id"):
        write_cluster_report(registry, CLUSTER, BROKERS, "../s1", tmp_path)
    with pytest.raises(ValueError, match="role"):
        write_cluster_report(registry, CLUSTER, [ClusterBroker("b", "leader")], "s1", tmp_path)
    assert not any(tmp_path.rglob("*.html"))
