"""Reports from an accounting analysis: terminal text, JSON, self-contained HTML, Prometheus.

Pure functions from the typed `AnalysisDocument` (slurmgpu/accounting/document.py; its
`to_json()` is the schema in docs/accounting.md) to text: they read its attributes. `None`
means *unknown* (e.g. no `gres/gpuutil` before Slurm 23.02): it is shown as "unknown"/"n/a"
and left out of the Prometheus file, never turned into 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from slurmgpu import __version__
from slurmgpu.accounting.document import (
    AnalysisDocument,
    FitShares,
    GroupRow,
    GroupStats,
    Source,
    Totals,
    iso_utc,
)
from slurmgpu.render.templating import render as render_template
from slurmgpu.views import svg
from slurmgpu.views.safe_text import neutralise

FORMATS: tuple[str, ...] = ("text", "json", "html", "prom")

FIT_SLICES: tuple[str, ...] = ("1/7", "1/4", "1/2")

# How many accounts / users / rejected rows a person-facing report lists; JSON keeps all.
TOP_N = 15
HTML_TOP_N = 50
REJECTED_SHOWN = 20


def render_report(doc: AnalysisDocument, fmt: str, idle: Any = None) -> str:
    """Render `doc` in one of `FORMATS` (with `idle`, an `IdleReport`: its section too)."""
    renderers: dict[str, Callable[[AnalysisDocument], str]] = {
        "text": render_text,
        "json": render_json,
        "html": render_html,
        "prom": render_prom,
    }
    try:
        renderer = renderers[fmt]
    except KeyError:
        raise ValueError(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)})") from None
    text = renderer(doc)
    if idle is not None:
        from slurmgpu.views.idle import with_idle_section

        text = with_idle_section(text, idle, fmt)
    # text and HTML are read by people: a site string's bidi override must not reorder them
    # (Prometheus and JSON keep the values exact; their readers are programs)
    return neutralise(text) if fmt in ("text", "html") else text


# --------------------------------------------------------------------------- formatting


def is_known(value: Any) -> bool:
    """False for None and NaN (unknown), True for any real number or other value."""
    if value is None:
        return False
    return not (isinstance(value, float) and math.isnan(value))


def fmt_int(value: Any, unknown: str = "n/a") -> str:
    """`1234` -> `1,234`."""
    return f"{int(value):,}" if is_known(value) else unknown


def fmt_gpu_hours(value: Any, unknown: str = "n/a") -> str:
    """GPU-hours with one decimal and thousands separators."""
    return f"{float(value):,.1f}" if is_known(value) else unknown


def fmt_ratio(value: Any, unknown: str = "n/a") -> str:
    """A 0..1 ratio as a percentage."""
    return f"{float(value) * 100:.1f}%" if is_known(value) else unknown


def fmt_percent(value: Any, unknown: str = "n/a") -> str:
    """A 0..100 percentage (gres/gpuutil means) as `48.6%`."""
    return f"{float(value):.1f}%" if is_known(value) else unknown


def fmt_duration(seconds: Any, unknown: str = "n/a") -> str:
    """Seconds as the two largest units: `45s`, `12m 05s`, `3h 07m`, `2d 04h`."""
    if not is_known(seconds):
        return unknown
    s = round(float(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def printable(value: Any, width: int | None = None) -> str:
    """A site string made safe for a terminal: control characters escaped, optionally cut."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], "" if value is None else str(value))
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def text_table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, left: int = 1) -> str:
    """A fixed-width table: the first `left` columns left-aligned, the rest right-aligned."""
    rows = [list(r) for r in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out.extend(line(r) for r in rows)
    return "\n".join(out)


def _wait(group: GroupStats, key: str) -> float | None:
    """One of the group's wait percentiles ("p50", "p95", "max")."""
    return getattr(group.wait_s, key)


Column = tuple[str, Callable[[GroupRow], str]]


def _group_columns(name_key: str, *, capacity: bool) -> tuple[list[Column], list[Column]]:
    """The two tables of a grouping (GPU-hours; waits and preemption), text and HTML alike."""
    name: list[Column] = [(name_key.upper(), lambda g: printable(g.name, 32))]
    if name_key == "qos":
        name.append(("TIER", lambda g: printable(g.tier, 16)))
    hours: list[Column] = [
        ("JOBS", lambda g: fmt_int(g.jobs)),
        ("GPU JOBS", lambda g: fmt_int(g.gpu_jobs)),
        ("PENDING", lambda g: fmt_int(g.pending_jobs)),
        ("GPU-H ALLOC", lambda g: fmt_gpu_hours(g.gpu_hours_allocated)),
    ]
    if capacity:
        hours += [
            ("CAPACITY GPU-H", lambda g: fmt_gpu_hours(g.capacity_gpu_hours)),
            ("ALLOC", lambda g: fmt_ratio(g.allocation_ratio)),
        ]
    hours += [
        ("GPU-H USED", lambda g: fmt_gpu_hours(g.gpu_hours_used)),
        ("GPU UTIL", lambda g: fmt_percent(g.gpu_util_mean)),
        ("WASTE GPU-H", lambda g: fmt_gpu_hours(g.waste_gpu_hours)),
        ("LOW-MEM GPU-H", lambda g: fmt_gpu_hours(g.low_memory_gpu_hours)),
    ]
    waits: list[Column] = [
        ("WAIT P50", lambda g: fmt_duration(_wait(g, "p50"))),
        ("WAIT P95", lambda g: fmt_duration(_wait(g, "p95"))),
        ("WAIT MAX", lambda g: fmt_duration(_wait(g, "max"))),
        ("PREEMPTED", lambda g: fmt_int(g.preemptions)),
        ("LOST GPU-H", lambda g: fmt_gpu_hours(g.gpu_hours_lost_to_preemption)),
        ("REQUEUED", lambda g: fmt_int(g.requeues)),
        ("REQUEUE LOST GPU-H", lambda g: fmt_gpu_hours(g.gpu_hours_lost_to_requeue)),
    ]
    return name + hours, name + waits


# (section title, document attribute, name key, has capacity columns, rows limited)
_GROUP_SECTIONS: tuple[tuple[str, str, str, bool, bool], ...] = (
    ("By cluster", "by_cluster", "cluster", True, False),
    ("By partition", "by_partition", "partition", True, False),
    ("By QOS", "by_qos", "qos", True, False),
    ("By tier", "by_tier", "tier", False, False),
    ("By job kind", "by_kind", "kind", False, False),
    ("By account", "by_account", "account", False, True),
    ("By user", "by_user", "user", False, True),
)


def _sorted_groups(groups: Sequence[GroupRow], name_key: str) -> list[GroupRow]:
    """Largest GPU-hours first (unknown last), then by the whole row, for a stable order."""

    def key(g: GroupRow) -> tuple[float, str]:
        hours = g.gpu_hours_allocated
        return (
            -float(hours) if is_known(hours) else math.inf,
            json.dumps(g.to_json(name_key), sort_keys=True),
        )

    return sorted(groups, key=key)


def _group_tables(
    groups: Sequence[GroupRow], name_key: str, capacity: bool, top: int | None
) -> tuple[list[tuple[list[str], list[list[str]]]], int]:
    """[(headers, formatted rows)] for both tables, and how many rows were left off."""
    ordered = _sorted_groups(groups, name_key)
    shown = ordered if top is None else ordered[:top]
    tables = [
        ([h for h, _ in cols], [[fmt(g) for _, fmt in cols] for g in shown])
        for cols in _group_columns(name_key, capacity=capacity)
    ]
    return tables, len(ordered) - len(shown)


def _effect_text(effect: Any) -> str:
    """`estimated_effect` is free text or a mapping of named numbers."""
    if not is_known(effect) or effect == {}:
        return "unknown"
    if isinstance(effect, Mapping | list | tuple):
        return ", ".join(_evidence_items(effect))
    return str(effect)


def _evidence_items(evidence: Any) -> list[str]:
    if isinstance(evidence, Mapping):
        return [f"{k}={_evidence_value(v)}" for k, v in evidence.items()]
    if isinstance(evidence, list | tuple):
        return [_evidence_value(v) for v in evidence]
    if evidence is None:
        return []
    return [str(evidence)]


def _evidence_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if is_known(value) else "unknown"
    if value is None:
        return "unknown"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def _source_line(source: Source) -> str:
    kind = source.kind or "unknown"
    files = source.files
    where = f"{kind}"
    if files:
        where += f" ({len(files)} file{'s' if len(files) != 1 else ''}: "
        where += ", ".join(printable(f) for f in files[:3])
        where += ", …)" if len(files) > 3 else ")"
    version = source.slurm_version
    line = f"{where}; Slurm {printable(version) if version else 'version unknown'}"
    if source.backend_note and source.backend_note != kind:
        line += f" ({printable(source.backend_note)})"
    return line


def _notes(analysis: AnalysisDocument) -> list[str]:
    """Caveats a reader must see next to the numbers (why something is unknown)."""
    notes = []
    source = analysis.source
    if source.capacity_error:
        notes.append(f"capacity unknown: {source.capacity_error}")
    totals = analysis.totals
    outside = totals.rows_outside_window
    if is_known(outside) and outside:
        notes.append(f"{fmt_int(outside)} allocation rows fall outside the window (not counted)")
    latin1 = totals.rows_latin1_decoded
    if is_known(latin1) and latin1:
        notes.append(f"{fmt_int(latin1)} lines were not UTF-8: decoded as Latin-1")
    if source.usage_reading:
        notes.append(f"GPU usage: {source.usage_reading}")
    fit = analysis.fit_fraction
    for entry in fit.unknown_gpu_types:
        what = f"GPU type {entry.type}" if entry.type else f"untyped partition {entry.partition}"
        notes.append(
            f"{what}: memory size unknown for {fmt_int(entry.gpu_runs)} GPU runs; {entry.fix}"
        )
    notes += [str(n) for n in analysis.notes]
    basis = {k: v for k, v in analysis.utilization_basis.items() if v}
    if basis:
        shown = ", ".join(f"{name} {fmt_int(runs)}" for name, runs in sorted(basis.items()))
        notes.append(f"GPU use measured by (runs): {shown}")
    for w in analysis.measure_warnings:
        jobs = w.job_ids
        where = f" (jobs {','.join(jobs[:5])}{'...' if len(jobs) > 5 else ''})" if jobs else ""
        notes.append(f"measure {w.source}: {w.kind}: {w.message}{where}")
    unknown_shards = totals.shard_runs_unknown_fraction
    if is_known(unknown_shards) and unknown_shards:
        notes.append(
            f"{fmt_int(unknown_shards)} gres/shard runs have no known shards-per-GPU: "
            "counted as 0 GPU-hours (give --shards-per-gpu)"
        )
    return notes


# --------------------------------------------------------------------------- text


def _totals_lines(t: Totals) -> list[tuple[str, str]]:
    """(label, value) pairs of the totals block, shared by the text and HTML reports."""
    wait = t.wait_s
    capacity = t.capacity_gpu_hours
    alloc_line = fmt_gpu_hours(t.gpu_hours_allocated, "unknown")
    if is_known(capacity):
        alloc_line += f" of {fmt_gpu_hours(capacity)} capacity"
        alloc_line += f" ({fmt_ratio(t.allocation_ratio, 'ratio unknown')})"
    else:
        alloc_line += " (capacity unknown)"
    used = t.gpu_hours_used
    if is_known(used):
        used_line = (
            f"{fmt_gpu_hours(used)} of the {fmt_gpu_hours(t.util_known_gpu_hours)} "
            f"GPU-hours with gres/gpuutil (mean utilization "
            f"{fmt_percent(t.gpu_util_mean)}; "
            f"waste {fmt_gpu_hours(t.waste_gpu_hours)})"
        )
    else:
        used_line = "unknown (no gres/gpuutil in this accounting: Slurm >= 23.02, never for MIG)"
    jobs_line = f"{fmt_int(t.jobs, 'unknown')} ({fmt_int(t.gpu_jobs)} with GPUs"
    if is_known(t.pending_jobs):
        jobs_line += f", {fmt_int(t.pending_jobs)} pending"
    jobs_line += ")"
    preempt_line = (
        f"{fmt_int(t.preemptions, 'unknown')} preempted "
        f"({fmt_gpu_hours(t.gpu_hours_lost_to_preemption)} GPU-hours lost), "
        f"{fmt_int(t.requeues, 'unknown')} requeued"
    )
    if is_known(t.gpu_hours_lost_to_requeue):
        preempt_line += f" ({fmt_gpu_hours(t.gpu_hours_lost_to_requeue)} GPU-hours lost)"
    return [
        ("jobs", jobs_line),
        ("GPU-hours allocated", alloc_line),
        ("GPU-hours used", used_line),
        (
            "queue wait",
            f"p50 {fmt_duration(wait.p50)}, p95 {fmt_duration(wait.p95)}, "
            f"max {fmt_duration(wait.max)}",
        ),
        ("preemption", preempt_line),
        (
            "sacct rows",
            f"{fmt_int(t.rows_read, '?')} read = "
            f"{fmt_int(t.rows_analyzed, '?')} analyzed + "
            f"{fmt_int(t.rows_rejected, '?')} rejected",
        ),
    ]


def left_cols(name_key: str) -> int:
    """Left-aligned (name) columns of a group table."""
    return 2 if name_key == "qos" else 1


def _fit_rows(fit: FitShares) -> list[list[str]]:
    rows = []
    for name in FIT_SLICES:
        entry = fit.share(name)
        rows.append([name + " GPU", fmt_ratio(entry.jobs), fmt_ratio(entry.gpu_hours)])
    return rows


FIT_PARTITION_HEADERS = ["PARTITION", *(f"{n} GPU JOBS" for n in FIT_SLICES), "UNKNOWN NEED"]


def _fit_partition_rows(analysis: AnalysisDocument) -> list[list[str]]:
    """Per partition: share of its GPU runs (with a known need) fitting each slice."""
    rows = []
    for g in analysis.by_partition:
        fit = g.fit_fraction
        if not fit or not (fit.known_runs or fit.unknown_runs):
            continue
        rows.append(
            [printable(g.name, 32)]
            + [fmt_ratio(fit.share(n).jobs) for n in FIT_SLICES]
            + [f"{fmt_int(fit.unknown_runs)} runs"]
        )
    return rows


def render_text(analysis: AnalysisDocument) -> str:
    """Fixed-width tables for a person at a terminal."""
    window = analysis.window
    out = [
        f"slurmgpu report: {iso_utc(window.since)} .. {iso_utc(window.until)}",
        f"source: {_source_line(analysis.source)}; generated {iso_utc(analysis.generated_at)}",
        "",
        "Totals",
    ]
    totals = _totals_lines(analysis.totals)
    label_w = max(len(label) for label, _ in totals)
    out += [f"  {label.ljust(label_w)}  {value}" for label, value in totals]
    out += [f"  note: {printable(note)}" for note in _notes(analysis)]

    for title, key, name_key, capacity, limited in _GROUP_SECTIONS:
        groups = getattr(analysis, key)
        if key == "by_cluster" and len(groups) <= 1:
            continue  # one cluster: its row is the totals
        out += ["", title]
        if not groups:
            out.append("  (none)")
            continue
        tables, left_off = _group_tables(groups, name_key, capacity, TOP_N if limited else None)
        for i, (headers, rows) in enumerate(tables):
            out += [""] if i else []
            out += [
                "  " + ln for ln in text_table(headers, rows, left=left_cols(name_key)).splitlines()
            ]
        if left_off:
            out.append(f"  ... {left_off} more (see --format json)")

    fit = analysis.fit_fraction
    out += ["", "Would fit in a slice of their GPU (share of GPU jobs)"]
    out += [
        "  " + ln for ln in text_table(["SLICE", "JOBS", "GPU-HOURS"], _fit_rows(fit)).splitlines()
    ]
    if fit.basis:
        out.append(f"  basis: {printable(fit.basis)}")
    part_rows = _fit_partition_rows(analysis)
    if part_rows:
        out += ["", "  By partition"]
        out += ["  " + ln for ln in text_table(FIT_PARTITION_HEADERS, part_rows).splitlines()]
    if fit.unknown_runs:
        out.append(
            f"  shares are over the {fmt_int(fit.known_runs)} GPU runs with a known need; "
            f"{fmt_int(fit.unknown_runs)} runs "
            f"({fmt_gpu_hours(fit.unknown_gpu_hours)} GPU-hours) have an unknown need"
        )

    rejected = analysis.rejected
    n_rejected = analysis.totals.rows_rejected
    out += ["", f"Rejected rows: {fmt_int(n_rejected, str(len(rejected)))}"]
    reasons = analysis.totals.rejected_reasons
    if reasons:
        out.append(
            "  by reason: "
            + printable(", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=_by_count)))
        )
    for row in rejected[:REJECTED_SHOWN]:
        out.append(f"  {printable(row.file)}:{row.line}: {printable(row.reason)}")
    if len(rejected) > REJECTED_SHOWN:
        out.append(f"  ... {len(rejected) - REJECTED_SHOWN} more (see --format json)")

    recs = analysis.recommendations
    out += ["", "Recommendations"]
    if not recs:
        out.append("  none")
    for i, rec in enumerate(recs, 1):
        out.append(f"  {i}. {printable(rec.title)}")
        if rec.detail:
            out.append(f"     {printable(rec.detail)}")
        evidence = _evidence_items(rec.evidence.to_json())
        if evidence:
            out.append(f"     evidence: {printable(', '.join(evidence))}")
        out.append(
            f"     estimated effect: {printable(_effect_text(rec.estimated_effect.to_json()))}"
        )
        if rec.replayed is not None:
            out.append(f"     replayed: {printable(replayed_text(rec.replayed))}")
    return "\n".join(out) + "\n"


def replayed_text(effect: Any) -> str:
    """A `ReplayedEffect` in one line: before -> after for what an admin weighs first."""
    if effect.unavailable:
        return f"not replayed: {effect.unavailable}"

    def pair(values: tuple[float | None, float | None], fmt: Callable[[float], str]) -> str:
        return " -> ".join("?" if v is None else fmt(v) for v in values)

    return (
        f"allocation {pair(effect.allocation_ratio, lambda v: f'{v:.0%}')}, "
        f"p95 wait {pair(effect.wait_p95_s, fmt_duration)}, "
        f"GPU-hours lost to preemption {pair(effect.gpu_hours_lost, lambda v: f'{v:,.0f}')}, "
        f"jobs that cannot run {pair(effect.jobs_not_run, lambda v: f'{v:,.0f}')}"
    )


def _by_count(item: tuple[str, Any]) -> tuple[float, str]:
    return (-float(item[1]) if is_known(item[1]) else 0.0, item[0])


# --------------------------------------------------------------------------- JSON


def render_json(analysis: AnalysisDocument) -> str:
    """The document's `to_json()` (docs/accounting.md schema), strict JSON, one trailing
    newline."""
    text = json.dumps(analysis.to_json(), indent=2, ensure_ascii=False, allow_nan=False)
    return text + "\n"


# --------------------------------------------------------------------------- HTML


def _html_context(analysis: AnalysisDocument) -> dict[str, Any]:
    """Everything the template prints, as plain strings (escaped there with `|e`) or SVG."""
    window = analysis.window
    totals = analysis.totals
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

    points = analysis.timeseries.points
    partitions = _sorted_groups(analysis.by_partition, "partition")
    qos = _sorted_groups(analysis.by_qos, "qos")
    fit = analysis.fit_fraction
    tiers = _sorted_groups(analysis.by_tier, "tier")
    wait_groups = [("all jobs", totals.wait_s)] + [(str(g.name), g.wait_s) for g in partitions]
    plots = [
        {
            "title": "GPU-hours allocated per " + _freq_word(analysis.timeseries.freq),
            "svg": svg.timeseries_chart(points),
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
    recs = [
        {
            "title": printable(r.title),
            "kind": printable(r.kind),
            "detail": str(r.detail or ""),
            "evidence": _evidence_items(r.evidence.to_json()),
            "effect": _effect_text(r.estimated_effect.to_json()),
            "replayed": replayed_text(r.replayed) if r.replayed is not None else "",
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
        "totals": _totals_lines(totals),
        "notes": _notes(analysis),
        "tables": tables,
        "plots": plots,
        "fit_rows": fit_rows,
        "fit_basis": str(fit.basis or ""),
        "fit_partition_headers": FIT_PARTITION_HEADERS,
        "fit_partition_rows": _fit_partition_rows(analysis),
        "rejected": [(str(r.file), str(r.line), str(r.reason)) for r in rejected[:REJECTED_SHOWN]],
        "rejected_count": fmt_int(totals.rows_rejected, str(len(rejected))),
        "rejected_left_off": max(0, len(rejected) - REJECTED_SHOWN),
        "recommendations": recs,
    }


def _freq_word(freq: Any) -> str:
    return {"1h": "hour", "h": "hour", "1H": "hour", "1D": "day", "D": "day", "1d": "day"}.get(
        str(freq), f"interval ({freq})" if freq else "interval"
    )


def render_html(analysis: AnalysisDocument) -> str:
    """One self-contained HTML page (inline CSS and SVG; nothing fetched at view time)."""
    return render_template("report.html.j2", **_html_context(analysis))


# --------------------------------------------------------------------------- Prometheus


def prom_label_value(value: Any) -> str:
    r"""A label value escaped per the text exposition format: `\` `"` and newline (every
    other character, a `\r` or U+2028 too, is valid as it is and kept)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _prom_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _prom_number(value: Any) -> str | None:
    """The sample value, or None when unknown (the sample is then left out, not 0)."""
    if isinstance(value, bool) or not is_known(value):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number):
        return None
    return str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)


# (metric suffix, help, getter) for each group gauge; the prefix says the grouping.
def _util_ratio(group: GroupStats) -> float | None:
    """The analysis gives mean gres/gpuutil in percent; Prometheus convention is 0..1."""
    value = group.gpu_util_mean
    return float(value) / 100 if is_known(value) else None


_GROUP_METRICS: tuple[tuple[str, str, Callable[[GroupStats], Any]], ...] = (
    ("jobs", "Jobs (allocations) in the report window", lambda g: g.jobs),
    ("gpu_jobs", "Jobs that were allocated GPUs", lambda g: g.gpu_jobs),
    ("pending_jobs", "Jobs that never started", lambda g: g.pending_jobs),
    (
        "gpu_hours_allocated",
        "GPU-hours allocated (AllocTRES GPUs x elapsed, MIG/shard weighted) in the window",
        lambda g: g.gpu_hours_allocated,
    ),
    (
        "capacity_gpu_hours",
        "GPU-hours the nodes could have given in the window",
        lambda g: g.capacity_gpu_hours,
    ),
    (
        "allocation_ratio",
        "GPU-hours allocated / capacity (0..1)",
        lambda g: g.allocation_ratio,
    ),
    (
        "gpu_hours_used",
        "GPU-hours actually used (allocated x gres/gpuutil, where measured)",
        lambda g: g.gpu_hours_used,
    ),
    (
        "gpu_util_mean_ratio",
        "Mean GPU utilization of jobs with gres/gpuutil, GPU-hour weighted (0..1)",
        _util_ratio,
    ),
    (
        "waste_gpu_hours",
        "GPU-hours allocated x (1 - utilization), where gres/gpuutil is known",
        lambda g: g.waste_gpu_hours,
    ),
    (
        "low_memory_gpu_hours",
        "GPU-hours of runs whose measured gres/gpumem stayed under 1/4 of the memory given",
        lambda g: g.low_memory_gpu_hours,
    ),
    ("wait_p50_seconds", "Median queue wait (eligible to start)", lambda g: _wait(g, "p50")),
    ("wait_p95_seconds", "95th percentile queue wait", lambda g: _wait(g, "p95")),
    ("wait_max_seconds", "Longest queue wait", lambda g: _wait(g, "max")),
    ("preemptions", "Preempted job runs in the window", lambda g: g.preemptions),
    (
        "gpu_hours_lost_to_preemption",
        "GPU-hours of runs that ended preempted",
        lambda g: g.gpu_hours_lost_to_preemption,
    ),
    ("requeues", "Requeued job runs in the window", lambda g: g.requeues),
    (
        "gpu_hours_lost_to_requeue",
        "GPU-hours of runs that ended requeued",
        lambda g: g.gpu_hours_lost_to_requeue,
    ),
)

_TOTAL_METRICS: tuple[tuple[str, str, Callable[[Totals], Any]], ...] = (
    ("sacct_rows_read", "sacct rows read", lambda t: t.rows_read),
    ("sacct_rows_analyzed", "sacct rows analyzed", lambda t: t.rows_analyzed),
    ("sacct_rows_rejected", "sacct rows rejected as malformed", lambda t: t.rows_rejected),
)


def render_prom(analysis: AnalysisDocument) -> str:
    """A node_exporter textfile-collector file: gauges over the report window.

    Families: `slurmgpu_<metric>` (cluster totals, no labels), `slurmgpu_partition_<metric>`
    {partition}, `slurmgpu_qos_<metric>` {qos, tier}, `slurmgpu_fit_fraction_*` {slice}.
    Unknown values produce no sample (a family with no known value is left out entirely).
    """
    out: list[str] = []

    def family(name: str, help_text: str, samples: Iterable[tuple[dict[str, Any], Any]]) -> None:
        lines = []
        for labels, value in samples:
            number = _prom_number(value)
            if number is None:
                continue
            label_text = ",".join(f'{k}="{prom_label_value(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{label_text}}} {number}" if labels else f"{name} {number}")
        if lines:
            out.append(f"# HELP {name} {_prom_help(help_text)}")
            out.append(f"# TYPE {name} gauge")
            out.extend(lines)

    window = analysis.window
    totals = analysis.totals
    family(
        "slurmgpu_report_generated_timestamp_seconds",
        "When the analysis was made (Unix time); alert when it gets old",
        [({}, analysis.generated_at.timestamp())],
    )
    family(
        "slurmgpu_report_window_start_timestamp_seconds",
        "Start of the report window (Unix time)",
        [({}, window.since.timestamp())],
    )
    family(
        "slurmgpu_report_window_end_timestamp_seconds",
        "End of the report window (Unix time)",
        [({}, window.until.timestamp())],
    )
    for suffix, help_text, get in _TOTAL_METRICS:
        family(f"slurmgpu_{suffix}", help_text, [({}, get(totals))])
    for suffix, help_text, get in _GROUP_METRICS:
        family(f"slurmgpu_{suffix}", help_text + " (all partitions)", [({}, get(totals))])
    for suffix, help_text, get in _GROUP_METRICS:
        family(
            f"slurmgpu_partition_{suffix}",
            help_text + ", per partition",
            [({"partition": g.name}, get(g)) for g in analysis.by_partition],
        )
    for suffix, help_text, get in _GROUP_METRICS:
        family(
            f"slurmgpu_qos_{suffix}",
            help_text + ", per QOS",
            [({"qos": g.name, "tier": g.tier or ""}, get(g)) for g in analysis.by_qos],
        )
    fit = analysis.fit_fraction
    family(
        "slurmgpu_fit_fraction_jobs_ratio",
        "Share of GPU jobs that would fit in this slice of their GPU (0..1)",
        [({"slice": s}, fit.share(s).jobs) for s in FIT_SLICES],
    )
    family(
        "slurmgpu_fit_fraction_gpu_hours_ratio",
        "Share of GPU-hours of jobs that would fit in this slice of their GPU (0..1)",
        [({"slice": s}, fit.share(s).gpu_hours) for s in FIT_SLICES],
    )
    recs = analysis.recommendations
    kinds = sorted({str(r.kind or "other") for r in recs})
    family(
        "slurmgpu_recommendations",
        "Recommendations made by the analysis, per kind",
        [({"kind": k}, sum(1 for r in recs if str(r.kind or "other") == k)) for k in kinds],
    )
    return "\n".join(out) + "\n"


_PROM_SAMPLE = re.compile(
    r"^[a-zA-Z_:][a-zA-Z0-9_:]*"
    r'(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})?'
    r" -?[0-9][0-9.e+-]*$"
)


def check_prom_text(text: str) -> None:
    """Raise ValueError naming the first line that is not valid textfile exposition format."""
    if not text.endswith("\n"):
        raise ValueError("Prometheus text must end with a newline")
    # lines end at "\n" only: a label value may hold a raw "\r", U+2028 or U+0085 (the
    # format escapes only backslash, double quote and line feed), which splitlines() would cut
    for number, line in enumerate(text[:-1].split("\n"), 1):
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        if not _PROM_SAMPLE.match(line):
            raise ValueError(f"line {number} is not a valid sample: {line!r}")
