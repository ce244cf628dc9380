"""`report --trend monthly` as text, JSON, one self-contained HTML page or a Prometheus
textfile, from the typed `TrendDocument` (accounting/trend.py). `None` is unknown: "n/a",
left out of the Prometheus file."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from typing import Any

from slurmgpu import __version__
from slurmgpu.accounting.document import iso_utc
from slurmgpu.accounting.trend import ALL, TrendDocument, TrendRow
from slurmgpu.views import svg
from slurmgpu.views.report.prom import _prom_help, _prom_number, prom_label_value
from slurmgpu.views.report.tables import (
    FIT_SLICES,
    fmt_duration,
    fmt_gpu_hours,
    fmt_int,
    fmt_kwh,
    fmt_percent,
    fmt_ratio,
    printable,
    text_table,
)

HEADERS = (
    *("month", "partition", "jobs", "GPU-h alloc", "capacity", "alloc ratio", "GPU-h used"),
    *("util", "started", "wait mean", "wait p95", *(f"fit {s}" for s in FIT_SLICES)),
    "GPU kWh",
)


def _fit(row: TrendRow, label: str) -> str:
    if row.fit is None:
        return ""
    return fmt_ratio(row.fit.share(label).jobs)


def _cells(row: TrendRow) -> list[str]:
    return [
        row.month,
        "(all)" if row.partition == ALL else printable(row.partition, 24),
        fmt_int(row.jobs),
        fmt_gpu_hours(row.gpu_hours_allocated),
        fmt_gpu_hours(row.capacity_gpu_hours),
        fmt_ratio(row.allocation_ratio),
        fmt_gpu_hours(row.gpu_hours_used),
        fmt_percent(row.gpu_util_mean),
        fmt_int(row.runs_started),
        fmt_duration(row.wait_mean_s),
        fmt_duration(row.wait_p95_s),
        *(_fit(row, s) for s in FIT_SLICES),
        "n/a" if row.energy_kwh is None else fmt_kwh(row.energy_kwh).removesuffix(" kWh"),
    ]


def _title(doc: TrendDocument) -> str:
    where = doc.source.get("store") or ", ".join(doc.source.get("files") or ()) or "live"
    return (
        f"slurmgpu monthly trend {iso_utc(doc.since)} .. {iso_utc(doc.until)} "
        f"({len(doc.months)} months; {printable(where)})"
    )


def render_trend_text(doc: TrendDocument) -> str:
    """One table, a row per month and partition ("(all)" first in each month)."""
    lines = [_title(doc), ""]
    lines.append(text_table(HEADERS, [_cells(r) for r in doc.rows], left=2))
    lines.append("")
    lines.append(
        "allocation, use and fit shares: the runs active in the month (as analyze --since "
        "MONTH --until NEXT); waits: runs that started in the month; fit: share of jobs "
        "with a known need fitting that slice"
    )
    return "\n".join(lines) + "\n"


def render_trend_json(doc: TrendDocument) -> str:
    return json.dumps(doc.to_json(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def render_trend_html(doc: TrendDocument) -> str:
    """One self-contained page: allocation per month (chart), then the table."""
    totals = [r for r in doc.rows if r.partition == ALL]
    chart = svg.bar_chart(
        [(r.month, [r.gpu_hours_allocated, r.gpu_hours_used or 0.0]) for r in totals],
        series=["GPU-hours allocated", "GPU-hours used (measured)"],
        value_format=fmt_gpu_hours,
    )
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(r)) + "</tr>"
        for r in doc.rows
    )
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        "td:nth-child(-n+2){text-align:left}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(_title(doc))}</title><style>{style}</style></head><body>"
        f"<h1>{html.escape(_title(doc))}</h1>"
        f"<h2>GPU-hours per month, all partitions</h2>{chart}"
        f"<h2>Per month and partition</h2><table><thead><tr>{head}</tr></thead>"
        f"<tbody>{body}</tbody></table>"
        f"<p>slurmgpu {html.escape(__version__)}, generated {iso_utc(doc.generated_at)}</p>"
        "</body></html>\n"
    )


_PROM: tuple[tuple[str, str, Callable[[TrendRow], Any]], ...] = (
    ("jobs", "Jobs active in the month", lambda r: r.jobs),
    ("gpu_allocated_seconds", "GPU-seconds allocated in the month",
     lambda r: r.gpu_hours_allocated * 3600),
    ("gpu_capacity_seconds", "GPU-seconds the partition could give in the month",
     lambda r: None if r.capacity_gpu_hours is None else r.capacity_gpu_hours * 3600),
    ("allocation_ratio", "GPU time allocated / capacity (0..1)", lambda r: r.allocation_ratio),
    ("gpu_used_seconds", "GPU-seconds used (allocated x measured utilization)",
     lambda r: None if r.gpu_hours_used is None else r.gpu_hours_used * 3600),
    ("runs_started", "Runs that started in the month", lambda r: r.runs_started),
    ("wait_mean_seconds", "Mean queue wait of runs started in the month",
     lambda r: r.wait_mean_s),
    ("wait_p95_seconds", "95th percentile queue wait of runs started in the month",
     lambda r: r.wait_p95_s),
    ("gpu_energy_joules", "Measured GPU energy in the month (kWh x 3.6e6)",
     lambda r: None if r.energy_kwh is None else r.energy_kwh * 3.6e6),
    ("gpu_energy_idle_joules", "Measured GPU energy drawn while idle in the month",
     lambda r: None if r.energy_kwh_idle is None else r.energy_kwh_idle * 3.6e6),
)  # fmt: skip


def render_trend_prom(doc: TrendDocument) -> str:
    """Gauges labelled by month and partition ("*": all), fit shares by slice."""
    lines: list[str] = []
    for suffix, text, get in _PROM:
        name = f"slurmgpu_trend_{suffix}"
        lines += [f"# HELP {name} {_prom_help(text)}", f"# TYPE {name} gauge"]
        for r in doc.rows:
            value = _prom_number(get(r))
            if value is not None:
                labels = _labels(r)
                lines.append(f"{name}{{{labels}}} {value}")
    name = "slurmgpu_trend_fit_jobs_ratio"
    lines += [f"# HELP {name} Share of GPU jobs with a known need fitting one slice (0..1)",
              f"# TYPE {name} gauge"]  # fmt: skip
    for r in doc.rows:
        for label in FIT_SLICES:
            value = _prom_number(r.fit.share(label).jobs) if r.fit is not None else None
            if value is not None:
                lines.append(f'{name}{{{_labels(r)},slice="{label}"}} {value}')
    return "\n".join(lines) + "\n"


def _labels(r: TrendRow) -> str:
    return f'month="{r.month}",partition="{prom_label_value(r.partition)}"'


def render_trend(doc: TrendDocument, fmt: str) -> str:
    """`doc` in one of text, json, html, prom."""
    from slurmgpu.views.safe_text import neutralise

    renderers = {
        "text": render_trend_text,
        "json": render_trend_json,
        "html": render_trend_html,
        "prom": render_trend_prom,
    }
    text = renderers[fmt](doc)
    return neutralise(text) if fmt in ("text", "html") else text
