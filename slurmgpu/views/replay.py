"""Replay report -> text or HTML (through templates/replay.txt.j2 and replay.html.j2).

The renderer only arranges what the report holds: columns are the recorded history (where
known), the baseline replay and each scenario, in that order.
"""

from __future__ import annotations

import json
from typing import Any

from slurmgpu import __version__
from slurmgpu.render.templating import render
from slurmgpu.views.report import REJECTED_SHOWN, printable
from slurmgpu.views.safe_text import neutralise


def _h(value: Any) -> str:
    """Seconds as a short duration (`42s`, `3.5m`, `2.1h`, `1.2d`); `-` when unknown."""
    if value is None:
        return "-"
    v = float(value)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(v) >= size:
            return f"{v / size:.1f}{unit}"
    return f"{v:.0f}s"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f}%"


def _num(value: Any) -> str:
    return "-" if value is None else f"{float(value):,.1f}"


def columns(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The blocks side by side: recorded (if any), baseline, scenarios."""
    base = doc["baseline"]
    cols = [base["recorded"]] if base.get("recorded") else []
    return [*cols, base, *doc["scenarios"]]


def _rows(cols: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    rows: list[tuple[str, list[str]]] = [
        ("GPUs", [str(c["gpus"]) for c in cols]),
        ("allocation ratio", [_pct(c["allocation_ratio"]) for c in cols]),
        ("GPU-hours allocated", [_num(c["gpu_hours_allocated"]) for c in cols]),
        ("useful GPU-hours", [_num(c["useful_gpu_hours"]) for c in cols]),
        ("wait p50", [_h(c["wait_s"]["p50"]) for c in cols]),
        ("wait p95", [_h(c["wait_s"]["p95"]) for c in cols]),
        ("wait max", [_h(c["wait_s"]["max"]) for c in cols]),
        ("preemptions", [str(c["preemptions"]) for c in cols]),
        ("GPU-hours lost", [_num(c["gpu_hours_lost"]) for c in cols]),
        ("jobs on slices", [str(c["jobs_on_slices"]) for c in cols]),
        ("jobs not run", [str(c["jobs_not_run"]) for c in cols]),
    ]
    parts = sorted({p["partition"] for c in cols for p in c["by_partition"]})
    for name in parts:
        found = [next((p for p in c["by_partition"] if p["partition"] == name), None) for c in cols]
        rows.append((f"{name}: GPUs", [str(p["gpus"]) if p else "-" for p in found]))
        rows.append(
            (f"{name}: allocation", [_pct(p["allocation_ratio"]) if p else "-" for p in found])
        )
        for q in ("p50", "p95", "max"):
            rows.append((f"{name}: wait {q}", [_h(p["wait_s"][q]) if p else "-" for p in found]))
    tiers = sorted({t["tier"] for c in cols for t in c["by_tier"]})
    for name in tiers:
        found = [next((t for t in c["by_tier"] if t["tier"] == name), None) for c in cols]
        for q in ("p50", "p95", "max"):
            rows.append(
                (f"tier {name}: wait {q}", [_h(t["wait_s"][q]) if t else "-" for t in found])
            )
    return rows


def render_replay(doc: dict[str, Any], fmt: str) -> str:
    """The report (`ReplayReport.to_dict()`) as text, json or html (text and html with bidi
    controls shown, not obeyed: `safe_text.neutralise`)."""
    out = _render(doc, fmt)
    return out if fmt == "json" else neutralise(out)


def _render(doc: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"
    cols = columns(doc)
    labels = [c.get("change") or c["label"] for c in cols]
    rows = _rows(cols)
    skipped = doc["baseline"].get("skipped") or {}
    rejected = [
        f"{printable(r['file'])}:{r['line']}: {printable(r['reason'])}"
        for r in (doc["baseline"].get("rejected") or [])[:REJECTED_SHOWN]
    ]
    more = max(len(doc["baseline"].get("rejected") or []) - REJECTED_SHOWN, 0)
    reasons = {c.get("change") or c["label"]: c["not_run_reasons"] for c in cols}
    if fmt == "html":
        return render(
            "replay.html.j2",
            version=__version__,
            labels=labels,
            rows=rows,
            skipped=skipped,
            rejected=rejected,
            rejected_more=more,
            reasons=reasons,
            util_chart=_util_chart(cols, labels),
            wait_chart=_wait_chart(cols, labels),
            window_hours=doc["baseline"]["window_hours"],
        )
    width = max([len(r[0]) for r in rows] + [10])
    col_w = [max(len(lab), *(len(r[1][i]) for r in rows)) for i, lab in enumerate(labels)]
    return render(
        "replay.txt.j2",
        header=" " * width
        + "  "
        + "  ".join(lab.rjust(w) for lab, w in zip(labels, col_w, strict=True)),
        lines=[
            name.ljust(width)
            + "  "
            + "  ".join(v.rjust(w) for v, w in zip(vals, col_w, strict=True))
            for name, vals in rows
        ],
        skipped=skipped,
        rejected=rejected,
        rejected_more=more,
        reasons=reasons,
        window_hours=doc["baseline"]["window_hours"],
    )


def _util_chart(cols: list[dict[str, Any]], labels: list[str]) -> list[tuple[str, str]]:
    """Per block: utilization over the window as an inline SVG polyline (share of GPUs)."""
    from slurmgpu.views.svg import esc

    out = []
    w, h = 600, 120
    for label, c in zip(labels, cols, strict=True):
        series = c.get("utilization") or []
        if not series:
            out.append((label, ""))
            continue
        n = len(series)
        pts = " ".join(
            f"{w * i / max(n - 1, 1):.1f},{h - h * min(max(v, 0.0), 1.0):.1f}"
            for i, v in enumerate(series)
        )
        svg = (
            f'<svg class="chart" width="{w}" height="{h + 16}" role="img" '
            f'aria-label="{esc(label)} utilization">'
            f'<rect x="0" y="0" width="{w}" height="{h}" fill="#f7f7f7"/>'
            f'<polyline fill="none" stroke="#0072b2" stroke-width="1.5" points="{pts}"/>'
            f'<text x="2" y="{h + 12}">0% .. 100% of GPUs allocated over the window</text></svg>'
        )
        out.append((label, svg))
    return out


def _wait_chart(cols: list[dict[str, Any]], labels: list[str]) -> str:
    """Wait p95 per tier, one bar per block (log scale: the max dwarfs the rest)."""
    from slurmgpu.views.svg import bar_chart

    tiers = sorted({t["tier"] for c in cols for t in c["by_tier"]})
    groups = []
    for name in tiers:
        vals = []
        for c in cols:
            t = next((t for t in c["by_tier"] if t["tier"] == name), None)
            vals.append(t["wait_s"]["p95"] if t else None)
        groups.append((f"{name} wait p95", vals))
    return bar_chart(groups, series=labels, value_format=_h, log_scale=True)
