"""Reports from an accounting analysis: terminal text, JSON, self-contained HTML, Prometheus.

Pure functions from the analysis dict (`AnalysisResult.to_dict()`, schema in
docs/accounting.md) to text. `None` in the analysis means *unknown* (e.g. no `gres/gpuutil`
before Slurm 23.02): it is shown as "unknown"/"n/a" and left out of the Prometheus file,
never turned into 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from slurmgpu import __version__
from slurmgpu.render import svg
from slurmgpu.render.templating import render as render_template

FORMATS: tuple[str, ...] = ("text", "json", "html", "prom")

FIT_SLICES: tuple[str, ...] = ("1/7", "1/4", "1/2")

# How many accounts / users / rejected rows a person-facing report lists; JSON keeps all.
TOP_N = 15
HTML_TOP_N = 50
REJECTED_SHOWN = 20


def render_report(analysis: Mapping[str, Any], fmt: str) -> str:
    """Render `analysis` in one of `FORMATS`."""
    renderers: dict[str, Callable[[Mapping[str, Any]], str]] = {
        "text": render_text,
        "json": render_json,
        "html": render_html,
        "prom": render_prom,
    }
    try:
        renderer = renderers[fmt]
    except KeyError:
        raise ValueError(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)})") from None
    return renderer(analysis)


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


def _wait(group: Mapping[str, Any], key: str) -> Any:
    return (group.get("wait_s") or {}).get(key)


Column = tuple[str, Callable[[Mapping[str, Any]], str]]


def _group_columns(name_key: str, *, capacity: bool) -> tuple[list[Column], list[Column]]:
    """The two tables of a grouping (GPU-hours; waits and preemption), text and HTML alike."""
    name: list[Column] = [(name_key.upper(), lambda g: printable(g.get(name_key), 32))]
    if name_key == "qos":
        name.append(("TIER", lambda g: printable(g.get("tier"), 16)))
    hours: list[Column] = [
        ("JOBS", lambda g: fmt_int(g.get("jobs"))),
        ("GPU JOBS", lambda g: fmt_int(g.get("gpu_jobs"))),
        ("PENDING", lambda g: fmt_int(g.get("pending_jobs"))),
        ("GPU-H ALLOC", lambda g: fmt_gpu_hours(g.get("gpu_hours_allocated"))),
    ]
    if capacity:
        hours += [
            ("CAPACITY GPU-H", lambda g: fmt_gpu_hours(g.get("capacity_gpu_hours"))),
            ("ALLOC", lambda g: fmt_ratio(g.get("allocation_ratio"))),
        ]
    hours += [
        ("GPU-H USED", lambda g: fmt_gpu_hours(g.get("gpu_hours_used"))),
        ("GPU UTIL", lambda g: fmt_percent(g.get("gpu_util_mean"))),
        ("WASTE GPU-H", lambda g: fmt_gpu_hours(g.get("waste_gpu_hours"))),
        ("LOW-MEM GPU-H", lambda g: fmt_gpu_hours(g.get("low_memory_gpu_hours"))),
    ]
    waits: list[Column] = [
        ("WAIT P50", lambda g: fmt_duration(_wait(g, "p50"))),
        ("WAIT P95", lambda g: fmt_duration(_wait(g, "p95"))),
        ("WAIT MAX", lambda g: fmt_duration(_wait(g, "max"))),
        ("PREEMPTED", lambda g: fmt_int(g.get("preemptions"))),
        ("LOST GPU-H", lambda g: fmt_gpu_hours(g.get("gpu_hours_lost_to_preemption"))),
        ("REQUEUED", lambda g: fmt_int(g.get("requeues"))),
        ("REQUEUE LOST GPU-H", lambda g: fmt_gpu_hours(g.get("gpu_hours_lost_to_requeue"))),
    ]
    return name + hours, name + waits


# (section title, analysis key, name key, has capacity columns, rows shown: None = all)
_GROUP_SECTIONS: tuple[tuple[str, str, str, bool, bool], ...] = (
    ("By partition", "by_partition", "partition", True, False),
    ("By QOS", "by_qos", "qos", True, False),
    ("By tier", "by_tier", "tier", False, False),
    ("By job kind", "by_kind", "kind", False, False),
    ("By account", "by_account", "account", False, True),
    ("By user", "by_user", "user", False, True),
)


def _sorted_groups(groups: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Largest GPU-hours first (unknown last), then by name, for a stable order."""

    def key(g: Mapping[str, Any]) -> tuple[float, str]:
        hours = g.get("gpu_hours_allocated")
        return (-float(hours) if is_known(hours) else math.inf, json.dumps(g, sort_keys=True))

    return sorted(groups, key=key)


def _group_tables(
    groups: Sequence[Mapping[str, Any]], name_key: str, capacity: bool, top: int | None
) -> tuple[list[tuple[list[str], list[list[str]]]], int]:
    """[(headers, formatted rows)] for both tables, and how many rows were left off."""
    ordered = _sorted_groups(groups)
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


def _source_line(source: Mapping[str, Any]) -> str:
    kind = source.get("kind") or "unknown"
    files = source.get("files") or []
    where = f"{kind}"
    if files:
        where += f" ({len(files)} file{'s' if len(files) != 1 else ''}: "
        where += ", ".join(printable(f) for f in files[:3])
        where += ", …)" if len(files) > 3 else ")"
    version = source.get("slurm_version")
    line = f"{where}; Slurm {printable(version) if version else 'version unknown'}"
    if source.get("backend_note") and source.get("backend_note") != kind:
        line += f" ({printable(source['backend_note'])})"
    return line


def _notes(analysis: Mapping[str, Any]) -> list[str]:
    """Caveats a reader must see next to the numbers (why something is unknown)."""
    notes = []
    source = analysis.get("source") or {}
    if source.get("capacity_error"):
        notes.append(f"capacity unknown: {source['capacity_error']}")
    totals = analysis.get("totals") or {}
    outside = totals.get("rows_outside_window")
    if is_known(outside) and outside:
        notes.append(f"{fmt_int(outside)} allocation rows fall outside the window (not counted)")
    latin1 = totals.get("rows_latin1_decoded")
    if is_known(latin1) and latin1:
        notes.append(f"{fmt_int(latin1)} lines were not UTF-8: decoded as Latin-1")
    if source.get("usage_reading"):
        notes.append(f"GPU usage: {source['usage_reading']}")
    fit = analysis.get("fit_fraction") or {}
    for entry in fit.get("unknown_gpu_types") or []:
        notes.append(
            f"GPU type {entry.get('type')}: memory size unknown for "
            f"{fmt_int(entry.get('gpu_runs'))} GPU runs; {entry.get('fix')}"
        )
    notes += [str(n) for n in analysis.get("notes") or []]
    basis = {k: v for k, v in (analysis.get("utilization_basis") or {}).items() if v}
    if basis:
        shown = ", ".join(f"{name} {fmt_int(runs)}" for name, runs in sorted(basis.items()))
        notes.append(f"GPU use measured by (runs): {shown}")
    for w in analysis.get("measure_warnings") or []:
        jobs = w.get("job_ids") or []
        where = f" (jobs {','.join(jobs[:5])}{'...' if len(jobs) > 5 else ''})" if jobs else ""
        notes.append(f"measure {w.get('source')}: {w.get('kind')}: {w.get('message')}{where}")
    unknown_shards = totals.get("shard_runs_unknown_fraction")
    if is_known(unknown_shards) and unknown_shards:
        notes.append(
            f"{fmt_int(unknown_shards)} gres/shard runs have no known shards-per-GPU: "
            "counted as 0 GPU-hours (give --shards-per-gpu)"
        )
    return notes


# --------------------------------------------------------------------------- text


def _totals_lines(t: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(label, value) pairs of the totals block, shared by the text and HTML reports."""
    wait = t.get("wait_s") or {}
    capacity = t.get("capacity_gpu_hours")
    alloc_line = fmt_gpu_hours(t.get("gpu_hours_allocated"), "unknown")
    if is_known(capacity):
        alloc_line += f" of {fmt_gpu_hours(capacity)} capacity"
        alloc_line += f" ({fmt_ratio(t.get('allocation_ratio'), 'ratio unknown')})"
    else:
        alloc_line += " (capacity unknown)"
    used = t.get("gpu_hours_used")
    if is_known(used):
        used_line = (
            f"{fmt_gpu_hours(used)} of the {fmt_gpu_hours(t.get('util_known_gpu_hours'))} "
            f"GPU-hours with gres/gpuutil (mean utilization "
            f"{fmt_percent(t.get('gpu_util_mean'))}; "
            f"waste {fmt_gpu_hours(t.get('waste_gpu_hours'))})"
        )
    else:
        used_line = "unknown (no gres/gpuutil in this accounting: Slurm >= 23.02, never for MIG)"
    jobs_line = f"{fmt_int(t.get('jobs'), 'unknown')} ({fmt_int(t.get('gpu_jobs'))} with GPUs"
    if is_known(t.get("pending_jobs")):
        jobs_line += f", {fmt_int(t.get('pending_jobs'))} pending"
    jobs_line += ")"
    preempt_line = (
        f"{fmt_int(t.get('preemptions'), 'unknown')} preempted "
        f"({fmt_gpu_hours(t.get('gpu_hours_lost_to_preemption'))} GPU-hours lost), "
        f"{fmt_int(t.get('requeues'), 'unknown')} requeued"
    )
    if is_known(t.get("gpu_hours_lost_to_requeue")):
        preempt_line += f" ({fmt_gpu_hours(t.get('gpu_hours_lost_to_requeue'))} GPU-hours lost)"
    return [
        ("jobs", jobs_line),
        ("GPU-hours allocated", alloc_line),
        ("GPU-hours used", used_line),
        (
            "queue wait",
            f"p50 {fmt_duration(wait.get('p50'))}, p95 {fmt_duration(wait.get('p95'))}, "
            f"max {fmt_duration(wait.get('max'))}",
        ),
        ("preemption", preempt_line),
        (
            "sacct rows",
            f"{fmt_int(t.get('rows_read'), '?')} read = "
            f"{fmt_int(t.get('rows_analyzed'), '?')} analyzed + "
            f"{fmt_int(t.get('rows_rejected'), '?')} rejected",
        ),
    ]


def left_cols(name_key: str) -> int:
    """Left-aligned (name) columns of a group table."""
    return 2 if name_key == "qos" else 1


def _fit_rows(fit: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for name in FIT_SLICES:
        entry = fit.get(name) or {}
        rows.append(
            [name + " GPU", fmt_ratio(entry.get("jobs")), fmt_ratio(entry.get("gpu_hours"))]
        )
    return rows


FIT_PARTITION_HEADERS = ["PARTITION", *(f"{n} GPU JOBS" for n in FIT_SLICES), "UNKNOWN NEED"]


def _fit_partition_rows(analysis: Mapping[str, Any]) -> list[list[str]]:
    """Per partition: share of its GPU runs (with a known need) fitting each slice."""
    rows = []
    for g in analysis.get("by_partition") or []:
        fit = g.get("fit_fraction")
        if not fit or not (fit.get("known_runs") or fit.get("unknown_runs")):
            continue
        rows.append(
            [printable(g.get("partition"), 32)]
            + [fmt_ratio((fit.get(n) or {}).get("jobs")) for n in FIT_SLICES]
            + [f"{fmt_int(fit.get('unknown_runs'))} runs"]
        )
    return rows


def render_text(analysis: Mapping[str, Any]) -> str:
    """Fixed-width tables for a person at a terminal."""
    window = analysis.get("window") or {}
    out = [
        f"slurmgpu report: {printable(window.get('since') or '?')} .. "
        f"{printable(window.get('until') or '?')}",
        f"source: {_source_line(analysis.get('source') or {})}; "
        f"generated {printable(analysis.get('generated_at') or '?')}",
        "",
        "Totals",
    ]
    totals = _totals_lines(analysis.get("totals") or {})
    label_w = max(len(label) for label, _ in totals)
    out += [f"  {label.ljust(label_w)}  {value}" for label, value in totals]
    out += [f"  note: {printable(note)}" for note in _notes(analysis)]

    for title, key, name_key, capacity, limited in _GROUP_SECTIONS:
        groups = analysis.get(key) or []
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

    fit = analysis.get("fit_fraction") or {}
    out += ["", "Would fit in a slice of their GPU (share of GPU jobs)"]
    out += [
        "  " + ln for ln in text_table(["SLICE", "JOBS", "GPU-HOURS"], _fit_rows(fit)).splitlines()
    ]
    if fit.get("basis"):
        out.append(f"  basis: {printable(fit['basis'])}")
    part_rows = _fit_partition_rows(analysis)
    if part_rows:
        out += ["", "  By partition"]
        out += ["  " + ln for ln in text_table(FIT_PARTITION_HEADERS, part_rows).splitlines()]
    if fit.get("unknown_runs"):
        out.append(
            f"  shares are over the {fmt_int(fit.get('known_runs'))} GPU runs with a known need; "
            f"{fmt_int(fit.get('unknown_runs'))} runs "
            f"({fmt_gpu_hours(fit.get('unknown_gpu_hours'))} GPU-hours) have an unknown need"
        )

    rejected = analysis.get("rejected") or []
    n_rejected = (analysis.get("totals") or {}).get("rows_rejected")
    out += ["", f"Rejected rows: {fmt_int(n_rejected, str(len(rejected)))}"]
    reasons = (analysis.get("totals") or {}).get("rejected_reasons") or {}
    if reasons:
        out.append(
            "  by reason: "
            + printable(", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=_by_count)))
        )
    for row in rejected[:REJECTED_SHOWN]:
        out.append(
            f"  {printable(row.get('file'))}:{row.get('line')}: {printable(row.get('reason'))}"
        )
    if len(rejected) > REJECTED_SHOWN:
        out.append(f"  ... {len(rejected) - REJECTED_SHOWN} more (see --format json)")

    recs = analysis.get("recommendations") or []
    out += ["", "Recommendations"]
    if not recs:
        out.append("  none")
    for i, rec in enumerate(recs, 1):
        out.append(f"  {i}. {printable(rec.get('title'))}")
        if rec.get("detail"):
            out.append(f"     {printable(rec.get('detail'))}")
        evidence = _evidence_items(rec.get("evidence"))
        if evidence:
            out.append(f"     evidence: {printable(', '.join(evidence))}")
        out.append(f"     estimated effect: {printable(_effect_text(rec.get('estimated_effect')))}")
    return "\n".join(out) + "\n"


def _by_count(item: tuple[str, Any]) -> tuple[float, str]:
    return (-float(item[1]) if is_known(item[1]) else 0.0, item[0])


# --------------------------------------------------------------------------- JSON


def _clean_json(value: Any) -> Any:
    """NaN/inf -> None (JSON has no NaN; unknown is null), tuples -> lists, keys -> str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean_json(v) for v in value]
    return value


def render_json(analysis: Mapping[str, Any]) -> str:
    """The analysis itself (docs/accounting.md schema), strict JSON, one trailing newline."""
    return json.dumps(_clean_json(analysis), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


# --------------------------------------------------------------------------- HTML


def _html_context(analysis: Mapping[str, Any]) -> dict[str, Any]:
    """Everything the template prints, as plain strings (escaped there with `|e`) or SVG."""
    window = analysis.get("window") or {}
    totals = analysis.get("totals") or {}
    tables = []
    for title, key, name_key, capacity, limited in _GROUP_SECTIONS:
        groups = analysis.get(key) or []
        parts, left_off = _group_tables(groups, name_key, capacity, HTML_TOP_N if limited else None)
        tables.append(
            {
                "title": title,
                "parts": [{"headers": h, "rows": r} for h, r in parts] if groups else [],
                "left_off": left_off,
            }
        )

    points = (analysis.get("timeseries") or {}).get("points") or []
    partitions = _sorted_groups(analysis.get("by_partition") or [])
    qos = _sorted_groups(analysis.get("by_qos") or [])
    fit = analysis.get("fit_fraction") or {}
    tiers = _sorted_groups(analysis.get("by_tier") or [])
    wait_groups = [("all jobs", totals.get("wait_s") or {})] + [
        (str(g.get("partition")), g.get("wait_s") or {}) for g in partitions
    ]
    plots = [
        {
            "title": "GPU-hours allocated per "
            + _freq_word((analysis.get("timeseries") or {}).get("freq")),
            "svg": svg.timeseries_chart(points),
        },
        {
            "title": "GPU-hours allocated by partition",
            "svg": svg.bar_chart(
                [(str(g.get("partition")), [g.get("gpu_hours_allocated")]) for g in partitions],
                series=["GPU-hours"],
                value_format=fmt_gpu_hours,
            ),
        },
        {
            "title": "GPU-hours allocated by QOS (tier)",
            "svg": svg.bar_chart(
                [
                    (f"{g.get('qos')} ({g.get('tier') or '?'})", [g.get("gpu_hours_allocated")])
                    for g in qos
                ],
                series=["GPU-hours"],
                value_format=fmt_gpu_hours,
            ),
        },
        {
            "title": "Share of GPU jobs that would fit a slice of their GPU",
            "svg": svg.bar_chart(
                [
                    (f"{name} GPU", [(fit.get(name) or {}).get(k) for k in ("jobs", "gpu_hours")])
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
                [(name, [w.get("p50"), w.get("p95"), w.get("max")]) for name, w in wait_groups],
                series=["p50", "p95", "max"],
                value_format=fmt_duration,
                log_scale=True,
            ),
        },
        {
            "title": "Queue wait per tier (log scale)",
            "svg": svg.bar_chart(
                [
                    (str(g.get("tier")), [_wait(g, "p50"), _wait(g, "p95"), _wait(g, "max")])
                    for g in tiers
                ],
                series=["p50", "p95", "max"],
                value_format=fmt_duration,
                log_scale=True,
            ),
        },
    ]
    recs = [
        {
            "title": printable(r.get("title")),
            "kind": printable(r.get("kind")),
            "detail": str(r.get("detail") or ""),
            "evidence": _evidence_items(r.get("evidence")),
            "effect": _effect_text(r.get("estimated_effect")),
        }
        for r in analysis.get("recommendations") or []
    ]
    rejected = analysis.get("rejected") or []
    fit_rows = _fit_rows(fit)
    return {
        "version": __version__,
        "since": str(window.get("since") or "?"),
        "until": str(window.get("until") or "?"),
        "generated_at": str(analysis.get("generated_at") or "?"),
        "source": _source_line(analysis.get("source") or {}),
        "totals": _totals_lines(totals),
        "notes": _notes(analysis),
        "tables": tables,
        "plots": plots,
        "fit_rows": fit_rows,
        "fit_basis": str(fit.get("basis") or ""),
        "fit_partition_headers": FIT_PARTITION_HEADERS,
        "fit_partition_rows": _fit_partition_rows(analysis),
        "rejected": [
            (str(r.get("file")), str(r.get("line")), str(r.get("reason")))
            for r in rejected[:REJECTED_SHOWN]
        ],
        "rejected_count": fmt_int(totals.get("rows_rejected"), str(len(rejected))),
        "rejected_left_off": max(0, len(rejected) - REJECTED_SHOWN),
        "recommendations": recs,
    }


def _freq_word(freq: Any) -> str:
    return {"1h": "hour", "h": "hour", "1H": "hour", "1D": "day", "D": "day", "1d": "day"}.get(
        str(freq), f"interval ({freq})" if freq else "interval"
    )


def render_html(analysis: Mapping[str, Any]) -> str:
    """One self-contained HTML page (inline CSS and SVG; nothing fetched at view time)."""
    return render_template("report.html.j2", **_html_context(analysis))


# --------------------------------------------------------------------------- Prometheus


def prom_label_value(value: Any) -> str:
    r"""A label value escaped per the text exposition format: `\` `"` and newline."""
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
def _util_ratio(group: Mapping[str, Any]) -> Any:
    """The analysis gives mean gres/gpuutil in percent; Prometheus convention is 0..1."""
    value = group.get("gpu_util_mean")
    return float(value) / 100 if is_known(value) else None


_GROUP_METRICS: tuple[tuple[str, str, Callable[[Mapping], Any]], ...] = (
    ("jobs", "Jobs (allocations) in the report window", lambda g: g.get("jobs")),
    ("gpu_jobs", "Jobs that were allocated GPUs", lambda g: g.get("gpu_jobs")),
    ("pending_jobs", "Jobs that never started", lambda g: g.get("pending_jobs")),
    (
        "gpu_hours_allocated",
        "GPU-hours allocated (AllocTRES GPUs x elapsed, MIG/shard weighted) in the window",
        lambda g: g.get("gpu_hours_allocated"),
    ),
    (
        "capacity_gpu_hours",
        "GPU-hours the nodes could have given in the window",
        lambda g: g.get("capacity_gpu_hours"),
    ),
    (
        "allocation_ratio",
        "GPU-hours allocated / capacity (0..1)",
        lambda g: g.get("allocation_ratio"),
    ),
    (
        "gpu_hours_used",
        "GPU-hours actually used (allocated x gres/gpuutil, where measured)",
        lambda g: g.get("gpu_hours_used"),
    ),
    (
        "gpu_util_mean_ratio",
        "Mean GPU utilization of jobs with gres/gpuutil, GPU-hour weighted (0..1)",
        _util_ratio,
    ),
    (
        "waste_gpu_hours",
        "GPU-hours allocated x (1 - utilization), where gres/gpuutil is known",
        lambda g: g.get("waste_gpu_hours"),
    ),
    (
        "low_memory_gpu_hours",
        "GPU-hours of runs whose measured gres/gpumem stayed under 1/4 of the memory given",
        lambda g: g.get("low_memory_gpu_hours"),
    ),
    ("wait_p50_seconds", "Median queue wait (eligible to start)", lambda g: _wait(g, "p50")),
    ("wait_p95_seconds", "95th percentile queue wait", lambda g: _wait(g, "p95")),
    ("wait_max_seconds", "Longest queue wait", lambda g: _wait(g, "max")),
    ("preemptions", "Preempted job runs in the window", lambda g: g.get("preemptions")),
    (
        "gpu_hours_lost_to_preemption",
        "GPU-hours of runs that ended preempted",
        lambda g: g.get("gpu_hours_lost_to_preemption"),
    ),
    ("requeues", "Requeued job runs in the window", lambda g: g.get("requeues")),
    (
        "gpu_hours_lost_to_requeue",
        "GPU-hours of runs that ended requeued",
        lambda g: g.get("gpu_hours_lost_to_requeue"),
    ),
)

_TOTAL_METRICS: tuple[tuple[str, str, Callable[[Mapping], Any]], ...] = (
    ("sacct_rows_read", "sacct rows read", lambda t: t.get("rows_read")),
    ("sacct_rows_analyzed", "sacct rows analyzed", lambda t: t.get("rows_analyzed")),
    ("sacct_rows_rejected", "sacct rows rejected as malformed", lambda t: t.get("rows_rejected")),
)


def render_prom(analysis: Mapping[str, Any]) -> str:
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

    window = analysis.get("window") or {}
    totals = analysis.get("totals") or {}
    family(
        "slurmgpu_report_generated_timestamp_seconds",
        "When the analysis was made (Unix time); alert when it gets old",
        [({}, _timestamp(analysis.get("generated_at")))],
    )
    family(
        "slurmgpu_report_window_start_timestamp_seconds",
        "Start of the report window (Unix time)",
        [({}, _timestamp(window.get("since")))],
    )
    family(
        "slurmgpu_report_window_end_timestamp_seconds",
        "End of the report window (Unix time)",
        [({}, _timestamp(window.get("until")))],
    )
    for suffix, help_text, get in _TOTAL_METRICS:
        family(f"slurmgpu_{suffix}", help_text, [({}, get(totals))])
    for suffix, help_text, get in _GROUP_METRICS:
        family(f"slurmgpu_{suffix}", help_text + " (all partitions)", [({}, get(totals))])
    for suffix, help_text, get in _GROUP_METRICS:
        family(
            f"slurmgpu_partition_{suffix}",
            help_text + ", per partition",
            [
                ({"partition": g.get("partition")}, get(g))
                for g in analysis.get("by_partition") or []
            ],
        )
    for suffix, help_text, get in _GROUP_METRICS:
        family(
            f"slurmgpu_qos_{suffix}",
            help_text + ", per QOS",
            [
                ({"qos": g.get("qos"), "tier": g.get("tier") or ""}, get(g))
                for g in analysis.get("by_qos") or []
            ],
        )
    fit = analysis.get("fit_fraction") or {}
    family(
        "slurmgpu_fit_fraction_jobs_ratio",
        "Share of GPU jobs that would fit in this slice of their GPU (0..1)",
        [({"slice": s}, (fit.get(s) or {}).get("jobs")) for s in FIT_SLICES],
    )
    family(
        "slurmgpu_fit_fraction_gpu_hours_ratio",
        "Share of GPU-hours of jobs that would fit in this slice of their GPU (0..1)",
        [({"slice": s}, (fit.get(s) or {}).get("gpu_hours")) for s in FIT_SLICES],
    )
    recs = analysis.get("recommendations") or []
    kinds = sorted({str(r.get("kind") or "other") for r in recs})
    family(
        "slurmgpu_recommendations",
        "Recommendations made by the analysis, per kind",
        [({"kind": k}, sum(1 for r in recs if str(r.get("kind") or "other") == k)) for k in kinds],
    )
    return "\n".join(out) + "\n"


def _timestamp(value: Any) -> float | None:
    """ISO-8601 (with Z or offset; naive means UTC) or epoch seconds -> epoch seconds."""
    import datetime as dt

    if not is_known(value):
        return None
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


_PROM_SAMPLE = re.compile(
    r"^[a-zA-Z_:][a-zA-Z0-9_:]*"
    r'(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})?'
    r" -?[0-9][0-9.e+-]*$"
)


def check_prom_text(text: str) -> None:
    """Raise ValueError naming the first line that is not valid textfile exposition format."""
    if not text.endswith("\n"):
        raise ValueError("Prometheus text must end with a newline")
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        if not _PROM_SAMPLE.match(line):
            raise ValueError(f"line {number} is not a valid sample: {line!r}")
