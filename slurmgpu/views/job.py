"""`slurmgpu job` as text (sparklines for a terminal) or JSON."""

from __future__ import annotations

import json

from slurmgpu.idle.job import JobReport, JobUse

FORMATS = ("text", "json")


def render_job(report: JobReport, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"
    parts = [_job_text(j) for j in report.jobs]
    text = "\n".join(parts)
    text += "".join(f"warning: {w}\n" for w in report.warnings)
    return text


def _hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f} h"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 1024:.1f} GiB"


def _job_text(j: JobUse) -> str:
    lines = [
        f"Job {j.job_id} ({j.user}) {j.state}, partition {j.partition}, tier {j.tier}",
        f"  {j.gres}; {j.gpus:g} GPU-equivalents",
        f"  ran {_hours(j.elapsed_s)} of {_hours(j.time_limit_s)} asked "
        f"({j.start} .. {j.end or 'now'})",
    ]
    if j.util_mean_pct is not None:
        lines.append(
            f"  GPU utilization {j.util_mean_pct:g}% on average; memory peak "
            f"{_mib(j.mem_max_mib)} of {_mib(j.gpu_memory_mib)}"
        )
    if j.energy_kwh is not None:
        estimate = " (an estimate: a split of its GPUs' energy or integrated power)"
        lines.append(f"  GPU energy {j.energy_kwh:.3f} kWh{estimate if j.energy_estimated else ''}")
    for d in j.devices:
        name = d.key + (f" ({d.mig_profile})" if d.mig_profile else "")
        lines.append(
            f"  {name:<20} util |{d.util_spark}| mean {d.util_mean_pct}% max {d.util_max_pct}%"
        )
        if d.mem_spark:
            lines.append(f"  {'':<20} mem  |{d.mem_spark}| peak {_mib(d.mem_max_mib)}")
    if j.idle_stretches:
        lines.append(f"  idle stretches ({j.idle_gpu_hours:g} GPU-hours):")
        lines += [f"    {a} .. {b}" for a, b in j.idle_stretches]
    lines += [f"  advice: {a}" for a in j.advice]
    lines += [f"  note: {n}" for n in j.notes]
    return "\n".join(lines) + "\n"
