"""`slurmgpu check` output: one line per problem (text), JSON, or a Prometheus textfile."""

from __future__ import annotations

import dataclasses
import json

from slurmgpu.fleet.check import CheckReport
from slurmgpu.render.templating import render


def _prom_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_text(report: CheckReport) -> str:
    return render("check.txt.j2", report=report)


def render_json(report: CheckReport) -> str:
    doc = {
        "nodes": list(report.nodes),
        "ok": not report.errors,
        "problems": [dataclasses.asdict(p) for p in report.problems],
        "action": dataclasses.asdict(report.action) if report.action else None,
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def render_prometheus(report: CheckReport) -> str:
    """node_exporter textfile-collector format: problem gauges and a per-node ok gauge."""
    counts: dict[tuple[str, str, str], int] = {}
    for p in report.problems:
        key = (p.node, p.kind, p.severity)
        counts[key] = counts.get(key, 0) + 1
    bad = {p.node for p in report.errors}
    return render(
        "check.prom.j2",
        problems=[
            (_prom_label(n), _prom_label(k), s, c) for (n, k, s), c in sorted(counts.items())
        ],
        nodes=[(_prom_label(n), int(n not in bad)) for n in sorted(report.nodes)],
    )
