"""Alert delivery through Airflow's SmtpNotifier and SlackWebhookNotifier, to real servers.

A real SMTP server (aiosmtpd) and a real HTTP server (http.server, standing in for a
Slack-compatible webhook) listen on 127.0.0.1; the Airflow connections come from
AIRFLOW_CONN_<ID> environment variables (URI form for SMTP, JSON form for the webhook),
and AIRFLOW_HOME is a temporary directory, so nothing touches the user's home.
"""

from __future__ import annotations

import email
import html
import json
import logging
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from email.message import Message
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from endpoints import (
    Mailbox,
    free_port,
    smtp_connection,
    start_webhook,
    webhook_connection,
)

from jobs.alerts.evaluation import (
    Alert,
    AlertRules,
    Channels,
    EmailChannel,
    LagRule,
    WebhookChannel,
)

ROOT = Path(__file__).resolve().parent.parent
SMTP_CONN, WEBHOOK_CONN = "test_alerts_smtp", "test_alerts_webhook"
RECIPIENTS = ("ops@example.org", "dba@example.org")
RULES = AlertRules(
    lag_rules=(LagRule("*", 10_000),),
    channels=Channels(EmailChannel(SMTP_CONN, "rmq@example.org", RECIPIENTS),
                      WebhookChannel(WEBHOOK_CONN)),
)
ALERT = Alert(
    broker="broker-a", snapshot_id="2026-11-23",
    raised_at=datetime(2026, 11, 23, 2, 5, tzinfo=UTC), severity="error",
    title="broker-a 2026-11-23: 2 errors, 1 warning, lag of G_ORDERS 12,345 messages",
    findings=(
        "lost messages G_AUDIT: 1,200 messages deleted by retention before the group "
        "consumed them, on 1 queue of AUDIT (status below_min, rule lost_messages)",
        "check cq_unit_matches_record [error] topic=T queue=0: 3 units point at records "
        "of another topic (3 affected; expected topic T; observed topic U)",
        "lag G_ORDERS: 12,345 messages on 4 queues > 10,000 (rule 'G_*')",
    ),
    report_url="https://reports.example.org/rmq/broker-a/2026-11-23.html",
)


@pytest.fixture(scope="module")
def notifiers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """dags.notifiers, imported with AIRFLOW_HOME in a temporary directory.

    Importing Airflow adds a root log handler on the sys.stdout of that moment (pytest's
    capture, closed later) and sets the root level to INFO; both are undone afterwards so
    the rest of the session (e.g. py4j logging at exit) is unaffected.
    """
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow_home")))
        if str(ROOT) not in sys.path:
            patch.syspath_prepend(str(ROOT))     # dags/ is not an installed package
        from dags import notifiers as module

        yield module
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def smtp_server() -> Iterator[tuple[int, Mailbox]]:
    mailbox = Mailbox()
    port = free_port()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield port, mailbox
    controller.stop()


@pytest.fixture
def webhook_server() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    server, received = start_webhook()
    yield server.server_address[1], received
    server.shutdown()
    server.server_close()


def use_smtp(patch: pytest.MonkeyPatch, port: int) -> None:
    """The SMTP connection in URI form; plain SMTP (no SSL, no STARTTLS) on 127.0.0.1."""
    patch.setenv(f"AIRFLOW_CONN_{SMTP_CONN.upper()}", smtp_connection(port))


def use_webhook(patch: pytest.MonkeyPatch, port: int) -> None:
    """The webhook connection in JSON form; the whole URL in the password, as Slack's."""
    patch.setenv(f"AIRFLOW_CONN_{WEBHOOK_CONN.upper()}", webhook_connection(port))


def the_email(mailbox: Mailbox) -> tuple[Any, Message, str]:
    """The single envelope, its parsed message and its HTML body."""
    assert len(mailbox.envelopes) == 1
    envelope = mailbox.envelopes[0]
    message = email.message_from_bytes(envelope.content)
    part = next(p for p in message.walk() if p.get_content_type() == "text/html")
    return envelope, message, part.get_payload(decode=True).decode(part.get_content_charset())


def slack_unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def test_alert_goes_to_both_servers(notifiers: ModuleType, smtp_server, webhook_server,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    smtp_port, mailbox = smtp_server
    hook_port, received = webhook_server
    use_smtp(monkeypatch, smtp_port)
    use_webhook(monkeypatch, hook_port)

    assert notifiers.deliver(ALERT, RULES) == {"email": "sent", "webhook": "sent"}

    envelope, message, body = the_email(mailbox)
    assert envelope.mail_from == "rmq@example.org"
    assert envelope.rcpt_tos == list(RECIPIENTS)
    assert message["Subject"] == f"[rmq error] {ALERT.title}"
    assert message["To"] == ", ".join(RECIPIENTS)
    items = [html.unescape(i) for i in re.findall(r"<li>(.*?)</li>", body)]
    assert items == list(ALERT.findings)
    assert "12,345 messages on 4 queues &gt; 10,000 (rule &#x27;G_*&#x27;)" in body
    assert f'<a href="{ALERT.report_url}">' in body

    assert len(received) == 1
    request = received[0]
    assert request["path"] == "/services/T000/B000/XXXX"
    assert request["content_type"].startswith("application/json")
    payload = request["json"]
    assert slack_unescape(payload["text"]).splitlines()[0] == ALERT.title
    assert "12,345 messages on 4 queues &gt; 10,000" in payload["text"]
    blocks = payload["blocks"]
    assert blocks[0] == {"type": "header", "text": {"type": "plain_text", "text": ALERT.title,
                                                    "emoji": False}}
    sections = [b["text"] for b in blocks if b["type"] == "section"]
    assert sections[0]["type"] == "plain_text"       # no mrkdwn: G_* is not emphasis
    assert sections[0]["text"].splitlines() == [f"• {finding}" for finding in ALERT.findings]
    assert sections[-1]["type"] == "mrkdwn"
    sections = [section["text"] for section in sections]
    assert sections[-1] == f"<{ALERT.report_url}|Open the snapshot report>"


def test_dead_webhook_is_reported_and_email_still_sent(
        notifiers: ModuleType, smtp_server, monkeypatch: pytest.MonkeyPatch) -> None:
    smtp_port, mailbox = smtp_server
    use_smtp(monkeypatch, smtp_port)
    use_webhook(monkeypatch, free_port())

    delivery = notifiers.deliver(ALERT, RULES)

    assert delivery["email"] == "sent"
    assert delivery["webhook"].startswith("URLError:")
    assert "Connection refused" in delivery["webhook"]
    the_email(mailbox)


def test_dead_smtp_is_reported_and_webhook_still_sent(
        notifiers: ModuleType, webhook_server, monkeypatch: pytest.MonkeyPatch) -> None:
    hook_port, received = webhook_server
    use_smtp(monkeypatch, free_port())
    use_webhook(monkeypatch, hook_port)

    delivery = notifiers.deliver(ALERT, RULES)

    assert delivery["webhook"] == "sent" and len(received) == 1
    assert delivery["email"].startswith("ConnectionRefusedError:")


def test_webhook_refusing_the_payload_is_an_error(
        notifiers: ModuleType, smtp_server, monkeypatch: pytest.MonkeyPatch) -> None:
    server, received = start_webhook(status=400)
    try:
        use_smtp(monkeypatch, smtp_server[0])
        use_webhook(monkeypatch, server.server_address[1])
        delivery = notifiers.deliver(ALERT, RULES)
    finally:
        server.shutdown()
        server.server_close()
    assert len(received) == 1
    assert delivery["email"] == "sent"
    assert "Status Code: 400" in delivery["webhook"]
    assert "invalid_payload" in delivery["webhook"]


def test_missing_connection_is_an_error_not_a_crash(
        notifiers: ModuleType, webhook_server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(f"AIRFLOW_CONN_{SMTP_CONN.upper()}", raising=False)
    use_webhook(monkeypatch, webhook_server[0])
    delivery = notifiers.deliver(ALERT, RULES)
    assert delivery["webhook"] == "sent"
    assert delivery["email"] == ("AirflowException: SMTP connection is not found. "
                                 f"(connection {SMTP_CONN})")


def test_only_the_named_channels_are_sent(notifiers: ModuleType, smtp_server, webhook_server,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    use_smtp(monkeypatch, smtp_server[0])
    use_webhook(monkeypatch, webhook_server[0])
    assert notifiers.deliver(ALERT, RULES, only={"email"}) == {"email": "sent"}
    assert webhook_server[1] == []
    the_email(smtp_server[1])


def test_alert_text_is_sent_verbatim_not_templated(
        notifiers: ModuleType, smtp_server, webhook_server,
        monkeypatch: pytest.MonkeyPatch) -> None:
    use_smtp(monkeypatch, smtp_server[0])
    use_webhook(monkeypatch, webhook_server[0])
    odd = "check config_parse [error] file=topics.json: {{ ds }} {% if x %} <b>&"
    alert = Alert(**{**ALERT.__dict__, "findings": (odd,), "title": "t {{ ti }}"})

    assert notifiers.deliver(alert, RULES) == {"email": "sent", "webhook": "sent"}

    _, message, body = the_email(smtp_server[1])
    assert message["Subject"] == "[rmq error] t {{ ti }}"
    assert [html.unescape(i) for i in re.findall(r"<li>(.*?)</li>", body)] == [odd]
    section = webhook_server[1][0]["json"]["blocks"][2]["text"]["text"]
    assert section == f"• {odd}"


def test_many_findings_fit_slack_limits(notifiers: ModuleType) -> None:
    findings = tuple(f"check c{i} [error] topic=T queue={i}: {'x' * 400}" for i in range(300))
    alert = Alert(**{**ALERT.__dict__, "findings": findings})
    text, blocks = notifiers.slack_message(alert)
    assert len(blocks) <= 50
    assert all(len(b["text"]["text"]) <= 3000 for b in blocks if b["type"] == "section")
    shown = sum(b["text"]["text"].count("• ") for b in blocks if b["type"] == "section")
    assert shown == notifiers.SLACK_MAX_FINDINGS
    assert any("… and 260 more findings" in json.dumps(b, ensure_ascii=False) for b in blocks)
    assert len(text) <= 3200 and text.startswith(ALERT.title)
