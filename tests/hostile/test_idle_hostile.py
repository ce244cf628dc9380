"""`slurmgpu idle` against a Prometheus whose matrix answers have the wrong shape (issue 33).

A `result` that is a number (or a string, an object, series of the wrong shape) crashed the
per-sample series reader with exit 70; now it is a warning for that source and the analysis
goes on without it: exit 0, no traceback, the runs it could not read undecided.
"""

from __future__ import annotations

import json

import pytest

from tests.hostile.conftest import ROOT, cli
from tests.hostile.prometheus_server import HostileServer

SACCT = ROOT / "tests" / "data" / "sacct" / "synthetic-mix.txt"
POLICY = ROOT / "etc" / "slurmgpu.toml"


def matrix(result: object) -> bytes:
    body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    return json.dumps(body).encode()


SHAPES = {
    "result a number": matrix(3),
    "result a huge number": matrix(1e308),
    "result a string": matrix("x"),
    "result an object": matrix({"a": 1}),
    "values a number": matrix([{"metric": {"hpc_job": "1"}, "values": 7}]),
    "a sample of three": matrix([{"metric": {"hpc_job": "1"}, "values": [[1, "0", 2]]}]),
    "a sample a string": matrix([{"metric": {"hpc_job": "1"}, "values": ["10"]}]),
    "series a list": matrix([[1, 2]]),
}


@pytest.mark.parametrize("body", SHAPES.values(), ids=SHAPES.keys())
def test_idle_finishes_with_a_warning(body):
    with HostileServer(body) as server:
        run = cli("idle", "--policy", POLICY, "--sacct-file", SACCT, "--prometheus",
                  server.url, "--prometheus-timeout", "5", "--format", "json")  # fmt: skip
    assert run.code == 0, run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    doc = json.loads(run.stdout)
    assert doc["warnings"] and doc["jobs"] == []
    assert any("prometheus" in w for w in doc["warnings"])
