"""The Prometheus report: a node_exporter textfile of gauges over the report window."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from slurmgpu.accounting.document import (
    AnalysisDocument,
    GroupStats,
    Totals,
)
from slurmgpu.views.report.tables import (
    FIT_SLICES,
    _wait,
    is_known,
)


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


def _seconds(gpu_hours: Any) -> float | None:
    """GPU-hours as GPU-seconds: Prometheus' base unit of time is the second."""
    return float(gpu_hours) * 3600.0 if is_known(gpu_hours) else None


# Names follow Prometheus' conventions (promtool check metrics): base units (GPU time in
# GPU-seconds, `_seconds`), ratios 0..1 (`_ratio`); these are gauges over the report window,
# not counters, so none ends in `_total`. docs/reports.md lists them.
_GROUP_METRICS: tuple[tuple[str, str, Callable[[GroupStats], Any]], ...] = (
    ("jobs", "Jobs (allocations) in the report window", lambda g: g.jobs),
    ("gpu_jobs", "Jobs that were allocated GPUs", lambda g: g.gpu_jobs),
    ("pending_jobs", "Jobs that never started", lambda g: g.pending_jobs),
    (
        "gpu_allocated_seconds",
        "GPU-seconds allocated (AllocTRES GPUs x elapsed, MIG/shard weighted) in the window",
        lambda g: _seconds(g.gpu_hours_allocated),
    ),
    (
        "gpu_capacity_seconds",
        "GPU-seconds the nodes could have given in the window",
        lambda g: _seconds(g.capacity_gpu_hours),
    ),
    (
        "allocation_ratio",
        "GPU time allocated / capacity (0..1), partitions of known capacity",
        lambda g: g.allocation_ratio,
    ),
    (
        "gpu_used_seconds",
        "GPU-seconds actually used (allocated x measured utilization, where measured)",
        lambda g: _seconds(g.gpu_hours_used),
    ),
    (
        "gpu_util_mean_ratio",
        "Mean GPU utilization of jobs with a measurement, GPU-time weighted (0..1)",
        _util_ratio,
    ),
    (
        "gpu_waste_seconds",
        "GPU-seconds allocated x (1 - utilization), where utilization is measured",
        lambda g: _seconds(g.waste_gpu_hours),
    ),
    (
        "gpu_low_memory_seconds",
        "GPU-seconds of runs whose measured GPU memory stayed under 1/4 of the memory given",
        lambda g: _seconds(g.low_memory_gpu_hours),
    ),
    ("wait_p50_seconds", "Median queue wait (eligible to start)", lambda g: _wait(g, "p50")),
    ("wait_p95_seconds", "95th percentile queue wait", lambda g: _wait(g, "p95")),
    ("wait_max_seconds", "Longest queue wait", lambda g: _wait(g, "max")),
    ("preemptions", "Preempted job runs in the window", lambda g: g.preemptions),
    (
        "gpu_lost_to_preemption_seconds",
        "GPU-seconds of runs that ended preempted",
        lambda g: _seconds(g.gpu_hours_lost_to_preemption),
    ),
    ("requeues", "Requeued job runs in the window", lambda g: g.requeues),
    (
        "gpu_lost_to_requeue_seconds",
        "GPU-seconds of runs that ended requeued",
        lambda g: _seconds(g.gpu_hours_lost_to_requeue),
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
    _energy_families(analysis, family)
    fit = analysis.fit_fraction
    family(
        "slurmgpu_fit_fraction_jobs_ratio",
        "Share of GPU jobs that would fit in this slice of their GPU (0..1)",
        [({"slice": s}, fit.share(s).jobs) for s in FIT_SLICES],
    )
    family(
        "slurmgpu_fit_fraction_gpu_time_ratio",
        "Share of the GPU time of jobs that would fit in this slice of their GPU (0..1)",
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


def _energy_families(analysis: AnalysisDocument, family: Callable[..., None]) -> None:
    """GPU energy in joules (Prometheus' base unit; kWh = J / 3.6e6), its idle part, its
    coverage, per partition, and its cost and CO2 where the policy gives them."""
    e = analysis.energy
    if e is None:
        return
    joules = 3.6e6
    family(
        "slurmgpu_gpu_energy_joules",
        "Measured GPU energy in the window (kWh x 3.6e6)",
        [({}, e.kwh * joules)],
    )
    family(
        "slurmgpu_gpu_energy_idle_joules",
        "Measured GPU energy drawn while the GPUs were idle (docs/energy.md)",
        [({}, e.kwh_idle * joules)],
    )
    family(
        "slurmgpu_gpu_energy_coverage_ratio",
        "Share of allocated GPU time whose run has an energy measure (0..1)",
        [({}, e.coverage)],
    )
    family(
        "slurmgpu_partition_gpu_energy_joules",
        "Measured GPU energy in the window, per partition",
        [({"partition": p.partition}, p.kwh * joules) for p in e.by_partition],
    )
    family(
        "slurmgpu_partition_gpu_energy_idle_joules",
        "Measured GPU energy drawn while idle, per partition",
        [({"partition": p.partition}, p.kwh_idle * joules) for p in e.by_partition],
    )
    c = analysis.energy_cost
    if c is not None:
        family(
            "slurmgpu_gpu_energy_cost",
            "Cost of the GPU energy (x PUE x price per kWh of the policy)",
            [({"currency": c.currency}, c.cost)],
        )
        family(
            "slurmgpu_gpu_energy_co2_grams",
            "CO2 of the GPU energy (x PUE x grams per kWh of the policy)",
            [({}, None if c.co2_kg is None else c.co2_kg * 1000.0)],
        )


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
