"""The tables every report format shares (`views/report/`): how unknowns, counts, ratios and
durations print, the by-group columns and sections, notes, totals, fit shares, a
recommendation's evidence and its replayed effect.

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

from slurmgpu.accounting.document import (
    AnalysisDocument,
    FitShares,
    GroupRow,
    GroupStats,
    Source,
    Totals,
)

FORMATS: tuple[str, ...] = ("text", "json", "html", "prom")

FIT_SLICES: tuple[str, ...] = ("1/7", "1/4", "1/2")

# How many accounts / users / rejected rows a person-facing report lists; JSON keeps all.
TOP_N = 15
HTML_TOP_N = 50
REJECTED_SHOWN = 20


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
    """Evidence and effects in human units (`views/evidence.py`); JSON keeps the numbers."""
    from slurmgpu.views.evidence import evidence_items

    return evidence_items(evidence)


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


# --------------------------------------------------------------------------- totals and fit shares


def fmt_kwh(value: float) -> str:
    """kWh as the reports show them: `1,234.5 kWh` (three decimals under 10 kWh)."""
    return f"{value:,.3f} kWh" if abs(value) < 10 else f"{value:,.1f} kWh"


def energy_lines(analysis: Any) -> list[tuple[str, str]]:
    """(label, value) pairs of the energy lines of the totals block (text and HTML): kWh,
    idle kWh, kWh per used GPU-hour, coverage, and money and CO2 when the policy says."""
    e = getattr(analysis, "energy", None)
    if e is None:
        return []
    if not e.coverage:
        return [("GPU energy", "not measured (no collector, DCGM or Slurm energy for any run)")]
    per = e.kwh_per_used_gpu_hour
    lines = [
        ("GPU energy", f"{fmt_kwh(e.kwh)} measured on {fmt_ratio(e.coverage)} of GPU-hours"),
        ("  while idle", f"{fmt_kwh(e.kwh_idle)} (the idle rule; docs/energy.md)"),
    ]
    if per is not None:
        lines.append(("  per used GPU-hour", fmt_kwh(per)))
    c = getattr(analysis, "energy_cost", None)
    if c is not None:
        facility = f"{fmt_kwh(c.facility_kwh)} at PUE {c.pue:g}"
        if c.cost is not None:
            unit = f" {printable(c.currency)}" if c.currency else ""
            facility += f"; {c.cost:,.2f}{unit} ({c.cost_idle or 0:,.2f}{unit} idle)"
        if c.co2_kg is not None:
            facility += f"; {c.co2_kg:,.1f} kg CO2 ({c.co2_kg_idle or 0:,.1f} kg idle)"
        lines.append(("  facility", facility))
    return lines


def energy_partition_rows(analysis: Any) -> list[list[str]]:
    """PARTITION / KWH / IDLE KWH rows of the partitions that drew measured energy."""
    e = getattr(analysis, "energy", None)
    if e is None:
        return []
    return [
        [printable(p.partition), fmt_kwh(p.kwh), fmt_kwh(p.kwh_idle)]
        for p in e.by_partition
        if p.kwh > 0
    ]


def _totals_lines(t: Totals) -> list[tuple[str, str]]:
    """(label, value) pairs of the totals block, shared by the text and HTML reports."""
    wait = t.wait_s
    capacity = t.capacity_gpu_hours
    alloc_line = fmt_gpu_hours(t.gpu_hours_allocated, "unknown")
    if is_known(capacity):
        alloc_line += f" of {fmt_gpu_hours(capacity)} capacity"
        alloc_line += f" ({fmt_ratio(t.allocation_ratio, 'ratio unknown')}"
        if t.gpu_hours_capacity_unknown:
            # the ratio compares known partitions with their capacity (Totals)
            names = ", ".join(printable(p) for p in t.partitions_capacity_unknown[:3])
            more = ", …" if len(t.partitions_capacity_unknown) > 3 else ""
            alloc_line += (
                f" over partitions of known capacity; "
                f"{fmt_gpu_hours(t.gpu_hours_capacity_unknown)} in {names}{more} left out: "
                "capacity unknown"
            )
        alloc_line += ")"
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


ACCEL_HEADERS = [
    "ACCELERATOR", "VENDOR", "CLASS", "RUNS", "DEVICE-HOURS", "DEVICES", "ALLOCATED",
    *(f"FITS {n}" for n in FIT_SLICES), "UNKNOWN NEED",
]  # fmt: skip


def accelerator_rows(analysis: AnalysisDocument) -> list[list[str]]:
    """Per accelerator kind (every vendor): device-hours, capacity share, fit of the need."""
    rows = []
    for r in analysis.by_accelerator:
        rows.append(
            [printable(r.accelerator, 32), r.vendor or "?", r.accel_class or "?"]
            + [fmt_int(r.runs), fmt_gpu_hours(r.device_hours), fmt_int(r.devices, "?")]
            + [fmt_ratio(r.alloc_share)]
            + [fmt_ratio(r.fit.share(n).gpu_hours) for n in FIT_SLICES]
            + [f"{fmt_int(r.fit.unknown_runs)} runs"]
        )
    return rows


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


def fidelity_text(effect: Any) -> str:
    """The `not advised: partition X's baseline is off by more than the policy's tolerance
    (...)` note (`advice.calibrate.not_advised_text`, as `slurmgpu advise` words it) of each
    partition a recommendation touches that its replay does not reproduce, else "". Read from
    the replayed effect's JSON (`fidelity`), so a document read back says it too."""
    if effect is None:
        return ""
    full = getattr(effect, "full", None) or {}
    notes = []
    for f in full.get("fidelity") or ():
        if isinstance(f, dict) and not f.get("calibrated", True) and f.get("note"):
            line = str(f["note"])
            why = f.get("explanation")
            if isinstance(why, dict) and why.get("label"):
                line += f"; why it misses: {why['label']} ({why.get('cause')})"
            notes.append(line)
    return "; ".join(notes)


def harm_text(effect: Any) -> str:
    """`replay shows harm: ...` for a recommendation whose replay breaks the site's objective
    (`ReplayedEffect.harm`), else ""."""
    harm = getattr(effect, "harm", ()) if effect is not None else ()
    return "replay shows harm: " + "; ".join(harm) if harm else ""
