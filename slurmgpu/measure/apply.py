"""One measure per run from several sources, in order of preference, with basis counts.

What the accounting stage calls (`AnalysisOptions.measure_sources` -> `measure_runs`): each
source is asked only for the runs no earlier source measured, so a Prometheus server is not
queried for runs a collector or jobstats summary already covers. Slurm's own high-water
`gres/gpuutil` ranks below all of these and stays the accounting stage's fallback.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from slurmgpu.measure.warnings import MeasureWarning
from slurmgpu.model.measure import JobGpuMeasure, MeasureSource, RunRef

RunKey = tuple[str, str, datetime | None]  # cluster, job id, start


def run_key(run: RunRef) -> RunKey:
    """Runs are told apart by cluster, raw job id and start (requeued runs share the id)."""
    return (run.cluster, run.job_id, run.start)


@dataclass(frozen=True)
class MeasureResult:
    """The chosen measure per run, how many runs each source measured, what went wrong."""

    by_run: dict[RunKey, JobGpuMeasure]
    measured: dict[str, int]  # source name -> runs whose measure came from it
    warnings: tuple[MeasureWarning, ...] = field(default_factory=tuple)


def measure_runs(runs: Sequence[RunRef], sources: Sequence[MeasureSource]) -> MeasureResult:
    """Ask the sources in order; the first that measures a run wins it."""
    remaining = {run_key(r): r for r in runs}
    by_run: dict[RunKey, JobGpuMeasure] = {}
    measured: dict[str, int] = {}
    warnings: list[MeasureWarning] = []
    for source in sources:
        asked = list(remaining.values())
        count = 0
        if asked:
            by_id: dict[str, list[RunRef]] = {}
            for r in asked:
                by_id.setdefault(r.job_id, []).append(r)
            for m in source.measures(asked):
                m = _checked(m, source.name, warnings)
                run = _match(m, by_id.get(m.job_id, []))
                if run is not None and run_key(run) in remaining:
                    by_run[run_key(run)] = m
                    del remaining[run_key(run)]
                    count += 1
        measured[source.name] = count
        warnings.extend(getattr(source, "warnings", []))
    return MeasureResult(by_run, measured, tuple(warnings))


def _checked(measure: JobGpuMeasure, source: str, warnings: list[MeasureWarning]) -> JobGpuMeasure:
    """The measure with any number that cannot be true (negative, NaN, infinite) taken out and
    named in a warning: a source's bug never averages into a utilization. (Over 100 % is
    clipped to 100 by the accounting stage: a rounding excess, not nonsense.)"""
    bad = {
        name: None
        for name in ("util_mean_pct", "mem_used_max_mib", "gpu_memory_mib", "energy_j")
        if (value := getattr(measure, name)) is not None
        and not (isinstance(value, int | float) and math.isfinite(value) and value >= 0)
    }
    if not bad:
        return measure
    message = f"{', '.join(bad)} not a number >= 0: left out"
    warnings.append(MeasureWarning(source, "invalid", message, (measure.job_id,)))
    return replace(measure, **bad)


def _match(measure: JobGpuMeasure, candidates: list[RunRef]) -> RunRef | None:
    """The run a measure is for: same job id, and same cluster and start where it says
    (an aware start is compared in UTC: RunRef times are naive UTC)."""
    start = measure.start
    if start is not None and start.tzinfo is not None:
        start = start.astimezone(UTC).replace(tzinfo=None)
    for run in candidates:
        if measure.cluster is not None and run.cluster and measure.cluster != run.cluster:
            continue
        if start is not None and run.start is not None and start != run.start:
            continue
        return run
    return None
