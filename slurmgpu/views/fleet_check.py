"""`slurmgpu check` output: one line per problem (text), JSON, or a Prometheus textfile."""

from __future__ import annotations

import dataclasses
import json

from slurmgpu.fleet.check import CheckReport
from slurmgpu.render.templating import render
from slurmgpu.util.hostlist import compress_hostlist
from slurmgpu.views.safe_text import neutralise


def _prom_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclasses.dataclass(frozen=True)
class Cause:
    """The findings of one kind and severity: one line, their details under it."""

    line: str
    details: tuple[str, ...] = ()


def causes(report: CheckReport) -> list[Cause]:
    """Findings grouped by (severity, kind), in the order first seen. A cause with one
    finding is that finding's line (`node: severity: message; action`); several are one
    line `severity: kind on N node(s) (HOSTLIST): N finding(s); action` with the findings'
    `NODES: message` under it, one per distinct message (issue #20: a MIG layout change
    took 22-24 lines)."""
    groups: dict[tuple[str, str], list] = {}
    for p in report.problems:
        groups.setdefault((p.severity, p.kind), []).append(p)
    out = []
    for (severity, kind), found in groups.items():
        if len(found) == 1:
            out.append(Cause(found[0].line))
            continue
        nodes = sorted({p.node for p in found})
        actions = {p.action for p in found}
        shared = f"; {found[0].action}" if len(actions) == 1 else ""
        line = (
            f"{severity}: {kind} on {len(nodes)} node(s) ({compress_hostlist(nodes)}): "
            f"{len(found)} finding(s){shared}"
        )
        same: dict[str, list[str]] = {}  # one detail line per text, naming all its nodes
        for p in found:
            same.setdefault(p.message + ("" if shared else f"; {p.action}"), []).append(p.node)
        details = tuple(f"{compress_hostlist(n)}: {text}" for text, n in same.items())
        out.append(Cause(line, details))
    return out


def render_text(report: CheckReport) -> str:
    return neutralise(render("check.txt.j2", report=report, causes=causes(report)))


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
