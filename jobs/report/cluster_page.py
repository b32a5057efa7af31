"""The nightly report's cluster page: one static HTML page per (cluster, snapshot id).

The per-broker pages (:mod:`jobs.report.pages`) show one broker's store; a cluster's
operator first asks about the cluster: which brokers it has and whether each one's night
was loaded, how many messages each master took, how each consumer group is doing over
every master (``cluster_lag``, consumerProgress's view) and whether each slave is a copy
of its master (``replica_status`` and the slaves' ``replica_*`` findings). The page is
``<out_dir>/cluster:<cluster>/<snapshot_id>.html`` (:func:`jobs.report.pages.report_path`
with the broker ``cluster:<cluster>``, which the alerts link to as well) and links each
broker's own page, ``../<broker>/<snapshot_id>.html``.

Like the broker pages it is self-contained (plotly.js inlined once, no network), is written
atomically, reads the Delta tables with DuckDB in this process (no JVM), and escapes
everything taken from the data. A table a warehouse does not have yet (a cluster without
slaves never wrote ``replica_status``) makes its section say so instead of failing.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from jobs.check.consumer_status import STATUSES as CONSUMER_STATUSES
from jobs.check.engines import DuckDbEngine
from jobs.lakehouse.delta_io import sql_string
from jobs.lakehouse.driver_rows import exists
from jobs.lakehouse.tables import (
    CHECK_RESULTS,
    CLUSTER_LAG,
    MESSAGES,
    REPLICA_STATUS,
    SNAPSHOTS,
    Registry,
)
from jobs.report.pages import (
    HOUR_FORMAT,
    MAX_TABLE_ROWS,
    SEVERITIES,
    STATUS_COLORS,
    STYLE,
    Html,
    _chart,
    _check_path_part,
    _duration,
    _esc,
    _plotly_js,
    _rows,
    _severity_badge,
    _severity_class,
    _table,
    _truncation_note,
    _utc_text,
    _write_atomically,
    report_path,
)

if TYPE_CHECKING:
    import plotly.graph_objects as go

ROLES = ("master", "slave")
CLUSTER_PREFIX = "cluster:"
# Replication states (replica_status.state), best to worst, and their colours.
REPLICA_COLORS = {"in_sync": "#2e7d32", "lagging": "#ef8f00", "master_missing": "#a15c00",
                  "diverged": "#c62828"}
# Queues of a status listed in a table cell; the rest are counted.
MAX_LISTED_QUEUES = 8
TABLES = (SNAPSHOTS, MESSAGES, CLUSTER_LAG, REPLICA_STATUS, CHECK_RESULTS)


@dataclass(frozen=True)
class ClusterBroker:
    """One broker of the cluster as config/pipeline.yaml names it; ``master``: a slave's."""

    name: str
    role: str  # "master" | "slave"
    master: str | None = None


# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class BrokerRow:
    """A broker of the cluster with its snapshot of the night (None: not loaded)."""

    broker: ClusterBroker
    slaves: list[str]
    taken_at: str | None
    status: str | None
    commitlog_max_offset: int | None


@dataclass(frozen=True)
class GroupRow:
    """One ``cluster_lag`` row of the night (level group or topic)."""

    group: str
    topic: str | None
    status: str
    diff_total: int
    lag: int
    lost: int
    lag_seconds: float | None
    consume_tps: float | None
    last_consume_time: str | None
    brokers: list[str]
    missing_brokers: list[str]
    status_queues: list[str]
    reason: str
    previous_status: str | None


@dataclass(frozen=True)
class DiffPoint:
    """A group's Diff Total at one night of the cluster."""

    group: str
    snapshot_id: str
    x: str
    diff_total: int
    status: str


@dataclass(frozen=True)
class ReplicaRow:
    """One ``replica_status`` row (a slave at one night)."""

    slave: str
    snapshot_id: str
    x: str | None
    master: str
    state: str
    lag_bytes: int | None
    lag_seconds: float | None
    master_write_offset: int | None
    replica_write_offset: int
    diverged_at: int | None
    queues_compared: int
    queues_diverged: int
    offsets_behind: int
    offsets_ahead: int
    config_differences: int


@dataclass(frozen=True)
class ReplicaFinding:
    """A slave's ``replica_*`` row of ``check_results``."""

    slave: str
    severity: str
    check: str
    scope: str
    observed: str | None
    explanation: str


@dataclass(frozen=True)
class ClusterData:
    """Everything the cluster page shows, already aggregated."""

    cluster: str
    snapshot_id: str
    taken_at: str | None
    brokers: list[BrokerRow]
    volume: dict[str, dict[str, int]]  # {master: {hour: messages}}
    has_cluster_lag: bool
    groups: list[GroupRow]
    topics: list[GroupRow]
    topics_truncated: bool
    diff_history: list[DiffPoint]
    has_replica_status: bool
    replicas: list[ReplicaRow]  # this night's, one per slave that has one
    replica_history: list[ReplicaRow]
    has_check_results: bool
    findings: list[ReplicaFinding]
    findings_truncated: bool

    @property
    def slaves(self) -> list[str]:
        return [b.broker.name for b in self.brokers if b.broker.role == "slave"]


# ------------------------------------------------------------------------- public API


def write_cluster_report(registry: Registry, cluster: str, brokers: Sequence[ClusterBroker],
                         snapshot_id: str, out_dir: Path) -> Path:
    """Write ``<out_dir>/cluster:<cluster>/<snapshot_id>.html`` and return its path.

    At least one broker of the cluster must have loaded the snapshot (``snapshots``); the
    other tables may be missing or hold nothing of this night."""
    page_name = f"{CLUSTER_PREFIX}{cluster}"
    _check_path_part(cluster, "cluster")
    _check_path_part(page_name, "cluster")
    _check_path_part(snapshot_id, "snapshot id")
    brokers = _checked_brokers(brokers)
    tables, present = _tables(registry)
    try:
        data = collect_cluster_data(tables, present, cluster, brokers, snapshot_id)
    finally:
        tables.close()
    if not any(b.status is not None for b in data.brokers):
        raise ValueError(f"snapshot {snapshot_id!r} is loaded by no broker of cluster "
                         f"{cluster!r}")
    page = report_path(out_dir, page_name, snapshot_id)
    _write_atomically(page, render_cluster_page(data))
    return page


def _checked_brokers(brokers: Sequence[ClusterBroker]) -> list[ClusterBroker]:
    if not brokers:
        raise ValueError("a cluster page needs the cluster's brokers")
    names = [b.name for b in brokers]
    if len(set(names)) != len(names):
        raise ValueError(f"a broker is listed twice: {names}")
    for broker in brokers:
        if not broker.name:
            raise ValueError("a broker of the cluster has no name")
        if broker.role not in ROLES:
            raise ValueError(f"broker {broker.name!r}: role {broker.role!r} is not one of "
                             f"{', '.join(ROLES)}")
        if broker.role == "slave" and not broker.master:
            raise ValueError(f"slave {broker.name!r} names no master")
    return list(brokers)


def broker_href(broker: str, snapshot_id: str) -> str:
    """The link from a cluster page to a broker's page of the same snapshot."""
    return f"../{quote(broker, safe='')}/{quote(snapshot_id + '.html', safe='')}"


# ------------------------------------------------------------------------------- data


def _tables(registry: Registry) -> tuple[DuckDbEngine, set[str]]:
    """The engine with every table of the page that exists registered, and their names."""
    tables = DuckDbEngine(registry.warehouse)
    present = set()
    for name in TABLES:
        if exists(registry[name].location):
            tables.register(name, name)
            present.add(name)
    return tables, present


def _in(values: Sequence[str]) -> str:
    return f"({', '.join(map(sql_string, values))})" if values else "(NULL)"


def collect_cluster_data(tables: DuckDbEngine, present: set[str], cluster: str,
                         brokers: Sequence[ClusterBroker], snapshot_id: str) -> ClusterData:
    """Run the page's aggregations over the tables in ``present``."""
    names = [b.name for b in brokers]
    masters = [b.name for b in brokers if b.role == "master"]
    slaves = [b.name for b in brokers if b.role == "slave"]
    loaded: dict[str, dict] = {}
    nights: dict[str, str | None] = {}
    if SNAPSHOTS in present:
        loaded = {r["broker"]: r for r in _rows(tables, f"""
            SELECT broker, {_utc_text('taken_at')} AS taken_at, status, commitlog_max_offset
            FROM {SNAPSHOTS} WHERE broker IN {_in(names)}
              AND snapshot_id = {sql_string(snapshot_id)}""")}
        nights = _nights(tables, names)
    rows = [BrokerRow(b, [s.name for s in brokers if s.role == "slave" and s.master == b.name],
                      loaded.get(b.name, {}).get("taken_at"), loaded.get(b.name, {}).get("status"),
                      loaded.get(b.name, {}).get("commitlog_max_offset")) for b in brokers]
    night = nights.get(snapshot_id)
    groups = topics = []
    diff_history: list[DiffPoint] = []
    topics_truncated = False
    if CLUSTER_LAG in present:
        groups, topics, topics_truncated = _cluster_lag(tables, cluster, snapshot_id)
        diff_history = _diff_history(tables, cluster, snapshot_id, night, nights)
    replicas: list[ReplicaRow] = []
    replica_history: list[ReplicaRow] = []
    if REPLICA_STATUS in present and slaves:
        every = _replica_rows(tables, slaves, nights, SNAPSHOTS in present)
        replicas = sorted((r for r in every if r.snapshot_id == snapshot_id),
                          key=lambda r: slaves.index(r.slave))
        replica_history = [r for r in every if r.x is not None and (
            r.snapshot_id == snapshot_id or night is None or r.x <= night)]
    findings: list[ReplicaFinding] = []
    findings_truncated = False
    if CHECK_RESULTS in present and slaves:
        findings, findings_truncated = _replica_findings(tables, slaves, snapshot_id)
    return ClusterData(
        cluster=cluster, snapshot_id=snapshot_id, taken_at=night, brokers=rows,
        volume=_volume(tables, masters, snapshot_id) if MESSAGES in present else {},
        has_cluster_lag=CLUSTER_LAG in present, groups=groups, topics=topics,
        topics_truncated=topics_truncated, diff_history=diff_history,
        has_replica_status=REPLICA_STATUS in present, replicas=replicas,
        replica_history=replica_history, has_check_results=CHECK_RESULTS in present,
        findings=findings, findings_truncated=findings_truncated)


def _nights(tables: DuckDbEngine, brokers: Sequence[str]) -> dict[str, str | None]:
    """{snapshot id: the latest taken_at of the cluster's brokers' snapshots of that id}."""
    return {r["snapshot_id"]: r["x"] for r in _rows(tables, f"""
        SELECT snapshot_id, {_utc_text('max(taken_at)')} AS x FROM {SNAPSHOTS}
        WHERE broker IN {_in(brokers)} GROUP BY snapshot_id""")}


def _volume(tables: DuckDbEngine, masters: Sequence[str],
            snapshot_id: str) -> dict[str, dict[str, int]]:
    """Messages per master per store hour among the records this night's snapshots brought
    (a slave's records are its master's: masters only)."""
    if not masters:
        return {}
    hour = _utc_text("date_trunc('HOUR', store_time)", HOUR_FORMAT)
    volume: dict[str, dict[str, int]] = {}
    for r in _rows(tables, f"""
            SELECT broker, {hour} AS hour, count(*) AS count FROM {MESSAGES}
            WHERE broker IN {_in(masters)} AND first_snapshot_id = {sql_string(snapshot_id)}
            GROUP BY broker, {hour}"""):
        volume.setdefault(r["broker"], {})[r["hour"]] = r["count"]
    return volume


def _group_row(r: dict) -> GroupRow:
    return GroupRow(
        group=str(r["group_name"]), topic=r["topic"], status=str(r["status"]),
        diff_total=int(r["diff_total"]), lag=int(r["lag_messages"]),
        lost=int(r["lost_messages"]), lag_seconds=r["lag_seconds"],
        consume_tps=r["consume_tps"], last_consume_time=r["last_consume_time"],
        brokers=list(r["brokers"] or []), missing_brokers=list(r["missing_brokers"] or []),
        status_queues=list(r["status_queues"] or []), reason=str(r["reason"]),
        previous_status=r["previous_status"])


def _cluster_lag(tables: DuckDbEngine, cluster: str,
                 snapshot_id: str) -> tuple[list[GroupRow], list[GroupRow], bool]:
    """The night's group rows (worst status first) and topic rows (capped)."""
    this = f"cluster = {sql_string(cluster)} AND snapshot_id = {sql_string(snapshot_id)}"
    columns = (f"group_name, topic, status, diff_total, lag_messages, lost_messages, "
               f"lag_seconds, consume_tps, {_utc_text('last_consume_time')} AS "
               f"last_consume_time, brokers, missing_brokers, status_queues, reason, "
               f"previous_status")
    rank = {status: i for i, status in enumerate(CONSUMER_STATUSES)}

    def worst_first(row: GroupRow) -> tuple:
        return (-rank.get(row.status, len(rank)), row.group, row.topic or "")

    groups = sorted((_group_row(r) for r in _rows(tables, f"""
        SELECT {columns} FROM {CLUSTER_LAG} WHERE {this} AND level = 'group'""")),
        key=worst_first)
    topic_rows = _rows(tables, f"""
        SELECT {columns} FROM {CLUSTER_LAG} WHERE {this} AND level = 'topic'
        ORDER BY group_name, topic LIMIT {MAX_TABLE_ROWS + 1}""")
    topics = [_group_row(r) for r in topic_rows[:MAX_TABLE_ROWS]]
    return groups, topics, len(topic_rows) > MAX_TABLE_ROWS


def _diff_history(tables: DuckDbEngine, cluster: str, snapshot_id: str, night: str | None,
                  nights: dict[str, str | None]) -> list[DiffPoint]:
    """Diff Total per group at each night of the cluster up to this one (a re-run of an
    old page does not show the future); a night without a time cannot be placed."""
    points = []
    for r in _rows(tables, f"""
            SELECT group_name, snapshot_id, {_utc_text('snapshot_taken_at')} AS x,
                   diff_total, status
            FROM {CLUSTER_LAG} WHERE cluster = {sql_string(cluster)} AND level = 'group'"""):
        x = r["x"] or nights.get(r["snapshot_id"])
        if x is None or (r["snapshot_id"] != snapshot_id and night is not None and x > night):
            continue
        points.append(DiffPoint(r["group_name"], r["snapshot_id"], x, r["diff_total"],
                                r["status"]))
    return sorted(points, key=lambda p: (p.group, p.x, p.snapshot_id))


def _replica_rows(tables: DuckDbEngine, slaves: Sequence[str], nights: dict[str, str | None],
                  with_snapshots: bool) -> list[ReplicaRow]:
    """Every replica_status row of the slaves, placed at their snapshot's time."""
    taken = ""
    if with_snapshots:
        taken = f"""LEFT JOIN (SELECT broker, snapshot_id, {_utc_text('taken_at')} AS x
                              FROM {SNAPSHOTS} WHERE broker IN {_in(slaves)}) s
                    ON s.broker = r.broker AND s.snapshot_id = r.snapshot_id"""
    rows = _rows(tables, f"""
        SELECT r.*, {'s.x' if with_snapshots else 'CAST(NULL AS STRING)'} AS x
        FROM {REPLICA_STATUS} r {taken} WHERE r.broker IN {_in(slaves)}""")
    placed = [ReplicaRow(
        slave=r["broker"], snapshot_id=r["snapshot_id"],
        x=r["x"] or nights.get(r["snapshot_id"]), master=r["master"], state=r["state"],
        lag_bytes=r["lag_bytes"], lag_seconds=r["lag_seconds"],
        master_write_offset=r["master_write_offset"],
        replica_write_offset=r["replica_write_offset"], diverged_at=r["diverged_at"],
        queues_compared=r["queues_compared"], queues_diverged=r["queues_diverged"],
        offsets_behind=r["offsets_behind"], offsets_ahead=r["offsets_ahead"],
        config_differences=r["config_differences"]) for r in rows]
    return sorted(placed, key=lambda r: (r.slave, r.x or "", r.snapshot_id))


def _replica_findings(tables: DuckDbEngine, slaves: Sequence[str],
                      snapshot_id: str) -> tuple[list[ReplicaFinding], bool]:
    """The slaves' replica findings of the night, most severe first (capped)."""
    rank = " ".join(f"WHEN {sql_string(s)} THEN {i}" for i, s in enumerate(SEVERITIES))
    rows = _rows(tables, f"""
        SELECT broker, severity, check_name, scope, observed, explanation FROM {CHECK_RESULTS}
        WHERE broker IN {_in(slaves)} AND snapshot_id = {sql_string(snapshot_id)}
          AND check_name LIKE 'replica_%'
        ORDER BY CASE severity {rank} ELSE {len(SEVERITIES)} END, broker, check_name, scope
        LIMIT {MAX_TABLE_ROWS + 1}""")
    found = [ReplicaFinding(r["broker"], r["severity"], r["check_name"], r["scope"],
                            r["observed"], r["explanation"]) for r in rows[:MAX_TABLE_ROWS]]
    return found, len(rows) > MAX_TABLE_ROWS


# ----------------------------------------------------------------------------- charts


def _one_instant(xs: list[str], figure: go.Figure) -> None:
    """A date axis around one instant zooms to milliseconds: label the one point."""
    if len(set(xs)) == 1:
        figure.update_xaxes(type="category")


def volume_chart(volume: dict[str, dict[str, int]]) -> Html:
    """Grouped bars: messages per store hour, one colour per master."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for broker in sorted(volume):
        hours = sorted(volume[broker])
        figure.add_trace(go.Bar(name=broker, x=hours, y=[volume[broker][h] for h in hours],
                                hovertemplate="%{x}<br>%{y:,} messages"))
    figure.update_layout(barmode="group", title="Messages per broker per hour (new in this "
                         "snapshot)", xaxis_title="store hour (UTC)", yaxis_title="messages",
                         legend_title="broker")
    return _chart(figure, "chart-cluster-volume", "no messages new in this snapshot")


def diff_chart(history: list[DiffPoint]) -> Html:
    """One line per group: its Diff Total over the cluster's nights."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for group in sorted({p.group for p in history}):
        points = [p for p in history if p.group == group]
        figure.add_trace(go.Scatter(
            name=group, mode="lines+markers", x=[p.x for p in points],
            y=[p.diff_total for p in points],
            customdata=[[p.snapshot_id, p.status] for p in points],
            hovertemplate="snapshot %{customdata[0]}<br>%{x}<br>Diff Total %{y:,}"
                          "<br>%{customdata[1]}"))
    figure.update_layout(title="Diff Total per consumer group over the cluster's snapshots",
                         xaxis_title="snapshot taken at (UTC)", yaxis_title="messages",
                         yaxis_rangemode="tozero", legend_title="group")
    _one_instant([p.x for p in history], figure)
    return _chart(figure, "chart-cluster-diff", "no cluster consumer progress computed")


def replica_chart(history: list[ReplicaRow]) -> Html:
    """Per slave: lag in bytes (solid, left axis) and in seconds (dotted, right axis) over
    its snapshots; each point's marker is coloured by that night's state."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for slave in sorted({r.slave for r in history}):
        points = [r for r in history if r.slave == slave]
        x = [r.x for r in points]
        custom = [[r.snapshot_id, r.state] for r in points]
        colors = [REPLICA_COLORS.get(r.state, "#757575") for r in points]
        figure.add_trace(go.Scatter(
            name=f"{slave} lag bytes", mode="lines+markers", x=x,
            y=[r.lag_bytes for r in points], customdata=custom,
            marker={"color": colors, "size": 10},
            hovertemplate="snapshot %{customdata[0]}<br>%{x}<br>%{y:,} bytes behind"
                          "<br>%{customdata[1]}"))
        figure.add_trace(go.Scatter(
            name=f"{slave} lag seconds", mode="lines+markers", x=x, yaxis="y2",
            y=[r.lag_seconds for r in points], customdata=custom,
            line={"dash": "dot"}, marker={"color": colors, "symbol": "diamond", "size": 9},
            hovertemplate="snapshot %{customdata[0]}<br>%{x}<br>%{y:,.1f} s behind"
                          "<br>%{customdata[1]}"))
    figure.update_layout(
        title="Replication lag per slave over its snapshots",
        xaxis_title="snapshot taken at (UTC)", legend_title="slave",
        yaxis={"title": {"text": "bytes behind"}, "rangemode": "tozero"},
        yaxis2={"title": {"text": "seconds behind"}, "rangemode": "tozero",
                "overlaying": "y", "side": "right", "showgrid": False})
    _one_instant([r.x for r in history if r.x], figure)
    chart = _chart(figure, "chart-replica-lag", "no replication status recorded")
    return chart


# ------------------------------------------------------------------------------- HTML


def _consumer_badge(status: str) -> Html:
    return Html(f'<span class="badge {_consumer_class(status)}">{html.escape(status)}</span>')


def _consumer_class(status: str) -> str:
    return f"consumer-{status}" if status in STATUS_COLORS else "consumer-other"


def _replica_class(state: str) -> str:
    return f"replica-{state}" if state in REPLICA_COLORS else "replica-other"


def _replica_badge(state: str) -> Html:
    return Html(f'<span class="badge {_replica_class(state)}">{html.escape(state)}</span>')


def _role_badge(role: str) -> Html:
    return Html(f'<span class="badge role-{html.escape(role)}">{html.escape(role)}</span>')


def _listed(values: Sequence[str], limit: int = MAX_LISTED_QUEUES) -> str | None:
    if not values:
        return None
    more = f" and {len(values) - limit:,} more" if len(values) > limit else ""
    return ", ".join(values[:limit]) + more


def _tps(value: float | None) -> str | None:
    return None if value is None else f"{value:,.2f}"


def _counted(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _empty(text: str) -> Html:
    return Html(f'<p class="empty">{html.escape(text)}</p>')


def _brokers_section(data: ClusterData) -> Html:
    rows = []
    for b in data.brokers:
        if b.broker.role == "slave":  # a slave has no page of its own: it is checked here
            link = Html('<a class="replica-link" href="#replication">replication</a>')
        else:
            href = broker_href(b.broker.name, data.snapshot_id)
            link = Html(f'<a class="broker-link" href="{html.escape(href)}">'
                        f"{html.escape(b.broker.name)} · {html.escape(data.snapshot_id)}</a>")
        loaded = b.status is not None
        rows.append(([b.broker.name, _role_badge(b.broker.role), b.broker.master,
                      _listed(b.slaves), b.taken_at, b.status if loaded else "not loaded",
                      b.commitlog_max_offset, link],
                     "ok" if b.status == "loaded" else "not-ok"))
    table = _table(["broker", "role", "master", "slaves", "snapshot taken at (UTC)",
                    "load status", "commitlog max offset", "broker page"], rows,
                   "brokers-table")
    return Html(f'<section id="brokers"><h2>Brokers and roles</h2>{table}</section>')


def _volume_section(data: ClusterData) -> Html:
    totals = ", ".join(f"{html.escape(b)} {_esc(sum(h.values()))}"
                       for b, h in sorted(data.volume.items()))
    total = sum(sum(h.values()) for h in data.volume.values())
    text = f"{_esc(total)} messages new in this snapshot" + (f" ({totals})" if totals else "")
    return Html(f'<section id="volume"><h2>Messages per broker</h2><p>{text}.</p>'
                f"{volume_chart(data.volume)}</section>")


def _group_cells(g: GroupRow) -> list[object]:
    return [g.group, _consumer_badge(g.status), g.diff_total, g.lag, _duration(g.lag_seconds),
            _tps(g.consume_tps), g.last_consume_time, _listed(g.brokers),
            _listed(g.status_queues), g.reason]


GROUP_HEADERS = ["group", "status", "Diff Total", "lag messages", "lag time", "consume TPS",
                 "last consume time (UTC)", "brokers", "status queues", "why"]


def _groups_section(data: ClusterData) -> Html:
    head = '<section id="groups"><h2>Consumer groups of the cluster</h2>'
    if not data.has_cluster_lag:
        return Html(f"{head}{_empty('No cluster consumer progress recorded (none).')}"
                    "</section>")
    groups = (_table(GROUP_HEADERS, [(_group_cells(g), _consumer_class(g.status))
                                     for g in data.groups], "cluster-groups-table")
              if data.groups else _empty("No consumer groups of the cluster at this "
                                         "snapshot (none)."))
    missing = sorted({b for g in data.groups for b in g.missing_brokers})
    note = (Html(f'<p class="truncated">Not counted (no checked snapshot of this id): '
                 f"{html.escape(', '.join(missing))}.</p>") if missing else Html(""))
    not_ok = sum(1 for g in data.groups if g.status != "OK")
    summary = (f"<p>{_counted(len(data.groups), 'group')}, {_esc(not_ok)} not OK.</p>"
               if data.groups else "")
    topics = _table(["group", "topic", *GROUP_HEADERS[1:]],
                    [([g.group, g.topic, *_group_cells(g)[1:]], _consumer_class(g.status))
                     for g in data.topics], "cluster-topics-table")
    details = (Html(f'<details id="cluster-topics"><summary>Per group and topic '
                    f"({_esc(len(data.topics))} rows)</summary>{topics}"
                    f"{_truncation_note(data.topics_truncated, 'topic rows')}</details>")
               if data.topics else Html(""))
    return Html(f"{head}{summary}{diff_chart(data.diff_history)}"
                f"<h3>Per group at this snapshot</h3>{groups}{note}{details}</section>")


def _replication_section(data: ClusterData) -> Html:
    head = '<section id="replication"><h2>Replication</h2>'
    if not data.slaves:
        return Html(f"{head}{_empty('This cluster has no slaves (none).')}</section>")
    if not data.has_replica_status:
        status = _empty("No replication status recorded (none).")
    elif not data.replicas:
        status = _empty("No replication status of this snapshot (none).")
    else:
        status = _table(
            ["slave", "state", "master", "lag bytes", "lag time", "master write offset",
             "slave write offset", "diverged at", "queues diverged", "offsets behind",
             "config differences"],
            [([r.slave, _replica_badge(r.state), r.master, r.lag_bytes,
               _duration(r.lag_seconds), r.master_write_offset, r.replica_write_offset,
               r.diverged_at, f"{r.queues_diverged:,} of {r.queues_compared:,}",
               r.offsets_behind, r.config_differences], _replica_class(r.state))
             for r in data.replicas], "replica-table")
    chart = replica_chart(data.replica_history) if data.has_replica_status else Html("")
    if not data.has_check_results:
        findings = _empty("No check results recorded (none).")
    elif not data.findings:
        findings = _empty("No replica findings for this snapshot (none).")
    else:
        findings = _table(
            ["severity", "slave", "check", "scope", "observed", "explanation"],
            [([_severity_badge(f.severity), f.slave, f.check, f.scope, f.observed,
               f.explanation], _severity_class(f.severity)) for f in data.findings],
            "replica-findings-table")
    more = _truncation_note(data.findings_truncated, "findings")
    return Html(f"{head}<h3>Per slave at this snapshot</h3>{status}{chart}"
                f"<h3>Replica findings</h3>{findings}{more}</section>")


CLUSTER_STYLE = "".join(
    f".badge.replica-{s}{{color:{c}}}" for s, c in REPLICA_COLORS.items()) + """
.badge.role-master{color:#1565c0}.badge.role-slave{color:#555}
tr.replica-lagging,tr.replica-master_missing{background:#fff4e0}
tr.replica-diverged{background:#fde7e7}
details summary{cursor:pointer;margin:.5rem 0;font-weight:600}
"""


def render_cluster_page(data: ClusterData) -> str:
    """The whole cluster page as one HTML document."""
    title = f"cluster {data.cluster} · snapshot {data.snapshot_id}"
    masters = sum(1 for b in data.brokers if b.broker.role == "master")
    meta = (f"taken at {_esc(data.taken_at)} UTC · {_counted(masters, 'master')}, "
            f"{_counted(len(data.slaves), 'slave')} · report written "
            f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC")
    body = (f'<header><h1>{html.escape(title)}</h1><p class="meta">{meta}</p></header>'
            f"{_brokers_section(data)}{_volume_section(data)}{_groups_section(data)}"
            f"{_replication_section(data)}")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{STYLE}{CLUSTER_STYLE}</style>"
            f"{_plotly_js()}</head><body>{body}</body></html>\n")


__all__ = ["ClusterBroker", "ClusterData", "collect_cluster_data", "render_cluster_page",
           "write_cluster_report"]
