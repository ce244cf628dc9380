"""The series source against answers a broken or hostile server gives (a real HTTP server)."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from slurmgpu.measure.series import PrometheusSeriesSource
from slurmgpu.model.measure import RunRef

RUN = RunRef("42", "c1", datetime(2026, 12, 1), datetime(2026, 12, 1, 2), "gpu01", 1.0)


def serve(body: bytes, status: int = 200):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def matrix(result) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": result}}
    ).encode()


@pytest.mark.parametrize(
    "body",
    [
        matrix([{"metric": {"gpu": "0"}, "values": [[1, "abc"]]}]),
        matrix([{"values": [[1, "1"]]}]),
        matrix(["nonsense"]),
        json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode(),
        b"<html>not json</html>",
    ],
)
def test_a_bad_answer_is_a_warning_and_an_incomplete_series(body):
    server = serve(body)
    try:
        source = PrometheusSeriesSource(f"http://127.0.0.1:{server.server_port}", timeout_s=5)
        got = source.series(RUN)
    finally:
        server.shutdown()
    assert got is not None and not got.complete and got.devices == ()
    assert len(source.warnings) == 1 and source.warnings[0].job_ids == ("42",)


def test_nan_and_inf_samples_are_dropped():
    values = [[1764547200 + 30 * i, v] for i, v in enumerate(["0", "NaN", "+Inf", "5"])]
    server = serve(matrix([{"metric": {"gpu": "0", "Hostname": "gpu01"}, "values": values}]))
    try:
        got = PrometheusSeriesSource(f"http://127.0.0.1:{server.server_port}").series(RUN)
    finally:
        server.shutdown()
    (device,) = got.devices
    assert device.util_pct == (0.0, 5.0) and device.key == "gpu01/0"
