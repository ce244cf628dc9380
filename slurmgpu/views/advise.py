"""`slurmgpu advise` and `slurmgpu replay --calibrate` as text, JSON or HTML.

The renderers only arrange the documents' `to_dict()` (the JSON contract, docs/replay.md
"Calibration" and "advise").
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from slurmgpu.views.safe_text import neutralise

_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _printable(text: str) -> str:
    """A site string (an account or user name in an explanation) on one line: control
    characters written as escapes (`\\n`), bidi controls shown (`neutralise`)."""
    return neutralise(_CONTROL.sub(lambda m: repr(m.group())[1:-1], text))


def _h(value: Any) -> str:
    """Seconds as a short duration (`42s`, `3.5m`, `2.1h`, `1.2d`); `-` when unknown."""
    if value is None:
        return "-"
    v = float(value)
    sign = "-" if v < 0 else ""
    v = abs(v)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if v >= size:
            return f"{sign}{v / size:.1f}{unit}"
    return f"{sign}{v:.0f}s"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f}%"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return [fmt.format(*header), *(fmt.format(*r) for r in rows)]


def _fidelity_rows(fid: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["partition", "jobs", "alloc rec", "alloc base", "mean rec", "mean base",
              "p95 rec", "p95 base", "in order", "calibrated"]  # fmt: skip
    rows = []
    for p in fid["by_partition"]:
        r, b = p["recorded"], p["baseline"]
        order = p["same_order_fraction"]
        rows.append([
            p["partition"], str(p["jobs"]), _pct(r["allocation_ratio"]),
            _pct(b["allocation_ratio"]), _h(r["wait_s"]["mean"]), _h(b["wait_s"]["mean"]),
            _h(r["wait_s"]["p95"]), _h(b["wait_s"]["p95"]),
            "-" if order is None else f"{100 * order:.1f}%",
            ("yes" if p["calibrated"] else "NO")
            + (" (inferred load)" if p.get("calibrated_on") == "inferred load" else ""),
        ])  # fmt: skip
    return header, rows


HOURS_SHOWN = 8  # the hours of an explanation printed in text and HTML (all in the JSON)


def _explanation_line(e: dict[str, Any]) -> str:
    return _printable(
        f"why it misses: {e['label']} ({e['cause']}): {e['evidence']} [unseen "
        f"{e['unseen_gpu_hours']:,.1f} GPU-hours, delayed by the replay "
        f"{e['delayed_gpu_hours']:,.1f}]"
    )


def _hour_rows(e: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The explanation's hours with the most unseen (or delayed) GPU-time, in time order."""
    header = ["hour (UTC)", "unseen GPU-h", "delayed GPU-h", "starts", "waiting jobs"]
    key = "unseen_gpu_hours" if e["unseen_gpu_hours"] >= e["delayed_gpu_hours"] else (
        "delayed_gpu_hours")  # fmt: skip
    top = sorted(e["by_hour"], key=lambda h: -h[key])[:HOURS_SHOWN]
    rows = [
        [h["hour"], f"{h['unseen_gpu_hours']:,.1f}", f"{h['delayed_gpu_hours']:,.1f}",
         str(h["starts"]), str(h["waiting_jobs"])]
        for h in sorted(top, key=lambda h: h["hour"])
    ]  # fmt: skip
    return header, rows


def _fidelity_text(fid: dict[str, Any]) -> list[str]:
    header, rows = _fidelity_rows(fid)
    lines = ["Calibration: the baseline replay against the recorded history", ""]
    lines += _table(header, rows)
    for p in fid["by_partition"]:
        if p.get("calibrated_on") == "inferred load":
            lines.append(
                f"  {p['partition']}: calibrated on inferred load: the baseline held "
                f"{p['inferred_gpu_hours']:,.1f} GPU-hours as background"
                + (f"; still off: {p['why']}" if p["why"] else "")
            )
        elif not p["calibrated"]:
            lines.append(f"  {p['partition']}: {p['why']}")
        if p.get("calibrated_on") == "inferred load" or not p["calibrated"]:
            e = p.get("explanation")
            if e:
                lines.append(f"    {_explanation_line(e)}")
                if e["by_hour"]:
                    lines.append(f"    its {min(HOURS_SHOWN, len(e['by_hour']))} most held "
                                 f"hours of {len(e['by_hour'])}:")  # fmt: skip
                    lines += ["      " + x for x in _table(*_hour_rows(e))]
    return lines


def _plan_rows(plan: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["partition", "GPUs", "mean before", "mean after", "mean change range",
              "p95 before", "p95 after", "p95 change range"]  # fmt: skip
    rows = []
    for p in plan["by_partition"]:
        b, a, u = p["before"]["wait_s"], p["after"]["wait_s"], p["uncertainty"]
        m, q = u["mean_wait_change_s"], u["p95_wait_change_s"]
        rows.append([
            p["partition"], f"{p['gpus']['before']}->{p['gpus']['after']}", _h(b["mean"]),
            _h(a["mean"]), f"{_h(m['low'])} .. {_h(m['high'])}", _h(b["p95"]), _h(a["p95"]),
            f"{_h(q['low'])} .. {_h(q['high'])}",
        ])  # fmt: skip
    return header, rows


def render_calibration(doc: dict[str, Any], fmt: str) -> str:
    """`{"fidelity": {...}}` as text, json or html."""
    if fmt == "json":
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if fmt == "html":
        return neutralise(_html("slurmgpu replay --calibrate", _html_fidelity(doc["fidelity"])))
    return neutralise("\n".join(_fidelity_text(doc["fidelity"])) + "\n")


def render_advice(doc: dict[str, Any], fmt: str) -> str:
    """`Advice.to_dict()` as text, json or html."""
    if fmt == "json":
        return json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if fmt == "html":
        return neutralise(
            _html("slurmgpu advise", _html_fidelity(doc["fidelity"]) + _html_plan(doc))
        )
    plan = doc["plan"]
    lines = [*_fidelity_text(doc["fidelity"]), ""]
    if plan["changes"]:
        basis = (
            "; CALIBRATED ON INFERRED LOAD" if doc.get("calibrated_on") == "inferred load" else ""
        )
        lines.append(f"Plan (changes applied together{basis}): " + " + ".join(plan["changes"]))
        lines.append(
            f"  score {plan['score']:+.3f}; useful GPU-hours "
            f"{plan['useful_gpu_hours']['before']:,.1f} -> "
            f"{plan['useful_gpu_hours']['after']:,.1f}; GPU-hours lost "
            f"{plan['gpu_hours_lost']['before']:,.1f} -> {plan['gpu_hours_lost']['after']:,.1f}"
        )
        lines.append(f"  uncertainty: the range over {plan['perturbed_replays']} perturbed replays")
        lines += ["  " + x for x in _table(*_plan_rows(plan))]
        for v in plan["perturbed_violations"]:
            lines.append(f"  in a perturbed replay: {v}")
    else:
        lines.append("Plan: no change")
    lines += ["", f"Candidates: {doc['candidates']} ({doc['replays']} replays); rejected:"]
    lines += [f"  {r['change']}: {r['why']}" for r in doc["rejected"]] or ["  none"]
    lines += [f"note: {_printable(n)}" for n in doc["notes"]]
    return neutralise("\n".join(lines) + "\n")


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def _html_fidelity(fid: dict[str, Any]) -> str:
    off = "".join(
        f"<li>{html.escape(p['partition'])}: {html.escape(_state(p))}{_html_explanation(p)}</li>"
        for p in fid["by_partition"]
        if not p["calibrated"] or p.get("calibrated_on") == "inferred load"
    )
    return (
        "<h2>Calibration</h2>"
        + _html_table(*_fidelity_rows(fid))
        + (f"<ul>{off}</ul>" if off else "")
    )


def _state(p: dict[str, Any]) -> str:
    if p.get("calibrated_on") != "inferred load":
        return p["why"] or ""
    held = f"calibrated on inferred load: {p['inferred_gpu_hours']:,.1f} GPU-hours held"
    return held + (f"; still off: {p['why']}" if p["why"] else "")


def _html_explanation(p: dict[str, Any]) -> str:
    e = p.get("explanation")
    if not e:
        return ""
    out = f"<p class='explanation'>{html.escape(_explanation_line(e))}</p>"
    return out + (_html_table(*_hour_rows(e)) if e["by_hour"] else "")


def _html_plan(doc: dict[str, Any]) -> str:
    plan = doc["plan"]
    title = " + ".join(plan["changes"]) or "no change"
    if plan["changes"] and doc.get("calibrated_on") == "inferred load":
        title += " (calibrated on inferred load)"
    out = f"<h2>Plan: {html.escape(title)}</h2>"
    if plan["changes"]:
        out += _html_table(*_plan_rows(plan))
    rows = [[r["change"], r["why"]] for r in doc["rejected"]]
    out += "<h2>Rejected</h2>" + _html_table(["change", "why"], rows)
    return out + "".join(f"<p>note: {html.escape(n)}</p>" for n in doc["notes"])


def _html(title: str, body: str) -> str:
    style = "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>\n"
    )
