"""The nightly page's traces and transactions: consume latency per consumer group, from the
trace contexts this snapshot brought (``message_traces``), and the transactions the snapshot
touched or left pending (``transactions``).

Latency is the saved query ``consume_latency``'s: from a message's Pub time to the end of
each traced consumption (SubAfter). The consumptions are this snapshot's; their sends are
looked up among the trace contexts of this snapshot and the one before it (a send is traced
moments before its consumption, so a consumption whose send is older than that is left out
rather than the page reading every night's traces).
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.check.engines import DuckDbEngine
from jobs.lakehouse.delta_io import sql_string
from jobs.lakehouse.tables import MESSAGE_TRACES, TRANSACTIONS
from jobs.report.pages import (
    MAX_TABLE_ROWS,
    Html,
    _chart,
    _duration,
    _rows,
    _table,
    _truncation_note,
    _utc_text,
)

TRACES_VIEW, TRANSACTIONS_VIEW = "rpt_traces", "rpt_transactions"
PERCENTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
STATE_ORDER = ("pending", "discarded", "rolled_back", "committed")


@dataclass(frozen=True)
class GroupLatency:
    """One consumer group's traced consumptions of this snapshot (milliseconds)."""

    group: str
    consumptions: int
    failed: int
    p50: float
    p95: float
    p99: float
    max: int


@dataclass(frozen=True)
class TransactionLine:
    """One ``transactions`` row of this snapshot, times as UTC text."""

    state: str
    producer_group: str | None
    topic: str | None
    msg_id: str
    half_time: str
    checks: int
    decided_time: str | None
    seconds_to_decision: float | None


@dataclass(frozen=True)
class TracesData:
    latencies: list[GroupLatency]
    transactions: list[TransactionLine]
    transactions_truncated: bool


def collect_traces(tables: DuckDbEngine, broker: str, snapshot_id: str,
                   window: list[str]) -> TracesData:
    """The section's two aggregations (``window``: the page's chart snapshots, oldest
    first; its last two bound the sends looked up)."""
    b, s = sql_string(broker), sql_string(snapshot_id)
    recent = ", ".join(sql_string(w) for w in window[-2:] or [snapshot_id])
    tables.register(TRACES_VIEW, MESSAGE_TRACES,
                    f"broker = {b} AND first_snapshot_id IN ({recent})")
    tables.register(TRANSACTIONS_VIEW, TRANSACTIONS, f"broker = {b} AND snapshot_id = {s}")
    # Whole milliseconds at q = .5, .95, .99 are exact at two decimals (as consume_latency):
    # rounded there, the page's one decimal does not hang on the engine's last bits.
    percentiles = ", ".join(
        f"round(percentile_cont({q}) WITHIN GROUP (ORDER BY e.ended_ms - p.sent_ms), 2)"
        f" AS {name}" for name, q in PERCENTILES)
    latencies = [GroupLatency(r["group_name"], r["consumptions"], r["failed"], r["p50"],
                              r["p95"], r["p99"], r["max_ms"]) for r in _rows(tables, f"""
        WITH sends AS (
          SELECT msg_id, min(trace_epoch_ms) AS sent_ms FROM {TRACES_VIEW}
          WHERE trace_type = 'Pub' AND success GROUP BY msg_id),
        ends AS (
          SELECT coalesce(a.group_name, b.group_name) AS group_name, a.msg_id,
                 a.trace_epoch_ms AS ended_ms, a.success
          FROM {TRACES_VIEW} a LEFT JOIN {TRACES_VIEW} b
            ON b.trace_type = 'SubBefore' AND b.request_id = a.request_id
           AND b.msg_id = a.msg_id
          WHERE a.trace_type = 'SubAfter' AND a.first_snapshot_id = {s}
            AND a.trace_epoch_ms IS NOT NULL)
        SELECT e.group_name, count(*) AS consumptions,
               sum(CASE WHEN e.success THEN 0 ELSE 1 END) AS failed, {percentiles},
               max(e.ended_ms - p.sent_ms) AS max_ms
        FROM ends e JOIN sends p ON p.msg_id = e.msg_id
        GROUP BY e.group_name ORDER BY e.group_name""")]
    order = " ".join(f"WHEN '{state}' THEN {i}" for i, state in enumerate(STATE_ORDER))
    rows = _rows(tables, f"""
        SELECT state, producer_group, topic, msg_id, {_utc_text('half_time')} AS half_time,
               checks, {_utc_text('decided_time')} AS decided_time, seconds_to_decision
        FROM {TRANSACTIONS_VIEW}
        ORDER BY CASE state {order} ELSE 9 END, half_time, msg_id
        LIMIT {MAX_TABLE_ROWS + 1}""")
    return TracesData(latencies, [TransactionLine(**r) for r in rows[:MAX_TABLE_ROWS]],
                      len(rows) > MAX_TABLE_ROWS)


def latency_chart(latencies: list[GroupLatency]) -> Html:
    """Grouped bars: p50, p95 and p99 consume latency per consumer group."""
    import plotly.graph_objects as go

    figure = go.Figure()
    for name, _ in PERCENTILES if latencies else ():  # none: the chart says so, no axes
        figure.add_trace(go.Bar(name=name, x=[g.group for g in latencies],
                                y=[getattr(g, name) for g in latencies],
                                hovertemplate="%{x}<br>%{y:,.0f} ms"))
    figure.update_layout(barmode="group", title="Consume latency per group (traced "
                         "consumptions new in this snapshot, from send to consume end)",
                         xaxis_title="consumer group", yaxis_title="milliseconds",
                         legend_title="percentile")
    return _chart(figure, "chart-latency", "no traced consumption in this snapshot")


def traces_section(data: TracesData) -> Html:
    """The section: the latency chart and per-group table, then the transactions."""
    groups = _table(
        ["group", "consumptions", "failed", "p50 ms", "p95 ms", "p99 ms", "max ms"],
        [([g.group, g.consumptions, g.failed, g.p50, g.p95, g.p99, g.max],
          "not-ok" if g.failed else "ok") for g in data.latencies], "latency-table") \
        if data.latencies else Html('<p class="empty">No traced consumption in this '
                                    "snapshot.</p>")
    counts: dict[str, int] = {}
    for t in data.transactions:
        counts[t.state] = counts.get(t.state, 0) + 1
    summary = ", ".join(f"{counts[state]} {state.replace('_', ' ')}" for state in STATE_ORDER
                        if state in counts)
    transactions = _table(
        ["state", "producer group", "topic", "msgId", "half stored", "checks", "decided",
         "decision took"],
        [([t.state, t.producer_group, t.topic, t.msg_id, t.half_time, t.checks, t.decided_time,
           _duration(t.seconds_to_decision)],
          f"transaction-{t.state}" + ("" if t.state == "committed" else " not-ok"))
         for t in data.transactions], "transactions-table") \
        if data.transactions else Html('<p class="empty">No transaction touched or pending '
                                       "at this snapshot.</p>")
    return Html(f'<section id="traces"><h2>Traces and transactions</h2>'
                f"{latency_chart(data.latencies)}<h3>Consume latency per group</h3>{groups}"
                f'<h3>Transactions</h3><p class="counts">{summary or "none"}</p>'
                f"{transactions}"
                f"{_truncation_note(data.transactions_truncated, 'transactions')}</section>")
