"""Mail (SMTP) and webhooks: how `idle --live` tells people what it saw and did.

One message per call, plain text, through `smtplib` to the site's relay (`--smtp HOST[:PORT]`;
no authentication: the relay is the site's own, on the cluster network). Webhooks get one
JSON POST. Failures raise `NotifyError` with one line; the caller counts the message as not
sent and tries again on its next run.
"""

from __future__ import annotations

import json
import smtplib
import urllib.error
import urllib.request
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from slurmgpu.errors import SlurmgpuError


class NotifyError(SlurmgpuError):
    """A mail or webhook could not be delivered."""


def parse_smtp(text: str) -> tuple[str, int]:
    """`HOST[:PORT]` -> (host, port); port 25 by default."""
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, 25
    if not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise NotifyError(f"--smtp {text!r}: expected HOST[:PORT]")
    return host.strip("[]"), int(port)


def send_mail(
    smtp: str,
    sender: str,
    recipients: list[str],
    subject: str,
    body: str,
    *,
    timeout_s: float = 20.0,
) -> str:
    """Send one message; returns its Message-ID."""
    host, port = parse_smtp(smtp)
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = ", ".join(recipients)
    msg["Subject"] = subject
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = make_msgid(domain="slurmgpu")
    msg.set_content(body)
    try:
        with smtplib.SMTP(host, port, timeout=timeout_s) as server:
            server.send_message(msg)
    except (TimeoutError, smtplib.SMTPException, OSError) as exc:
        raise NotifyError(f"mail to {', '.join(recipients)} via {smtp}: {exc}") from exc
    return str(msg["Message-ID"])


def post_webhook(url: str, payload: dict, *, timeout_s: float = 10.0) -> None:
    """POST `payload` as JSON."""
    if not url.startswith(("http://", "https://")):
        raise NotifyError(f"--webhook {url!r}: expected an http(s):// URL")
    data = json.dumps(payload, sort_keys=True).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:
            answer.read()
    except (urllib.error.URLError, OSError) as exc:
        raise NotifyError(f"webhook {url}: {getattr(exc, 'reason', exc)}") from exc
