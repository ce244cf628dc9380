"""Every Prometheus textfile slurmgpu writes passes Prometheus' own linter, `promtool check
metrics` (Debian package prometheus): `check`'s here; the report's in test_report_render.py,
the collector's in measure/test_collector_promtool.py."""

from __future__ import annotations

import subprocess

from slurmgpu.fleet.check import CheckReport, HealthAction
from slurmgpu.model.fleet import WARNING, Problem
from slurmgpu.views.fleet_check import render_prometheus
from tests.unit.tools import need


def promtool(text: str) -> str:
    need("promtool")
    proc = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def test_check_textfile():
    report = CheckReport(
        ("gpu01", "gpu02"),
        (
            Problem("gpu01", "xid", "GPU 2 reported Xid 48", "reset"),
            Problem("gpu02", "xid-source", "no kernel log", "see docs", WARNING),
        ),
        HealthAction("none"),
    )
    text = render_prometheus(report)
    assert 'slurmgpu_check_node_ok{node="gpu01"} 0' in text
    assert promtool(text) == ""
