"""Deliver a snapshot's alert (``jobs.alerts.evaluation.Alert``) by e-mail and a
Slack-compatible webhook.

Uses Airflow's own notifiers, ``SmtpNotifier`` and ``SlackWebhookNotifier``, so the
connections, TLS settings and retries are Airflow's: ``config/alerts.yaml`` names the
connection ids, the connections themselves (host, port, password, webhook URL) come from
Airflow (``AIRFLOW_CONN_<ID>`` or a secrets backend), never from our config.

Both notifiers also work outside a running task: outside the task SDK's supervisor the
connection lookup falls back to environment variables and configured secrets backends
(not the metadata database), and ``notifier(context)`` only needs a dict to render its
template fields. The alert's text is data, not a template, so it is passed wrapped in
``airflow.sdk.literal``: a ``{{`` in a check's explanation is sent as written.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Collection, Mapping
from typing import Any

from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier
from airflow.providers.smtp.notifications.smtp import SmtpNotifier
from airflow.sdk import BaseNotifier, literal

from jobs.alerts.evaluation import (
    EMAIL,
    SENT,
    WEBHOOK,
    Alert,
    AlertRules,
    EmailChannel,
    WebhookChannel,
)

log = logging.getLogger(__name__)

SLACK_MAX_FINDINGS = 40        # Slack allows 50 blocks per message; the rest is in the table
SLACK_SECTION_CHARS = 3000     # Slack's limit for a section's text
SLACK_HEADER_CHARS = 150       # ... and for a header's
SLACK_TEXT_CHARS = 3000        # the notification text (fallback), kept short on purpose
WEBHOOK_TIMEOUT_S = 30
ERROR_CHARS = 500


def deliver(alert: Alert, rules: AlertRules, *, only: Collection[str] | None = None,
            context: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Send ``alert`` on every configured channel (or those in ``only``).

    Returns ``{channel: "sent" | error text}``; a failing channel never stops the others,
    its error is returned for the ``alerts.delivery`` column. ``context`` is the task's
    Airflow context when run inside a task; an empty one is enough.
    """
    results = {}
    for name, notifier in build_notifiers(alert, rules).items():
        if only is None or name in only:
            results[name] = _send(notifier, alert, name, _conn_id(rules, name), context or {})
    return results


def build_notifiers(alert: Alert, rules: AlertRules) -> dict[str, BaseNotifier]:
    """One Airflow notifier per enabled channel, in delivery order."""
    notifiers: dict[str, BaseNotifier] = {}
    if rules.channels.email is not None:
        notifiers[EMAIL] = email_notifier(alert, rules.channels.email)
    if rules.channels.webhook is not None:
        notifiers[WEBHOOK] = webhook_notifier(alert, rules.channels.webhook)
    return notifiers


def _conn_id(rules: AlertRules, name: str) -> str:
    """The Airflow connection behind a channel, named in its errors (SmtpHook omits it)."""
    channels = rules.channels
    if name == EMAIL and channels.email is not None:
        return channels.email.smtp_conn_id
    if name == WEBHOOK and channels.webhook is not None:
        return channels.webhook.conn_id
    return ""


def _send(notifier: BaseNotifier, alert: Alert, name: str, conn_id: str,
          context: Mapping[str, Any]) -> str:
    """"sent", or the one-line error (naming the connection) that stopped this channel."""
    try:
        notifier(dict(context))  # BaseNotifier.__call__: render template fields, notify()
    except Exception as exc:
        error = " ".join(f"{type(exc).__name__}: {exc}".split())
        if conn_id not in error:
            error += f" (connection {conn_id})"
        error = error[:ERROR_CHARS]
        log.warning("alert %s %s: %s not delivered: %s", alert.broker, alert.snapshot_id,
                    name, error)
        return error
    log.info("alert %s %s: %s sent", alert.broker, alert.snapshot_id, name)
    return SENT


# --------------------------------------------------------------------------- e-mail


def email_notifier(alert: Alert, channel: EmailChannel) -> SmtpNotifier:
    """Airflow's SmtpNotifier with our subject and HTML body (SmtpHook sends HTML only)."""
    return SmtpNotifier(
        to=list(channel.to),
        from_email=channel.from_address,
        subject=literal(email_subject(alert)),
        html_content=literal(email_html(alert)),
        smtp_conn_id=channel.smtp_conn_id,
    )


def email_subject(alert: Alert) -> str:
    return f"[rmq {alert.severity}] {alert.title}"


def email_html(alert: Alert) -> str:
    """The findings as a list, one crossed threshold per item, and the report link."""
    esc = html.escape
    items = "\n".join(f"<li>{esc(line)}</li>" for line in alert.findings)
    link = (f'<p><a href="{esc(alert.report_url)}">Open the snapshot report</a></p>'
            if alert.report_url else "<p>No report link configured.</p>")
    return (
        "<html><body>\n"
        f"<h2>{esc(alert.title)}</h2>\n"
        f"<p>{esc(_facts(alert))}</p>\n"
        f'<ul style="font-family: monospace">\n{items}\n</ul>\n'
        f"{link}\n"
        "<p><small>Thresholds: config/alerts.yaml. Every alert is also in rmq.alerts."
        "</small></p>\n"
        "</body></html>\n"
    )


def _facts(alert: Alert) -> str:
    return (f"Severity {alert.severity} · broker {alert.broker} · snapshot "
            f"{alert.snapshot_id} · {len(alert.findings):,} findings · raised "
            f"{alert.raised_at:%Y-%m-%d %H:%M:%S} UTC")


# --------------------------------------------------------------------------- webhook


def webhook_notifier(alert: Alert, channel: WebhookChannel) -> SlackWebhookNotifier:
    """Airflow's SlackWebhookNotifier: any endpoint taking Slack's JSON (text + blocks)."""
    text, blocks = slack_message(alert)
    return SlackWebhookNotifier(
        slack_webhook_conn_id=channel.conn_id,
        text=literal(text),
        blocks=literal(blocks),
        timeout=WEBHOOK_TIMEOUT_S,
    )


def slack_message(alert: Alert) -> tuple[str, list[dict[str, Any]]]:
    """Slack's ``text`` (notification fallback) and ``blocks``, within Slack's limits.

    Findings go in plain_text blocks: names like ``G_*`` or ``%RETRY%G_A`` would
    otherwise be read as mrkdwn emphasis.
    """
    shown = [line[:SLACK_SECTION_CHARS - 10] for line in alert.findings[:SLACK_MAX_FINDINGS]]
    hidden = len(alert.findings) - len(shown)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": _plain(alert.title[:SLACK_HEADER_CHARS])},
        {"type": "context", "elements": [_plain(_facts(alert))]},
    ]
    blocks += [{"type": "section", "text": _plain(chunk)}
               for chunk in _chunks([f"• {line}" for line in shown], SLACK_SECTION_CHARS)]
    if hidden:
        blocks.append({"type": "context", "elements": [_plain(
            f"… and {hidden:,} more findings in rmq.alerts and the report")]})
    if alert.report_url:
        blocks.append({"type": "section", "text": {
            "type": "mrkdwn", "text": f"<{alert.report_url}|Open the snapshot report>"}})
    return _fallback_text(alert), blocks


def _fallback_text(alert: Alert) -> str:
    lines = [alert.title, *(f"• {line}" for line in alert.findings)]
    text = "\n".join(_chunks(lines, SLACK_TEXT_CHARS)[:1])
    if len(text.splitlines()) < len(lines):
        text += "\n…"
    if alert.report_url:
        text += f"\n{alert.report_url}"
    return _mrkdwn(text)


def _chunks(lines: list[str], limit: int) -> list[str]:
    """Join lines into texts of at most ``limit`` characters (a longer line is cut)."""
    chunks: list[str] = []
    for line in lines:
        if chunks and len(chunks[-1]) + 1 + len(line) <= limit:
            chunks[-1] += "\n" + line
        else:
            chunks.append(line[:limit])
    return chunks


def _plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": False}


def _mrkdwn(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
