"""The nightly report: one static HTML page per snapshot and an index over a broker's pages.

An operator opens ``<out_dir>/<broker>/<snapshot_id>.html`` instead of querying tables:
the findings of the checks by severity, each consumer group's status over the snapshots
(a timeline coloured by status) with its lag and catch-up estimate now, consumer lag per
group over the snapshots and per queue now, the messages per topic per hour that
arrived with the snapshot, and traced consume latency per group with the snapshot's
transactions (jobs.report.traces_section). The page
is self-contained (plotly.js inlined once, no other file, no network) because neither
the machine that writes it nor the operator's browser may reach the internet.

Spark aggregates on the Delta tables; only the small results reach the driver (never a
message row). Everything taken from the data is HTML-escaped: topic and group names are
user input. Chart trace names go to plotly.js as JSON, which plotly escapes for a
``<script>`` block and renders as text.
"""

from __future__ import annotations

import html
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from jobs.alerts.evaluation import catch_up_text
from jobs.check.consumer_status import STATUSES as CONSUMER_STATUSES
from jobs.check.engines import DuckDbEngine
from jobs.lakehouse.delta_io import sql_string
from jobs.lakehouse.tables import (
    CHECK_RESULTS,
    CONSUMER_LAG,
    CONSUMER_STATUS,
    MESSAGES,
    SNAPSHOTS,
    Registry,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from jobs.report.traces_section import TracesData

INDEX_PAGE = "index.html"
# Statuses whose lag_messages count what the group still has to consume.
LAG_STATUSES = ("ok", "below_min")
STATUSES = ("ok", "no_offset", "below_min", "above_max", "no_queue")
SEVERITIES = ("error", "warning", "info")
SEVERITY_COLORS = {"error": "#c62828", "warning": "#ef8f00", "info": "#1565c0"}
# Consumer statuses, best to worst: green, amber, purple, orange, red, dark red.
STATUS_COLORS = {"OK": "#2e7d32", "WARN": "#f9a825", "REWIND": "#6a1b9a", "STALL": "#ef6c00",
                 "STOP": "#c62828", "LOST": "#4a0000"}
# Longest table a page shows; the rest is counted, not listed (the tables hold it all).
MAX_TABLE_ROWS = 2000
CHART_SNAPSHOTS = 90  # the history charts' window: a quarter of nightly snapshots
CHART_HEIGHT = 420
TIME_FORMAT = "yyyy-MM-dd HH:mm:ss"
HOUR_FORMAT = "yyyy-MM-dd HH:00"


class Html(str):
    """Markup built by this module: inserted as is, where any other value is escaped."""


# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class SnapshotInfo:
    """One row of ``snapshots``, times as UTC text."""

    snapshot_id: str
    seq: int
    taken_at: str | None
    status: str


@dataclass(frozen=True)
class LagPoint:
    """Lag of one group at one snapshot: messages still to consume (None: unknown)."""

    group: str
    snapshot_id: str
    taken_at: str
    lag: int | None


@dataclass(frozen=True)
class GroupLag:
    """One group at the current snapshot, summed over its queues."""

    group: str
    queues: int
    not_ok: int
    lag: int | None
    max_lag_seconds: float | None
    lost: int


@dataclass(frozen=True)
class StatusPoint:
    """A group's status at one snapshot (``consumer_status``, level group)."""

    group: str
    snapshot_id: str
    taken_at: str
    status: str
    lag: int
    queues: list[str]


@dataclass(frozen=True)
class GroupStatus:
    """A group's status at the current snapshot, with lag and catch-up estimate."""

    group: str
    status: str
    since_snapshot_id: str
    lag: int
    lost: int
    catch_up: str
    queues: list[str]
    reason: str


@dataclass(frozen=True)
class QueueLag:
    """One (group, topic, queue) row of ``consumer_lag`` at the current snapshot."""

    group: str
    topic: str
    queue_id: int
    topic_kind: str
    status: str
    lag: int | None
    lag_seconds: float | None
    lost: int | None


@dataclass(frozen=True)
class Finding:
    """One ``check_results`` row as the page shows it."""

    severity: str
    check: str
    scope: str
    affected: int
    expected: str | None
    observed: str | None
    explanation: str


@dataclass(frozen=True)
class ReportData:
    """Everything one page shows, already aggregated."""

    broker: str
    snapshot: SnapshotInfo
    lag_history: list[LagPoint]
    status_history: list[StatusPoint]
    statuses: list[GroupStatus]
    groups: list[GroupLag]
    queues: list[QueueLag]
    queues_truncated: bool
    volume: dict[str, dict[str, int]]  # {topic: {hour: messages}}
    severity_counts: dict[str, int]
    findings: list[Finding]
    findings_truncated: bool
    traces: TracesData


# ------------------------------------------------------------------------- public API


def write_report(registry: Registry, broker: str, snapshot_id: str, out_dir: Path,
                 data_docs_index: Path | None = None) -> Path:
    """Write ``<out_dir>/<broker>/<snapshot_id>.html``, rewrite the broker's index page
    and return the page's path. The snapshot must be in ``snapshots``."""
    _check_path_part(broker, "broker")
    _check_path_part(snapshot_id, "snapshot id")
    if snapshot_id + ".html" == INDEX_PAGE:
        raise ValueError(f"snapshot id {snapshot_id!r} would overwrite the index page")
    tables = _tables(registry)
    try:
        snapshots = read_snapshots(tables, broker)
        current = next((s for s in snapshots if s.snapshot_id == snapshot_id), None)
        if current is None:
            raise ValueError(f"snapshot {snapshot_id!r} of broker {broker!r} is not loaded")
        data = collect_report_data(tables, broker, current, chart_window(snapshots, current))
        page = report_path(out_dir, broker, snapshot_id)
        docs_href = _relative_href(data_docs_index, page.parent) if data_docs_index else None
        _write_atomically(page, render_page(data, docs_href))
        _write_index(tables, broker, out_dir, snapshots)
    finally:
        tables.close()
    return page


def report_path(out_dir: Path, broker: str, snapshot_id: str) -> Path:
    """Where the snapshot's page is (or will be) written."""
    return Path(out_dir) / broker / f"{snapshot_id}.html"


def _write_index(tables: DuckDbEngine, broker: str, out_dir: Path,
                 snapshots: list[SnapshotInfo]) -> Path:
    """(Re)write ``<out_dir>/<broker>/index.html`` over every page written so far,
    newest snapshot first, with each snapshot's current error and warning counts."""
    page_dir = Path(out_dir) / broker
    reported = {p.stem for p in page_dir.glob("*.html")
                if p.name != INDEX_PAGE and not p.name.startswith(".")}
    counts = _severity_counts_per_snapshot(tables, broker)
    index = page_dir / INDEX_PAGE
    _write_atomically(index, render_index(broker, snapshots, reported, counts))
    return index


# ------------------------------------------------------------------------------- data
# The page's aggregations, in Spark SQL run in this process (jobs.check.engines'
# DuckDbEngine: DuckDB over delta-rs): each returns at most a few thousand rows, and a
# report must not need a JVM.


def _tables(registry: Registry) -> DuckDbEngine:
    tables = DuckDbEngine(registry.warehouse)
    for name in (SNAPSHOTS, CONSUMER_LAG, CONSUMER_STATUS, CHECK_RESULTS, MESSAGES):
        tables.register(name, name)
    return tables


def _rows(tables: DuckDbEngine, sql: str) -> list[dict]:
    return tables.arrow(sql).to_pylist()


def _utc_text(column: str, fmt: str = TIME_FORMAT) -> str:
    """A timestamp as UTC wall-clock text (the engine's session zone is UTC)."""
    return f"date_format({column}, '{fmt}')"


def read_snapshots(tables: DuckDbEngine, broker: str) -> list[SnapshotInfo]:
    """The broker's snapshots in load order (a few rows)."""
    rows = _rows(tables, f"""
        SELECT snapshot_id, snapshot_seq, status, {_utc_text('taken_at')} AS taken_at
        FROM {SNAPSHOTS} WHERE broker = {sql_string(broker)} ORDER BY snapshot_seq""")
    return [SnapshotInfo(r["snapshot_id"], r["snapshot_seq"], r["taken_at"], r["status"])
            for r in rows]


def collect_report_data(tables: DuckDbEngine, broker: str, snapshot: SnapshotInfo,
                        window: list[str]) -> ReportData:
    """Run the page's aggregations; each returns at most a few thousand rows; the history
    charts show the snapshots of ``window`` (:func:`chart_window`)."""
    from jobs.report.traces_section import collect_traces  # it builds on this module

    this = f"broker = {sql_string(broker)} AND snapshot_id = {sql_string(snapshot.snapshot_id)}"
    queues, queues_truncated = _queue_lag(tables, this)
    finding_rows, findings_truncated = _findings(tables, this)
    return ReportData(
        broker=broker, snapshot=snapshot,
        lag_history=_lag_history(tables, broker, window),
        status_history=_status_history(tables, broker, window),
        statuses=_group_statuses(tables, this),
        groups=_group_lag(tables, this), queues=queues, queues_truncated=queues_truncated,
        volume=_volume(tables, broker, snapshot.snapshot_id),
        severity_counts=_severity_counts(tables, this),
        findings=finding_rows, findings_truncated=findings_truncated,
        traces=collect_traces(tables, broker, snapshot.snapshot_id, window))


def _non_negative(column: str) -> str:
    """A count column floored at zero; null stays null (greatest() alone would make it 0)."""
    return f"CASE WHEN {column} IS NOT NULL THEN greatest({column}, 0) END"


# lag_messages where it means messages to consume, never below zero.
COUNTED_LAG = (f"CASE WHEN status IN ({', '.join(map(sql_string, LAG_STATUSES))}) "
               f"THEN {_non_negative('lag_messages')} END")


def chart_window(snapshots: list[SnapshotInfo], current: SnapshotInfo) -> list[str]:
    """The ids of the snapshots the history charts show: the newest ``CHART_SNAPSHOTS`` up
    to this one (a later re-run of an old page does not show the future) that have a
    taken_at (the others cannot be placed on a time axis). A window, so that a page
    reads and draws the same rows at night 1,000 as at night 100."""
    placed = [s.snapshot_id for s in snapshots if s.seq <= current.seq and s.taken_at]
    return placed[-CHART_SNAPSHOTS:]


def _placed_snapshots(broker: str, window: list[str]) -> str:
    """The window's snapshots with their time as the chart's x."""
    return f"""
        SELECT snapshot_id, snapshot_seq, {_utc_text('taken_at')} AS x FROM {SNAPSHOTS}
        WHERE broker = {sql_string(broker)} AND snapshot_id IN ({_ids(window)})"""


def _ids(window: list[str]) -> str:
    return ", ".join(sql_string(s) for s in window) or "NULL"


def _lag_history(tables: DuckDbEngine, broker: str, window: list[str]) -> list[LagPoint]:
    """Lag per group per snapshot of the window."""
    rows = _rows(tables, f"""
        SELECT l.group_name, s.snapshot_id, s.snapshot_seq, s.x, sum({COUNTED_LAG}) AS lag
        FROM {CONSUMER_LAG} l JOIN ({_placed_snapshots(broker, window)}) s
          ON s.snapshot_id = l.snapshot_id
        WHERE l.broker = {sql_string(broker)} AND l.snapshot_id IN ({_ids(window)})
        GROUP BY l.group_name, s.snapshot_id, s.snapshot_seq, s.x
        ORDER BY l.group_name, s.snapshot_seq""")
    return [LagPoint(r["group_name"], r["snapshot_id"], r["x"], r["lag"]) for r in rows]


def _status_history(tables: DuckDbEngine, broker: str,
                    window: list[str]) -> list[StatusPoint]:
    """Each group's status at each snapshot of the window (group rows: a few per night)."""
    rows = _rows(tables, f"""
        SELECT c.group_name, s.snapshot_id, s.x, c.status, c.lag_messages, c.queues
        FROM {CONSUMER_STATUS} c JOIN ({_placed_snapshots(broker, window)}) s
          ON s.snapshot_id = c.snapshot_id
        WHERE c.broker = {sql_string(broker)} AND c.level = 'group'
          AND c.snapshot_id IN ({_ids(window)})
        ORDER BY c.group_name, s.snapshot_seq""")
    return [StatusPoint(r["group_name"], r["snapshot_id"], r["x"], r["status"],
                        r["lag_messages"], list(r["queues"] or [])) for r in rows]


def _group_statuses(tables: DuckDbEngine, this: str) -> list[GroupStatus]:
    """The groups' statuses at this snapshot, worst first."""
    rows = _rows(tables, f"SELECT * FROM {CONSUMER_STATUS} WHERE {this} AND level = 'group'")
    rank = {status: i for i, status in enumerate(CONSUMER_STATUSES)}
    rows.sort(key=lambda r: (-rank.get(str(r["status"]), 0), str(r["group_name"])))
    return [GroupStatus(str(r["group_name"]), str(r["status"]), str(r["status_since_snapshot_id"]),
                        int(r["lag_messages"]), int(r["lost_messages"]), catch_up_text(r),
                        list(r["queues"] or []), str(r["reason"])) for r in rows]


def _group_lag(tables: DuckDbEngine, this: str) -> list[GroupLag]:
    """Per group at this snapshot: queues, queues not ok, lag, oldest lag, lost."""
    rows = _rows(tables, f"""
        SELECT group_name, count(*) AS queues,
               sum(CASE WHEN status <> 'ok' THEN 1 ELSE 0 END) AS not_ok,
               sum({COUNTED_LAG}) AS lag, max(lag_seconds) AS max_lag_seconds,
               coalesce(sum({_non_negative('lost_messages')}), 0) AS lost
        FROM {CONSUMER_LAG} WHERE {this} GROUP BY group_name ORDER BY group_name""")
    return [GroupLag(r["group_name"], r["queues"], r["not_ok"], r["lag"], r["max_lag_seconds"],
                     r["lost"]) for r in rows]


def _queue_lag(tables: DuckDbEngine, this: str) -> tuple[list[QueueLag], bool]:
    """The per-queue rows of this snapshot, capped at MAX_TABLE_ROWS."""
    rows = _rows(tables, f"""
        SELECT group_name, topic, queue_id, topic_kind, status,
               {_non_negative('lag_messages')} AS lag, lag_seconds,
               {_non_negative('lost_messages')} AS lost_messages
        FROM {CONSUMER_LAG} WHERE {this}
        ORDER BY group_name, topic, queue_id LIMIT {MAX_TABLE_ROWS + 1}""")
    queues = [QueueLag(r["group_name"], r["topic"], r["queue_id"], r["topic_kind"], r["status"],
                       r["lag"], r["lag_seconds"], r["lost_messages"])
              for r in rows[:MAX_TABLE_ROWS]]
    return queues, len(rows) > MAX_TABLE_ROWS


def _volume(tables: DuckDbEngine, broker: str, snapshot_id: str) -> dict[str, dict[str, int]]:
    """Messages per topic per store hour among the records this snapshot brought."""
    hour = _utc_text("date_trunc('HOUR', store_time)", HOUR_FORMAT)
    rows = _rows(tables, f"""
        SELECT topic, {hour} AS hour, count(*) AS count FROM {MESSAGES}
        WHERE broker = {sql_string(broker)} AND first_snapshot_id = {sql_string(snapshot_id)}
        GROUP BY topic, {hour}""")
    volume: dict[str, dict[str, int]] = {}
    for r in rows:
        volume.setdefault(r["topic"], {})[r["hour"]] = r["count"]
    return volume


def _severity_counts(tables: DuckDbEngine, this: str) -> dict[str, int]:
    counts = {r["severity"]: r["count"] for r in _rows(tables, f"""
        SELECT severity, count(*) AS count FROM {CHECK_RESULTS} WHERE {this}
        GROUP BY severity""")}
    return {s: counts.get(s, 0) for s in SEVERITIES} | counts


def _findings(tables: DuckDbEngine, this: str) -> tuple[list[Finding], bool]:
    """The snapshot's findings, most severe first, capped at MAX_TABLE_ROWS."""
    rank = " ".join(f"WHEN {sql_string(s)} THEN {i}" for i, s in enumerate(SEVERITIES))
    rows = _rows(tables, f"""
        SELECT severity, check_name, scope, affected, expected, observed, explanation
        FROM {CHECK_RESULTS} WHERE {this}
        ORDER BY CASE severity {rank} ELSE {len(SEVERITIES)} END, check_name, scope
        LIMIT {MAX_TABLE_ROWS + 1}""")
    found = [Finding(r["severity"], r["check_name"], r["scope"], r["affected"], r["expected"],
                     r["observed"], r["explanation"]) for r in rows[:MAX_TABLE_ROWS]]
    return found, len(rows) > MAX_TABLE_ROWS


def _severity_counts_per_snapshot(tables: DuckDbEngine,
                                  broker: str) -> dict[str, dict[str, int]]:
    """{snapshot_id: {severity: findings}} over the broker's check results."""
    counts: dict[str, dict[str, int]] = {}
    for r in _rows(tables, f"""
            SELECT snapshot_id, severity, count(*) AS count FROM {CHECK_RESULTS}
            WHERE broker = {sql_string(broker)} GROUP BY snapshot_id, severity"""):
        counts.setdefault(r["snapshot_id"], {})[r["severity"]] = r["count"]
    return counts


# ----------------------------------------------------------------------------- charts


def _plotly_js() -> Html:
    """plotly.js itself, once per page: the page must work without any network."""
    from plotly.offline import get_plotlyjs

    return Html(f'<script type="text/javascript">{get_plotlyjs()}</script>')


def _chart(figure: go.Figure, div_id: str, empty: str, height: int = CHART_HEIGHT) -> Html:
    """A figure's div and script (plotly.js comes from the page head); a figure without
    traces says ``empty`` instead of drawing meaningless axes."""
    import plotly.io as pio

    if not figure.data:
        figure.update_layout(xaxis_visible=False, yaxis_visible=False, annotations=[
            {"text": empty, "showarrow": False, "font": {"size": 16}}])
    figure.update_layout(height=height, template="plotly_white",
                         margin={"l": 60, "r": 20, "t": 40, "b": 50})
    return Html(pio.to_html(figure, include_plotlyjs=False, full_html=False, div_id=div_id,
                            default_height=f"{height}px",
                            config={"displaylogo": False, "responsive": True}))


def lag_chart(history: list[LagPoint]) -> Html:
    """One line per group: messages still to consume at each snapshot."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for group in sorted({p.group for p in history}):
        points = [p for p in history if p.group == group]
        figure.add_trace(go.Scatter(
            name=group, mode="lines+markers", x=[p.taken_at for p in points],
            y=[p.lag for p in points], customdata=[p.snapshot_id for p in points],
            hovertemplate="snapshot %{customdata}<br>%{x}<br>lag %{y:,} messages"))
    figure.update_layout(title="Consumer lag per group (messages; queues ok or below_min)",
                         xaxis_title="snapshot taken at (UTC)", yaxis_title="messages",
                         yaxis_rangemode="tozero", legend_title="group")
    if len({p.taken_at for p in history}) == 1:
        # A date axis around one instant zooms to milliseconds: label the one point.
        figure.update_xaxes(type="category")
    return _chart(figure, "chart-lag", "no consumer lag computed for these snapshots")


def status_chart(history: list[StatusPoint]) -> Html:
    """A timeline: one row per group, one square per snapshot, coloured by the status (one
    trace per status, so the legend is the colour key)."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for status in CONSUMER_STATUSES:
        points = [p for p in history if p.status == status]
        if not points:
            continue
        figure.add_trace(go.Scatter(
            name=status, mode="markers", x=[p.taken_at for p in points],
            y=[p.group for p in points],
            marker={"color": STATUS_COLORS[status], "symbol": "square", "size": 18},
            customdata=[[p.snapshot_id, p.lag, ", ".join(p.queues[:8])] for p in points],
            hovertemplate=("%{y}: " + status + "<br>snapshot %{customdata[0]}<br>%{x}"
                           "<br>lag %{customdata[1]:,} messages<br>%{customdata[2]}"
                           "<extra></extra>")))
    groups = sorted({p.group for p in history}, reverse=True)
    figure.update_layout(title="Consumer status per group over the snapshots",
                         xaxis_title="snapshot taken at (UTC)", legend_title="status")
    figure.update_yaxes(type="category", categoryorder="array", categoryarray=groups)
    if len({p.taken_at for p in history}) == 1:
        figure.update_xaxes(type="category")
    return _chart(figure, "chart-status", "no consumer status judged for these snapshots",
                  height=max(240, 60 + 36 * len(groups)))


def volume_chart(volume: dict[str, dict[str, int]]) -> Html:
    """Stacked bars: messages per store hour, one colour per topic."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for topic in sorted(volume):
        hours = sorted(volume[topic])
        figure.add_trace(go.Bar(name=topic, x=hours, y=[volume[topic][h] for h in hours],
                                hovertemplate="%{x}<br>%{y:,} messages"))
    figure.update_layout(barmode="stack", title="Messages per topic per hour (new in this "
                         "snapshot)", xaxis_title="store hour (UTC)",
                         yaxis_title="messages", legend_title="topic")
    return _chart(figure, "chart-volume", "no messages new in this snapshot")


def findings_chart(counts: dict[str, int]) -> Html:
    """One bar per severity, in the severity's colour."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for severity, count in counts.items():
        figure.add_trace(go.Bar(name=severity, x=[severity], y=[count],
                                marker_color=SEVERITY_COLORS.get(severity, "#757575")))
    figure.update_layout(title="Findings by severity", yaxis_title="findings",
                         showlegend=False)
    return _chart(figure, "chart-findings", "", height=280)


# ------------------------------------------------------------------------------- HTML


def _esc(value: object) -> str:
    """A cell's text: escaped unless built here; numbers grouped; None as a dash."""
    if isinstance(value, Html):
        return str(value)
    if value is None:
        return "&mdash;"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return html.escape(str(value))


def _duration(seconds: float | None) -> Html | None:
    """Lag seconds as an operator reads them (3 h 25 min), exact seconds on hover."""
    if seconds is None:
        return None
    whole = max(int(seconds), 0)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(n, unit) for n, unit in
             [(days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")] if n]
    text = " ".join(f"{n} {unit}" for n, unit in parts[:2]) or "0 s"
    return Html(f'<span title="{seconds:,.1f} s">{html.escape(text)}</span>')


def _table(headers: Sequence[str], rows: Iterable[tuple[Sequence[object], str]],
           table_id: str) -> Html:
    """A plain table; each row is (cells, CSS class)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "\n".join(
        f'<tr class="{css}">' + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>"
        for cells, css in rows)
    return Html(f'<table id="{table_id}"><thead><tr>{head}</tr></thead>'
                f"<tbody>\n{body}\n</tbody></table>")


def _status_class(status: str) -> str:
    """CSS class of a lag status; only known names reach the class attribute."""
    return f"status-{status}" if status in STATUSES else "status-other"


def _severity_class(severity: str) -> str:
    return f"severity-{severity}" if severity in SEVERITIES else "severity-other"


def _status_badge(status: str) -> Html:
    return Html(f'<span class="badge {_status_class(status)}">{html.escape(status)}</span>')


def _severity_badge(severity: str) -> Html:
    return Html(f'<span class="badge {_severity_class(severity)}">'
                f"{html.escape(severity)}</span>")


def _findings_section(data: ReportData) -> Html:
    counts = " ".join(f'<span class="count {_severity_class(s)}">{_esc(s)}: {_esc(n)}</span>'
                      for s, n in data.severity_counts.items())
    rows = [([_severity_badge(f.severity), f.check, f.scope, f.affected, f.expected,
              f.observed, f.explanation], _severity_class(f.severity)) for f in data.findings]
    table = (_table(["severity", "check", "scope", "affected", "expected", "observed",
                     "explanation"], rows, "findings-table")
             if rows else Html('<p class="empty">No findings for this snapshot.</p>'))
    more = _truncation_note(data.findings_truncated, "findings")
    return Html(f'<section id="findings"><h2>Findings</h2><p class="counts">{counts}</p>'
                f"{findings_chart(data.severity_counts)}{table}{more}</section>")


def _lag_section(data: ReportData) -> Html:
    groups = _table(
        ["group", "queues", "queues not ok", "lag messages", "max lag time", "lost messages"],
        [([g.group, g.queues, g.not_ok, g.lag, _duration(g.max_lag_seconds), g.lost],
          "not-ok" if g.not_ok else "ok") for g in data.groups], "lag-groups-table")
    queues = _table(
        ["group", "topic", "queue", "kind", "status", "lag messages", "lag time",
         "lost messages"],
        [([q.group, q.topic, q.queue_id, q.topic_kind, _status_badge(q.status), q.lag,
           _duration(q.lag_seconds), q.lost],
          f"{_status_class(q.status)}{'' if q.status == 'ok' else ' not-ok'}")
         for q in data.queues], "lag-table")
    if not data.queues:
        groups = queues = Html('<p class="empty">No consumer lag computed for this '
                               "snapshot.</p>")
    more = _truncation_note(data.queues_truncated, "queues")
    return Html(f'<section id="lag"><h2>Consumer lag</h2>{lag_chart(data.lag_history)}'
                f"<h3>Per group at this snapshot</h3>{groups}"
                f"<h3>Per group and queue at this snapshot</h3>{queues}{more}</section>")


def _status_section(data: ReportData) -> Html:
    rows = [([g.group, Html(f'<span class="badge consumer-{html.escape(g.status)}">'
                            f"{html.escape(g.status)}</span>"
                            if g.status in STATUS_COLORS else g.status),
              g.since_snapshot_id, g.lag, g.lost, g.catch_up, ", ".join(g.queues[:8]), g.reason],
             f"consumer-{g.status}" if g.status in STATUS_COLORS else "consumer-other")
            for g in data.statuses]
    table = (_table(["group", "status", "since snapshot", "lag messages", "lost messages",
                     "catch-up", "queues", "why"], rows, "status-table")
             if rows else Html('<p class="empty">No consumer status judged for this '
                               "snapshot.</p>"))
    return Html(f'<section id="status"><h2>Consumer status</h2>'
                f"{status_chart(data.status_history)}"
                f"<h3>Per group at this snapshot</h3>{table}</section>")


def _volume_section(data: ReportData) -> Html:
    total = sum(sum(hours.values()) for hours in data.volume.values())
    return Html(f'<section id="volume"><h2>Messages</h2>'
                f'<p>{_esc(total)} messages new in this snapshot, '
                f"{_esc(len(data.volume))} topics.</p>{volume_chart(data.volume)}</section>")


def _truncation_note(truncated: bool, what: str) -> Html:
    if not truncated:
        return Html("")
    return Html(f'<p class="truncated">Only the first {MAX_TABLE_ROWS:,} {what} are '
                "listed; query the table for the rest.</p>")


def render_page(data: ReportData, data_docs_href: str | None = None) -> str:
    """The whole snapshot page as one HTML document."""
    from jobs.report.traces_section import traces_section  # it builds on this module

    snap = data.snapshot
    links = [f'<a id="link-index" href="{INDEX_PAGE}">all snapshots</a>']
    if data_docs_href:
        links.append(f'<a id="link-data-docs" href="{html.escape(data_docs_href)}">'
                     "Data Docs</a>")
    title = f"{data.broker} · snapshot {snap.snapshot_id}"
    meta = (f"taken at {_esc(snap.taken_at)} UTC · load #{_esc(snap.seq)} "
            f"({_esc(snap.status)}) · report written "
            f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC")
    body = (f'<header><h1>{html.escape(title)}</h1><p class="meta">{meta}</p>'
            f'<nav>{" · ".join(links)}</nav></header>'
            f"{_findings_section(data)}{_status_section(data)}{_lag_section(data)}"
            f"{_volume_section(data)}{traces_section(data.traces)}")
    return _document(title, body, with_plotly=True)


def render_index(broker: str, snapshots: list[SnapshotInfo], reported: set[str],
                 counts: dict[str, dict[str, int]]) -> str:
    """The index page: every reported snapshot, newest first, with its findings."""
    known = [s for s in reversed(snapshots) if s.snapshot_id in reported]
    orphans = sorted(reported - {s.snapshot_id for s in snapshots}, reverse=True)
    rows = []
    for snapshot_id, info in [(s.snapshot_id, s) for s in known] + [(o, None) for o in orphans]:
        found = counts.get(snapshot_id, {})
        errors, warnings = found.get("error", 0), found.get("warning", 0)
        link = Html(f'<a href="{html.escape(quote(snapshot_id + ".html"))}">'
                    f"{html.escape(snapshot_id)}</a>")
        css = "severity-error" if errors else "severity-warning" if warnings else "ok"
        rows.append(([link, info.taken_at if info else None, info.seq if info else None,
                      info.status if info else "not in snapshots", errors, warnings,
                      found.get("info", 0)], css))
    table = _table(["snapshot", "taken at (UTC)", "load #", "load status", "errors",
                    "warnings", "info"], rows, "snapshots-table")
    title = f"{broker} · nightly reports"
    body = f"<header><h1>{html.escape(title)}</h1></header>{table}"
    return _document(title, body, with_plotly=False)


STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem auto;max-width:1200px;color:#222;
padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem}.meta{color:#555;margin:.2rem 0}
nav a{margin-right:.5rem}section{margin-top:2rem}
table{border-collapse:collapse;width:100%;font-size:.9rem;margin:.5rem 0}
th,td{border-bottom:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#f3f5f8;position:sticky;top:0}td{overflow-wrap:anywhere}
tr.not-ok,tr.severity-warning{background:#fff4e0}
tr.status-below_min,tr.severity-error{background:#fde7e7}
.badge,.count{font-weight:600;white-space:nowrap}.count{margin-right:1rem}
.badge.status-ok{color:#2e7d32}
.badge.status-below_min,.badge.severity-error,.count.severity-error{color:#b71c1c}
.badge.status-no_offset,.badge.status-above_max,.badge.status-no_queue,
.badge.status-other,.badge.severity-warning,.count.severity-warning{color:#a15c00}
.badge.severity-info,.count.severity-info{color:#1565c0}
.empty,.truncated{color:#555;font-style:italic}
""" + "".join(f".badge.consumer-{s}{{color:{c}}}" for s, c in STATUS_COLORS.items()) + """
tr.consumer-WARN,tr.consumer-REWIND{background:#fff4e0}
tr.consumer-STALL,tr.consumer-STOP,tr.consumer-LOST{background:#fde7e7}
"""


def _document(title: str, body: str, *, with_plotly: bool) -> str:
    script = _plotly_js() if with_plotly else ""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style>{script}</head>"
            f"<body>{body}</body></html>\n")


# ------------------------------------------------------------------------------ files


def _check_path_part(value: str, what: str) -> None:
    """Broker and snapshot id become a directory and a file name: one plain component."""
    if (not value or value in {".", ".."} or value.startswith(".")
            or any(c in value for c in "/\\\0")):
        raise ValueError(f"{what} {value!r} cannot be a file name")


def _relative_href(target: Path, page_dir: Path) -> str:
    """A link from a page to ``target`` that survives moving the whole tree."""
    relative = os.path.relpath(Path(target).resolve(), Path(page_dir).resolve())
    return quote(Path(relative).as_posix())


def _write_atomically(path: Path, text: str) -> None:
    """Replace the file in one step: a browser never sees half a page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent,
                                     prefix=f".{path.name}.", delete=False) as handle:
        handle.write(text)
    os.chmod(handle.name, 0o644)  # as readable as any other file a web server would serve
    os.replace(handle.name, path)
