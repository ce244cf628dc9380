"""A hostile Prometheus stand-in for the hostile suite: a real HTTP server on loopback.

`HostileServer(mode)` answers every POST the way `mode` says: a fixed body of the wrong
shape, a body cut short, one byte every half second (in the headers or the body), or an
endless body. It serves from a thread of the test process on 127.0.0.1 only, and every
answer is bounded: a slow or endless one stops after `MAX_SECONDS`, or as soon as the
client goes away.
"""

from __future__ import annotations

import http.server
import threading
import time

MAX_SECONDS = 30.0  # no answer of this server lasts longer, whatever the client does
DRIP_S = 0.5


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.requests += 1
        mode = self.server.mode
        try:
            if isinstance(mode, bytes):
                self._send(200, mode)
            elif mode == "cut-short":  # says 1000 bytes, sends 20, closes
                self._head(200, 1000)
                self.wfile.write(b'{"status":"success",')
            elif mode == "drip-body":
                self._head(200, 10_000)
                self._drip(b'{"status":"success","data":{"resultType":"vector","result":[]}}')
            elif mode == "drip-headers":
                self._drip(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" * 100)
            elif mode == "huge-declared":  # says 3 GB, sends zeros until the client leaves
                self._head(200, 3 * 10**9)
                self._flood()
            elif mode == "huge-chunked":  # no length: a body that never ends
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.close_connection = True
                self.wfile.write(b'{"status":"success","data":{"result":["')
                self._flood()
            else:
                raise ValueError(mode)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up: what slurmgpu must do

    def _head(self, status: int, length: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.close_connection = True

    def _send(self, status: int, body: bytes) -> None:
        self._head(status, len(body))
        self.wfile.write(body)

    def _drip(self, data: bytes) -> None:
        end = time.monotonic() + MAX_SECONDS
        for i in range(len(data)):
            if time.monotonic() > end:
                return
            self.wfile.write(data[i : i + 1])
            self.wfile.flush()
            time.sleep(DRIP_S)

    def _flood(self) -> None:
        block = b"0" * (1 << 20)
        end = time.monotonic() + MAX_SECONDS
        while time.monotonic() < end:
            self.wfile.write(block)
            self.server.sent += len(block)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    mode: bytes | str = b""
    requests = 0
    sent = 0


class HostileServer:
    """`with HostileServer(mode) as server:` ... `server.url`, `server.requests`."""

    def __init__(self, mode: bytes | str) -> None:
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        self.httpd.mode = mode
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def requests(self) -> int:
        return self.httpd.requests

    @property
    def sent(self) -> int:
        return self.httpd.sent

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
