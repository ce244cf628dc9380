"""The HTML report: one self-contained page (inline CSS and SVG plots) from `report.html.j2`."""

from __future__ import annotations

from typing import Any

from slurmgpu import __version__
from slurmgpu.accounting.document import (
    AnalysisDocument,
    iso_utc,
)
from slurmgpu.render.templating import render as render_template
from slurmgpu.views import svg
from slurmgpu.views.report.tables import (
    _GROUP_SECTIONS,
    ACCEL_HEADERS,
    FIT_PARTITION_HEADERS,
    FIT_SLICES,
    HTML_TOP_N,
    REJECTED_SHOWN,
    _effect_text,
    _evidence_items,
    _fit_partition_rows,
    _fit_rows,
    _group_tables,
    _notes,
    _sorted_groups,
    _source_line,
    _totals_lines,
    _wait,
    accelerator_rows,
    energy_lines,
    fidelity_text,
    fmt_duration,
    fmt_gpu_hours,
    fmt_int,
    fmt_ratio,
    harm_text,
    printable,
    replayed_text,
)


def _html_context(analysis: AnalysisDocument) -> dict[str, Any]:
    """Everything the template prints, as plain strings (escaped there with `|e`) or SVG."""
    window = analysis.window
    totals = analysis.totals
    fit = analysis.fit_fraction
    tables = _html_tables(analysis)
    plots = _html_plots(analysis)
    recs = [
        {
            "title": printable(r.title),
            "kind": printable(r.kind),
            "detail": str(r.detail or ""),
            "evidence": _evidence_items(r.evidence.to_json()),
            "effect": _effect_text(r.estimated_effect.to_json()),
            "replayed": replayed_text(r.replayed) if r.replayed is not None else "",
            "harm": harm_text(r.replayed),
            "fidelity": fidelity_text(r.replayed),
        }
        for r in analysis.recommendations
    ]
    rejected = analysis.rejected
    fit_rows = _fit_rows(fit)
    return {
        "version": __version__,
        "since": iso_utc(window.since),
        "until": iso_utc(window.until),
        "generated_at": iso_utc(analysis.generated_at),
        "source": _source_line(analysis.source),
        "totals": _totals_lines(totals) + energy_lines(analysis),
        "notes": _notes(analysis),
        "tables": tables,
        "plots": plots,
        "fit_rows": fit_rows,
        "fit_basis": str(fit.basis or ""),
        "fit_partition_headers": FIT_PARTITION_HEADERS,
        "fit_partition_rows": _fit_partition_rows(analysis),
        "accel_headers": ACCEL_HEADERS,
        "accel_rows": accelerator_rows(analysis),
        "rejected": [(str(r.file), str(r.line), str(r.reason)) for r in rejected[:REJECTED_SHOWN]],
        "rejected_count": fmt_int(totals.rows_rejected, str(len(rejected))),
        "rejected_left_off": max(0, len(rejected) - REJECTED_SHOWN),
        "recommendations": recs,
    }


def _html_tables(analysis: AnalysisDocument) -> list[dict[str, Any]]:
    """The by-group tables, as the template prints them (the first HTML_TOP_N rows)."""
    tables = []
    for title, key, name_key, capacity, limited in _GROUP_SECTIONS:
        groups = getattr(analysis, key)
        if key == "by_cluster" and len(groups) <= 1:
            continue  # one cluster: its row is the totals
        parts, left_off = _group_tables(groups, name_key, capacity, HTML_TOP_N if limited else None)
        tables.append(
            {
                "title": title,
                "parts": [{"headers": h, "rows": r} for h, r in parts] if groups else [],
                "left_off": left_off,
            }
        )
    return tables


def _html_plots(analysis: AnalysisDocument) -> list[dict[str, Any]]:
    """The report's plots, each a title and an inline SVG."""
    totals = analysis.totals
    points = analysis.timeseries.points
    partitions = _sorted_groups(analysis.by_partition, "partition")
    qos = _sorted_groups(analysis.by_qos, "qos")
    fit = analysis.fit_fraction
    tiers = _sorted_groups(analysis.by_tier, "tier")
    wait_groups = [("all jobs", totals.wait_s)] + [(str(g.name), g.wait_s) for g in partitions]
    return [
        {
            "title": "Allocation and measured use, % of capacity, per "
            + _freq_word(analysis.timeseries.freq)
            + ("" if any(p.gpu_hours_used is not None for p in points) else " (no measured use)"),
            "svg": svg.use_chart(points),
        },
        {
            "title": "GPU-hours allocated per "
            + _freq_word(analysis.timeseries.freq)
            + " (a bucket the window cuts short is scaled to a whole one)",
            "svg": svg.timeseries_chart(points, analysis.timeseries.freq),
        },
        {
            "title": "GPU-hours allocated by partition",
            "svg": svg.bar_chart(
                [(str(g.name), [g.gpu_hours_allocated]) for g in partitions],
                series=["GPU-hours"],
                value_format=fmt_gpu_hours,
            ),
        },
        {
            "title": "GPU-hours allocated by QOS (tier)",
            "svg": svg.bar_chart(
                [(f"{g.name} ({g.tier or '?'})", [g.gpu_hours_allocated]) for g in qos],
                series=["GPU-hours"],
                value_format=fmt_gpu_hours,
            ),
        },
        {
            "title": "Share of GPU jobs that would fit a slice of their GPU",
            "svg": svg.bar_chart(
                [
                    (f"{name} GPU", [fit.share(name).jobs, fit.share(name).gpu_hours])
                    for name in FIT_SLICES
                ],
                series=["jobs", "GPU-hours"],
                value_format=fmt_ratio,
                vmax=1.0,
            ),
        },
        {
            "title": "Queue wait (eligible to start), all jobs and per partition (log scale)",
            "svg": svg.bar_chart(
                [(name, [w.p50, w.p95, w.max]) for name, w in wait_groups],
                series=["p50", "p95", "max"],
                value_format=fmt_duration,
                log_scale=True,
            ),
        },
        {
            "title": "Queue wait per tier (log scale)",
            "svg": svg.bar_chart(
                [(str(g.name), [_wait(g, "p50"), _wait(g, "p95"), _wait(g, "max")]) for g in tiers],
                series=["p50", "p95", "max"],
                value_format=fmt_duration,
                log_scale=True,
            ),
        },
    ]


def _freq_word(freq: Any) -> str:
    return {"1h": "hour", "h": "hour", "1H": "hour", "1D": "day", "D": "day", "1d": "day"}.get(
        str(freq), f"interval ({freq})" if freq else "interval"
    )


def render_html(analysis: AnalysisDocument) -> str:
    """One self-contained HTML page (inline CSS and SVG; nothing fetched at view time)."""
    return render_template("report.html.j2", **_html_context(analysis))
