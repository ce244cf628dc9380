"""What a pass reads as each run's measured GPU use (its forecast by slice and its replay)."""

from __future__ import annotations

from typing import Any


def measure_sources() -> tuple[Any, ...]:
    """Where a pass reads each run's measured GPU use: the collector's and jobstats'
    summaries in sacct's AdminComment (local text, no network), over sacct's own
    gres/gpumem. A 1-GPU job's measured memory decides whether it fits a MIG slice (the
    forecast by slice and the replay of a carve), also on a Slurm that records no gpumem."""
    from slurmgpu.measure.options import MeasureOptions, build_measure_sources

    return tuple(build_measure_sources(MeasureOptions()))
