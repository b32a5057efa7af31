"""Alert thresholds, one summarising alert per (broker, snapshot), and the ``alerts`` table.

The reconcile job leaves a snapshot's findings in ``check_results`` and ``consumer_lag``,
the status job its ``consumer_status``; Great Expectations reports its failed rules.
:func:`evaluate` turns those (small lists of dicts the caller collected for ONE snapshot)
into at most one :class:`Alert` whose lines each say which threshold of
``config/alerts.yaml`` was crossed, with the numbers, so an operator gets one message per
night and broker instead of one per queue.

Alerts follow transitions, not nights: given the conditions of the earlier snapshots
(:func:`condition_history`, re-derived from their stored rows), a condition that is still
there is not repeated; a new one is raised, one that changed (a group going from WARN to
STOP) is raised again, one that persists gets ONE reminder once it is
``status.remind_after_days`` old, and one that cleared gets a recovery line. A condition is
keyed by what it is about (a group's status, a lag threshold of a group, a check and its
scope), so the same snapshot evaluated twice gives the same alert.
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
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

import yaml

from jobs.check.checks import TransactionRules
from jobs.check.consumer_status import RANK, STATUSES, StatusSettings
from jobs.check.replica import ReplicaRules

if TYPE_CHECKING:
    from jobs.lakehouse.tables import Registry

log = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "config" / "alerts.yaml"
ERROR, WARNING = "error", "warning"
INFO = "info"
SEVERITY_RANK = {ERROR: 0, WARNING: 1}          # what a threshold can be configured as
ALERT_RANK = {ERROR: 0, WARNING: 1, INFO: 2}    # an alert of recoveries only is info
TOPIC_KINDS = ("normal", "retry", "dlq", "system")
EMAIL, WEBHOOK = "email", "webhook"
SENT = "sent"
PENDING = "pending"
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
    status: StatusRules = field(default_factory=lambda: StatusRules())
    replica: ReplicaRules = field(default_factory=lambda: ReplicaRules())
    transactions: TransactionRules = field(default_factory=lambda: TransactionRules())
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


@dataclass(frozen=True)
class StatusRules:
    """``status`` in config/alerts.yaml: the consumer-status window (``settings``), which
    statuses alert, the one reminder, the groups left out."""

    settings: StatusSettings = field(default_factory=StatusSettings)
    alert_from: str = "WARN"
    remind_after_days: float | None = 3.0
    ignore_groups: tuple[str, ...] = ("CID_RMQ_SYS_*",)

    def alerts_on(self, group: str, status: str) -> bool:
        return (RANK[status] >= RANK[self.alert_from]
                and not any(fnmatchcase(group, pattern) for pattern in self.ignore_groups))


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
                        "report", "channels", "status", "replica", "transactions"),
                        required=("version", "lag"))
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
        status=_parse_status(keys["status"]) if "status" in keys else StatusRules(),
        replica=_parse_replica(keys["replica"]) if "replica" in keys else ReplicaRules(),
        transactions=_parse_transactions(keys["transactions"]) if "transactions" in keys
        else TransactionRules(),
        source=top.file,
    )


def _parse_status(node: _Node) -> StatusRules:
    keys = node.mapping(("window", "ok_lag_messages", "alert_from", "remind_after_days",
                         "ignore_groups"))
    default = StatusRules()
    window = keys["window"].number(integer=True) if "window" in keys else \
        default.settings.window
    if window < 1:
        keys["window"].fail("a window holds at least 1 snapshot")
    alert_from = keys["alert_from"].text() if "alert_from" in keys else default.alert_from
    if alert_from not in STATUSES or alert_from == "OK":
        keys["alert_from"].fail(f"{alert_from!r}: choose one of {', '.join(STATUSES[1:])}")
    remind = default.remind_after_days
    if "remind_after_days" in keys:
        remind = None if keys["remind_after_days"].value is None else \
            float(keys["remind_after_days"].number(integer=False))
    return StatusRules(
        settings=StatusSettings(
            window=int(window),
            ok_lag_messages=int(keys["ok_lag_messages"].number(integer=True))
            if "ok_lag_messages" in keys else default.settings.ok_lag_messages),
        alert_from=alert_from,
        remind_after_days=remind,
        ignore_groups=tuple(item.text() for item in keys["ignore_groups"].items())
        if "ignore_groups" in keys else default.ignore_groups,
    )


def _parse_replica(node: _Node) -> ReplicaRules:
    keys = node.mapping(("max_lag_bytes", "max_lag_seconds", "offsets_sync_seconds",
                         "severity"))
    default = ReplicaRules()
    severity = keys["severity"].text() if "severity" in keys else default.severity
    if severity not in SEVERITY_RANK:
        keys["severity"].fail(f"{severity!r}: choose one of {', '.join(SEVERITY_RANK)}")

    def number(key: str, fallback: float, integer: bool) -> float:
        if key not in keys:
            return fallback
        value = keys[key].number(integer=integer)
        if value < 0:
            keys[key].fail("must be >= 0")
        return value

    return ReplicaRules(
        max_lag_bytes=int(number("max_lag_bytes", default.max_lag_bytes, True)),
        max_lag_seconds=float(number("max_lag_seconds", default.max_lag_seconds, False)),
        offsets_sync_seconds=float(number("offsets_sync_seconds", default.offsets_sync_seconds,
                                          False)),
        severity=severity)


def _parse_transactions(node: _Node) -> TransactionRules:
    keys = node.mapping(("max_pending_minutes", "severity"))
    default = TransactionRules()
    severity = keys["severity"].text() if "severity" in keys else default.severity
    if severity not in SEVERITY_RANK:
        keys["severity"].fail(f"{severity!r}: choose one of {', '.join(SEVERITY_RANK)}")
    minutes = default.max_pending_minutes
    if "max_pending_minutes" in keys:
        minutes = float(keys["max_pending_minutes"].number(integer=False))
        if minutes < 0:
            keys["max_pending_minutes"].fail("must be >= 0")
    return TransactionRules(max_pending_minutes=minutes, severity=severity)


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
    """One crossed threshold: its severity and the line that says so.

    ``key`` names what it is about and stays the same while the condition lasts (a group's
    status, a lag threshold of a group, a check and its scope); ``state`` changes when the
    condition changes without clearing (a group going from WARN to STOP)."""

    severity: str
    line: str
    lag_group: str | None = None     # for the title: the group with the largest lag
    lag_messages: int = 0
    key: str = ""
    state: str = ""


Row = Mapping[str, Any]


def evaluate(rules: AlertRules, broker: str, snapshot_id: str, check_rows: Sequence[Row],
             lag_rows: Sequence[Row], failed_expectations: Sequence[Any],
             *, status_rows: Sequence[Row] = (), taken_at: datetime | None = None,
             history: Sequence[Conditions] | None = None,
             now: datetime | None = None) -> Alert | None:
    """The snapshot's single alert, or None when there is nothing to say.

    ``check_rows`` / ``lag_rows`` / ``status_rows`` are rows of check_results /
    consumer_lag / consumer_status for this snapshot (dicts keyed by column);
    ``failed_expectations`` are the failed Great Expectations rules (dicts or records with
    table, rule, severity, description, observed). ``history``: the conditions of the
    earlier snapshots, oldest first (:func:`condition_history`); with it the alert says
    only what changed since the previous snapshot (see :func:`transitions`), without it
    every crossed threshold is listed.
    """
    for rows in (check_rows, lag_rows, status_rows):
        _require_scope(rows, broker, snapshot_id)
    findings = [*snapshot_findings(rules, check_rows, lag_rows, status_rows),
                *expectation_findings(rules, failed_expectations)]
    if history is not None:
        current = Conditions(snapshot_id, taken_at or now or datetime.now(UTC),
                             by_key(findings))
        findings = transitions(rules, current, history)
    if not findings:
        return None
    findings.sort(key=lambda f: ALERT_RANK[f.severity])  # stable: kinds keep their order
    return Alert(
        broker=broker,
        snapshot_id=snapshot_id,
        raised_at=now or datetime.now(UTC),
        severity=findings[0].severity,
        title=title(broker, snapshot_id, findings),
        findings=tuple(f.line for f in findings),
        report_url=rules.report_url(broker, snapshot_id),
    )


def snapshot_findings(rules: AlertRules, check_rows: Iterable[Row], lag_rows: Sequence[Row],
                      status_rows: Sequence[Row]) -> list[Finding]:
    """What the stored rows of one snapshot cross (everything but Great Expectations, whose
    results are not in a table): with consumer_status rows, LOST is a group status."""
    lost = status_findings(rules, status_rows) if status_rows else \
        lost_message_findings(rules, lag_rows)
    return [*lag_findings(rules, lag_rows), *lost, *check_findings(rules, check_rows)]


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
    oldest_queue: tuple[str, int] = ("", 0)  # (topic, queue) of oldest_at: ties go to the first
    lost: int = 0
    lost_queues: int = 0
    lost_topics: set[str] = field(default_factory=set)

    def add(self, row: Row) -> None:
        where = f"topic={row['topic']} queue={row['queue_id']}"
        messages = row.get("lag_messages") or 0
        if messages > 0:
            self.messages += messages
            self.queues += 1
        seconds, queue = row.get("lag_seconds"), (str(row["topic"]), int(row["queue_id"]))
        # The oldest queue; of queues equally old, the first by topic and queue id, so that
        # the alert's text does not depend on the order the rows were read in.
        if seconds is not None and (self.oldest_seconds is None or seconds > self.oldest_seconds
                                    or (seconds == self.oldest_seconds
                                        and queue < self.oldest_queue)):
            self.oldest_seconds, self.oldest_at, self.oldest_queue = seconds, where, queue
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
                f"lag {group}: {lag.messages:,} messages on {plural(lag.queues, 'queue')} "
                f"> {rule.max_messages:,} (rule '{rule.group}')",
                lag_group=group, lag_messages=lag.messages, key=f"lag-messages {group}"))
        minutes = None if lag.oldest_seconds is None else lag.oldest_seconds / 60
        if rule.max_minutes is not None and minutes is not None and minutes > rule.max_minutes:
            findings.append(Finding(
                rule.severity,
                f"lag {group}: oldest unconsumed message {_ceil_tenth(minutes):,.1f} minutes "
                f"old ({lag.oldest_at}) > {rule.max_minutes:g} minutes (rule '{rule.group}')",
                key=f"lag-minutes {group}"))
    return findings


def lost_message_findings(rules: AlertRules, lag_rows: Iterable[Row]) -> list[Finding]:
    """A line per group whose offsets fell below a queue minimum (status below_min)."""
    if not rules.lost_messages:
        return []
    return [
        Finding(ERROR,
                f"lost messages {group}: {lag.lost:,} messages deleted by retention before "
                f"the group consumed them, on {plural(lag.lost_queues, 'queue')} of "
                f"{', '.join(sorted(lag.lost_topics))} (status below_min, rule lost_messages)",
                key=f"status {group}", state="LOST")
        for group, lag in group_lag(rules, lag_rows).items() if lag.lost_queues
    ]


def check_findings(rules: AlertRules, check_rows: Iterable[Row]) -> list[Finding]:
    """A line per check_results row of an alerting severity, by check and scope: the rows
    come from a table in no set order, and an alert must read the same for the same rows
    (a re-check compares it with the recorded one before sending it again)."""
    rows = sorted((row for row in check_rows if row["severity"] in rules.check_severities),
                  key=lambda row: (str(row["check_name"]), str(row.get("scope") or "")))
    return [Finding(row["severity"], check_line(row),
                    key=f"check {row['check_name']} {row.get('scope') or 'broker'}")
            for row in rows]


def check_line(row: Row) -> str:
    details = [f"{row.get('affected') or 0:,} affected"]
    details += [f"{key} {one_line(row[key])}" for key in ("expected", "observed")
                if row.get(key) not in (None, "")]
    if row.get("sample_offsets"):
        details.append("from offsets " + ", ".join(str(o) for o in row["sample_offsets"]))
    return (f"check {row['check_name']} [{row['severity']}] {row.get('scope') or 'broker'}: "
            f"{one_line(row.get('explanation') or '')} ({'; '.join(details)})")


def expectation_findings(rules: AlertRules, failed: Iterable[Any]) -> list[Finding]:
    """A line per failed Great Expectations rule of an alerting severity.

    Takes dicts or records with table, rule, severity, description, observed (such as
    ``jobs.check.expectations.Failure``).
    """
    findings = []
    for item in failed:
        row = _as_mapping(item)
        severity = _SEVERITY_ALIASES.get(str(row.get("severity") or ERROR).lower(), ERROR)
        if severity in rules.expectation_severities:
            rule = row.get("rule") or row.get("rule_name") or "?"
            line = (f"expectation {row.get('table') or '?'}.{rule} [{severity}]: "
                    f"{one_line(row.get('description') or '')}")
            observed = one_line(row.get("observed") or "")
            if observed:
                prefix = "" if observed.startswith("observed") else "observed "
                line += f" ({prefix}{observed})"
            findings.append(Finding(severity, line, key=f"expectation {row.get('table')}.{rule}"))
    return findings


def _as_mapping(item: Any) -> Mapping[str, Any]:
    if isinstance(item, Mapping):
        return item
    if hasattr(item, "_asdict"):      # a NamedTuple
        return item._asdict()
    return vars(item)


def title(broker: str, snapshot_id: str, findings: Sequence[Finding]) -> str:
    counts = [plural(sum(f.severity == s for f in findings), s)
              for s in SEVERITY_RANK if any(f.severity == s for f in findings)]
    recovered = sum(f.severity == INFO for f in findings)
    if recovered:
        counts.append(f"{recovered:,} recovered")
    lags = [f for f in findings if f.lag_group]
    if lags:
        top = max(lags, key=lambda f: f.lag_messages)
        counts.append(f"lag of {top.lag_group} {top.lag_messages:,} messages")
    return f"{broker} {snapshot_id}: {', '.join(counts)}"


def plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _ceil_tenth(value: float) -> float:
    """Round up to a tenth, so a value shown next to its threshold is never shown as equal."""
    return math.ceil(value * 10) / 10


def one_line(value: object) -> str:
    return " ".join(str(value).split())


# --------------------------------------------------------------------------- statuses

#: The severity a consumer status alerts with.
STATUS_SEVERITY = {"WARN": WARNING, "REWIND": WARNING, "STALL": ERROR, "STOP": ERROR,
                   "LOST": ERROR}
MAX_QUEUES_NAMED = 8


def status_findings(rules: AlertRules, status_rows: Iterable[Row]) -> list[Finding]:
    """A line per group whose status (its worst queue, consumer_status level group) alerts:
    the status, its queues, lag, lost messages, catch-up estimate and why."""
    findings = []
    for row in sorted(status_rows, key=lambda row: str(row["group_name"])):  # in no set order
        group, status = str(row["group_name"]), str(row["status"])
        if row.get("level") != "group" or not rules.status.alerts_on(group, status):
            continue
        if status == "LOST" and not rules.lost_messages:
            continue
        findings.append(Finding(STATUS_SEVERITY[status], _status_line(row), key=f"status {group}",
                                state=status))
    return findings


def _status_line(row: Row) -> str:
    queues = list(row.get("queues") or ())
    named = ", ".join(queues[:MAX_QUEUES_NAMED]) + (
        f" and {len(queues) - MAX_QUEUES_NAMED} more" if len(queues) > MAX_QUEUES_NAMED else "")
    numbers = [f"lag {row['lag_messages']:,} messages (Diff Total {row['broker_diff']:,})"]
    if row.get("lost_messages"):
        numbers.append(f"{row['lost_messages']:,} messages lost to retention")
    if row.get("lag_seconds") is not None:
        numbers.append(f"oldest unconsumed {_ceil_tenth(row['lag_seconds'] / 60):,.1f} minutes old")
    numbers.append(catch_up_text(row))
    return (f"status {row['group_name']}: {row['status']} on {plural(len(queues), 'queue')} "
            f"({named}): {'; '.join(numbers)}; {one_line(row.get('reason') or '')}")


def catch_up_text(row: Row) -> str:
    """The catch-up estimate in words: caught up, in N hours (at ...), never, unknown."""
    kind = row.get("catch_up")
    if kind == "now":
        return "caught up"
    if kind == "eta" and row.get("catch_up_seconds") is not None:
        at = row.get("catch_up_at")
        when = f" (at {at:%Y-%m-%d %H:%M} UTC)" if isinstance(at, datetime) else ""
        return f"catches up in {_duration(float(row['catch_up_seconds']))}{when}"
    if kind == "never":
        return ("never catches up at the window's rates (consumes "
                f"{row.get('consume_rate_per_s') or 0:,.2f}/s, produced "
                f"{row.get('produce_rate_per_s') or 0:,.2f}/s)")
    return "catch-up unknown (one snapshot in the window)"


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= size:
            return f"{seconds / size:,.1f} {unit}"
    return f"{seconds:,.0f} seconds"


# --------------------------------------------------------------------------- transitions


@dataclass(frozen=True)
class Conditions:
    """What one snapshot crossed, by condition key."""

    snapshot_id: str
    taken_at: datetime | None
    findings: Mapping[str, Finding]


def by_key(findings: Iterable[Finding]) -> dict[str, Finding]:
    keyed: dict[str, Finding] = {}
    for finding in findings:
        key = finding.key or finding.line
        if key in keyed:  # two lines about one thing (never today): keep both visible
            key = f"{key} | {finding.line}"
        keyed[key] = finding
    return keyed


def transitions(rules: AlertRules, current: Conditions,
                history: Sequence[Conditions]) -> list[Finding]:
    """The lines this snapshot's alert carries, given the earlier snapshots (oldest first):

    * a condition absent from the previous snapshot: its line, as without history;
    * one whose state changed (WARN -> STOP): its line, ``(was WARN)`` appended;
    * one that persists: nothing, except ONE reminder when it turns
      ``status.remind_after_days`` old (it was younger at the previous snapshot);
    * one of the previous snapshot that is gone: a recovery line (severity info).
    """
    previous = history[-1] if history else None
    if previous is None:
        return list(current.findings.values())
    out = []
    for key, finding in current.findings.items():
        before = previous.findings.get(key)
        if before is None:
            out.append(finding)
        elif before.state != finding.state:
            out.append(_with(finding, f"{finding.line} (was {before.state or 'raised'})"))
        else:
            since = _since(key, finding, current, history)
            if _reminder_due(rules, since, current.taken_at, previous.taken_at):
                assert since is not None and current.taken_at is not None
                days = (current.taken_at - since).total_seconds() / 86400
                out.append(_with(finding, f"reminder, still so since {since:%Y-%m-%d %H:%M} "
                                          f"UTC ({days:,.1f} days): {finding.line}"))
    for key, before in previous.findings.items():
        if key not in current.findings:
            out.append(Finding(INFO, _recovery_line(before), key=key, state="OK"))
    return out


def _with(finding: Finding, line: str) -> Finding:
    return Finding(finding.severity, line, finding.lag_group, finding.lag_messages,
                   finding.key, finding.state)


def _since(key: str, finding: Finding, current: Conditions,
           history: Sequence[Conditions]) -> datetime | None:
    """When the condition began: the oldest snapshot of the unbroken run holding it in the
    same state, ending now."""
    since = current.taken_at
    for earlier in reversed(history):
        other = earlier.findings.get(key)
        if other is None or other.state != finding.state:
            break
        since = earlier.taken_at
    return since


def _reminder_due(rules: AlertRules, since: datetime | None, now: datetime | None,
                  previous: datetime | None) -> bool:
    days = rules.status.remind_after_days
    if days is None or since is None or now is None or previous is None:
        return False
    age = timedelta(days=days)
    return now - since >= age > previous - since


def _recovery_line(before: Finding) -> str:
    what = before.key.split(" ", 1)
    if what[0] == "status":
        return f"recovered {what[1]}: no longer {before.state} (now below the alerting status)"
    return f"cleared: {before.line}"


def condition_history(registry: Registry, rules: AlertRules, broker: str,
                      snapshot_id: str) -> list[Conditions]:
    """The conditions of the checked snapshots before ``snapshot_id``, oldest first, back
    to one snapshot older than the reminder horizon (so a condition's start is known when
    a reminder can fall due), re-derived from their stored rows. Great Expectations
    results are not stored per snapshot, so they are not part of it
    (docs/checks-and-alerts.md)."""
    from jobs.check.consumer_status import checked_snapshots, rows_newest_first
    from jobs.lakehouse import tables as T

    earlier = [s for s in checked_snapshots(registry, broker, snapshot_id)
               if s.snapshot_id != snapshot_id]
    days = rules.status.remind_after_days
    # a reminder is due when a condition is old enough now but was not at the previous
    # snapshot: its start must be known back to (previous snapshot - remind_after_days)
    horizon = earlier[-1].taken_at - timedelta(days=days) \
        if earlier and days is not None and earlier[-1].taken_at is not None else None
    history: list[Conditions] = []
    for snap, read in rows_newest_first(registry, (T.CHECK_RESULTS, T.CONSUMER_LAG,
                                                   T.CONSUMER_STATUS), broker, earlier[::-1]):
        if not read[T.CONSUMER_LAG] and not read[T.CHECK_RESULTS]:
            continue  # never checked: no conditions known, not "all clear"
        history.insert(0, Conditions(snap.snapshot_id, snap.taken_at, by_key(snapshot_findings(
            rules, read[T.CHECK_RESULTS], read[T.CONSUMER_LAG], read[T.CONSUMER_STATUS]))))
        if horizon is None or snap.taken_at is None or snap.taken_at <= horizon \
                or len(history) >= MAX_HISTORY:
            break
    return history


MAX_HISTORY = 60


# --------------------------------------------------------------------------- the table


def record_alert(registry: Registry, alert: Alert, delivery: Mapping[str, str]) -> None:
    """Write the alert's row, replacing any earlier row of its (broker, snapshot)."""
    from jobs.lakehouse import tables as T

    row = {
        "broker": alert.broker, "snapshot_id": alert.snapshot_id,
        "raised_at": alert.raised_at, "severity": alert.severity, "title": alert.title,
        "findings": list(alert.findings), "report_url": alert.report_url,
        "channels": list(delivery), "delivery": dict(delivery),
    }
    registry.replace_rows(T.ALERTS, [row], broker=alert.broker, snapshot_id=alert.snapshot_id)
    _log_alert(alert, delivery)


def keep_delivered(registry: Registry, rules: AlertRules,
               alert: Alert) -> tuple[Alert, dict[str, str]]:
    """The alert to record and its delivery map: every channel "pending", unless this
    snapshot already has the very same alert recorded. Then it is kept as it was (raised_at
    and what each channel answered), so checking a snapshot again never sends it twice."""
    delivery = dict.fromkeys(rules.channels.names(), PENDING)
    recorded = recorded_alert(registry, alert.broker, alert.snapshot_id)
    if recorded is None or recorded[0].findings != alert.findings:
        return alert, delivery
    before, answered = recorded
    delivery.update({channel: status for channel, status in answered.items()
                     if channel in delivery})
    return before, delivery


def alert_lines(alert: Alert | None) -> list[str]:
    """An alert as the lines of a one-screen summary (the CLI's, the task log's)."""
    if alert is None:
        return ["alert: none (no threshold crossed)"]
    return [f"alert [{alert.severity}]: {alert.title}",
            *(f"  - {finding}" for finding in alert.findings)]


def _log_alert(alert: Alert, delivery: Mapping[str, str]) -> None:
    level = logging.ERROR if alert.severity == ERROR else logging.WARNING
    log.log(level, "alert %s [%s] %s; delivery %s\n  %s", alert.title, alert.severity,
            alert.report_url or "(no report link)",
            ", ".join(f"{k}={v}" for k, v in delivery.items()) or "none",
            "\n  ".join(alert.findings))


def previous_delivery(registry: Registry, broker: str, snapshot_id: str) -> dict[str, str] | None:
    """The delivery map of the snapshot's recorded alert, or None when there is none."""
    from jobs.lakehouse import tables as T

    rows = registry.read_rows(T.ALERTS, broker=broker, snapshot_id=snapshot_id)
    if not rows:
        return None
    delivery = rows[0]["delivery"] or {}
    return dict(delivery.items() if isinstance(delivery, Mapping) else delivery)


def recorded_alert(registry: Registry, broker: str,
                   snapshot_id: str) -> tuple[Alert, dict[str, str]] | None:
    """The snapshot's recorded alert and its delivery map, or None: what the DAG's alert
    task delivers (the check job recorded it with every channel "pending")."""
    from jobs.lakehouse import tables as T

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
