"""One HTTP POST bounded in time and size, for the measure sources (Prometheus).

A socket timeout bounds each read, not the request: a server that sends one byte every half
second never trips it. `post` runs the request in a worker thread and waits for it at most
`deadline_s` in all (name lookup, connect, headers, body); at the deadline it shuts the socket
down, which ends the worker's read, and raises `HttpTimeout`. The body is read in pieces and
cut at `max_bytes` (`HttpTooLarge`): a 3 GB answer never reaches memory whole.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

CHUNK = 1 << 16


class HttpError(Exception):
    """The request failed (connection, protocol, URL); the message says why."""


class HttpTimeout(HttpError):
    """No whole answer before the deadline."""


class HttpTooLarge(HttpError):
    """The answer is longer than the size limit."""


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    body: bytes


def check_url(url: str) -> urllib.parse.SplitResult:
    """The URL split, or HttpError saying what is wrong (`http://[::1`, a port `:x`)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # ValueError for a port that is not a number in range
        host = parts.hostname
    except ValueError as exc:
        raise HttpError(f"{url!r}: expected an http(s):// URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not host:
        raise HttpError(f"{url!r}: expected an http(s):// URL with a host")
    del port
    return parts


def post(
    url: str,
    body: bytes,
    headers: Sequence[tuple[str, str]] = (),
    *,
    deadline_s: float,
    max_bytes: int,
) -> Answer:
    """POST `body` to `url`; the whole answer within `deadline_s`, at most `max_bytes` long."""
    parts = check_url(url)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=deadline_s)
    outcome: dict[str, object] = {}

    def work() -> None:
        try:
            conn.request("POST", path, body=body, headers=dict(headers))
            response = conn.getresponse()
            outcome["answer"] = Answer(response.status, response.reason, _read(response, max_bytes))
        except BaseException as exc:  # handed to the caller's thread, raised there
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="slurmgpu-http", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if worker.is_alive():
        _abort(conn)
        worker.join(1.0)  # the shut-down socket ends its read; never wait on it longer
        raise HttpTimeout(f"no whole answer in {deadline_s:g} s")
    conn.close()
    if "answer" in outcome:
        return outcome["answer"]  # type: ignore[return-value]
    exc = outcome.get("error")
    if isinstance(exc, HttpError):
        raise exc
    if isinstance(exc, TimeoutError | socket.timeout):
        raise HttpTimeout(f"no whole answer in {deadline_s:g} s") from exc
    if isinstance(exc, http.client.HTTPException | OSError | ValueError | UnicodeError):
        raise HttpError(_describe(exc)) from exc
    raise HttpError(f"request failed: {exc!r}")


def _read(response: http.client.HTTPResponse, max_bytes: int) -> bytes:
    text = (response.getheader("Content-Length") or "").strip()
    declared = int(text) if text.isdigit() and len(text) < 20 else None
    if declared is not None and declared > max_bytes:
        raise HttpTooLarge(f"answer of {declared} bytes is over the limit of {max_bytes}")
    pieces: list[bytes] = []
    total = 0
    while True:
        piece = response.read1(CHUNK)
        if not piece:
            if declared is not None and total < declared:
                raise HttpError(f"answer cut short ({total} of {declared} bytes)")
            return b"".join(pieces)
        total += len(piece)
        if total > max_bytes:
            raise HttpTooLarge(f"answer is over the limit of {max_bytes} bytes")
        pieces.append(piece)


def _abort(conn: http.client.HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    conn.close()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, http.client.IncompleteRead):
        return f"answer cut short ({len(exc.partial)} bytes read, more expected)"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without an answer"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
