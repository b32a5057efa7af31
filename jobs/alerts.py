"""Alert thresholds, one summarising alert per (broker, snapshot), and the ``alerts`` table.

The reconcile job leaves a snapshot's findings in ``check_results`` and ``consumer_lag``;
Great Expectations reports its failed rules. :func:`evaluate` turns those (small lists of
dicts the caller collected for ONE snapshot) into at most one :class:`Alert` whose lines
each say which threshold of ``config/alerts.yaml`` was crossed, with the numbers, so an
operator gets one message per night and broker instead of one per queue.
:func:`record_alert` keeps it in the ``alerts`` table (a re-run replaces the row), and
:func:`already_delivered` lets a re-run skip sending it again. Delivery itself lives in
``dags/notifiers.py``: jobs never import Airflow.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

import yaml

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.tables import Registry

log = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "alerts.yaml"
ERROR, WARNING = "error", "warning"
SEVERITY_RANK = {ERROR: 0, WARNING: 1}          # alerts are error or warning (contract enum)
TOPIC_KINDS = ("normal", "retry", "dlq", "system")
EMAIL, WEBHOOK = "email", "webhook"
SENT = "sent"
# Great Expectations 1.x calls its worst severity "critical"; the contracts say "error".
_SEVERITY_ALIASES = {"critical": ERROR, "error": ERROR, "warning": WARNING, "info": "info"}


class AlertConfigError(ValueError):
    """The alert configuration is unusable; the message names the file and the key."""


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class LagRule:
    """Lag thresholds for the groups matching ``group`` (a name or fnmatch pattern)."""

    group: str
    max_messages: int | None = None
    max_minutes: float | None = None
    severity: str = WARNING

    def matches(self, group_name: str) -> bool:
        return fnmatchcase(group_name, self.group)


@dataclass(frozen=True)
class EmailChannel:
    """Recipients and the Airflow SMTP connection that sends to them."""

    smtp_conn_id: str
    from_address: str
    to: tuple[str, ...]


@dataclass(frozen=True)
class WebhookChannel:
    """The Airflow connection (type slackwebhook) holding the webhook URL."""

    conn_id: str


@dataclass(frozen=True)
class Channels:
    email: EmailChannel | None = None
    webhook: WebhookChannel | None = None

    def names(self) -> tuple[str, ...]:
        """Enabled channels, in delivery order."""
        return tuple(name for name, channel in ((EMAIL, self.email), (WEBHOOK, self.webhook))
                     if channel is not None)


@dataclass(frozen=True)
class AlertRules:
    """Everything ``config/alerts.yaml`` says: thresholds, report link, channels."""

    lag_rules: tuple[LagRule, ...]
    lag_topic_kinds: frozenset[str] = frozenset({"normal", "retry"})
    lost_messages: bool = True
    check_severities: frozenset[str] = frozenset({ERROR})
    expectation_severities: frozenset[str] = frozenset({ERROR})
    report_base_url: str | None = None
    report_page: str = "{broker}/{snapshot_id}.html"
    channels: Channels = field(default_factory=Channels)
    source: str = "<memory>"

    @classmethod
    def load(cls, path: str | Path = DEFAULT_CONFIG) -> AlertRules:
        """Read and validate a config file; any problem raises :class:`AlertConfigError`."""
        path = Path(path)
        try:
            document = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
        except (OSError, yaml.YAMLError) as exc:
            raise AlertConfigError(f"{path}: cannot read: {exc}") from exc
        return _parse_rules(_Node(str(path), "", document))

    def lag_rule(self, group_name: str) -> LagRule:
        """The first rule whose pattern matches (the last rule is always ``*``)."""
        return next(rule for rule in self.lag_rules if rule.matches(group_name))

    def report_url(self, broker: str, snapshot_id: str) -> str | None:
        if not self.report_base_url:
            return None
        page = self.report_page.format(broker=quote(broker, safe=""),
                                       snapshot_id=quote(snapshot_id, safe=""))
        return f"{self.report_base_url.rstrip('/')}/{page.lstrip('/')}"


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (the second would silently win)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict:
    keys = [loader.construct_object(key, deep=True) for key, _ in node.value]
    duplicates = sorted({str(k) for k in keys if keys.count(k) > 1})
    if duplicates:
        raise yaml.constructor.ConstructorError(
            None, None, f"duplicate key(s) {', '.join(duplicates)}", node.start_mark)
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


@dataclass(frozen=True)
class _Node:
    """A value of the config file with its file and key path, for error messages."""

    file: str
    key: str
    value: Any

    def fail(self, problem: str) -> NoReturn:
        raise AlertConfigError(f"{self.file}: {self.key or '(top level)'}: {problem}")

    def child(self, key: str | int, value: Any) -> _Node:
        name = f"{self.key}[{key}]" if isinstance(key, int) else (
            f"{self.key}.{key}" if self.key else key)
        return _Node(self.file, name, value)

    def mapping(self, allowed: Iterable[str], required: Iterable[str] = ()) -> dict[str, _Node]:
        if not isinstance(self.value, dict):
            self.fail(f"expected a mapping, got {_kind(self.value)}")
        unknown = sorted(str(k) for k in self.value if k not in set(allowed))
        if unknown:
            self.fail(f"unknown key(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
        missing = [k for k in required if k not in self.value]
        if missing:
            self.fail(f"missing key(s) {', '.join(missing)}")
        return {k: self.child(k, v) for k, v in self.value.items()}

    def items(self) -> list[_Node]:
        if not isinstance(self.value, list):
            self.fail(f"expected a list, got {_kind(self.value)}")
        return [self.child(i, v) for i, v in enumerate(self.value)]

    def text(self) -> str:
        if not isinstance(self.value, str) or not self.value.strip():
            self.fail(f"expected a non-empty string, got {_kind(self.value)}")
        return self.value.strip()

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            self.fail(f"expected true or false, got {_kind(self.value)}")
        return self.value

    def number(self, *, integer: bool) -> int | float:
        ok = (int,) if integer else (int, float)
        if isinstance(self.value, bool) or not isinstance(self.value, ok) or self.value < 0:
            self.fail(f"expected a {'whole ' if integer else ''}number >= 0, got {self.value!r}")
        return self.value

    def choices(self, allowed: Sequence[str]) -> frozenset[str]:
        values = [item.text() for item in self.items()]
        wrong = [v for v in values if v not in allowed]
        if wrong:
            self.fail(f"{', '.join(wrong)} not allowed; choose from {', '.join(allowed)}")
        return frozenset(values)

    def conn_id(self) -> str:
        value = self.text()
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            self.fail(f"{value!r} is not an Airflow connection id (credentials and URLs belong "
                      "in the connection, not in this file)")
        return value


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"


def _parse_rules(top: _Node) -> AlertRules:
    keys = top.mapping(("version", "lag", "lost_messages", "checks", "expectations",
                        "report", "channels"), required=("version", "lag"))
    if type(keys["version"].value) is not int or keys["version"].value != 1:
        keys["version"].fail(f"unsupported version {keys['version'].value!r} (expected 1)")
    lag_rules, kinds = _parse_lag(keys["lag"])
    base_url, page = _parse_report(keys["report"]) if "report" in keys else (None, None)
    return AlertRules(
        lag_rules=lag_rules,
        lag_topic_kinds=kinds,
        lost_messages=keys["lost_messages"].boolean() if "lost_messages" in keys else True,
        check_severities=_parse_severities(keys.get("checks")),
        expectation_severities=_parse_severities(keys.get("expectations")),
        report_base_url=base_url,
        report_page=page or AlertRules.report_page,
        channels=_parse_channels(keys["channels"]) if "channels" in keys else Channels(),
        source=top.file,
    )


def _parse_lag(node: _Node) -> tuple[tuple[LagRule, ...], frozenset[str]]:
    keys = node.mapping(("topic_kinds", "rules"), required=("rules",))
    kinds = (keys["topic_kinds"].choices(TOPIC_KINDS) if "topic_kinds" in keys
             else AlertRules.lag_topic_kinds)
    rules = tuple(_parse_lag_rule(item) for item in keys["rules"].items())
    if not rules or rules[-1].group != "*":
        keys["rules"].fail("the last rule must be the default, group: '*'")
    return rules, kinds


def _parse_lag_rule(node: _Node) -> LagRule:
    keys = node.mapping(("group", "max_messages", "max_minutes", "severity"),
                        required=("group",))
    severity = keys["severity"].text() if "severity" in keys else WARNING
    if severity not in SEVERITY_RANK:
        keys["severity"].fail(f"{severity!r}: choose error or warning")
    return LagRule(
        group=keys["group"].text(),
        max_messages=keys["max_messages"].number(integer=True) if "max_messages" in keys
        else None,
        max_minutes=keys["max_minutes"].number(integer=False) if "max_minutes" in keys
        else None,
        severity=severity,
    )


def _parse_severities(node: _Node | None) -> frozenset[str]:
    if node is None:
        return frozenset({ERROR})
    keys = node.mapping(("severities",), required=("severities",))
    return keys["severities"].choices(tuple(SEVERITY_RANK))


def _parse_report(node: _Node) -> tuple[str, str | None]:
    keys = node.mapping(("base_url", "page"), required=("base_url",))
    base_url = keys["base_url"].text()
    if not re.match(r"https?://", base_url):
        keys["base_url"].fail(f"{base_url!r} is not an http(s) URL")
    page = keys["page"].text() if "page" in keys else None
    if page is not None:
        try:
            page.format(broker="b", snapshot_id="s")
        except (KeyError, IndexError, ValueError) as exc:
            keys["page"].fail(f"only {{broker}} and {{snapshot_id}} may be used ({exc!r})")
    return base_url, page


def _parse_channels(node: _Node) -> Channels:
    keys = node.mapping((EMAIL, WEBHOOK))
    return Channels(
        email=_parse_email(keys[EMAIL]) if EMAIL in keys else None,
        webhook=_parse_webhook(keys[WEBHOOK]) if WEBHOOK in keys else None,
    )


def _enabled(keys: dict[str, _Node]) -> bool:
    return keys["enabled"].boolean() if "enabled" in keys else True


def _parse_email(node: _Node) -> EmailChannel | None:
    keys = node.mapping(("enabled", "smtp_conn_id", "from", "to"),
                        required=("smtp_conn_id", "from", "to"))
    to = tuple(item.text() for item in keys["to"].items())
    if not to:
        keys["to"].fail("at least one recipient")
    channel = EmailChannel(keys["smtp_conn_id"].conn_id(), keys["from"].text(), to)
    return channel if _enabled(keys) else None


def _parse_webhook(node: _Node) -> WebhookChannel | None:
    keys = node.mapping(("enabled", "conn_id"), required=("conn_id",))
    channel = WebhookChannel(keys["conn_id"].conn_id())
    return channel if _enabled(keys) else None


# --------------------------------------------------------------------------- evaluation


@dataclass(frozen=True)
class Alert:
    """The one summarising alert of a (broker, snapshot); findings are worst first."""

    broker: str
    snapshot_id: str
    raised_at: datetime
    severity: str
    title: str
    findings: tuple[str, ...]
    report_url: str | None = None


@dataclass(frozen=True)
class Finding:
    """One crossed threshold: its severity and the line that says so."""

    severity: str
    line: str
    lag_group: str | None = None     # for the title: the group with the largest lag
    lag_messages: int = 0


Row = Mapping[str, Any]


def evaluate(rules: AlertRules, broker: str, snapshot_id: str, check_rows: Sequence[Row],
             lag_rows: Sequence[Row], failed_expectations: Sequence[Any],
             *, now: datetime | None = None) -> Alert | None:
    """The snapshot's single alert, or None when no threshold was crossed.

    ``check_rows`` / ``lag_rows`` are rows of check_results / consumer_lag for this
    snapshot (dicts keyed by column); ``failed_expectations`` are the failed Great
    Expectations rules (dicts or records with table, rule, severity, description, observed).
    """
    for rows in (check_rows, lag_rows):
        _require_scope(rows, broker, snapshot_id)
    findings = [*lag_findings(rules, lag_rows), *lost_message_findings(rules, lag_rows),
                *check_findings(rules, check_rows),
                *expectation_findings(rules, failed_expectations)]
    if not findings:
        return None
    findings.sort(key=lambda f: SEVERITY_RANK[f.severity])  # stable: kinds keep their order
    return Alert(
        broker=broker,
        snapshot_id=snapshot_id,
        raised_at=now or datetime.now(UTC),
        severity=findings[0].severity,
        title=_title(broker, snapshot_id, findings),
        findings=tuple(f.line for f in findings),
        report_url=rules.report_url(broker, snapshot_id),
    )


def _require_scope(rows: Sequence[Row], broker: str, snapshot_id: str) -> None:
    """A row of another snapshot means the caller collected the wrong rows: say so."""
    for row in rows:
        other = (row.get("broker", broker), row.get("snapshot_id", snapshot_id))
        if other != (broker, snapshot_id):
            raise ValueError(f"row of {other[0]} {other[1]} given for {broker} {snapshot_id}")


@dataclass
class _GroupLag:
    """One group's lag summed over its queues (of the counted topic kinds)."""

    messages: int = 0
    queues: int = 0
    oldest_seconds: float | None = None
    oldest_at: str = ""
    lost: int = 0
    lost_queues: int = 0
    lost_topics: set[str] = field(default_factory=set)

    def add(self, row: Row) -> None:
        where = f"topic={row['topic']} queue={row['queue_id']}"
        messages = row.get("lag_messages") or 0
        if messages > 0:
            self.messages += messages
            self.queues += 1
        seconds = row.get("lag_seconds")
        if seconds is not None and (self.oldest_seconds is None or seconds > self.oldest_seconds):
            self.oldest_seconds, self.oldest_at = seconds, where
        if row.get("status") == "below_min":
            self.lost += row.get("lost_messages") or 0
            self.lost_queues += 1
            self.lost_topics.add(str(row["topic"]))


def group_lag(rules: AlertRules, lag_rows: Iterable[Row]) -> dict[str, _GroupLag]:
    """Per consumer group, the lag over the topic kinds the rules count."""
    groups: dict[str, _GroupLag] = {}
    for row in lag_rows:
        if row.get("topic_kind", "normal") in rules.lag_topic_kinds:
            groups.setdefault(str(row["group_name"]), _GroupLag()).add(row)
    return dict(sorted(groups.items()))


def lag_findings(rules: AlertRules, lag_rows: Iterable[Row]) -> list[Finding]:
    """A line per group and crossed lag threshold (messages, minutes)."""
    findings = []
    for group, lag in group_lag(rules, lag_rows).items():
        rule = rules.lag_rule(group)
        if rule.max_messages is not None and lag.messages > rule.max_messages:
            findings.append(Finding(
                rule.severity,
                f"lag {group}: {lag.messages:,} messages on {_count(lag.queues, 'queue')} "
                f"> {rule.max_messages:,} (rule '{rule.group}')",
                lag_group=group, lag_messages=lag.messages))
        minutes = None if lag.oldest_seconds is None else lag.oldest_seconds / 60
        if rule.max_minutes is not None and minutes is not None and minutes > rule.max_minutes:
            findings.append(Finding(
                rule.severity,
                f"lag {group}: oldest unconsumed message {_ceil_tenth(minutes):,.1f} minutes "
                f"old ({lag.oldest_at}) > {rule.max_minutes:g} minutes (rule '{rule.group}')"))
    return findings


def lost_message_findings(rules: AlertRules, lag_rows: Iterable[Row]) -> list[Finding]:
    """A line per group whose offsets fell below a queue minimum (status below_min)."""
    if not rules.lost_messages:
        return []
    return [
        Finding(ERROR,
                f"lost messages {group}: {lag.lost:,} messages deleted by retention before "
                f"the group consumed them, on {_count(lag.lost_queues, 'queue')} of "
                f"{', '.join(sorted(lag.lost_topics))} (status below_min, rule lost_messages)")
        for group, lag in group_lag(rules, lag_rows).items() if lag.lost_queues
    ]


def check_findings(rules: AlertRules, check_rows: Iterable[Row]) -> list[Finding]:
    """A line per check_results row of an alerting severity."""
    return [Finding(row["severity"], _check_line(row)) for row in check_rows
            if row["severity"] in rules.check_severities]


def _check_line(row: Row) -> str:
    details = [f"{row.get('affected') or 0:,} affected"]
    details += [f"{key} {_one_line(row[key])}" for key in ("expected", "observed")
                if row.get(key) not in (None, "")]
    if row.get("sample_offsets"):
        details.append("from offsets " + ", ".join(str(o) for o in row["sample_offsets"]))
    return (f"check {row['check_name']} [{row['severity']}] {row.get('scope') or 'broker'}: "
            f"{_one_line(row.get('explanation') or '')} ({'; '.join(details)})")


def expectation_findings(rules: AlertRules, failed: Iterable[Any]) -> list[Finding]:
    """A line per failed Great Expectations rule of an alerting severity.

    Takes dicts or records with table, rule, severity, description, observed (such as
    ``jobs.expectations.Failure``).
    """
    findings = []
    for item in failed:
        row = _as_mapping(item)
        severity = _SEVERITY_ALIASES.get(str(row.get("severity") or ERROR).lower(), ERROR)
        if severity in rules.expectation_severities:
            rule = row.get("rule") or row.get("rule_name") or "?"
            line = (f"expectation {row.get('table') or '?'}.{rule} [{severity}]: "
                    f"{_one_line(row.get('description') or '')}")
            observed = _one_line(row.get("observed") or "")
            if observed:
                prefix = "" if observed.startswith("observed") else "observed "
                line += f" ({prefix}{observed})"
            findings.append(Finding(severity, line))
    return findings


def _as_mapping(item: Any) -> Mapping[str, Any]:
    if isinstance(item, Mapping):
        return item
    if hasattr(item, "_asdict"):      # a NamedTuple
        return item._asdict()
    return vars(item)


def _title(broker: str, snapshot_id: str, findings: Sequence[Finding]) -> str:
    counts = [_count(sum(f.severity == s for f in findings), s)
              for s in SEVERITY_RANK if any(f.severity == s for f in findings)]
    lags = [f for f in findings if f.lag_group]
    if lags:
        top = max(lags, key=lambda f: f.lag_messages)
        counts.append(f"lag of {top.lag_group} {top.lag_messages:,} messages")
    return f"{broker} {snapshot_id}: {', '.join(counts)}"


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _ceil_tenth(value: float) -> float:
    """Round up to a tenth, so a value shown next to its threshold is never shown as equal."""
    return math.ceil(value * 10) / 10


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


# --------------------------------------------------------------------------- the table


def record_alert(spark: SparkSession, registry: Registry, alert: Alert,
                 delivery: Mapping[str, str]) -> None:
    """Write the alert's row, replacing any earlier row of its (broker, snapshot)."""
    from jobs import tables as T
    from jobs.delta_io import replace_where, sql_string

    table = registry.ensure(names=False)[T.ALERTS]
    schema = table.contract.spark_schema()
    row = {
        "broker": alert.broker, "snapshot_id": alert.snapshot_id,
        "raised_at": alert.raised_at, "severity": alert.severity, "title": alert.title,
        "findings": list(alert.findings), "report_url": alert.report_url,
        "channels": list(delivery), "delivery": dict(delivery),
    }
    frame = spark.createDataFrame([tuple(row[f.name] for f in schema.fields)], schema=schema)
    replace_where(frame, table.location, f"broker = {sql_string(alert.broker)} "
                                         f"AND snapshot_id = {sql_string(alert.snapshot_id)}")
    _log_alert(alert, delivery)


def _log_alert(alert: Alert, delivery: Mapping[str, str]) -> None:
    level = logging.ERROR if alert.severity == ERROR else logging.WARNING
    log.log(level, "alert %s [%s] %s; delivery %s\n  %s", alert.title, alert.severity,
            alert.report_url or "(no report link)",
            ", ".join(f"{k}={v}" for k, v in delivery.items()) or "none",
            "\n  ".join(alert.findings))


def previous_delivery(registry: Registry, broker: str, snapshot_id: str) -> dict[str, str] | None:
    """The delivery map of the snapshot's recorded alert, or None when there is none."""
    from jobs import tables as T

    rows = registry.read_rows(T.ALERTS, broker=broker, snapshot_id=snapshot_id)
    if not rows:
        return None
    delivery = rows[0]["delivery"] or {}
    return dict(delivery.items() if isinstance(delivery, Mapping) else delivery)


def recorded_alert(registry: Registry, broker: str,
                   snapshot_id: str) -> tuple[Alert, dict[str, str]] | None:
    """The snapshot's recorded alert and its delivery map, or None: what the DAG's alert
    task delivers (the check job recorded it with every channel "pending")."""
    from jobs import tables as T

    rows = registry.read_rows(T.ALERTS, broker=broker, snapshot_id=snapshot_id)
    if not rows:
        return None
    row = rows[0]
    alert = Alert(row["broker"], row["snapshot_id"], row["raised_at"], row["severity"],
                  row["title"], tuple(row["findings"] or ()), row["report_url"])
    return alert, previous_delivery(registry, broker, snapshot_id) or {}


def already_delivered(registry: Registry, broker: str, snapshot_id: str) -> bool:
    """True when the snapshot's alert is recorded and every channel said "sent".

    A channel that failed leaves this False, so the next run retries (the caller can pass
    only the failed channels, see :func:`previous_delivery`).
    """
    delivery = previous_delivery(registry, broker, snapshot_id)
    return delivery is not None and all(v == SENT for v in delivery.values())
