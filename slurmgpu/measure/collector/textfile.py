"""The node's current GPU use as a Prometheus textfile (node_exporter's textfile collector)."""

from __future__ import annotations

from dataclasses import dataclass

from slurmgpu.measure.collector.state import Attributed
from slurmgpu.render.templating import render

MIB = 2**20


@dataclass(frozen=True)
class TextfileRow:
    """One series set: a device and the job on it, labels already escaped."""

    labels: str
    mem_used_bytes: int
    mem_total_bytes: int
    util_pct: float | None


def label_value(text: str) -> str:
    """Escape a label value as the exposition format requires (backslash, quote, newline)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def rows(node: str, attributed: list[Attributed]) -> list[TextfileRow]:
    """Rows in a stable order (device, then job), so equal passes give equal files."""
    out = []
    for a in attributed:
        d = a.device
        labels = {
            "node": node,
            "gpu": str(d.minor),
            "gpu_instance": "" if d.gi is None else str(d.gi),
            "profile": d.profile or "",
            "uuid": d.uuid,
            "jobid": a.owner.job_id if a.owner else "",
            "user": a.owner.user if a.owner else "",
        }
        text = ",".join(f'{k}="{label_value(v)}"' for k, v in labels.items())
        out.append(
            TextfileRow(text, int(a.mem_used_mib * MIB), int(d.mem_total_mib * MIB), d.util_pct)
        )
    return sorted(out, key=lambda r: r.labels)


def render_textfile(node: str, attributed: list[Attributed], *, errors: int, now: int) -> str:
    """The whole textfile for one pass."""
    return render(
        "collect.prom.j2",
        node=node,
        node_label=label_value(node),
        rows=rows(node, attributed),
        errors=errors,
        now=now,
    )
